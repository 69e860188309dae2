"""Gradient descent on a quadratic, and the Lipschitz constant that bounds its step size.

For f(x) = ½ xᵀHx − bᵀx with H = AᵀA the gradient Hx − b is L-Lipschitz with L = σ₁(A)², and
gradient descent x ← x − α(Hx − b) converges for every start exactly when 0 < α < 2/L, at a rate
set by the condition number L/μ of H (Nesterov, *Lectures on Convex Optimization*; Boyd and
Vandenberghe, *Convex Optimization*). `spectral_norm_estimates` finds σ₁(A) by power iteration
on AᵀA, as spectral normalization does for weight matrices (Miyato et al. 2018); the
linear-algebra chapter's power iteration finds eigenvalues of a general matrix instead.
"""

import torch

from linattn_core.validation import (
    check_non_negative_int,
    check_positive_int,
    check_same_dtype_and_device,
    check_tensor,
)

__all__ = ["gradient_descent", "spectral_norm_estimates"]


def spectral_norm_estimates(A: torch.Tensor, steps: int, *, seed: int = 0) -> torch.Tensor:
    """Estimates of σ₁(A) = ‖A‖₂ after each of `steps` steps of power iteration on AᵀA: `(steps,)`.

    From a seeded N(0, I) start v, each step sets v ← AᵀAv/‖AᵀAv‖ and records ‖Av‖. The error
    of the estimate shrinks like (σ₂/σ₁)^{4k}: the weight of every other right singular vector
    falls by (σ₂/σ₁)² per step, and ‖Av‖ is second order in the error of v. A `(m, n)`.

    >>> A = torch.diag(torch.tensor([3.0, 1.0], dtype=torch.float64))
    >>> round(float(spectral_norm_estimates(A, 20)[-1]), 12)
    3.0
    """
    check_tensor("spectral_norm_estimates", "A", A, min_rank=2)
    if A.dim() != 2:
        raise ValueError(
            f"spectral_norm_estimates: A must be a matrix (m, n); got A.shape={tuple(A.shape)}"
        )
    check_positive_int("spectral_norm_estimates", "steps", steps)
    check_non_negative_int("spectral_norm_estimates", "seed", seed)
    generator = torch.Generator(device=A.device).manual_seed(seed)
    v = torch.randn(A.shape[1], dtype=A.dtype, device=A.device, generator=generator)  # (n,)
    estimates = []
    for _ in range(steps):
        v = A.T @ (A @ v)
        v = v / v.norm()
        estimates.append((A @ v).norm())
    return torch.stack(estimates)


def gradient_descent(
    H: torch.Tensor, b: torch.Tensor, alpha: float, steps: int, x0: torch.Tensor | None = None
) -> torch.Tensor:
    """The iterates x_0, …, x_steps of x ← x − α(Hx − b), gradient descent on ½xᵀHx − bᵀx.

    H `(n, n)`, b `(n,)`, x0 `(n,)` (default 0); returns `(steps + 1, n)`. The error
    e_k = x_k − x* obeys e_{k+1} = (I − αH) e_k, so for symmetric H ⪰ 0 it shrinks by
    ρ(α) = max_i |1 − α λ_i| per step: below 1 exactly when 0 < α < 2/λ_max.

    >>> H, b = torch.diag(torch.tensor([2.0, 1.0])), torch.tensor([2.0, 1.0])
    >>> gradient_descent(H, b, 0.5, 2)
    tensor([[0.0000, 0.0000],
            [1.0000, 0.5000],
            [1.0000, 0.7500]])
    """
    fn = "gradient_descent"
    check_tensor(fn, "H", H, min_rank=2)
    n = H.shape[-1]
    if H.shape != (n, n):
        raise ValueError(f"{fn}: H must be a square matrix (n, n); got H.shape={tuple(H.shape)}")
    check_tensor(fn, "b", b, min_rank=1)
    if b.shape != (n,):
        raise ValueError(f"{fn}: b must have shape ({n},) to match H; got b.shape={tuple(b.shape)}")
    check_same_dtype_and_device(fn, "H", H, b=b)
    if isinstance(alpha, bool) or not isinstance(alpha, int | float):
        raise ValueError(f"{fn}: alpha must be a number; got alpha={alpha!r}")
    check_non_negative_int(fn, "steps", steps)
    if x0 is None:
        x = torch.zeros(n, dtype=H.dtype, device=H.device)
    else:
        check_tensor(fn, "x0", x0, min_rank=1)
        if x0.shape != (n,):
            raise ValueError(f"{fn}: x0 must have shape ({n},); got x0.shape={tuple(x0.shape)}")
        check_same_dtype_and_device(fn, "H", H, x0=x0)
        x = x0
    path = [x]
    for _ in range(steps):
        x = x - alpha * (H @ x - b)
        path.append(x)
    return torch.stack(path)  # (steps + 1, n)
