"""The forward pass of the delta rule (DeltaNet) in three Triton kernels, and their launcher.

For a chunk of C = 64 tokens with keys K, values V, queries Q, rates β and the state S_0 at its
start (book, chapters/06_delta_rule, theorem "One chunk of the delta rule"):

    A = (I + N)⁻¹,  N = diag(β) (K Kᵀ ⊙ M⁻),      W = A diag(β) K,   Ũ = A diag(β) V,
    U = Ũ − W S_0ᵀ,    O = Q S_0ᵀ + (Q Kᵀ ⊙ M) U,    S_C = S_0 + Uᵀ K.

`delta_prepare_kernel` computes A, W and Ũ for every chunk at once: they do not depend on the
state. `delta_states_kernel` walks the chunks in order, writing the state at every chunk boundary
and the corrections U. `delta_output_kernel` computes every chunk's outputs from those.

The triangular inverse. A is the inverse of a unit lower triangular 64 × 64 matrix, computed in
the program's registers by the block recursion the chapter proves, on two blocks of 32 rows:

    A = [[D_0, 0], [Y_10, D_1]],   D_r = (I + N_rr)⁻¹,   Y_10 = −D_1 N_10 D_0,

with each D_r by forward substitution, one row at a time (`unit_lower_inverse`): row i is
e_i − Σ_{j<i} N_ij (row j). Substitution is componentwise backward stable, and in DeltaNet's
regime — unit keys, β ∈ (0, 1] — the chapter measures ‖A‖ near 2 (and proves ‖A‖_∞ ≤ 2 for a
repeated key), so the inverse and its products stay in range. (The Neumann form
(I − N)(I + N²)(I + N⁴)…, all matrix products, would be faster on tensor cores, but its
factors hold binomial coefficients that must cancel: 5e17 for a repeated key at C = 64, which
leaves float32 an error of 4e9.) A is computed in float32 whatever the inputs' dtype; W, Ũ and U
are stored in the inputs' dtype, the operand type of the products that read them, and the
states in float32: the walk adds to them chunk after chunk.

Layout: q, k `(B, H, N, K)`, v `(B, H, N, V)`, β `(B, H, N)`, states `(B, H, ·, V, K)` as in
`linattn_core.delta`, all contiguous; K, V multiples of the tiles.
"""

import torch
import triton
import triton.language as tl

from linattn_core.kernels.forward import dot
from linattn_core.kernels.tiles import tiles

CHUNK = 64  # tokens per chunk: two blocks of 32 rows in the triangular inverse


@triton.jit
def unit_lower_inverse(b_n, R: tl.constexpr):
    """(I + N)⁻¹ for a strictly lower triangular R × R block N, by forward substitution."""
    o_r = tl.arange(0, R)
    b_y = tl.where(o_r[:, None] == o_r[None, :], 1.0, 0.0)  # rows i, i + 1, … still e_i
    for i in range(1, R):
        n_i = tl.sum(tl.where(o_r[:, None] == i, b_n, 0.0), axis=0)  # row i of N  [R]
        y_i = tl.sum(n_i[:, None] * b_y, axis=0)  # Σ_{j<i} N_ij (row j of the inverse)
        b_y = tl.where(o_r[:, None] == i, b_y - y_i[None, :], b_y)
    return b_y


@triton.jit(do_not_specialize=["N"])
def delta_prepare_kernel(
    k,  # [B, H, N, K]
    v,  # [B, H, N, V]
    beta,  # [B, H, N]
    a,  # [B, H, NT·64, 64] float32 written: A of each chunk, its rows
    w,  # [B, H, N, K] written: W = A diag(β) K
    u,  # [B, H, N, V] written: Ũ = A diag(β) V
    N,
    K,
    V,
    BK: tl.constexpr,
    BV: tl.constexpr,
):
    """A = (I + diag(β)(K Kᵀ ⊙ M⁻))⁻¹, W = A diag(β) K, Ũ = A diag(β) V: one chunk a program."""
    i_t, i_bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    o_r = tl.arange(0, 32)
    o_t0, o_t1 = i_t * 64 + o_r, i_t * 64 + 32 + o_r  # the chunk's two blocks of rows
    m_t0, m_t1 = o_t0 < N, o_t1 < N
    b_beta0 = tl.load(beta + i_bh * N + o_t0, mask=m_t0, other=0.0).to(tl.float32)  # [32]
    b_beta1 = tl.load(beta + i_bh * N + o_t1, mask=m_t1, other=0.0).to(tl.float32)
    b_n00 = tl.zeros([32, 32], dtype=tl.float32)  # K_r K_sᵀ, the three blocks on or below
    b_n10 = tl.zeros([32, 32], dtype=tl.float32)  # the diagonal
    b_n11 = tl.zeros([32, 32], dtype=tl.float32)
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
    b_d0 = unit_lower_inverse(tl.where(below, b_beta0[:, None] * b_n00, 0.0), 32)
    b_d1 = unit_lower_inverse(tl.where(below, b_beta1[:, None] * b_n11, 0.0), 32)
    b_y10 = -dot(b_d1, dot(b_beta1[:, None] * b_n10, b_d0, None), None)  # −D_1 N_10 D_0

    p_a = a + (i_bh * tl.cdiv(N, 64) * 64 + i_t * 64 + o_r[:, None]) * 64 + o_r[None, :]
    tl.store(p_a, b_d0)
    tl.store(p_a + 32, tl.zeros([32, 32], dtype=tl.float32))
    tl.store(p_a + 32 * 64, b_y10)
    tl.store(p_a + 32 * 64 + 32, b_d1)

    for i_k in range(K // BK):  # W = A diag(β) K
        o_k = i_k * BK + tl.arange(0, BK)
        apply_inverse(k, w, b_d0, b_y10, b_d1, b_beta0, b_beta1, i_bh, N, K, o_t0, o_k)
    for i_v in range(V // BV):  # Ũ = A diag(β) V
        o_v = i_v * BV + tl.arange(0, BV)
        apply_inverse(v, u, b_d0, b_y10, b_d1, b_beta0, b_beta1, i_bh, N, V, o_t0, o_v)


@triton.jit
def apply_inverse(x, y, b_d0, b_y10, b_d1, b_beta0, b_beta1, i_bh, N, D, o_t0, o_d):
    """Y = A diag(β) X on the columns o_d of X, Y `[B, H, N, D]`, with A by blocks of 32 rows:
    Y_0 = D_0 (β X)_0 and Y_1 = Y_10 (β X)_0 + D_1 (β X)_1."""
    m_t0, m_t1 = o_t0 < N, o_t0 + 32 < N
    rows = (i_bh * N + o_t0[:, None]) * D + o_d[None, :]  # the first block's  [32, BD]
    b_x0 = b_beta0[:, None] * tl.load(x + rows, mask=m_t0[:, None], other=0.0).to(tl.float32)
    b_x1 = tl.load(x + rows + 32 * D, mask=m_t1[:, None], other=0.0).to(tl.float32)
    b_y0 = dot(b_d0, b_x0, None)
    b_y1 = dot(b_d1, b_beta1[:, None] * b_x1, dot(b_y10, b_x0, None))
    tl.store(y + rows, b_y0.to(y.dtype.element_ty), mask=m_t0[:, None])
    tl.store(y + rows + 32 * D, b_y1.to(y.dtype.element_ty), mask=m_t1[:, None])


@triton.jit(do_not_specialize=["N"])
def delta_states_kernel(
    k,  # [B, H, N, K]
    w,  # [B, H, N, K] W, from delta_prepare_kernel
    u_free,  # [B, H, N, V] Ũ, from delta_prepare_kernel
    u,  # [B, H, N, V] written: the corrections U = Ũ − W S_0ᵀ
    s0,  # [B, H, V, K] the initial state, or None for zeros
    s,  # [B, H, NT + 1, V, K] float32 written: the state at every chunk boundary
    N,
    K,
    V,
    BK: tl.constexpr,
    BV: tl.constexpr,
):
    """U = Ũ − W S_0ᵀ and S_C = S_0 + Uᵀ K over chunks t = 0, 1, …: BV rows of the state a
    program. The state lives in `s` itself, in float32: the program reads S_0 back from the
    boundary it wrote and writes S_C to the next, BK columns at a time, so that its registers
    hold tiles rather than whole rows; a barrier makes each new state visible to all the
    program's threads before the next chunk reads it."""
    i_v, i_bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    NT = tl.cdiv(N, 64)
    o_v = i_v * BV + tl.arange(0, BV)
    p_s = s + (i_bh * (NT + 1) * V + o_v[:, None]) * K  # row starts at boundary 0  [BV, 1]
    for i_k in range(K // BK):  # boundary 0: S_0
        o_k = i_k * BK + tl.arange(0, BK)
        if s0 is None:
            b_s = tl.zeros([BV, BK], dtype=tl.float32)
        else:
            b_s = tl.load(s0 + (i_bh * V + o_v[:, None]) * K + o_k[None, :]).to(tl.float32)
        tl.store(p_s + o_k[None, :], b_s)
    tl.debug_barrier()
    for i_t in range(NT):
        o_t = i_t * 64 + tl.arange(0, 64)
        m_t = o_t < N
        rows = (i_bh * N + o_t[:, None]) * V + o_v[None, :]  # [64, BV]
        b_u = tl.load(u_free + rows, mask=m_t[:, None], other=0.0).to(tl.float32)
        for i_k in range(K // BK):  # U = Ũ − W S_0ᵀ
            o_k = i_k * BK + tl.arange(0, BK)
            p_w = w + (i_bh * N + o_t[:, None]) * K + o_k[None, :]
            b_w = tl.load(p_w, mask=m_t[:, None], other=0.0)
            b_s = tl.load(p_s + i_t * V * K + o_k[None, :])  # S_0  [BV, BK]
            b_u -= dot(b_w, tl.trans(b_s.to(b_w.dtype)), None)
        tl.store(u + rows, b_u.to(u.dtype.element_ty), mask=m_t[:, None])
        for i_k in range(K // BK):  # S_C = S_0 + Uᵀ K
            o_k = i_k * BK + tl.arange(0, BK)
            p_k = k + (i_bh * N + o_t[:, None]) * K + o_k[None, :]
            b_k = tl.load(p_k, mask=m_t[:, None], other=0.0)
            b_s = tl.load(p_s + i_t * V * K + o_k[None, :])
            b_s = dot(tl.trans(b_u.to(b_k.dtype)), b_k, b_s)
            tl.store(p_s + (i_t + 1) * V * K + o_k[None, :], b_s)
        tl.debug_barrier()


@triton.jit(do_not_specialize=["N"])
def delta_output_kernel(
    q,  # [B, H, N, K]
    k,  # [B, H, N, K]
    u,  # [B, H, N, V] the corrections U, from delta_states_kernel
    s,  # [B, H, NT + 1, V, K] float32 the states at the chunk boundaries
    o,  # [B, H, N, V] written
    N,
    K,
    V,
    BK: tl.constexpr,
    BV: tl.constexpr,
):
    """O = Q S_0ᵀ + (Q Kᵀ ⊙ M) U: one chunk, BV value columns."""
    i_v, i_t, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    NT = tl.cdiv(N, 64)
    o_t = i_t * 64 + tl.arange(0, 64)
    m_t = o_t < N
    o_v = i_v * BV + tl.arange(0, BV)
    b_o = tl.zeros([64, BV], dtype=tl.float32)  # Q S_0ᵀ
    b_a = tl.zeros([64, 64], dtype=tl.float32)  # q_i·k_j within the chunk
    for i_k in range(K // BK):
        o_k = i_k * BK + tl.arange(0, BK)
        p_q = q + (i_bh * N + o_t[:, None]) * K + o_k[None, :]  # [64, BK]
        p_k = k + (i_bh * N + o_t[None, :]) * K + o_k[:, None]  # kᵀ [BK, 64]
        p_s = s + ((i_bh * (NT + 1) + i_t) * V + o_v[None, :]) * K + o_k[:, None]  # S_0ᵀ [BK, BV]
        b_q = tl.load(p_q, mask=m_t[:, None], other=0.0)
        b_o = dot(b_q, tl.load(p_s).to(b_q.dtype), b_o)
        b_a = dot(b_q, tl.load(p_k, mask=m_t[None, :], other=0.0), b_a)
    causal = tl.arange(0, 64)[:, None] >= tl.arange(0, 64)[None, :]  # M: j ≤ i
    p_u = u + (i_bh * N + o_t[:, None]) * V + o_v[None, :]
    b_u = tl.load(p_u, mask=m_t[:, None], other=0.0)
    b_o = dot(tl.where(causal, b_a, 0.0).to(b_u.dtype), b_u, b_o)
    p_o = o + (i_bh * N + o_t[:, None]) * V + o_v[None, :]
    tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=m_t[:, None])


def delta_rule_fwd(q, k, v, beta, initial_state, *, arch):
    """The delta rule's forward pass: (o `(B, H, N, V)`, the states at the chunk boundaries
    `(B, H, NT + 1, V, K)` float32, the last one the final state). Inputs contiguous;
    `initial_state` `(B, H, V, K)` or None."""
    batch, heads, n, d_k = q.shape
    d_v = v.shape[-1]
    n_chunks = triton.cdiv(n, CHUNK)
    _, w, u_free = delta_prepare(k, v, beta, arch=arch)
    u, s = delta_states(k, w, u_free, initial_state, arch=arch)
    tile = tiles("delta_output", arch, d_k, d_v, v.dtype)
    o = torch.empty_like(v)
    grid = (d_v // tile.block_v, n_chunks, batch * heads)
    delta_output_kernel[grid](q, k, u, s, o, n, d_k, d_v, **tile.launch_options)
    return o, s


def delta_states(k, w, u_free, initial_state, *, arch):
    """Launch `delta_states_kernel`: (U `(B, H, N, V)`, the states `(B, H, NT + 1, V, K)`
    float32, the last one the final state)."""
    batch, heads, n, d_k = k.shape
    d_v = u_free.shape[-1]
    tile = tiles("delta_states", arch, d_k, d_v, u_free.dtype)
    u = torch.empty_like(u_free)
    s = k.new_empty(batch, heads, triton.cdiv(n, CHUNK) + 1, d_v, d_k, dtype=torch.float32)
    grid = (d_v // tile.block_v, batch * heads)
    delta_states_kernel[grid](k, w, u_free, u, initial_state, s, n, d_k, d_v, **tile.launch_options)
    return u, s


def delta_prepare(k, v, beta, *, arch):
    """Launch `delta_prepare_kernel`: (A `(B, H, NT·64, 64)` float32, W, Ũ) for every chunk."""
    batch, heads, n, d_k = k.shape
    d_v = v.shape[-1]
    n_chunks = triton.cdiv(n, CHUNK)
    tile = tiles("delta_prepare", arch, d_k, d_v, v.dtype)
    a = k.new_empty(batch, heads, n_chunks * CHUNK, CHUNK, dtype=torch.float32)
    w, u = torch.empty_like(k), torch.empty_like(v)
    grid = (n_chunks, batch * heads)
    delta_prepare_kernel[grid](k, v, beta, a, w, u, n, d_k, d_v, **tile.launch_options)
    return a, w, u
