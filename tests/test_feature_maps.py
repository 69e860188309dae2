"""Feature maps: the Taylor map's kernel identity and dimension, signs, shapes and gradients;
the theory around it (the multinomial expansion, exponential Gram matrices and their rank, the
remainder and attention-error bounds, the signs of truncated exponentials, the second-order
layouts), Taylor-p attention, the positive maps, and input validation."""

import itertools
import math

import pytest
import sympy as sp
import torch

from linattn_core import kernel_attention, softmax_attention
from linattn_core.feature_maps import (
    elu_plus_one,
    exp_gram,
    exp_remainder_bound,
    identity,
    multi_indices,
    outer_product_features,
    relu,
    taylor,
    taylor_attention,
    taylor_dim,
    truncated_exp,
    truncated_exp_roots,
)
from linattn_core.testing import assert_close, random_qkv, relative_error

F64 = torch.float64


def alpha_factorial(alpha):
    return math.prod(map(math.factorial, alpha))


# --- the truncated exponential and the Taylor map -----------------------------------------


def test_truncated_exp_is_the_exponential_series():
    t = torch.linspace(-3.0, 3.0, 61, dtype=F64)
    assert torch.equal(truncated_exp(t, 0), torch.ones_like(t))
    assert_close(truncated_exp(t, 2), 1 + t + t**2 / 2, rtol=1e-15)
    assert_close(truncated_exp(t, 30), t.exp(), rtol=1e-14)
    assert truncated_exp(t[None, :, None], 3).shape == (1, 61, 1)


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


@pytest.mark.parametrize(("d", "order"), [(1, 4), (2, 5), (3, 3), (7, 2)])
def test_multi_indices_are_the_distinct_alphas_by_degree(d, order):
    alphas = multi_indices(d, order)
    assert len(alphas) == len(set(alphas)) == taylor_dim(d, order)
    assert all(len(alpha) == d and min(alpha, default=0) >= 0 for alpha in alphas)
    degrees = [sum(alpha) for alpha in alphas]
    assert degrees == sorted(degrees) and degrees[-1] == order


def test_taylor_features_are_the_weighted_monomials_of_the_multi_indices():
    d, order = 3, 3
    q = sp.symbols("q1:4")
    point = {q[0]: 0.5, q[1]: -1.25, q[2]: 2.0}
    monomials = [
        sp.Mul(*[x**e for x, e in zip(q, alpha, strict=True)]) / sp.sqrt(alpha_factorial(alpha))
        for alpha in multi_indices(d, order)
    ]
    expected = torch.tensor([float(m.subs(point)) for m in monomials], dtype=F64)
    x = torch.tensor([0.5, -1.25, 2.0], dtype=F64)
    assert_close(taylor(x, order=order), expected, rtol=1e-14)


def test_taylor_features_are_ordered_by_degree():
    x = torch.tensor([[2.0, -3.0]], dtype=F64)
    assert torch.equal(taylor(x, order=0), torch.ones(1, 1, dtype=F64))
    assert torch.equal(taylor(x, order=1), torch.tensor([[1.0, 2.0, -3.0]], dtype=F64))
    quadratic = torch.tensor([[4.0 / math.sqrt(2), -6.0, 9.0 / math.sqrt(2)]], dtype=F64)
    assert_close(taylor(x, order=2)[:, 3:], quadratic, rtol=1e-15)


@pytest.mark.parametrize(("d", "order"), [(2, 4), (3, 3), (4, 2)])
def test_multinomial_theorem_symbolically(d, order):
    q, k = sp.symbols(f"q1:{d + 1}"), sp.symbols(f"k1:{d + 1}")
    dot = sum(a * b for a, b in zip(q, k, strict=True))
    expansion = sum(
        sp.factorial(order)
        / alpha_factorial(alpha)
        * sp.Mul(*[(a * b) ** e for a, b, e in zip(q, k, alpha, strict=True)])
        for alpha in multi_indices(d, order)
        if sum(alpha) == order
    )
    assert sp.expand(dot**order - expansion) == 0


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


def test_taylor_keeps_dtype_and_has_gradients():
    x32, _, _ = random_qkv(n=3, d=4, dtype=torch.float32)
    assert taylor(x32).dtype == torch.float32
    x, _, _ = random_qkv(2, n=3, d=3)
    assert torch.autograd.gradcheck(lambda x: taylor(x, order=3), [x.requires_grad_()])


# --- rank: positive definite Gram matrices, no finite feature map ---------------------------


@pytest.mark.parametrize(("d", "n"), [(1, 2), (1, 4), (2, 6), (3, 8), (8, 12), (16, 16)])
def test_exp_gram_of_distinct_points_is_positive_definite(d, n):
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(10 * d + n), dtype=F64)
    gram = exp_gram(x / d**0.25)
    eigenvalues = torch.linalg.eigvalsh(gram)
    assert eigenvalues[0] > 1e-12 * eigenvalues[-1]
    assert int(torch.linalg.matrix_rank(gram)) == n
    assert int(torch.linalg.cholesky_ex(gram).info) == 0


def test_exp_gram_shape_and_a_repeated_point_makes_it_singular():
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(3), dtype=F64)
    assert_close(exp_gram(x), torch.exp(x @ x.T), rtol=1e-15)
    assert exp_gram(torch.stack([x, x, x])).shape == (3, 5, 5)
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
    x = torch.randn(30, 2, generator=torch.Generator().manual_seed(4), dtype=F64)
    features = taylor(x, order=order)
    assert int(torch.linalg.matrix_rank(features @ features.mT)) == taylor_dim(2, order)
    assert int(torch.linalg.matrix_rank(exp_gram(x))) == 30


@pytest.mark.parametrize("order", [1, 2, 3, 4, 5])
def test_any_m_feature_map_is_off_by_at_least_the_next_eigenvalue(order):
    x = torch.randn(40, 2, generator=torch.Generator().manual_seed(5), dtype=F64)
    gram, features = exp_gram(x), taylor(x, order=order)
    eigenvalues = torch.linalg.eigvalsh(gram).flip(0)  # decreasing
    error = torch.linalg.matrix_norm(gram - features @ features.mT, ord=2)
    assert error >= eigenvalues[taylor_dim(2, order)]


def test_an_infinite_taylor_series_does_not_rule_out_a_finite_map():
    x = torch.linspace(-2.0, 2.0, 9, dtype=F64)
    gram = torch.exp(x[:, None] + x[None, :])  # exp(x + y) = eˣ·eʸ: one feature
    assert_close(gram, torch.outer(x.exp(), x.exp()), rtol=1e-14)
    assert int(torch.linalg.matrix_rank(gram)) == 1


def test_cholesky_rows_are_an_exact_map_on_a_finite_set():
    x = torch.randn(10, 4, generator=torch.Generator().manual_seed(6), dtype=F64)
    factor = torch.linalg.cholesky(exp_gram(x))
    assert_close(factor @ factor.mT, exp_gram(x), rtol=1e-13)


# --- truncation errors ----------------------------------------------------------------------


@pytest.mark.parametrize("order", range(9))
def test_remainder_bound(order):
    t = torch.linspace(-8.0, 8.0, 1601, dtype=F64)
    error = (t.exp() - truncated_exp(t, order)).abs()
    bound = exp_remainder_bound(t, order)
    assert bool((error <= bound + 1e-14 * t.abs().exp()).all())  # + float64 round-off
    assert_close(
        bound, t.abs() ** (order + 1) / math.factorial(order + 1) * t.exp().clamp(min=1), rtol=1e-15
    )


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
    q, k, v = random_qkv(n=96, d=d, seed=1)
    q, k = math.sqrt(0.5) * q, math.sqrt(0.5) * k  # scores q·k/√d of standard deviation 1/2
    exact_kernel = torch.exp(q @ k.mT / math.sqrt(d))
    exact_attention = softmax_attention(q, k, v)
    kernel_errors, attention_errors = [], []
    for order in range(5):
        phi_q, phi_k = taylor(q / d**0.25, order=order), taylor(k / d**0.25, order=order)
        kernel_errors.append(relative_error(phi_q @ phi_k.mT, exact_kernel))
        attention_errors.append(relative_error(taylor_attention(q, k, v, order), exact_attention))
    assert all(b < 0.6 * a for a, b in itertools.pairwise(kernel_errors))
    assert all(b < 0.6 * a for a, b in itertools.pairwise(attention_errors))


# --- signs of the truncated exponential -----------------------------------------------------


def test_second_order_truncation_is_at_least_one_half():
    grid = torch.linspace(-50.0, 50.0, 100_001, dtype=F64)
    values = truncated_exp(grid, 2)
    assert_close(values, ((1 + grid) ** 2 + 1) / 2, rtol=1e-15)
    assert bool((values >= 0.5).all())
    assert float(grid[values.argmin()]) == pytest.approx(-1.0, abs=1e-3)


@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_even_truncations_are_positive_with_minimum_at_the_odd_root(m):
    (root,) = truncated_exp_roots(2 * m - 1)
    minimum = float(root ** (2 * m)) / math.factorial(2 * m)
    assert minimum > 0
    grid = torch.linspace(-20.0, 20.0, 400_001, dtype=F64)
    assert float(truncated_exp(grid, 2 * m).min()) == pytest.approx(minimum, rel=1e-8)
    assert truncated_exp_roots(2 * m).numel() == 0


@pytest.mark.parametrize(
    ("order", "expected_root"), [(1, -1.0), (3, -1.5961), (5, -2.1806), (7, -2.7590)]
)
def test_odd_truncations_have_one_negative_root(order, expected_root):
    roots = truncated_exp_roots(order)
    assert roots.shape == (1,) and roots.dtype == F64
    assert float(roots[0]) == pytest.approx(expected_root, abs=1e-4)
    assert abs(float(truncated_exp(roots, order)[0])) < 1e-12
    grid = torch.linspace(-10.0, 10.0, 20_001, dtype=F64)
    values = truncated_exp(grid, order)
    assert bool((values.diff() > 0).all())  # strictly increasing: T' = T_(order-1) > 0
    assert torch.equal(values < 0, grid < roots[0])


def test_truncated_exp_roots_of_order_zero_and_high_orders():
    assert truncated_exp_roots(0).shape == (0,)
    for order in range(1, 12):
        roots = truncated_exp_roots(order)
        assert roots.numel() == order % 2
        assert bool((truncated_exp(roots, order).abs() < 1e-9).all())


@pytest.mark.parametrize(("order", "t", "expected"), [(1, -2.0, -1.0), (3, -3.0, -2.0)])
def test_odd_order_similarities_can_be_negative(order, t, expected):
    q, k = torch.tensor([t], dtype=F64), torch.tensor([1.0], dtype=F64)
    assert math.isclose((taylor(q, order=order) @ taylor(k, order=order)).item(), expected)


@pytest.mark.parametrize("order", [0, 2, 4])
def test_even_order_similarities_are_positive(order):
    t = torch.linspace(-12.0, 12.0, 241, dtype=F64)[:, None]  # q·k = t for k = 1
    similarities = taylor(t, order=order) @ taylor(torch.ones(1, dtype=F64), order=order)
    assert bool((similarities > 0).all())


def test_first_order_denominators_are_n_times_one_plus_query_dot_mean_key():
    n, d = 256, 16
    q, k, v = random_qkv(n=n, d=d, seed=2)
    k = k + 3.0 * torch.eye(d, dtype=F64)[0]  # keys share a direction
    q_tilde, k_tilde = q / d**0.25, k / d**0.25
    denominators = taylor(q_tilde, order=1) @ taylor(k_tilde, order=1).sum(0)
    assert_close(denominators, n * (1 + q_tilde @ k_tilde.mean(0)), rtol=1e-12)
    assert bool((denominators < 0).any())
    out = taylor_attention(q, k, v, 1)
    assert out.norm(dim=-1).max() > v.norm(dim=-1).max()  # not a convex combination
    even = taylor(q_tilde, order=2) @ taylor(k_tilde, order=2).sum(0)
    assert bool((even >= n / 2).all())


def test_taylor2_weight_ratio_is_at_most_twice_t2_of_the_score_bound():
    q, k, _ = random_qkv(n=48, d=16, seed=7)
    q, k = math.sqrt(3) * q, math.sqrt(3) * k  # scores q·k/√d of standard deviation 3
    scores = q @ k.mT / 4
    r = scores.abs().max(dim=-1).values  # per row
    weights = taylor_attention(q, k, torch.eye(48, dtype=F64), 2)
    ratio = weights.max(dim=-1).values / weights.min(dim=-1).values
    assert bool((ratio <= 2 * truncated_exp(r, 2) * (1 + 1e-12)).all())
    softmax_ratio = torch.exp(scores.max(-1).values - scores.min(-1).values)
    assert bool((softmax_ratio <= torch.exp(2 * r) * (1 + 1e-12)).all())


# --- Taylor-p attention and the second-order layouts ----------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    ("batch", "n", "d", "d_v", "order"), [((), 9, 4, 3, 2), ((2, 3), 17, 5, 2, 3)]
)
def test_taylor_attention_is_kernel_attention_with_taylor_features(batch, n, d, d_v, order, causal):
    q, k, v = random_qkv(*batch, n=n, d=d, d_v=d_v, seed=order, positive=True)
    for scale, root in [(None, d**-0.25), (0.3, 0.3**0.5)]:
        expected = kernel_attention(
            taylor(root * q, order=order), taylor(root * k, order=order), v, causal=causal, eps=0
        )
        out = taylor_attention(q, k, v, order, causal=causal, scale=scale)
        assert_close(out, expected, rtol=1e-12)


def test_taylor_attention_of_high_order_is_softmax_attention():
    q, k, v = random_qkv(n=20, d=3, seed=8)
    q, k = q / 2, k / 2  # scores of standard deviation 1/4
    for causal in (False, True):
        exact = softmax_attention(q, k, v, causal=causal)
        assert_close(taylor_attention(q, k, v, 16, causal=causal), exact, rtol=1e-8)


@pytest.mark.parametrize("d", [1, 3, 16])
def test_outer_product_layout_gives_the_same_kernel(d):
    q, k, _ = random_qkv(n=9, d=d, seed=d)
    outer = outer_product_features(q) @ outer_product_features(k).mT
    assert_close(outer, taylor(q) @ taylor(k).mT, rtol=1e-13)
    assert outer_product_features(q).shape[-1] == 1 + d + d * d
    assert taylor_dim(d, 2) == 1 + d + d * (d + 1) // 2


# --- the positive maps and validation -------------------------------------------------------


def test_positive_maps():
    x = torch.linspace(-5.0, 5.0, 101, dtype=F64)
    expected = torch.where(x > 0, x + 1, torch.exp(x))
    assert_close(elu_plus_one(x), expected, rtol=1e-15)
    assert bool((elu_plus_one(x) > 0).all())
    assert torch.equal(relu(x), x.clamp(min=0))
    assert identity(x) is x


Q, K, V = random_qkv(n=4, d=3)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: truncated_exp(1.0, 2), TypeError, "truncated_exp: t must be a torch.Tensor"),
        (lambda: truncated_exp(Q, 2.0), TypeError, "truncated_exp: order must be a non-negative"),
        (lambda: multi_indices(-1, 2), ValueError, "multi_indices: d must be a non-negative int"),
        (lambda: exp_remainder_bound(Q, -1), ValueError, "exp_remainder_bound: order must be"),
        (lambda: truncated_exp_roots(1.0), TypeError, "truncated_exp_roots: order must be"),
        (lambda: exp_gram(Q[0]), ValueError, "exp_gram: x must have at least 2 dimensions"),
        (lambda: outer_product_features(Q.long()), TypeError, "outer_product_features: x must"),
        (lambda: taylor_attention(Q, K[:3], V), ValueError, "taylor_attention: k must have the"),
        (lambda: taylor_attention(Q, K, V, -1), ValueError, "order must be a non-negative int"),
        (lambda: taylor_attention(Q, K, V, scale=0.0), ValueError, "scale must be a positive"),
    ],
)
def test_validation(call, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        call()
