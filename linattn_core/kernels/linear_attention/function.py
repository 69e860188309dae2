"""Causal linear attention on Triton kernels: the autograd Function and the public function behind
`linear_attention(..., method="triton")`.

The layers, as in flash-linear-attention's `ops/`: `@triton.jit` kernels and their launchers in
`forward.py` and `backward.py`, tiles per GPU architecture in `kernels/tiles.py`, the input rule in
`kernels/common.py`, and here the autograd Function that joins the two passes and the documented
public function. With s_ij = φ(q_i)·φ(k_j), the forward pass computes

    o_i = r_i Σ_{j ≤ i} s_ij v_j,    r_i = 1 / (Σ_{j ≤ i} s_ij + ε)    (r_i = 1 unnormalized)

and saves its inputs, its output (in float32) and the N numbers r_i; the backward pass applies
the chain rule of the book's first chapter (the denominator is the numerator of a value column
of ones),

    ∂L/∂φ(q_i) = r_i Σ_{j ≤ i} (g_i·v_j + a_i) φ(k_j),      a_i = −g_i·o_i
    ∂L/∂φ(k_j) = Σ_{i ≥ j} r_i (g_i·v_j + a_i) φ(q_i)
    ∂L/∂v_j    = Σ_{i ≥ j} r_i s_ij g_i

chunk by chunk, recomputing the forward states instead of storing them: O(N(d + d_v)) memory.
"""

import math

import torch

from linattn_core.kernels.common import check_inputs, device_arch
from linattn_core.kernels.linear_attention.backward import chunk_linear_attention_bwd
from linattn_core.kernels.linear_attention.forward import chunk_linear_attention_fwd
from linattn_core.kernels.tiles import kernel_chunk
from linattn_core.validation import check_eps


class CausalLinearAttention(torch.autograd.Function):
    """Causal linear attention `(B, H, N, d)` → `(B, H, N, d_v)`, forward and backward in Triton."""

    @staticmethod
    def forward(ctx, phi_q, phi_k, v, normalize, eps, chunk_size):
        q, k, v = (x.contiguous() for x in (phi_q, phi_k, v))  # the kernels' layout
        ctx.options = {
            "chunk_size": kernel_chunk(chunk_size, v.dtype),
            "arch": device_arch(v.device),
        }
        if v.numel() == 0:  # no tokens or no heads: nothing to launch
            ctx.save_for_backward(q, k, v, None, None)
            return torch.empty_like(v)
        keep = normalize and any(ctx.needs_input_grad[:3])  # the backward's a = −g·o needs o
        o, rden, o32 = chunk_linear_attention_fwd(
            q, k, v, normalize=normalize, eps=eps, keep_float32=keep, **ctx.options
        )
        ctx.save_for_backward(q, k, v, o32, rden)
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, rden = ctx.saved_tensors
        if v.numel() == 0:
            return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v), None, None, None
        dq, dk, dv = chunk_linear_attention_bwd(q, k, v, o, rden, do.contiguous(), **ctx.options)
        return dq, dk, dv, None, None, None


def triton_linear_attention(
    phi_q, phi_k, v, *, causal=True, normalize=True, chunk_size=64, eps=1e-6
):
    """`linear_attention` on Triton kernels: causal, forward and backward, in O(N) memory.

    normalize=True:  o_i = φ(q_i) S_i / (φ(q_i)·z_i + eps)
    normalize=False: o_i = φ(q_i) S_i
    with S_i = Σ_{j ≤ i} φ(k_j)ᵀ v_j `(d, d_v)` and z_i = Σ_{j ≤ i} φ(k_j) `(d,)` (all j when
    not causal). Causal attention runs the chunked kernels of `forward.py` and `backward.py`,
    which multiply in the inputs' dtype and accumulate in float32; non-causal attention is two
    plain matrix products, φ(Q) (φ(K)ᵀ V), as fast as any kernel.

    The kernels run on CUDA tensors, or on CPU tensors under the Triton interpreter (the
    environment variable TRITON_INTERPRET=1, set before triton is first imported).

    Args:
        phi_q, phi_k: feature-mapped queries and keys `(..., N, d)`, d ∈ {16, 32, 64, 128};
            `(B, H, N, d)` is the kernels' layout (contiguous; other strides are copied),
            other leading dimensions are reshaped.
        v: values `(..., N, d_v)`, d_v ∈ {16, 32, 64, 128}.
        causal: let position i attend to positions j ≤ i only.
        normalize: divide by the denominator; False returns the numerator.
        chunk_size: tokens per chunk C, one of `SUPPORTED_CHUNK_SIZES`.
        eps: non-negative number added to the denominator.

    Returns:
        `(..., N, d_v)` in the inputs' dtype (float32, bfloat16 or float16).

    >>> q = torch.ones(2, 4, 8, 24)  # d = 24: no tensor-core tile
    >>> triton_linear_attention(q, q, q)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: triton_linear_attention: the feature dimension d = phi_q.shape[-1] must be one ...
    """
    fn = "triton_linear_attention"
    check_eps(fn, eps)
    check_inputs(fn, ("phi_q", "phi_k", "v"), phi_q, phi_k, v, chunk_size=chunk_size)
    if not causal:
        out = phi_q @ (phi_k.mT @ v)  # (..., N, d_v) through the state φ(K)ᵀV (..., d, d_v)
        if not normalize:
            return out
        return out / (phi_q @ phi_k.sum(dim=-2)[..., None] + eps)  # denominator (..., N, 1)

    *batch, n, _ = phi_q.shape
    if len(batch) != 2:
        heads = math.prod(batch)  # any leading dimensions become (1, heads)
        phi_q, phi_k, v = (x.reshape(1, heads, n, x.shape[-1]) for x in (phi_q, phi_k, v))
    out = CausalLinearAttention.apply(phi_q, phi_k, v, normalize, eps, chunk_size)  # (B, H, N, d_v)
    return out.reshape(*batch, n, v.shape[-1])
