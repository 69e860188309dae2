"""Linear-algebra tools of the book: vectorization, Kronecker products, the commutation matrix
and rotary position embeddings (RoPE), in float64 torch unless the inputs say otherwise.

`vec` stacks columns, the convention of the Kronecker identities vec(AXB) = (Bᵀ ⊗ A) vec(X)
(Magnus and Neudecker, *Matrix Differential Calculus*). RoPE rotates consecutive pairs of
coordinates (x_1, x_2), (x_3, x_4), … by the angles m θ_i, θ_i = base^(−2(i−1)/d)
(Su et al., *RoFormer*); `rope_half_split` pairs x_i with x_{i+d/2} instead (GPT-NeoX).
"""

import torch

from linattn_core.validation import check_positive_int, check_positive_number, check_tensor

__all__ = [
    "commutation_matrix",
    "kron",
    "rope_angles",
    "rope_apply",
    "rope_complex",
    "rope_half_split",
    "rope_matrix",
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
    """The permutation K_{m,n} `(m·n, m·n)` with K vec(X) = vec(Xᵀ) for every X ∈ R^{m×n}.

    Being a permutation, Kᵀ = K⁻¹ = K_{n,m}; it swaps the factors of a Kronecker product:
    K_{p,m} (A ⊗ B) K_{n,q} = B ⊗ A for A `(m, n)` and B `(p, q)`.

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
