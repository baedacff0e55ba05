"""Every option that more than one command takes, declared once: its flags, metavar and default help.

A command annotates a parameter with one of these (``quiet: options.Quiet = False``); where
commands word an option's help for their own case (what ``--json`` prints, what ``--workers``
defaults to), a function takes the help and returns the option, and the command writes the value's
type beside it (``as_json: Annotated[bool, options.json_flag("...")] = False``: an annotation a type
checker reads), so the flags themselves are still written only here.  Options only one command
takes stay in that command's module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer
from typer.models import OptionInfo


def _with_help(flag: str, metavar: str) -> Callable[[str], OptionInfo]:
    """An option of one value whose help each command words for its own case."""

    def option(help: str) -> OptionInfo:
        return typer.Option(flag, metavar=metavar, help=help)

    return option


#: ``--quiet``/``-q``: no progress bar (run, compare, record, bench, train, advise)
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]
#: ``--latency-us``: the α of every message (simulate, advise); range checked by gcbench.predict.network
LatencyUs = Annotated[float, typer.Option("--latency-us", metavar="FLOAT", help="Latency α per message in microseconds.")]


def runs_dir(help: str = "Where run ids are looked up.") -> OptionInfo:
    """``--runs-dir PATH``: the folder of stored runs, where a RUN named by id is looked up."""
    return typer.Option("--runs-dir", metavar="PATH", help=help)


def json_flag(help: str = "Machine-readable output.") -> OptionInfo:
    """``--json``: machine-readable output on stdout (what it holds is the command's own help)."""
    return typer.Option("--json", help=help)


def out_path(help: str = "Folder for the results file.") -> OptionInfo:
    """``--out``/``-o PATH``: the folder (or, for record, the trace folder) a command writes."""
    return typer.Option("--out", "-o", metavar="PATH", help=help)


def trust_code(help: str) -> OptionInfo:
    """``--trust-code`` (or ``GCBENCH_TRUST_CODE=1``): let a suite file import the user code it names (run, converge)."""
    return typer.Option("--trust-code", envvar="GCBENCH_TRUST_CODE", help=help)


def compressor_option(help: str) -> OptionInfo:
    """``--compressor``/``-c SPEC``, repeatable: one compressor, name or name:key=value,..."""
    return typer.Option("--compressor", "-c", metavar="SPEC", help=help)


def all_flag(help: str) -> OptionInfo:
    """``--all``: every one of what the command would otherwise choose for you (advise: every registered compressor,
    not the baselines and one member of each family; report --html: every run, not only the newest)."""
    return typer.Option("--all", help=help)


def force(help: str) -> OptionInfo:
    """``--force``: run even when the estimated memory exceeds this machine's."""
    return typer.Option("--force", help=help)


def model(help: str, metavar: str = "MODEL") -> OptionInfo:
    """``--model``: a zoo model, ``hf:NAME`` or package.module:factory (bench and advise: a zoo NAME)."""
    return typer.Option("--model", metavar=metavar, help=help)


#: ``--trace PATH``: a recorded trace folder as the gradient source
trace = _with_help("--trace", "PATH")


def workers(help: str, metavar: str = "INT") -> OptionInfo:
    """``--workers``: one count (run, compare, record, train) or a comma LIST to sweep (simulate, advise)."""
    return typer.Option("--workers", metavar=metavar, help=help)


#: ``--steps INT``
steps = _with_help("--steps", "INT")
#: ``--seed INT``
seed = _with_help("--seed", "INT")
#: ``--device NAME``: cpu, cuda (or auto where a suite allows it)
device = _with_help("--device", "NAME")
#: ``--plan FILE``: a compression plan (gcbench.plan), wherever a compressor spec is taken (the same as -c plan:FILE)
plan = _with_help("--plan", "FILE")
#: ``--convergence PATH``: a results file of `gcbench converge` a recommendation is held to (compare, advise)
convergence = _with_help("--convergence", "PATH")


#: ``--loop open|closed``: what a live model steps with between measured steps (run, compare)
Loop = Annotated[str | None, typer.Option("--loop", metavar="NAME", help=(
    "Live sources: open (the model steps with the workers' dense mean; default) or closed (each compressor's own model "
    "steps with its compressed aggregate: what training with it sees)."))]


#: ``--granularity NAME``: what one compression covers (layer, bucket, model)
granularity = _with_help("--granularity", "NAME")


def repeats(help: str, hidden: bool = False) -> OptionInfo:
    """``--repeats INT``: fidelity draws (run, compare); bench's hidden deprecated spelling of ``--rounds``."""
    return typer.Option("--repeats", metavar="INT", hidden=hidden, help=help)


#: ``--rounds INT``: timed rounds per case (compare, bench, advise)
rounds = _with_help("--rounds", "INT")
#: ``--threads INT``: torch threads (bench) or per worker (train)
threads = _with_help("--threads", "INT")
#: ``--batch-size INT``
batch_size = _with_help("--batch-size", "INT")
#: ``--bandwidth LIST``: link bandwidths in Gbit/s to sweep (simulate, advise)
bandwidth = _with_help("--bandwidth", "LIST")
#: ``--compute-ms FLOAT``: compute time of one step; range checked by gcbench.predict.network
compute_ms = _with_help("--compute-ms", "FLOAT")


def baseline(metavar: str, help: str, *short: str) -> OptionInfo:
    """``--baseline``: a stored bench file (bench), a run to compare against (report, also ``-b``), or the all-reduce
    advise claims speed-ups against (``bf16``/``fp32``)."""
    return typer.Option("--baseline", *short, metavar=metavar, help=help)


def csv_path(metavar: str, help: str) -> OptionInfo:
    """``--csv``: where CSV goes (report: a folder of four tables; advise and collectives: one file)."""
    return typer.Option("--csv", metavar=metavar, help=help)


#: ``--kernels PATH``: a bench file of ``gcbench bench --model`` whose kernel times price a step (advise, report)
kernels = _with_help("--kernels", "PATH")
#: ``--threshold FLOAT``: the relative change that counts (bench: a slow-down, report: unchanged below it)
threshold = _with_help("--threshold", "FLOAT")


def fail_on_regression(help: str, negatable: bool = False) -> OptionInfo:
    """``--fail-on-regression``: exit 1 when the regression gate fails (bench also takes ``--no-fail-on-regression``)."""
    flag = "--fail-on-regression/--no-fail-on-regression" if negatable else "--fail-on-regression"
    return typer.Option(flag, help=help)
