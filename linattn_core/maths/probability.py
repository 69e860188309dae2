"""Random vectors: the Gaussian density, points on the unit sphere, the norms of sums and linear
maps of random unit vectors, and Monte Carlo estimates with their standard errors.

A Monte Carlo check passes when the sample mean lies within `z_max` standard errors s/√S of the
exact value, entry by entry; with z_max = 4 a correct formula fails about once in 16 000 checks
of one entry, while a wrong one fails as soon as S is large enough to resolve the difference.
The sphere results (Vershynin 2018, ch. 3): for x uniform on the unit sphere of R^n,
E[x xᵀ] = I/n, so E‖Ax‖² = ‖A‖_F²/n for every A.
"""

import math

import torch

from linattn_core.validation import (
    check_positive_int,
    check_positive_number,
    check_same_dtype_and_device,
    check_tensor,
)

__all__ = [
    "assert_monte_carlo",
    "check_monte_carlo",
    "gaussian_density",
    "mean_norm_of_sum",
    "monte_carlo_estimate",
    "sphere_norm_moments",
    "unit_columns",
    "unit_rows",
]


def gaussian_density(x: torch.Tensor, mean: torch.Tensor, cov: torch.Tensor) -> torch.Tensor:
    """The N(mean, cov) density at each row of x, from its formula:
    p(x) = exp(−½ (x − m)ᵀ Σ⁻¹ (x − m)) / √det(2πΣ).

    x `(..., d)`, mean `(d,)`, cov `(d, d)` symmetric positive definite → `(...)`.

    >>> x, eye = torch.zeros(1, 2, dtype=torch.float64), torch.eye(2, dtype=torch.float64)
    >>> gaussian_density(x, x[0], eye) * 2 * torch.pi  # the peak of N(0, I_2) is 1/(2π)
    tensor([1.], dtype=torch.float64)
    """
    check_tensor("gaussian_density", "x", x, min_rank=1)
    check_tensor("gaussian_density", "mean", mean, min_rank=1)
    check_tensor("gaussian_density", "cov", cov, min_rank=2)
    d = x.shape[-1]
    if mean.shape != (d,) or cov.shape != (d, d):
        raise ValueError(
            f"gaussian_density: mean must be (d,) and cov (d, d) with d = x.shape[-1] = {d}; "
            f"got mean.shape={tuple(mean.shape)}, cov.shape={tuple(cov.shape)}"
        )
    check_same_dtype_and_device("gaussian_density", "x", x, mean=mean, cov=cov)
    diff = x - mean
    quad = torch.einsum("...i,ij,...j->...", diff, torch.linalg.inv(cov), diff)
    return torch.exp(-0.5 * quad) / torch.sqrt(torch.linalg.det(2 * math.pi * cov))


def unit_rows(x: torch.Tensor) -> torch.Tensor:
    """x `(..., m, n)` with each row divided by its Euclidean norm.

    Rows of i.i.d. N(0, 1) entries become points uniform on the unit sphere of R^n.

    >>> unit_rows(torch.tensor([[3.0, 4.0]]))
    tensor([[0.6000, 0.8000]])
    """
    check_tensor("unit_rows", "x", x, min_rank=2)
    return x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)


def unit_columns(x: torch.Tensor) -> torch.Tensor:
    """x `(..., m, n)` with each column divided by its Euclidean norm.

    >>> unit_columns(torch.tensor([[3.0], [4.0]]))
    tensor([[0.6000],
            [0.8000]])
    """
    check_tensor("unit_columns", "x", x, min_rank=2)
    return x / torch.linalg.vector_norm(x, dim=-2, keepdim=True)


def mean_norm_of_sum(d: int) -> float:
    """E‖x̂ + ŷ‖ for independent x̂, ŷ uniform on the unit sphere of R^d, d ≥ 2, exactly:
    2Γ(α+½)Γ(2α) / (Γ(α)Γ(2α+½)) with α = (d−1)/2.

    Always below √2 = √(E‖x̂ + ŷ‖²), and √2 (1 − 1/(8d)) + O(d⁻²) for large d.

    >>> round(mean_norm_of_sum(3), 12)  # 4/3
    1.333333333333
    """
    check_positive_int("mean_norm_of_sum", "d", d)
    if d < 2:
        raise ValueError(f"mean_norm_of_sum: d must be at least 2; got d={d!r}")
    a = (d - 1) / 2
    return 2 * math.exp(
        math.lgamma(a + 0.5) + math.lgamma(2 * a) - math.lgamma(a) - math.lgamma(2 * a + 0.5)
    )


def sphere_norm_moments(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact μ = E‖Ax‖² and v = Var ‖Ax‖² for x uniform on the unit sphere of R^n.

    A `(..., m, n)`; with M = AᵀA: μ = tr M / n and v = 2(n‖M‖_F² − (tr M)²) / (n²(n+2)).
    Both have shape `(...)`. √μ − v/(2μ^{3/2}) ≤ E‖Ax‖ ≤ √μ, and √μ − v/(8μ^{3/2}) is the
    second-order value.

    >>> sphere_norm_moments(torch.eye(3, dtype=torch.float64))  # ‖x‖ = 1 always
    (tensor(1., dtype=torch.float64), tensor(0., dtype=torch.float64))
    """
    check_tensor("sphere_norm_moments", "A", A, min_rank=2)
    n = A.shape[-1]
    M = A.mT @ A
    tr_m = torch.diagonal(M, dim1=-2, dim2=-1).sum(-1)
    fro2 = (M * M).sum((-2, -1))
    return tr_m / n, 2 * (n * fro2 - tr_m**2) / (n**2 * (n + 2))


def monte_carlo_estimate(samples) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean over the first axis of `samples` and its standard error s/√S (s with ddof 1).

    samples: a tensor or array `(S, ...)` of S ≥ 2 independent draws → two float64 tensors `(...)`.

    >>> monte_carlo_estimate(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    (tensor(2.5000, dtype=torch.float64), tensor(0.6455, dtype=torch.float64))
    """
    samples = torch.as_tensor(samples, dtype=torch.float64)  # a Python float stays exact
    if samples.dim() == 0 or samples.shape[0] < 2:
        raise ValueError(
            "monte_carlo_estimate: samples must hold at least 2 draws along the first axis; "
            f"got samples.shape={tuple(samples.shape)}"
        )
    return samples.mean(0), samples.std(0, correction=1) / math.sqrt(samples.shape[0])


def assert_monte_carlo(samples, exact, *, z_max: float = 4.0, name: str = "Monte Carlo") -> None:
    """Raise AssertionError unless every entry of the Monte Carlo mean of `samples` (see
    `monte_carlo_estimate`) lies within `z_max` standard errors of `exact`.

    A zero standard error (all draws equal) passes only when the mean equals `exact`.

    >>> assert_monte_carlo(torch.tensor([0.9, 1.1, 1.0, 1.0]), 1.0)
    >>> assert_monte_carlo(torch.tensor([0.9, 1.1, 1.0, 1.0]), 1.2, name="E[x]")
    Traceback (most recent call last):
    ...
    AssertionError: E[x]: largest |z| = 4.90 ≥ z_max 4
    """
    check_positive_number("assert_monte_carlo", "z_max", z_max)
    mean, se = monte_carlo_estimate(samples)
    exact = torch.as_tensor(exact, dtype=torch.float64)
    if exact.shape != mean.shape:
        raise ValueError(
            "assert_monte_carlo: exact must have the shape of one draw; "
            f"got exact.shape={tuple(exact.shape)}, one draw {tuple(mean.shape)}"
        )
    error = (mean - exact).abs()
    z = torch.where(error == 0, torch.zeros_like(error), error / se)
    if not bool((z < z_max).all()):
        raise AssertionError(f"{name}: largest |z| = {z.max().item():.2f} ≥ z_max {z_max:g}")


def check_monte_carlo(name: str, samples, exact, *, z_max: float = 4.0) -> None:
    """`assert_monte_carlo`, then print one line: for a scalar, the estimate with its standard
    error next to the exact value; otherwise that every entry passed.

    >>> check_monte_carlo("E[x] = 2.5", torch.tensor([1.0, 2.0, 3.0, 4.0]), 2.5)
    ✓ E[x] = 2.5: 2.500 ± 0.645 (Monte Carlo) vs 2.500
    """
    assert_monte_carlo(samples, exact, z_max=z_max, name=name)
    mean, se = monte_carlo_estimate(samples)
    if mean.dim() == 0:  # a scalar: show the estimate with its error bar
        print(f"✓ {name}: {float(mean):.3f} ± {float(se):.3f} (Monte Carlo) vs {float(exact):.3f}")
    else:
        print(f"✓ {name}: every entry within {z_max:g} s.e. of the formula")
