"""The ``gcbench`` typer app: the group, its global options, its commands in ``--help`` order, and :func:`main`.

Each command lives in its own module (``cmd_*.py``) and is registered here; importing this module
imports no heavy library (torch, numba, matplotlib, scipy): commands import those when they run.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
import typer.core
from rich.markup import escape

import gcbench
from gcbench.cli import (
    cmd_advise,
    cmd_bench,
    cmd_collectives,
    cmd_compare,
    cmd_converge,
    cmd_listing,
    cmd_record,
    cmd_report,
    cmd_run,
    cmd_train,
    output,
)
from gcbench.cli.failures import set_debug
from gcbench.core import signals

#: gcbench.kernels.KERNEL_MODES, spelled here so the check does not import numba (a test ties the two)
KERNEL_MODES = ("auto", "torch")


def _typed_metavars(params: list[Any]) -> list[Any]:
    """Show each option's metavar (``INT``, ``SPEC``, ``LIST``) as its type in ``--help``, and nothing for a flag.

    typer prints the Python type (``<bool>``, ``<list[str]>``) beside every parameter; a flag takes
    no value, and an argument's metavar is already its name in the help's first column.
    """
    for param in params:
        if isinstance(param, typer.core.TyperArgument) or getattr(param, "is_flag", False):
            param.display_type_rich = lambda ctx: None
    return params


class _Command(typer.core.TyperCommand):
    """A gcbench command: its ``--help`` shows typed metavars (:func:`_typed_metavars`)."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _typed_metavars(super().get_params(ctx))


@contextmanager
def _parser_errors_in_one_line() -> Iterator[None]:
    """The parser's own usage errors (an unknown option, ``--steps x``) as one ``error:`` line, exit 2.

    typer prints them as the usage line, a hint and a boxed panel; gcbench's own errors are one
    line, and so are these: the message, then where the help is.  Asking for the help with no
    arguments (``NoArgsIsHelpError``) is not an error and passes through.
    """
    try:
        yield
    except typer.core._click.exceptions.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            raise
        where = f" (see {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
        text = " ".join(exc.format_message().split())  # one line, however the parser wrapped it
        output.err.print(f"[bold red]error:[/] {escape(text)}{escape(where)}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


class _Group(typer.core.TyperGroup):
    """The ``gcbench`` group: typed metavars in its ``--help``, and the parser's usage errors in one line."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _typed_metavars(super().get_params(ctx))

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        with _parser_errors_in_one_line():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: Any) -> Any:
        with _parser_errors_in_one_line():
            return super().invoke(ctx)


app = typer.Typer(
    cls=_Group,
    name="gcbench",
    help=("Benchmark gradient compressors: real wire bytes, bias/variance and kernel throughput on the same gradients.\n\n"
          "A compressor is a SPEC, name or name:key=value,... (commas separate its parameters); names ignore case.\n\n"
          "Examples: `gcbench run quick`, `gcbench compare dgc sdagc --model resnet50`, `gcbench list dgc`, "
          "`gcbench report --html`."),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        output.out.print(f"gcbench {gcbench.__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
    debug: Annotated[bool, typer.Option("--debug", envvar="GCBENCH_DEBUG",
                                        help="After a user error's one line, print its full traceback (also GCBENCH_DEBUG=1).")] = False,
) -> None:
    """gcbench: which gradient compressor should I use, and what does it really cost and save?"""
    set_debug(debug)
    mode = os.environ.get("GCBENCH_KERNELS", "auto").strip().lower() or "auto"
    if mode not in KERNEL_MODES:
        output.err.print(f"[bold red]error:[/] GCBENCH_KERNELS={escape(mode)}: expected one of {', '.join(KERNEL_MODES)} "
                         "(torch runs every compressor on its torch path, the one a GPU takes)", highlight=False, soft_wrap=True)
        raise typer.Exit(2)


# the commands, in the order `gcbench --help` lists them
for _name, _fn in (("run", cmd_run.run), ("list", cmd_listing.list_cmd), ("check", cmd_listing.check),
                   ("validate", cmd_listing.validate), ("compare", cmd_compare.compare), ("record", cmd_record.record),
                   ("bench", cmd_bench.bench), ("report", cmd_report.report), ("train", cmd_train.train_cmd),
                   ("converge", cmd_converge.converge_cmd),
                   ("simulate", cmd_advise.simulate_cmd), ("advise", cmd_advise.advise_cmd),
                   ("collectives", cmd_collectives.collectives)):
    app.command(_name, cls=_Command)(_fn)


def main() -> None:
    """Run the command line; SIGINT and SIGTERM stop it cleanly (one line, exit 130 / 143, results kept).

    :func:`gcbench.core.signals.install` makes SIGTERM raise KeyboardInterrupt like Ctrl-C, so a run
    records status ``interrupted`` with its completed cases, and swallows repeats that would
    interrupt that final write.  KeyboardInterrupt is caught around the whole app, including
    the imports commands do lazily, so no signal ends in a traceback.
    """
    signals.install()
    closed = output.console_streams()
    if closed is not None:
        sys.exit(closed)
    try:
        try:
            app()  # standalone mode: always ends in SystemExit
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)
        except KeyboardInterrupt:
            output.err.print("[yellow]interrupted[/]", highlight=False)
            code = 130
    except KeyboardInterrupt:  # a stop signal while reporting the first one
        code = 130
    sys.exit(signals.exit_code(code))
