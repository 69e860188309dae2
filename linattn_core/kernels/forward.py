"""The forward pass of causal linear attention in two Triton kernels, and their launcher.

With chunks of C tokens, chunk t holding positions tC … tC + C − 1, and the state of the tokens
before it, S_t = Σ_{j < tC} k_jᵀ v_j `(K, V)` and z_t = Σ_{j < tC} k_j `(K,)`, every output row
of chunk t is (book, chapters/02_linear_attention, the chunked form)

    o_i = r_i (q_i S_t + Σ_{tC ≤ j ≤ i} (q_i·k_j) v_j),
    r_i = 1 / (q_i·z_t + Σ_{tC ≤ j ≤ i} q_i·k_j + ε)

(r_i = 1 without normalization). The first kernel walks the chunks in order and writes every
S_t; the second computes all chunks' outputs at once, one program per chunk, from those states.
That split is flash-linear-attention's (`chunk_fwd_kernel_h`, `chunk_fwd_kernel_o`): the walk
does one small matrix product per chunk, and the heavy part runs in parallel over the sequence.

Precision: the matrix products take 16-bit inputs as they are, on their own tensor cores, and
float32 inputs as three TF32 products (`dot`); all accumulate in float32. The states are stored
in the inputs' dtype as **means**, h_t = S_t / (tC): a sum over 100k tokens can leave float16's
range, a mean of products of representable numbers cannot, and the consumer multiplies the
float32 product q_i h_t back by tC. The normalizer z_t and r stay float32.

Layout: q, k `(B, H, N, K)` and v `(B, H, N, V)` contiguous; K, V multiples of the tiles BK, BV.
"""

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from linattn_core.kernels.tiles import tiles


@triton.jit
def dot(a, b, acc):
    """a @ b (+ acc), accumulated in float32. 16-bit operands multiply on their own tensor cores;
    float32 operands as three TF32 products (tf32x3: a = a_hi + a_lo, a_hi b_hi + a_hi b_lo +
    a_lo b_hi), which keeps nearly float32's precision on tensor cores, where one TF32 product
    (the GPU default) would round both operands to 11 bits."""
    if a.dtype == tl.float32:
        return tl.dot(a, b, acc, input_precision="tf32x3")
    return tl.dot(a, b, acc)


@triton.jit(do_not_specialize=["N"])
def chunk_states_fwd_kernel(
    k,  # [B, H, N, K]
    v,  # [B, H, N, V]
    h,  # [B, H, NT + 1, K, V] written: h_t = S_t / min(tC, N), the mean state at boundary t
    z,  # [B, H, NT + 1, K] float32, written when NORMALIZE: z_t = Σ_{j < tC} k_j
    N,
    K,
    V,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    NORMALIZE: tl.constexpr,
):
    """S_{t+1} = S_t + k_tᵀ v_t over chunks t = 0, 1, …: one (BK, BV) tile of the state a program,
    stored at every chunk boundary t = 0 … NT (the last one is the state of the whole sequence)."""
    i_k, i_v, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    NT = tl.cdiv(N, C)
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    b_s = tl.zeros([BK, BV], dtype=tl.float32)  # S_t, this program's tile
    b_z = tl.zeros([BK], dtype=tl.float32)  # z_t, this program's features
    for i_t in range(NT):
        o_t = i_t * C + tl.arange(0, C)  # the chunk's positions
        m_t = o_t < N  # the last chunk may be short
        row = i_bh * (NT + 1) + i_t
        store_state(h, z, b_s, b_z, row, i_t * C, K, V, o_k, o_v, i_v, NORMALIZE)
        p_k = k + (i_bh * N + o_t[None, :]) * K + o_k[:, None]  # kᵀ [BK, C]
        p_v = v + (i_bh * N + o_t[:, None]) * V + o_v[None, :]  # [C, BV]
        b_k = tl.load(p_k, mask=m_t[None, :], other=0.0)
        b_v = tl.load(p_v, mask=m_t[:, None], other=0.0)
        if NORMALIZE:
            b_z += tl.sum(b_k.to(tl.float32), axis=1)
        b_s = dot(b_k, b_v, b_s)
    store_state(h, z, b_s, b_z, i_bh * (NT + 1) + NT, N, K, V, o_k, o_v, i_v, NORMALIZE)


@triton.jit
def store_state(h, z, b_s, b_z, row, weight, K, V, o_k, o_v, i_v, NORMALIZE: tl.constexpr):
    """Store one program's tiles of a state at one chunk boundary, row `row` of h and z: S as
    its mean S / weight in h's dtype (a mean of representable products cannot overflow), z as it
    is, in float32, by the programs of the first value tile (z does not depend on it)."""
    p_h = h + (row * K + o_k[:, None]) * V + o_v[None, :]  # [BK, BV]
    tl.store(p_h, (b_s / tl.maximum(weight, 1e-30)).to(p_h.dtype.element_ty))
    if NORMALIZE:
        if i_v == 0:
            tl.store(z + row * K + o_k, b_z)


@triton.jit(do_not_specialize=["N"])
def chunk_output_fwd_kernel(
    q,  # [B, H, N, K]
    k,  # [B, H, N, K]
    v,  # [B, H, N, V]
    h,  # [B, H, NT + 1, K, V] mean states, from chunk_states_fwd_kernel
    z,  # [B, H, NT + 1, K] float32 key sums, read when NORMALIZE
    o,  # [B, H, N, V] written
    rden,  # [B, H, N] float32, written when NORMALIZE: r_i
    N,
    eps,
    K,
    V,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    NORMALIZE: tl.constexpr,
):
    """o_i = r_i (tC · q_i h_t + Σ_{tC ≤ j ≤ i} (q_i·k_j) v_j): one chunk, BV value columns."""
    i_v, i_t, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    NT = tl.cdiv(N, C)
    o_t = i_t * C + tl.arange(0, C)
    m_t = o_t < N
    o_v = i_v * BV + tl.arange(0, BV)
    b_o = tl.zeros([C, BV], dtype=tl.float32)  # q_i h_t
    b_s = tl.zeros([C, C], dtype=tl.float32)  # q_i·k_j within the chunk
    b_qz = tl.zeros([C], dtype=tl.float32)  # q_i·z_t
    for i_k in range(K // BK):
        o_k = i_k * BK + tl.arange(0, BK)
        p_q = q + (i_bh * N + o_t[:, None]) * K + o_k[None, :]  # [C, BK]
        p_k = k + (i_bh * N + o_t[None, :]) * K + o_k[:, None]  # kᵀ [BK, C]
        p_h = h + ((i_bh * (NT + 1) + i_t) * K + o_k[:, None]) * V + o_v[None, :]  # [BK, BV]
        b_q = tl.load(p_q, mask=m_t[:, None], other=0.0)
        b_k = tl.load(p_k, mask=m_t[None, :], other=0.0)
        b_o = dot(b_q, tl.load(p_h), b_o)
        b_s = dot(b_q, b_k, b_s)
        if NORMALIZE:
            b_z = tl.load(z + (i_bh * (NT + 1) + i_t) * K + o_k)  # [BK]
            b_qz += tl.sum(b_q.to(tl.float32) * b_z[None, :], axis=1)
    causal = tl.arange(0, C)[:, None] >= tl.arange(0, C)[None, :]  # key j at or before query i
    b_s = tl.where(causal, b_s, 0.0)
    p_v = v + (i_bh * N + o_t[:, None]) * V + o_v[None, :]
    b_v = tl.load(p_v, mask=m_t[:, None], other=0.0)
    b_o = b_o * (i_t * C)  # h_t is the mean over the tC tokens before the chunk
    b_o = dot(b_s.to(b_v.dtype), b_v, b_o)
    if NORMALIZE:
        b_rden = 1.0 / (b_qz + tl.sum(b_s, axis=1) + eps)  # [C]
        b_o = b_o * b_rden[:, None]
        if i_v == 0:
            tl.store(rden + i_bh * N + o_t, b_rden, mask=m_t)
    p_o = o + (i_bh * N + o_t[:, None]) * V + o_v[None, :]
    tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=m_t[:, None])


# The kernels run in the interpreter when TRITON_INTERPRET=1 was set before triton's first import:
# triton defines its own library (tl.sum, tl.cdiv, ...) for the interpreter or not at that moment,
# and our kernels when their module is imported; set in between, kernels and library do not match.
INTERPRETED = isinstance(chunk_states_fwd_kernel, InterpretedFunction) and isinstance(
    tl.standard.cdiv, InterpretedFunction
)


def chunk_states_fwd(k, v, *, normalize, chunk_size, arch):
    """Launch `chunk_states_fwd_kernel`: the mean states h `(B, H, NT + 1, K, V)` in v's dtype
    and, when `normalize`, the key sums z `(B, H, NT + 1, K)` float32 (else None), at the chunk
    boundaries 0, C, 2C, …, N."""
    batch, heads, n, d_k = k.shape
    d_v = v.shape[-1]
    n_chunks = triton.cdiv(n, chunk_size)
    tile = tiles("states_fwd", arch, d_k, d_v, v.dtype)
    h = v.new_empty(batch, heads, n_chunks + 1, d_k, d_v)
    z = k.new_empty(batch, heads, n_chunks + 1, d_k, dtype=torch.float32) if normalize else None
    grid = (d_k // tile.block_k, d_v // tile.block_v, batch * heads)
    chunk_states_fwd_kernel[grid](
        k, v, h, z, n, d_k, d_v, chunk_size, NORMALIZE=normalize, **tile.launch_options
    )
    return h, z


def chunk_linear_attention_fwd(q, k, v, *, normalize, eps, chunk_size, arch):
    """Causal linear attention forward: (o `(B, H, N, V)` in v's dtype, r `(B, H, N)` float32 or
    None). Inputs contiguous `(B, H, N, ·)`; `arch` selects the tiles (`tiles.py`)."""
    batch, heads, n, d_k = q.shape
    d_v = v.shape[-1]
    h, z = chunk_states_fwd(k, v, normalize=normalize, chunk_size=chunk_size, arch=arch)
    tile = tiles("output", arch, d_k, d_v, v.dtype)
    o = torch.empty_like(v)
    rden = q.new_empty(batch, heads, n, dtype=torch.float32) if normalize else None
    grid = (d_v // tile.block_v, triton.cdiv(n, chunk_size), batch * heads)
    chunk_output_fwd_kernel[grid](
        q, k, v, h, z, o, rden, n, eps, d_k, d_v, chunk_size,
        NORMALIZE=normalize, **tile.launch_options,
    )  # fmt: skip
    return o, rden
