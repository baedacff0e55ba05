"""The torch path (what a CUDA tensor takes) gives the bytes of the kernels, run here on CPU tensors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gcbench import kernels
from gcbench.compressors import _sparse
from gcbench.core import codec
from gcbench.core.errors import PayloadError
from gcbench.core.params import INDEX_CODINGS
from tests.kernels.helpers import gen, t3


@pytest.fixture(autouse=True)
def threads() -> int:
    """Whole compressors here: torch's own thread count, once (the kernels' thread independence is checked elsewhere)."""
    return torch.get_num_threads()


# ----------------------------------------------------------------------------- the torch paths (non-CPU devices)


@pytest.mark.parametrize(("name", "params", "shape"), [
    ("topk", {"density": 0.002, "error_feedback": True}, (1100, 1000)),
    ("threshold", {"tau": 2.0}, (600, 700)),
    ("graddrop", {"scope": "layer"}, (600, 700)),
    ("graddrop", {"scope": "layer", "quantize": "2bit"}, (600, 700)),
    ("dgc", {}, (600, 700)),
    ("dgc", {"nesterov": True, "index_coding": "paper"}, (600, 700)),
    ("sdagc", {"lr_revision": True, "lambda_final": 2.0}, (600, 700)),
    ("adacomp", {}, (600, 700)),
    ("adacomp", {"quantize": "none"}, (600, 50, 3)),
])
def test_torch_path_gives_the_bytes_of_the_kernels(name: str, params: dict[str, object], shape: tuple[int, ...],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """What a CUDA tensor takes (the torch ops), run here on CPU tensors: the same bytes and states."""
    from gcbench.compressors import registry

    comp = registry.create(name, **params)
    fast_state, torch_state = comp.init_state(1), comp.init_state(1)
    xs = [torch.from_numpy(t3(math.prod(shape), 400 + t).reshape(shape)) for t in range(3)]
    fast_out = [comp.compress_and_decode(x, fast_state) for x in xs]
    monkeypatch.setattr(kernels, "fast_cpu", lambda *tensors: False)
    torch_out = [comp.compress_and_decode(x, torch_state) for x in xs]
    for (p1, d1), (p2, d2) in zip(fast_out, torch_out, strict=True):
        assert p1.to_bytes() == p2.to_bytes()
        assert torch.equal(d1, d2)
    assert fast_state.tensors.keys() == torch_state.tensors.keys()
    for key, value in fast_state.tensors.items():
        assert torch.equal(value, torch_state.tensors[key]), key


def test_powersgd_torch_path_agrees_within_float64_rounding(monkeypatch: pytest.MonkeyPatch) -> None:
    from gcbench.compressors import registry

    comp = registry.create("powersgd", rank=3)
    s1, s2 = comp.init_state(2), comp.init_state(2)
    xs = [torch.from_numpy(t3(640 * 500, 500 + t).reshape(640, 500)) for t in range(3)]
    out1 = [comp.compress_and_decode(x, s1)[1] for x in xs]
    monkeypatch.setattr(kernels, "fast_cpu", lambda *tensors: False)
    out2 = [comp.compress_and_decode(x, s2)[1] for x in xs]
    for a, b in zip(out1, out2, strict=True):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-5 * float(a.abs().max()))
    assert torch.allclose(s1.tensors["residual"], s2.tensors["residual"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("coding", INDEX_CODINGS)
def test_index_codings_match_codec(coding: str) -> None:
    d = 3_000_017
    idx = np.sort(gen(12).choice(d, 40_000, replace=False))
    data = _sparse.encode_indices(idx, d, coding)
    assert np.array_equal(data, codec.encode_indices(idx, d, coding))
    assert np.array_equal(_sparse.decode_indices(data, d, idx.size, coding, "test"), idx)
    if coding == "fixed":
        with pytest.raises(PayloadError, match="truncated"):
            _sparse.decode_indices(data[:-1], d, idx.size, coding, "test")
        big = codec.pack_bits(np.array([5, d + 3]), codec.index_width(d))  # a field past the tensor
        with pytest.raises(PayloadError, match="outside"):
            _sparse.decode_indices(big, d, 2, coding, "test")
