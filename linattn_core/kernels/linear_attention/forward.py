"""The forward pass of causal linear attention in two Triton kernels, and their launcher.

With chunks of C tokens, chunk t holding positions tC … tC + C − 1, and the state of the tokens
before it, S_t = S_0 + Σ_{j < tC} k_jᵀ v_j `(K, V)` and z_t = z_0 + Σ_{j < tC} k_j `(K,)` (S_0,
z_0: the initial state, zero unless given), every output row of chunk t is (book, the
chapter on causal, recurrent and chunked linear attention)

    o_i = r_i (q_i S_t + Σ_{tC ≤ j ≤ i} (q_i·k_j) v_j),
    r_i = 1 / (q_i·z_t + Σ_{tC ≤ j ≤ i} q_i·k_j + ε)

(r_i = 1 without normalization). The states are a prefix sum over chunks, so the sequence is
cut into segments of L chunks that run in parallel:

1. `segment_sums_kernel`: one program per segment (and state tile) adds up its segment's
   Σ k_jᵀ v_j and Σ k_j into row s + 1 of the sums, reading k and v once; row 0 is S_0, z_0;
2. `segment_output_kernel`: one program per segment (and state tile) starts from row s of the
   prefix sums (torch's cumsum turns the rows into the state before each segment in between,
   and the last row into the final state) and walks its L chunks in order, keeping S_t and z_t
   in registers, and writes the outputs; it reads q, k and v once.

No state is ever stored per chunk: the pass moves q, k, v, o and k, v once more, 6·N·d values,
against 4·N·d at the least, and its sequential depth is L chunks instead of N/C. L is chosen so
that the segments of all heads fill the GPU (`segment_length`). (flash-linear-attention stores
every chunk's state from one long walk, `chunk_fwd_kernel_h`, and reads it back in
`chunk_fwd_kernel_o`.)

A short sequence is one segment (`ONE_WALK_CHUNKS`): then there is nothing to add up before the
walk, which starts from (S_0, z_0) itself and ends with the final state, and the pass is one
launch. Its time is the host's: each launch costs the host about 29 µs (measured on an H200's
host, `figures/gpu/*/host.json`), more than a walk of 16 chunks takes the GPU (19 µs).

Packed sequences (`cu_seqlens`, S sequences in a batch of 1, `linattn_core.packing`): each
program of `segment_output_kernel` walks one whole sequence of one head from that sequence's
initial state, its chunks starting at the sequence's first token (bos + j·C, not a multiple of
C), so that no chunk crosses a boundary, and writes its final state (`sequence_walk`); the grid
is (tiles, S, H), known from shapes, and nothing is read on the host. One walk a sequence rather
than segments: segments would need each sequence's own prefix sums, a work list of (sequence,
segment) rows built on the device and a grid sized for the worst case, while the walk is the
tested one-walk path that unpacked sequences of up to ONE_WALK_CHUNKS chunks take, with S·H
programs where an unpacked pass has B·H. Its cost: the sequential depth of the longest
sequence, ⌈n_max / C⌉ chunks, where segments would bound it (a single long sequence packed alone
is slower than unpacked; packing is for many sequences).

Precision: the matrix products take 16-bit inputs as they are, on their own tensor cores, and
float32 inputs as three TF32 products (`dot`); all accumulate in float32, and the states stay
float32 in registers. A state enters a product as a 16-bit operand: for float16, whose range
ends at 65504 (a sum over 100k tokens passes it), divided by its largest magnitude, which then
multiplies the float32 product (`dot_state`).

Layout: q, k `(B, H, N, K)` and v `(B, H, N, V)` contiguous; K, V multiples of the tiles BK, BV.
"""

import torch
import triton
import triton.language as tl

from linattn_core.kernels.common import dot, multiprocessors, per_shape
from linattn_core.kernels.tiles import tile_rule, tiles

MAX_SEGMENTS = 64  # at most this many segments (rows of prefix sums) a head
PROGRAMS_PER_SM = 4  # programs the segments should give each multiprocessor
ONE_WALK_CHUNKS = 16  # sequences of at most this many chunks are walked in one segment


@triton.jit
def dot_state(x, b_s, TWO_TERMS: tl.constexpr):
    """x @ S for a float32 state S, which enters the product as an operand of x's dtype: for
    float16, whose largest number is 65504, S / max|S|, and the product is scaled back. With
    TWO_TERMS (16-bit x), S = S_hi + S_lo, two products and about 16 more bits, where the product
    is one of two terms that cancel (normalized attention's g Sᵀ − (g·o) zᵀ in dq)."""
    scale = 1.0
    if x.dtype == tl.float16:
        scale = tl.maximum(tl.max(tl.abs(b_s)), 1e-30)
    b_hi = (b_s / scale).to(x.dtype)
    b_o = dot(x, b_hi, None)
    if TWO_TERMS and x.dtype != tl.float32:
        b_o = dot(x, (b_s / scale - b_hi.to(tl.float32)).to(x.dtype), b_o)
    return b_o * scale


@tile_rule(widest=(64, 64, 32))
@triton.jit(do_not_specialize=["N", "L"])
def segment_sums_kernel(
    k,  # [B, H, N, K]
    v,  # [B, H, N, V]
    h0,  # [B, H, V, K] S_0, the state before the sequence, or None for zeros
    z0,  # [B, H, K] z_0, or None for zeros
    hs,  # [B, H, NS + 1, K, V] float32 written: S_0 (row 0), then Σ k_jᵀ v_j over each segment
    zs,  # [B, H, NS + 1, K] float32, written when NORMALIZE: z_0, then Σ k_j over each segment
    N,
    L,  # chunks per segment
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    NORMALIZE: tl.constexpr,
):
    """Σ k_jᵀ v_j (and Σ k_j) over one segment's tokens: one (BK, BV) tile a program; the
    programs of the first segment also write the initial state in row 0, so that the launcher's
    cumsum makes row s the state before segment s and row NS the final state."""
    i_kv, i_s, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    i_k, i_v = i_kv // (V // BV), i_kv % (V // BV)
    NT, NS = tl.cdiv(N, C), tl.cdiv(tl.cdiv(N, C), L)
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    b_h = tl.zeros([BK, BV], dtype=tl.float32)
    b_z = tl.zeros([BK], dtype=tl.float32)
    for i_t in range(i_s * L, tl.minimum(i_s * L + L, NT)):
        o_t = i_t * C + tl.arange(0, C)
        m_t = o_t < N  # the last chunk may be short
        p_k = k + (i_bh * N + o_t[None, :]) * K + o_k[:, None]  # kᵀ [BK, C]
        p_v = v + (i_bh * N + o_t[:, None]) * V + o_v[None, :]  # [C, BV]
        b_k = tl.load(p_k, mask=m_t[None, :], other=0.0)
        b_h = dot(b_k, tl.load(p_v, mask=m_t[:, None], other=0.0), b_h)
        if NORMALIZE:
            b_z += tl.sum(b_k.to(tl.float32), axis=1)
    row = i_bh * (NS + 1) + i_s + 1
    tl.store(hs + (row * K + o_k[:, None]) * V + o_v[None, :], b_h)
    if NORMALIZE:
        if i_v == 0:
            tl.store(zs + row * K + o_k, b_z)
    if i_s == 0:
        initial_state(h0, z0, hs, zs, row - 1, i_bh, o_k, o_v, i_v, K, V, BK, BV, NORMALIZE)


@triton.jit
def state_tile(
    h,
    z,
    i_bh,
    o_k,
    o_v,
    K: tl.constexpr,
    V: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    NORMALIZE: tl.constexpr,
):
    """A program's tile of a state given as S `(B, H, V, K)` and z `(B, H, K)` in any float dtype
    (the initial state, or the final state's gradient), in the kernels' orientation, Σ kᵀv
    `(BK, BV)`, and in float32; zeros where h, z are None (z also without NORMALIZE)."""
    b_h = tl.zeros([BK, BV], dtype=tl.float32)
    if h is not None:  # S is (V, K): read transposed
        b_h += tl.load(h + (i_bh * V + o_v[None, :]) * K + o_k[:, None]).to(tl.float32)
    b_z = tl.zeros([BK], dtype=tl.float32)
    if NORMALIZE:
        if z is not None:
            b_z += tl.load(z + i_bh * K + o_k).to(tl.float32)
    return b_h, b_z


@triton.jit
def store_state(h, z, b_h, b_z, i_bh, o_k, o_v, i_v, K: tl.constexpr, V: tl.constexpr):
    """Write a program's float32 state tile into S `(B, H, V, K)` (transposed back) and its z
    into `(B, H, K)` (by the first value tile; not when z is None)."""
    tl.store(h + (i_bh * V + o_v[None, :]) * K + o_k[:, None], b_h)
    if z is not None:
        if i_v == 0:
            tl.store(z + i_bh * K + o_k, b_z)


@triton.jit
def initial_state(
    h0,
    z0,
    hs,
    zs,
    row,
    i_bh,
    o_k,
    o_v,
    i_v,
    K: tl.constexpr,
    V: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    NORMALIZE: tl.constexpr,
):
    """Row `row` of hs and zs: S_0 and z_0 as `state_tile` reads them."""
    b_h, b_z = state_tile(h0, z0, i_bh, o_k, o_v, K, V, BK, BV, NORMALIZE)
    tl.store(hs + (row * K + o_k[:, None]) * V + o_v[None, :], b_h)
    if NORMALIZE:
        if i_v == 0:
            tl.store(zs + row * K + o_k, b_z)


@triton.jit
def sequence_walk(cu_seqlens, i_s, i_bh, N, L, C: tl.constexpr):
    """What program (i_s, head i_bh) walks: (the row i_n of its states, its tokens bos ≤ t <
    eos, its chunks first ≤ i_t < end, chunk i_t being the tokens from bos + i_t·C). Unpacked
    (cu_seqlens None): segment i_s of L chunks of batch row and head i_bh, whose state is row
    i_bh. Packed: the whole of sequence i_s, cu_seqlens[i_s] ≤ t < cu_seqlens[i_s + 1], of head
    i_bh (batch 1), whose state is row i_s·H + i_bh of `(S, H, ·)`; its chunks start at the
    sequence's start, not at multiples of C, so no chunk crosses a boundary."""
    if cu_seqlens is not None:
        bos = tl.load(cu_seqlens + i_s)
        eos = tl.load(cu_seqlens + i_s + 1)
        i_n, first, end = i_s * tl.num_programs(2) + i_bh, 0, tl.cdiv(eos - bos, C)
    else:
        i_n, bos, eos, first, end = i_bh, 0, N, i_s * L, tl.minimum(i_s * L + L, tl.cdiv(N, C))
    return i_n, bos, eos, first, end


@tile_rule(widest=(64, 32, 16))
@triton.jit(do_not_specialize=["N", "L"])
def segment_output_kernel(
    q,  # [B, H, N, K]
    k,  # [B, H, N, K]
    v,  # [B, H, N, V]
    hs,  # [B, H, NS + 1, K, V] float32 row s: the state before segment s (prefix sums), or None
    zs,  # [B, H, NS + 1, K] float32 z likewise, read when NORMALIZE, or None
    h0,  # [B, H, V, K] S_0 where hs is None (one segment), or None for zeros
    z0,  # [B, H, K] z_0 likewise
    hn,  # [B, H, V, K] float32, written when given (one segment): the final state S_N
    zn,  # [B, H, K] float32, written when given and NORMALIZE: z_N
    o,  # [B, H, N, V] written, or [K/BK, B, H, N, V] float32: each feature tile's numerator
    o32,  # [B, H, N, V] float32 written when given (one feature tile): o before its rounding
    rden,  # [B, H, N] float32 r, or [K/BK, B, H, N]: each feature tile's denominator
    cu_seqlens,  # [S + 1] int64: B = 1 holds S packed sequences, one a program; or None
    N,
    L,
    eps,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    NORMALIZE: tl.constexpr,
):
    """o_i = r_i (q_i S_t + Σ_{tC ≤ j ≤ i} (q_i·k_j) v_j) over one segment's chunks, in order,
    for a BK × BV tile of the state: S_t starts as the sum of the segments before (or as S_0,
    when the sequence is one segment) and gains k_tᵀ v_t after each chunk. With one feature
    tile (K = BK) the program writes o and r; with several, each writes its share of the
    numerator and of the denominator (sums over its features), which the launcher adds up."""
    i_kv, i_s, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    i_k, i_v = i_kv // (V // BV), i_kv % (V // BV)
    NS = tl.cdiv(tl.cdiv(N, C), L)
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    i_n, bos, eos, first, end = sequence_walk(cu_seqlens, i_s, i_bh, N, L, C)
    if hs is not None:  # the state before this segment (prefix sums, by the launcher)
        row = i_bh * (NS + 1) + i_s
        b_h = tl.load(hs + (row * K + o_k[:, None]) * V + o_v[None, :])  # S_t, this tile
        b_z = tl.zeros([BK], dtype=tl.float32)  # z_t, this program's features
        if NORMALIZE:
            b_z += tl.load(zs + row * K + o_k)
    else:
        b_h, b_z = state_tile(h0, z0, i_n, o_k, o_v, K, V, BK, BV, NORMALIZE)
    out = i_k * tl.num_programs(2) + i_bh  # this feature tile's rows of o and rden
    causal = tl.arange(0, C)[:, None] >= tl.arange(0, C)[None, :]  # key j at or before query i
    for i_t in range(first, end):
        o_t = bos + i_t * C + tl.arange(0, C)
        m_t = o_t < eos
        p_q = q + (i_bh * N + o_t[:, None]) * K + o_k[None, :]  # [C, BK]
        p_k = k + (i_bh * N + o_t[None, :]) * K + o_k[:, None]  # kᵀ [BK, C]
        p_v = v + (i_bh * N + o_t[:, None]) * V + o_v[None, :]  # [C, BV]
        b_q = tl.load(p_q, mask=m_t[:, None], other=0.0)
        b_k = tl.load(p_k, mask=m_t[None, :], other=0.0)
        b_v = tl.load(p_v, mask=m_t[:, None], other=0.0)
        b_o = dot_state(b_q, b_h, False)  # q_i S_t
        b_a = tl.where(causal, dot(b_q, b_k, None), 0.0)  # q_i·k_j within the chunk
        b_o = dot(b_a.to(b_v.dtype), b_v, b_o)
        if NORMALIZE:
            b_den = tl.sum(b_q.to(tl.float32) * b_z[None, :], axis=1) + tl.sum(b_a, axis=1)
            if K == BK:  # the whole denominator: normalize here
                b_den = 1.0 / (b_den + eps)  # r
                b_o = b_o * b_den[:, None]
            if i_v == 0:
                tl.store(rden + out * N + o_t, b_den, mask=m_t)
            b_z += tl.sum(b_k.to(tl.float32), axis=1)
        rows = (out * N + o_t[:, None]) * V + o_v[None, :]
        tl.store(o + rows, b_o.to(o.dtype.element_ty), mask=m_t[:, None])
        if o32 is not None:
            tl.store(o32 + rows, b_o, mask=m_t[:, None])
        b_h = dot(b_k, b_v, b_h)  # S_{t+1} = S_t + k_tᵀ v_t
    if hn is not None:
        store_state(hn, zn, b_h, b_z, i_n, o_k, o_v, i_v, K, V)


def segment_length(n_chunks, programs_per_segment, multiprocessor_count):
    """Chunks per segment L: all of them for a sequence of at most ONE_WALK_CHUNKS chunks (one
    walk, one launch a pass); otherwise the fewest that still give each of the GPU's
    `multiprocessor_count` multiprocessors about PROGRAMS_PER_SM programs
    (`programs_per_segment` programs run for each segment), and at most MAX_SEGMENTS segments.

    >>> segment_length(1024, 16, 132)  # an H100, 16 heads of one tile: 32 segments of 32 chunks
    32
    >>> segment_length(16, 16, 132)  # 1024 tokens: one walk
    16
    """
    if n_chunks <= ONE_WALK_CHUNKS:
        return max(n_chunks, 1)
    wanted = -(-PROGRAMS_PER_SM * multiprocessor_count // programs_per_segment)
    segments = max(1, min(wanted, MAX_SEGMENTS, n_chunks))
    return -(-n_chunks // segments)


@per_shape
def forward_plan(batch, heads, n, d_k, d_v, dtype, sms, chunk_size, arch, segment, sequences=None):
    """The launch decisions of a forward pass, made once per shape and GPU (`sms`
    multiprocessors; they read no tensor): the output kernel's launch options, the feature
    tiles `split` it is cut into, the chunks per segment (`segment`, or `segment_length`'s),
    the grid, and for a sequence of several segments the sums kernel's options, grid and
    number of segments (else None). Packed inputs of `sequences` sequences (batch 1) are one
    walk per sequence: `sequences` programs in the grid's place of the segments, no sums."""
    tile = tiles(segment_output_kernel, arch, d_k, d_v, dtype)
    n_chunks = -(-n // chunk_size)
    split = d_k // tile.block_k
    if sequences is not None:
        grid = (split * d_v // tile.block_v, sequences, heads)
        return tile.launch_options, split, max(n_chunks, 1), grid, None
    programs = batch * heads * d_k * d_v // tile.block_k // tile.block_v
    segment = segment or segment_length(n_chunks, programs, sms)
    n_segments = -(-n_chunks // segment)
    sums = None
    if n_segments > 1:
        sums_tile = tiles(segment_sums_kernel, arch, d_k, d_v, dtype)
        sums_grid = (
            (d_k // sums_tile.block_k) * (d_v // sums_tile.block_v),
            n_segments,
            batch * heads,
        )
        sums = (sums_tile.launch_options, sums_grid, n_segments)
    grid = (split * d_v // tile.block_v, n_segments, batch * heads)
    return tile.launch_options, split, segment, grid, sums


def segment_sums(k, v, initial_state=None, *, normalize, chunk_size, segment, arch):
    """Launch `segment_sums_kernel`: (S_0 then Σ kᵀv over segments of `segment` chunks,
    `(B, H, NS + 1, K, V)` float32; z_0 then Σ k, `(B, H, NS + 1, K)` float32 or None).
    `initial_state`: (S_0 `(B, H, V, K)`, z_0 `(B, H, K)` or None) contiguous, or None."""
    batch, heads, n, d_k = k.shape
    d_v = v.shape[-1]
    sms = multiprocessors(v.device)
    plan = forward_plan(batch, heads, n, d_k, d_v, v.dtype, sms, chunk_size, arch, segment)
    options, grid, n_segments = plan[-1]
    hs = k.new_empty(batch, heads, n_segments + 1, d_k, d_v, dtype=torch.float32)
    zs = k.new_empty(batch, heads, n_segments + 1, d_k, dtype=torch.float32) if normalize else None
    h0, z0 = initial_state or (None, None)
    segment_sums_kernel[grid](
        k, v, h0, z0, hs, zs, n, segment, d_k, d_v, chunk_size, NORMALIZE=normalize, **options
    )
    return hs, zs


def chunk_linear_attention_fwd(
    q, k, v, initial_state=None, *, normalize, eps, chunk_size, arch, segment=None,
    keep_float32=False, final_state=False, cu_seqlens=None,
):  # fmt: skip
    """Causal linear attention forward: (o `(B, H, N, V)` in v's dtype, r `(B, H, N)` float32 or
    None, o in float32 or None, the final state (S `(B, H, V, K)`, z `(B, H, K)` or None) in
    float32 when `final_state`, else None). Inputs contiguous `(B, H, N, ·)`, `initial_state`
    (S_0, z_0) likewise or None;
    `arch` selects the tiles (`tiles.py`); `segment` chunks per segment (default
    `segment_length`); `keep_float32` asks for o before its rounding to v's dtype too
    (normalized attention's backward pass computes a_i = −g_i·o_i from it: a 16-bit o would lose
    to rounding what the gradient of φ(q) keeps after a cancellation).

    `cu_seqlens` (int64 `(S + 1,)` on the inputs' device, values unchecked; B = 1): S packed
    sequences, each walked whole from its own initial state by one program per head and state
    tile (`sequence_walk`), the states `(S, H, ·)`. Nothing is read on the host: the grid is
    (tiles, S, H), from shapes alone."""
    batch, heads, n, d_k = q.shape
    d_v = v.shape[-1]
    sequences = None if cu_seqlens is None else cu_seqlens.shape[0] - 1
    options, split, segment, grid, sums = forward_plan(
        batch, heads, n, d_k, d_v, v.dtype, multiprocessors(v.device), chunk_size, arch, segment,
        sequences,
    )  # fmt: skip
    h0, z0 = initial_state or (None, None)
    if sums is None:  # one walk from (S_0, z_0), which writes the final state
        hs = zs = hn = zn = None
        states = batch if sequences is None else sequences
        if final_state:
            hn = v.new_empty(states, heads, d_v, d_k, dtype=torch.float32)
            zn = q.new_empty(states, heads, d_k, dtype=torch.float32) if normalize else None
        final = (hn, zn) if final_state else None
    else:
        hs, zs = segment_sums(
            k, v, initial_state, normalize=normalize, chunk_size=chunk_size, segment=segment,
            arch=arch,
        )  # fmt: skip
        for prefix in (hs, zs) if normalize else (hs,):
            prefix.cumsum_(dim=2)  # row s: the state before segment s; the last: the final state
        h0 = z0 = hn = zn = None  # S_0, z_0 are row 0
        final = (hs[:, :, -1].mT, zs[:, :, -1] if normalize else None) if final_state else None
    o32 = None
    if split == 1:
        o = torch.empty_like(v)
        rden = q.new_empty(batch, heads, n, dtype=torch.float32) if normalize else None
        if keep_float32 and v.dtype != torch.float32:
            o32 = torch.empty_like(v, dtype=torch.float32)
    else:  # each feature tile's share of the numerator and of the denominator
        o = v.new_empty(split, batch, heads, n, d_v, dtype=torch.float32)
        rden = q.new_empty(split, batch, heads, n, dtype=torch.float32) if normalize else None
    segment_output_kernel[grid](
        q, k, v, hs, zs, h0, z0, hn, zn, o, o32, rden, cu_seqlens, n, segment, eps, d_k, d_v,
        chunk_size, NORMALIZE=normalize, **options,
    )  # fmt: skip
    if split == 1:
        return o, rden, o32 if o32 is not None else (o if keep_float32 else None), final
    o = o.sum(dim=0)
    if normalize:
        rden = 1.0 / (rden.sum(dim=0) + eps)
        o = o * rden[..., None]
    return o.to(v.dtype), rden, o if keep_float32 else None, final
