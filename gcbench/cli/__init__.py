"""The ``gcbench`` command line: thin typer commands over the library.

Every command is a small wrapper over an importable function, and every command reads its
options by one grammar (:mod:`gcbench.cli.grammar`, and docs/grammar.md),
each shared option declared once (:mod:`gcbench.cli.options`).  User errors (bad suite, bad file,
an output that cannot be written, a meaningless number) print one clear line per problem to
stderr and exit 1; a command line that cannot be read (an unknown name, too few compressors)
exits 2 as click's own usage errors do; ``--debug`` (or ``GCBENCH_DEBUG=1``) adds their
traceback (:mod:`gcbench.cli.failures`).  Bugs keep their traceback.  Outputs are checked before
any work starts (:mod:`gcbench.cli.preflight`).  Long work shows a rich progress bar on stderr;
``--json`` prints machine-readable output (:mod:`gcbench.cli.output`).

The modules: ``application`` (the app and :func:`main`, the two names this package exports), one
``cmd_*`` module per command or group of commands, and the helpers above.
"""

from __future__ import annotations

from gcbench.cli.application import app, main

__all__ = ["app", "main"]
