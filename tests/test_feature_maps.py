"""Feature maps: the Taylor map's kernel identity and dimension, signs, shapes and gradients."""

import math

import pytest
import torch

from linattn_core.feature_maps import elu_plus_one, identity, relu, taylor, taylor_dim
from linattn_core.testing import assert_close, random_qkv


def truncated_exp(t, order):
    return sum(t**p / math.factorial(p) for p in range(order + 1))


@pytest.mark.parametrize("d", [1, 2, 3, 5])
@pytest.mark.parametrize("order", [0, 1, 2, 3, 4])
def test_taylor_kernel_is_the_truncated_exponential(order, d):
    q, k, _ = random_qkv(n=7, d=d, seed=order)
    similarities = taylor(q, order=order) @ taylor(k, order=order).mT  # (7, 7)
    assert_close(similarities, truncated_exp(q @ k.mT, order), rtol=1e-12)


@pytest.mark.parametrize("d", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("order", [0, 1, 2, 3, 4])
def test_taylor_dim_counts_the_features(order, d):
    assert taylor_dim(d, order) == math.comb(d + order, order)
    assert taylor_dim(d, order) == sum(math.comb(d + p - 1, p) for p in range(order + 1))
    x, _, _ = random_qkv(2, 3, n=4, d=d)
    assert taylor(x, order=order).shape == (2, 3, 4, taylor_dim(d, order))


def test_taylor_features_are_ordered_by_degree():
    x = torch.tensor([[2.0, -3.0]], dtype=torch.float64)
    assert torch.equal(taylor(x, order=0), torch.ones(1, 1, dtype=torch.float64))
    assert torch.equal(taylor(x, order=1), torch.tensor([[1.0, 2.0, -3.0]], dtype=torch.float64))
    quadratic = torch.tensor([[4.0 / math.sqrt(2), -6.0, 9.0 / math.sqrt(2)]], dtype=torch.float64)
    assert_close(taylor(x, order=2)[:, 3:], quadratic, rtol=1e-15)


@pytest.mark.parametrize("order", [0, 2, 4])
def test_even_order_similarities_are_positive(order):
    t = torch.linspace(-12.0, 12.0, 241, dtype=torch.float64)[:, None]  # q·k = t for k = 1
    similarities = taylor(t, order=order) @ taylor(torch.ones(1, dtype=torch.float64), order=order)
    assert bool((similarities > 0).all())


@pytest.mark.parametrize(("order", "t", "expected"), [(1, -2.0, -1.0), (3, -3.0, -2.0)])
def test_odd_order_similarities_can_be_negative(order, t, expected):
    q, k = torch.tensor([t], dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64)
    assert math.isclose((taylor(q, order=order) @ taylor(k, order=order)).item(), expected)


def test_taylor_keeps_dtype_and_has_gradients():
    x32, _, _ = random_qkv(n=3, d=4, dtype=torch.float32)
    assert taylor(x32).dtype == torch.float32
    x, _, _ = random_qkv(2, n=3, d=3)
    assert torch.autograd.gradcheck(lambda x: taylor(x, order=3), [x.requires_grad_()])


def test_positive_maps():
    x = torch.linspace(-5.0, 5.0, 101, dtype=torch.float64)
    expected = torch.where(x > 0, x + 1, torch.exp(x))
    assert_close(elu_plus_one(x), expected, rtol=1e-15)
    assert bool((elu_plus_one(x) > 0).all())
    assert torch.equal(relu(x), x.clamp(min=0))
    assert identity(x) is x
