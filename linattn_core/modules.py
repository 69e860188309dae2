"""Multi-head self-attention layers: linear (kernelized) attention and its softmax reference.

Both layers share one structure, that of a transformer's attention block: project the input
x `(..., N, d_model)` to queries, keys and values, split them into H heads of d = d_model / H
features, attend within each head, merge the heads and project back:

    q, k, v = x W_qᵀ, x W_kᵀ, x W_vᵀ            split into heads (..., H, N, d)
    o_h     = attention(q_h, k_h, v_h)         per head
    y       = concat_h(o_h) W_oᵀ               (..., N, d_model)

`LinearSelfAttention` attends with `linear_attention` on feature-mapped queries and keys, so it
never forms the N×N matrix; `SoftmaxSelfAttention` attends with `softmax_attention` and is the
layer it replaces.
"""

from collections.abc import Callable

import torch
from torch import nn

from linattn_core import feature_maps
from linattn_core.attention import linear_attention, softmax_attention
from linattn_core.methods import LINEAR_ATTENTION_METHODS
from linattn_core.validation import (
    ArgumentTypeError,
    check_choice,
    check_eps,
    check_positive_int,
    check_tensor,
)


class _MultiHeadSelfAttention(nn.Module):
    """Projections, head split and merge; subclasses define `attend` on `(..., H, N, d)`."""

    def __init__(self, d_model, num_heads, *, causal, bias, device, dtype):
        super().__init__()
        fn = type(self).__name__
        check_positive_int(fn, "d_model", d_model)
        check_positive_int(fn, "num_heads", num_heads)
        if d_model % num_heads:
            raise ValueError(
                f"{fn}: num_heads must divide d_model; got d_model={d_model}, num_heads={num_heads}"
            )
        if not isinstance(causal, bool):
            raise ArgumentTypeError(f"{fn}: causal must be a bool; got causal={causal!r}")
        self.d_model, self.num_heads, self.causal = d_model, num_heads, causal
        factory = {"bias": bias, "device": device, "dtype": dtype}
        self.q_proj = nn.Linear(d_model, d_model, **factory)
        self.k_proj = nn.Linear(d_model, d_model, **factory)
        self.v_proj = nn.Linear(d_model, d_model, **factory)
        self.out_proj = nn.Linear(d_model, d_model, **factory)

    def forward(self, x):
        """`(..., N, d_model)` -> `(..., N, d_model)`."""
        fn = type(self).__name__
        check_tensor(fn, "x", x, min_rank=2)
        if x.shape[-1] != self.d_model:
            raise ValueError(
                f"{fn}: x must have d_model={self.d_model} features in its last dimension; "
                f"got x.shape={tuple(x.shape)}"
            )
        q, k, v = (self._split_heads(proj(x)) for proj in (self.q_proj, self.k_proj, self.v_proj))
        heads = self.attend(q, k, v)  # (..., H, N, d)
        return self.out_proj(heads.transpose(-3, -2).flatten(-2))  # (..., N, d_model)

    def _split_heads(self, x):
        """(..., N, d_model) -> (..., H, N, d)"""
        return x.unflatten(-1, (self.num_heads, -1)).transpose(-3, -2)

    def extra_repr(self):
        return f"d_model={self.d_model}, num_heads={self.num_heads}, causal={self.causal}"


class LinearSelfAttention(_MultiHeadSelfAttention):
    """Multi-head linear attention: a drop-in for softmax self-attention in O(N) memory.

    Per head h, with d = d_model / num_heads features and φ = `feature_map`,

        o_i = φ(q_i) Σ_j φ(k_j)ᵀ v_j / (φ(q_i)·Σ_j φ(k_j) + eps),   j ≤ i when causal,

    computed by `linear_attention` (never an N×N matrix unless `method="parallel"`). No scaling
    is applied to q or k: scaling by 1/√d belongs to the exponential kernel, not to φ.

    Args:
        d_model: features of the input and the output.
        num_heads: number of heads H; must divide d_model.
        feature_map: any callable `(..., d)` -> `(..., m)` applied to queries and keys; the
            default φ(x) = elu(x) + 1 is positive, so every denominator is positive.
        causal: let position i attend to positions j ≤ i only (a decoder).
        method, chunk_size, eps: passed to `linear_attention`.
        bias: whether the four projections have a bias.
        device, dtype: of the parameters, as in `torch.nn.Linear`.

    Shapes: `(..., N, d_model)` -> `(..., N, d_model)`.

    >>> _ = torch.manual_seed(0)
    >>> layer = LinearSelfAttention(d_model=8, num_heads=2, causal=True, dtype=torch.float64)
    >>> x = torch.randn(3, 5, 8, dtype=torch.float64)
    >>> layer(x).shape
    torch.Size([3, 5, 8])
    >>> layer.method = "recurrent"  # another form of the same function
    >>> y = layer(x)
    >>> layer.method = "parallel"
    >>> bool(torch.allclose(y, layer(x)))
    True
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int = 1,
        *,
        feature_map: Callable[[torch.Tensor], torch.Tensor] = feature_maps.elu_plus_one,
        causal: bool = False,
        method: str = "auto",
        chunk_size: int = 64,
        eps: float = 1e-6,
        bias: bool = False,
        device=None,
        dtype=None,
    ):
        super().__init__(d_model, num_heads, causal=causal, bias=bias, device=device, dtype=dtype)
        fn = type(self).__name__
        if not callable(feature_map):
            raise ArgumentTypeError(
                f"{fn}: feature_map must be callable; got {type(feature_map).__name__}"
            )
        check_choice(fn, "method", method, LINEAR_ATTENTION_METHODS)
        check_positive_int(fn, "chunk_size", chunk_size)
        check_eps(fn, eps)
        self.feature_map = feature_map
        self.method = method
        self.chunk_size = chunk_size
        self.eps = eps

    def attend(self, q, k, v):
        """Linear attention of each head: `(..., H, N, d)` -> `(..., H, N, d)`."""
        return linear_attention(
            self.feature_map(q),
            self.feature_map(k),
            v,
            causal=self.causal,
            method=self.method,
            chunk_size=self.chunk_size,
            eps=self.eps,
        )

    def extra_repr(self):
        name = getattr(self.feature_map, "__name__", repr(self.feature_map))
        return f"{super().extra_repr()}, feature_map={name}, method={self.method!r}"


class SoftmaxSelfAttention(_MultiHeadSelfAttention):
    """Multi-head softmax attention with the same projections: the reference layer.

    Per head, o_i = Σ_j softmax_j(q_i·k_j / √d) v_j (j ≤ i when causal), computed by
    `softmax_attention`, which materializes the N×N matrix. Same arguments and shapes as
    `LinearSelfAttention` without the feature map and its options.

    >>> _ = torch.manual_seed(0)
    >>> layer = SoftmaxSelfAttention(d_model=6, num_heads=3)
    >>> layer(torch.randn(2, 4, 6)).shape
    torch.Size([2, 4, 6])
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int = 1,
        *,
        causal: bool = False,
        bias: bool = False,
        device=None,
        dtype=None,
    ):
        super().__init__(d_model, num_heads, causal=causal, bias=bias, device=device, dtype=dtype)

    def attend(self, q, k, v):
        """Softmax attention of each head: `(..., H, N, d)` -> `(..., H, N, d)`."""
        return softmax_attention(q, k, v, causal=self.causal)
