"""Tests of `linattn_core.maths.linear_systems`: LU with and without pivoting, triangular solves,
the solvability test, least squares and the LMS algorithm (batch and online, and the delta rule
as online LMS), in float64 on seeded random inputs."""

import math

import numpy as np
import pytest
import sympy as sp
import torch

from linattn_core.maths.linear_systems import (
    back_substitution,
    batch_lms,
    forward_substitution,
    lu_no_pivoting,
    lu_partial_pivoting,
    online_lms_mean_square,
    solvability,
)
from linattn_core.maths.probability import assert_monte_carlo
from linattn_core.testing import assert_close, relative_error

SEEDS = [0, 1, 2]
RTOL = 1e-11
f64 = torch.float64


# ---------------------------------------------------------------- PA = LU


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", [1, 2, 5, 9])
def test_lu_partial_pivoting(seed, n):
    A = torch.as_tensor(np.random.default_rng(seed).standard_normal((n, n)))
    P, L, U = lu_partial_pivoting(A)
    assert_close(P @ A, L @ U, rtol=RTOL)
    assert torch.equal(L, L.tril()) and torch.equal(L.diagonal(), torch.ones(n, dtype=f64))
    assert torch.equal(U, U.triu())
    assert L.abs().max() <= 1.0
    assert torch.equal(P @ P.T, torch.eye(n, dtype=f64))
    P_ref, L_ref, U_ref = torch.linalg.lu(A)  # LAPACK: A = P_ref L U, so our P is P_refᵀ
    assert torch.equal(P, P_ref.T)
    assert_close(torch.stack([L, U]), torch.stack([L_ref, U_ref]), rtol=RTOL)


def test_lu_pivoting_handles_singular_matrix():
    A = torch.tensor([[0.0, 1.0, 2.0], [0.0, 3.0, 4.0], [0.0, 5.0, 7.0]], dtype=f64)
    P, L, U = lu_partial_pivoting(A)  # zero first column: the step is skipped
    assert_close(P @ A, L @ U, rtol=RTOL)
    assert U[0, 0] == 0


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", [1, 3, 5])
def test_determinant_from_lu(seed, n):
    A = torch.as_tensor(np.random.default_rng(seed).standard_normal((n, n)))
    P, _, U = lu_partial_pivoting(A)
    assert_close(torch.linalg.det(P) * U.diagonal().prod(), torch.linalg.det(A), rtol=RTOL)


def test_permutation_has_no_lu_without_row_exchange():
    l21, u11, u12, u22 = sp.symbols("l21 u11 u12 u22")
    LU = sp.Matrix([[1, 0], [l21, 1]]) * sp.Matrix([[u11, u12], [0, u22]])
    assert sp.solve(list(LU - sp.Matrix([[0, 1], [1, 0]])), [l21, u11, u12, u22]) == []


def test_tiny_pivot_needs_pivoting():
    A = torch.tensor([[1e-20, 1.0], [1.0, 1.0]], dtype=f64)
    L0, U0 = lu_no_pivoting(A)
    assert relative_error(L0 @ U0, A) > 0.1
    P, L, U = lu_partial_pivoting(A)
    assert relative_error(L @ U, P @ A) < 1e-15


@pytest.mark.parametrize("seed", SEEDS)
def test_lu_without_pivoting_when_the_pivots_are_large(seed):
    A = torch.as_tensor(np.random.default_rng(seed).standard_normal((6, 6))) + 10 * torch.eye(
        6, dtype=f64
    )
    L, U = lu_no_pivoting(A)  # diagonally dominant: no row exchange is needed
    assert_close(L @ U, A, rtol=RTOL)
    P, L1, U1 = lu_partial_pivoting(A)
    assert torch.equal(P, torch.eye(6, dtype=f64))
    assert_close(torch.stack([L1, U1]), torch.stack([L, U]), rtol=RTOL)


@pytest.mark.parametrize("fn", [lu_partial_pivoting, lu_no_pivoting])
def test_lu_validates(fn):
    with pytest.raises(ValueError, match=rf"^{fn.__name__}: A must be a square matrix"):
        fn(torch.ones(2, 3, dtype=f64))
    with pytest.raises(TypeError, match=rf"^{fn.__name__}: A must be a floating-point tensor"):
        fn(torch.ones(2, 2, dtype=torch.int64))


# ---------------------------------------------------------------- triangular solves


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", [1, 4, 11])
def test_lu_solve_with_substitution(seed, n):
    rng = np.random.default_rng(seed)
    A = torch.as_tensor(rng.standard_normal((n, n)))
    P, L, U = lu_partial_pivoting(A)
    for _ in range(3):
        b = torch.as_tensor(rng.standard_normal(n))
        x = back_substitution(U, forward_substitution(L, P @ b))
        assert_close(x, torch.linalg.solve(A, b), rtol=1e-9)


@pytest.mark.parametrize("seed", SEEDS)
def test_substitutions_read_only_their_triangle(seed):
    rng = np.random.default_rng(seed)
    M, b = (
        torch.as_tensor(rng.standard_normal((7, 7))) + 7 * torch.eye(7, dtype=f64),
        torch.as_tensor(rng.standard_normal(7)),
    )
    solve = torch.linalg.solve_triangular
    lower = solve(M.tril(), b[:, None], upper=False)[:, 0]
    upper = solve(M.triu(), b[:, None], upper=True)[:, 0]
    assert_close(forward_substitution(M, b), lower, rtol=1e-12)
    assert_close(back_substitution(M, b), upper, rtol=1e-12)


@pytest.mark.parametrize("fn", [forward_substitution, back_substitution])
def test_substitutions_validate(fn):
    T, rhs = ("L", "b") if fn is forward_substitution else ("U", "y")
    with pytest.raises(ValueError, match=rf"^{fn.__name__}: {rhs} must be a vector \(n,\)"):
        fn(torch.eye(3, dtype=f64), torch.ones(4, dtype=f64))
    with pytest.raises(ValueError, match=rf"^{fn.__name__}: {T} must be a square matrix"):
        fn(torch.ones(3, 2, dtype=f64), torch.ones(3, dtype=f64))
    with pytest.raises(TypeError, match=rf"^{fn.__name__}: {rhs} must have the same dtype as {T}"):
        fn(torch.eye(3, dtype=f64), torch.ones(3, dtype=torch.float32))


# ---------------------------------------------------------------- solvability


def test_rouche_capelli_cases():
    A = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=f64)
    assert solvability(A, torch.tensor([1.0, 1.0, 2.0], dtype=f64)).endswith("unique solution")
    # rank A = n = 2, yet no solution: "unique iff rank A = n" is false (chapter 6's erratum)
    assert torch.linalg.matrix_rank(A) == 2
    none = solvability(A, torch.tensor([1.0, 1.0, 0.0], dtype=f64))
    assert none == "rank A = 2 < rank [A|b] = 3: no solution"
    A2 = torch.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0]], dtype=f64)
    b2 = torch.tensor([1.0, 2.0], dtype=f64)
    assert solvability(A2, b2) == "rank A = rank [A|b] = 1 < n = 3: infinitely many"
    x0 = torch.linalg.lstsq(A2, b2[:, None]).solution[:, 0]
    null = torch.linalg.svd(A2)[2][1:].T  # dimension n − rank = 2
    assert null.shape[1] == 2
    assert_close(A2 @ (x0 + null @ torch.tensor([0.3, -1.2], dtype=f64)), b2, rtol=RTOL)


def test_solvability_validates():
    with pytest.raises(ValueError, match=r"^solvability: A must be a matrix \(m, n\) and b"):
        solvability(torch.eye(3, dtype=f64), torch.ones(2, dtype=f64))


# ---------------------------------------------------------------- least squares and LMS


@pytest.mark.parametrize("seed", SEEDS)
def test_normal_equations(seed):
    rng = np.random.default_rng(seed)
    A, b = rng.standard_normal((50, 6)), rng.standard_normal(50)
    x = np.linalg.solve(A.T @ A, A.T @ b)
    ref = np.linalg.lstsq(A, b, rcond=None)[0]
    assert_close(x, ref, rtol=1e-10)
    Q, R = np.linalg.qr(A)
    assert_close(back_substitution(torch.as_tensor(R), torch.as_tensor(Q.T @ b)), ref, rtol=1e-10)
    r = b - A @ x
    assert np.abs(A.T @ r).max() < 1e-10 * np.linalg.norm(A) * np.linalg.norm(b)
    J = r @ r
    for h in 1e-3 * rng.standard_normal((5, 6)):
        assert np.sum((A @ (x + h) - b) ** 2) > J
        assert math.isclose(np.sum((A @ (x + h) - b) ** 2), J + np.sum((A @ h) ** 2), rel_tol=1e-9)


def test_normal_equations_square_the_condition_number():
    rng = np.random.default_rng(21)
    U, _, Vt = np.linalg.svd(rng.standard_normal((50, 6)), full_matrices=False)
    A = U @ np.diag(np.logspace(0, -7, 6)) @ Vt
    assert abs(np.log10(np.linalg.cond(A.T @ A)) - 2 * np.log10(np.linalg.cond(A))) < 0.5
    x_true = rng.standard_normal(6)
    b = A @ x_true
    Q, R = np.linalg.qr(A)
    assert relative_error(np.linalg.solve(A.T @ A, A.T @ b), x_true) > 1e-4
    x_qr = back_substitution(torch.as_tensor(R), torch.as_tensor(Q.T @ b))
    assert relative_error(x_qr, x_true) < 1e-6


@pytest.mark.parametrize("seed", SEEDS)
def test_batch_lms_rate(seed):
    rng = np.random.default_rng(seed)
    A = torch.as_tensor(rng.standard_normal((200, 10))) * torch.linspace(1.0, 0.3, 10, dtype=f64)
    b = A @ torch.as_tensor(rng.standard_normal(10)) + 0.1 * torch.as_tensor(
        rng.standard_normal(200)
    )
    x_star = torch.linalg.lstsq(A, b[:, None]).solution[:, 0]
    lam = torch.linalg.eigvalsh(A.T @ A)
    mu_opt = (1 / (lam[-1] + lam[0])).item()
    kappa2 = lam[-1] / lam[0]
    assert math.isclose((1 - 2 * mu_opt * lam).abs().max(), (kappa2 - 1) / (kappa2 + 1))
    x0 = torch.zeros(10, dtype=f64)
    e0 = torch.linalg.vector_norm(x0 - x_star)
    k = torch.arange(101)
    for mu in (0.25 / lam[-1], 0.5 / lam[-1], mu_opt, 0.99 / lam[-1], 1.02 / lam[-1]):
        mu = float(mu)
        rho = (1 - 2 * mu * lam).abs().max()
        errors = torch.linalg.vector_norm(batch_lms(A, b, mu, 100, x0) - x_star, dim=1)
        assert bool((errors <= rho**k * e0 * (1 + 1e-8) + 1e-12).all())
        assert bool(errors[-1] < e0) == (mu < 1 / lam[-1])


def test_batch_lms_validates():
    A, b, x0 = torch.ones(4, 2, dtype=f64), torch.ones(4, dtype=f64), torch.zeros(2, dtype=f64)
    assert batch_lms(A, b, 0.1, 0, x0).shape == (1, 2)
    with pytest.raises(ValueError, match=r"^batch_lms: A must be \(m, n\), b \(m,\) and x0 \(n,\)"):
        batch_lms(A, b, 0.1, 3, torch.zeros(3, dtype=f64))
    with pytest.raises(ValueError, match=r"^batch_lms: mu must be a positive finite number"):
        batch_lms(A, b, -0.1, 3, x0)


def test_online_lms_mean_square_recursion():
    rng = np.random.default_rng(22)
    n, runs, steps, sigma = 8, 4000, 120, 0.5
    x_star = rng.standard_normal(n)
    for mu in (0.05, 0.02):
        x = np.zeros((runs, n))
        for _ in range(steps):
            a = rng.standard_normal((runs, n))
            b = a @ x_star + sigma * rng.standard_normal(runs)
            x += mu * (b - np.sum(a * x, axis=1))[:, None] * a
        p = online_lms_mean_square(float(x_star @ x_star), n, sigma, [mu] * steps)
        assert_monte_carlo(np.sum((x - x_star) ** 2, axis=1), p[-1], z_max=5.0)
        assert_monte_carlo(x - x_star, (1 - mu) ** steps * (0 - x_star), z_max=5.0)


def test_online_lms_mean_square_levels_off():
    n, sigma, mu = 8, 0.5, 0.05
    p = online_lms_mean_square(3.0, n, sigma, torch.full((3000,), mu, dtype=f64))
    assert p.shape == (3001,) and p.dtype == f64
    assert math.isclose(p[-1].item(), n * mu * sigma**2 / (2 - (n + 2) * mu), rel_tol=1e-12)
    assert online_lms_mean_square(2.0, n, 0.0, []).tolist() == [2.0]
    with pytest.raises(ValueError, match=r"^online_lms_mean_square: mus must be one step size"):
        online_lms_mean_square(1.0, n, sigma, [[0.1]])
    with pytest.raises(ValueError, match=r"^online_lms_mean_square: p0 and sigma must be"):
        online_lms_mean_square(1.0, n, -0.5, [0.1])


def test_delta_rule_is_online_lms():
    rng = np.random.default_rng(23)
    d_k, d_v, T = 6, 4, 50
    keys = rng.standard_normal((T, d_k))
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    values, beta = rng.standard_normal((T, d_v)), rng.uniform(0.1, 1.0, T)
    S, rows = np.zeros((d_v, d_k)), np.zeros((d_v, d_k))
    for k_t, v_t, b_t in zip(keys, values, beta, strict=True):
        S = S + b_t * np.outer(v_t - S @ k_t, k_t)
        for r in range(d_v):
            rows[r] += b_t * (v_t[r] - rows[r] @ k_t) * k_t
    assert_close(S, rows, rtol=RTOL)
    S1 = S + np.outer(values[0] - S @ keys[0], keys[0])
    assert_close(S1 @ keys[0], values[0], rtol=RTOL)
