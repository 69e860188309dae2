"""Tests of `linattn_core.maths.random_matrices`: singular values of stacks of matrices, Gordon's
bounds for Gaussian matrices, the mean of the χ distribution, and the spectral norm of Xavier
initialization; Monte Carlo statements are checked against their standard errors."""

import math

import numpy as np
import pytest
import torch

from linattn_core.maths.probability import assert_monte_carlo, monte_carlo_estimate, unit_rows
from linattn_core.maths.random_matrices import (
    expected_gaussian_norm,
    singular_values_batch,
    xavier_bound,
)
from linattn_core.testing import assert_close

f64 = torch.float64


def test_singular_values_via_gram_matrix():
    stack = torch.as_tensor(np.random.default_rng(29).standard_normal((3, 40, 12)))
    s = singular_values_batch(stack)
    assert s.shape == (3, 12)
    assert_close(s, torch.linalg.svdvals(stack), rtol=1e-10)
    with pytest.raises(ValueError, match=r"^singular_values_batch: A must have at least 2"):
        singular_values_batch(torch.ones(3, dtype=f64))


@pytest.mark.parametrize("m", [16, 64, 256])
def test_gordon_bounds(m):
    rng = np.random.default_rng(m)
    n, draws = 16, 200
    s = singular_values_batch(torch.as_tensor(rng.standard_normal((draws, m, n))))
    (mean_max, se_max), (mean_min, se_min) = (monte_carlo_estimate(s[:, i]) for i in (0, -1))
    assert mean_max - 3 * se_max <= math.sqrt(m) + math.sqrt(n)
    assert mean_min + 3 * se_min >= math.sqrt(m) - math.sqrt(n)
    assert (s[:, 0] > math.sqrt(m) + math.sqrt(n) + 1).double().mean() <= math.exp(-0.5)
    assert (s[:, -1] < math.sqrt(m) - math.sqrt(n) - 1).double().mean() <= math.exp(-0.5)


def test_expected_gaussian_norm_gap_is_decreasing():
    """c_k = √k − E‖g_k‖ > 0 decreases, which gives E‖g_m‖ − E‖g_n‖ >= √m − √n in Gordon's bound."""
    gaps = np.array([math.sqrt(k) - expected_gaussian_norm(k) for k in range(1, 2001)])
    assert np.all(gaps > 0) and np.all(np.diff(gaps) < 0)
    assert math.isclose(expected_gaussian_norm(1), math.sqrt(2 / math.pi), rel_tol=1e-14)
    rng = np.random.default_rng(38)
    for k in (1, 4, 30):
        norms = np.linalg.norm(rng.standard_normal((50_000, k)), axis=1)
        assert_monte_carlo(norms, expected_gaussian_norm(k), z_max=5.0)
    with pytest.raises(ValueError, match=r"^expected_gaussian_norm: k must be a positive int"):
        expected_gaussian_norm(0)


@pytest.mark.slow
def test_xavier_spectral_bound():
    for a, b in [(16, 1008), (128, 896), (512, 512), (768, 3072), (100, 100)]:
        assert xavier_bound(a, b) <= 2 + 1e-12
        assert (abs(xavier_bound(a, b) - 2) < 1e-12) == (a == b)
    assert math.isclose(xavier_bound(768, 3072), math.sqrt(2) * 3 / math.sqrt(5))
    rng = np.random.default_rng(31)
    for a, b in [(32, 96), (128, 128), (200, 40)]:
        W = torch.as_tensor(rng.standard_normal((20, max(a, b), min(a, b)))) * math.sqrt(
            2 / (a + b)
        )
        mean, se = monte_carlo_estimate(singular_values_batch(W)[:, 0])
        assert mean - 3 * se <= xavier_bound(a, b)
        W1 = torch.as_tensor(rng.standard_normal((20, max(a, b), min(a, b)))) / (
            math.sqrt(a) + math.sqrt(b)
        )
        mean1, se1 = monte_carlo_estimate(singular_values_batch(W1)[:, 0])
        assert mean1 - 3 * se1 <= 1
    with pytest.raises(ValueError, match=r"^xavier_bound: n_out must be a positive finite number"):
        xavier_bound(4, 0)


def test_torch_xavier_normal_variance():
    gen = torch.Generator().manual_seed(30)
    W = torch.nn.init.xavier_normal_(torch.empty(512, 128, dtype=f64), generator=gen)
    target = math.sqrt(2 / (512 + 128))
    assert abs(W.std().item() / target - 1) < 5 / math.sqrt(2 * W.numel())


def test_xavier_typical_versus_worst_case_gain():
    rng = np.random.default_rng(5)
    n = 128
    W = torch.as_tensor(rng.standard_normal((n, n))) / math.sqrt(n)
    x = unit_rows(torch.as_tensor(rng.standard_normal((4000, n))))
    assert_monte_carlo(((x @ W.T) ** 2).sum(1), (W**2).sum() / n, z_max=5.0)
    assert torch.linalg.svdvals(W)[0] > 1.8
