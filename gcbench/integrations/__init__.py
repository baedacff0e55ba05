"""One-line gradient recording from the trainers people use: Hugging Face ``Trainer`` and PyTorch Lightning.

Each callback wraps :class:`gcbench.sources.recorder.GradientRecorder`: at the selected optimizer steps it
saves every parameter's gradient after accumulation (and, for the HF ``Trainer``, after clipping)
and before the optimizer step — what a gradient compressor in that job would be given — into a
trace folder that ``gcbench run --trace`` replays.

* :mod:`gcbench.integrations.hf` — ``GradientRecorderCallback`` for ``transformers.Trainer``
  (extra ``gcbench[hf]``);
* :mod:`gcbench.integrations.lightning` — ``GradientRecorderCallback`` for ``lightning.pytorch.Trainer``
  (extra ``gcbench[lightning]``).

The submodules import their framework at import time (their callbacks must subclass its callback
class), so import the one you use; ``import gcbench`` never imports either framework.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from gcbench.core.errors import ParamError


def check_steps(steps: Iterable[int] | None) -> frozenset[int] | None:
    """Validate a step selection early (at construction, not at the first training step)."""
    if steps is None:
        return None
    try:
        chosen = frozenset(int(s) for s in steps)
    except (TypeError, ValueError):
        raise ParamError(f"recorder callback: steps must be integers (optimizer step numbers), got {steps!r}") from None
    if any(s < 0 for s in chosen):
        raise ParamError(f"recorder callback: steps must be >= 0, got {sorted(chosen)[:8]}")
    return chosen


def check_out(out_dir: Path | str) -> Path:
    """The trace folder as a Path (it is prepared when training starts, on the main process)."""
    if not str(out_dir):
        raise ParamError("recorder callback: out_dir must name a trace folder")
    return Path(out_dir)
