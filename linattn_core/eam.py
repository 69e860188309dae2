"""Efficient Attention (Shen et al. 2021): normalize queries and keys first, multiply later.

Dot-product attention ν(QKᵀ)V normalizes the N×N score matrix. Efficient attention normalizes
the queries and the keys separately, which lets the product be taken in the cheap order:

    E(Q, K, V) = ν_q(Q) (ν_k(K)ᵀ V),        ν_k(K)ᵀV is only d×d_v,

in O(N d d_v) time and O(N (d + d_v) + d d_v) memory. Two normalizations:

- "scaling": ν_q(X) = ν_k(X) = X/√N. Then E = (QKᵀ/N)V exactly: dot-product attention with
  the scaling normalization ν(Y) = Y/N, computed in the other order.
- "softmax": ν_q = σ_row (softmax over the feature axis of each query), ν_k = σ_col (softmax
  over the sequence axis of each key feature). The implied N×N matrix σ_row(Q)σ_col(K)ᵀ has
  non-negative rows that sum to 1, like softmax attention's, but it is a different matrix, of
  rank at most d: column f of σ_col(K) is a "global attention map" over the N positions, row f
  of σ_col(K)ᵀV the context vector it extracts, and each query mixes the d context vectors
  with the weights σ_row(q_i).

The column softmax runs over all N positions, so the softmax form has no causal variant here.
"""

import math

from linattn_core.validation import check_attention_inputs, check_choice

__all__ = ["NORMALIZATIONS", "efficient_attention", "implied_attention"]

NORMALIZATIONS = ("softmax", "scaling")


def efficient_attention(q, k, v, *, normalization="softmax"):
    """Efficient attention ν_q(q) (ν_k(k)ᵀ v), never forming an N×N matrix.

    normalization="softmax": σ_row(q) (σ_col(k)ᵀ v), softmax over the last (feature) axis of q
        and over the sequence axis (-2) of k. Not equal to softmax attention.
    normalization="scaling": (q/√N) ((k/√N)ᵀ v), which equals (q kᵀ / N) v exactly.

    Args:
        q, k: queries and keys `(..., N, d)`.
        v: values `(..., N, d_v)`.
        normalization: "softmax" or "scaling".

    Returns:
        `(..., N, d_v)`; equal to `implied_attention(q, k, normalization=...) @ v`. Empty if
        N = 0 or a batch dimension is 0.

    >>> from linattn_core.testing import random_qkv, relative_error
    >>> q, k, v = random_qkv(2, n=50, d=4, d_v=3)
    >>> efficient_attention(q, k, v).shape
    torch.Size([2, 50, 3])
    >>> out = efficient_attention(q, k, v, normalization="scaling")
    >>> relative_error(out, (q @ k.mT / 50) @ v) < 1e-12
    True
    """
    fn = "efficient_attention"
    check_attention_inputs(fn, ("q", "k", "v"), q, k, v)
    check_choice(fn, "normalization", normalization, NORMALIZATIONS)
    q, k = _normalize(q, k, normalization)  # (..., N, d), (..., N, d)
    context = k.mT @ v  # (..., d, d_v): row f is the global context vector g_f
    return q @ context  # (..., N, d_v)


def implied_attention(q, k, *, normalization="softmax"):
    """The N×N matrix that efficient attention applies to the values, for teaching and tests.

    normalization="softmax": σ_row(q) σ_col(k)ᵀ, non-negative with rows summing to 1, rank ≤ d.
    normalization="scaling": (q/√N)(k/√N)ᵀ = q kᵀ / N.

    `efficient_attention(q, k, v, normalization=...)` equals `implied_attention(q, k, ...) @ v`
    but never builds this matrix: this function costs O(N² d) time and O(N²) memory.

    Args:
        q, k: queries and keys `(..., N, d)`.
        normalization: "softmax" or "scaling".

    Returns:
        `(..., N, N)`.

    >>> import torch
    >>> from linattn_core.testing import random_qkv
    >>> q, k, _ = random_qkv(n=6, d=2)
    >>> attention = implied_attention(q, k)
    >>> attention.shape, [round(row_sum, 12) for row_sum in attention.sum(dim=-1).tolist()]
    (torch.Size([6, 6]), [1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    >>> int(torch.linalg.matrix_rank(attention))  # at most d = 2
    2
    """
    fn = "implied_attention"
    # the keys stand in for the values: the checks of q and k are those of attention inputs
    check_attention_inputs(fn, ("q", "k", "k"), q, k, k)
    check_choice(fn, "normalization", normalization, NORMALIZATIONS)
    q, k = _normalize(q, k, normalization)  # (..., N, d), (..., N, d)
    return q @ k.mT  # (..., N, N)


def _normalize(q, k, normalization):
    """(ν_q(q), ν_k(k)) for the chosen normalization."""
    if normalization == "softmax":
        return q.softmax(dim=-1), k.softmax(dim=-2)
    scale = 1 / math.sqrt(max(q.shape[-2], 1))  # N = 0: no tokens, nothing to scale
    return q * scale, k * scale
