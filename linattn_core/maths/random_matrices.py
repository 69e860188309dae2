"""Singular values of Gaussian random matrices, and the spectral norm of Xavier initialization.

Gordon's bounds (Vershynin 2012, Theorem 5.32): for G ∈ R^{m×n}, m ≥ n, with i.i.d. N(0, 1)
entries, √m − √n ≤ E σ_min(G) ≤ E σ_max(G) ≤ √m + √n. Xavier initialization (Glorot and Bengio
2010) draws entries with variance 2/(n_in + n_out), so E σ_max ≤ `xavier_bound` ≤ 2.
"""

import math

import torch

from linattn_core.validation import check_positive_int, check_positive_number, check_tensor

__all__ = ["expected_gaussian_norm", "singular_values_batch", "xavier_bound"]


def singular_values_batch(A: torch.Tensor) -> torch.Tensor:
    """Singular values of a stack of matrices A `(..., m, n)`, descending, shape `(..., n)`:
    the square roots of the eigenvalues of AᵀA.

    For tall matrices (m ≥ n) these are all the singular values; the Gram matrix is n × n, so
    this is faster than an SVD for m ≫ n but loses the singular values below √ε σ₁.

    >>> singular_values_batch(torch.tensor([[3.0, 0.0], [0.0, 4.0], [0.0, 0.0]]))
    tensor([4., 3.])
    """
    check_tensor("singular_values_batch", "A", A, min_rank=2)
    eigenvalues = torch.linalg.eigvalsh(A.mT @ A)  # ascending
    return eigenvalues.clamp_min(0.0).sqrt().flip(-1)


def expected_gaussian_norm(k: int) -> float:
    """E‖g‖ for g ~ N(0, I_k): √2 Γ((k+1)/2) / Γ(k/2), the mean of the χ_k distribution.

    √k − E‖g‖ is positive and decreases in k, the step in Gordon's lower bound.

    >>> round(expected_gaussian_norm(1), 12) == round(math.sqrt(2 / math.pi), 12)
    True
    """
    check_positive_int("expected_gaussian_norm", "k", k)
    return math.sqrt(2) * math.exp(math.lgamma((k + 1) / 2) - math.lgamma(k / 2))


def xavier_bound(n_in: float, n_out: float) -> float:
    """Gordon's bound on E σ_max of an (n_out, n_in) Xavier-normal matrix:
    √2 (√n_in + √n_out) / √(n_in + n_out), at most 2, with equality iff n_in = n_out.

    >>> round(xavier_bound(512, 512), 12), round(xavier_bound(768, 3072), 3)
    (2.0, 1.897)
    """
    check_positive_number("xavier_bound", "n_in", n_in)  # a real: plots take a continuum
    check_positive_number("xavier_bound", "n_out", n_out)
    return math.sqrt(2) * (math.sqrt(n_in) + math.sqrt(n_out)) / math.sqrt(n_in + n_out)
