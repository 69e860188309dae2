"""Tests of `linattn_core.maths.descent` and of chapter 7's claims on Lipschitz constants and step
sizes.

Power iteration must find σ₁; gradient descent on a quadratic must converge below the step
2/L, stall at it and diverge above it, at the rate the condition number sets.
"""

import math

import pytest
import sympy as sp
import torch

from linattn_core.maths.descent import gradient_descent, spectral_norm_estimates

f64 = torch.float64


# ------------------------------------------------------------------- operator norms


def test_operator_norms_and_lipschitz_constant():
    A = torch.randn(5, 3, dtype=f64, generator=torch.Generator().manual_seed(0))
    sigma = torch.linalg.svdvals(A)
    assert math.isclose(torch.linalg.matrix_norm(A, 2), sigma[0], rel_tol=1e-12)
    assert math.isclose(torch.linalg.matrix_norm(A, 1), A.abs().sum(0).max(), rel_tol=1e-12)
    assert math.isclose(torch.linalg.matrix_norm(A, math.inf), A.abs().sum(1).max())
    x = torch.randn(1000, 3, dtype=f64, generator=torch.Generator().manual_seed(1))
    ratios = (x @ A.T).norm(dim=1) / x.norm(dim=1)
    assert ratios.max() <= sigma[0] * (1 + 1e-12)
    v1 = torch.linalg.svd(A).Vh[0]
    assert math.isclose((A @ v1).norm(), sigma[0], rel_tol=1e-12)
    assert sigma[0] <= torch.linalg.matrix_norm(A) <= math.sqrt(3) * sigma[0]


def test_two_by_two_spectral_norm_formula():
    a, b, c, d = sp.symbols("a b c d", real=True)
    s, p = a**2 + b**2 + c**2 + d**2, (a * d - b * c) ** 2
    A = sp.Matrix([[a, b], [c, d]])
    lam = sp.symbols("lam")
    charpoly = (A.T * A).charpoly(lam).as_expr()
    assert sp.expand(charpoly - (lam**2 - s * lam + p)) == 0
    M = torch.tensor([[1.0, 2.0], [-3.0, 0.5]], dtype=f64)
    s_, p_ = float((M**2).sum()), float(torch.det(M) ** 2)
    closed = math.sqrt((s_ + math.sqrt(s_**2 - 4 * p_)) / 2)
    assert math.isclose(closed, torch.linalg.matrix_norm(M, 2), rel_tol=1e-12)


# ------------------------------------------------------------------- power iteration


def test_power_iteration_finds_sigma_one():
    A = torch.randn(6, 4, dtype=f64, generator=torch.Generator().manual_seed(1))
    estimates = spectral_norm_estimates(A, 500)
    assert estimates.shape == (500,)
    assert math.isclose(estimates[-1], torch.linalg.svdvals(A)[0], rel_tol=1e-10)


def test_power_iteration_converges_like_the_fourth_power_of_the_gap():
    sigma = torch.tensor([2.0, 1.0, 0.5], dtype=f64)
    U, _ = torch.linalg.qr(torch.randn(5, 3, dtype=f64, generator=torch.Generator().manual_seed(2)))
    V, _ = torch.linalg.qr(torch.randn(3, 3, dtype=f64, generator=torch.Generator().manual_seed(3)))
    errors = (spectral_norm_estimates(U @ torch.diag(sigma) @ V.T, 12) - 2.0).abs() / 2.0
    assert math.isclose(errors[-1] / errors[-2], (1 / 2) ** 4, rel_tol=0.05)


def test_power_iteration_is_seeded_and_never_overestimates():
    A = torch.randn(7, 5, dtype=f64, generator=torch.Generator().manual_seed(4))
    first, again = spectral_norm_estimates(A, 5, seed=3), spectral_norm_estimates(A, 5, seed=3)
    assert torch.equal(first, again)
    assert not torch.equal(first, spectral_norm_estimates(A, 5, seed=4))
    assert (first <= torch.linalg.svdvals(A)[0] * (1 + 1e-12)).all()  # ‖Av‖ ≤ σ₁ for ‖v‖ = 1


# ------------------------------------------------------------------- gradient descent


def test_gradient_descent_returns_every_iterate():
    H, b = torch.diag(torch.tensor([2.0, 1.0], dtype=f64)), torch.ones(2, dtype=f64)
    path = gradient_descent(H, b, 0.5, 3)
    assert path.shape == (4, 2) and torch.equal(path[0], torch.zeros(2, dtype=f64))
    assert torch.equal(gradient_descent(H, b, 0.5, 0, x0=b), b[None])
    assert torch.allclose(path[1], 0.5 * b)


def test_step_size_bound_two_over_l():
    H = torch.diag(torch.tensor([10.0, 3.0, 1.0], dtype=f64))
    b, x0, L = torch.zeros(3, dtype=f64), torch.ones(3, dtype=f64), 10.0  # the minimizer is 0

    def final_error(alpha):
        return gradient_descent(H, b, alpha, 400, x0=x0)[-1].norm()

    assert final_error(1.9 / L) < 1e-6
    assert final_error(2.1 / L) > 1e6
    assert math.isclose(final_error(2 / L), 1.0, rel_tol=1e-9)  # the steep direction flips sign


def test_condition_number_sets_the_rate():
    A = torch.randn(8, 4, dtype=f64, generator=torch.Generator().manual_seed(2))
    sigma = torch.linalg.svdvals(A)
    H = A.T @ A
    L, mu = float(sigma[0] ** 2), float(sigma[-1] ** 2)
    assert math.isclose(torch.linalg.cond(H), torch.linalg.cond(A) ** 2, rel_tol=1e-10)
    kappa = L / mu
    alpha = 2 / (L + mu)
    rate = float(torch.linalg.matrix_norm(torch.eye(4, dtype=f64) - alpha * H, 2))
    assert math.isclose(rate, (kappa - 1) / (kappa + 1), rel_tol=1e-10)
    b = torch.randn(4, dtype=f64, generator=torch.Generator().manual_seed(3))
    errors = (gradient_descent(H, b, alpha, 60) - torch.linalg.solve(H, b)).norm(dim=1)
    assert errors[-1] <= rate**60 * errors[0] * (1 + 1e-9)


def test_descent_lemma_on_a_logistic_loss():
    g = torch.Generator().manual_seed(3)
    A = torch.randn(30, 5, dtype=f64, generator=g)
    y = (torch.rand(30, generator=g, dtype=f64) > 0.5).to(f64)
    loss = lambda w: torch.nn.functional.softplus(A @ w).mean() - (y * (A @ w)).mean()  # noqa: E731
    L = float(torch.linalg.svdvals(A)[0] ** 2) / (4 * 30)
    w = torch.zeros(5, dtype=f64)
    for _ in range(50):
        grad = torch.func.grad(loss)(w)
        step = w - 1.9 / L * grad
        bound = loss(w) - 1.9 / L * (1 - 1.9 / 2) * grad @ grad
        assert loss(step) <= bound + 1e-12
        w = step


# ------------------------------------------------------------------- bad inputs


def test_bad_arguments_name_the_argument():
    H, b = torch.eye(3, dtype=f64), torch.ones(3, dtype=f64)
    cases = [
        (
            ValueError,
            "spectral_norm_estimates: A must be a matrix",
            lambda: spectral_norm_estimates(b[None, None], 3),
        ),
        (ValueError, "spectral_norm_estimates: steps", lambda: spectral_norm_estimates(H, 0)),
        (
            ValueError,
            "spectral_norm_estimates: seed",
            lambda: spectral_norm_estimates(H, 1, seed=-1),
        ),
        (
            TypeError,
            "spectral_norm_estimates: A must be a floating",
            lambda: spectral_norm_estimates(H.long(), 1),
        ),
        (
            ValueError,
            "gradient_descent: H must be a square",
            lambda: gradient_descent(H[:2], b, 0.1, 1),
        ),
        (
            ValueError,
            r"gradient_descent: b must have shape \(3,\)",
            lambda: gradient_descent(H, b[:2], 0.1, 1),
        ),
        (
            TypeError,
            "gradient_descent: b must have the same dtype",
            lambda: gradient_descent(H, b.float(), 0.1, 1),
        ),
        (
            ValueError,
            "gradient_descent: alpha must be a number",
            lambda: gradient_descent(H, b, "0.1", 1),
        ),
        (ValueError, "gradient_descent: steps", lambda: gradient_descent(H, b, 0.1, -1)),
        (
            ValueError,
            r"gradient_descent: x0 must have shape \(3,\)",
            lambda: gradient_descent(H, b, 0.1, 1, x0=H),
        ),
    ]
    for error, message, call in cases:
        with pytest.raises(error, match=message):
            call()
