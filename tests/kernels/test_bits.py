"""Bit-field packing against the NumPy packer."""

from __future__ import annotations

import numpy as np
import pytest

from gcbench import kernels
from gcbench.core import codec

# ----------------------------------------------------------------------------- bit fields


@pytest.mark.parametrize("width", [1, 2, 3, 5, 6, 8, 9, 13, 21, 31, 32, 33, 47, 63, 64])
def test_pack_fields_across_parts_matches_numpy_packer(width: int) -> None:
    n = 70_001  # two parts, ragged last group
    g = np.random.default_rng(width)
    top = 2**width if width < 64 else 2**64
    v = g.integers(0, min(top, 2**63), size=n, dtype=np.uint64)
    if width == 64:
        v[::3] |= np.uint64(1 << 63)
    v[0] = np.uint64(top - 1)
    packed = kernels.pack_fields(v, width)
    np.testing.assert_array_equal(packed, codec._pack_bits_numpy(v, width))
    np.testing.assert_array_equal(kernels.unpack_fields(packed, width, n).view(np.uint64), v)


def test_pack_fields_masks_values_to_the_width() -> None:
    v = np.array([0b1111, 0b1010, -1], np.int64)
    assert kernels.pack_fields(v, 2).tolist() == [0b111011]  # 3, 2, 3 (two bits of each)

