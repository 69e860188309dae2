"""The delta rule on Triton kernels: the autograd Function and the public function behind
`delta_rule(..., method="triton")`.

The kernels (`forward.py`, `backward.py` beside this file) compute the chunked form of the book's
delta rule chapter — per chunk of C = 64 tokens the triangular inverse A, then W = A diag(β) K and
Ũ = A diag(β) V, a walk over the chunks for the corrections U = Ũ − W S_0ᵀ and the states, and
the outputs O = Q S_0ᵀ + (Q Kᵀ ⊙ M) U — and its backward pass, every gradient included (q, k,
v, β and the initial state). The forward pass saves only its inputs; the backward pass recomputes
A, W, U and the states.

The same kernels compute the gated delta rule (`linattn_core.gated`) when they are given the
log-gates g (`gated_delta_rule_kernels`): with g = None they are the delta rule's.
"""

import torch

from linattn_core.kernels.common import check_inputs, check_kernel_inputs, device_arch
from linattn_core.kernels.delta_rule.backward import delta_rule_bwd
from linattn_core.kernels.delta_rule.forward import delta_rule_fwd
from linattn_core.kernels.layout import (
    as_heads,
    contiguous,
    from_heads,
    has_work,
    passed_state,
    zero_grads,
)
from linattn_core.kernels.tiles import kernel_chunk


def delta_forward(q, k, v, beta, s0, chunk_size, g=None):
    """The forward pass on contiguous `(B, H, N, ·)` inputs, gated by the log-gates `g` unless
    None: (o, the final state)."""
    if not has_work(v):  # no tokens or no heads: the state passes through
        return torch.empty_like(v), passed_state(s0, (*v.shape[:2], v.shape[-1], q.shape[-1]), v)
    options = {"chunk_size": kernel_chunk(chunk_size, v.dtype), "arch": device_arch(v.device)}
    return delta_rule_fwd(q, k, v, beta, s0, g=g, **options)


def delta_backward(q, k, v, beta, s0, do, ds, chunk_size, g=None):
    """The gradients (dq, dk, dv, dβ, ∂L/∂S_0 or None without S_0, dg or None without g) for
    the gradients of the outputs and of the final state, on the forward pass's contiguous
    inputs."""
    if not has_work(v):  # the final state was the initial one
        ds0 = None if s0 is None else ds.clone()
        return *zero_grads(q, k, v, beta), ds0, None if g is None else torch.zeros_like(g)
    options = {"chunk_size": kernel_chunk(chunk_size, v.dtype), "arch": device_arch(v.device)}
    return delta_rule_bwd(q, k, v, beta, s0, do.contiguous(), ds.contiguous(), g=g, **options)


class DeltaRule(torch.autograd.Function):
    """The delta rule `(B, H, N, ·)` → outputs `(B, H, N, d_v)`, final state `(B, H, d_v, d_k)`,
    gated by the log-gates `g` `(B, H, N)` unless None. Eager mode's path: `torch.compile`
    traces the passes of both rules as the operators `linattn::delta_rule_forward` and
    `_backward` (`ops.py`), which take g too."""

    @staticmethod
    def forward(ctx, q, k, v, beta, initial_state, chunk_size, g=None):
        q, k, v, beta, s0, g = contiguous(q, k, v, beta, initial_state, g)  # the kernels' layout
        ctx.chunk_size = chunk_size
        ctx.save_for_backward(q, k, v, beta, s0, g)
        return delta_forward(q, k, v, beta, s0, chunk_size, g)

    @staticmethod
    def backward(ctx, do, ds):
        q, k, v, beta, s0, g = ctx.saved_tensors
        *grads, dg = delta_backward(q, k, v, beta, s0, do, ds, ctx.chunk_size, g)
        return *grads, None, dg


def triton_delta_rule(q, k, v, beta, *, chunk_size=64, initial_state=None):
    """`linattn_core.delta.delta_rule` on Triton kernels, forward and backward.

        S_t = S_{t-1} + β_t (v_t − S_{t-1} k_t) k_tᵀ,        o_t = S_t q_t,

    with S_0 = `initial_state` (zeros if None), computed chunk by chunk (the UT / WY form) with
    multiplications in the inputs' precision and float32 accumulation; q is not scaled.

    The kernels run on CUDA tensors, or on CPU tensors under the Triton interpreter (the
    environment variable TRITON_INTERPRET=1, set before triton is first imported). Inputs are
    checked by `delta_rule`, which calls this function for method="triton".

    Args:
        q, k: queries and keys `(..., N, d_k)`, d_k ∈ {16, 32, 64, 128} (DeltaNet: unit keys).
        v: values `(..., N, d_v)`, d_v ∈ {16, 32, 64, 128}.
        beta: rates `(..., N)` (DeltaNet: in (0, 1)).
        chunk_size: tokens per chunk, one of `SUPPORTED_CHUNK_SIZES` (64).
        initial_state: S_0 `(..., d_v, d_k)`, or None for zeros.

    Returns:
        (o, S): outputs `(..., N, d_v)` and the final state `(..., d_v, d_k)`, in the inputs' dtype.
    """
    check_inputs("delta_rule", ("q", "k", "v"), q, k, v, chunk_size=chunk_size)
    return delta_rule_kernels(q, k, v, beta, chunk_size=chunk_size, initial_state=initial_state)


def delta_rule_kernels(q, k, v, beta, *, chunk_size, initial_state):
    """`triton_delta_rule` for inputs that passed `delta_rule`'s checks: what the kernels add to
    them (`check_kernel_inputs`), and the passes, in eager mode through `DeltaRule`, under
    `torch.compile` through the operators of `ops.py`."""
    check_kernel_inputs("delta_rule", ("q", "k", "v"), q, v, chunk_size=chunk_size)
    return _passes(q, k, v, beta, None, chunk_size, initial_state)


def gated_delta_rule_kernels(q, k, v, beta, g, *, chunk_size, initial_state):
    """`linattn_core.gated.gated_delta_rule(..., method="triton")` for inputs that passed its
    checks: the delta rule's kernels given the log-gates g `(..., N)` (read in float32 whatever
    their dtype; dg in g's dtype), in eager mode through `DeltaRule`, under `torch.compile`
    through the delta rule's operators of `ops.py`, which take g too."""
    check_kernel_inputs("gated_delta_rule", ("q", "k", "v"), q, v, chunk_size=chunk_size)
    return _passes(q, k, v, beta, g, chunk_size, initial_state)


def _passes(q, k, v, beta, g, chunk_size, initial_state):
    """The forward pass (and its backward, through autograd) on checked inputs with any leading
    dimensions, gated unless g is None."""
    apply = DeltaRule.apply
    if torch.compiler.is_compiling():
        from linattn_core.kernels.ops import delta_rule as apply
    batch = q.shape[:-2]
    *inputs, gates = as_heads(batch, q, k, v, beta, initial_state, g)
    return from_heads(batch, *apply(*inputs, chunk_size, gates))
