"""The kernels as torch.library operators, for `torch.compile`.

    linattn::linear_attention_forward, linattn::linear_attention_backward
    linattn::delta_rule_forward, linattn::delta_rule_backward

The delta rule's operators take the log-gates g as an optional input, as `DeltaRule` does:
with g they are the gated delta rule's passes (`linattn_core.gated`, on the same kernels), their
backward operator returning dg as well, absent without g — one operator pair for both rules —
and, last, the boundaries `cu_seqlens` of packed sequences (states `(S, H, d_v, d_k)`).

Each operator runs the launchers of one pass (`linear_forward`, `delta_backward`, …, the same
functions that eager mode's autograd Functions call); `register_fake` gives the shapes of its
outputs without running it, and `register_autograd` joins the forward operator to the backward
one. `torch.compile(fullgraph=True)` traces them as opaque calls, without graph breaks:
`linear_attention`, `delta_rule` and `gated_delta_rule` with method="triton" call
`causal_linear_attention` and `delta_rule` below when `torch.compiler.is_compiling()`, and the
autograd Functions otherwise — a dispatcher call costs the host more than `Function.apply`, and
eager mode has no use for it.

Linear attention's operators take packed sequences' boundaries `cu_seqlens` as an optional last
input (B = 1, states `(S, H, ·)`: `kernels/linear_attention/forward.py`); the fake outputs take S
from its shape, never from its values.

An operator returns tensors only: an output that a pass does not make (the final state when it
was not asked for, r without normalization, the float32 copy of a float32 o, ∂L/∂S_0 without
S_0, dg without g) is an empty tensor `(0,)`, `ABSENT`, and whether an output is absent depends
on the inputs' dtype, which optional inputs are given and the flags only, never on their
values, as tracing needs. The outputs never alias the inputs or one another.
"""

import torch
from torch import Tensor

from linattn_core.kernels.delta_rule.function import delta_backward, delta_forward, state_shape
from linattn_core.kernels.layout import contiguous
from linattn_core.kernels.linear_attention.function import linear_backward, linear_forward

ABSENT = (0,)  # the shape of an output that a pass does not make


def _linear_outputs(q, v, normalize, final, cu_seqlens):
    """Empty tensors in the shapes and dtypes of the forward operator's outputs: (o, o in
    float32 (16-bit inputs, normalized), r, S_N, z_N), the states `(S, H, ·)` for packed
    inputs (their shape from cu_seqlens's, never from its values)."""
    batch, heads, n, d = q.shape
    states = (batch if cu_seqlens is None else cu_seqlens.shape[0] - 1, heads)
    wide = normalize and v.dtype != torch.float32
    return (
        v.new_empty(v.shape),
        v.new_empty(v.shape if wide else ABSENT, dtype=torch.float32),
        q.new_empty((batch, heads, n) if normalize else ABSENT, dtype=torch.float32),
        v.new_empty((*states, v.shape[-1], d) if final else ABSENT),
        v.new_empty((*states, d) if final and normalize else ABSENT),
    )


def _filled(outputs, shapes):
    """`outputs` with None replaced by `shapes`' empty tensor, each made contiguous."""
    return tuple(
        shape if x is None else x.contiguous() for x, shape in zip(outputs, shapes, strict=True)
    )


@torch.library.custom_op("linattn::linear_attention_forward", mutates_args=())
def linear_attention_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    s0: Tensor | None,
    z0: Tensor | None,
    normalize: bool,
    eps: float,
    chunk_size: int,
    final: bool,
    cu_seqlens: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Causal linear attention's forward pass on `(B, H, N, ·)` inputs: (o, o in float32 or
    absent, r or absent, S_N or absent, z_N or absent); with `cu_seqlens`, on S sequences
    packed in B = 1, the states `(S, H, ·)`."""
    q, k, v, s0, z0, cu_seqlens = contiguous(q, k, v, s0, z0, cu_seqlens)
    outputs = linear_forward(
        q, k, v, s0, z0, normalize, eps, chunk_size, final, normalize, cu_seqlens
    )
    o, o32 = outputs[:2]
    outputs = (o, None if o32 is o else o32, *outputs[2:])
    return _filled(outputs, _linear_outputs(q, v, normalize, final, cu_seqlens))


@linear_attention_forward.register_fake
def _(q, k, v, s0, z0, normalize, eps, chunk_size, final, cu_seqlens=None):
    return _linear_outputs(q, v, normalize, final, cu_seqlens)


@torch.library.custom_op("linattn::linear_attention_backward", mutates_args=())
def linear_attention_backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor | None,
    rden: Tensor | None,
    do: Tensor,
    s0: Tensor | None,
    z0: Tensor | None,
    ds_n: Tensor | None,
    dz_n: Tensor | None,
    initial_grad: bool,
    chunk_size: int,
    cu_seqlens: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The gradients (dq, dk, dv, ∂L/∂S_0 or absent, ∂L/∂z_0 or absent); o in float32 and r as
    the forward operator returned them (None without normalization), `cu_seqlens` as the
    forward operator took it."""
    q, k, v, s0, z0, cu_seqlens = contiguous(q, k, v, s0, z0, cu_seqlens)
    grads = linear_backward(
        q, k, v, o, rden, s0, z0, do, ds_n, dz_n, initial_grad, chunk_size, cu_seqlens
    )
    return _filled(grads, _linear_grads(q, k, v, s0, z0, initial_grad))


def _linear_grads(q, k, v, s0, z0, initial_grad):
    return (
        q.new_empty(q.shape),
        k.new_empty(k.shape),
        v.new_empty(v.shape),
        v.new_empty(s0.shape if initial_grad and s0 is not None else ABSENT),
        v.new_empty(z0.shape if initial_grad and z0 is not None else ABSENT),
    )


@linear_attention_backward.register_fake
def _(q, k, v, o, rden, do, s0, z0, ds_n, dz_n, initial_grad, chunk_size, cu_seqlens=None):
    return _linear_grads(q, k, v, s0, z0, initial_grad)


def _linear_setup(ctx, inputs, output):
    q, k, v, s0, z0, normalize, _, chunk_size, final, cu_seqlens = inputs
    o, o32, rden = output[:3]
    o_kept = (o if v.dtype == torch.float32 else o32) if normalize else None
    ctx.save_for_backward(q, k, v, o_kept, rden if normalize else None, s0, z0, cu_seqlens)
    ctx.options = (final, normalize, chunk_size)


def _linear_backward(ctx, do, _o32, _rden, ds_n, dz_n):
    q, k, v, o, rden, s0, z0, cu_seqlens = ctx.saved_tensors
    final, normalize, chunk_size = ctx.options
    wanted = ctx.needs_input_grad
    ds_n, dz_n = (ds_n, dz_n if normalize else None) if final else (None, None)
    dq, dk, dv, ds0, dz0 = linear_attention_backward(
        q, k, v, o, rden, do, s0, z0, ds_n, dz_n, wanted[3] or wanted[4], chunk_size, cu_seqlens
    )
    return dq, dk, dv, ds0 if wanted[3] else None, dz0 if wanted[4] else None, *[None] * 5


linear_attention_forward.register_autograd(_linear_backward, setup_context=_linear_setup)


def causal_linear_attention(q, k, v, s0, z0, normalize, eps, chunk_size, final, cu_seqlens=None):
    """`CausalLinearAttention.apply` through the operators: (o, S_N or None, z_N or None)."""
    o, _, _, s_n, z_n = linear_attention_forward(
        q, k, v, s0, z0, normalize, eps, chunk_size, final, cu_seqlens
    )
    return o, s_n if final else None, z_n if final and normalize else None


@torch.library.custom_op("linattn::delta_rule_forward", mutates_args=())
def delta_rule_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    s0: Tensor | None,
    chunk_size: int,
    g: Tensor | None = None,
    cu_seqlens: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The delta rule's forward pass on `(B, H, N, ·)` inputs, gated by the log-gates g
    `(B, H, N)` unless None, of the sequences packed by `cu_seqlens` unless None: (o, the final
    state)."""
    q, k, v, beta, s0, g, cu_seqlens = contiguous(q, k, v, beta, s0, g, cu_seqlens)
    outputs = delta_forward(q, k, v, beta, s0, chunk_size, g, cu_seqlens)
    return tuple(x.contiguous() for x in outputs)


@delta_rule_forward.register_fake
def _(q, k, v, beta, s0, chunk_size, g=None, cu_seqlens=None):
    return v.new_empty(v.shape), v.new_empty(state_shape(q, v, cu_seqlens))


@torch.library.custom_op("linattn::delta_rule_backward", mutates_args=())
def delta_rule_backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    s0: Tensor | None,
    do: Tensor,
    ds: Tensor,
    chunk_size: int,
    g: Tensor | None = None,
    cu_seqlens: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The gradients (dq, dk, dv, dβ, ∂L/∂S_0 or absent without S_0, dg or absent without g)."""
    q, k, v, beta, s0, g, cu_seqlens = contiguous(q, k, v, beta, s0, g, cu_seqlens)
    grads = delta_backward(q, k, v, beta, s0, do, ds, chunk_size, g, cu_seqlens)
    return _filled(grads, _delta_grads(q, k, v, beta, s0, g))


def _delta_grads(q, k, v, beta, s0, g):
    shapes = (q.shape, k.shape, v.shape, beta.shape, ABSENT if s0 is None else s0.shape)
    grads = tuple(x.new_empty(shape) for x, shape in zip((q, k, v, beta, v), shapes, strict=True))
    return *grads, v.new_empty(ABSENT) if g is None else g.new_empty(g.shape)


@delta_rule_backward.register_fake
def _(q, k, v, beta, s0, do, ds, chunk_size, g=None, cu_seqlens=None):
    return _delta_grads(q, k, v, beta, s0, g)


def _delta_setup(ctx, inputs, output):
    q, k, v, beta, s0, chunk_size, g, cu_seqlens = inputs
    ctx.save_for_backward(q, k, v, beta, s0, g, cu_seqlens)
    ctx.chunk_size = chunk_size


def _delta_backward(ctx, do, ds):
    q, k, v, beta, s0, g, cu_seqlens = ctx.saved_tensors
    grads = delta_rule_backward(q, k, v, beta, s0, do, ds, ctx.chunk_size, g, cu_seqlens)
    dq, dk, dv, dbeta, ds0, dg = grads
    return dq, dk, dv, dbeta, None if s0 is None else ds0, None, None if g is None else dg, None


delta_rule_forward.register_autograd(_delta_backward, setup_context=_delta_setup)


def delta_rule(q, k, v, beta, s0, chunk_size, g=None, cu_seqlens=None):
    """`DeltaRule.apply` through the operators: (o, the final state)."""
    return delta_rule_forward(q, k, v, beta, s0, chunk_size, g, cu_seqlens)
