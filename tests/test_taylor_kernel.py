"""The identities of chapter 2 (the exponential kernel and its Taylor expansion) that
test_feature_maps.py does not cover: the multinomial expansion, positive definiteness and rank
of exponential Gram matrices, the remainder and attention-error bounds, the signs of truncated
exponentials, the second-order layouts, and the FLOP formulas."""

import itertools
import math

import numpy as np
import pytest
import sympy as sp
import torch
from numpy.polynomial import Polynomial
from torch.utils.flop_counter import FlopCounterMode

from linattn_core import linear_attention, softmax_attention
from linattn_core.feature_maps import taylor, taylor_dim
from linattn_core.testing import assert_close, random_qkv, relative_error

f64 = torch.float64


def truncated_exp(t, order):
    return sum(t**n / math.factorial(n) for n in range(order + 1))


def multi_indices(d, order):
    """Every α ∈ ℕ^d with |α| = order."""
    return [
        tuple(variables.count(i) for i in range(d))
        for variables in itertools.combinations_with_replacement(range(d), order)
    ]


def alpha_factorial(alpha):
    return math.prod(map(math.factorial, alpha))


def exp_gram(x):
    return torch.exp(x @ x.mT)


def taylor_attention(q, k, v, order):
    """Taylor-order linear attention on q/d^¼, k/d^¼, normalized exactly (eps = 0)."""
    scale = q.shape[-1] ** -0.25
    phi_q, phi_k = taylor(scale * q, order=order), taylor(scale * k, order=order)
    return linear_attention(phi_q, phi_k, v, eps=0.0)


def scaled_qkv(tau, *, n, d, seed):
    """q, k with entries √τ·N(0, 1), so that the scores q·k/√d have standard deviation ≈ τ."""
    q, k, v = random_qkv(n=n, d=d, seed=seed)
    return math.sqrt(tau) * q, math.sqrt(tau) * k, v


def real_roots(polynomial):
    roots = polynomial.roots()
    return np.sort(roots[np.abs(roots.imag) < 1e-9].real)


def taylor_polynomial(order):
    return Polynomial([1 / math.factorial(n) for n in range(order + 1)])


# The infinite feature map


@pytest.mark.parametrize(("d", "order"), [(2, 4), (3, 3), (4, 2)])
def test_multinomial_theorem_symbolically(d, order):
    q, k = sp.symbols(f"q1:{d + 1}"), sp.symbols(f"k1:{d + 1}")
    dot = sum(a * b for a, b in zip(q, k, strict=True))
    expansion = sum(
        sp.factorial(order)
        / alpha_factorial(alpha)
        * sp.Mul(*[(a * b) ** e for a, b, e in zip(q, k, alpha, strict=True)])
        for alpha in multi_indices(d, order)
    )
    assert sp.expand(dot**order - expansion) == 0


def test_taylor_features_equal_the_weighted_monomials():
    d, order = 3, 3
    q = sp.symbols("q1:4")
    point = {q[0]: 0.5, q[1]: -1.25, q[2]: 2.0}
    monomials = [
        sp.Mul(*[x**e for x, e in zip(q, alpha, strict=True)]) / sp.sqrt(alpha_factorial(alpha))
        for n in range(order + 1)
        for alpha in multi_indices(d, n)
    ]
    expected = torch.tensor([float(m.subs(point)) for m in monomials], dtype=f64)
    x = torch.tensor([0.5, -1.25, 2.0], dtype=f64)
    assert_close(taylor(x, order=order), expected, rtol=1e-14)


def test_infinite_map_has_norm_exp_of_the_squared_norm():
    x, _, _ = random_qkv(n=5, d=3, seed=1)
    x = 0.5 * x
    features = taylor(x, order=14)
    assert_close((features**2).sum(-1), torch.exp((x**2).sum(-1)), rtol=1e-12)


@pytest.mark.parametrize("d", [1, 4, 16])
def test_lower_orders_are_prefixes_of_higher_orders(d):
    x, _, _ = random_qkv(n=5, d=d, seed=d)
    full = taylor(x, order=4)
    for order in range(4):
        assert_close(full[..., : taylor_dim(d, order)], taylor(x, order=order), rtol=1e-15)


# Rank: positive definite Gram matrices, no finite feature map


@pytest.mark.parametrize(("d", "n"), [(1, 2), (1, 4), (2, 6), (3, 8), (8, 12), (16, 16)])
def test_exp_gram_of_distinct_points_is_positive_definite(d, n):
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(10 * d + n), dtype=f64)
    gram = exp_gram(x / d**0.25)
    eigenvalues = torch.linalg.eigvalsh(gram)
    assert eigenvalues[0] > 1e-12 * eigenvalues[-1]
    assert int(torch.linalg.matrix_rank(gram)) == n
    assert int(torch.linalg.cholesky_ex(gram).info) == 0


def test_a_repeated_point_makes_the_gram_matrix_singular():
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(3), dtype=f64)
    x[4] = x[0]
    assert int(torch.linalg.matrix_rank(exp_gram(x))) == 4


def test_exp_factors_through_the_gaussian_kernel():
    x, y, _ = random_qkv(n=7, d=4, seed=2)
    half_sq_x, half_sq_y = (x**2).sum(-1) / 2, (y**2).sum(-1) / 2
    gaussian = torch.exp(-(torch.cdist(x, y) ** 2) / 2)
    factored = half_sq_x.exp()[:, None] * gaussian * half_sq_y.exp()[None, :]
    assert_close(factored, torch.exp(x @ y.mT), rtol=1e-12)


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_finite_maps_have_bounded_rank_and_the_exp_gram_does_not(order):
    x = torch.randn(30, 2, generator=torch.Generator().manual_seed(4), dtype=f64)
    features = taylor(x, order=order)
    assert int(torch.linalg.matrix_rank(features @ features.mT)) == taylor_dim(2, order)
    assert int(torch.linalg.matrix_rank(exp_gram(x))) == 30


@pytest.mark.parametrize("order", [1, 2, 3, 4, 5])
def test_any_m_feature_map_is_off_by_at_least_the_next_eigenvalue(order):
    x = torch.randn(40, 2, generator=torch.Generator().manual_seed(5), dtype=f64)
    gram, features = exp_gram(x), taylor(x, order=order)
    eigenvalues = torch.linalg.eigvalsh(gram).flip(0)  # decreasing
    error = torch.linalg.matrix_norm(gram - features @ features.mT, ord=2)
    assert error >= eigenvalues[taylor_dim(2, order)]


def test_an_infinite_taylor_series_does_not_rule_out_a_finite_map():
    x = torch.linspace(-2.0, 2.0, 9, dtype=f64)
    gram = torch.exp(x[:, None] + x[None, :])  # exp(x + y) = eˣ·eʸ: one feature
    assert_close(gram, torch.outer(x.exp(), x.exp()), rtol=1e-14)
    assert int(torch.linalg.matrix_rank(gram)) == 1


def test_cholesky_rows_are_an_exact_map_on_a_finite_set():
    x = torch.randn(10, 4, generator=torch.Generator().manual_seed(6), dtype=f64)
    factor = torch.linalg.cholesky(exp_gram(x))
    assert_close(factor @ factor.mT, exp_gram(x), rtol=1e-13)


# Truncation errors


@pytest.mark.parametrize("order", range(9))
def test_remainder_bound(order):
    t = torch.linspace(-8.0, 8.0, 1601, dtype=f64)
    error = (t.exp() - truncated_exp(t, order)).abs()
    bound = t.abs() ** (order + 1) * t.clamp(min=0).exp() / math.factorial(order + 1)
    assert bool((error <= bound + 1e-14 * t.abs().exp()).all())  # + float64 round-off


@pytest.mark.parametrize("order", [2, 3, 4, 5, 6])
def test_attention_error_bound(order):
    q, k, v = random_qkv(n=48, d=8, seed=4)
    q, k = 0.45 * q, 0.45 * k
    r = float((q @ k.mT / math.sqrt(8)).abs().max())
    eps = r ** (order + 1) * math.exp(r) / math.factorial(order + 1)
    assert eps < 1
    error = (taylor_attention(q, k, v, order) - softmax_attention(q, k, v)).norm(dim=-1).max()
    assert error <= 2 * eps / (1 - eps) * v.norm(dim=-1).max()


def test_attention_and_kernel_errors_decrease_with_order_at_fixed_scale():
    d = 16
    q, k, v = scaled_qkv(0.5, n=96, d=d, seed=1)
    exact_kernel = torch.exp(q @ k.mT / math.sqrt(d))
    exact_attention = softmax_attention(q, k, v)
    kernel_errors, attention_errors = [], []
    for order in range(5):
        phi_q, phi_k = taylor(q / d**0.25, order=order), taylor(k / d**0.25, order=order)
        kernel_errors.append(relative_error(phi_q @ phi_k.mT, exact_kernel))
        attention_errors.append(relative_error(taylor_attention(q, k, v, order), exact_attention))
    assert all(b < 0.6 * a for a, b in itertools.pairwise(kernel_errors))
    assert all(b < 0.6 * a for a, b in itertools.pairwise(attention_errors))


# Signs of the truncated exponential


def test_second_order_truncation_is_at_least_one_half():
    t = sp.Symbol("t", real=True)
    assert sp.expand(truncated_exp(t, 2) - ((1 + t) ** 2 + 1) / 2) == 0
    grid = torch.linspace(-50.0, 50.0, 100_001, dtype=f64)
    values = truncated_exp(grid, 2)
    assert bool((values >= 0.5).all())
    assert float(grid[values.argmin()]) == pytest.approx(-1.0, abs=1e-3)


@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_even_truncations_are_positive_with_minimum_at_the_odd_root(m):
    (root,) = real_roots(taylor_polynomial(2 * m - 1))
    minimum = root ** (2 * m) / math.factorial(2 * m)
    assert minimum > 0
    grid = np.linspace(-20.0, 20.0, 400_001)
    assert taylor_polynomial(2 * m)(grid).min() == pytest.approx(minimum, rel=1e-8)
    assert real_roots(taylor_polynomial(2 * m)).size == 0


@pytest.mark.parametrize(
    ("order", "expected_root"), [(1, -1.0), (3, -1.5961), (5, -2.1806), (7, -2.7590)]
)
def test_odd_truncations_have_one_negative_root(order, expected_root):
    roots = real_roots(taylor_polynomial(order))
    assert roots.size == 1
    assert roots[0] == pytest.approx(expected_root, abs=1e-4)
    grid = np.linspace(-10.0, 10.0, 20_001)
    values = taylor_polynomial(order)(grid)
    assert np.all(np.diff(values) > 0)  # strictly increasing: T' = T_(order-1) > 0
    assert np.all((values < 0) == (grid < roots[0]))


def test_first_order_denominators_are_n_times_one_plus_query_dot_mean_key():
    n, d = 256, 16
    q, k, v = random_qkv(n=n, d=d, seed=2)
    k = k + 3.0 * torch.eye(d, dtype=f64)[0]  # keys share a direction
    q_tilde, k_tilde = q / d**0.25, k / d**0.25
    denominators = taylor(q_tilde, order=1) @ taylor(k_tilde, order=1).sum(0)
    assert_close(denominators, n * (1 + q_tilde @ k_tilde.mean(0)), rtol=1e-12)
    assert bool((denominators < 0).any())
    out = linear_attention(taylor(q_tilde, order=1), taylor(k_tilde, order=1), v, eps=0.0)
    assert out.norm(dim=-1).max() > v.norm(dim=-1).max()  # not a convex combination
    even = taylor(q_tilde, order=2) @ taylor(k_tilde, order=2).sum(0)
    assert bool((even >= n / 2).all())


def test_taylor2_weight_ratio_is_at_most_twice_t2_of_the_score_bound():
    q, k, _ = scaled_qkv(3.0, n=48, d=16, seed=7)
    scores = q @ k.mT / 4
    r = scores.abs().max(dim=-1).values  # per row
    weights = taylor_attention(q, k, torch.eye(48, dtype=f64), 2)
    ratio = weights.max(dim=-1).values / weights.min(dim=-1).values
    assert bool((ratio <= 2 * truncated_exp(r, 2) * (1 + 1e-12)).all())
    softmax_ratio = torch.exp(scores.max(-1).values - scores.min(-1).values)
    assert bool((softmax_ratio <= torch.exp(2 * r) * (1 + 1e-12)).all())


# The second-order map in practice and its cost


def outer_product_features(x):
    quadratic = (x[..., :, None] * x[..., None, :]).flatten(-2) / math.sqrt(2)
    return torch.cat([torch.ones_like(x[..., :1]), x, quadratic], dim=-1)


@pytest.mark.parametrize("d", [1, 3, 16])
def test_outer_product_layout_gives_the_same_kernel(d):
    q, k, _ = random_qkv(n=9, d=d, seed=d)
    outer = outer_product_features(q) @ outer_product_features(k).mT
    assert_close(outer, taylor(q) @ taylor(k).mT, rtol=1e-13)
    assert outer_product_features(q).shape[-1] == 1 + d + d * d
    assert taylor_dim(d, 2) == 1 + d + d * (d + 1) // 2


def softmax_flops(n, d, d_v):
    return 2 * n * n * d + 2 * n * n * d_v


def linear_flops(n, features, d_v):
    return 4 * n * features * (d_v + 1)


def crossover(d, d_v, features):
    return 2 * features * (d_v + 1) / (d + d_v)


def counted_flops(function, *args):
    with FlopCounterMode(display=False) as counter:
        function(*args)
    return counter.get_total_flops()


@pytest.mark.parametrize(("n", "d", "d_v"), [(100, 16, 16), (257, 8, 5), (64, 32, 64), (1, 4, 3)])
def test_flop_formulas_match_the_counted_matrix_products(n, d, d_v):
    q, k, v = random_qkv(2, n=n, d=d, d_v=d_v, seed=n)
    phi_q, phi_k = taylor(q / d**0.25), taylor(k / d**0.25)
    assert counted_flops(softmax_attention, q, k, v) == 2 * softmax_flops(n, d, d_v)
    assert counted_flops(linear_attention, phi_q, phi_k, v) == 2 * linear_flops(
        n, taylor_dim(d, 2), d_v
    )


def test_crossover_length():
    for d, d_v in [(16, 16), (64, 64), (16, 64), (128, 32)]:
        features = taylor_dim(d, 2)
        n_star = crossover(d, d_v, features)
        assert math.isclose(softmax_flops(n_star, d, d_v), linear_flops(n_star, features, d_v))
    assert crossover(64, 64, taylor_dim(64, 2)) == pytest.approx(2178.515625)
    assert crossover(64, 64, taylor_dim(64, 2)) == pytest.approx((65**2) * 66 / 128)
