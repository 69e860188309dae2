"""The backward pass of causal linear attention in three Triton kernels, and their launcher.

Given the output gradient g_i = ∂L/∂o_i, with r_i the forward's reciprocal denominators and
a_i = −g_i·o_i (book, 02_linear_attention: the denominator is the numerator of a ones column),
the chain rule gives, for positions i and j in chunk t,

    dq_i = r_i (g_i S_tᵀ + a_i z_t + Σ_{tC ≤ j ≤ i} (g_i·v_j + a_i) k_j)
    dk_j = D_t v_j + y_t + Σ_{j ≤ i < tC + C} r_i (g_i·v_j + a_i) q_i
    dv_j = k_j D_t + Σ_{j ≤ i < tC + C} r_i (q_i·k_j) g_i

with the forward states S_t, z_t (the sums over the chunks before t) and the backward states
D_t = Σ r_i q_iᵀ g_i `(K, V)` and y_t = Σ r_i a_i q_i `(K,)`, sums over the chunks *after* t.
Without normalization r = 1 and a = 0. The first kernel walks the chunks backwards and writes
every D_t (and y_t); the other two compute dv, and dq with dk, for all chunks at once. The
forward states are recomputed by the forward's state kernel, so the forward pass saves nothing
but its inputs, its output and r: memory O(N(d + d_v)).

Precision, as in the forward pass: operands in the inputs' dtype, float32 accumulation. Two
scalings keep 16-bit operands in range. D_t is stored as the mean dh_t = D_t / W_t with the
weight W_t = Σ |r_i| over the same tokens (their count without normalization), so it stays within
the range of the products q_iᵀ g_i; consumers multiply by W_t in float32. And r_i, which falls like
1/i (1e-6 after 16k tokens, below float16's normal range), never enters a product by itself:
within a chunk it is split as r_i = m (r_i / m) with m = max |r| over the chunk, the ratio goes
into the 16-bit operand and m multiplies the float32 result.

Layout: q, k, dq, dk `(B, H, N, K)`; v, do, dv `(B, H, N, V)`; all contiguous.
"""

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from linattn_core.kernels.forward import chunk_states_fwd, dot, store_state
from linattn_core.kernels.tiles import tiles


@triton.jit(do_not_specialize=["N"])
def chunk_states_bwd_kernel(
    q,  # [B, H, N, K]
    do,  # [B, H, N, V]
    rden,  # [B, H, N] float32 r, read when NORMALIZE
    a,  # [B, H, N] float32 a_i = −g_i·o_i, read when NORMALIZE
    w,  # [B, H, NT + 1] float32 W_t, the weight of the tokens from boundary t on
    dh,  # [B, H, NT + 1, K, V] written: dh_t = D_t / W_t, the mean state at boundary t
    dy,  # [B, H, NT + 1, K] float32, written when NORMALIZE: y_t
    N,
    K,
    V,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    NORMALIZE: tl.constexpr,
):
    """D_t = D_{t+1} + Σ_{i in chunk t} r_i q_iᵀ g_i over chunks t = NT − 1, …, 0: one (BK, BV)
    tile a program, stored at every chunk boundary t = NT … 0; y likewise. (D_0 would be the
    gradient of an initial state.)"""
    i_k, i_v, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    NT = tl.cdiv(N, C)
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    b_d = tl.zeros([BK, BV], dtype=tl.float32)  # D_t, this program's tile
    b_y = tl.zeros([BK], dtype=tl.float32)  # y_t, this program's features
    for i_t in range(NT - 1, -1, -1):
        o_t = i_t * C + tl.arange(0, C)
        m_t = o_t < N
        row = i_bh * (NT + 1) + i_t + 1  # boundary t + 1, where chunk t ends
        store_state(dh, dy, b_d, b_y, row, tl.load(w + row), K, V, o_k, o_v, i_v, NORMALIZE)
        p_q = q + (i_bh * N + o_t[None, :]) * K + o_k[:, None]  # qᵀ [BK, C]
        p_do = do + (i_bh * N + o_t[:, None]) * V + o_v[None, :]  # [C, BV]
        b_q = tl.load(p_q, mask=m_t[None, :], other=0.0)
        b_do = tl.load(p_do, mask=m_t[:, None], other=0.0)
        if NORMALIZE:
            b_rden = tl.load(rden + i_bh * N + o_t, mask=m_t, other=0.0)  # [C]
            b_a = tl.load(a + i_bh * N + o_t, mask=m_t, other=0.0)
            b_y += tl.sum(b_q.to(tl.float32) * (b_rden * b_a)[None, :], axis=1)
            b_m = tl.maximum(tl.max(tl.abs(b_rden)), 1e-30)  # r = m (r / m), |r / m| ≤ 1
            b_qr = (b_q * (b_rden / b_m)[None, :]).to(b_q.dtype)
            b_d += b_m * dot(b_qr, b_do, None)
        else:
            b_d = dot(b_q, b_do, b_d)
    row = i_bh * (NT + 1)
    store_state(dh, dy, b_d, b_y, row, tl.load(w + row), K, V, o_k, o_v, i_v, NORMALIZE)


@triton.jit(do_not_specialize=["N"])
def chunk_dv_bwd_kernel(
    q,  # [B, H, N, K]
    k,  # [B, H, N, K]
    do,  # [B, H, N, V]
    dh,  # [B, H, NT + 1, K, V] mean backward states, from chunk_states_bwd_kernel
    rden,  # [B, H, N] float32 r, read when NORMALIZE
    w,  # [B, H, NT + 1] float32 W_t
    dv,  # [B, H, N, V] written
    N,
    K,
    V,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    NORMALIZE: tl.constexpr,
):
    """dv_j = W_t k_j dh_t + Σ_{j ≤ i in the chunk} r_i (q_i·k_j) g_i: one chunk, BV columns."""
    i_v, i_t, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    NT = tl.cdiv(N, C)
    o_t = i_t * C + tl.arange(0, C)
    m_t = o_t < N
    o_v = i_v * BV + tl.arange(0, BV)
    b_dv = tl.zeros([C, BV], dtype=tl.float32)  # k_j dh_t
    b_s = tl.zeros([C, C], dtype=tl.float32)  # [j, i]: k_j·q_i within the chunk
    for i_k in range(K // BK):
        o_k = i_k * BK + tl.arange(0, BK)
        p_k = k + (i_bh * N + o_t[:, None]) * K + o_k[None, :]  # [C, BK]
        p_q = q + (i_bh * N + o_t[None, :]) * K + o_k[:, None]  # qᵀ [BK, C]
        p_dh = (
            dh + (((i_bh * (NT + 1) + i_t + 1) * K + o_k[:, None]) * V) + o_v[None, :]
        )  # [BK, BV]
        b_k = tl.load(p_k, mask=m_t[:, None], other=0.0)
        b_q = tl.load(p_q, mask=m_t[None, :], other=0.0)
        b_s = dot(b_k, b_q, b_s)
        b_dv = dot(b_k, tl.load(p_dh), b_dv)
    b_dv = b_dv * tl.load(w + i_bh * (NT + 1) + i_t + 1)
    causal = tl.arange(0, C)[:, None] <= tl.arange(0, C)[None, :]  # query i at or after key j
    b_s = tl.where(causal, b_s, 0.0)
    p_do = do + (i_bh * N + o_t[:, None]) * V + o_v[None, :]
    b_do = tl.load(p_do, mask=m_t[:, None], other=0.0)
    if NORMALIZE:
        b_rden = tl.load(rden + i_bh * N + o_t, mask=m_t, other=0.0)
        b_m = tl.maximum(tl.max(tl.abs(b_rden)), 1e-30)
        b_sr = (b_s * (b_rden / b_m)[None, :]).to(b_do.dtype)
        b_dv += b_m * dot(b_sr, b_do, None)
    else:
        b_dv = dot(b_s.to(b_do.dtype), b_do, b_dv)
    p_dv = dv + (i_bh * N + o_t[:, None]) * V + o_v[None, :]
    tl.store(p_dv, b_dv.to(p_dv.dtype.element_ty), mask=m_t[:, None])


@triton.jit(do_not_specialize=["N"])
def chunk_dqk_bwd_kernel(
    q,  # [B, H, N, K]
    k,  # [B, H, N, K]
    v,  # [B, H, N, V]
    do,  # [B, H, N, V]
    h,  # [B, H, NT + 1, K, V] mean forward states
    z,  # [B, H, NT + 1, K] float32 forward key sums, read when NORMALIZE
    dh,  # [B, H, NT + 1, K, V] mean backward states
    dy,  # [B, H, NT + 1, K] float32 y_t, read when NORMALIZE
    rden,  # [B, H, N] float32 r, read when NORMALIZE
    a,  # [B, H, N] float32 a_i = −g_i·o_i, read when NORMALIZE
    w,  # [B, H, NT + 1] float32 W_t
    dq,  # [B, H, N, K] written
    dk,  # [B, H, N, K] written
    N,
    K,
    V,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    NORMALIZE: tl.constexpr,
):
    """dq and dk of one chunk, BK feature columns: with M_ij = g_i·v_j + a_i for j ≤ i,
    dq = r (tC · g h_tᵀ + a z_tᵀ + M k) and dk = W_t · v dh_tᵀ + y_t + (r M)ᵀ q."""
    i_k, i_t, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    NT = tl.cdiv(N, C)
    o_t = i_t * C + tl.arange(0, C)
    m_t = o_t < N
    o_k = i_k * BK + tl.arange(0, BK)
    b_dq = tl.zeros([C, BK], dtype=tl.float32)  # g h_tᵀ
    b_dk = tl.zeros([C, BK], dtype=tl.float32)  # v dh_tᵀ
    b_ds = tl.zeros([C, C], dtype=tl.float32)  # [i, j]: g_i·v_j within the chunk
    for i_v in range(V // BV):
        o_v = i_v * BV + tl.arange(0, BV)
        p_v = v + (i_bh * N + o_t[:, None]) * V + o_v[None, :]  # [C, BV]
        p_do = do + (i_bh * N + o_t[:, None]) * V + o_v[None, :]  # [C, BV]
        p_h = h + ((i_bh * (NT + 1) + i_t) * K + o_k[None, :]) * V + o_v[:, None]  # h_tᵀ [BV, BK]
        p_dh = dh + ((i_bh * (NT + 1) + i_t + 1) * K + o_k[None, :]) * V + o_v[:, None]  # [BV, BK]
        b_v = tl.load(p_v, mask=m_t[:, None], other=0.0)
        b_do = tl.load(p_do, mask=m_t[:, None], other=0.0)
        b_ds = dot(b_do, tl.trans(b_v), b_ds)
        b_dq = dot(b_do, tl.load(p_h), b_dq)
        b_dk = dot(b_v, tl.load(p_dh), b_dk)
    b_dq = b_dq * (i_t * C)  # h_t is the mean over the tC tokens before the chunk
    b_dk = b_dk * tl.load(w + i_bh * (NT + 1) + i_t + 1)  # the mean's weight W_{t+1}
    p_q = q + (i_bh * N + o_t[:, None]) * K + o_k[None, :]  # [C, BK]
    p_k = k + (i_bh * N + o_t[:, None]) * K + o_k[None, :]  # [C, BK]
    b_q = tl.load(p_q, mask=m_t[:, None], other=0.0)
    b_k = tl.load(p_k, mask=m_t[:, None], other=0.0)
    causal = tl.arange(0, C)[:, None] >= tl.arange(0, C)[None, :]  # key j at or before query i
    if NORMALIZE:
        b_rden = tl.load(rden + i_bh * N + o_t, mask=m_t, other=0.0)  # [C]
        b_a = tl.load(a + i_bh * N + o_t, mask=m_t, other=0.0)
        b_z = tl.load(z + (i_bh * (NT + 1) + i_t) * K + o_k)  # [BK]
        b_y = tl.load(dy + (i_bh * (NT + 1) + i_t + 1) * K + o_k)
        b_ds = tl.where(causal, b_ds + b_a[:, None], 0.0)  # M
        b_dq += b_a[:, None] * b_z[None, :]
        b_dq = dot(b_ds.to(b_k.dtype), b_k, b_dq)
        b_dq = b_dq * b_rden[:, None]
        b_m = tl.maximum(tl.max(tl.abs(b_rden)), 1e-30)  # r = m (r / m), |r / m| ≤ 1
        b_dsr = tl.trans(b_ds * (b_rden / b_m)[:, None]).to(b_q.dtype)
        b_dk += b_m * dot(b_dsr, b_q, None) + b_y[None, :]
    else:
        b_ds = tl.where(causal, b_ds, 0.0)
        b_dq = dot(b_ds.to(b_k.dtype), b_k, b_dq)
        b_dk = dot(tl.trans(b_ds).to(b_q.dtype), b_q, b_dk)
    p_dq = dq + (i_bh * N + o_t[:, None]) * K + o_k[None, :]
    p_dk = dk + (i_bh * N + o_t[:, None]) * K + o_k[None, :]
    tl.store(p_dq, b_dq.to(p_dq.dtype.element_ty), mask=m_t[:, None])
    tl.store(p_dk, b_dk.to(p_dk.dtype.element_ty), mask=m_t[:, None])


def state_weights(rden, n, *, chunk_size):
    """W_t `(B, H, NT + 1)` float32 at every chunk boundary t: Σ |r_i| over the tokens i ≥ tC
    (their count when r is None, `(NT + 1,)`), the weights of the backward states' means."""
    n_chunks = triton.cdiv(n, chunk_size)
    if rden is None:
        return (n - chunk_size * torch.arange(n_chunks + 1)).clamp(min=0).float()
    padded = F.pad(rden.abs(), (0, n_chunks * chunk_size - n))  # (B, H, NT·C)
    per_chunk = padded.unflatten(-1, (n_chunks, chunk_size)).sum(dim=-1)  # (B, H, NT)
    from_boundary = per_chunk.flip(-1).cumsum(dim=-1).flip(-1)  # Σ over chunks ≥ t
    return F.pad(from_boundary, (0, 1))  # nothing after the last boundary


def chunk_linear_attention_bwd(q, k, v, o, rden, do, *, chunk_size, arch):
    """Gradients (dq, dk, dv) of causal linear attention for the output gradient `do`.

    `o` and `rden` are the forward's output and r (both None without normalization); every tensor
    contiguous `(B, H, N, ·)`; `arch` selects the tiles (`tiles.py`).
    """
    batch, heads, n, d_k = q.shape
    d_v = v.shape[-1]
    n_chunks = triton.cdiv(n, chunk_size)
    normalize = rden is not None
    h, z = chunk_states_fwd(k, v, normalize=normalize, chunk_size=chunk_size, arch=arch)
    a = -(do.float() * o.float()).sum(dim=-1) if normalize else None  # (B, H, N)
    w = state_weights(rden, n, chunk_size=chunk_size)
    w = w.to(q.device).expand(batch, heads, n_chunks + 1).contiguous()  # (B, H, NT + 1)

    tile = tiles("states_bwd", arch, d_k, d_v, v.dtype)
    dh = torch.empty_like(h)
    dy = torch.empty_like(z) if normalize else None
    grid = (d_k // tile.block_k, d_v // tile.block_v, batch * heads)
    chunk_states_bwd_kernel[grid](
        q, do, rden, a, w, dh, dy, n, d_k, d_v, chunk_size,
        NORMALIZE=normalize, **tile.launch_options,
    )  # fmt: skip

    tile = tiles("dv", arch, d_k, d_v, v.dtype)
    dv = torch.empty_like(v)
    grid = (d_v // tile.block_v, n_chunks, batch * heads)
    chunk_dv_bwd_kernel[grid](
        q, k, do, dh, rden, w, dv, n, d_k, d_v, chunk_size,
        NORMALIZE=normalize, **tile.launch_options,
    )  # fmt: skip

    tile = tiles("dqk", arch, d_k, d_v, v.dtype)
    dq, dk = torch.empty_like(q), torch.empty_like(k)
    grid = (d_k // tile.block_k, n_chunks, batch * heads)
    chunk_dqk_bwd_kernel[grid](
        q, k, v, do, h, z, dh, dy, rden, a, w, dq, dk, n, d_k, d_v, chunk_size,
        NORMALIZE=normalize, **tile.launch_options,
    )  # fmt: skip
    return dq, dk, dv
