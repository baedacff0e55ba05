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

The modules: ``application`` (the app and :func:`main`), one ``cmd_*`` module per command or
group of commands, and the helpers above.  The names below were the 0.2 module's and stay importable
from ``gcbench.cli``.
"""

from __future__ import annotations

from gcbench.cli.application import KERNEL_MODES, app, main
from gcbench.cli.cmd_advise import advise_cmd, simulate_cmd
from gcbench.cli.cmd_bench import bench, check_bench_options
from gcbench.cli.cmd_compare import compare
from gcbench.cli.cmd_listing import check, list_cmd, validate
from gcbench.cli.cmd_record import record
from gcbench.cli.cmd_report import report
from gcbench.cli.cmd_run import run
from gcbench.cli.cmd_train import train_cmd
from gcbench.cli.failures import OutputError, UsageError, user_errors
from gcbench.cli.grammar import (
    choose,
    compressor_spec,
    compressor_specs,
    model_arg,
    number_list,
    old_comma_list,
    size_list_arg,
    suite_arg,
    suite_choices,
)
from gcbench.cli.output import PROGRESS_REFRESH_HZ, deprecated, err, out, progress_bar, warn
from gcbench.cli.preflight import check_not_an_input, check_output_dir, check_output_file, memory_check

__all__ = [
    "KERNEL_MODES", "PROGRESS_REFRESH_HZ", "OutputError", "UsageError", "advise_cmd", "app", "bench", "check",
    "check_bench_options", "check_not_an_input", "check_output_dir", "check_output_file", "choose", "compare",
    "compressor_spec", "compressor_specs", "deprecated", "err", "list_cmd", "main", "memory_check", "model_arg",
    "number_list", "old_comma_list", "out", "progress_bar", "record", "report", "run", "simulate_cmd", "size_list_arg",
    "suite_arg", "suite_choices", "train_cmd", "user_errors", "validate", "warn",
]
