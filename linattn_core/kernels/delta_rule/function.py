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

Packed sequences (`linattn_core.packing`): given `cu_seqlens`, the same kernels take S sequences
packed in inputs `(1, H, N, ·)`, with states `(S, H, d_v, d_k)`, from two work lists built on
the device (`packed_work`): the chunk-parallel kernels take one chunk of one sequence a program
(a chunk starts at its sequence's start + j·C; rows past the sequence's end are masked), the
walks one sequence a program. No value of cu_seqlens is read on the host (the grids are sized
N // C + S, from shapes alone), so a packed pass can be captured in a CUDA graph; its values
are checked on CPU tensors only, where reading them costs no synchronization. Without
cu_seqlens the work lists are None, which the kernels specialize away, as they do g.
"""

import math

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
from linattn_core.packing import chunk_indices
from linattn_core.validation import check_cu_seqlens_values


def delta_forward(q, k, v, beta, s0, chunk_size, g=None, cu_seqlens=None):
    """The forward pass on contiguous `(B, H, N, ·)` inputs, gated by the log-gates `g` unless
    None, of the sequences packed by `cu_seqlens` unless None: (o, the final state)."""
    if not has_work(v):  # no tokens or no heads: the state passes through
        return torch.empty_like(v), passed_state(s0, state_shape(q, v, cu_seqlens), v)
    options = _options(v, chunk_size, cu_seqlens)
    return delta_rule_fwd(q, k, v, beta, s0, g=g, **options)


def delta_backward(q, k, v, beta, s0, do, ds, chunk_size, g=None, cu_seqlens=None):
    """The gradients (dq, dk, dv, dβ, ∂L/∂S_0 or None without S_0, dg or None without g) for
    the gradients of the outputs and of the final state, on the forward pass's contiguous
    inputs."""
    if not has_work(v):  # the final state was the initial one
        ds0 = None if s0 is None else ds.clone()
        return *zero_grads(q, k, v, beta), ds0, None if g is None else torch.zeros_like(g)
    options = _options(v, chunk_size, cu_seqlens)
    return delta_rule_bwd(q, k, v, beta, s0, do.contiguous(), ds.contiguous(), g=g, **options)


def state_shape(q, v, cu_seqlens=None):
    """The shape of the states of `(B, H, N, ·)` inputs: `(B, H, d_v, d_k)`, or `(S, H, d_v, d_k)`
    for S sequences packed by `cu_seqlens`."""
    batch = v.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
    return batch, v.shape[1], v.shape[-1], q.shape[-1]


def _options(v, chunk_size, cu_seqlens):
    """The launchers' options: the kernels' chunk, the GPU, and the packed work lists."""
    chunk = kernel_chunk(chunk_size, v.dtype)
    packing = None if cu_seqlens is None else packed_work(cu_seqlens, v.shape[2], chunk)
    return {"chunk_size": chunk, "arch": device_arch(v.device), "packing": packing}


def packed_work(cu_seqlens, n, chunk_size):
    """The work lists of S packed sequences, built on cu_seqlens's device without reading it on
    the host: (chunks, sequences). chunks `(N // C + S, 3)`, `packing.chunk_indices`: a row
    (sequence, start, end) per program of the chunk-parallel kernels. sequences `(S, 3)`: a row
    (start, end, the index of the sequence's first chunk among chunks' rows) per sequence, for
    the walks, which store the state at each chunk's start where those kernels read it.

    >>> chunks, sequences = packed_work(torch.tensor([0, 5, 5, 7]), n=7, chunk_size=4)
    >>> sequences
    tensor([[0, 5, 0],
            [5, 5, 2],
            [5, 7, 2]])
    """
    chunks = chunk_indices(cu_seqlens, n, chunk_size)
    starts, ends = cu_seqlens[:-1], cu_seqlens[1:]
    counts = (ends - starts + chunk_size - 1) // chunk_size
    return chunks, torch.stack([starts, ends, counts.cumsum(0) - counts], dim=1)


class DeltaRule(torch.autograd.Function):
    """The delta rule `(B, H, N, ·)` → outputs `(B, H, N, d_v)`, final state `(B, H, d_v, d_k)`,
    gated by the log-gates `g` `(B, H, N)` unless None; for S sequences packed by `cu_seqlens`
    in inputs `(1, H, N, ·)`, states `(S, H, d_v, d_k)`. Eager mode's path: `torch.compile`
    traces the passes of both rules as the operators `linattn::delta_rule_forward` and
    `_backward` (`ops.py`), which take g and cu_seqlens too."""

    @staticmethod
    def forward(ctx, q, k, v, beta, initial_state, chunk_size, g=None, cu_seqlens=None):
        inputs = contiguous(q, k, v, beta, initial_state, g, cu_seqlens)  # the kernels' layout
        ctx.chunk_size = chunk_size
        ctx.save_for_backward(*inputs)
        return delta_forward(*inputs[:5], chunk_size, *inputs[5:])

    @staticmethod
    def backward(ctx, do, ds):
        q, k, v, beta, s0, g, cu_seqlens = ctx.saved_tensors
        *grads, dg = delta_backward(q, k, v, beta, s0, do, ds, ctx.chunk_size, g, cu_seqlens)
        return *grads, None, dg, None


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


def delta_rule_kernels(q, k, v, beta, *, chunk_size, initial_state, cu_seqlens=None):
    """`triton_delta_rule` for inputs that passed `delta_rule`'s checks: what the kernels add to
    them (`check_kernel_inputs`), and the passes, in eager mode through `DeltaRule`, under
    `torch.compile` through the operators of `ops.py`; of the sequences packed by `cu_seqlens`
    unless None (inputs `(1, H, N, ·)`, states `(S, H, d_v, d_k)`)."""
    check_kernel_inputs("delta_rule", ("q", "k", "v"), q, v, chunk_size=chunk_size)
    _check_packed("delta_rule", cu_seqlens, q)
    return _passes(q, k, v, beta, None, chunk_size, initial_state, cu_seqlens)


def gated_delta_rule_kernels(q, k, v, beta, g, *, chunk_size, initial_state, cu_seqlens=None):
    """`linattn_core.gated.gated_delta_rule(..., method="triton")` for inputs that passed its
    checks: the delta rule's kernels given the log-gates g `(..., N)` (read in float32 whatever
    their dtype; dg in g's dtype), in eager mode through `DeltaRule`, under `torch.compile`
    through the delta rule's operators of `ops.py`, which take g too; packed by `cu_seqlens`
    unless None, as `delta_rule_kernels`."""
    check_kernel_inputs("gated_delta_rule", ("q", "k", "v"), q, v, chunk_size=chunk_size)
    _check_packed("gated_delta_rule", cu_seqlens, q)
    return _passes(q, k, v, beta, g, chunk_size, initial_state, cu_seqlens)


def _check_packed(fn, cu_seqlens, q):
    """The values of `cu_seqlens` (its structure was checked by the caller), on CPU tensors
    only: reading them on a GPU would synchronize it, and a traced graph cannot read them."""
    if cu_seqlens is None or cu_seqlens.device.type != "cpu" or torch.compiler.is_compiling():
        return
    check_cu_seqlens_values(fn, cu_seqlens.tolist(), q.shape[-2])


def _passes(q, k, v, beta, g, chunk_size, initial_state, cu_seqlens=None):
    """The forward pass (and its backward, through autograd) on checked inputs with any leading
    dimensions, gated unless g is None, packed by `cu_seqlens` unless None: tokens
    `(1, …, N, ·)` and states `(S, …, d_v, d_k)` as `(1, H, N, ·)` and `(S, H, d_v, d_k)`."""
    apply = DeltaRule.apply
    if torch.compiler.is_compiling():
        from linattn_core.kernels.ops import delta_rule as apply
    batch = q.shape[:-2]
    if cu_seqlens is None:
        *inputs, gates = as_heads(batch, q, k, v, beta, initial_state, g)
        return from_heads(batch, *apply(*inputs, chunk_size, gates))
    q, k, v, beta, gates = as_heads(batch, q, k, v, beta, g)
    heads, sequences = math.prod(batch[1:]), cu_seqlens.shape[0] - 1
    shape = (sequences, heads, v.shape[-1], q.shape[-1])
    s0 = None if initial_state is None else initial_state.reshape(shape)
    o, final = apply(q, k, v, beta, s0, chunk_size, gates, cu_seqlens)
    return from_heads(batch, o)[0], final.reshape(sequences, *batch[1:], *final.shape[2:])
