"""Matrix norms and the table of inequalities between them.

For A ∈ R^{m×n} of rank d, each entry c of `norm_table` says ‖A‖_row ≤ c ‖A‖_col, for the six
norms of `NORM_NAMES`: max |a_ij|, the induced 1-norm (largest column sum), the induced ∞-norm
(largest row sum), the spectral norm σ₁, the Frobenius norm and the Ky Fan (nuclear) norm Σσ_i
(Petersen and Pedersen 2012, the Matrix Cookbook). `rank_one_extremes` and
`equal_singular_values` are matrices that attain the constants, which shows none can be lowered.
"""

import math

import torch

from linattn_core.validation import (
    check_matrix,
    check_non_negative_int,
    check_positive_int,
)

__all__ = [
    "NORM_NAMES",
    "equal_singular_values",
    "matrix_norms",
    "norm_table",
    "norm_table_ratios",
    "rank_one_extremes",
]

NORM_NAMES = ("max", "1", "∞", "2", "F", "KF")


def matrix_norms(A: torch.Tensor) -> torch.Tensor:
    """The six norms of A `(m, n)`, in the order of `NORM_NAMES`: shape `(6,)`.

    >>> matrix_norms(torch.tensor([[3.0, 0.0], [0.0, -4.0]], dtype=torch.float64))
    tensor([4., 4., 4., 4., 5., 7.], dtype=torch.float64)
    """
    check_matrix("matrix_norms", "A", A)
    s = torch.linalg.svdvals(A)  # descending
    return torch.stack(
        [
            A.abs().max(),
            A.abs().sum(0).max(),
            A.abs().sum(1).max(),
            s[0],
            s.square().sum().sqrt(),
            s.sum(),
        ]
    )


def norm_table(m: int, n: int, d: int) -> torch.Tensor:
    """Entry [row, col] = c with ‖A‖_row ≤ c ‖A‖_col for every A ∈ R^{m×n} of rank d ≥ 1: `(6, 6)`.

    Rows and columns follow `NORM_NAMES`; float64.

    >>> norm_table(4, 9, 2)[3]  # ‖A‖₂ ≤ √(mn) ‖A‖_max, √n ‖A‖₁, √m ‖A‖_∞, ‖A‖₂, ‖A‖_F, ‖A‖_KF
    tensor([6., 3., 2., 1., 1., 1.], dtype=torch.float64)
    """
    for name, value in (("m", m), ("n", n), ("d", d)):
        check_positive_int("norm_table", name, value)
    if d > min(m, n):
        raise ValueError(
            f"norm_table: the rank d must be at most min(m, n); got m={m}, n={n}, d={d}"
        )
    r = math.sqrt
    return torch.tensor(
        [
            [1, 1, 1, 1, 1, 1],
            [m, 1, m, r(m), r(m), r(m)],
            [n, n, 1, r(n), r(n), r(n)],
            [r(m * n), r(n), r(m), 1, 1, 1],
            [r(m * n), r(n), r(m), r(d), 1, 1],
            [r(m * n * d), r(n * d), r(m * d), d, r(d), 1],
        ],
        dtype=torch.float64,
    )


def norm_table_ratios(A: torch.Tensor) -> torch.Tensor:
    """(‖A‖_row / ‖A‖_col) / c for every entry c of `norm_table`: `(6, 6)`, all ≤ 1.

    An entry equal to 1 means A attains that inequality. A must be nonzero; its rank d is the
    numerical rank (``torch.linalg.matrix_rank``).

    >>> norm_table_ratios(torch.ones(2, 3, dtype=torch.float64))[1, 0]  # ‖J‖₁ = m ‖J‖_max
    tensor(1., dtype=torch.float64)
    """
    check_matrix("norm_table_ratios", "A", A)
    v = matrix_norms(A)
    d = int(torch.linalg.matrix_rank(A))
    return (v[:, None] / v[None, :]) / norm_table(*A.shape, d).to(A.dtype)


def rank_one_extremes(m: int, n: int, *, dtype=torch.float64) -> list[torch.Tensor]:
    """Four rank-one matrices `(m, n)` that together attain every rank-one constant of
    `norm_table`: the all-ones matrix J, a single row of ones, a single column of ones, e₁e₁ᵀ.

    >>> [S.sum().item() for S in rank_one_extremes(2, 3)]
    [6.0, 3.0, 2.0, 1.0]
    """
    check_positive_int("rank_one_extremes", "m", m)
    check_positive_int("rank_one_extremes", "n", n)
    row, col, e11 = (torch.zeros(m, n, dtype=dtype) for _ in range(3))
    row[0], col[:, 0], e11[0, 0] = 1.0, 1.0, 1.0
    return [torch.ones(m, n, dtype=dtype), row, col, e11]


def equal_singular_values(m: int, n: int, d: int, *, dtype=torch.float64) -> torch.Tensor:
    """The (m, n) matrix with d ones on the diagonal: d singular values equal to 1, rank d.

    It attains the constants √d and d of `norm_table` (‖A‖_F = √d ‖A‖₂, ‖A‖_KF = d ‖A‖₂,
    ‖A‖_KF = √d ‖A‖_F).

    >>> torch.linalg.svdvals(equal_singular_values(3, 4, 2))
    tensor([1., 1., 0.], dtype=torch.float64)
    """
    check_positive_int("equal_singular_values", "m", m)
    check_positive_int("equal_singular_values", "n", n)
    check_non_negative_int("equal_singular_values", "d", d)
    if d > min(m, n):
        raise ValueError(
            f"equal_singular_values: d must be at most min(m, n); got m={m}, n={n}, d={d}"
        )
    A = torch.zeros(m, n, dtype=dtype)
    A[range(d), range(d)] = 1.0
    return A
