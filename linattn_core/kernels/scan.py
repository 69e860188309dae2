"""Triton kernels for the causal linear-attention scan, and their launcher.

One kernel computes every pass of causal linear attention, forward and backward:

    o_i = r_i Σ_{j ≤ i} (q_i·k_j + β) w_j v_j          (j ≥ i when `reverse`)

with an optional rank-one term β = b_i (a bias per query) or β = b_j (a bias per key), optional
row scales (r per query row, or w per key row, float32), and, when `normalize`, o_i divided by
Σ_{j ≤ i} q_i·k_j + eps instead. The sequence is cut into chunks of C tokens; a program owns one
(batch, head) and one block of BV value columns and walks its chunks in order, keeping the state
of the chunks behind it: S = Σ_j k_jᵀ w_j v_j `(F, BV)` (plus z = Σ_j k_j `(F,)` for the
normalizer and u = Σ_j β w_j v_j `(BV,)` for the bias), all float32. Per chunk c:

    o_c = tril((q_c k_cᵀ + β) w_c) v_c + q_c S  (+ the bias term),     S ← S + k_cᵀ (w_c v_c),

four matrix products and never an N×N matrix.

A program walking the whole sequence leaves a GPU idle when B·H·(d_v/BV) is small, so the
launcher may cut the sequence into segments of several chunks: a first kernel sums each
segment's own state, a prefix sum over segments (in torch, tiny) gives each segment the state
of everything before it, and the scan then runs one program per segment, in parallel.

Precision: bfloat16 inputs multiply on tensor cores in bfloat16 (scores and the state cast
down, float32's range); float16 inputs multiply in tf32 (float16's precision, float32's range:
a float16 state or a scaled value would overflow or underflow on long sequences); float32
inputs in exact float32 (input_precision="ieee"). Accumulation is float32 throughout.

Layout: q, k `(B, H, N, F)` and v `(B, H, N, V)` with unit stride along features, any other
strides. F and V are in {16, 32, 64, 128}; any N ≥ 1 (loads and stores are masked).
"""

import math

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from linattn_core._validation import _shape, check_eps, check_positive_int
from linattn_core.kernels.validation import check_kernel_inputs

VALUE_BLOCK = 64  # value columns per program: the state is F × BV float32 values in registers
SIDES = {None: 0, "query": 1, "key": 2}  # where a bias or a scale applies


@triton.jit
def _load_rows(base, stride_n, positions, valid, WIDTH: tl.constexpr, first_column):
    """Rows `positions` (C,) of a (N, ·) matrix, columns [first_column, +WIDTH): (C, WIDTH)."""
    columns = first_column + tl.arange(0, WIDTH)
    pointers = base + positions[:, None].to(tl.int64) * stride_n + columns[None, :]
    return tl.load(pointers, mask=valid[:, None], other=0.0)


@triton.jit
def _dot(a, b, DOT_DTYPE: tl.constexpr, PRECISION: tl.constexpr):
    """a @ b with both operands cast to DOT_DTYPE, accumulated in float32."""
    return tl.dot(a.to(DOT_DTYPE), b.to(DOT_DTYPE), input_precision=PRECISION)


@triton.jit
def _segment_state_kernel(
    k_ptr,  # (B, H, N, F)
    v_ptr,  # (B, H, N, V)
    bias_ptr,  # (B·H, N) float32, read when BIAS == 2
    scale_ptr,  # (B·H, N) float32 key scales w, read when SCALE == 2
    state_ptr,  # (B·H, n_segments, F, V) float32, written
    norm_ptr,  # (B·H, n_segments, F) float32, written when NORMALIZE
    bias_state_ptr,  # (B·H, n_segments, V) float32, written when BIAS > 0
    stride_kb,
    stride_kh,
    stride_kn,
    stride_vb,
    stride_vh,
    stride_vn,
    n_heads,
    n,
    chunks_per_segment,
    F: tl.constexpr,
    V: tl.constexpr,
    BV: tl.constexpr,
    C: tl.constexpr,
    NORMALIZE: tl.constexpr,
    BIAS: tl.constexpr,
    SCALE: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """Each segment's own state: Σ_j k_jᵀ w_j v_j, Σ_j k_j and Σ_j β w_j v_j over its tokens."""
    i_v, i_bh, i_s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_b, i_h = (i_bh // n_heads).to(tl.int64), (i_bh % n_heads).to(tl.int64)
    k_base = k_ptr + i_b * stride_kb + i_h * stride_kh
    v_base = v_ptr + i_b * stride_vb + i_h * stride_vh
    row_base = i_bh.to(tl.int64) * n  # this head's entries of the (B·H, N) vectors
    rows = tl.arange(0, C)

    state = tl.zeros([F, BV], dtype=tl.float32)
    norm = tl.zeros([F], dtype=tl.float32)
    bias_state = tl.zeros([BV], dtype=tl.float32)
    first = i_s * chunks_per_segment
    last = tl.minimum(first + chunks_per_segment, tl.cdiv(n, C))
    for t in range(first, last):
        positions = t * C + rows  # (C,)
        valid = positions < n
        k = _load_rows(k_base, stride_kn, positions, valid, F, 0)  # (C, F)
        v = _load_rows(v_base, stride_vn, positions, valid, BV, i_v * BV)  # (C, BV)
        if SCALE == 2:
            w = tl.load(scale_ptr + row_base + positions, mask=valid, other=0.0)  # (C,)
            v = v.to(tl.float32) * w[:, None]
        state += _dot(tl.trans(k), v, DOT_DTYPE, PRECISION)  # (F, BV)
        if NORMALIZE:
            norm += tl.sum(k.to(tl.float32), axis=0)
        if BIAS == 1:
            bias_state += tl.sum(v.to(tl.float32), axis=0)
        if BIAS == 2:
            beta = tl.load(bias_ptr + row_base + positions, mask=valid, other=0.0)  # (C,)
            bias_state += tl.sum(beta[:, None] * v.to(tl.float32), axis=0)

    segment = i_bh.to(tl.int64) * tl.num_programs(2) + i_s
    features, columns = tl.arange(0, F), i_v * BV + tl.arange(0, BV)
    tl.store(state_ptr + segment * F * V + features[:, None] * V + columns[None, :], state)
    if NORMALIZE:
        tl.store(norm_ptr + segment * F + features, norm, mask=(features < F) & (i_v == 0))
    if BIAS > 0:
        tl.store(bias_state_ptr + segment * V + columns, bias_state)


@triton.jit
def _causal_scan_kernel(
    q_ptr,  # (B, H, N, F)
    k_ptr,  # (B, H, N, F)
    v_ptr,  # (B, H, N, V)
    out_ptr,  # (B, H, N, V) contiguous, written
    rden_ptr,  # (B·H, N) float32: 1 / (denominator + eps), written when NORMALIZE
    bias_ptr,  # (B·H, N) float32 b, read when BIAS > 0
    scale_ptr,  # (B·H, N) float32 r (SCALE == 1) or w (SCALE == 2)
    state_ptr,  # (B·H, n_segments, F, V) float32 initial states, read when HAS_INITIAL
    norm_ptr,  # (B·H, n_segments, F) float32, read when HAS_INITIAL and NORMALIZE
    bias_state_ptr,  # (B·H, n_segments, V) float32, read when HAS_INITIAL and BIAS > 0
    stride_qb,
    stride_qh,
    stride_qn,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_vb,
    stride_vh,
    stride_vn,
    n_heads,
    n,
    chunks_per_segment,
    eps,
    F: tl.constexpr,
    V: tl.constexpr,
    BV: tl.constexpr,
    C: tl.constexpr,
    REVERSE: tl.constexpr,
    NORMALIZE: tl.constexpr,
    BIAS: tl.constexpr,  # 0: none, 1: β = b_i (query side), 2: β = b_j (key side)
    SCALE: tl.constexpr,  # 0: none, 1: r_i (query rows of the output), 2: w_j (key rows)
    HAS_INITIAL: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """o_i = r_i Σ_j (q_i·k_j + β) w_j v_j over j ≤ i (j ≥ i when REVERSE), chunk by chunk."""
    i_v, i_bh, i_s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_b, i_h = (i_bh // n_heads).to(tl.int64), (i_bh % n_heads).to(tl.int64)
    q_base = q_ptr + i_b * stride_qb + i_h * stride_qh
    k_base = k_ptr + i_b * stride_kb + i_h * stride_kh
    v_base = v_ptr + i_b * stride_vb + i_h * stride_vh
    out_base = out_ptr + i_bh.to(tl.int64) * n * V
    row_base = i_bh.to(tl.int64) * n  # this head's entries of the (B·H, N) vectors
    rows = tl.arange(0, C)
    features, columns = tl.arange(0, F), i_v * BV + tl.arange(0, BV)

    segment = i_bh.to(tl.int64) * tl.num_programs(2) + i_s
    if HAS_INITIAL:
        state = tl.load(state_ptr + segment * F * V + features[:, None] * V + columns[None, :])
        if NORMALIZE:
            norm = tl.load(norm_ptr + segment * F + features)  # (F,)
        if BIAS > 0:
            bias_state = tl.load(bias_state_ptr + segment * V + columns)  # (BV,)
    else:
        state = tl.zeros([F, BV], dtype=tl.float32)
        norm = tl.zeros([F], dtype=tl.float32)
        bias_state = tl.zeros([BV], dtype=tl.float32)

    first = i_s * chunks_per_segment
    last = tl.minimum(first + chunks_per_segment, tl.cdiv(n, C))
    for step in range(first, last):
        t = (first + last - 1 - step) if REVERSE else step
        positions = t * C + rows  # (C,)
        valid = positions < n
        q = _load_rows(q_base, stride_qn, positions, valid, F, 0)  # (C, F)
        k = _load_rows(k_base, stride_kn, positions, valid, F, 0)  # (C, F)
        v = _load_rows(v_base, stride_vn, positions, valid, BV, i_v * BV)  # (C, BV)

        scores = _dot(q, tl.trans(k), DOT_DTYPE, PRECISION)  # (C, C)
        out = _dot(q, state, DOT_DTYPE, PRECISION)  # (C, BV): the chunks behind
        weighted = v  # (C, BV): w_j v_j
        if SCALE == 2:
            w = tl.load(scale_ptr + row_base + positions, mask=valid, other=0.0)  # (C,)
            weighted = v.to(tl.float32) * w[:, None]
        if BIAS > 0:
            beta = tl.load(bias_ptr + row_base + positions, mask=valid, other=0.0)  # (C,)
            if BIAS == 1:
                scores += beta[:, None]
                out += beta[:, None] * bias_state[None, :]
                bias_state += tl.sum(weighted.to(tl.float32), axis=0)
            else:
                scores += beta[None, :]
                out += bias_state[None, :]
                bias_state += tl.sum(beta[:, None] * weighted.to(tl.float32), axis=0)
        if SCALE == 2:
            scores = scores * w[None, :]
        if REVERSE:
            visible = rows[None, :] >= rows[:, None]  # (C, C): key j at or after query i
        else:
            visible = rows[None, :] <= rows[:, None]  # (C, C): key j at or before query i
        scores = tl.where(visible, scores, 0.0)
        out += _dot(scores, v, DOT_DTYPE, PRECISION)  # (C, BV): this chunk
        if NORMALIZE:
            q_norm = tl.sum(q.to(tl.float32) * norm[None, :], axis=1)  # (C,)
            rden = 1.0 / (tl.sum(scores, axis=1) + q_norm + eps)  # (C,)
            out = out * rden[:, None]
            tl.store(rden_ptr + row_base + positions, rden, mask=valid & (i_v == 0))
            norm += tl.sum(k.to(tl.float32), axis=0)
        if SCALE == 1:
            r = tl.load(scale_ptr + row_base + positions, mask=valid, other=0.0)  # (C,)
            out = out * r[:, None]
        state += _dot(tl.trans(k), weighted, DOT_DTYPE, PRECISION)  # (F, BV)

        out_pointers = out_base + positions[:, None].to(tl.int64) * V + columns[None, :]
        tl.store(out_pointers, out.to(out_ptr.dtype.element_ty), mask=valid[:, None])


# The kernels run in the interpreter when TRITON_INTERPRET=1 was set before triton's first import:
# triton defines its own library (tl.sum, tl.cdiv, ...) for the interpreter or not at that moment,
# and ours when this module is imported; set in between, kernels and library do not match.
INTERPRETED = isinstance(_causal_scan_kernel, InterpretedFunction) and isinstance(
    tl.standard.cdiv, InterpretedFunction
)


def causal_scan(
    q,
    k,
    v,
    *,
    reverse=False,
    normalize=False,
    eps=0.0,
    bias=None,
    bias_side=None,
    scale=None,
    scale_side=None,
    chunk_size=64,
    chunks_per_segment=None,
):
    """Launch the scan: o_i = r_i Σ_{j ≤ i} (q_i·k_j + β) w_j v_j (j ≥ i when `reverse`).

    Args:
        q, k: `(B, H, N, F)`; v: `(B, H, N, V)`; one dtype (float32, bfloat16, float16), one
            device; any strides (a tensor whose last axis is not contiguous is copied).
        reverse: sum over j ≥ i instead of j ≤ i.
        normalize: divide o_i by Σ_j q_i·k_j + eps (without bias or scale).
        eps: non-negative number added to the denominator.
        bias: `(B, H, N)` b, with `bias_side` "query" (β = b_i) or "key" (β = b_j).
        scale: `(B, H, N)`, with `scale_side` "query" (r = scale) or "key" (w = scale).
        chunk_size: C ∈ {16, 32, 64, 128}.
        chunks_per_segment: chunks per parallel segment (positive int); None picks one segment
            on the CPU interpreter and enough segments to fill the GPU otherwise.

    Returns:
        `(out, rden)`: out `(B, H, N, V)` in v's dtype; rden `(B, H, N)` float32
        1 / (Σ_j q_i·k_j + eps) when `normalize`, else None.
    """
    fn = "causal_scan"
    check_eps(fn, eps)
    if chunks_per_segment is not None:
        check_positive_int(fn, "chunks_per_segment", chunks_per_segment)
    for name, vector, side in (("bias", bias, bias_side), ("scale", scale, scale_side)):
        if side not in SIDES or (vector is None) != (side is None):
            raise ValueError(
                f"{fn}: {name}_side must be 'query' or 'key' exactly when a {name} is given; "
                f"got {name}_side={side!r} and {'a' if vector is not None else 'no'} {name}"
            )
        if normalize and vector is not None:
            raise ValueError(f"{fn}: normalize=True does not combine with a {name}")
    check_kernel_inputs(fn, ("q", "k", "v"), q, k, v, chunk_size=chunk_size)
    for name, vector in (("bias", bias), ("scale", scale)):
        if vector is not None and vector.shape != q.shape[:3]:
            raise ValueError(
                f"{fn}: {name} must have shape (B, H, N)={_shape(q)[:3]}; "
                f"got {name}.shape={_shape(vector)}"
            )

    q, k, v = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, v))
    batch, heads, n, features = q.shape
    values = v.shape[-1]
    out = torch.empty(batch, heads, n, values, dtype=v.dtype, device=v.device)
    rden = torch.empty(batch, heads, n, dtype=torch.float32, device=v.device) if normalize else None
    if out.numel() == 0:
        return out, rden
    bias, scale = (None if x is None else x.to(torch.float32).contiguous() for x in (bias, scale))

    value_block = min(values, VALUE_BLOCK)
    n_chunks = triton.cdiv(n, chunk_size)
    if chunks_per_segment is None:
        programs = batch * heads * (values // value_block)
        chunks_per_segment = _default_chunks_per_segment(v.device, n_chunks, programs)
    n_segments = triton.cdiv(n_chunks, chunks_per_segment)
    grid = (values // value_block, batch * heads, n_segments)
    constants = {
        "F": features,
        "V": values,
        "BV": value_block,
        "C": chunk_size,
        "NORMALIZE": normalize,
        "BIAS": SIDES[bias_side],
        "SCALE": SIDES[scale_side],
        "DOT_DTYPE": tl.bfloat16 if v.dtype == torch.bfloat16 else tl.float32,
        "PRECISION": "ieee" if v.dtype == torch.float32 else "tf32",
        "num_warps": 4 if features * value_block < 64 * 64 else 8,
    }
    unread = out  # stands for the pointers that a constexpr flag leaves unread
    bias_or_unread = unread if bias is None else bias
    scale_or_unread = unread if scale is None else scale
    if n_segments > 1:
        initial = _initial_states(
            k, v, bias_or_unread, scale_or_unread, grid, chunks_per_segment, reverse, constants
        )
    else:
        initial = (None, None, None)
    _causal_scan_kernel[grid](
        q,
        k,
        v,
        out,
        unread if rden is None else rden,
        bias_or_unread,
        scale_or_unread,
        *(unread if x is None else x for x in initial),
        *q.stride()[:3],
        *k.stride()[:3],
        *v.stride()[:3],
        heads,
        n,
        chunks_per_segment,
        float(eps),
        REVERSE=reverse,
        HAS_INITIAL=n_segments > 1,
        **constants,
    )
    return out, rden


def _initial_states(k, v, bias, scale, grid, chunks_per_segment, reverse, constants):
    """The states each segment starts from: the sums over the segments before it (after it
    when `reverse`) of S = Σ k_jᵀ w_j v_j, and of z = Σ k_j and u = Σ β w_j v_j where used.
    """
    _, batch_heads, n_segments = grid
    fp32 = {"dtype": torch.float32, "device": v.device}
    state = torch.empty(batch_heads, n_segments, constants["F"], constants["V"], **fp32)
    norm = bias_state = None
    if constants["NORMALIZE"]:
        norm = torch.empty(batch_heads, n_segments, constants["F"], **fp32)
    if constants["BIAS"]:
        bias_state = torch.empty(batch_heads, n_segments, constants["V"], **fp32)
    _segment_state_kernel[grid](
        k,
        v,
        bias,
        scale,
        state,
        state if norm is None else norm,
        state if bias_state is None else bias_state,
        *k.stride()[:3],
        *v.stride()[:3],
        k.shape[1],
        k.shape[2],
        chunks_per_segment,
        **constants,
    )
    return tuple(
        None if x is None else _exclusive_sum(x, reverse=reverse) for x in (state, norm, bias_state)
    )


def _exclusive_sum(x, *, reverse):
    """Sum over the segments strictly before each one (after it when `reverse`), axis 1."""
    if reverse:
        return _exclusive_sum(x.flip(1), reverse=False).flip(1)
    nothing_before = torch.zeros_like(x[:, :1])
    return torch.cat([nothing_before, x[:, :-1].cumsum(dim=1)], dim=1)


def _default_chunks_per_segment(device, n_chunks, programs):
    """One segment on the CPU interpreter; on a GPU, enough segments for two programs per SM."""
    if device.type != "cuda" or triton.knobs.runtime.interpret:
        return n_chunks
    multiprocessors = torch.cuda.get_device_properties(device).multi_processor_count
    n_segments = max(1, math.ceil(2 * multiprocessors / programs))
    return triton.cdiv(n_chunks, n_segments)
