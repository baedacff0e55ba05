"""``python -m gcbench`` runs the command line.

The stop-signal handlers are installed before the command line (and torch) is imported, so a
Ctrl-C or SIGTERM during start-up ends with one line and exit status 130/143, not a traceback.
"""

from __future__ import annotations

import sys

from gcbench.core import signals


def main() -> None:
    """Console-script entry point: signal handling first, then the (heavy) command line."""
    signals.install()
    try:
        from gcbench.cli import main as cli_main
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(signals.exit_code(130))
    cli_main()


if __name__ == "__main__":
    main()
