"""Linear systems and least squares: Gaussian elimination (PA = LU, with and without row
exchanges), forward and back substitution, the Rouché–Capelli solvability test, and the LMS
algorithm, gradient descent on ‖Ax − b‖² (Widrow and Hoff 1960), in batch and online form.

These are the textbook algorithms written out for reading and checking (Strang 2019;
Golub and Van Loan 2013, ch. 3; Higham 2002, ch. 9); in production use ``torch.linalg.lu_factor``,
``torch.linalg.solve_triangular`` and ``torch.linalg.lstsq``.
"""

import torch

from linattn_core.validation import (
    check_non_negative_int,
    check_positive_int,
    check_positive_number,
    check_same_dtype_and_device,
    check_square,
    check_tensor,
)

__all__ = [
    "back_substitution",
    "batch_lms",
    "forward_substitution",
    "lu_no_pivoting",
    "lu_partial_pivoting",
    "online_lms_mean_square",
    "solvability",
]


def _check_system(fn: str, names: tuple[str, str], a, b) -> None:
    check_square(fn, names[0], a)
    check_tensor(fn, names[1], b, min_rank=1)
    if b.shape != a.shape[:1]:
        raise ValueError(
            f"{fn}: {names[1]} must be a vector (n,) with n = {names[0]}.shape[0]; "
            f"got {names[1]}.shape={tuple(b.shape)}, {names[0]}.shape={tuple(a.shape)}"
        )
    check_same_dtype_and_device(fn, names[0], a, **{names[1]: b})


def lu_partial_pivoting(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PA = LU by Gaussian elimination; each step takes the largest |entry| of its column as pivot.

    A `(n, n)` → P `(n, n)` a permutation, L `(n, n)` unit lower triangular with |l_ij| ≤ 1,
    U `(n, n)` upper triangular. A zero column below the diagonal is skipped, so singular
    matrices factor too (with a zero on the diagonal of U).

    >>> P, L, U = lu_partial_pivoting(torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64))
    >>> P, U
    (tensor([[0., 1.],
            [1., 0.]], dtype=torch.float64), tensor([[3.0000, 4.0000],
            [0.0000, 0.6667]], dtype=torch.float64))
    """
    check_square("lu_partial_pivoting", "A", A)
    n = A.shape[0]
    U, L = A.clone(), torch.eye(n, dtype=A.dtype, device=A.device)
    perm = torch.arange(n, device=A.device)
    for k in range(n - 1):
        p = k + int(torch.argmax(U[k:, k].abs()))  # pivot row
        U[[k, p]], perm[[k, p]] = U[[p, k]], perm[[p, k]]
        L[[k, p], :k] = L[[p, k], :k]  # earlier multipliers travel with their rows
        if U[k, k] != 0:
            L[k + 1 :, k] = U[k + 1 :, k] / U[k, k]  # multipliers
            U[k + 1 :, k + 1 :] -= torch.outer(L[k + 1 :, k], U[k, k + 1 :])
            U[k + 1 :, k] = 0.0
    return torch.eye(n, dtype=A.dtype, device=A.device)[perm], L, U


def lu_no_pivoting(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A = LU without row exchanges: A `(n, n)` → L unit lower, U upper triangular.

    Divides by whatever pivot comes: a zero pivot gives inf/NaN, a tiny one huge multipliers
    and a wrong LU in floating point. Shown to explain why `lu_partial_pivoting` exchanges rows.

    >>> L, U = lu_no_pivoting(torch.tensor([[2.0, 1.0], [4.0, 5.0]]))
    >>> L, U
    (tensor([[1., 0.],
            [2., 1.]]), tensor([[2., 1.],
            [0., 3.]]))
    """
    check_square("lu_no_pivoting", "A", A)
    n = A.shape[0]
    U, L = A.clone(), torch.eye(n, dtype=A.dtype, device=A.device)
    for k in range(n - 1):
        L[k + 1 :, k] = U[k + 1 :, k] / U[k, k]
        U[k + 1 :, k + 1 :] -= torch.outer(L[k + 1 :, k], U[k, k + 1 :])
        U[k + 1 :, k] = 0.0
    return L, U


def forward_substitution(L: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Solve L y = b for lower-triangular L `(n, n)`, top row first: b `(n,)` → y `(n,)`.

    Reads only the lower triangle of L; 2n² flops. A zero on the diagonal gives inf/NaN.

    >>> forward_substitution(torch.tensor([[2.0, 0.0], [1.0, 1.0]]), torch.tensor([2.0, 3.0]))
    tensor([1., 2.])
    """
    _check_system("forward_substitution", ("L", "b"), L, b)
    y = torch.zeros_like(b)
    for i in range(b.shape[0]):
        y[i] = (b[i] - L[i, :i] @ y[:i]) / L[i, i]
    return y


def back_substitution(U: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Solve U x = y for upper-triangular U `(n, n)`, bottom row first: y `(n,)` → x `(n,)`.

    Reads only the upper triangle of U; 2n² flops. With A = QR, x = back_substitution(R, Qᵀb)
    is the least-squares solution of A x ≈ b.

    >>> back_substitution(torch.tensor([[2.0, 1.0], [0.0, 1.0]]), torch.tensor([3.0, 1.0]))
    tensor([1., 1.])
    """
    _check_system("back_substitution", ("U", "y"), U, y)
    x = torch.zeros_like(y)
    for i in reversed(range(y.shape[0])):
        x[i] = (y[i] - U[i, i + 1 :] @ x[i + 1 :]) / U[i, i]
    return x


def solvability(A: torch.Tensor, b: torch.Tensor) -> str:
    """Which case of the Rouché–Capelli theorem applies to A x = b, as a sentence.

    A `(m, n)`, b `(m,)`: no solution when rank A < rank [A | b]; otherwise a unique solution
    when rank A = n, and infinitely many when rank A < n. Ranks are numerical
    (``torch.linalg.matrix_rank``, singular values above its default tolerance).

    >>> solvability(torch.eye(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64))
    'rank A = rank [A|b] = 2 = n: unique solution'
    """
    check_tensor("solvability", "A", A, min_rank=2)
    check_tensor("solvability", "b", b, min_rank=1)
    if A.dim() != 2 or b.shape != A.shape[:1]:
        raise ValueError(
            "solvability: A must be a matrix (m, n) and b a vector (m,); "
            f"got A.shape={tuple(A.shape)}, b.shape={tuple(b.shape)}"
        )
    check_same_dtype_and_device("solvability", "A", A, b=b)
    rank = torch.linalg.matrix_rank
    r, r_aug, n = int(rank(A)), int(rank(torch.column_stack([A, b]))), A.shape[1]
    if r < r_aug:
        return f"rank A = {r} < rank [A|b] = {r_aug}: no solution"
    return f"rank A = rank [A|b] = {r} " + (
        "= n: unique solution" if r == n else f"< n = {n}: infinitely many"
    )


def batch_lms(
    A: torch.Tensor, b: torch.Tensor, mu: float, steps: int, x0: torch.Tensor
) -> torch.Tensor:
    """Batch LMS: gradient descent x_{k+1} = x_k − 2μ Aᵀ(A x_k − b) on J(x) = ‖Ax − b‖².

    A `(m, n)`, b `(m,)`, x0 `(n,)` → all iterates x_0, …, x_steps, shape `(steps + 1, n)`.
    The error e_k = x_k − x* shrinks at least by ρ = max_i |1 − 2μλ_i(AᵀA)| per step; it
    converges for every start iff 0 < μ < 1/λ_max, fastest at μ* = 1/(λ_max + λ_min).

    >>> batch_lms(torch.ones(1, 1), torch.ones(1), 0.25, 2, torch.zeros(1))  # x* = 1, ρ = 1/2
    tensor([[0.0000],
            [0.5000],
            [0.7500]])
    """
    check_tensor("batch_lms", "A", A, min_rank=2)
    check_tensor("batch_lms", "b", b, min_rank=1)
    check_tensor("batch_lms", "x0", x0, min_rank=1)
    if A.dim() != 2 or b.shape != A.shape[:1] or x0.shape != A.shape[1:]:
        raise ValueError(
            "batch_lms: A must be (m, n), b (m,) and x0 (n,); "
            f"got A.shape={tuple(A.shape)}, b.shape={tuple(b.shape)}, x0.shape={tuple(x0.shape)}"
        )
    check_same_dtype_and_device("batch_lms", "A", A, b=b, x0=x0)
    check_positive_number("batch_lms", "mu", mu)
    check_non_negative_int("batch_lms", "steps", steps)
    xs = [x0]
    for _ in range(steps):
        xs.append(xs[-1] - 2 * mu * A.T @ (A @ xs[-1] - b))
    return torch.stack(xs)


def online_lms_mean_square(p0: float, n: int, sigma: float, mus) -> torch.Tensor:
    """Exact mean square error p_k = E‖x_k − x*‖² of online LMS, k = 0, …, len(mus).

    Online LMS sees one fresh sample per step, a ~ N(0, I_n) and b = aᵀx* + σε with
    ε ~ N(0, 1), and steps x_{k+1} = x_k + μ_k (b − aᵀx_k) a. Then
    p_{k+1} = (1 − 2μ_k + (n+2)μ_k²) p_k + nμ_k²σ², from p_0 = ‖x_0 − x*‖²; for a constant μ
    it levels off at p_∞ = nμσ²/(2 − (n+2)μ). mus: the step sizes, a sequence or 1-D tensor.
    Returns a float64 tensor `(len(mus) + 1,)`.

    >>> online_lms_mean_square(1.0, 2, 0.0, [0.25, 0.25])
    tensor([1.0000, 0.7500, 0.5625], dtype=torch.float64)
    """
    check_positive_int("online_lms_mean_square", "n", n)
    if not p0 >= 0 or not sigma >= 0:
        raise ValueError(
            "online_lms_mean_square: p0 and sigma must be non-negative numbers; "
            f"got p0={p0!r}, sigma={sigma!r}"
        )
    mus = torch.as_tensor(mus, dtype=torch.float64)
    if mus.dim() != 1:
        raise ValueError(
            f"online_lms_mean_square: mus must be one step size per step (1-D); "
            f"got mus.shape={tuple(mus.shape)}"
        )
    p = [float(p0)]
    for mu in mus.tolist():
        p.append((1 - 2 * mu + (n + 2) * mu**2) * p[-1] + n * mu**2 * sigma**2)
    return torch.tensor(p, dtype=torch.float64)
