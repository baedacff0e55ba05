"""all_finite: a finite sum proves every element finite; an overflowing sum of finite values is scanned."""

import pytest
import torch

from gcbench.core.finite import all_finite


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_finite_values_are_finite(dtype):
    assert all_finite(torch.randn(10_000, generator=torch.Generator().manual_seed(0)).to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_one_non_finite_element_is_found(dtype, bad):
    t = torch.ones(1001, dtype=dtype)
    t[537] = bad
    assert not all_finite(t)


def test_plus_and_minus_inf_do_not_cancel():
    assert not all_finite(torch.tensor([float("inf"), float("-inf"), 1.0]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_sum_that_overflows_on_finite_values_is_still_finite(dtype):
    big = torch.full((64,), torch.finfo(dtype).max, dtype=dtype)
    assert torch.isinf(big.sum())  # the sum proves nothing here: the elements must be scanned
    assert all_finite(big)
    big[3] = float("nan")
    assert not all_finite(big)


def test_empty_and_integer_tensors():
    assert all_finite(torch.empty(0))
    assert all_finite(torch.arange(10))
