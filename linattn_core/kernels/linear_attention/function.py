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

from linattn_core.kernels.common import check_kernel_inputs, device_arch
from linattn_core.kernels.layout import (
    as_heads,
    contiguous,
    from_heads,
    has_work,
    passed_state,
    zero_grads,
)
from linattn_core.kernels.linear_attention.backward import chunk_linear_attention_bwd
from linattn_core.kernels.linear_attention.forward import chunk_linear_attention_fwd
from linattn_core.kernels.tiles import kernel_chunk
from linattn_core.validation import check_attention_inputs, check_cu_seqlens_values, check_eps


def linear_forward(q, k, v, s0, z0, normalize, eps, chunk_size, final, keep, cu_seqlens=None):
    """The forward pass on contiguous `(B, H, N, ·)` inputs: (o, o in float32 for the backward
    pass when `keep` (o itself for float32 inputs) else None, r `(B, H, N)` float32 or None
    (not normalized), S_N and z_N in v's dtype, or None when not `final`). With `cu_seqlens`
    (S + 1 boundaries, B = 1), S packed sequences and their states `(S, H, ·)`."""
    options = {"chunk_size": kernel_chunk(chunk_size, v.dtype), "arch": device_arch(v.device)}
    if not has_work(v):  # no tokens or no heads: the state passes through
        if not final:
            return torch.empty_like(v), None, None, None, None
        states = state_rows(v, cu_seqlens)
        s_n = passed_state(s0, (*states, v.shape[-1], q.shape[-1]), v)
        z_n = passed_state(z0, (*states, q.shape[-1]), q) if normalize else None
        return torch.empty_like(v), None, None, s_n, z_n
    o, rden, o32, final_state = chunk_linear_attention_fwd(
        q, k, v, None if s0 is None else (s0, z0), normalize=normalize, eps=eps,
        keep_float32=keep, final_state=final, cu_seqlens=cu_seqlens, **options,
    )  # fmt: skip
    if not final:
        return o, o32, rden, None, None
    s_n, z_n = final_state
    return o, o32, rden, s_n.to(v.dtype), None if z_n is None else z_n.to(v.dtype)


def state_rows(v, cu_seqlens):
    """The batch dimensions of the states of `(B, H, N, ·)` inputs: (B, H), or (S, H) for S
    sequences packed by `cu_seqlens` (S + 1 boundaries)."""
    return v.shape[:2] if cu_seqlens is None else (cu_seqlens.shape[0] - 1, v.shape[1])


def linear_backward(
    q, k, v, o, rden, s0, z0, do, ds_n, dz_n, initial_grad, chunk_size, cu_seqlens=None
):  # fmt: skip
    """The gradients (dq, dk, dv, ∂L/∂S_0, ∂L/∂z_0) for the output gradient `do` and the final
    state's (ds_n, dz_n, each None when unused) on the forward pass's contiguous inputs, its
    float32 o and r and its `cu_seqlens` (`linear_forward`); the initial state's in v's dtype
    when `initial_grad` and the state was given, else None."""
    if not has_work(v):  # the final state was the initial one
        passed = (
            None if x is None or not initial_grad else torch.zeros_like(x) if g is None else g
            for g, x in ((ds_n, s0), (dz_n, z0))
        )
        return *zero_grads(q, k, v), *passed
    dq, dk, dv, initial = chunk_linear_attention_bwd(
        q, k, v, o, rden, torch.zeros_like(v) if do is None else do.contiguous(),
        None if s0 is None else (s0, z0),
        None if ds_n is None and dz_n is None else (ds_n, dz_n),
        initial_state_grad=initial_grad, chunk_size=kernel_chunk(chunk_size, v.dtype),
        arch=device_arch(v.device), cu_seqlens=cu_seqlens,
    )  # fmt: skip
    if initial is None:
        return dq, dk, dv, None, None
    ds_0, dz_0 = initial
    return dq, dk, dv, ds_0.to(v.dtype), None if dz_0 is None else dz_0.to(v.dtype)


class CausalLinearAttention(torch.autograd.Function):
    """Causal linear attention `(B, H, N, d)` → (`(B, H, N, d_v)`, final state S `(B, H, d_v, d)`,
    z `(B, H, d)`), forward and backward in Triton, from an initial state (S_0, z_0) or zeros
    (None). The final state is None unless asked for (`final`): its rounding to the inputs'
    dtype is two more operations on the host, which short sequences feel. Eager mode's path:
    `torch.compile` traces the same passes as the operators `linattn::linear_attention_forward`
    and `_backward` (`ops.py`)."""

    @staticmethod
    def forward(ctx, phi_q, phi_k, v, s0, z0, normalize, eps, chunk_size, final, cu_seqlens):
        ctx.set_materialize_grads(False)  # an unused final state adds nothing to the backward
        q, k, v, s0, z0, cu_seqlens = contiguous(
            phi_q, phi_k, v, s0, z0, cu_seqlens
        )  # the kernels' layout
        keep = normalize and any(ctx.needs_input_grad[:5])  # the backward's a = −g·o needs o
        o, o32, rden, s_n, z_n = linear_forward(
            q, k, v, s0, z0, normalize, eps, chunk_size, final, keep, cu_seqlens
        )
        ctx.save_for_backward(q, k, v, o32, rden, s0, z0, cu_seqlens)
        ctx.chunk_size = chunk_size
        return o, s_n, z_n

    @staticmethod
    def backward(ctx, do, ds_n, dz_n):
        q, k, v, o, rden, s0, z0, cu_seqlens = ctx.saved_tensors
        wanted = ctx.needs_input_grad
        dq, dk, dv, ds_0, dz_0 = linear_backward(
            q, k, v, o, rden, s0, z0, do, ds_n, dz_n, wanted[3] or wanted[4], ctx.chunk_size,
            cu_seqlens,
        )  # fmt: skip
        ds_0 = ds_0 if wanted[3] else None
        dz_0 = dz_0 if wanted[4] else None
        return dq, dk, dv, ds_0, dz_0, None, None, None, None, None


def triton_linear_attention(
    phi_q,
    phi_k,
    v,
    *,
    causal=False,
    normalize=True,
    chunk_size=64,
    eps=1e-6,
    initial_state=None,
    output_final_state=False,
):
    """`linear_attention` on Triton kernels: causal, forward and backward, in O(N) memory.

    normalize=True:  o_i = S_i φ(q_i) / (φ(q_i)·z_i + eps)
    normalize=False: o_i = S_i φ(q_i)
    with S_i = S_0 + Σ_{j ≤ i} v_j φ(k_j)ᵀ `(d_v, d)` and z_i = z_0 + Σ_{j ≤ i} φ(k_j) `(d,)` (all
    j when not causal), (S_0, z_0) = `initial_state` or zeros. Causal attention runs the chunked
    kernels of `forward.py` and `backward.py`, which multiply in the inputs' dtype and
    accumulate in float32; non-causal attention is two plain matrix products through the state
    S_0 + Vᵀφ(K), as fast as any kernel.

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
        initial_state: (S_0 `(..., d_v, d)`, z_0 `(..., d)` or None without normalization), in
            the inputs' dtype (`attention.LinearAttentionState`), or None for zeros. Inputs are
            checked by `linear_attention`, which calls this function for method="triton".
        output_final_state: also return the state after the last token.

    Returns:
        `(..., N, d_v)` in the inputs' dtype (float32, bfloat16 or float16); with
        output_final_state, (output, (S, z)), the final state in the inputs' dtype (z None
        without normalization).

    >>> q = torch.ones(2, 4, 8, 24)  # d = 24: no tensor-core tile
    >>> triton_linear_attention(q, q, q)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: triton_linear_attention: the feature dimension d = phi_q.shape[-1] must be one ...
    """
    fn = "triton_linear_attention"
    check_eps(fn, eps)
    check_attention_inputs(fn, ("phi_q", "phi_k", "v"), phi_q, phi_k, v)
    return linear_attention_kernels(
        phi_q, phi_k, v, causal=causal, normalize=normalize, chunk_size=chunk_size, eps=eps,
        initial_state=initial_state, output_final_state=output_final_state, fn=fn,
    )  # fmt: skip


def linear_attention_kernels(
    phi_q, phi_k, v, *, causal, normalize, chunk_size, eps, initial_state, output_final_state,
    cu_seqlens=None, fn="linear_attention",
):  # fmt: skip
    """`triton_linear_attention` for inputs that passed `check_attention_inputs` (and `eps`
    `check_eps`), which `linear_attention` checks itself: what the kernels add to the checks
    (`check_kernel_inputs`), and the passes, in eager mode through `CausalLinearAttention`,
    under `torch.compile` through the operators of `ops.py`.

    `cu_seqlens` (causal only, checked by `validation.check_cu_seqlens` and the states by the
    caller): the inputs `(1, …, N, ·)` hold S packed sequences, the states are `(S, …, ·)`; the
    kernels walk each sequence whole from its own initial state (`forward.sequence_walk`),
    reading no value on the host. Its values are checked only where that costs no
    synchronization, on a CPU (`validation.check_cu_seqlens_values`)."""
    check_kernel_inputs(fn, ("phi_q", "phi_k", "v"), phi_q, v, chunk_size=chunk_size)
    s0, z0 = (None, None) if initial_state is None else initial_state
    z0 = z0 if normalize else None
    if not causal:
        return _non_causal(phi_q, phi_k, v, s0, z0, normalize, eps, output_final_state)

    apply = CausalLinearAttention.apply
    if torch.compiler.is_compiling():
        from linattn_core.kernels.ops import causal_linear_attention as apply
    batch = phi_q.shape[:-2]
    if cu_seqlens is None:
        inputs = as_heads(batch, phi_q, phi_k, v, s0, z0)
        out, s_n, z_n = from_heads(
            batch, *apply(*inputs, normalize, eps, chunk_size, output_final_state, None)
        )
        return (out, (s_n, z_n)) if output_final_state else out
    check_values_on_cpu(fn, cu_seqlens, phi_q.shape[-2])
    heads = batch[1:]  # the tokens' batch is (1, *heads), the states' (S, *heads)
    inputs = (*packed_heads(heads, phi_q, phi_k, v), *packed_heads(heads, s0, z0))
    out, s_n, z_n = apply(*inputs, normalize, eps, chunk_size, output_final_state, cu_seqlens)
    out, s_n, z_n = unpacked_heads(heads, out, s_n, z_n)
    return (out, (s_n, z_n)) if output_final_state else out


def check_values_on_cpu(fn, cu_seqlens, n):
    """The values of `cu_seqlens` (0 first, N = `n` last, non-decreasing) where reading them
    costs no synchronization: on a CPU, in eager mode. On a GPU they are not read
    (`validation.check_cu_seqlens` checked the rest), so that a pass can be captured in a CUDA
    graph; nor under `torch.compile`, whose trace holds no values to read."""
    if cu_seqlens.device.type == "cpu" and not torch.compiler.is_compiling():
        check_cu_seqlens_values(fn, cu_seqlens.tolist(), n)


def packed_heads(heads, *tensors):
    """Packed tokens `(1, *heads, N, ·)` or states `(S, *heads, ·)` as the kernels' `(1, H, N, ·)`
    and `(S, H, ·)`, H = prod(heads): as they are for one head dimension, else reshaped."""
    if len(heads) == 1:
        return tensors
    return tuple(
        None if x is None else x.reshape(x.shape[0], math.prod(heads), *x.shape[1 + len(heads) :])
        for x in tensors
    )


def unpacked_heads(heads, *tensors):
    """`packed_heads` undone."""
    if len(heads) == 1:
        return tensors
    return tuple(
        None if x is None else x.reshape(x.shape[0], *heads, *x.shape[2:]) for x in tensors
    )


def _non_causal(phi_q, phi_k, v, s0, z0, normalize, eps, output_final_state):
    """Every query sees the state of all keys: S = S_0 + Vᵀφ(K), z = z_0 + Σ_j φ(k_j), two
    matrix products (output, or (output, (S, z)))."""
    state = v.mT @ phi_k  # (..., d_v, d)
    state = state if s0 is None else s0 + state
    out = phi_q @ state.mT  # (..., N, d_v)
    key_sum = None
    if normalize:
        key_sum = phi_k.sum(dim=-2) if z0 is None else z0 + phi_k.sum(dim=-2)  # (..., d)
        out = out / (phi_q @ key_sum[..., None] + eps)  # denominator (..., N, 1)
    return (out, (state, key_sum)) if output_final_state else out
