"""The forward pass of the delta rule (DeltaNet) in three Triton kernels, and their launcher.

For a chunk of C tokens with keys K, values V, queries Q, rates β and the state S_0 at its
start (book, the delta rule chapter, theorem "One chunk of the delta rule"):

    A = (I + N)⁻¹,  N = diag(β) (K Kᵀ ⊙ M⁻),      W = A diag(β) K,   Ũ = A diag(β) V,
    U = Ũ − W S_0ᵀ,    O = Q S_0ᵀ + (Q Kᵀ ⊙ M) U,    S_C = S_0 + Uᵀ K.

`delta_prepare_kernel` computes A, W and Ũ for every chunk at once: they do not depend on the
state, and A never leaves the program's registers (it is stored only for the backward pass).
`delta_states_kernel` walks the chunks in order with the state in registers, writing the state
at every chunk's start and the corrections U (over Ũ in the forward pass: it reads each chunk's
Ũ once). `delta_output_kernel`
computes every chunk's outputs from those. (flash-linear-attention runs the same pipeline in
five kernels — `chunk_scaled_dot_kkt`, `solve_tril`, `recompute_w_u`, `chunk_fwd_h`,
`chunk_fwd_o` — and passes A through memory three times.)

The triangular inverse. A is the inverse of a unit lower triangular C × C matrix, computed in
the program's registers by the block recursion the chapter proves, on two blocks of R = C/2 rows:

    A = [[D_0, 0], [Y_10, D_1]],   D_r = (I + N_rr)⁻¹,   Y_10 = −D_1 N_10 D_0,

and each D_r by the same recursion on its halves of C/4 rows (`unit_lower_inverse`), whose
four inverses come from forward substitution, all at once, one row at a time (`substitute`):
row i is e_i − Σ_{j<i} N_ij (row j); each step reads a row of N from the program's L1 cache
and sums along a warp's lanes, so no step waits on another warp. (FLA's `solve_tril` likewise
substitutes on 16 × 16 blocks and joins them by products.)
Substitution is componentwise backward stable, and in DeltaNet's regime — unit keys,
β ∈ (0, 1] — the chapter measures ‖A‖₂ between 1.7 and 2.3 over several key distributions (and
proves ‖A‖_∞ ≤ 2 for a repeated key), so the inverse and its products stay in range.
(The Neumann form (I − N)(I + N²)(I + N⁴)…, all matrix products, would be faster on tensor
cores, but its factors hold binomial coefficients that must cancel: 5e17 for a repeated key at
C = 64, which leaves float32 an error of 4e9.) A is computed in float32 whatever the inputs'
dtype, and multiplies 16-bit keys and values as two 16-bit terms (`split_dot`); W, Ũ, U and
the states are stored in the inputs' dtype, the operand type of the products that read them;
the walk keeps its state in float32.

Layout: q, k `(B, H, N, K)`, v `(B, H, N, V)`, β `(B, H, N)`, the states at the chunks' starts
`(B, H, NT, K, V)` (Sᵀ, as the products read them), the initial and final states `(B, H, V, K)`
as in `linattn_core.delta`; all contiguous; K, V multiples of the tiles.

Packed sequences (`linattn_core.packing`): S sequences in inputs `(1, H, N, ·)`, states
`(S, H, V, K)`. Each kernel takes an optional work list, None without packing, which Triton
specializes away as it does g: the chunk-parallel kernels `chunks` `(N // C + S, 3)`, rows
(sequence, start, end) of `packing.chunk_indices` — program i_t takes the tokens start + j,
j < C, masked at end (`chunk_span`): a chunk starts at its sequence's start + j·C, not at a
multiple of C, and the programs after the last chunk return at once — and the walks
`sequences` `(S, 3)`, rows (start, end, index of the first chunk), a program per sequence
(`walk_span`), which store each chunk's state at the row the chunk-parallel kernels read:
NT = N // C + S rows, sized from shapes alone, so that nothing is read back to the host.
"""

import torch
import triton
import triton.language as tl

from linattn_core.kernels.common import dot, per_shape, split_dot
from linattn_core.kernels.tiles import GATED_OPTIONS, kernel_name, tile_rule, tiles


@triton.jit
def substitute(p_n, corner, G: tl.constexpr, S: tl.constexpr, R: tl.constexpr):
    """(I + N_g)⁻¹ of G strictly lower triangular S × S blocks by forward substitution, all at
    once: row i of the inverse E is e_i − Σ_{j<i} N_ij (row j of E). Block g's entry (i, j) is
    in memory at p_n + corner_g + i·R + j; E is held transposed, so that each step's sum over
    j runs along a warp's lanes and no step waits on another warp. Returns Eᵀ `[G, S, S]`."""
    o_j = tl.arange(0, S)
    eye = o_j[:, None] == o_j[None, :]
    b_et = tl.where(eye[None, :, :], 1.0, 0.0) + tl.zeros([G, S, S], dtype=tl.float32)
    for i in range(1, S):
        n_i = tl.load(p_n + corner[:, None] + i * R + o_j[None, :])  # row i of each N_g  [G, S]
        e_i = tl.sum(b_et * n_i[:, None, :], axis=2)  # Σ_j N_ij E_jc  [G, S]
        b_et = tl.where(o_j[None, None, :] == i, b_et - e_i[:, :, None], b_et)  # E's row i
    return b_et


@triton.jit
def unit_lower_inverse(p_n, R: tl.constexpr):
    """(I + N)⁻¹ of two strictly lower triangular R × R blocks, both at once. The blocks' rows are
    in memory at p_n (float32, row i of block b at p_n + (b·R + i)·R; the program wrote them and
    reads them back from its L1 cache), and so, afterwards, are their inverses; returns them
    `[2, R, R]`. Blocks of 32 rows or more are inverted by the same recursion on their halves of
    S = R/2 rows, [[E_0, 0], [−E_1 N_10 E_0, E_1]], the four halves by `substitute` at once:
    15 steps of 4 × 16 × 16 entries instead of 31 of 2 × 32 × 32. (Halves of fewer than 16 rows
    are below the tensor cores' smallest product: float32 inputs, R = 16, substitute whole.)"""
    o_b = tl.arange(0, 2)[:, None, None]
    if R < 32:
        b_inverse = tl.permute(substitute(p_n, tl.arange(0, 2) * R * R, 2, R, R), 0, 2, 1)
    else:
        b_inverse = _join_halves(p_n, o_b, R)
    return b_inverse


@triton.jit
def _join_halves(p_n, o_b, R: tl.constexpr):
    """`unit_lower_inverse` for R ≥ 32, through the blocks' halves."""
    S: tl.constexpr = R // 2
    o_g = tl.arange(0, 4)  # half g: rows and columns g % 2 · S + … of block g // 2
    b_et = substitute(p_n, (o_g // 2) * R * R + (o_g % 2) * S * (R + 1), 4, S, R)
    b_e0t, b_e1t = tl.split(tl.permute(tl.reshape(b_et, [2, 2, S, S]), 0, 2, 3, 1))  # [2, S, S]
    o_j = tl.arange(0, S)
    o_r, o_c = o_j[None, :, None], o_j[None, None, :]
    b_n10t = tl.load(p_n + o_b * R * R + (S + o_c) * R + o_r)  # N_10ᵀ  [2, S, S]
    b_y10t = -dot(b_e0t, dot(b_n10t, b_e1t, None), None)  # (−E_1 N_10 E_0)ᵀ
    tl.debug_barrier()  # every row of N read before the inverses take its place
    p_y = p_n + o_b * R * R + o_c * R + o_r  # where a transposed half's [b, r, c] goes: (c, r)
    tl.store(p_y, b_e0t)
    tl.store(p_y + S * R, b_y10t)
    tl.store(p_y + S, tl.zeros([2, S, S], dtype=tl.float32))
    tl.store(p_y + S * (R + 1), b_e1t)
    tl.debug_barrier()
    o_i = tl.arange(0, R)
    return tl.load(p_n + o_b * R * R + o_i[None, :, None] * R + o_i[None, None, :])


# float32 C × C tiles (the inverse) whatever the inputs; 2 warps for the triangular
# substitution (fewer warps, more programs: 0.91 times the time of 4 on an H200), and 1 stage,
# as the operands of two would not fit
@tile_rule(widest=(16, 16, 16), num_warps=2, num_stages=(1, 1))
@triton.jit(do_not_specialize=["N"])
def delta_prepare_kernel(
    k,  # [B, H, N, K]
    v,  # [B, H, N, V]
    beta,  # [B, H, N]
    g,  # [B, H, N] the log-gates, or None (the delta rule)
    chunks,  # [NT, 3] packed sequences' chunks (`packing.chunk_indices`), or None
    a,  # [B, H, NT·C, C] written when STORE_A: A of each chunk, its rows
    scratch,  # [B, H, NT·C, C/2] float32: each chunk's two diagonal blocks of N (may alias a)
    w,  # [B, H, N, K] written: W = A diag(β) K
    u,  # [B, H, N, V] written: Ũ = A diag(β) V
    N,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    STORE_A: tl.constexpr,
):
    """A = (I + diag(β)(K Kᵀ ⊙ M⁻))⁻¹, W = A diag(β) K, Ũ = A diag(β) V: one chunk a program,
    in two blocks of R = C/2 rows. With gates, K Kᵀ ⊙ Γ ⊙ M⁻ and W = A diag(β exp(G)) K."""
    R: tl.constexpr = C // 2
    i_t, i_bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    start, end = chunk_span(chunks, i_t, N, C)
    if chunks is not None:
        if start >= end:  # a program after the last chunk: nothing to do
            return
    o_r = tl.arange(0, R)
    o_t0, o_t1 = start + o_r, start + R + o_r  # the chunk's two blocks of rows
    m_t0, m_t1 = o_t0 < end, o_t1 < end
    b_beta0 = tl.load(beta + i_bh * N + o_t0, mask=m_t0, other=0.0).to(tl.float32)  # [R]
    b_beta1 = tl.load(beta + i_bh * N + o_t1, mask=m_t1, other=0.0).to(tl.float32)
    b_n00 = tl.zeros([R, R], dtype=tl.float32)  # K_r K_sᵀ, the three blocks on or below
    b_n10 = tl.zeros([R, R], dtype=tl.float32)  # the diagonal
    b_n11 = tl.zeros([R, R], dtype=tl.float32)
    for i_k in range(K // BK):
        o_k = i_k * BK + tl.arange(0, BK)
        b_k0 = tl.load(
            k + (i_bh * N + o_t0[:, None]) * K + o_k[None, :], mask=m_t0[:, None], other=0.0
        )
        b_k1 = tl.load(
            k + (i_bh * N + o_t1[:, None]) * K + o_k[None, :], mask=m_t1[:, None], other=0.0
        )
        b_n00 = dot(b_k0, tl.trans(b_k0), b_n00)
        b_n10 = dot(b_k1, tl.trans(b_k0), b_n10)
        b_n11 = dot(b_k1, tl.trans(b_k1), b_n11)
    below = o_r[:, None] > o_r[None, :]  # M⁻ inside a diagonal block
    if g is not None:  # ⊙ Γ, block by block: exponents G_i − G_j ≤ 0 only
        b_g0 = chunk_gates(g, i_bh, N, o_t0, m_t0)  # G of the first block's rows
        b_g1 = chunk_gates(g, i_bh, N, o_t1, m_t1) + tl.sum(tl.where(o_r == R - 1, b_g0, 0.0))
        b_n00 *= tl.exp(tl.where(below, b_g0[:, None] - b_g0[None, :], 0.0))
        b_n10 *= tl.exp(b_g1[:, None] - b_g0[None, :])
        b_n11 *= tl.exp(tl.where(below, b_g1[:, None] - b_g1[None, :], 0.0))
    NT = tl.cdiv(N, C) if chunks is None else tl.num_programs(0)
    p_n = scratch + (i_bh * NT + i_t) * C * R  # this chunk's two blocks
    blocks = o_r[:, None] * R + o_r[None, :]
    tl.store(p_n + blocks, tl.where(below, b_beta0[:, None] * b_n00, 0.0))
    tl.store(p_n + R * R + blocks, tl.where(below, b_beta1[:, None] * b_n11, 0.0))
    tl.debug_barrier()  # every row stored before any is read
    b_d0, b_d1 = tl.split(tl.permute(unit_lower_inverse(p_n, R), 1, 2, 0))  # D_0, D_1
    tl.debug_barrier()  # every row read before A (which may share the memory) is stored
    b_y10 = -dot(b_d1, dot(b_beta1[:, None] * b_n10, b_d0, None), None)  # −D_1 N_10 D_0

    if STORE_A:
        p_a = a + (i_bh * NT * C + i_t * C + o_r[:, None]) * C + o_r[None, :]
        tl.store(p_a, b_d0.to(a.dtype.element_ty))
        tl.store(p_a + R, tl.zeros([R, R], dtype=a.dtype.element_ty))
        tl.store(p_a + R * C, b_y10.to(a.dtype.element_ty))
        tl.store(p_a + R * C + R, b_d1.to(a.dtype.element_ty))
    b_d0, b_y10 = b_d0 * b_beta0[None, :], b_y10 * b_beta0[None, :]  # A diag(β), by blocks
    b_d1 = b_d1 * b_beta1[None, :]
    for i_v in range(V // BV):  # Ũ = A diag(β) V
        o_v = i_v * BV + tl.arange(0, BV)
        apply_inverse(v, u, b_d0, b_y10, b_d1, i_bh, N, end, V, o_t0, o_v, R)
    if g is not None:  # A diag(β exp(G))
        b_d0, b_y10 = b_d0 * tl.exp(b_g0)[None, :], b_y10 * tl.exp(b_g0)[None, :]
        b_d1 = b_d1 * tl.exp(b_g1)[None, :]
    for i_k in range(K // BK):  # W = A diag(β) K
        o_k = i_k * BK + tl.arange(0, BK)
        apply_inverse(k, w, b_d0, b_y10, b_d1, i_bh, N, end, K, o_t0, o_k, R)


@triton.jit
def chunk_span(chunks, i_t, N, C: tl.constexpr):
    """The tokens start ≤ t < end of chunk i_t: i_t·C and N, or with the packed work list
    `chunks` (`packing.chunk_indices`) its row i_t's: its sequence's start + j·C, and the
    sequence's end (the rows after the last chunk: N and N, no token)."""
    if chunks is None:
        start, end = i_t * C, N
    else:
        start, end = tl.load(chunks + i_t * 3 + 1), tl.load(chunks + i_t * 3 + 2)
    return start, end


@triton.jit
def walk_span(sequences, N, C: tl.constexpr):
    """A walk's sequence: (its first token, its end, the index of its first chunk among all,
    the number of chunks NT of the per-chunk tensors, the index of its states among the
    (B·H or S·H) states). Unpacked: the program's head walks all N tokens, NT = ⌈N / C⌉; with
    the packed work list `sequences` (S, 3), rows (start, end, first chunk), program
    (·, head, s) walks sequence s, and NT = N // C + S (`packing.chunk_indices`)."""
    i_bh = tl.program_id(1).to(tl.int64)
    if sequences is None:
        start, end, first, NT, i_state = 0, N, 0, tl.cdiv(N, C), i_bh
    else:
        i_s = tl.program_id(2).to(tl.int64)
        start, end = tl.load(sequences + i_s * 3), tl.load(sequences + i_s * 3 + 1)
        first = tl.load(sequences + i_s * 3 + 2)
        NT = N // C + tl.num_programs(2)
        i_state = i_s * tl.num_programs(1) + i_bh
    return start, end, first, NT, i_state


@triton.jit
def chunk_gates(g, i_bh, N, o_t, m_t):
    """The cumulative log-gates G_i = g_1 + … + g_i over the rows o_t of a chunk (float32)."""
    return tl.cumsum(log_gates(g, i_bh, N, o_t, m_t), 0)


@triton.jit
def log_gates(g, i_bh, N, o_t, m_t):
    """The log-gates of the rows o_t in float32: rows past N add 0 (a gate of 1), and a gate
    below −200 (−inf included: a reset) counts as −200, whose exponential is 0 in every dtype the
    kernels take, so that no difference of cumulative sums is −inf − (−inf). NaN stays NaN."""
    b_g = tl.load(g + i_bh * N + o_t, mask=m_t, other=0.0).to(tl.float32)
    return tl.where(b_g < -200.0, -200.0, b_g)


@triton.jit
def apply_inverse(x, y, b_d0, b_y10, b_d1, i_bh, N, end, D, o_t0, o_d, R):
    """Y = A diag(β) X on the columns o_d of X, Y `[B, H, N, D]`, with A diag(β) by blocks of R
    rows (float32; X in the inputs' dtype, `split_dot`): Y_0 = D_0 X_0, Y_1 = Y_10 X_0 + D_1 X_1,
    on the chunk's rows before `end`."""
    m_t0, m_t1 = o_t0 < end, o_t0 + R < end
    rows = (i_bh * N + o_t0[:, None]) * D + o_d[None, :]  # the first block's  [R, BD]
    b_x0 = tl.load(x + rows, mask=m_t0[:, None], other=0.0)
    b_x1 = tl.load(x + rows + R * D, mask=m_t1[:, None], other=0.0)
    b_y0 = split_dot(b_d0, b_x0)
    b_y1 = split_dot(b_y10, b_x0) + split_dot(b_d1, b_x1)
    tl.store(y + rows, b_y0.to(y.dtype.element_ty), mask=m_t0[:, None])
    tl.store(y + rows + R * D, b_y1.to(y.dtype.element_ty), mask=m_t1[:, None])


# a walk: 3 stages on sm_90 (2 took 1.18 times as long on an H200)
@tile_rule(widest=(16, 32, 16), num_stages=(3, 2))
@triton.jit(do_not_specialize=["N"])
def delta_states_kernel(
    k,  # [B, H, N, K]
    w,  # [B, H, N, K] W, from delta_prepare_kernel
    u_free,  # [B, H, N, V] Ũ, from delta_prepare_kernel
    u,  # [B, H, N, V] written: U = Ũ − W S_0ᵀ (u_free itself in the forward pass)
    g,  # [B, H, N] the log-gates, or None
    sequences,  # [S, 3] packed sequences' (start, end, first chunk), or None
    s0,  # [B, H, V, K] ([S, H, V, K] packed) the initial state, or None for zeros
    h,  # [B, H, NT, K, V] written: Sᵀ at every chunk's start
    s_final,  # [B, H, V, K] ([S, H, V, K] packed) written: the state after the last chunk
    N,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BV: tl.constexpr,
):
    """U = Ũ − W S_0ᵀ and S_C = S_0 + Uᵀ K over chunks t = 0, 1, …: BV rows of the state a
    program, held in registers (as Sᵀ `[K, BV]`) in float32. With gates,
    S_C = exp(G_C) S_0 + Uᵀ diag(exp(G_C − G)) K. Packed, a program walks one sequence."""
    i_v, i_bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    start, end, first, NT, i_state = walk_span(sequences, N, C)
    o_k = tl.arange(0, K)
    o_v = i_v * BV + tl.arange(0, BV)
    state = (i_state * V + o_v[None, :]) * K + o_k[:, None]  # Sᵀ in a (V, K) state  [K, BV]
    if s0 is None:
        b_s = tl.zeros([K, BV], dtype=tl.float32)
    else:
        b_s = tl.load(s0 + state).to(tl.float32)
    for i_t in range(tl.cdiv(end - start, C)):
        o_t = start + i_t * C + tl.arange(0, C)
        m_t = o_t < end
        p_h = h + ((i_bh * NT + first + i_t) * K + o_k[:, None]) * V + o_v[None, :]
        tl.store(p_h, b_s.to(p_h.dtype.element_ty))
        rows = (i_bh * N + o_t[:, None]) * V + o_v[None, :]  # [C, BV]
        b_w = tl.load(
            w + (i_bh * N + o_t[:, None]) * K + o_k[None, :], mask=m_t[:, None], other=0.0
        )
        b_u = tl.load(u_free + rows, mask=m_t[:, None], other=0.0).to(tl.float32)
        b_u = b_u - dot(b_w, b_s.to(b_w.dtype), None)  # U = Ũ − W S_0ᵀ
        tl.store(u + rows, b_u.to(u.dtype.element_ty), mask=m_t[:, None])
        b_k = tl.load(
            k + (i_bh * N + o_t[None, :]) * K + o_k[:, None], mask=m_t[None, :], other=0.0
        )
        if g is not None:  # exponents G_C − G_i ≤ 0 and G_C
            b_g = chunk_gates(g, i_bh, N, o_t, m_t)
            b_last = tl.sum(tl.where(tl.arange(0, C) == C - 1, b_g, 0.0))  # G_C
            b_u *= tl.exp(b_last - b_g)[:, None]
            b_s *= tl.exp(b_last)
        b_s = dot(b_k, b_u.to(b_k.dtype), b_s)  # S_Cᵀ = S_0ᵀ + Kᵀ U
    tl.store(s_final + state, b_s.to(s_final.dtype.element_ty))


@tile_rule(widest=(64, 64, 16))
@triton.jit(do_not_specialize=["N"])
def delta_output_kernel(
    q,  # [B, H, N, K]
    k,  # [B, H, N, K]
    u,  # [B, H, N, V] the corrections U, from delta_states_kernel
    h,  # [B, H, NT, K, V] Sᵀ at the chunks' starts
    g,  # [B, H, N] the log-gates, or None
    chunks,  # [NT, 3] packed sequences' chunks, or None
    o,  # [B, H, N, V] written
    N,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
):
    """O = Q S_0ᵀ + (Q Kᵀ ⊙ M) U: one chunk, BV value columns. With gates,
    O = diag(exp(G)) Q S_0ᵀ + (Q Kᵀ ⊙ Γ ⊙ M) U."""
    i_v, i_t, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    NT = tl.cdiv(N, C) if chunks is None else tl.num_programs(1)
    start, end = chunk_span(chunks, i_t, N, C)
    if chunks is not None:
        if start >= end:  # a program after the last chunk: nothing to do
            return
    o_t = start + tl.arange(0, C)
    m_t = o_t < end
    o_v = i_v * BV + tl.arange(0, BV)
    b_o = tl.zeros([C, BV], dtype=tl.float32)  # Q S_0ᵀ
    b_a = tl.zeros([C, C], dtype=tl.float32)  # q_i·k_j within the chunk
    for i_k in range(K // BK):
        o_k = i_k * BK + tl.arange(0, BK)
        p_q = q + (i_bh * N + o_t[:, None]) * K + o_k[None, :]  # [C, BK]
        p_k = k + (i_bh * N + o_t[None, :]) * K + o_k[:, None]  # kᵀ [BK, C]
        p_h = h + ((i_bh * NT + i_t) * K + o_k[:, None]) * V + o_v[None, :]  # S_0ᵀ [BK, BV]
        b_q = tl.load(p_q, mask=m_t[:, None], other=0.0)
        b_o = dot(b_q, tl.load(p_h), b_o)
        b_a = dot(b_q, tl.load(p_k, mask=m_t[None, :], other=0.0), b_a)
    causal = tl.arange(0, C)[:, None] >= tl.arange(0, C)[None, :]  # M: j ≤ i
    if g is not None:
        b_g = chunk_gates(g, i_bh, N, o_t, m_t)
        b_o *= tl.exp(b_g)[:, None]
        b_a *= tl.exp(tl.where(causal, b_g[:, None] - b_g[None, :], 0.0))  # ⊙ Γ
    p_u = u + (i_bh * N + o_t[:, None]) * V + o_v[None, :]
    b_u = tl.load(p_u, mask=m_t[:, None], other=0.0)
    b_o = dot(tl.where(causal, b_a, 0.0).to(b_u.dtype), b_u, b_o)
    p_o = o + (i_bh * N + o_t[:, None]) * V + o_v[None, :]
    tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=m_t[:, None])


@per_shape
def delta_plan(batch, heads, n, d_k, d_v, dtype, chunk_size, arch, gated=False, sequences=None):
    """The launches of the forward kernels, decided once per shape (and `gated`, the gated delta
    rule's, `gated_options`; `sequences`, the number S of packed sequences, or None):
    {kernel: (grid, launch options)}."""
    n_chunks, bh = chunk_count(n, chunk_size, sequences), batch * heads
    kernels = (delta_prepare_kernel, delta_states_kernel, delta_output_kernel)
    prepare, states, output = (tiles(kernel, arch, d_k, d_v, dtype) for kernel in kernels)
    plan = {
        delta_prepare_kernel: ((n_chunks, bh), prepare.launch_options),
        delta_states_kernel: walk_launch(states, d_v, bh, sequences),
        delta_output_kernel: ((d_v // output.block_v, n_chunks, bh), output.launch_options),
    }
    return gated_options(plan, arch, d_k, d_v, dtype) if gated else plan


def gated_options(plan, arch, d_k, d_v, dtype):
    """`plan` for the gated delta rule: ptxas left to choose the registers of each launch (the
    register budgets, `tiles.REGISTER_BUDGETS`, were fitted to the kernels without gates, and
    squeeze the gated kernels into spills: 19 of the 39 budgeted configurations on sm_89 and
    sm_90, none of which spills without its budget), then the gated kernels' own options where
    they spill without (`tiles.GATED_OPTIONS`)."""
    dtype_name = str(dtype).removeprefix("torch.")
    gated = {}
    for kernel, (grid, options) in plan.items():
        options = {name: x for name, x in options.items() if name != "maxnreg"}
        key = (kernel_name(kernel), arch, dtype_name, d_k, d_v)
        gated[kernel] = (grid, options | GATED_OPTIONS.get(key, {}))
    return gated


def walk_launch(tile, d_v, bh, sequences=None):
    """(grid, launch options) of a walk over the chunks, a program per head and value tile (the
    states kernels, which take the whole features: no BK), and per sequence of S = `sequences`
    packed ones unless None."""
    grid = (d_v // tile.block_v, bh) + (() if sequences is None else (sequences,))
    return grid, {"BV": tile.block_v} | tile.run_options


def chunk_count(n, chunk_size, sequences=None):
    """NT, the chunks of the per-chunk tensors and grids: ⌈N / C⌉, or for S = `sequences` packed
    sequences N // C + S, a bound known from shapes alone (`packing.chunk_indices`)."""
    return -(-n // chunk_size) if sequences is None else n // chunk_size + sequences


def delta_rule_fwd(q, k, v, beta, initial_state, *, chunk_size, arch, g=None, packing=None):
    """The delta rule's forward pass: (o `(B, H, N, V)`, the final state `(B, H, V, K)`), both in
    v's dtype. Inputs contiguous; `initial_state` `(B, H, V, K)` or None; `g` the log-gates
    `(B, H, N)` of the gated delta rule, or None. `packing`: None, or for S sequences packed in
    inputs `(1, H, N, ·)` the work lists (chunks `(N // C + S, 3)`, sequences `(S, 3)`) of
    `function.packed_work`; the states are then `(S, H, V, K)`."""
    batch, heads, n, d_k = q.shape
    d_v = v.shape[-1]
    chunks, sequences = packing or (None, None)
    count = None if packing is None else len(sequences)
    plan = delta_plan(batch, heads, n, d_k, d_v, v.dtype, chunk_size, arch, g is not None, count)
    options = {"chunk_size": chunk_size, "plan": plan, "packing": packing}
    _, w, u = delta_prepare(k, v, beta, g, arch=arch, **options)
    h, final = delta_states(k, w, u, u, g, initial_state, **options)
    del w
    o = torch.empty_like(v)
    grid, options = plan[delta_output_kernel]
    delta_output_kernel[grid](q, k, u, h, g, chunks, o, n, d_k, d_v, chunk_size, **options)
    return o, final


def delta_states(k, w, u_free, u, g, initial_state, *, chunk_size, plan, packing=None):
    """Launch `delta_states_kernel`, which writes U into `u` (which may be `u_free`, Ũ): (the
    states Sᵀ at the chunks' starts `(B, H, NT, K, V)`, the final state `(B, H, V, K)`, or
    `(S, H, V, K)` with `packing`), in u's dtype. `g`: the log-gates, or None."""
    batch, heads, n, d_k = k.shape
    d_v = u.shape[-1]
    sequences = None if packing is None else packing[1]
    count = None if packing is None else len(sequences)
    h = u.new_empty(batch, heads, chunk_count(n, chunk_size, count), d_k, d_v)
    final = u.new_empty(batch if packing is None else count, heads, d_v, d_k)
    grid, options = plan[delta_states_kernel]
    delta_states_kernel[grid](
        k, w, u_free, u, g, sequences, initial_state, h, final, n, d_k, d_v, chunk_size,
        **options,
    )  # fmt: skip
    return h, final


def delta_prepare(k, v, beta, g=None, *, chunk_size, arch, store_a=False, plan=None, packing=None):
    """Launch `delta_prepare_kernel`: (A `(B, H, NT·C, C)` in k's dtype when `store_a`, else
    None; W; Ũ) for every chunk, gated by the log-gates `g` unless None. `plan`: `delta_plan`'s
    for these inputs (made when None); `packing`: as `delta_rule_fwd` takes it."""
    batch, heads, n, d_k = k.shape
    d_v = v.shape[-1]
    chunks, sequences = packing or (None, None)
    count = None if packing is None else len(sequences)
    gated = g is not None
    plan = plan or delta_plan(batch, heads, n, d_k, d_v, v.dtype, chunk_size, arch, gated, count)
    rows = (batch, heads, chunk_count(n, chunk_size, count) * chunk_size)
    a = k.new_empty(*rows, chunk_size) if store_a else None
    if store_a and a.element_size() == 2:  # a 16-bit A has the bytes of the float32 blocks
        scratch = a.view(torch.float32)
    else:
        scratch = k.new_empty(*rows, chunk_size // 2, dtype=torch.float32)
    w, u = torch.empty_like(k), torch.empty_like(v)
    grid, options = plan[delta_prepare_kernel]
    delta_prepare_kernel[grid](
        k, v, beta, g, chunks, a, scratch, w, u, n, d_k, d_v, chunk_size, STORE_A=store_a,
        **options,
    )  # fmt: skip
    return a, w, u
