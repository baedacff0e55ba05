"""Loading the runs a report shows: results files into :class:`LoadedRun`, a baseline comparison, a folder's index.

``gcbench report`` reads only results files (docs/usage.md, "Measuring and comparing"), so any old run can
be re-rendered.  Which runs to load (named ones, a folder, the newest with an index of the rest) and
the facts of a run's header (:func:`run_facts`: suite, date, status, machine, version) are here;
how the loaded runs become tables is :mod:`gcbench.report.views`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gcbench.core.errors import ResultsError
from gcbench.report.numbers import or_unknown, size_text
from gcbench.results.converge_thin import thin_curves
from gcbench.results.judge import Comparison
from gcbench.results.parse import as_record
from gcbench.results.record import RunRecord
from gcbench.results.run_diff import compare_runs
from gcbench.results.run_record import RunCase
from gcbench.results.store import DEFAULT_RUNS_DIR, list_runs, load_run, resolve_run


def _read(path: Path) -> RunRecord:
    """A results file as a report reads it: a convergence file's curves cut to a bounded number of points while it is
    decoded (:mod:`gcbench.results.converge_thin`; every number the report prints is the summary's, kept exact), so a
    report's memory does not grow with how often a long run was evaluated.  Reports never write results files."""
    return load_run(path, object_hook=thin_curves)


@dataclass(frozen=True)
class LoadedRun:
    """A results file and its typed record (a results dict handed here is validated into one)."""

    path: Path
    data: RunRecord
    #: a convergence file priced on named clusters (``report --cluster``:
    #: :class:`gcbench.predict.advice_model.Pricing`); None: reported by steps only
    pricing: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "data", as_record(self.data))

    @property
    def run_id(self) -> str:
        return str(self.data.run_id or self.path.stem)

    @property
    def cases(self) -> list[Any]:
        return list(self.data.cases)

    @property
    def kind(self) -> str:
        """``run``, ``compare``, ``train``, ``bench`` or ``converge`` (what wrote the file; decides how it is rendered)."""
        return self.data.kind


def load_runs(refs: Sequence[str] | None = None, runs_dir: str | Path = DEFAULT_RUNS_DIR,
              on_skip: Callable[[ResultsError], None] | None = None) -> list[LoadedRun]:
    """The named runs (path, id, id prefix or ``latest``), or every run in ``runs_dir`` oldest first.

    A file the user named must load (its :class:`ResultsError` is raised).  When the whole folder
    is read and ``on_skip`` is given, a file that does not load is skipped and its error handed
    to ``on_skip`` (the CLI prints a warning naming it): one corrupt file must not hide every
    other run.  A folder in which no file loads is an error.
    """
    if refs:
        return [LoadedRun(p, _read(p)) for p in (resolve_run(r, runs_dir) for r in refs)]
    paths = list_runs(runs_dir)
    if not paths:
        raise ResultsError(f"no results files in {runs_dir} (run `gcbench run` first, or name results files)")
    loaded = []
    for p in paths:
        try:
            loaded.append(LoadedRun(p, _read(p)))
        except ResultsError as exc:
            if on_skip is None:
                raise
            on_skip(exc)
    if not loaded:
        raise ResultsError(f"no readable results files in {runs_dir} ({len(paths)} skipped)")
    return loaded


def newest_with_index(runs_dir: str | Path, on_skip: Callable[[ResultsError], None] | None = None) -> ReportInput:
    """The newest readable run of ``runs_dir`` to render, and the facts of every run for an index of them.

    What ``report --html`` shows by default: rendering a run in full (tables, a dozen plots) costs
    about 0.75 s, so a folder of 1,000 runs took over 12 minutes; listing one costs its loading
    only (:func:`run_facts` of its header and case statuses), and only the newest run is kept in
    memory.  Files that do not load are handed to ``on_skip`` as :func:`load_runs` does.
    """
    paths = list_runs(runs_dir)
    if not paths:
        raise ResultsError(f"no results files in {runs_dir} (run `gcbench run` first, or name results files)")
    index: list[dict[str, str]] = []
    history: list[dict[str, Any]] = []
    newest: LoadedRun | None = None
    for p in paths:
        try:
            run = LoadedRun(p, _read(p))
        except ResultsError as exc:
            if on_skip is None:
                raise
            on_skip(exc)
            continue
        facts = run_facts(run)
        index.append(facts)
        history.append(_history_point(run, facts))
        newest = run  # oldest first: the last that loads is the newest
    if newest is None:
        raise ResultsError(f"no readable results files in {runs_dir} ({len(paths)} skipped)")
    mine = history[-1]
    same = [h for h in history if h["kind"] == mine["kind"] and h["suite"] == mine["suite"] and h["values"]]
    return ReportInput([newest], [newest], index=index, history=same if len(same) > 1 else None)


#: the metric the history view follows across runs: the kernels' speed, what a change of code moves (asv's view)
HISTORY_METRIC = "comp_over_copy"


def _history_point(run: LoadedRun, facts: dict[str, str]) -> dict[str, Any]:
    """One run's entry of the history view: its id, date, suite and each case's :data:`HISTORY_METRIC`."""
    suite = run.data.suite
    values = {}
    if run.kind in ("run", "compare"):
        values = {f"{c.source_label} / {c.label}": c.metric(HISTORY_METRIC) for c in run.cases if isinstance(c, RunCase) and c.ok}
    return {"run": run.run_id, "date": facts.get("date", ""), "kind": run.kind,
            "suite": getattr(suite, "name", None), "commit": facts.get("commit", ""), "values": values}


def latest_run(runs_dir: str | Path = DEFAULT_RUNS_DIR) -> Path:
    return resolve_run("latest", runs_dir)


def short_commit(run: RunRecord) -> str:
    git = run.git
    if git is None or not git.commit:
        return "—"
    return git.commit[:10] + ("+dirty" if git.dirty else "")


def machine_text(run: RunRecord) -> str:
    env = run.env
    parts = [or_unknown(env.cpu_model), f"{or_unknown(env.cpu_count)} cores", f"{or_unknown(env.torch_threads)} threads"]
    if env.cuda_device:
        parts.append(env.cuda_device)
    return ", ".join(parts)


def run_facts(run: LoadedRun) -> dict[str, str]:
    """The summary facts of one run, as text (unescaped)."""
    d = run.data
    cases = run.cases
    failed = sum(1 for c in cases if not c.ok)
    suite = d.suite
    env = d.env
    if run.kind == "bench":
        # a bench file has no suite: its settings are the sizes, repeats and threads
        sizes = ", ".join(size_text(n) for n in (suite.sizes if suite else None) or [])
        models = sorted({str(c.model) for c in cases if getattr(c, "model", None)})
        what = f"sizes {sizes}" if sizes else (f"whole steps of {', '.join(models)}" if models else "sizes not recorded")
        suite_text = (f"bench: {what}, at least {or_unknown(suite and suite.repeats)} timed rounds, "
                      f"{or_unknown(suite and suite.threads)} threads")
    elif run.kind == "converge":
        tasks = sorted({c.source_label for c in cases})
        suite_text = f"convergence of {', '.join(tasks) or '?'}"
    else:
        suite_text = f"{or_unknown(suite and suite.name)} (hash {or_unknown(d.suite_hash)[:8]})"
    status = d.status
    if status is None and run.kind == "bench":
        status = "complete"  # `gcbench bench` wrote its file once, after every case, without a status before 0.2
    return {
        "run": run.run_id,
        "kind": run.kind,
        "suite": suite_text,
        "date": or_unknown(d.created_utc),
        "status": str(status or "?"),
        "cases": f"{len(cases) - failed} ok" + (f", {failed} failed" if failed else ""),
        "machine": machine_text(d),
        "device": or_unknown(env.device),
        "gcbench": or_unknown(d.gcbench_version),
        "commit": short_commit(d),
        "torch": or_unknown(env.torch),
        "file": str(run.path),
    }


@dataclass
class ReportInput:
    """What ``gcbench report`` renders: the runs, the ones shown in detail, and the comparison with a baseline if asked."""

    loaded: list[LoadedRun]
    detailed: list[LoadedRun]
    comparison: Comparison | None = None
    #: every run of the folder as :func:`run_facts` (oldest first) when only the newest is loaded (``report --html``)
    index: list[dict[str, str]] | None = None
    #: the runs of the newest one's suite, oldest first, with each case's :data:`HISTORY_METRIC` (``report --html``)
    history: list[dict[str, Any]] | None = None


def report_input(refs: Sequence[str] | None, runs_dir: str | Path, baseline: str | None = None, threshold: float = 0.05,
                 alpha: float = 0.05, finished_only: bool = False,
                 on_skip: Callable[[ResultsError], None] | None = None, newest_only: bool = False) -> ReportInput:
    """Load the runs a report shows; with ``baseline``, compare the newest (or the one named) against it.

    ``finished_only``: "latest" never picks an unfinished run (what a regression gate needs).  A
    comparison report details the new run only: the baseline's values are in the comparison rows.
    ``newest_only`` (no runs named, no baseline): only the newest run is kept, every other one
    listed in :attr:`ReportInput.index` (:func:`newest_with_index`).
    """
    if baseline is None and newest_only and not refs:
        return newest_with_index(runs_dir, on_skip)
    if baseline is None:
        loaded = load_runs(refs, runs_dir, on_skip=on_skip)
        return ReportInput(loaded, loaded)
    if refs and len(refs) > 1:
        raise ResultsError(f"--baseline compares one run against the baseline; got {len(refs)} runs")
    base_path = resolve_run(baseline, runs_dir)
    new_path = resolve_run(refs[0] if refs else "latest", runs_dir, finished=finished_only, on_skip=on_skip)
    if base_path.resolve() == new_path.resolve():
        raise ResultsError(f"the baseline and the run to compare are the same file ({new_path}); name the run to compare")
    loaded = [LoadedRun(base_path, _read(base_path)), LoadedRun(new_path, _read(new_path))]
    comparison = compare_runs(loaded[0].data, loaded[1].data, threshold, alpha)
    for r in loaded:
        if not r.data.finished:
            comparison.notes.append(f"{r.run_id} did not finish (status {r.data.status!r}): its cases may be incomplete")
    return ReportInput(loaded, loaded[1:], comparison)
