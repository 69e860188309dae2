"""Tests of `linattn_core.maths.probability` and of chapter 6's statements about random vectors:
moments of linear maps (by Monte Carlo, against standard errors), the Gaussian density, sums
and linear maps of random unit vectors, and the Monte Carlo helpers themselves."""

import functools
import math

import numpy as np
import pytest
import sympy as sp
import torch

from linattn_core.maths.probability import (
    assert_monte_carlo,
    check_monte_carlo,
    gaussian_density,
    mean_norm_of_sum,
    monte_carlo_estimate,
    sphere_norm_moments,
    unit_columns,
    unit_rows,
)
from linattn_core.testing import assert_close

f64 = torch.float64
Z_MAX = 5.0  # one entry fails by chance with probability 6e-7


def unit_sphere_draws(count, n, seed):
    """count points uniform on the unit sphere of R^n, float64 `(count, n)`."""
    generator = torch.Generator().manual_seed(seed)
    return unit_rows(torch.randn(count, n, generator=generator, dtype=f64))


# ---------------------------------------------------------------- Monte Carlo helpers


def test_monte_carlo_estimate():
    mean, se = monte_carlo_estimate([1.0, 2.0, 3.0, 4.0])
    assert mean.item() == 2.5 and math.isclose(se.item(), math.sqrt(5 / 12), rel_tol=1e-15)
    mean, se = monte_carlo_estimate(np.arange(12.0).reshape(4, 3))  # entrywise over draws
    assert mean.tolist() == [4.5, 5.5, 6.5] and se.shape == (3,)
    with pytest.raises(ValueError, match=r"^monte_carlo_estimate: samples must hold at least 2"):
        monte_carlo_estimate([1.0])


def test_assert_monte_carlo_passes_and_fails():
    samples = torch.tensor([0.9, 1.1, 1.0, 1.0], dtype=f64)
    assert_monte_carlo(samples, 1.0)
    assert_monte_carlo(torch.ones(5, dtype=f64), 1.0)  # zero standard error, exact mean
    with pytest.raises(AssertionError, match=r"^E\[x\]: largest \|z\| = 4\.90 ≥ z_max 4"):
        assert_monte_carlo(samples, 1.2, name="E[x]")
    with pytest.raises(AssertionError, match=r"largest \|z\| = inf"):
        assert_monte_carlo(torch.ones(5, dtype=f64), 1.0 + 1e-15)
    with pytest.raises(ValueError, match=r"^assert_monte_carlo: exact must have the shape of one"):
        assert_monte_carlo(torch.ones(5, 2, dtype=f64), torch.ones(3, dtype=f64))


def test_check_monte_carlo_prints_one_line(capsys):
    check_monte_carlo("scalar", [1.0, 2.0, 3.0, 4.0], 2.5)
    check_monte_carlo("matrix", np.ones((3, 2, 2)), np.ones((2, 2)), z_max=3.0)
    assert capsys.readouterr().out.splitlines() == [
        "✓ scalar: 2.500 ± 0.645 (Monte Carlo) vs 2.500",
        "✓ matrix: every entry within 3 s.e. of the formula",
    ]


# ---------------------------------------------------------------- moments of linear maps


def test_moment_identities_monte_carlo():
    rng = np.random.default_rng(18)
    S, n = 100_000, 3
    m = np.array([1.0, -2.0, 0.5])
    L = np.array([[1.0, 0.0, 0.0], [0.6, 0.8, 0.0], [-0.3, 0.4, 0.7]])
    M = L @ L.T
    x = m + (rng.exponential(size=(S, n)) - 1.0) @ L.T  # skewed, mean m, covariance M
    A, B = rng.standard_normal((2, n)), rng.standard_normal((4, n))
    a, b = rng.standard_normal(2), rng.standard_normal(4)
    Am, Bm = A @ m + a, B @ m + b
    check = functools.partial(assert_monte_carlo, z_max=Z_MAX)
    check(x @ A.T + a, Am)
    Ax_c = (x - m) @ A.T
    check(Ax_c[:, :, None] * Ax_c[:, None, :], A @ M @ A.T)
    F = rng.standard_normal((3, n))
    y = x @ F.T + rng.standard_normal((S, 3))
    By_c = (y - m @ F.T) @ B[:, :3].T
    check(Ax_c[:, :, None] * By_c[:, None, :], A @ M @ F.T @ B[:, :3].T)
    outer = (x @ A.T + a)[:, :, None] * (x @ B.T + b)[:, None, :]
    check(outer, A @ M @ B.T + np.outer(Am, Bm))
    check(x[:, :, None] * x[:, None, :], M + np.outer(m, m))
    c = rng.standard_normal(n)
    check(x * (x @ c)[:, None], (M + np.outer(m, m)) @ c)
    check((x @ c)[:, None] * x, c @ (M + np.outer(m, m)))
    check((x @ A.T)[:, :, None] * (x @ A.T)[:, None, :], A @ (M + np.outer(m, m)) @ A.T)
    check((x + c)[:, :, None] * (x + c)[:, None, :], M + np.outer(m + c, m + c))
    A2, B2 = rng.standard_normal((4, n)), rng.standard_normal((4, n))
    a2, b2 = rng.standard_normal(4), rng.standard_normal(4)
    check(
        np.sum((x @ A2.T + a2) * (x @ B2.T + b2), axis=1),
        np.trace(A2 @ M @ B2.T) + (A2 @ m + a2) @ (B2 @ m + b2),
    )
    check(np.sum(x * x, axis=1), np.trace(M) + m @ m)
    Cq = rng.standard_normal((n, n))
    check(np.einsum("si,ij,sj->s", x, Cq, x), np.trace(Cq @ M) + m @ Cq @ m)
    check(np.sum((x @ A2.T) ** 2, axis=1), np.trace(A2 @ M @ A2.T) + np.sum((A2 @ m) ** 2))
    check(np.sum((x + c) ** 2, axis=1), np.trace(M) + np.sum((m + c) ** 2))


def test_expectation_of_random_matrix_expression():
    rng = np.random.default_rng(19)
    EX = np.array([[1.0, -1.0, 0.5], [2.0, 0.0, -0.5]])
    X = EX + rng.standard_normal((50_000, 2, 3))
    A, B, C = rng.standard_normal((4, 2)), rng.standard_normal((3, 2)), rng.standard_normal((4, 2))
    assert_monte_carlo(A @ X @ B + C, A @ EX @ B + C, z_max=Z_MAX)


# ---------------------------------------------------------------- the Gaussian density


def test_gaussian_density_normalization_and_moments():
    mean = torch.tensor([0.5, -1.0], dtype=f64)
    cov = torch.tensor([[2.0, 0.8], [0.8, 1.0]], dtype=f64)
    det = torch.linalg.det
    assert_close(det(2 * math.pi * cov), (2 * math.pi) ** 2 * det(cov), rtol=1e-12)
    h = 0.02
    g1, g2 = torch.meshgrid(
        torch.arange(-12, 13, h, dtype=f64), torch.arange(-12, 11, h, dtype=f64), indexing="ij"
    )
    grid = torch.stack([g1.reshape(-1), g2.reshape(-1)], dim=1)
    w = gaussian_density(grid, mean, cov) * h * h
    assert_close(w.sum(), torch.tensor(1.0, dtype=f64), rtol=1e-10)
    assert_close(w @ grid, mean, rtol=1e-10)
    assert_close((grid * w[:, None]).T @ grid, cov + torch.outer(mean, mean), rtol=1e-10)


@pytest.mark.parametrize("d", [1, 2, 5])
def test_gaussian_density_matches_torch(d):
    generator = torch.Generator().manual_seed(d)
    G = torch.randn(d, d, generator=generator, dtype=f64)
    cov, mean = (
        G @ G.T + 0.5 * torch.eye(d, dtype=f64),
        torch.randn(d, generator=generator, dtype=f64),
    )
    mvn = torch.distributions.MultivariateNormal(mean, covariance_matrix=cov)
    pts = torch.randn(3, 7, d, generator=generator, dtype=f64)  # any leading dimensions
    assert_close(gaussian_density(pts, mean, cov).log(), mvn.log_prob(pts), rtol=1e-12)


def test_gaussian_density_validates():
    x, mean, cov = torch.zeros(4, 2, dtype=f64), torch.zeros(2, dtype=f64), torch.eye(2, dtype=f64)
    with pytest.raises(
        ValueError, match=r"^gaussian_density: mean must be \(d,\) and cov \(d, d\)"
    ):
        gaussian_density(x, torch.zeros(3, dtype=f64), cov)
    with pytest.raises(TypeError, match=r"^gaussian_density: cov must have the same dtype as x"):
        gaussian_density(x, mean, cov.float())


def test_gaussian_linear_map_moments():
    rng = np.random.default_rng(20)
    mean, cov = np.array([0.5, -1.0]), np.array([[2.0, 0.8], [0.8, 1.0]])
    x = mean + rng.standard_normal((100_000, 2)) @ np.linalg.cholesky(cov).T
    assert_monte_carlo(x, mean, z_max=Z_MAX)
    assert_monte_carlo((x - mean)[:, :, None] * (x - mean)[:, None, :], cov, z_max=Z_MAX)
    A, b = rng.standard_normal((3, 2)), rng.standard_normal(3)
    y = x @ A.T + b
    assert_monte_carlo(y, A @ mean + b, z_max=Z_MAX)
    yc = y - (A @ mean + b)
    assert_monte_carlo(yc[:, :, None] * yc[:, None, :], A @ cov @ A.T, z_max=Z_MAX)


# ---------------------------------------------------------------- random unit vectors


def test_unit_rows_and_columns():
    G = torch.randn(5, 3, 4, generator=torch.Generator().manual_seed(0), dtype=f64)
    ones = torch.ones(5, 3, dtype=f64)
    assert_close(torch.linalg.vector_norm(unit_rows(G), dim=-1), ones, rtol=1e-15)
    assert_close(
        torch.linalg.vector_norm(unit_columns(G), dim=-2), ones[:, :1] + 0 * G[:, 0], rtol=1e-15
    )
    with pytest.raises(ValueError, match=r"^unit_rows: x must have at least 2 dimensions"):
        unit_rows(torch.ones(3, dtype=f64))


def test_sum_of_unit_vectors_closed_forms():
    alpha, t = sp.symbols("alpha t", positive=True)
    half = sp.Rational(1, 2)
    expr = (
        2
        * sp.gamma(alpha + half)
        * sp.gamma(2 * alpha)
        / (sp.gamma(alpha) * sp.gamma(2 * alpha + half))
    )
    assert sp.simplify(expr.subs(alpha, half) - 4 / sp.pi) == 0
    assert sp.simplify(expr.subs(alpha, 1)) == sp.Rational(4, 3)
    assert sp.integrate(sp.sqrt(2 + 2 * t) / 2, (t, -1, 1)) == sp.Rational(4, 3)
    assert math.isclose(mean_norm_of_sum(2), 4 / math.pi, rel_tol=1e-12)
    for d in (100, 1000, 10000):
        assert abs(8 * d * (1 - mean_norm_of_sum(d) / math.sqrt(2)) - 1) < 2 / d
    assert all(mean_norm_of_sum(d) < math.sqrt(2) for d in range(2, 300))
    with pytest.raises(ValueError, match=r"^mean_norm_of_sum: d must be at least 2"):
        mean_norm_of_sum(1)


@pytest.mark.parametrize("d", [2, 3, 10, 64])
def test_sum_of_unit_vectors_monte_carlo(d):
    x, y = unit_sphere_draws(20_000, d, seed=d), unit_sphere_draws(20_000, d, seed=100 + d)
    z = torch.linalg.vector_norm(x + y, dim=1)
    assert_monte_carlo(z, mean_norm_of_sum(d), z_max=Z_MAX)
    assert_monte_carlo(z**2, 2.0, z_max=Z_MAX)


def test_sum_of_non_centred_unit_vectors_is_not_sqrt2():
    generator = torch.Generator().manual_seed(33)
    u1, u2 = (unit_rows(torch.rand(500, 1024, generator=generator, dtype=f64)) for _ in range(2))
    assert abs(torch.linalg.vector_norm(u1 + u2, dim=1).mean().item() - math.sqrt(3.5)) < 0.01


@pytest.mark.parametrize("k", [2, 5])
def test_sum_of_k_unit_vectors_mean_square(k):
    s = unit_sphere_draws(10_000 * k, 7, seed=k).reshape(10_000, k, 7).sum(dim=1)
    assert_monte_carlo((s**2).sum(1), float(k), z_max=Z_MAX)


def expected_norm_cases(seed):
    generator = torch.Generator().manual_seed(seed)

    def gaussian(*shape):
        return torch.randn(*shape, generator=generator, dtype=f64)

    return {
        "orthogonal": torch.linalg.qr(gaussian(60, 60))[0],
        "unit columns": unit_columns(gaussian(60, 60)),
        "unit rows square": unit_rows(gaussian(60, 60)),
        "unit rows under": unit_rows(gaussian(12, 60)),
        "unit rows over": unit_rows(gaussian(60, 12)),
    }


def test_isotropic_mean_square_norm_is_exact():
    for i, (name, A) in enumerate(expected_norm_cases(34).items()):
        m, n = A.shape
        mu, v = sphere_norm_moments(A)
        expected = {"unit rows under": m / n, "unit rows over": m / n}.get(name, 1.0)
        assert math.isclose(mu.item(), expected, rel_tol=1e-12)
        assert math.isclose(mu.item(), ((A**2).sum() / n).item(), rel_tol=1e-12)
        y2 = ((unit_sphere_draws(20_000, n, seed=i) @ A.T) ** 2).sum(1)
        if name == "orthogonal":
            assert torch.allclose(y2, torch.ones_like(y2)) and abs(v.item()) < 1e-12
        else:
            assert_monte_carlo(y2, mu, z_max=Z_MAX)
            assert_monte_carlo((y2 - mu) ** 2, v, z_max=Z_MAX)


def test_sphere_norm_moments_take_batches():
    cases = expected_norm_cases(1)
    square = torch.stack([cases[name] for name in ("orthogonal", "unit columns")])
    mu, v = sphere_norm_moments(square)
    assert mu.shape == v.shape == (2,)
    assert_close(
        torch.stack(sphere_norm_moments(cases["unit columns"])),
        torch.stack([mu[1], v[1]]),
        rtol=1e-14,
    )


def test_mean_norm_bracket_and_second_order_value():
    for i, A in enumerate(expected_norm_cases(35).values()):
        mu, v = (t.item() for t in sphere_norm_moments(A))
        y = torch.linalg.vector_norm(unit_sphere_draws(30_000, A.shape[1], seed=i) @ A.T, dim=1)
        mean, se = (t.item() for t in monte_carlo_estimate(y))
        se += 1e-12
        lower, upper = math.sqrt(mu) - v / (2 * mu**1.5), math.sqrt(mu)
        assert lower - 5 * se <= mean <= upper + 5 * se
        assert abs(mean - (math.sqrt(mu) - v / (8 * mu**1.5))) < 5 * se


def test_bracket_inequality_pointwise():
    s = np.linspace(0, 5, 10_001)
    assert np.all(s >= 1 + (s**2 - 1) / 2 - (s**2 - 1) ** 2 / 2 - 1e-12)


def test_sphere_fourth_moment():
    n = 9
    G = torch.randn(n, n, generator=torch.Generator().manual_seed(36), dtype=f64)
    M = G + G.T
    x = unit_sphere_draws(100_000, n, seed=36)
    q2 = torch.einsum("si,ij,sj->s", x, M, x) ** 2
    assert_monte_carlo(q2, (torch.trace(M) ** 2 + 2 * (M * M).sum()) / (n * (n + 2)), z_max=Z_MAX)
    assert_monte_carlo(
        x[:20_000, :, None] * x[:20_000, None, :], torch.eye(n, dtype=f64) / n, z_max=Z_MAX
    )


def test_mean_square_singular_value_is_not_the_expected_norm_when_underdetermined():
    generator = torch.Generator().manual_seed(37)
    for m, n in [(20, 100), (100, 100), (100, 20)]:
        A = unit_rows(torch.randn(m, n, generator=generator, dtype=f64))
        rms_singular_value = torch.linalg.svdvals(A).square().mean().sqrt().item()
        correct = math.sqrt(sphere_norm_moments(A)[0].item())
        assert math.isclose(correct, math.sqrt(m / n), rel_tol=1e-12)
        assert math.isclose(rms_singular_value, math.sqrt(m / min(m, n)), rel_tol=1e-12)
        assert math.isclose(rms_singular_value, correct, rel_tol=1e-12) == (m >= n)
