"""Linear-algebra tools of the book, in float64 torch unless the inputs say otherwise: the four
views of a matrix product, Gram–Schmidt, power iteration, determinants by cofactors and signed
areas, rotations, vectorization, Kronecker products, the commutation matrix and rotary position
embeddings (RoPE).

`vec` stacks columns, the convention of the Kronecker identities vec(AXB) = (Bᵀ ⊗ A) vec(X)
(Magnus and Neudecker, *Matrix Differential Calculus*). RoPE rotates consecutive pairs of
coordinates (x_1, x_2), (x_3, x_4), … by the angles m θ_i, θ_i = base^(−2(i−1)/d)
(Su et al., *RoFormer*); `rope_half_split` pairs x_i with x_{i+d/2} instead (GPT-NeoX).
Elimination (LU, triangular solves) is in `linear_systems`, matrix norms in `matrix_norms`.
"""

import numbers

import torch

from linattn_core.validation import (
    check_matrix,
    check_positive_int,
    check_positive_number,
    check_same_dtype_and_device,
    check_tensor,
)

__all__ = [
    "commutation_matrix",
    "det_cofactor",
    "gram_schmidt",
    "kron",
    "polygon_area",
    "power_iteration",
    "product_columns",
    "product_entries",
    "product_outer",
    "product_rows",
    "rope_angles",
    "rope_apply",
    "rope_complex",
    "rope_half_split",
    "rope_matrix",
    "rot_x",
    "rot_y",
    "rot_z",
    "tan_angle",
    "vec",
]


def vec(x: torch.Tensor) -> torch.Tensor:
    """Column-stacking vectorization `(m, n)` → `(m·n,)` (for any rank: first index fastest).

    PyTorch stores rows contiguously, so ``x.reshape(-1)`` stacks rows: that is vec(Xᵀ).

    >>> vec(torch.tensor([[1, 2], [3, 4]]))
    tensor([1, 3, 2, 4])
    """
    return x.permute(*reversed(range(x.dim()))).reshape(-1)


def kron(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Kronecker product of matrices: `(m, n)`, `(p, q)` → `(m·p, n·q)`, block (i, j) = a_ij b.

    Written out because ``torch.kron`` fails on transposed inputs (pytorch/pytorch#54135).

    >>> kron(torch.eye(2), torch.tensor([[1.0], [2.0]]).T)
    tensor([[1., 2., 0., 0.],
            [0., 0., 1., 2.]])
    """
    for arg, x in (("a", a), ("b", b)):
        if not isinstance(x, torch.Tensor) or x.dim() != 2:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"kron: {arg} must be a matrix (2-D tensor); got {got}")
    (m, n), (p, q) = a.shape, b.shape
    return (a[:, None, :, None] * b[None, :, None, :]).reshape(m * p, n * q)  # (m, p, n, q)


def commutation_matrix(m: int, n: int, *, dtype=torch.float64, device=None) -> torch.Tensor:
    """The permutation 𝒦_{m,n} `(m·n, m·n)` with 𝒦 vec(X) = vec(Xᵀ) for every X ∈ R^{m×n}.

    Being a permutation, 𝒦ᵀ = 𝒦⁻¹ = 𝒦_{n,m}; it swaps the factors of a Kronecker product:
    𝒦_{p,m} (A ⊗ B) 𝒦_{n,q} = B ⊗ A for A `(m, n)` and B `(p, q)`.

    >>> commutation_matrix(2, 2, dtype=torch.int64)
    tensor([[1, 0, 0, 0],
            [0, 0, 1, 0],
            [0, 1, 0, 0],
            [0, 0, 0, 1]])
    """
    check_positive_int("commutation_matrix", "m", m)
    check_positive_int("commutation_matrix", "n", n)
    # row j + n·i of vec(Xᵀ) holds X[i, j], which is entry i + m·j of vec(X)
    source = (torch.arange(m)[:, None] + m * torch.arange(n)[None, :]).reshape(-1)  # (m·n,)
    return torch.eye(m * n, dtype=dtype, device=device)[source]


def rope_angles(m, d: int, base: float = 10000.0, *, dtype=torch.float64) -> torch.Tensor:
    """The angles m θ_1, …, m θ_{d/2} of position m, θ_i = base^(−2(i−1)/d): shape `(d/2,)`.

    >>> rope_angles(2, 4, base=100.0)
    tensor([2.0000, 0.2000], dtype=torch.float64)
    """
    check_positive_int("rope_angles", "d", d)
    check_positive_number("rope_angles", "base", base)
    if d % 2:
        raise ValueError(f"rope_angles: d must be even (pairs of coordinates); got d={d}")
    return m * base ** (-torch.arange(0, d, 2, dtype=dtype) / d)


def rope_matrix(m, d: int, base: float = 10000.0, *, dtype=torch.float64) -> torch.Tensor:
    """R_m = blockdiag(R(m θ_1), …, R(m θ_{d/2})) `(d, d)`, R(a) the 2×2 rotation by a.

    Orthogonal, with R_mᵀ R_n = R_{n−m}: rotated scores (R_m q)ᵀ(R_n k) = qᵀ R_{n−m} k depend
    on the offset n − m only.
    """
    angles = rope_angles(m, d, base, dtype=dtype)
    c, s = angles.cos(), angles.sin()
    rotations = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)  # (d/2, 2, 2)
    return torch.block_diag(*rotations)


def rope_apply(x: torch.Tensor, m, base: float = 10000.0) -> torch.Tensor:
    """R_m x for x `(..., d)` in O(d): x ⊙ cos + (−x_2, x_1, −x_4, x_3, …) ⊙ sin, each angle
    repeated for its pair; equal to ``x @ rope_matrix(m, d).T``."""
    check_tensor("rope_apply", "x", x, min_rank=1)
    angles = rope_angles(m, x.shape[-1], base, dtype=x.dtype).repeat_interleave(2)  # (d,)
    swapped = torch.stack([-x[..., 1::2], x[..., ::2]], dim=-1).reshape(x.shape)
    return x * angles.cos() + swapped * angles.sin()


def rope_complex(x: torch.Tensor, m, base: float = 10000.0) -> torch.Tensor:
    """R_m x as complex multiplication: each pair (x_{2i−1}, x_{2i}) is the number
    x_{2i−1} + i x_{2i}, turned by e^{i m θ_i}; x `(..., d)` real, result real `(..., d)`."""
    check_tensor("rope_complex", "x", x, min_rank=1)
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())  # (..., d/2)
    turn = torch.polar(torch.ones_like(z.real), rope_angles(m, x.shape[-1], base, dtype=x.dtype))
    return torch.view_as_real(z * turn).reshape(x.shape)


def rope_half_split(x: torch.Tensor, m, base: float = 10000.0) -> torch.Tensor:
    """RoPE pairing x_i with x_{i+d/2} (GPT-NeoX, Llama's Hugging Face code): the same rotation
    conjugated by the permutation that interleaves the two halves; x `(..., d)`."""
    check_tensor("rope_half_split", "x", x, min_rank=1)
    angles = rope_angles(m, x.shape[-1], base, dtype=x.dtype).repeat(2)  # (d,): (θ, θ)
    lo, hi = x.chunk(2, dim=-1)
    return x * angles.cos() + torch.cat([-hi, lo], dim=-1) * angles.sin()


def gram_schmidt(A: torch.Tensor, *, modified: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """A = Q R by Gram–Schmidt: A `(..., m, n)` with m ≥ n → Q `(..., m, n)` with orthonormal
    columns and R `(..., n, n)` upper triangular with positive diagonal.

    Column j of Q is a_j minus its projections on q_1, …, q_{j−1}, normalized. Classical
    Gram–Schmidt (``modified=False``) projects the original column, r_ij = q_iᵀ a_j; modified
    Gram–Schmidt projects what is left after the earlier subtractions, r_ij = q_iᵀ w. Both are
    the same in exact arithmetic; in floating point the loss of orthogonality ‖QᵀQ − I‖ grows
    like κ(A)² u for the classical and like κ(A) u for the modified form (Higham 2002, §19.8).
    Linearly dependent columns give r_jj = 0 and NaN in Q (no value checks, see `validation`).

    >>> Q, R = gram_schmidt(torch.tensor([[3.0, 1.0], [4.0, 2.0]], dtype=torch.float64))
    >>> R
    tensor([[5.0000, 2.2000],
            [0.0000, 0.4000]], dtype=torch.float64)
    """
    check_tensor("gram_schmidt", "A", A, min_rank=2)
    m, n = A.shape[-2:]
    if m < n:
        raise ValueError(
            f"gram_schmidt: A must have at least as many rows as columns (m ≥ n); "
            f"got A.shape={tuple(A.shape)}"
        )
    Q = torch.zeros_like(A)
    R = A.new_zeros(*A.shape[:-2], n, n)
    for j in range(n):
        w = A[..., :, j].clone()  # (..., m)
        for i in range(j):
            R[..., i, j] = (Q[..., :, i] * (w if modified else A[..., :, j])).sum(-1)
            w = w - R[..., i, j, None] * Q[..., :, i]
        R[..., j, j] = torch.linalg.vector_norm(w, dim=-1)
        Q[..., :, j] = w / R[..., j, j, None]
    return Q, R


def power_iteration(
    A: torch.Tensor, x0: torch.Tensor, steps: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Iterates x_k = A x_{k−1} / ‖A x_{k−1}‖, k = 1, …, steps, from x0 (normalized first), and
    their Rayleigh quotients r_k = x_kᵀ A x_k.

    A `(..., n, n)`, x0 `(..., n)` → iterates `(..., steps, n)` (row k−1 is x_k) and Rayleigh
    quotients `(..., steps)`. When |λ₁| > |λ₂|, tan ∠(x_k, v₁) ≤ |λ₂/λ₁|^k tan ∠(x0, v₁), and for
    symmetric A, |r_k − λ₁| shrinks like the square of that tangent (Golub and Van Loan 2013,
    §8.2.1). `tan_angle` measures that angle.

    >>> _, r = power_iteration(torch.tensor([[2.0, 0.0], [0.0, 1.0]]), torch.ones(2), 30)
    >>> round(r[-1].item(), 6)
    2.0
    """
    check_tensor("power_iteration", "A", A, min_rank=2)
    check_tensor("power_iteration", "x0", x0, min_rank=1)
    n = A.shape[-1]
    if A.shape[-2] != n:
        raise ValueError(f"power_iteration: A must be square; got A.shape={tuple(A.shape)}")
    if x0.shape[-1] != n or x0.shape[:-1] != A.shape[:-2]:
        raise ValueError(
            f"power_iteration: x0 must have shape (..., n) matching A (..., n, n); "
            f"got x0.shape={tuple(x0.shape)}, A.shape={tuple(A.shape)}"
        )
    check_same_dtype_and_device("power_iteration", "A", A, x0=x0)
    check_positive_int("power_iteration", "steps", steps)
    x = x0 / torch.linalg.vector_norm(x0, dim=-1, keepdim=True)
    iterates = []
    for _ in range(steps):
        x = (A @ x[..., None])[..., 0]
        x = x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)
        iterates.append(x)
    xs = torch.stack(iterates, dim=-2)  # (..., steps, n)
    return xs, torch.einsum("...ki,...ij,...kj->...k", xs, A, xs)


def tan_angle(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """tan ∠(x, v) for each vector x `(..., n)` and one direction v `(n,)`: shape `(...)`.

    Computed as ‖x − (xᵀv̂)v̂‖ / |xᵀv̂| with v̂ = v/‖v‖: the sine comes from the orthogonal part,
    which stays accurate for tiny angles where arccos of the cosine would not.

    >>> tan_angle(torch.tensor([[1.0, 1.0], [2.0, 0.0]]), torch.tensor([1.0, 0.0]))
    tensor([1., 0.])
    """
    check_tensor("tan_angle", "x", x, min_rank=1)
    check_tensor("tan_angle", "v", v, min_rank=1)
    if v.dim() != 1 or v.shape[0] != x.shape[-1]:
        raise ValueError(
            f"tan_angle: v must be one vector (n,) with n = x.shape[-1]; "
            f"got v.shape={tuple(v.shape)}, x.shape={tuple(x.shape)}"
        )
    check_same_dtype_and_device("tan_angle", "x", x, v=v)
    v = v / torch.linalg.vector_norm(v)
    along = x @ v  # (...)
    return torch.linalg.vector_norm(x - along[..., None] * v, dim=-1) / along.abs()


# ---------------------------------------------------------------- four views of a product


def _check_product(fn: str, A, B) -> None:
    check_matrix(fn, "A", A)
    check_matrix(fn, "B", B)
    if A.shape[1] != B.shape[0]:
        raise ValueError(
            f"{fn}: A and B must be matrices (m, k) and (k, n); "
            f"got A.shape={tuple(A.shape)}, B.shape={tuple(B.shape)}"
        )
    check_same_dtype_and_device(fn, "A", A, B=B)


def product_entries(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """AB entry by entry: c_ij = (row i of A) · (column j of B); A `(m, k)`, B `(k, n)`.

    >>> product_entries(torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0], [4.0]]))
    tensor([[11.]])
    """
    _check_product("product_entries", A, B)
    return torch.stack(
        [torch.stack([A[i] @ B[:, j] for j in range(B.shape[1])]) for i in range(A.shape[0])]
    )


def product_columns(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """AB column by column: column j of AB is A b_j, a combination of the columns of A.

    >>> product_columns(torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0, 1.0], [4.0, 0.0]]))
    tensor([[11.,  1.]])
    """
    _check_product("product_columns", A, B)
    return torch.stack([A @ B[:, j] for j in range(B.shape[1])], dim=1)


def product_rows(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """AB row by row: row i of AB is Σ_t a_it (row t of B), a combination of the rows of B.

    >>> product_rows(torch.tensor([[1.0], [2.0]]), torch.tensor([[3.0, 4.0]]))
    tensor([[3., 4.],
            [6., 8.]])
    """
    _check_product("product_rows", A, B)
    return torch.stack([sum(A[i, t] * B[t] for t in range(A.shape[1])) for i in range(A.shape[0])])


def product_outer(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """AB as a sum of k rank-one matrices: Σ_t (column t of A)(row t of B).

    This is the view linear attention is built on: KᵀV = Σ_j k_j v_jᵀ is a running sum.

    >>> product_outer(torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0], [4.0]]))  # 1·3 + 2·4
    tensor([[11.]])
    """
    _check_product("product_outer", A, B)
    return sum(
        (torch.outer(A[:, t], B[t]) for t in range(A.shape[1])),
        A.new_zeros(A.shape[0], B.shape[1]),
    )


# ---------------------------------------------------------------- determinants and rotations


def det_cofactor(A: torch.Tensor) -> torch.Tensor:
    """det A by Laplace expansion along the first row, A `(n, n)` → `()`.

    O(n!) operations: a definition to check against, never a way to compute (use
    ``torch.linalg.det``, which goes through PA = LU).

    >>> det_cofactor(torch.tensor([[2.0, 1.0], [1.0, 3.0]]))
    tensor(5.)
    """
    check_tensor("det_cofactor", "A", A, min_rank=2)
    if A.dim() != 2 or A.shape[0] != A.shape[1] or A.shape[0] == 0:
        raise ValueError(
            "det_cofactor: A must be a non-empty square matrix (n, n); "
            f"got A.shape={tuple(A.shape)}"
        )
    if A.shape[0] == 1:
        return A[0, 0]
    return sum(
        (-1) ** j * A[0, j] * det_cofactor(torch.cat([A[1:, :j], A[1:, j + 1 :]], dim=1))
        for j in range(A.shape[0])
    )


def polygon_area(points: torch.Tensor) -> torch.Tensor:
    """Signed area of a polygon whose vertices are the columns of points `(..., 2, n)`, in order
    (shoelace formula): positive when counter-clockwise; shape `(...)`.

    The image of the unit square under M has signed area det M.

    >>> polygon_area(torch.tensor([[0.0, 1.0, 1.0, 0.0], [0.0, 0.0, 1.0, 1.0]]))
    tensor(1.)
    """
    check_tensor("polygon_area", "points", points, min_rank=2)
    if points.shape[-2] != 2:
        raise ValueError(
            f"polygon_area: points must have shape (..., 2, n), one vertex per column; "
            f"got points.shape={tuple(points.shape)}"
        )
    x, y = points[..., 0, :], points[..., 1, :]
    return 0.5 * (x * y.roll(-1, dims=-1) - x.roll(-1, dims=-1) * y).sum(-1)


def _cos_sin(fn: str, angle, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(angle, torch.Tensor):
        check_tensor(fn, "angle", angle, min_rank=0)
    elif not isinstance(angle, numbers.Real) or isinstance(angle, bool):
        raise TypeError(
            f"{fn}: angle must be a real number or a floating-point tensor; "
            f"got {type(angle).__name__}"
        )
    t = torch.as_tensor(angle, dtype=dtype)
    return t.cos(), t.sin()


def _matrix3(rows) -> torch.Tensor:
    return torch.stack([torch.stack(row, dim=-1) for row in rows], dim=-2)


def rot_x(angle, *, dtype=torch.float64) -> torch.Tensor:
    """Rotation by `angle` (radians, counter-clockwise) about the x axis: `(3, 3)`, or
    `(..., 3, 3)` for a tensor of angles (roll).

    >>> rot_x(torch.tensor([0.1, 0.2], dtype=torch.float64)).shape
    torch.Size([2, 3, 3])
    """
    c, s = _cos_sin("rot_x", angle, dtype)
    one, zero = torch.ones_like(c), torch.zeros_like(c)
    return _matrix3([[one, zero, zero], [zero, c, -s], [zero, s, c]])


def rot_y(angle, *, dtype=torch.float64) -> torch.Tensor:
    """Rotation by `angle` about the y axis (pitch); shapes as `rot_x`.

    >>> torch.allclose(rot_y(0.3) @ rot_y(-0.3), torch.eye(3, dtype=torch.float64))
    True
    """
    c, s = _cos_sin("rot_y", angle, dtype)
    one, zero = torch.ones_like(c), torch.zeros_like(c)
    return _matrix3([[c, zero, s], [zero, one, zero], [-s, zero, c]])


def rot_z(angle, *, dtype=torch.float64) -> torch.Tensor:
    """Rotation by `angle` about the z axis (yaw); shapes as `rot_x`.

    >>> e_x, e_y = torch.eye(3, dtype=torch.float64)[:2]
    >>> torch.allclose(rot_z(torch.pi / 2) @ e_x, e_y)
    True
    """
    c, s = _cos_sin("rot_z", angle, dtype)
    one, zero = torch.ones_like(c), torch.zeros_like(c)
    return _matrix3([[c, -s, zero], [s, c, zero], [zero, zero, one]])
