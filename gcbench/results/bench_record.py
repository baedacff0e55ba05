"""The ``bench`` kind of results file: one :class:`BenchCase` per (compressor, element count) of
:mod:`gcbench.measure.bench`.

The header and the timing parts it shares with run cases (:class:`~gcbench.results.record.Timing`,
:class:`~gcbench.results.record.XCopy`) are :mod:`gcbench.results.record`'s.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from gcbench.results.fields import Bool, Count, Int, Num, Str
from gcbench.results.record import Model, RunRecord, Timing, XCopy, finite


class TopkSpeedup(Model):
    speedup: Num


class BenchCase(Model):
    """One (compressor, element count) of ``gcbench bench``; a failed one holds its compressor, size and error."""

    compressor: Str
    label: Str | None = None
    params: dict[str, Any] | None = None
    version: Int | None = None
    numel: Int | None = None
    shape: list[Int] | None = None
    model: Str | None = None  # ``bench --model``: a whole step of this model's tensors (numel: its parameter count)
    tensors: Int | None = None  # ``bench --model``: how many tensors one step compresses
    threads: Int | None = None
    device: Str | None = None
    copy_: Timing | None = Field(default=None, alias="copy")
    compress: Timing | None = None
    decompress: Timing | None = None
    error: Any = None
    compress_x_copy: Num | None = None
    decompress_x_copy: Num | None = None
    gbps_compress: Num | None = None
    gbps_decompress: Num | None = None
    ratio: Num | None = None
    peak_extra_bytes: Num | None = None
    input_bytes: Num | None = None
    speedup_vs_reference: Num | None = None
    baseline_change: Num | None = None
    reference: Any = None
    vs_torch_topk: dict[str, TopkSpeedup] | None = None
    x_copy: dict[str, XCopy] | None = None  # per kernel: per-round ×copy, spread and flags (files before it: none)
    load_per_core: Num | None = None  # highest 1-minute load average per core seen while timing
    foreign_cpu: Num | None = None  # other processes' share of the machine's CPU while timing (the flag's load measure)
    traffic_bound: Num | None = None  # the compressor's declared traffic ÷ a copy's 8 bytes: the least ×copy it can take
    x_bound: Num | None = None  # median compress ×copy ÷ traffic_bound (1: at the memory-traffic bound; files before it: none)
    #: the caches could hold this case's copy (read + write under 4× the last-level cache): it moves between processes
    copy_cache_resident: Bool | None = None
    copy_cases: Int | None = None  # with copy_cache_resident: the cases of this size whose copies were compared
    copy_spread: Num | None = None  # with two or more such cases: their copy medians' max ÷ min
    copy_range_s: list[Num] | None = None  # and those medians' least and greatest
    processes: Count | None = None  # bench --processes: the fresh processes the case was timed in (None: one)

    @property
    def ok(self) -> bool:
        """Whether the record measured something (a failed one carries ``error``)."""
        return not self.error

    @property
    def name(self) -> str:
        """The row name: the label (the compressor, or ``name:key=value`` when the benchmark set parameters)."""
        return str(self.label or self.compressor)

    @property
    def error_text(self) -> str:
        return "" if self.error is None else str(self.error)

    def metric(self, name: str) -> float | None:
        """A number of the record by field name (``compress_x_copy``, ``ratio`` ...), or ``peak_over_input``."""
        if name == "peak_over_input":
            peak, size = finite(self.peak_extra_bytes), finite(self.input_bytes)
            return peak / size if peak is not None and size else None
        if name == "compress_ms":
            return finite(self.compress.median_s) if self.compress else None
        return finite(getattr(self, name, None)) if name in type(self).model_fields else None

    def process_medians(self, kernel: str) -> list[float]:
        """``kernel``'s ×copy per process (``bench --processes``); a case timed in one process: its median alone."""
        x = (self.x_copy or {}).get(kernel)
        if x is not None and x.process_medians:
            return [f for v in x.process_medians if (f := finite(v)) is not None]
        v = self.metric(f"{kernel}_x_copy")
        return [] if v is None else [v]



class BenchRecord(RunRecord):
    kind: Literal["bench"]
    cases: list[BenchCase]
