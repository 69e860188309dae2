"""The backward pass of causal linear attention in Triton kernels, and their launcher.

Given the output gradient g_i = ∂L/∂o_i, with r_i the forward's reciprocal denominators and
a_i = −g_i·o_i (book: the denominator is the numerator of a ones column), the chain rule gives,
for positions i and j in chunk t,

    dq_i = r_i (g_i S_tᵀ + a_i z_t + Σ_{tC ≤ j ≤ i} (g_i·v_j + a_i) k_j)
    dk_j = D_t v_j + y_t + Σ_{j ≤ i < tC + C} r_i (g_i·v_j + a_i) q_i
    dv_j = k_j D_t + Σ_{j ≤ i < tC + C} r_i (q_i·k_j) g_i

with the forward states S_t, z_t (sums over the tokens before chunk t) and the backward states
D_t = Σ r_i q_iᵀ g_i `(K, V)` and y_t = Σ r_i a_i q_i `(K,)`, sums over the tokens after chunk
t. Without normalization r = 1 and a = 0. As in the forward pass (`forward.py`), the sequence is
cut into segments of L chunks:

1. `segment_sums_bwd_kernel` adds up each segment's four sums, reading q, k, v and g once;
2. torch's cumsum turns the segments' sums into prefix sums, and `segment_dq_kernel`,
   `segment_dk_kernel` and `segment_dv_kernel` walk each segment's chunks in order, a BK × BV
   tile of a state in registers: S and z from the initial state and the sums of the segments
   before, gaining each chunk after its use (dq); D and y from the sums of this segment and
   those after (all of them, and the final state's gradient, less those before), losing each
   chunk before its use (dk, dv). The initial state's gradient is D and y before the first
   token: the last row of their prefix sums.

The per-chunk formulas are `@triton.jit` functions (`chunk_dq`, `chunk_dk`, `chunk_dv`, and
`backward_state`, `backward_vector` for one chunk's share of D and y), and so is each walk's step
over one chunk (`dq_step`, `dk_step`, `dv_step`: load, formula, store, state update). The
segment kernels share them with `walk_bwd_kernel`, which takes a sequence of one segment (at most
ONE_WALK_CHUNKS chunks, `forward.py`) in one launch and no sums: its programs walk forward for dq
from the initial state, then back for dk and again for dv, D and y starting from the final state's
gradient and gaining each chunk after its use, so that they end as the initial state's gradient.
The host's work of a pass over 1024 tokens is then two launches (`tools.launches.host_work`).
Packed sequences (`cu_seqlens`) always take this walk, one program per sequence and head and
state tile, over its own chunks from its first token, as in the forward pass
(`forward.sequence_walk`): the states and their gradients are `(S, H, ·)`.

The launcher computes g·o = −a with one product and one sum of torch (g in the inputs' dtype
times the float32 o computes in float32); the kernels negate it as they load it.

dq and dk sum over the values, dv over the features: with several value tiles (feature tiles for
dv) each program writes its share in float32, and the launcher adds the shares up (as in the
forward pass, the 16-bit tiles on an H100 cover a whole head of up to 64 features, and no share
is written).

Nothing is saved by the forward pass but its inputs, its output and r, and no state is stored
per chunk: memory O(N(d + d_v)).

Precision, as in the forward pass: operands in the inputs' dtype, float32 accumulation and
float32 states, float16 states divided by their largest magnitude as operands. With
normalization, dq's g S_tᵀ and a_i z_t nearly cancel (they add up to Σ_j g_i·(v_j − o_i) k_j,
which is small wherever the values share a mean), as do dk's D_t v_j and y_t: there the state
enters as two 16-bit operands, its value and its rounding error (`dot_state`), lest the
rounding of one operand be amplified by the cancellation (by √N for random values). And r_i, which
falls like 1/i (1e-6 after 16k tokens, below float16's normal range), never enters a product by
itself: within a chunk it is split as r_i = m (r_i / m) with m = max |r| over the chunk, the ratio
goes into the 16-bit operand and m multiplies the float32 result.

Layout: q, k, dq, dk `(B, H, N, K)`; v, o, do, dv `(B, H, N, V)`; all contiguous.
"""

import torch
import triton
import triton.language as tl

from linattn_core.kernels.common import dot, multiprocessors, per_shape
from linattn_core.kernels.linear_attention.forward import (
    dot_state,
    initial_state,
    segment_length,
    sequence_walk,
    state_tile,
    store_state,
)
from linattn_core.kernels.tiles import tile_rule, tiles


@triton.jit
def scaled_rows(x, b_r, dtype: tl.constexpr):
    """diag(r) x as an operand of `dtype` and the factor m = max |r| that multiplies the product
    back: r / m lies in [−1, 1], so no r underflows a 16-bit operand."""
    m = tl.maximum(tl.max(tl.abs(b_r)), 1e-30)
    return (x * (b_r / m)[:, None]).to(dtype), m


@triton.jit
def chunk_scores(b_do, b_v, b_a, causal, NORMALIZE: tl.constexpr):
    """M_ij = g_i·v_j + a_i for j ≤ i in the chunk, else 0 (a = 0 without normalization)."""
    b_m = dot(b_do, tl.trans(b_v), None)  # [i, j]: g_i·v_j over this program's values
    if NORMALIZE:
        b_m += b_a[:, None]
    return tl.where(causal, b_m, 0.0)


@triton.jit
def load_chunk(x, i_bh, o_t, m_t, o_c, N, W: tl.constexpr):
    """Rows o_t (masked by m_t) and columns o_c of a `(B, H, N, W)` tensor: a [C, len(o_c)] tile."""
    return tl.load(x + (i_bh * N + o_t[:, None]) * W + o_c[None, :], mask=m_t[:, None], other=0.0)


@triton.jit
def load_rows(x, i_bh, o_t, m_t, N):
    """Rows o_t (masked by m_t) of a `(B, H, N)` vector (r, g·o)."""
    return tl.load(x + i_bh * N + o_t, mask=m_t, other=0.0)


@triton.jit
def backward_state(b_q, b_do, b_r, NORMALIZE: tl.constexpr):
    """One chunk's Σ r_i q_iᵀ g_i `(BK, BV)`, the backward state D's share of it, in float32."""
    if NORMALIZE:
        b_qr, m = scaled_rows(b_q, b_r, b_q.dtype)
        b_dd = m * dot(tl.trans(b_qr), b_do, None)
    else:
        b_dd = dot(tl.trans(b_q), b_do, None)
    return b_dd


@triton.jit
def backward_vector(b_q, b_r, b_a):
    """One chunk's Σ r_i a_i q_i `(BK,)`, the backward vector y's share of it, in float32."""
    return tl.sum(b_q.to(tl.float32) * (b_r * b_a)[:, None], axis=0)


@triton.jit
def chunk_dq(b_k, b_v, b_do, b_a, b_r, b_h, b_z, causal, NORMALIZE: tl.constexpr):
    """dq = r (g S_tᵀ + a z_tᵀ + M k) for one chunk, from the forward state S_t, z_t before it
    (this program's share, over its values)."""
    b_m = chunk_scores(b_do, b_v, b_a, causal, NORMALIZE)
    b_dq = dot_state(b_do, tl.trans(b_h), NORMALIZE)  # g S_tᵀ, which a z_tᵀ cancels
    b_dq = dot(b_m.to(b_k.dtype), b_k, b_dq)
    if NORMALIZE:
        b_dq = (b_dq + b_a[:, None] * b_z[None, :]) * b_r[:, None]
    return b_dq


@triton.jit
def chunk_dk(b_q, b_v, b_do, b_a, b_r, b_d, b_y, causal, NORMALIZE: tl.constexpr):
    """dk = v D_tᵀ + y_t + (r M)ᵀ q for one chunk, from the backward state D_t, y_t after it
    (this program's share, over its values)."""
    if NORMALIZE:
        b_mr, m = scaled_rows(chunk_scores(b_do, b_v, b_a, causal, NORMALIZE), b_r, b_q.dtype)
        b_dk = m * dot(tl.trans(b_mr), b_q, None) + b_y[None, :]
    else:
        b_m = chunk_scores(b_do, b_v, None, causal, NORMALIZE)
        b_dk = dot(tl.trans(b_m).to(b_q.dtype), b_q, None)
    return b_dk + dot_state(b_v, tl.trans(b_d), NORMALIZE)  # v D_tᵀ, which y_t cancels


@triton.jit
def chunk_dv(b_q, b_k, b_do, b_r, b_d, after, NORMALIZE: tl.constexpr):
    """dv_j = k_j D_t + Σ_{j ≤ i in the chunk} r_i (q_i·k_j) g_i for one chunk, from the backward
    state D_t after it (this program's share, over its features)."""
    b_s = tl.where(after, dot(b_k, tl.trans(b_q), None), 0.0)  # [j, i]: k_j·q_i
    if NORMALIZE:
        m = tl.maximum(tl.max(tl.abs(b_r)), 1e-30)  # r / m as the 16-bit operand, as in scaled_rows
        b_dv = m * dot((b_s * (b_r / m)[None, :]).to(b_do.dtype), b_do, None)
    else:
        b_dv = dot(b_s.to(b_do.dtype), b_do, None)
    return b_dv + dot_state(b_k, b_d, False)  # k_j D_t


@triton.jit
def store_chunk(x, b_x, row, o_t, m_t, o_c, N, W: tl.constexpr):
    """Store a [C, len(o_c)] tile at rows o_t (masked by m_t) and columns o_c of head (or share)
    `row` of a `(·, N, W)` tensor, in that tensor's dtype."""
    p_x = x + (row * N + o_t[:, None]) * W + o_c[None, :]
    tl.store(p_x, b_x.to(p_x.dtype.element_ty), mask=m_t[:, None])


@triton.jit
def dq_step(
    k, v, do, rden, go, dq, b_h, b_z, i_t, i_bh, out, first, o_k, o_v, causal, bos, eos, N,
    K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, NORMALIZE: tl.constexpr,
):  # fmt: skip
    """Chunk i_t of a walk for dq: its rows of dq (`chunk_dq`, into rows `out`) from S_t, z_t,
    which it returns as S_{t+1}, z_{t+1}. The terms in a belong to the `first` value tile. The
    walk's tokens are bos ≤ t < eos, chunk i_t starting at bos + i_t·C (`sequence_walk`)."""
    o_t = bos + i_t * C + tl.arange(0, C)
    m_t = o_t < eos
    b_k = load_chunk(k, i_bh, o_t, m_t, o_k, N, K)
    b_v = load_chunk(v, i_bh, o_t, m_t, o_v, N, V)
    b_do = load_chunk(do, i_bh, o_t, m_t, o_v, N, V)
    b_a, b_r = None, None
    if NORMALIZE:
        b_a = -load_rows(go, i_bh, o_t, m_t & first, N)
        b_r = load_rows(rden, i_bh, o_t, m_t, N)
    b_dq = chunk_dq(b_k, b_v, b_do, b_a, b_r, b_h, b_z, causal, NORMALIZE)
    if NORMALIZE:
        b_z += tl.sum(b_k.to(tl.float32), axis=0)
    store_chunk(dq, b_dq, out, o_t, m_t, o_k, N, K)
    b_h = dot(tl.trans(b_k), b_v, b_h)  # S_{t+1} = S_t + k_tᵀ v_t
    return b_h, b_z


@triton.jit
def dk_step(
    q, v, do, rden, go, dk, b_d, b_y, i_t, i_bh, out, first, o_k, o_v, causal, bos, eos, N,
    K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, NORMALIZE: tl.constexpr,
    LEAVES: tl.constexpr,
):  # fmt: skip
    """Chunk i_t of a walk for dk: its rows of dk (`chunk_dk`, into rows `out`) from D_t, y_t,
    the sums after it. With LEAVES (a walk forward) D, y come in as the sums of this chunk and
    those after, and the chunk leaves them before its use; else (a walk back) they come in as
    D_t, y_t and the chunk joins them after its use, to return D_{t−1}, y_{t−1}. The terms in a
    and y belong to the `first` value tile."""
    o_t = bos + i_t * C + tl.arange(0, C)
    m_t = o_t < eos
    b_q = load_chunk(q, i_bh, o_t, m_t, o_k, N, K)
    b_v = load_chunk(v, i_bh, o_t, m_t, o_v, N, V)
    b_do = load_chunk(do, i_bh, o_t, m_t, o_v, N, V)
    b_a, b_r = None, None
    if NORMALIZE:
        b_a = -load_rows(go, i_bh, o_t, m_t & first, N)
        b_r = load_rows(rden, i_bh, o_t, m_t, N)
    if LEAVES:
        b_d -= backward_state(b_q, b_do, b_r, NORMALIZE)
        if NORMALIZE:
            b_y -= backward_vector(b_q, b_r, b_a)
    b_dk = chunk_dk(b_q, b_v, b_do, b_a, b_r, b_d, b_y, causal, NORMALIZE)
    store_chunk(dk, b_dk, out, o_t, m_t, o_k, N, K)
    if not LEAVES:
        b_d += backward_state(b_q, b_do, b_r, NORMALIZE)
        if NORMALIZE:
            b_y += backward_vector(b_q, b_r, b_a)
    return b_d, b_y


@triton.jit
def dv_step(
    q, k, do, rden, dv, b_d, i_t, i_bh, out, o_k, o_v, after, bos, eos, N,
    K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, NORMALIZE: tl.constexpr,
    LEAVES: tl.constexpr,
):  # fmt: skip
    """Chunk i_t of a walk for dv: its rows of dv (`chunk_dv`, into rows `out`) from D_t, which
    comes in and goes out as in `dk_step`."""
    o_t = bos + i_t * C + tl.arange(0, C)
    m_t = o_t < eos
    b_q = load_chunk(q, i_bh, o_t, m_t, o_k, N, K)
    b_k = load_chunk(k, i_bh, o_t, m_t, o_k, N, K)
    b_do = load_chunk(do, i_bh, o_t, m_t, o_v, N, V)
    b_r = None
    if NORMALIZE:
        b_r = load_rows(rden, i_bh, o_t, m_t, N)
    if LEAVES:
        b_d -= backward_state(b_q, b_do, b_r, NORMALIZE)
    b_dv = chunk_dv(b_q, b_k, b_do, b_r, b_d, after, NORMALIZE)
    store_chunk(dv, b_dv, out, o_t, m_t, o_v, N, V)
    if not LEAVES:
        b_d += backward_state(b_q, b_do, b_r, NORMALIZE)
    return b_d


@tile_rule(widest=(64, 64, 16))
@triton.jit(do_not_specialize=["N", "L"])
def segment_sums_bwd_kernel(
    q,  # [B, H, N, K]
    k,  # [B, H, N, K]
    v,  # [B, H, N, V]
    do,  # [B, H, N, V]
    rden,  # [B, H, N] float32 r, read when NORMALIZE
    go,  # [B, H, N] float32 g_i·o_i, read when NORMALIZE: a_i = −g_i·o_i
    h0,  # [B, H, V, K] S_0 or None, as in the forward pass
    z0,  # [B, H, K] z_0 or None
    hs,  # [B, H, NS + 1, K, V] float32 written: S_0, then Σ k_jᵀ v_j over each segment
    zs,  # [B, H, NS + 1, K] float32, written when NORMALIZE: z_0, then Σ k_j
    ds,  # [B, H, NS + 1, K, V] float32 written: 0, then Σ r_i q_iᵀ g_i over each segment
    ys,  # [B, H, NS + 1, K] float32, written when NORMALIZE: 0, then Σ r_i a_i q_i
    N,
    L,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    NORMALIZE: tl.constexpr,
):
    """The forward and the backward sums of one segment: one (BK, BV) tile of each state a
    program, and the vectors z, y in the programs of the first value tile; row 0 as in the
    forward pass (S_0, z_0, and zeros for D, y)."""
    i_kv, i_s, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    i_k, i_v = i_kv // (V // BV), i_kv % (V // BV)
    NT, NS = tl.cdiv(N, C), tl.cdiv(tl.cdiv(N, C), L)
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    b_h = tl.zeros([BK, BV], dtype=tl.float32)
    b_d = tl.zeros([BK, BV], dtype=tl.float32)
    b_z = tl.zeros([BK], dtype=tl.float32)
    b_y = tl.zeros([BK], dtype=tl.float32)
    for i_t in range(i_s * L, tl.minimum(i_s * L + L, NT)):
        o_t = i_t * C + tl.arange(0, C)
        m_t = o_t < N
        rows_v = (i_bh * N + o_t[:, None]) * V + o_v[None, :]  # [C, BV]
        b_k = tl.load(
            k + (i_bh * N + o_t[None, :]) * K + o_k[:, None], mask=m_t[None, :], other=0.0
        )
        b_q = tl.load(
            q + (i_bh * N + o_t[:, None]) * K + o_k[None, :], mask=m_t[:, None], other=0.0
        )
        b_do = tl.load(do + rows_v, mask=m_t[:, None], other=0.0)
        b_h = dot(b_k, tl.load(v + rows_v, mask=m_t[:, None], other=0.0), b_h)
        if NORMALIZE:
            b_r = load_rows(rden, i_bh, o_t, m_t, N)
            b_a = -load_rows(go, i_bh, o_t, m_t, N)
            b_z += tl.sum(b_k.to(tl.float32), axis=1)
            b_y += backward_vector(b_q, b_r, b_a)
            b_d += backward_state(b_q, b_do, b_r, NORMALIZE)
        else:
            b_d = dot(tl.trans(b_q), b_do, b_d)
    row = i_bh * (NS + 1) + i_s + 1
    state = (row * K + o_k[:, None]) * V + o_v[None, :]
    tl.store(hs + state, b_h)
    tl.store(ds + state, b_d)
    if NORMALIZE:
        if i_v == 0:
            tl.store(zs + row * K + o_k, b_z)
            tl.store(ys + row * K + o_k, b_y)
    if i_s == 0:
        initial_state(h0, z0, hs, zs, row - 1, i_bh, o_k, o_v, i_v, K, V, BK, BV, NORMALIZE)
        initial_state(None, None, ds, ys, row - 1, i_bh, o_k, o_v, i_v, K, V, BK, BV, NORMALIZE)


@tile_rule(widest=(64, 32, 16))
@triton.jit(do_not_specialize=["N", "L"])
def segment_dq_kernel(
    k,  # [B, H, N, K]
    v,  # [B, H, N, V]
    do,  # [B, H, N, V]
    rden,  # [B, H, N] float32 r, read when NORMALIZE
    go,  # [B, H, N] float32 g_i·o_i = −a_i, read when NORMALIZE
    hs,  # [B, H, NS + 1, K, V] float32 row s: the state before segment s (prefix sums)
    zs,  # [B, H, NS + 1, K] float32 z likewise, read when NORMALIZE
    dq,  # [B, H, N, K] written, or [V/BV, B, H, N, K] float32: each value tile's share
    N,
    L,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    NORMALIZE: tl.constexpr,
):
    """`chunk_dq` over one segment's chunks, in order, for a BK × BV tile of S_t: it starts as
    the sum of the segments before and gains each chunk after its use. The terms in a belong to
    the first value tile's share."""
    i_kv, i_s, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    i_k, i_v = i_kv // (V // BV), i_kv % (V // BV)
    NT, NS = tl.cdiv(N, C), tl.cdiv(tl.cdiv(N, C), L)
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    row = i_bh * (NS + 1) + i_s  # the state before this segment (prefix sums, by the launcher)
    b_h = tl.load(hs + (row * K + o_k[:, None]) * V + o_v[None, :])  # S_t
    b_z = tl.zeros([BK], dtype=tl.float32)  # z_t
    if NORMALIZE:
        b_z += tl.load(zs + row * K + o_k)
    out, first = i_v * tl.num_programs(2) + i_bh, i_v == 0  # this value tile's rows of dq
    causal = tl.arange(0, C)[:, None] >= tl.arange(0, C)[None, :]  # key j at or before query i
    for i_t in range(i_s * L, tl.minimum(i_s * L + L, NT)):
        b_h, b_z = dq_step(
            k, v, do, rden, go, dq, b_h, b_z, i_t, i_bh, out, first, o_k, o_v, causal, 0, N, N,
            K, V, C, NORMALIZE,
        )  # fmt: skip


@tile_rule(widest=(64, 32, 16))
@triton.jit(do_not_specialize=["N", "L"])
def segment_dk_kernel(
    q,  # [B, H, N, K]
    v,  # [B, H, N, V]
    do,  # [B, H, N, V]
    rden,  # [B, H, N] float32 r, read when NORMALIZE
    go,  # [B, H, N] float32 g_i·o_i = −a_i, read when NORMALIZE
    ds,  # [B, H, NS + 1, K, V] float32 row s: Σ r qᵀg before segment s, row NS: in all and ∂L/∂S_N
    ys,  # [B, H, NS + 1, K] float32 Σ r a q likewise (and ∂L/∂z_N), read when NORMALIZE
    dk,  # [B, H, N, K] written, or [V/BV, B, H, N, K] float32: each value tile's share
    N,
    L,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    NORMALIZE: tl.constexpr,
):
    """`chunk_dk` over one segment's chunks, in order, for a BK × BV tile of D_t: it starts as
    the sum of this segment and those after, and loses each chunk before its use. The terms in
    a and y belong to the first value tile's share."""
    i_kv, i_s, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    i_k, i_v = i_kv // (V // BV), i_kv % (V // BV)
    NT, NS = tl.cdiv(N, C), tl.cdiv(tl.cdiv(N, C), L)
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    first = i_v == 0  # y belongs to the first value tile's share
    last, row = i_bh * (NS + 1) + NS, i_bh * (NS + 1) + i_s  # all the sums, less those before
    b_d = tl.load(ds + (last * K + o_k[:, None]) * V + o_v[None, :])  # D_t
    b_d -= tl.load(ds + (row * K + o_k[:, None]) * V + o_v[None, :])
    b_y = tl.zeros([BK], dtype=tl.float32)  # y_t
    if NORMALIZE:
        b_y += tl.load(ys + last * K + o_k, mask=(o_k < K) & first, other=0.0)
        b_y -= tl.load(ys + row * K + o_k, mask=(o_k < K) & first, other=0.0)
    out = i_v * tl.num_programs(2) + i_bh  # this value tile's rows of dk
    causal = tl.arange(0, C)[:, None] >= tl.arange(0, C)[None, :]
    for i_t in range(i_s * L, tl.minimum(i_s * L + L, NT)):
        b_d, b_y = dk_step(
            q, v, do, rden, go, dk, b_d, b_y, i_t, i_bh, out, first, o_k, o_v, causal, 0, N, N,
            K, V, C, NORMALIZE, LEAVES=True,
        )  # fmt: skip


@tile_rule(widest=(64, 32, 16))
@triton.jit(do_not_specialize=["N", "L"])
def segment_dv_kernel(
    q,  # [B, H, N, K]
    k,  # [B, H, N, K]
    do,  # [B, H, N, V]
    rden,  # [B, H, N] float32 r, read when NORMALIZE
    ds,  # [B, H, NS + 1, K, V] float32 Σ r qᵀg before each segment, as for dk
    dv,  # [B, H, N, V] written, or [K/BK, B, H, N, V] float32: each feature tile's share
    N,
    L,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    NORMALIZE: tl.constexpr,
):
    """`chunk_dv` over one segment's chunks, in order, for a BK × BV tile of D_t, which starts
    and loses each chunk as in `segment_dk_kernel`."""
    i_kv, i_s, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    i_k, i_v = i_kv // (V // BV), i_kv % (V // BV)
    NT, NS = tl.cdiv(N, C), tl.cdiv(tl.cdiv(N, C), L)
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    last, row = i_bh * (NS + 1) + NS, i_bh * (NS + 1) + i_s  # all the sums, less those before
    b_d = tl.load(ds + (last * K + o_k[:, None]) * V + o_v[None, :])  # D_t
    b_d -= tl.load(ds + (row * K + o_k[:, None]) * V + o_v[None, :])
    out = i_k * tl.num_programs(2) + i_bh  # this feature tile's rows of dv
    after = tl.arange(0, C)[:, None] <= tl.arange(0, C)[None, :]  # [j, i]: query i at or after j
    for i_t in range(i_s * L, tl.minimum(i_s * L + L, NT)):
        b_d = dv_step(
            q, k, do, rden, dv, b_d, i_t, i_bh, out, o_k, o_v, after, 0, N, N, K, V, C,
            NORMALIZE, LEAVES=True,
        )  # fmt: skip


# 8 warps: the three walks' pointers and operands spill from 4 (16-bit, normalized: up to 68
# bytes on sm_90 from d = 64, 8 on sm_89; a short sequence's B·H programs do not miss the
# occupancy); 1 stage below sm_90, where 2 spilled 8 bytes in one of 192 configurations
@tile_rule(widest=(64, 32, 16), num_warps=8, num_stages=(2, 1))
@triton.jit(do_not_specialize=["N"])
def walk_bwd_kernel(
    q,  # [B, H, N, K]
    k,  # [B, H, N, K]
    v,  # [B, H, N, V]
    do,  # [B, H, N, V]
    rden,  # [B, H, N] float32 r, read when NORMALIZE
    go,  # [B, H, N] float32 g_i·o_i = −a_i, read when NORMALIZE
    h0,  # [B, H, V, K] S_0, or None for zeros
    z0,  # [B, H, K] z_0, or None
    dhn,  # [B, H, V, K] ∂L/∂S_N, or None for zeros
    dzn,  # [B, H, K] ∂L/∂z_N, or None
    dh0,  # [B, H, V, K] float32, written when given: ∂L/∂S_0
    dz0,  # [B, H, K] float32, written when given and NORMALIZE: ∂L/∂z_0
    dq,  # [B, H, N, K] written, or [V/BV, B, H, N, K] float32: each value tile's share
    dk,  # [B, H, N, K] likewise
    dv,  # [B, H, N, V] written, or [K/BK, B, H, N, V] float32: each feature tile's share
    cu_seqlens,  # [S + 1] int64: B = 1 holds S packed sequences, one a program; or None
    N,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    NORMALIZE: tl.constexpr,
):
    """The three gradients of a sequence that is one segment, for a BK × BV tile of the states,
    in one program and three walks: over the chunks in order for dq (`chunk_dq`), S_t starting
    from S_0 and gaining each chunk after its use; then back for dk (`chunk_dk`), D_t and y_t
    starting from the final state's gradient and gaining each chunk after its use, so that they
    end as the initial state's gradient; and back again for dv (`chunk_dv`). Nothing is added up
    before the walks, and the backward pass is this one launch. (dk and dv in one walk back
    would hold both products' tiles at once: more than a thread's 255 registers on sm_90.)
    Packed inputs (cu_seqlens): the program walks sequence program_id(1) of head i_bh, its
    states (and their gradients) row i_n of `(S, H, ·)` (`sequence_walk`)."""
    i_kv, i_s, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    i_k, i_v = i_kv // (V // BV), i_kv % (V // BV)
    i_n, bos, eos, _, _ = sequence_walk(cu_seqlens, i_s, i_bh, N, 1, C)
    NT = tl.cdiv(eos - bos, C)  # the walk's chunks: all of its sequence's
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    first = i_v == 0  # a and y belong to the first value tile's shares of dq and dk
    rows_q, rows_v = i_v * tl.num_programs(2) + i_bh, i_k * tl.num_programs(2) + i_bh
    causal = tl.arange(0, C)[:, None] >= tl.arange(0, C)[None, :]  # key j at or before query i
    b_h, b_z = state_tile(h0, z0, i_n, o_k, o_v, K, V, BK, BV, NORMALIZE)  # S_t, z_t
    for i_t in range(0, NT):
        b_h, b_z = dq_step(
            k, v, do, rden, go, dq, b_h, b_z, i_t, i_bh, rows_q, first, o_k, o_v, causal, bos,
            eos, N, K, V, C, NORMALIZE,
        )  # fmt: skip
    b_d, b_y = state_tile(dhn, dzn, i_n, o_k, o_v, K, V, BK, BV, NORMALIZE)  # D_t, y_t
    b_y = tl.where(first, b_y, 0.0)
    for i_back in range(0, NT):
        b_d, b_y = dk_step(
            q, v, do, rden, go, dk, b_d, b_y, NT - 1 - i_back, i_bh, rows_q, first, o_k, o_v,
            causal, bos, eos, N, K, V, C, NORMALIZE, LEAVES=False,
        )  # fmt: skip
    if dh0 is not None:
        store_state(dh0, dz0, b_d, b_y, i_n, o_k, o_v, i_v, K, V)
    b_d, _ = state_tile(dhn, None, i_n, o_k, o_v, K, V, BK, BV, False)  # D_t again, for dv
    after = tl.arange(0, C)[:, None] <= tl.arange(0, C)[None, :]  # [j, i]: query i at or after j
    for i_back in range(0, NT):
        b_d = dv_step(
            q, k, do, rden, dv, b_d, NT - 1 - i_back, i_bh, rows_v, o_k, o_v, after, bos, eos,
            N, K, V, C, NORMALIZE, LEAVES=False,
        )  # fmt: skip


def chunk_linear_attention_bwd(
    q, k, v, o, rden, do, initial_state=None, final_state_grad=None, *, chunk_size, arch,
    segment=None, initial_state_grad=False, cu_seqlens=None,
):  # fmt: skip
    """Gradients of causal linear attention for the output gradient `do` (and the final state's
    gradient): (dq, dk, dv, (∂L/∂S_0 `(B, H, V, K)`, ∂L/∂z_0 `(B, H, K)` or None) in float32
    when `initial_state_grad`, else None).

    `o` and `rden` are the forward's output (in float32: `chunk_linear_attention_fwd`'s
    keep_float32) and r, both None without normalization; every tensor contiguous `(B, H, N, ·)`;
    `initial_state` (S_0, z_0) as in the forward pass, or None; `final_state_grad` (∂L/∂S_N,
    ∂L/∂z_N), each in the shape of S_0, z_0 with any strides or None, or None; `arch` selects
    the tiles (`tiles.py`); `segment` chunks per segment (default `segment_length`: a sequence
    of at most ONE_WALK_CHUNKS chunks is one segment, whose gradients `walk_bwd_kernel`
    computes in one launch).

    The final state S_N = S_0 + Σ_j k_jᵀ v_j is the state after every token, so its gradient
    joins the backward state D (and y) after the last chunk: it is added to the last row of the
    prefix sums, which every walk of dk and dv starts from (or starts the walk back of one
    segment), and ∂L/∂S_0 is D before the first token.

    `cu_seqlens` (int64 `(S + 1,)` on the inputs' device, values unchecked; B = 1): S packed
    sequences, each walked there and back by `walk_bwd_kernel`'s programs of one sequence and
    head, whatever its length; the states and their gradients `(S, H, ·)`. Nothing is read on
    the host.
    """
    batch, heads, n, d_k = q.shape
    d_v = v.shape[-1]
    normalize = rden is not None
    sequences = None if cu_seqlens is None else cu_seqlens.shape[0] - 1
    segment, launches = backward_plan(
        batch, heads, n, d_k, d_v, v.dtype, multiprocessors(v.device), chunk_size, arch, segment,
        sequences,
    )  # fmt: skip
    go = (do * o).sum(dim=-1) if normalize else None  # g·o = −a (B, H, N), float32 as o
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def launch(kernel, *args, outputs=(), sizes=(n, segment)):
        """kernel[grid](*args, *outputs, *sizes, …) as `backward_plan` planned it. `outputs`:
        the gradients the kernel writes; where a gradient's sum runs over several of the
        kernel's tiles (`shares` > 1), each tile writes its share in float32, and the shares
        are added up here."""
        grid, options, shares = launches[kernel]
        written = [
            grad if share == 1 else grad.new_empty((share, *grad.shape), dtype=torch.float32)
            for grad, share in zip(outputs, shares, strict=True)
        ]
        kernel[grid](*args, *written, *sizes, d_k, d_v, chunk_size, NORMALIZE=normalize, **options)
        for grad, out in zip(outputs, written, strict=True):
            if out is not grad:
                grad.copy_(out.sum(dim=0))

    h0, z0 = initial_state or (None, None)
    d_final, y_final = final_state_grad or (None, None)
    if walk_bwd_kernel in launches:  # one walk there and back: no sums
        dh0 = dz0 = None
        states = batch if sequences is None else sequences
        if initial_state_grad:
            dh0 = v.new_empty(states, heads, d_v, d_k, dtype=torch.float32)
            dz0 = q.new_empty(states, heads, d_k, dtype=torch.float32) if normalize else None
        if d_final is not None:
            d_final = d_final.contiguous()
        if y_final is not None:
            y_final = y_final.contiguous()
        launch(
            walk_bwd_kernel, q, k, v, do, rden, go, h0, z0, d_final, y_final, dh0, dz0,
            outputs=(dq, dk, dv), sizes=(cu_seqlens, n),
        )  # fmt: skip
        return dq, dk, dv, (dh0, dz0) if initial_state_grad else None

    rows = launches[segment_dq_kernel][0][1] + 1  # the initial state, then each segment's sums
    hs, ds = (q.new_empty(batch, heads, rows, d_k, d_v, dtype=torch.float32) for _ in "hd")
    zs, ys = (
        (q.new_empty(batch, heads, rows, d_k, dtype=torch.float32) for _ in "zy")
        if normalize
        else (None, None)
    )
    sums = (hs, zs, ds, ys)
    launch(segment_sums_bwd_kernel, q, k, v, do, rden, go, h0, z0, *sums)
    for prefix in sums if normalize else (hs, ds):
        prefix.cumsum_(dim=2)  # row s: the sums before segment s
    if d_final is not None:
        ds[:, :, -1] += d_final.mT
    if normalize and y_final is not None:
        ys[:, :, -1] += y_final
    launch(segment_dq_kernel, k, v, do, rden, go, hs, zs, outputs=(dq,))
    launch(segment_dk_kernel, q, v, do, rden, go, ds, ys, outputs=(dk,))
    launch(segment_dv_kernel, q, k, do, rden, ds, outputs=(dv,))
    if not initial_state_grad:
        return dq, dk, dv, None
    return dq, dk, dv, (ds[:, :, -1].mT, ys[:, :, -1] if normalize else None)


# the kernels of a backward pass: one walk, or segments; for each, the gradients it writes and
# the tiles ("k": feature, "v": value) whose shares they sum
WALK = {walk_bwd_kernel: ("v", "v", "k")}
SEGMENTS = {
    segment_sums_bwd_kernel: (),
    segment_dq_kernel: ("v",),
    segment_dk_kernel: ("v",),
    segment_dv_kernel: ("k",),
}


@per_shape
def backward_plan(
    batch, heads, n, d_k, d_v, dtype, sms, chunk_size, arch, segment, sequences=None
):  # fmt: skip
    """The launch decisions of a backward pass, made once per shape and GPU (`sms`
    multiprocessors): (chunks per segment, {kernel: (grid, launch options, the shares each
    gradient it writes is cut into)}), the kernels of one walk (`walk_bwd_kernel`, a sequence
    of one segment) or of segments. Packed inputs of `sequences` sequences (batch 1): one walk
    per sequence, the grid (tiles, sequences, heads)."""
    tile = tiles(segment_dq_kernel, arch, d_k, d_v, dtype)
    n_chunks = -(-n // chunk_size)
    if sequences is None:
        programs = batch * heads * d_k * d_v // tile.block_k // tile.block_v
        segment = segment or segment_length(n_chunks, programs, sms)
        n_segments = walks = -(-n_chunks // segment)
    else:
        segment, n_segments, walks = max(n_chunks, 1), 1, sequences
    launches = {}
    for kernel, overs in (WALK if n_segments == 1 else SEGMENTS).items():
        tile = tiles(kernel, arch, d_k, d_v, dtype)
        tiles_k, tiles_v = d_k // tile.block_k, d_v // tile.block_v
        shares = tuple(tiles_k if over == "k" else tiles_v for over in overs)
        grid = (tiles_k * tiles_v, walks, batch * heads)
        launches[kernel] = (grid, tile.launch_options, shares)
    return segment, launches
