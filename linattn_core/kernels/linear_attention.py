"""Causal linear attention on Triton kernels, with its backward pass: the autograd Function and
the public function behind `linear_attention(..., method="triton")`.

Every pass is one `causal_scan` (see `scan.py`), o_i = r_i Σ_j (q_i·k_j + β) w_j v_j over j ≤ i
or j ≥ i. With s_ij = φ(q_i)·φ(k_j), n_i = Σ_{j ≤ i} s_ij v_j and den_i = Σ_{j ≤ i} s_ij + eps,
the forward pass is o_i = n_i / den_i (or n_i unnormalized), and stores ρ_i = 1 / den_i. Given
the output gradient g_i = ∂L/∂o_i, the chain rule through n_i and den_i (sums of s_ij v_j and
of s_ij over the same pairs) gives, with a_i = −g_i·o_i,

    ∂L/∂φ(q_i) = ρ_i Σ_{j ≤ i} (g_i·v_j + a_i) φ(k_j)      queries g, keys v, query bias a,
                                                           output rows scaled by ρ
    ∂L/∂φ(k_j) = Σ_{i ≥ j} (v_j·g_i + a_i) ρ_i φ(q_i)      reverse; queries v, keys g, key bias
                                                           a, keys scaled by ρ
    ∂L/∂v_j    = Σ_{i ≥ j} (φ(k_j)·φ(q_i)) ρ_i g_i         reverse; queries φ(k), keys φ(q),
                                                           keys scaled by ρ

(unnormalized: ρ = 1 and no bias). The reverse scans carry the state Σ_{i ≥ j} φ(q_i)ᵀ ρ_i g_i
from the end of the sequence backwards, as the chunked backward of FLA's linear attention does.
Applying ρ inside the kernels, in float32, keeps g/den (about 1/N) out of the 16-bit inputs.
"""

import math

import torch

from linattn_core._validation import check_eps, check_positive_int
from linattn_core.kernels.scan import causal_scan
from linattn_core.kernels.validation import check_kernel_inputs


class CausalLinearAttention(torch.autograd.Function):
    """Causal linear attention `(B, H, N, d)` → `(B, H, N, d_v)`, forward and backward in Triton."""

    @staticmethod
    def forward(ctx, phi_q, phi_k, v, normalize, eps, chunk_size, chunks_per_segment):
        out, rden = causal_scan(
            phi_q,
            phi_k,
            v,
            normalize=normalize,
            eps=eps,
            chunk_size=chunk_size,
            chunks_per_segment=chunks_per_segment,
        )  # (B, H, N, d_v), (B, H, N) or None
        ctx.save_for_backward(phi_q, phi_k, v, out if normalize else None, rden)
        ctx.options = {"chunk_size": chunk_size, "chunks_per_segment": chunks_per_segment}
        return out

    @staticmethod
    def backward(ctx, grad_out):
        phi_q, phi_k, v, out, rden = ctx.saved_tensors
        grad_phi_q = grad_phi_k = grad_v = None
        for_q = for_k = for_v = {}  # the bias and scale options of the three scans
        if rden is not None:
            bias = -(grad_out.float() * out.float()).sum(dim=-1)  # (B, H, N): a_i = −g_i·o_i
            for_q = {"bias": bias, "bias_side": "query", "scale": rden, "scale_side": "query"}
            for_k = {"bias": bias, "bias_side": "key", "scale": rden, "scale_side": "key"}
            for_v = {"scale": rden, "scale_side": "key"}
        if ctx.needs_input_grad[0]:
            grad_phi_q, _ = causal_scan(grad_out, v, phi_k, **for_q, **ctx.options)
        if ctx.needs_input_grad[1]:
            grad_phi_k, _ = causal_scan(v, grad_out, phi_q, reverse=True, **for_k, **ctx.options)
        if ctx.needs_input_grad[2]:
            grad_v, _ = causal_scan(phi_k, phi_q, grad_out, reverse=True, **for_v, **ctx.options)
        return grad_phi_q, grad_phi_k, grad_v, None, None, None, None


def triton_linear_attention(
    phi_q,
    phi_k,
    v,
    *,
    causal=True,
    normalize=True,
    chunk_size=64,
    eps=1e-6,
    chunks_per_segment=None,
):
    """`linear_attention` on Triton kernels: causal, forward and backward, in O(N) memory.

    normalize=True:  o_i = φ(q_i) S_i / (φ(q_i)·z_i + eps)
    normalize=False: o_i = φ(q_i) S_i
    with S_i = Σ_{j ≤ i} φ(k_j)ᵀ v_j `(d, d_v)` and z_i = Σ_{j ≤ i} φ(k_j) `(d,)` (all j when
    not causal). Causal attention runs the chunked kernels of `scan.py`, accumulating in float32;
    non-causal attention is two plain matrix products, φ(Q) (φ(K)ᵀ V), as fast as any kernel.

    The kernels run on CUDA tensors, or on CPU tensors under the Triton interpreter (the
    environment variable TRITON_INTERPRET=1, set before triton is first imported).

    Args:
        phi_q, phi_k: feature-mapped queries and keys `(..., N, d)`, d ∈ {16, 32, 64, 128};
            `(B, H, N, d)` is the kernels' layout, other leading dimensions are reshaped.
        v: values `(..., N, d_v)`, d_v ∈ {16, 32, 64, 128}.
        causal: let position i attend to positions j ≤ i only.
        normalize: divide by the denominator; False returns the numerator.
        chunk_size: tokens per chunk, one of 16, 32, 64, 128.
        eps: non-negative number added to the denominator.
        chunks_per_segment: chunks that one program scans in a row (positive int), or None for
            the launcher's choice (the whole sequence on the CPU, enough segments to fill the GPU).

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
    if chunks_per_segment is not None:
        check_positive_int(fn, "chunks_per_segment", chunks_per_segment)
    names = ("phi_q", "phi_k", "v")
    check_kernel_inputs(fn, names, phi_q, phi_k, v, chunk_size=chunk_size, rank=None)
    if not causal:
        out = phi_q @ (phi_k.mT @ v)  # (..., N, d_v) through the state φ(K)ᵀV (..., d, d_v)
        if not normalize:
            return out
        return out / (phi_q @ phi_k.sum(dim=-2)[..., None] + eps)  # denominator (..., N, 1)

    *batch, n, _ = phi_q.shape
    if len(batch) != 2:
        heads = math.prod(batch)  # any leading dimensions become (1, heads)
        phi_q, phi_k, v = (x.reshape(1, heads, n, x.shape[-1]) for x in (phi_q, phi_k, v))
    out = CausalLinearAttention.apply(
        phi_q, phi_k, v, normalize, eps, chunk_size, chunks_per_segment
    )  # (B, H, N, d_v)
    return out.reshape(*batch, n, v.shape[-1])
