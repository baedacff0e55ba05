"""The ``gcbench`` command line: thin typer commands over the library.

Every command is a small wrapper over an importable function, and every command reads its
options by one grammar (see "the grammar shared by every command" below, and README's "One
command-line grammar").  User errors (bad suite, bad file, an output that cannot be written, a
meaningless number) print one clear line per problem to stderr and exit 1; a command line that
cannot be read (an unknown name, too few compressors) exits 2 as click's own usage errors do;
``--debug`` (or ``GCBENCH_DEBUG=1``) adds their traceback.  Bugs keep their traceback.  Outputs
are checked before any work starts.  Long work shows a rich progress bar on stderr; ``--json``
prints machine-readable output.  Everything a user or a library wrote (labels, paths, error
messages) is escaped before rich renders it: a ``[/]`` in a label is text, not markup.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
import typer.core
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import gcbench
from gcbench.core import signals
from gcbench.core.errors import GcbenchError, did_you_mean
from gcbench.report.progress import RunEta
from gcbench.results.atomic import atomic_write


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
        err.print(f"[bold red]error:[/] {escape(text)}{escape(where)}", highlight=False, soft_wrap=True)
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
# piped output (logs, CI) gets wide tables instead of folded cells
# emoji=False: rich would turn ':b:' in a user's text (a model 'a:b:c') into an emoji; escape() does not stop that
# (sys.stdout is None when the shell closed it, `gcbench list >&-`: main() says so in one line)
out = Console(emoji=False) if sys.stdout is not None and sys.stdout.isatty() else Console(width=200, emoji=False)
err = Console(stderr=True, emoji=False)


def _console_streams() -> int | None:
    """Make stdout and stderr write whatever text gcbench renders; an exit status when stdout is closed.

    Tables hold ``≥``, ``×`` and users' labels: on a stream whose encoding cannot write them
    (``PYTHONIOENCODING=ascii``, a C locale) a character it cannot encode is written as ``?``
    (one character for one, so rich's columns stay aligned) instead of ending in a traceback.
    A closed stdout (``>&-``) cannot take any result: one ``error:`` line, exit 1.
    """
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="replace")
            except (OSError, ValueError):  # a stream closed or detached under us: nothing to set
                pass
    if sys.stdout is None:
        err.print("[bold red]error:[/] standard output is closed: gcbench writes its results there "
                  "(redirect it to a file or /dev/null instead)", highlight=False, soft_wrap=True)
        return 1
    return None

F = TypeVar("F", bound=Callable[..., Any])

# redraws of the progress display per second (see progress_bar)
PROGRESS_REFRESH_HZ = 1


# set by the app callback (``--debug`` or GCBENCH_DEBUG=1): user errors also print their traceback
_debug = False


def _debug_enabled() -> bool:
    return _debug or os.environ.get("GCBENCH_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")


def _print_traceback(exc: BaseException) -> None:
    """The full traceback of ``exc`` with its chained causes (``--debug``), on stderr without markup."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    err.print(text.rstrip(), markup=False, highlight=False, soft_wrap=True)


class OutputError(GcbenchError):
    """An output path that cannot be written (a file where a folder is needed, read-only, /proc, disk full)."""


_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}
_WRITE_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EISDIR, errno.EFBIG, errno.EEXIST, errno.ENOTDIR}


def _write_error(exc: OSError) -> OutputError:
    """``cannot write <path>: <reason>`` for an OSError raised while writing an output."""
    path = exc.filename if exc.filename2 is None else exc.filename2
    reason = exc.strerror or type(exc).__name__
    if path is None:
        return OutputError(f"cannot write an output file: {reason}")
    # the inputs a user names are read by loaders that raise GcbenchError; an OSError that reaches
    # the CLI comes from writing, but say "access" where the errno could as well be a read
    verb = "write" if exc.errno in _WRITE_ERRNOS else "access"
    return OutputError(f"cannot {verb} {path}: {reason}")


def check_output_dir(path: Path, option: str) -> None:
    """Fail before any work when the output folder ``path`` cannot hold a new file.

    Writes and removes one probe file in ``path`` (or, when it does not exist yet, in its nearest
    existing ancestor, so no folder is left behind by a later error), so a file in the way, a
    read-only folder, ``/proc`` or a full disk is one clear line up front rather than a traceback
    after a long run.  Probing is the only test that also holds for root, for whom permission bits
    are not enforced.
    """
    if path.exists() and not path.is_dir():
        raise OutputError(f"cannot write {path}: {option} must be a folder, and this is a file")
    _probe(path, path, option)


def check_output_file(path: Path, option: str) -> None:
    """Fail before any work when the output file ``path`` cannot be written (see :func:`check_output_dir`)."""
    if path.is_dir():
        raise OutputError(f"cannot write {path}: {option} names a folder; give a file name")
    _probe(path, path.parent, option)


def check_not_an_input(outputs: Sequence[Path], inputs: Sequence[Path], option: str) -> None:
    """Refuse an output file that is one of the command's input files (the same path, or the same file by a link).

    ``gcbench report RUN.json --md -o RUN.json`` would otherwise replace the results file with
    the Markdown rendered from it.
    """
    for out_path in outputs:
        for in_path in inputs:
            try:
                same = out_path.resolve() == in_path.resolve() or (out_path.exists() and os.path.samefile(out_path, in_path))
            except OSError:
                same = False
            if same:
                raise GcbenchError(f"{option} {out_path} is an input of this command ({in_path}): writing it would replace "
                                   "that input; choose another output")


def _probe(named: Path, folder: Path, option: str) -> None:
    """Write and remove a file in ``folder`` or its nearest existing ancestor; errors name ``named``."""
    probe_dir = folder
    while not probe_dir.exists() and probe_dir != probe_dir.parent:
        probe_dir = probe_dir.parent
    if not probe_dir.is_dir():
        raise OutputError(f"cannot write {named}: {probe_dir} is a file, not a folder ({option})")
    try:
        fd, probe = tempfile.mkstemp(prefix=".gcbench-probe-", dir=probe_dir)
        try:
            os.write(fd, b"x")
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"cannot write {named}: {exc.strerror or type(exc).__name__} ({option})") from exc


class UsageError(GcbenchError):
    """A command line gcbench cannot read: an unknown name from a fixed set, too few compressors.

    Exit status 2, as click gives an unknown option or ``--steps x``; a value gcbench reads and
    refuses (``--steps 0``, a list item that is not a number) stays a :class:`GcbenchError`, exit 1.
    """


def _fail(shown: BaseException, exc: BaseException, code: int = 1) -> None:
    """Print ``shown`` as ``error:`` lines (the traceback of ``exc`` too with ``--debug``) and exit ``code``."""
    for line in str(shown).splitlines() or ["error"]:
        err.print(f"[bold red]error:[/] {escape(line)}", highlight=False, soft_wrap=True)
    if _debug_enabled():
        _print_traceback(exc)
    raise typer.Exit(code) from None


def user_errors(fn: F) -> F:
    """Turn user errors into one line per problem on stderr and exit status 1 (2 for a :class:`UsageError`).

    User errors are :class:`GcbenchError` and ``OSError`` with a file name (an output that cannot
    be written: a file in the way, a read-only folder, a full disk).  With ``--debug`` (or
    ``GCBENCH_DEBUG=1``) the full traceback, chained causes included, follows the line.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UsageError as exc:
            _fail(exc, exc, 2)
        except GcbenchError as exc:
            _fail(exc, exc)
        except OSError as exc:
            # a file.write() on a full disk carries no file name, but it is the machine, not a bug
            if exc.filename is None and exc.errno not in _FULL_ERRNOS:
                raise  # no file the user named: a bug, it keeps its traceback
            _fail(_write_error(exc), exc)
        except KeyboardInterrupt as exc:
            # SIGTERM handlers raise KeyboardInterrupt("SIGTERM"): exit 128 + 15 as a shell expects
            term = bool(exc.args) and exc.args[0] == "SIGTERM"
            err.print(f"[yellow]interrupted{' (SIGTERM)' if term else ''}[/]: completed cases are kept in the results file")
            raise typer.Exit(143 if term else 130) from None

    return wrapper  # type: ignore[return-value]


def _version(value: bool) -> None:
    if value:
        out.print(f"gcbench {gcbench.__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
    debug: Annotated[bool, typer.Option("--debug", envvar="GCBENCH_DEBUG",
                                        help="After a user error's one line, print its full traceback (also GCBENCH_DEBUG=1).")] = False,
) -> None:
    """gcbench: which gradient compressor should I use, and what does it really cost and save?"""
    global _debug
    _debug = debug
    mode = os.environ.get("GCBENCH_KERNELS", "auto").strip().lower() or "auto"
    if mode not in KERNEL_MODES:
        err.print(f"[bold red]error:[/] GCBENCH_KERNELS={escape(mode)}: expected one of {', '.join(KERNEL_MODES)} "
                  "(torch runs every compressor on its torch path, the one a GPU takes)", highlight=False, soft_wrap=True)
        raise typer.Exit(2)


#: gcbench.kernels.KERNEL_MODES, spelled here so the check does not import numba (a test ties the two)
KERNEL_MODES = ("auto", "torch")


@contextmanager
def progress_bar(enabled: bool = True) -> Iterator[Callable[[str, int, int, str], None]]:
    """A rich progress display fed by the runner's ``progress(stage, done, total, message)``.

    The ``case`` row shows cases done / total, elapsed time and the run's ETA (:class:`RunEta`).
    The display redraws once a second (the elapsed and ETA cells show whole seconds) from rich's
    thread: a redraw costs about 4-5 ms of CPU here, so rich's default of 10 a second took 2-2.5%
    of a quick run's time (and about 6% of a suite's profile samples), once a second about 0.5%.
    """
    if not enabled:
        yield lambda *a: None
        return
    prog = Progress(
        TextColumn("[bold blue]{task.fields[stage]:>9}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        TextColumn("{task.fields[eta]}"),
        console=err,
        transient=True,
        refresh_per_second=PROGRESS_REFRESH_HZ,
    )
    tasks: dict[str, Any] = {}
    eta = RunEta()

    def update(stage: str, done: int, total: int, message: str) -> None:
        # messages carry labels and library errors: escaped, or a "[/]" in them kills the refresh thread
        text = escape(message)
        eta.update(stage, done, total)
        if stage not in tasks:
            tasks[stage] = prog.add_task(text, total=total, stage=escape(stage), eta="")
        prog.update(tasks[stage], completed=done, total=total, description=text)
        if "case" in tasks and stage in ("case", "step"):
            prog.update(tasks["case"], eta=eta.text())

    with prog:
        yield update


def _emit(parts: list[Any]) -> None:
    """Print a renderer's output in order: tables as they are, strings as plain text (never markup)."""
    for part in parts:
        if isinstance(part, str):
            out.print(part, markup=False, highlight=False)
        else:
            out.print(part)


# ----------------------------------------------------------------------------- the grammar shared by every command
#
# A compressor is one SPEC, ``name`` or ``name:key=value,...``: commas separate a spec's
# parameters, never compressors.  Commands that take compressors take them as positional specs
# and as a repeatable ``-c SPEC``.  An option a command sweeps takes a comma LIST; elsewhere it
# takes one value.  Names from a fixed set are matched case-insensitively, and an unknown one is a
# usage error (exit 2) with a suggestion.


def warn(text: str) -> None:
    """One ``warning:`` line on stderr (a deprecated spelling, a skipped input): the command goes on."""
    err.print(f"[yellow]warning:[/] {escape(text)}", highlight=False, soft_wrap=True)


def memory_check(suite: Any, where: str, force: bool) -> None:
    """Refuse a suite whose estimated memory exceeds this machine's (``--force``: warn), before any file is written."""
    from gcbench.measure.footprint import check_memory

    for line in check_memory(suite, where, force):
        warn(line)


def deprecated(old: str, new: str) -> None:
    """The one line a deprecated spelling prints: what to write instead (it still works, for now)."""
    warn(f"{old} is deprecated and will be removed; write {new}")


def choose(value: str, choices: Sequence[str], what: str) -> str:
    """The member of ``choices`` that ``value`` names, ignoring case; an unknown name is a :class:`UsageError`.

    ``"DGC"`` is ``"dgc"``; ``"layers"`` gets "unknown granularity 'layers'; did you mean 'layer'?".
    An exact match wins over a match that ignores case (two plugins may differ only in case).
    """
    if value in choices:
        return value
    folded = [c for c in choices if c.lower() == value.strip().lower()]
    if len(folded) == 1:
        return folded[0]
    raise UsageError(did_you_mean(value, list(choices), what))


def compressor_spec(text: str) -> str:
    """One SPEC with its compressor name spelled as registered (``DGC:density=0.01`` → ``dgc:density=0.01``).

    The parameters are checked too (:func:`registry.parse_spec`), so a bad spec fails before any work.
    """
    from gcbench.compressors import registry

    name, sep, rest = text.partition(":")
    listed = old_comma_list(text)
    known = {n.lower() for n in registry.names()}
    if listed is not None and all(item.partition(":")[0].strip().lower() in known for item in listed):
        raise UsageError(f"{text!r} names {len(listed)} compressors: commas separate one spec's parameters; "
                         f"give each compressor its own SPEC ({' '.join(f'-c {c}' for c in listed)})")
    spec = choose(name.strip(), registry.names(), "compressor") + sep + rest
    registry.parse_spec(spec)
    return spec


def compressor_specs(positional: Sequence[str] | None, options: Sequence[str] | None, *, least: int = 0,
                     command: str = "") -> list[str]:
    """The compressors of a command: its positional SPECs, then its ``-c SPEC`` ones, names as registered.

    Fewer than ``least`` is a :class:`UsageError` that says what to give (``compare dgc`` compares nothing).
    """
    specs = [compressor_spec(t) for t in [*(positional or []), *(options or [])]]
    if len(specs) < least:
        raise UsageError(f"{command} needs {'a compressor' if least == 1 else f'{least} or more compressors'}, "
                         f"got {len(specs)} (positional SPEC or -c SPEC)")
    return specs


def old_comma_list(text: str) -> list[str] | None:
    """The compressors of a pre-0.2 comma list (``"none,topk:density=0.1,qsgd"``), or None when ``text`` is one SPEC.

    An item after the first that is not ``key=value`` names another compressor; ``key=value``
    items continue the spec before them, as the old form read them.
    """
    items = [s.strip() for s in text.split(",") if s.strip()]
    if len(items) < 2 or all("=" in item and ":" not in item.partition("=")[0] for item in items[1:]):
        return None
    specs: list[str] = []
    for item in items:
        if "=" in item and ":" not in item.partition("=")[0] and specs:
            specs[-1] += ("," if ":" in specs[-1] else ":") + item
        else:
            specs.append(item)
    return specs


def suite_arg(text: str | None) -> str | None:
    """A bundled suite's name matched ignoring case (``QUICK`` → ``quick``); a path is left as it is.

    A bare name (no folder, no ``.toml``) that is neither a file nor a bundled suite is a
    :class:`UsageError` with a suggestion; a path that does not exist is left to the loader (exit 1).
    """
    from gcbench.measure.suite import SUITE_DIR

    if text is None or Path(text).exists() or "/" in text or text.endswith(".toml"):
        return text
    names = sorted(p.stem for p in SUITE_DIR.glob("*.toml"))
    return choose(text, names, "suite") if names else text


def model_arg(text: str | None) -> str | None:
    """A zoo model's name matched ignoring case (``ResNet18`` → ``resnet18``); anything else is left to the loader.

    Models are not a fixed set (``hf:NAME``, ``package.module:factory``), so an unknown name is the
    source's error, with its own suggestion.
    """
    from gcbench.sources.catalog import model_names

    if text is None:
        return None
    folded = [m for m in model_names() if m.lower() == text.lower()]
    return folded[0] if len(folded) == 1 and text not in model_names() else text


def suite_choices(field: str) -> tuple[str, ...]:
    """The names a suite file allows for ``field`` (device, granularity, distribution): the one list of them."""
    from typing import get_args

    from gcbench.measure.suite import MetricsSpec, SourceSpec, Suite

    model = next(m for m in (MetricsSpec, SourceSpec, Suite) if field in m.model_fields)
    return get_args(model.model_fields[field].annotation)


def number_list(text: str, option: str, kind: type[int] | type[float]) -> list[Any]:
    """A swept option's comma LIST (``"8,16,32"``) → numbers.

    An item that is not a number, or not positive and finite, is one line naming the option and
    the item (exit 1, as a single value out of range is).
    """
    noun, example = ("an integer", "8,64") if kind is int else ("a number", "1,10")
    values: list[Any] = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        try:
            values.append(kind(item))
        except ValueError:
            raise GcbenchError(f"{option}: {item!r} is not {noun} (expected a comma list like {example}, got {text!r})") from None
        if not 0 < values[-1] < float("inf"):  # NaN fails this too
            raise GcbenchError(f"{option}: {item!r} is not a positive finite number (got {text!r})")
    if not values:
        raise GcbenchError(f"{option}: expected a comma list like {example}, got {text!r}")
    return values


# ----------------------------------------------------------------------------- run


@app.command(cls=_Command)
@user_errors
def run(
    suite: Annotated[str | None, typer.Argument(help="Suite file or bundled suite name (default: suites/quick.toml).",
                                                metavar="SUITE")] = None,
    out_dir: Annotated[Path, typer.Option("--out", "-o", metavar="PATH", help="Folder for the results file.")] = Path("reports/runs"),
    seed: Annotated[int | None, typer.Option(metavar="INT", help="Override the suite's seed.")] = None,
    device: Annotated[str | None, typer.Option(metavar="NAME", help="cpu, cuda or auto.")] = None,
    repeats: Annotated[int | None, typer.Option(metavar="INT", help=(
        "Fidelity draws: compressions per tensor for stochastic compressors (the suite's metrics.repeats).")
    )] = None,
    trace: Annotated[str | None, typer.Option(metavar="PATH", help="Replace the suite's sources with a recorded trace folder.")] = None,
    model: Annotated[str | None, typer.Option(metavar="MODEL", help=(
        "Replace the suite's sources with live gradients of a zoo model, a Hugging Face model 'hf:NAME[:key=value,...]' "
        "(gpt2, bert, llama, vit; e.g. hf:gpt2:layers=2), or your own package.module:factory (named here, it is your "
        "choice: no --trust-code needed)."))] = None,
    trust_code: Annotated[bool, typer.Option("--trust-code", envvar="GCBENCH_TRUST_CODE", help=(
        "Allow the suite file to import and run the package.module:factory models it names (only if you trust the "
        "file). Zoo models need no opt-in."))] = False,
    workers: Annotated[int | None, typer.Option(metavar="INT", help="Override the number of workers.")] = None,
    steps: Annotated[int | None, typer.Option(metavar="INT", help="Override the number of steps.")] = None,
    granularity: Annotated[str | None, typer.Option(metavar="NAME", help="layer, bucket or model.")] = None,
    bucket_mb: Annotated[float | None, typer.Option(metavar="FLOAT", help="Bucket size in MiB for granularity=bucket.")] = None,
    compressor: Annotated[list[str] | None, typer.Option(
        "--compressor", "-c", metavar="SPEC",
        help="Run this compressor instead of the suite's (repeatable): name or name:key=value,...")] = None,
    no_timing: Annotated[bool, typer.Option("--no-timing", help="Skip compress/decompress timing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results file's path and cases as JSON.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    force: Annotated[bool, typer.Option("--force", help=(
        "Run even when the suite's estimated memory exceeds this machine's (a warning instead of the error)."))] = False,
) -> None:
    """Run a benchmark suite and write one results file to reports/runs/.

    Examples: `gcbench run`, `gcbench run suites/cnn.toml`, `gcbench run quick -c dgc -c topk:density=0.01 --steps 20`,
    `gcbench run quick --model resnet18 --device auto --json`.
    """
    from gcbench.compressors import registry
    from gcbench.measure.runner import run_suite
    from gcbench.measure.suite import apply_overrides, find_suite, load_suite, require_trusted_code
    from gcbench.report import terminal as rep
    from gcbench.results.record import as_cases

    suite, model = suite_arg(suite), model_arg(model)
    device = None if device is None else choose(device, suite_choices("device"), "device")
    granularity = None if granularity is None else choose(granularity, suite_choices("granularity"), "granularity")
    specs = [registry.parse_spec(c) for c in compressor_specs(None, compressor)] or None
    check_output_dir(out_dir, "--out")
    path = find_suite(suite)
    s = load_suite(path)
    if model is None and trace is None:  # the file's own sources run: code they name needs the opt-in, before any file is written
        require_trusted_code(s, str(path), trust_code)
    s = apply_overrides(s, seed=seed, device=device, repeats=repeats, trace=trace, model=model, workers=workers, steps=steps,
                        granularity=granularity, bucket_mb=bucket_mb, compressors=specs,
                        timing=False if no_timing else None)
    memory_check(s, str(path), force)
    with progress_bar(not quiet and not as_json) as prog:
        outcome = run_suite(s, out_dir, prog, suite_path=str(path))
    cases = as_cases(outcome.records)
    if as_json:
        print(json.dumps({"results": str(outcome.path), "cases": outcome.records}, default=str))
    else:
        for item in rep.run_output(cases, f"gcbench run {s.name}"):
            out.print(item)
        out.print(f"results: {outcome.path}", markup=False, highlight=False)
    failed = [c for c in cases if not c.ok]
    if failed:
        err.print(f"[red]{len(failed)} case(s) failed[/]: " + escape("; ".join(f"{c.label}: {c.error}" for c in failed[:5])),
                  highlight=False, soft_wrap=True)
        raise typer.Exit(1)


# ----------------------------------------------------------------------------- list / validate


@app.command("list", cls=_Command)
@user_errors
def list_cmd(
    what: Annotated[str, typer.Argument(help="compressors, models, suites, metrics, or a compressor's name (its card).",
                                        metavar="KIND|NAME")] = "compressors",
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    params: Annotated[bool, typer.Option("--params", "-p", help="Also show each compressor's parameters.")] = False,
    bits: Annotated[bool, typer.Option("--bits", help="With a compressor's card: count its bits per element from one real "
                                       "encoding at its defaults (imports torch: a few seconds).")] = False,
) -> None:
    """List the registered compressors (default), zoo models, bundled suites or metrics; or show one compressor's card.

    Examples: `gcbench list`, `gcbench list -p`, `gcbench list dgc`, `gcbench list dgc --bits`, `gcbench list models --json`.
    """
    from gcbench.compressors import registry
    from gcbench.report import listing

    kinds = ("compressors", "models", "suites", "metrics")
    what = choose(what, [*kinds, *registry.names()], "list kind or compressor")
    if what == "compressors":
        cards = registry.infos()
        origins = {c.name: registry.origin(c.name) for c in cards}
        if as_json:
            print(json.dumps([{**c.to_dict(), "origin": origins[c.name]} for c in cards], indent=1))
        else:
            out.print(listing.compressors_table(cards, origins, params))
        for line in registry.load_errors():
            warn(line)
        return
    if bits and what in kinds:
        raise GcbenchError("--bits goes with a compressor's name: gcbench list NAME --bits")
    if what not in kinds:
        card = registry.get(what)
        wire = listing.wire_sample(card) if bits else None  # the one place `list` imports torch: asked for
        if as_json:
            print(json.dumps(listing.card_dict(card, registry.origin(what), wire), indent=1))
        else:
            out.print(listing.card_table(card, registry.origin(what), wire))
        return
    if what == "models":
        from gcbench.sources.zoo import catalogue

        rows, render = catalogue(), listing.models_table
    elif what == "suites":
        from gcbench.measure.suite import bundled_suites

        rows, render = bundled_suites(), listing.suites_table
    else:
        from gcbench.results.metrics import metrics_metadata

        rows, render = metrics_metadata(), listing.metrics_table
    if as_json:
        print(json.dumps(rows, indent=1))
    else:
        out.print(render(rows))


@app.command(cls=_Command)
@user_errors
def check(
    specs: Annotated[list[str] | None, typer.Argument(help="Compressors to check: name or name:key=value,...", metavar="SPEC")] = None,
    compressor: Annotated[list[str] | None, typer.Option("--compressor", "-c", metavar="SPEC",
                                                         help="A compressor to check (repeatable), as a positional SPEC.")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Machine-readable output: [{spec, ok, checks: [{check, what, ok, detail}]}].")] = False,
) -> None:
    """Check compressors against the contract (purity, round trip, exact sizes, determinism, empty and zero tensors, dtypes, exchange).

    Runs the checks the test suite runs on every built-in compressor, on any registered one (a
    plugin from another package included); exit status 1 when any check fails.

    Examples: `gcbench check mycomp`, `gcbench check topk:density=0.1 qsgd:s=4 --json`, `gcbench check -c dgc -c sdagc`.
    """
    from gcbench.compressors import registry
    from gcbench.compressors.check import run_checks
    from gcbench.report import listing

    specs = compressor_specs(specs, compressor, least=1, command="check")
    for line in registry.load_errors():
        warn(line)
    results = {spec: run_checks(*registry.parse_spec(spec)) for spec in specs}
    if as_json:
        print(json.dumps([{"spec": spec, "ok": all(r.ok for r in rows), "checks": [r.to_dict() for r in rows]}
                          for spec, rows in results.items()], indent=1))
    else:
        for spec, rows in results.items():
            out.print(listing.check_table(spec, rows))
    if any(not r.ok for rows in results.values() for r in rows):
        raise typer.Exit(1)


@app.command(cls=_Command)
@user_errors
def validate(suite: Annotated[str, typer.Argument(help="Suite file (or bundled suite name) to check.", metavar="SUITE")]) -> None:
    """Check a suite file without running it: names, values, trace folders; imports no code and computes no gradient.

    Examples: `gcbench validate suites/cnn.toml`, `gcbench validate quick`.
    """
    from gcbench.measure.suite import check_sources, find_suite, imported_code, load_suite

    path = find_suite(suite_arg(suite))
    s = load_suite(path)
    problems = check_sources(s, str(path))
    if problems:
        raise GcbenchError("\n".join(problems))
    memory_check(s, str(path), force=False)
    # paths and code names are the user's text: no markup, and no emoji (":b:" in "a:b:c" would become one)
    out.print(f"ok: {path} — {len(s.sources)} source(s), {len(s.compressors)} compressor configuration(s), hash {s.hash()}",
              markup=False, highlight=False, emoji=False)
    code = imported_code(s)
    if code:
        out.print("would import: " + ", ".join(r.target for r in code) + " (needs --trust-code)", markup=False, highlight=False,
                  emoji=False)



# ----------------------------------------------------------------------------- compare

@app.command(cls=_Command)
@user_errors
def compare(
    compressors: Annotated[list[str] | None, typer.Argument(
        help="Two or more compressors (one is an error: use `gcbench run -c`), e.g. dgc sdagc 'topk:density=0.001'.",
        metavar="SPEC")] = None,
    compressor: Annotated[list[str] | None, typer.Option("--compressor", "-c", metavar="SPEC",
                                                         help="One more compressor to compare (repeatable), as a positional SPEC.")] = None,
    model: Annotated[str | None, typer.Option(metavar="MODEL", help=(
        "Live gradients of this zoo model, an 'hf:NAME[:key=value,...]' Hugging Face model, or package.module:factory."))] = None,
    trace: Annotated[str | None, typer.Option(metavar="PATH", help="Replay a recorded trace folder.")] = None,
    shape: Annotated[str | None, typer.Option(
        metavar="SHAPE", help="Synthetic tensor shape, e.g. 1000x1000 (default when no model/trace).")] = None,
    distribution: Annotated[str, typer.Option(
        metavar="NAME", help="Synthetic distribution: normal, laplace, student-t, sparse or lowrank.")] = "normal",
    workers: Annotated[int | None, typer.Option(metavar="INT", help="Workers (default 4 live, 2 synthetic, all of a trace).")] = None,
    steps: Annotated[int | None, typer.Option(
        metavar="INT", help="Steps (default 10, all of a trace); ranking error feedback needs 10+.")] = None,
    repeats: Annotated[int, typer.Option(metavar="INT", help="Fidelity draws: compressions per tensor for stochastic compressors.")] = 8,
    rounds: Annotated[int, typer.Option(metavar="INT", help="Timed rounds per case, at least (more while the 3 s budget lasts).")] = 7,
    timing_repeats: Annotated[int | None, typer.Option("--timing-repeats", metavar="INT", hidden=True,
                                                       help="Deprecated spelling of --rounds.")] = None,
    granularity: Annotated[str, typer.Option(metavar="NAME", help="layer, bucket or model.")] = "layer",
    seed: Annotated[int, typer.Option(metavar="INT", help="Seed.")] = 0,
    device: Annotated[str, typer.Option(metavar="NAME", help="cpu, cuda or auto.")] = "cpu",
    momentum: Annotated[float | None, typer.Option(metavar="FLOAT", help=(
        "Momentum of the reference optimizer (SGD) whose dense update every case is measured against; default: that of a "
        "compared compressor that applies momentum itself (DGC, SDAGC: 0.9), else 0 (plain SGD)."))] = None,
    out_dir: Annotated[Path, typer.Option("--out", "-o", metavar="PATH", help="Folder for the results file.")] = Path("reports/runs"),
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    force: Annotated[bool, typer.Option("--force", help=(
        "Run even when the estimated memory exceeds this machine's (a warning instead of the error)."))] = False,
    sweep: Annotated[bool, typer.Option("--sweep", help=(
        "Also run each compared compressor whose card has a density parameter at densities 0.1, 0.03, 0.01, 0.003 and 0.001 "
        "(labels like topk@0.01), so the verdict can say how many bytes each needs at equal delivered update."))] = False,
) -> None:
    """Run two or more compressors head to head on the same gradients: a verdict for each pair, then the numbers.

    The verdict says, for each pair at its configured settings, which sends fewer bytes (exact), which delivers more of
    the suite's dense update over the stream (95% CI over workers) and which compresses faster as ×copy (bootstrap CI),
    or that there is no significant difference or nothing to conclude; "at equal delivered update" only with --sweep.

    --json prints one object with snake_case keys: results (the results file), source, reference (the common
    reference of the stream), cases (labels, the order of every per-case list), failed ([{label, error}]), summary (one
    line per pair), verdicts ([{a, b, summary, axes: [{axis: bytes|delivered|time|equal_delivered, status, better,
    estimate, lo, hi, method, text, short}]}]), rows ({metric_name: {higher_is_better, unit, values, best,
    not_significantly_different_from_best, ...}}: the common-reference table), fidelity ({references, rows}: the
    one-shot metrics, each case against its own reference) and, with --sweep, sweep ([{label, compressor, density,
    bytes_per_step, delivered, enough_steps, status}]).

    Examples: `gcbench compare dgc sdagc --model resnet50`, `gcbench compare topk randomk -c 'topk:density=0.1' --sweep`,
    `gcbench compare qsgd terngrad --shape 4096x1024 --distribution laplace --json`.
    """
    from gcbench.compressors import registry
    from gcbench.measure.runner import own_momentum, run_suite
    from gcbench.measure.suite import parse_suite
    from gcbench.report import terminal as rep
    from gcbench.results.compare import compare_json
    from gcbench.results.record import as_cases
    from gcbench.results.verdict import sweep_entries, verdicts

    given = compressor_specs(compressors, compressor)
    if len(given) < 2:
        raise UsageError(f"compare needs two or more compressors, got {len(given)}; to measure one, use gcbench run -c SPEC")
    if timing_repeats is not None:
        deprecated("compare --timing-repeats N", f"--rounds {timing_repeats}")
        rounds = timing_repeats
    granularity = choose(granularity, suite_choices("granularity"), "granularity")
    device = choose(device, suite_choices("device"), "device")
    distribution = choose(distribution, suite_choices("distribution"), "distribution")
    model = model_arg(model)
    for option, value in (("--workers", workers), ("--steps", steps)):
        if value is not None and value < 1:  # 0 would otherwise mean "the default" silently
            raise GcbenchError(f"{option} must be at least 1, got {value}")
    check_output_dir(out_dir, "--out")
    specs = [registry.parse_spec(c) for c in given]
    extra = sweep_entries(specs) if sweep else []  # the density sweep's cases, labelled name@density
    if trace:
        src: dict[str, Any] = {"kind": "trace", "path": trace}
    elif model:
        src = {"kind": "live", "model": model, "workers": workers or 4, "steps": steps or 10}
    else:
        try:
            dims = [int(v) for v in (shape or "1024x1024").lower().replace("×", "x").split("x")]
        except ValueError:
            raise GcbenchError(f"--shape: expected dimensions like 1000x1000, got {shape!r}") from None
        src = {"kind": "synthetic", "distribution": distribution, "shapes": [dims], "workers": workers or 2, "steps": steps or 10}
    if trace and (workers or steps):
        src.update({k: v for k, v in (("workers", workers), ("steps", steps)) if v})
    suite = parse_suite({
        "name": "compare", "seed": seed, "granularity": granularity, "sources": [src],
        "compressors": [{"name": n, "params": p} for n, p in specs] + extra,
        # a head-to-head times few cases: 3 s of rounds each pins the median of a 100 ms kernel (1 s gives ~7 rounds)
        "metrics": {"repeats": repeats, "timing_repeats": rounds, "warmup": 1, "device": device, "timing_budget_s": 3.0},
        "optimizer": {"momentum": own_momentum(specs) if momentum is None else momentum},
    }, "<compare>")
    memory_check(suite, "<compare>", force)
    with progress_bar(not quiet and not as_json) as prog:
        outcome = run_suite(suite, out_dir, prog, kind="compare")
    swept = {e["label"] for e in extra}
    cases = [c for c in as_cases(outcome.records) if c.label not in swept]
    sweep_cases = [c for c in as_cases(outcome.records) if c.label in swept] if sweep else None
    if as_json:
        print(json.dumps(compare_json(cases, str(outcome.path), verdicts(cases, sweep_cases), sweep_cases), default=str))
    else:
        for item in rep.head_to_head_output(cases, granularity, sweep_cases):
            out.print(item)
        out.print(f"results: {outcome.path}", markup=False, highlight=False)
    if outcome.failed:
        raise typer.Exit(1)


# ----------------------------------------------------------------------------- record


@app.command(cls=_Command)
@user_errors
def record(
    model: Annotated[str, typer.Option(
        metavar="MODEL", help="Zoo model name, 'hf:NAME[:key=value,...]' (Hugging Face), or package.module:factory.")],
    out_path: Annotated[Path, typer.Option("--out", "-o", metavar="PATH", help="Trace folder to write.")],
    steps: Annotated[int, typer.Option(metavar="INT", help="Steps to record.")] = 4,
    workers: Annotated[int, typer.Option(metavar="INT", help="Simulated workers (different batches each).")] = 2,
    seed: Annotated[int, typer.Option(metavar="INT", help="Seed of the model and batches.")] = 0,
    warmup_steps: Annotated[int, typer.Option(metavar="INT", help="Plain SGD steps before recording.")] = 0,
    batch_size: Annotated[int | None, typer.Option(metavar="INT", help="Override the model's default batch size.")] = None,
    image_size: Annotated[int | None, typer.Option(metavar="INT", help="Override the input image size (CNNs).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Record live gradients of a model to a trace folder (manifest.json + safetensors).

    Examples: `gcbench record --model resnet18 --out traces/r18 --steps 8`, then `gcbench run quick --trace traces/r18`.
    """
    from gcbench.measure.suite import SourceSpec, Suite, check_option
    from gcbench.sources.recorder import record_live

    model = model_arg(model) or model
    # the ranges of a suite's live source: a bad value is one line before any gradient is computed
    for option, key, value in (("--steps", "steps", steps), ("--workers", "workers", workers),
                               ("--warmup-steps", "warmup_steps", warmup_steps), ("--batch-size", "batch_size", batch_size),
                               ("--image-size", "image_size", image_size)):
        check_option(SourceSpec, key, value, option)
    check_option(Suite, "seed", seed, "--seed")
    check_output_dir(out_path, "--out")
    kwargs: dict[str, Any] = {}
    if batch_size is not None:
        kwargs["batch_size"] = batch_size
    if image_size is not None:
        kwargs["image_size"] = image_size
    with progress_bar(not quiet) as prog:
        path = record_live(model, steps=steps, workers=workers, out=out_path, seed=seed, warmup_steps=warmup_steps,
                           progress=lambda d, t, m: prog("record", d, t, m), **kwargs)
    size = sum(f.stat().st_size for f in Path(path).glob("*") if f.is_file())
    out.print(f"trace: {path} — {steps} steps × {workers} workers, {size / 2**20:.1f} MiB", markup=False, highlight=False)


# ----------------------------------------------------------------------------- bench


@app.command(cls=_Command)
@user_errors
def bench(
    compressors: Annotated[list[str] | None, typer.Argument(
        help="Compressors to time: name or name:key=value,... like 'threshold:tau=3.29' (default: every registered one).",
        metavar="SPEC")] = None,
    compressor: Annotated[list[str] | None, typer.Option("--compressor", "-c", metavar="SPEC",
                                                         help="A compressor to time (repeatable), as a positional SPEC.")] = None,
    sizes: Annotated[str, typer.Option(metavar="LIST", help="Element counts to sweep, a comma list like 1K,1M,25.6M,100M.")] = "25.6M",
    model: Annotated[str | None, typer.Option(
        metavar="NAME", help="Time a whole step of this model's gradient tensors (a zoo name, `gcbench list models`) "
                             "instead of one tensor per size: what a network prediction charges per step.")] = None,
    rounds: Annotated[int, typer.Option(metavar="INT", help="Timed rounds per case at least; more (up to 40 or 3 s per "
                                        "kernel) until the median's 95% CI is within ±5%.")] = 5,
    repeats: Annotated[int | None, typer.Option("--repeats", metavar="INT", hidden=True,
                                                help="Deprecated spelling of --rounds.")] = None,
    warmup: Annotated[int, typer.Option(metavar="INT", help="Untimed warm-up calls.")] = 1,
    threads: Annotated[int, typer.Option(metavar="INT", help="torch threads (the targets are defined for 2).")] = 2,
    device: Annotated[str, typer.Option(metavar="NAME", help="cpu or cuda.")] = "cpu",
    isolate: Annotated[bool, typer.Option(help="A fresh process per case (allocator state does not leak between cases).")] = True,
    baseline: Annotated[Path | None, typer.Option(
        metavar="PATH", help="A stored bench results file: flag compressors that got slower.")] = None,
    threshold: Annotated[float, typer.Option(
        metavar="FLOAT", help="Relative slow-down of compress×copy that counts as a regression.")] = 0.25,
    out_dir: Annotated[Path, typer.Option("--out", "-o", metavar="PATH", help="Folder for the results file.")] = Path("reports/runs"),
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    fail_on_regression: Annotated[bool, typer.Option(help="Exit 1 if any case regressed against --baseline.")] = False,
) -> None:
    """Time compress/decompress against a memory copy of the same tensor; print the target table.

    Examples: `gcbench bench`, `gcbench bench topk qsgd --sizes 1M,25.6M --rounds 9`,
    `gcbench bench --model resnet50 -c topk -c powersgd`,
    `gcbench bench -c 'threshold:tau=3.29' --baseline reports/runs/OLD.json --fail-on-regression`.
    """
    from gcbench.compressors import registry
    from gcbench.measure.bench import bench_to_file, parse_size
    from gcbench.report import terminal as rep

    if repeats is not None:
        deprecated("bench --repeats N", f"--rounds {repeats} (--repeats means fidelity draws in run and compare)")
        rounds = repeats
    device = choose(device, ("cpu", "cuda"), "device")
    names = compressor_specs(compressors, compressor) or [n for n in registry.names() if registry.get(n).min_workers <= 1]
    size_list = size_list_arg(sizes, parse_size)
    check_bench_options(size_list, sizes, rounds, warmup, threads, device, threshold)
    if model is not None:
        if sizes != "25.6M":
            raise GcbenchError("--model times a whole step of the model's own tensors; leave out --sizes")
        from gcbench.sources.catalog import check_model

        check_model(model)
    check_output_dir(out_dir, "--out")
    if fail_on_regression and baseline is None:
        raise GcbenchError("--fail-on-regression needs --baseline FILE")
    with progress_bar(not as_json and not quiet) as prog:
        outcome = bench_to_file(names, size_list, out_dir, repeats=rounds, warmup=warmup, threads=threads, device=device,
                                isolate=isolate, baseline=baseline, threshold=threshold, model=model, progress=prog)
    if as_json:
        print(json.dumps({"results": str(outcome.path), "cases": [c.to_json_dict() for c in outcome.record.cases]}, default=str))
    else:
        if outcome.path is not None:
            out.print(rep.bench_table(rep.LoadedRun(outcome.path, outcome.record)))
        out.print(f"results: {outcome.path}", markup=False, highlight=False)
    if outcome.regressions:
        names_txt = ", ".join(escape(c.name) for c in outcome.regressions)
        err.print(f"[red]{len(outcome.regressions)} regression(s)[/] against {escape(str(baseline))}: " + names_txt)
        if fail_on_regression:
            raise typer.Exit(1)
    if fail_on_regression and baseline is not None and not outcome.compared:
        # a gate that compared nothing must not pass (other sizes or labels than the baseline's)
        err.print(f"[bold red]error:[/] regression gate: no case of this bench matches a case of {escape(str(baseline))} "
                  "(same label and element count)", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    if outcome.failed:  # a sweep goes on past a failing case, but the exit status says something failed
        for c in outcome.failed:
            err.print(f"[bold red]error:[/] {escape(c.name)} @ {c.numel or 0:,}: {escape(_first_line(c.error_text))}",
                      highlight=False, soft_wrap=True)
        err.print(f"[red]{len(outcome.failed)} of {len(outcome.record.cases)} case(s) failed[/]", highlight=False)
        raise typer.Exit(1)


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0] if lines else ""


def size_list_arg(text: str, parse: Callable[[str], int]) -> list[int]:
    """``bench --sizes`` (``"1K,25.6M"``) → element counts; a bad item is one line naming ``--sizes`` and the item."""
    sizes = []
    for item in (s for s in text.split(",") if s.strip()):
        try:
            sizes.append(parse(item))
        except GcbenchError as exc:
            raise GcbenchError(f"--sizes: {exc} (in {text!r})") from None
    return sizes


def check_bench_options(sizes: list[int], sizes_text: str, rounds: int, warmup: int, threads: int, device: str,
                        threshold: float) -> None:
    """One line per bad ``bench`` option before any case runs (a sweep of failing cases helps nobody)."""
    problems = []
    if not sizes:
        problems.append(f"--sizes: expected comma-separated element counts like 1K,25.6M, got {sizes_text!r}")
    if rounds < 1:
        problems.append(f"--rounds must be at least 1, got {rounds}")
    if warmup < 0:
        problems.append(f"--warmup must be at least 0, got {warmup}")
    if not 1 <= threads <= 1024:  # a suite's metrics.threads range: 100000 threads aborted with std::bad_alloc
        problems.append(f"--threads must be in [1, 1024], got {threads}")
    if not 0 <= threshold < float("inf"):
        problems.append(f"--threshold must be a finite number ≥ 0, got {threshold}")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            problems.append("--device cuda: no CUDA device is available here (torch.cuda.is_available() is False); use --device cpu")
    if problems:
        raise GcbenchError("\n".join(problems))


# ----------------------------------------------------------------------------- report


def _claims_for(papers: Path | None, runs: list[Any]) -> tuple[list[Any], str]:
    """Paper claims matched to the runs; a missing default claims file is not an error (an installed wheel has none)."""
    from gcbench.results.baselines import PAPERS_FILE, load_claims, match_claims

    path = papers or PAPERS_FILE
    if papers is None and not path.exists():
        return [], f"No claims file at {path} (pass --papers FILE)."
    return match_claims(load_claims(path), [r.data for r in runs]), ""


@app.command(cls=_Command)
@user_errors
def report(
    runs: Annotated[list[str] | None, typer.Argument(
        help="Results files, run ids, id prefixes or 'latest' (default: every run in --runs-dir; with --html the newest, "
        "the others listed).", metavar="RUN")] = None,
    runs_dir: Annotated[Path, typer.Option("--runs-dir", metavar="PATH", help="Folder of stored runs.")] = Path("reports/runs"),
    md: Annotated[bool, typer.Option("--md", help="Markdown tables for a paper or PR (stdout, or -o FILE.md).")] = False,
    as_html: Annotated[bool, typer.Option("--html", help="One self-contained HTML file with plots (default reports/index.html).")] = False,
    output: Annotated[Path | None, typer.Option("--output", "-o", metavar="PATH", help="Write the Markdown or HTML here.")] = None,
    baseline: Annotated[str | None, typer.Option(
        "--baseline", "-b", metavar="RUN", help="Compare the newest run (or the one named) against this run.")] = None,
    threshold: Annotated[float, typer.Option(metavar="FLOAT", help="Relative change below which a metric counts as unchanged (~).")] = 0.05,
    alpha: Annotated[float, typer.Option(metavar="FLOAT", help="Significance level of the Mann–Whitney tests on raw samples.")] = 0.05,
    all_metrics: Annotated[bool, typer.Option("--all-metrics", help="Also list comparison rows that did not change (~).")] = False,
    fail_on_regression: Annotated[bool, typer.Option(
        "--fail-on-regression", help="Exit 1 if any metric is worse or a case newly fails (CI).")] = False,
    papers: Annotated[Path | None, typer.Option(metavar="PATH", help="Paper claims file (default: baselines/papers.toml).")] = None,
    csv_dir: Annotated[Path | None, typer.Option(
        "--csv", metavar="DIR", help="Write cases.csv, layers.csv, steps.csv and timings.csv (tidy, one row per "
        "observation) into DIR, replacing those four files.")] = None,
    layers: Annotated[bool, typer.Option("--layers", help="Per-layer tables (ratio and q of every layer, per source) "
                                         "instead of the summary; with --md as Markdown.")] = False,
    all_runs: Annotated[bool, typer.Option("--all", help="With --html and no RUN: render every run of --runs-dir in "
                                           "detail, not only the newest (about 0.75 s a run).")] = False,
) -> None:
    """Render stored results: terminal tables, Markdown (--md) or one self-contained HTML file (--html); compare with --baseline.

    Examples: `gcbench report latest`, `gcbench report --html -o reports/cnn.html`, `gcbench report --md > results.md`,
    `gcbench report latest --layers`, `gcbench report RUN --csv out/`, `gcbench report NEW --baseline OLD --fail-on-regression`.
    """
    from gcbench.report import terminal as rep
    from gcbench.results.compare import gate_failures

    if md and as_html:
        raise GcbenchError("--md and --html are exclusive (run the command twice for both)")
    if output is not None and not (md or as_html):
        raise GcbenchError("--output needs --md or --html")
    if not 0 <= threshold < float("inf"):  # NaN fails this too
        raise GcbenchError(f"--threshold must be a finite number ≥ 0, got {threshold}")
    if not 0 < alpha < 1:
        raise GcbenchError(f"--alpha must be in (0, 1), got {alpha}")
    if fail_on_regression and not baseline:
        raise GcbenchError("--fail-on-regression needs --baseline RUN")
    if csv_dir is not None and (md or as_html or baseline or output is not None or layers):
        raise GcbenchError("--csv writes its own files: leave out --md, --html, --output, --baseline and --layers")
    if layers and (as_html or baseline):
        raise GcbenchError("--layers is for the terminal and --md (the HTML report has its own per-layer view), not --baseline")
    if all_runs and not as_html:
        raise GcbenchError("--all is for --html (the terminal, Markdown and CSV reports show every run already)")
    if all_runs and (runs or baseline):
        raise GcbenchError("--all renders every run of --runs-dir: leave out the RUN names and --baseline")
    if output is not None:
        check_output_file(output, "--output")
    def skipped(exc: GcbenchError) -> None:
        err.print(f"[yellow]warning:[/] skipped {escape(str(exc))}", highlight=False, soft_wrap=True)

    # --html renders the newest run and lists the others: rendering every run of a big folder took minutes
    inp = rep.report_input(runs, runs_dir, baseline, threshold, alpha, finished_only=fail_on_regression, on_skip=skipped,
                           newest_only=as_html and not all_runs)
    loaded, detailed, comparison = inp.loaded, inp.detailed, inp.comparison
    inputs = [r.path for r in loaded] + ([papers] if papers is not None else [])
    if csv_dir is not None:
        from gcbench.report.export import CSV_FILES, write_csv

        check_not_an_input([csv_dir / name for name in CSV_FILES], inputs, "--csv")

        for w in write_csv(csv_dir, loaded):
            out.print(f"{w.path}: {w.rows:,} rows{' (replaced)' if w.replaced else ''}", markup=False, highlight=False)
        return
    if layers and not md:
        _emit(rep.layers_report(loaded, out.width))
        return
    if as_html or output is not None:
        check_not_an_input([output or Path("reports/index.html")], inputs, "--output")
    claims, claims_missing = _claims_for(papers, detailed)
    if as_html:
        from gcbench.report.html import write_html

        path = write_html(output or Path("reports/index.html"), loaded, claims, comparison, detailed=detailed,
                          claims_missing=claims_missing, index=inp.index)
        out.print(f"report: {path}", markup=False, highlight=False)
    elif md:
        text = rep.markdown_layers_report(detailed) if layers else rep.markdown_report(detailed, claims, comparison, all_metrics)
        if output is not None:
            atomic_write(output, text)  # a full disk leaves the previous file whole, and the error names it
            out.print(f"report: {output}", markup=False, highlight=False)
        else:
            print(text)
    else:
        _emit(rep.terminal_report(inp, claims, claims_missing, all_metrics))
    if comparison is not None and comparison.regressions:
        err.print(f"[red]{len(comparison.regressions)} regression(s)[/] in {escape(comparison.new_id)} against "
                  f"{escape(comparison.baseline_id)}", highlight=False, soft_wrap=True)
    if comparison is not None and fail_on_regression:
        # missing, failed or unfinished is a failure of the gate too, not only a worse metric
        problems = gate_failures(loaded[0].data, loaded[1].data, comparison)
        for line in problems:
            err.print(f"[bold red]error:[/] regression gate: {escape(line)}", highlight=False, soft_wrap=True)
        if problems:
            raise typer.Exit(1)


# ----------------------------------------------------------------------------- train / simulate (gcbench.distributed)


@app.command("train", cls=_Command)
@user_errors
def train_cmd(
    compressor: Annotated[list[str] | None, typer.Option("--compressor", "-c", metavar="SPEC", help=(
        "Train with this compressor (repeatable): name or name:key=value,...; 'none' (the reference) is added first if "
        "missing.  Default: -c none -c topk -c qsgd."))] = None,
    compressors_old: Annotated[list[str] | None, typer.Option("--compressors", metavar="LIST", hidden=True,
                                                              help="Deprecated: a comma list of compressors; use -c SPEC.")] = None,
    workers: Annotated[int, typer.Option(metavar="INT", help="Worker processes (ignored under torchrun: WORLD_SIZE).")] = 4,
    task: Annotated[str, typer.Option(
        metavar="NAME", help="digits, charlstm or auto (digits when scikit-learn is installed, else charlstm).")] = "auto",
    epochs: Annotated[int | None, typer.Option(metavar="INT", help="Epochs (default: the task's, digits 10, charlstm 6).")] = None,
    target: Annotated[float | None, typer.Option(
        metavar="FLOAT", help="Target test accuracy for time-to-target (digits 0.9, charlstm 0.35).")] = None,
    batch_size: Annotated[int | None, typer.Option(metavar="INT", help="Batch size per worker.")] = None,
    lr: Annotated[float | None, typer.Option(metavar="FLOAT", help="Learning rate (default: the task's).")] = None,
    granularity: Annotated[str, typer.Option(metavar="NAME", help="bucket (each DDP bucket) or layer (each parameter).")] = "bucket",
    seed: Annotated[int, typer.Option(metavar="INT", help="Seed of the model, the data order and the compressors.")] = 0,
    timeout: Annotated[float, typer.Option(
        metavar="FLOAT", help="Seconds one compressor's run may take before its workers are killed.")] = 300.0,
    collective_timeout: Annotated[float | None, typer.Option(
        metavar="FLOAT", help="Seconds a collective waits for a peer (max(30, timeout/3)).")] = None,
    threads: Annotated[int | None, typer.Option(metavar="INT", help="Torch threads per worker (default cores // workers).")] = None,
    out_dir: Annotated[Path, typer.Option("--out", "-o", metavar="PATH", help="Folder for the results file.")] = Path("reports/runs"),
    as_json: Annotated[bool, typer.Option("--json", help="Print the results file's path and cases as JSON.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Train a real task on N processes (torch.distributed, gloo) once per compressor through DDP hooks.

    Examples: `gcbench train -c topk -c qsgd --workers 4`, `gcbench train --task charlstm -c 'topk:density=0.05' --epochs 2`,
    `torchrun --nproc-per-node 4 -m gcbench train -c dgc`.
    """
    from gcbench.distributed.launch import launch_env

    launch_env()  # a malformed launch (RANK=-1, WORLD_SIZE=abc, no MASTER_ADDR) fails in one line before torch even loads
    from gcbench.distributed.ddp import GRANULARITIES
    from gcbench.distributed.train import TASKS, TrainConfig, under_torchrun
    from gcbench.distributed.train import train as run_training
    from gcbench.report import terminal as rep
    from gcbench.results.record import as_cases

    specs: list[str] = []
    for text, old_option in [*((t, False) for t in compressor or []), *((t, True) for t in compressors_old or [])]:
        listed = old_comma_list(text)  # the old -c "none,topk" named several compressors with commas
        new_form = " ".join(f"-c {c}" for c in listed or [text])
        if old_option:
            deprecated(f"train --compressors {text!r}", new_form)
        elif listed is not None:
            deprecated(f"train -c {text!r} (commas between compressors)", new_form)
        specs.extend(listed or [text])
    specs = compressor_specs(specs or ["none", "topk", "qsgd"], None)
    task = choose(task, ["auto", *TASKS], "task")
    granularity = choose(granularity, GRANULARITIES, "granularity")
    cfg = TrainConfig(task=task, workers=workers, epochs=epochs, batch_size=batch_size, lr=lr, target=target, seed=seed,
                      granularity=granularity, timeout_s=timeout, collective_timeout_s=collective_timeout, threads=threads)
    cfg.resolved()  # bad options fail before the output check and before any process starts
    check_output_dir(out_dir, "--out")
    with progress_bar(not quiet and not as_json and not under_torchrun()) as prog:
        outcome = run_training(cfg, specs, out_dir, prog)
    if outcome.path is None:  # a non-zero rank under torchrun: rank 0 reports
        return
    cases = as_cases(outcome.records, "train")
    if as_json:
        print(json.dumps({"results": str(outcome.path), "cases": outcome.records}, default=str))
    else:
        out.print(rep.train_table(cases, f"gcbench train — {rep.train_description(cases)}"))
        out.print(f"results: {outcome.path}", markup=False, highlight=False)
    failed = [c for c in cases if not c.ok]
    if failed:
        for c in failed:
            err.print(f"[bold red]error:[/] {escape(c.label)}: {escape(str(c.error))}", highlight=False, soft_wrap=True)
        raise typer.Exit(1)


@app.command("simulate", cls=_Command)
@user_errors
def simulate_cmd(
    results: Annotated[str, typer.Argument(help="Results file of `gcbench run`/`compare`/`train` (path, run id or 'latest').",
                                           metavar="RUN")] = "latest",
    workers: Annotated[str, typer.Option(
        metavar="LIST", help="Worker counts to sweep, a comma list like 8,64.")] = "8,16,32,64,128,256,512,1024",
    bandwidth: Annotated[str, typer.Option(
        metavar="LIST", help="Link bandwidths in Gbit/s to sweep, a comma list like 1,10.")] = "1,10,25,100",
    latency_us: Annotated[float, typer.Option(metavar="FLOAT", help="Latency α per message in microseconds.")] = 5.0,
    compute_ms: Annotated[float | None, typer.Option(metavar="FLOAT", help="Compute time per step in ms (run files have none: default 0; "
                                                     "train files: measured).")] = None,
    scheme: Annotated[str, typer.Option(metavar="NAME", help="auto (each compressor's own protocol, priced leg by leg as "
                                        "`gcbench advise` does), or a what-if: allreduce, allgather or ps (parameter server).")]
    = "auto",
    runs_dir: Annotated[Path, typer.Option(metavar="PATH", help="Where run ids are looked up.")] = Path("reports/runs"),
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable predictions.")] = False,
) -> None:
    """Predict step time and speed-up over uncompressed training for cluster sizes and link speeds.

    Examples: `gcbench simulate`, `gcbench simulate latest --workers 8,64 --bandwidth 1,10`,
    `gcbench simulate RUN --scheme ps --compute-ms 50 --json`.
    """
    from gcbench.distributed import netmodel
    from gcbench.report.simulation import simulation_output
    from gcbench.results.store import load_run, resolve_run

    scheme = choose(scheme, netmodel.SCHEMES, "scheme")
    if not 0 <= latency_us < float("inf"):  # NaN fails this too
        raise GcbenchError(f"--latency-us must be a finite number >= 0, got {latency_us:g}")
    if compute_ms is not None and not 0 <= compute_ms < float("inf"):
        raise GcbenchError(f"--compute-ms must be a finite number >= 0, got {compute_ms:g}")
    ns = number_list(workers, "--workers", int)
    bws = number_list(bandwidth, "--bandwidth", float)
    path = resolve_run(results, runs_dir, finished=True)  # "latest": the newest run that finished
    sim = netmodel.simulate_results(load_run(path), ns, bws, latency_us * 1e-6, scheme, None if compute_ms is None else compute_ms / 1e3,
                                    str(path))
    if as_json:
        print(json.dumps(sim.to_dict(), default=str))
        return
    _emit(simulation_output(sim))


@app.command("advise", cls=_Command)
@user_errors
def advise_cmd(
    results: Annotated[str | None, typer.Argument(
        help="Optional results file of `gcbench run`/`compare` on the same model (path or run id): its delivered fractions "
             "rank fidelity.", metavar="RUN")] = None,
    model: Annotated[str | None, typer.Option(metavar="NAME", help="The model (a zoo name, `gcbench list models`); "
                                              "default: the one model of --kernels.")] = None,
    workers: Annotated[str, typer.Option(metavar="LIST", help="Worker counts, a comma list like 16 or 8,64.")] = "16",
    bandwidth: Annotated[str, typer.Option(metavar="LIST", help="Link bandwidths in Gbit/s, a comma list like 1,10,25,100.")]
    = "1,10,25,100",
    latency_us: Annotated[float, typer.Option(metavar="FLOAT", help="Latency α per message in microseconds.")] = 5.0,
    gpus_per_node: Annotated[int, typer.Option(metavar="INT", help="Workers per node: they share the node's link (--bandwidth) "
                                               "and talk among themselves over --intra-bandwidth (1: a flat network).")] = 1,
    intra_bandwidth: Annotated[float | None, typer.Option(metavar="FLOAT", help="Intra-node bandwidth in Gbit/s "
                                                          "(NVLink, PCIe) with --gpus-per-node.")] = None,
    overlap: Annotated[bool, typer.Option(help="Overlap communication with the backward pass, bucket by bucket as DDP does.")]
    = False,
    compute_ms: Annotated[float | None, typer.Option(
        metavar="FLOAT", help="Compute time of one step in ms on the cluster's devices (default: measured here on the CPU, "
                              "forward + backward at the model's batch).")] = None,
    compressor: Annotated[list[str] | None, typer.Option(
        "--compressor", "-c", metavar="SPEC", help="A compressor to consider (repeatable; default: every registered one).")] = None,
    kernels: Annotated[Path | None, typer.Option(
        metavar="PATH", help="A bench file of `gcbench bench --model NAME` (measured here or on another device, e.g. "
                             "`--device cuda`): its kernel times instead of measuring them now.")] = None,
    rounds: Annotated[int, typer.Option(metavar="INT", help="Timed rounds per compressor when measuring kernels.")] = 3,
    network: Annotated[Path | None, typer.Option(
        metavar="PATH", help="A network calibration (`python -m gcbench.distributed.calibrate`, run on the cluster): "
                             "collectives priced as measured there instead of by the α–β model.")] = None,
    runs_dir: Annotated[Path, typer.Option(metavar="PATH", help="Where run ids are looked up.")] = Path("reports/runs"),
    out_dir: Annotated[Path, typer.Option("--out", "-o", metavar="PATH", help="Folder for the bench file it measures.")]
    = Path("reports/runs"),
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable advice.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Predict which compressor makes training faster on a cluster, by how much, and at what fidelity cost.

    Examples: `gcbench advise --model resnet50 --workers 16 --bandwidth 1,10,25,100`,
    `gcbench advise --model resnet50 --compute-ms 120 -c topk -c powersgd -c fp16`,
    `gcbench advise RUN --kernels gpu-bench.json --workers 8,64 --json`,
    `gcbench advise --model resnet50 --workers 64 --gpus-per-node 8 --intra-bandwidth 2400 --overlap`,
    `gcbench advise --model resnet50 --workers 4 --bandwidth 10 --network net.json`.
    """
    from gcbench.compressors import registry
    from gcbench.distributed import advise as adv
    from gcbench.distributed.netmodel import Topology, load_calibration
    from gcbench.report.advice import advice_output
    from gcbench.results.store import load_run, resolve_run
    from gcbench.sources.catalog import check_model

    if not 0 <= latency_us < float("inf"):
        raise GcbenchError(f"--latency-us must be a finite number >= 0, got {latency_us:g}")
    if compute_ms is not None and not 0 <= compute_ms < float("inf"):
        raise GcbenchError(f"--compute-ms must be a finite number >= 0, got {compute_ms:g}")
    if rounds < 1:
        raise GcbenchError(f"--rounds must be at least 1, got {rounds}")
    ns = number_list(workers, "--workers", int)
    bws = number_list(bandwidth, "--bandwidth", float)
    if gpus_per_node < 1:
        raise GcbenchError(f"--gpus-per-node must be at least 1, got {gpus_per_node}")
    if (gpus_per_node > 1) != (intra_bandwidth is not None):
        raise GcbenchError("--gpus-per-node N (above 1) and --intra-bandwidth GBITS go together")
    topology = Topology(gpus_per_node, intra_bandwidth or 0.0)
    unfilled = [n for n in ns if n % gpus_per_node]
    if unfilled:
        raise GcbenchError(f"--workers {unfilled[0]} does not fill nodes of {gpus_per_node} GPUs (--gpus-per-node)")
    if model is None and kernels is None:
        raise GcbenchError("give --model NAME (or --kernels FILE of `gcbench bench --model NAME`)")
    calibration = load_calibration(network) if network is not None else None
    if calibration is not None and gpus_per_node > 1:
        raise GcbenchError("--network prices a flat network as measured: leave out --gpus-per-node")
    if model is not None:
        check_model(model)
    specs = compressor_specs(None, compressor) or [n for n in registry.names() if registry.get(n).min_workers <= 1]
    fidelity = None
    if results is not None:  # read first: a bad file is one line before minutes of measuring
        path = resolve_run(results, runs_dir, finished=True)
        fidelity = (load_run(path), str(path))
    if kernels is None:
        check_output_dir(out_dir, "--out")
    before: adv.ComputeTiming | None = None
    with progress_bar(not as_json and not quiet) as prog:
        if kernels is not None:
            ks = adv.kernels_from_bench(load_run(kernels), model, str(kernels))
            wanted = {registry.parse_spec(sp)[0] for sp in specs} if compressor else None
            if wanted is not None:
                ks = adv.KernelSet(ks.model, ks.device, ks.machine, ks.origin,
                                   tuple(k for k in ks.kernels if k.compressor in wanted))
        else:
            assert model is not None
            # compute is timed before and after the kernels: two measurements a minute apart show a machine
            # whose speed moved under the run (adv.combine_compute), which one measurement cannot
            before = adv.measure_compute(model, progress=prog) if compute_ms is None else None
            ks = adv.measure_kernels(model, specs, out_dir, rounds=rounds, progress=prog)
        compute_flags: tuple[str, ...] = ()
        if compute_ms is not None:
            compute_s, origin = compute_ms / 1e3, "given"
        else:
            ct = adv.measure_compute(ks.model, progress=prog)
            if before is not None:
                ct = adv.combine_compute(before, ct)
            compute_s, compute_flags = ct.median_s, ct.reasons
            origin = (f"measured on this machine's CPU, median of {len(ct.samples)} steps"
                      + (f" in {ct.attempts} measurements" if ct.attempts > 1 else "")
                      + "; give --compute-ms for the cluster's devices")
    delivered = adv.delivered_from_results(fidelity[0], ks.model, fidelity[1]) if fidelity else None
    advice = adv.advise(ks, compute_s, ns, bws, latency_us * 1e-6, compute_origin=origin, delivered=delivered,
                        fidelity_origin=fidelity[1] if fidelity else None, topology=topology, overlap=overlap,
                        calibration=calibration, compute_flags=compute_flags)
    if as_json:
        print(json.dumps(advice.to_dict(), default=str))
        return
    _emit(advice_output(advice))


def main() -> None:
    """Run the command line; SIGINT and SIGTERM stop it cleanly (one line, exit 130 / 143, results kept).

    :func:`gcbench.core.signals.install` makes SIGTERM raise KeyboardInterrupt like Ctrl-C, so a run
    records status ``interrupted`` with its completed cases, and swallows repeats that would
    interrupt that final write.  KeyboardInterrupt is caught around the whole app, including
    the imports commands do lazily, so no signal ends in a traceback.
    """
    signals.install()
    closed = _console_streams()
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
            err.print("[yellow]interrupted[/]", highlight=False)
            code = 130
    except KeyboardInterrupt:  # a stop signal while reporting the first one
        code = 130
    sys.exit(signals.exit_code(code))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
