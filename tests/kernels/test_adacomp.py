"""AdaComp's kernels against the torch encode: bin maxima and counts, the fields packed straight into
the stream, the residue, and the decode read straight from the stream — special values included."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gcbench import kernels
from gcbench.compressors.adacomp import adacomp_fast_encode, adacomp_torch_encode, count_width, index_width
from tests.kernels.helpers import same_bits, t3


def special(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(gradient, residue): heavy-tailed, with exact zeros, −0.0, a residue cancelling the gradient in
    places, ±inf and a NaN in their own bins."""
    x, e = t3(n, seed), t3(n, seed + 1) * np.float32(0.5)
    x[::97] = 0.0
    e[::97] = -0.0
    e[5::89] = -x[5::89]  # G = 0 exactly
    if n > 3000:
        x[1003] = np.inf
        x[2001] = -np.inf
        e[2999] = np.nan
    return x, e


@pytest.mark.parametrize("L", [1, 7, 50, 500, 40_000])
def test_bin_stats_equal_torch(L: int) -> None:
    x, e = special(300_007, L)
    gmax, counts = kernels.adacomp_bin_stats(e, x, L)
    g = torch.from_numpy(e) + torch.from_numpy(x)
    nbins = -(-g.numel() // L)
    pad = torch.nn.functional.pad(g.abs(), (0, nbins * L - g.numel()))
    ref_max = pad.reshape(nbins, L).amax(1)
    thr = ref_max.repeat_interleave(L)[: g.numel()]
    sel = (((g + torch.from_numpy(x)).abs() >= thr) & (g != 0)).to(torch.int64)
    ref_counts = torch.nn.functional.pad(sel, (0, nbins * L - g.numel())).reshape(nbins, L).sum(1)
    assert np.array_equal(np.isnan(gmax), ref_max.isnan().numpy())
    ok = ~np.isnan(gmax)
    assert same_bits(gmax[ok], ref_max.numpy()[ok])
    assert np.array_equal(counts, ref_counts.numpy())


@pytest.mark.parametrize("quantize", ["sign_scale", "none"])
@pytest.mark.parametrize("L", [1, 3, 50, 500, 70_001])
def test_encode_and_decode_equal_torch_with_special_values(quantize: str, L: int) -> None:
    x, e = special(210_011, 3 * L)
    e[2999] = 0.0  # a NaN would make the scale NaN everywhere: the finite values are checked here
    body, gq, residue = adacomp_torch_encode(torch.from_numpy(x), torch.from_numpy(e), L, quantize)
    e_fast = e.copy()
    fast_body, decoded = adacomp_fast_encode(x, e_fast, L, quantize, True)
    assert fast_body.tobytes() == body.numpy().tobytes()
    assert decoded is not None and same_bits(decoded, gq.numpy())
    assert same_bits(e_fast, residue.numpy())
    e_plain = e.copy()  # without the decoded tensor (the compress path's loop)
    plain_body, none = adacomp_fast_encode(x, e_plain, L, quantize, False)
    assert none is None and plain_body.tobytes() == body.numpy().tobytes() and same_bits(e_plain, residue.numpy())
    sign_mode = quantize == "sign_scale"
    nbins = -(-x.size // L)
    cw, ew = count_width(L), index_width(L) + (1 if sign_mode else 0)
    head = 4 if sign_mode else 0
    counts = kernels.read_fixed(fast_body[head:], cw, nbins)
    nsel = int(counts.sum())
    stream = fast_body[head : head + (nbins * cw + nsel * ew + 7) // 8]
    vals = fast_body[head + stream.size :].view("<f4").astype(np.float32)
    scale = float(fast_body[:4].view("<f4")[0]) if sign_mode else 0.0
    out, bad = kernels.adacomp_decode(stream, nbins * cw, ew, counts, L, sign_mode, scale, vals, x.size)
    assert bad == 0
    assert same_bits(out.numpy(), gq.numpy())


def test_decode_counts_fields_outside_their_bin() -> None:
    L, d = 50, 120  # bins of 50, 50 and 20
    counts = np.array([1, 0, 2], np.int64)
    fields = np.array([(49 << 1) | 1, (19 << 1), (20 << 1)], np.int64)  # the last points past the short bin
    stream = kernels.pack_fields(fields, 7)
    out, bad = kernels.adacomp_decode(stream, 0, 7, counts, L, True, 2.0, np.zeros(0, np.float32), d)
    assert bad == 1
    expect = np.zeros(d, np.float32)
    expect[49], expect[100 + 19] = -2.0, 2.0
    assert same_bits(out.numpy(), expect)
