"""Every option that more than one command takes, declared once: its flags, type and metavar.

A command annotates a parameter with one of these (``quiet: options.Quiet = False``); where
commands word an option's help for their own case (what ``--json`` prints, what ``--workers``
defaults to), the alias is made by a function that takes the help (and, where commands differ,
the value's type), so the flags themselves are still written only here.  Options only one command
takes stay in that command's module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

#: ``--quiet``/``-q``: no progress bar (run, compare, record, bench, train, advise)
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]
#: ``--latency-us``: the α of every message (simulate, advise); range checked by gcbench.predict.network
LatencyUs = Annotated[float, typer.Option("--latency-us", metavar="FLOAT", help="Latency α per message in microseconds.")]


def runs_dir(help: str = "Where run ids are looked up.") -> Any:
    """``--runs-dir PATH``: the folder of stored runs, where a RUN named by id is looked up."""
    return Annotated[Path, typer.Option("--runs-dir", metavar="PATH", help=help)]


def json_flag(help: str = "Machine-readable output.") -> Any:
    """``--json``: machine-readable output on stdout (what it holds is the command's own help)."""
    return Annotated[bool, typer.Option("--json", help=help)]


def out_path(help: str = "Folder for the results file.") -> Any:
    """``--out``/``-o PATH``: the folder (or, for record, the trace folder) a command writes."""
    return Annotated[Path, typer.Option("--out", "-o", metavar="PATH", help=help)]


def trust_code(help: str) -> Any:
    """``--trust-code`` (or ``GCBENCH_TRUST_CODE=1``): let a suite file import the user code it names (run, converge)."""
    return Annotated[bool, typer.Option("--trust-code", envvar="GCBENCH_TRUST_CODE", help=help)]


def compressor_option(help: str) -> Any:
    """``--compressor``/``-c SPEC``, repeatable: one compressor, name or name:key=value,..."""
    return Annotated[list[str] | None, typer.Option("--compressor", "-c", metavar="SPEC", help=help)]


def all_flag(help: str) -> Any:
    """``--all``: every one of what the command would otherwise choose for you (advise: every registered compressor,
    not the baselines and one member of each family; report --html: every run, not only the newest)."""
    return Annotated[bool, typer.Option("--all", help=help)]


def force(help: str) -> Any:
    """``--force``: run even when the estimated memory exceeds this machine's."""
    return Annotated[bool, typer.Option("--force", help=help)]


def model(kind: Any, help: str, metavar: str = "MODEL") -> Any:
    """``--model``: a zoo model, ``hf:NAME`` or package.module:factory (bench and advise: a zoo NAME)."""
    return Annotated[kind, typer.Option("--model", metavar=metavar, help=help)]


def trace(help: str) -> Any:
    """``--trace PATH``: a recorded trace folder as the gradient source."""
    return Annotated[str | None, typer.Option("--trace", metavar="PATH", help=help)]


def workers(kind: Any, help: str, metavar: str = "INT") -> Any:
    """``--workers``: one count (run, compare, record, train) or a comma LIST to sweep (simulate, advise)."""
    return Annotated[kind, typer.Option("--workers", metavar=metavar, help=help)]


def steps(kind: Any, help: str) -> Any:
    """``--steps INT``."""
    return Annotated[kind, typer.Option("--steps", metavar="INT", help=help)]


def seed(kind: Any, help: str) -> Any:
    """``--seed INT``."""
    return Annotated[kind, typer.Option("--seed", metavar="INT", help=help)]


def device(kind: Any, help: str) -> Any:
    """``--device NAME``: cpu, cuda (or auto where a suite allows it)."""
    return Annotated[kind, typer.Option("--device", metavar="NAME", help=help)]


#: ``--loop open|closed``: what a live model steps with between measured steps (run, compare)
Loop = Annotated[str | None, typer.Option("--loop", metavar="NAME", help=(
    "Live sources: open (the model steps with the workers' dense mean; default) or closed (each compressor's own model "
    "steps with its compressed aggregate: what training with it sees)."))]


def granularity(kind: Any, help: str) -> Any:
    """``--granularity NAME``: what one compression covers (layer, bucket, model)."""
    return Annotated[kind, typer.Option("--granularity", metavar="NAME", help=help)]


def repeats(kind: Any, help: str, hidden: bool = False) -> Any:
    """``--repeats INT``: fidelity draws (run, compare); bench's hidden deprecated spelling of ``--rounds``."""
    return Annotated[kind, typer.Option("--repeats", metavar="INT", hidden=hidden, help=help)]


def rounds(help: str) -> Any:
    """``--rounds INT``: timed rounds per case (compare, bench, advise)."""
    return Annotated[int, typer.Option("--rounds", metavar="INT", help=help)]


def threads(kind: Any, help: str) -> Any:
    """``--threads INT``: torch threads (bench) or per worker (train)."""
    return Annotated[kind, typer.Option("--threads", metavar="INT", help=help)]


def batch_size(help: str) -> Any:
    """``--batch-size INT``."""
    return Annotated[int | None, typer.Option("--batch-size", metavar="INT", help=help)]


def bandwidth(help: str) -> Any:
    """``--bandwidth LIST``: link bandwidths in Gbit/s to sweep (simulate, advise)."""
    return Annotated[str, typer.Option("--bandwidth", metavar="LIST", help=help)]


def compute_ms(help: str) -> Any:
    """``--compute-ms FLOAT``: compute time of one step; range checked by gcbench.predict.network."""
    return Annotated[float | None, typer.Option("--compute-ms", metavar="FLOAT", help=help)]


def baseline(kind: Any, metavar: str, help: str, *short: str) -> Any:
    """``--baseline``: a stored bench file (bench), a run to compare against (report, also ``-b``), or the all-reduce
    advise claims speed-ups against (``bf16``/``fp32``)."""
    return Annotated[kind, typer.Option("--baseline", *short, metavar=metavar, help=help)]


def csv_path(metavar: str, help: str) -> Any:
    """``--csv``: where CSV goes (report: a folder of four tables; advise and collectives: one file)."""
    return Annotated[Path | None, typer.Option("--csv", metavar=metavar, help=help)]


def kernels(help: str) -> Any:
    """``--kernels PATH``: a bench file of ``gcbench bench --model`` whose kernel times price a step (advise, report)."""
    return Annotated[Path | None, typer.Option("--kernels", metavar="PATH", help=help)]


def threshold(help: str) -> Any:
    """``--threshold FLOAT``: the relative change that counts (bench: a slow-down, report: unchanged below it)."""
    return Annotated[float, typer.Option("--threshold", metavar="FLOAT", help=help)]


def fail_on_regression(help: str, negatable: bool = False) -> Any:
    """``--fail-on-regression``: exit 1 when the regression gate fails (bench also takes ``--no-fail-on-regression``)."""
    flag = "--fail-on-regression/--no-fail-on-regression" if negatable else "--fail-on-regression"
    return Annotated[bool, typer.Option(flag, help=help)]
