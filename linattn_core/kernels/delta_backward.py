"""The backward pass of the delta rule in three Triton kernels, and their launcher.

With the forward quantities of a chunk (A, W, U, the state S at its start and S' at its end,
M the inclusive causal mask) and the gradients dO of its outputs and dS' of S', the chain rule
through O = Q Sᵀ + (Q Kᵀ ⊙ M) U, S' = S + Uᵀ K, U = Ũ − W Sᵀ and [W, Ũ] = A diag(β)[K, V] gives

    dU = (Q Kᵀ ⊙ M)ᵀ dO + K dS'ᵀ                         (both uses of U)
    dS = dS' + dOᵀ Q − dUᵀ W                              (the gradient at the chunk's start)
    dQ = dO S + (dO Uᵀ ⊙ M) K,     dW = −dU S
    dK = (dO Uᵀ ⊙ M)ᵀ Q + U dS'  +  diag(β) Aᵀ dW  +  (dL + dLᵀ) K
    dV = diag(β) Aᵀ dU,            dβ = rowsum(Aᵀ [dW, dU] ⊙ [K, V]) + rowsum(dN ⊙ L)

where L = K Kᵀ ⊙ M⁻, dN = −Aᵀ dA Aᵀ ⊙ M⁻ with dA = [dW, dU] (diag(β)[K, V])ᵀ (the
derivative of an inverse, kept where N = diag(β) L has entries; it equals −Aᵀ[dW, dU] [W, Ũ]ᵀ,
which the kernel computes) and dL = diag(β) dN.
`delta_states_bwd_kernel` walks the chunks backwards for dS and dU (dS at boundary 0 is the
initial state's gradient); `delta_dqk_kernel` computes dQ, the first two terms of dK, and dW;
`delta_wy_kernel` differentiates the triangular inverse: the rest of dK, dV and dβ.

The forward quantities are recomputed by the forward's kernels, so the forward pass saves only
its inputs: memory O(N(d_k + d_v)) beside the inputs. Operands as in the forward pass (the
inputs' dtype, or float32 for A and the intermediates dW, dK), accumulation in float32.
"""

import torch
import triton
import triton.language as tl

from linattn_core.kernels.delta_forward import CHUNK, delta_prepare, delta_states
from linattn_core.kernels.forward import dot
from linattn_core.kernels.tiles import tiles


@triton.jit(do_not_specialize=["N"])
def delta_states_bwd_kernel(
    q,  # [B, H, N, K]
    k,  # [B, H, N, K]
    w,  # [B, H, N, K] W, recomputed by delta_prepare_kernel
    do,  # [B, H, N, V]
    ds_final,  # [B, H, V, K] the gradient of the final state
    ds,  # [B, H, NT + 1, V, K] float32 written: the gradient of the state at every boundary
    du,  # [B, H, N, V] float32 written: dU
    N,
    K,
    V,
    BK: tl.constexpr,
    BV: tl.constexpr,
):
    """dU = (Q Kᵀ ⊙ M)ᵀ dO + K dS'ᵀ and dS = dS' + dOᵀ Q − dUᵀ W over chunks t = NT − 1, …, 0:
    BV rows of the state's gradient a program, kept in `ds` as the forward keeps its state."""
    i_v, i_bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    NT = tl.cdiv(N, 64)
    o_v = i_v * BV + tl.arange(0, BV)
    p_ds = ds + (i_bh * (NT + 1) * V + o_v[:, None]) * K  # row starts at boundary 0  [BV, 1]
    for i_k in range(K // BK):  # boundary NT: the final state's gradient
        o_k = i_k * BK + tl.arange(0, BK)
        b_ds = tl.load(ds_final + (i_bh * V + o_v[:, None]) * K + o_k[None, :]).to(tl.float32)
        tl.store(p_ds + NT * V * K + o_k[None, :], b_ds)
    tl.debug_barrier()
    after = tl.arange(0, 64)[:, None] <= tl.arange(0, 64)[None, :]  # Mᵀ: i ≥ j for [j, i]
    for i_t in range(NT - 1, -1, -1):
        o_t = i_t * 64 + tl.arange(0, 64)
        m_t = o_t < N
        b_a = tl.zeros([64, 64], dtype=tl.float32)  # K Qᵀ
        b_du = tl.zeros([64, BV], dtype=tl.float32)  # K dS'ᵀ, then dU
        for i_k in range(K // BK):
            o_k = i_k * BK + tl.arange(0, BK)
            rows = (i_bh * N + o_t[:, None]) * K + o_k[None, :]  # [64, BK]
            b_q = tl.load(q + rows, mask=m_t[:, None], other=0.0)
            b_k = tl.load(k + rows, mask=m_t[:, None], other=0.0)
            b_a = dot(b_k, tl.trans(b_q), b_a)
            b_ds = tl.load(p_ds + (i_t + 1) * V * K + o_k[None, :])  # dS'  [BV, BK]
            b_du = dot(b_k, tl.trans(b_ds.to(b_k.dtype)), b_du)
        p_do = do + (i_bh * N + o_t[:, None]) * V + o_v[None, :]
        b_do = tl.load(p_do, mask=m_t[:, None], other=0.0)  # [64, BV]
        b_du = dot(tl.where(after, b_a, 0.0).to(b_do.dtype), b_do, b_du)  # + (Q Kᵀ ⊙ M)ᵀ dO
        p_du = du + (i_bh * N + o_t[:, None]) * V + o_v[None, :]
        tl.store(p_du, b_du, mask=m_t[:, None])
        for i_k in range(K // BK):  # dS = dS' + dOᵀ Q − dUᵀ W
            o_k = i_k * BK + tl.arange(0, BK)
            rows = (i_bh * N + o_t[:, None]) * K + o_k[None, :]
            b_q = tl.load(q + rows, mask=m_t[:, None], other=0.0)
            b_w = tl.load(w + rows, mask=m_t[:, None], other=0.0)
            b_ds = tl.load(p_ds + (i_t + 1) * V * K + o_k[None, :])
            b_ds = dot(tl.trans(b_do), b_q, b_ds)
            b_ds = dot(tl.trans((-b_du).to(b_w.dtype)), b_w, b_ds)
            tl.store(p_ds + i_t * V * K + o_k[None, :], b_ds)
        tl.debug_barrier()


@triton.jit(do_not_specialize=["N"])
def delta_dqk_kernel(
    q,  # [B, H, N, K]
    k,  # [B, H, N, K]
    u,  # [B, H, N, V] the corrections U, recomputed by delta_states_kernel
    do,  # [B, H, N, V]
    s,  # [B, H, NT + 1, V, K] float32 the states at the chunk boundaries
    ds,  # [B, H, NT + 1, V, K] float32, their gradients, from delta_states_bwd_kernel
    du,  # [B, H, N, V] float32 dU
    dq,  # [B, H, N, K] written
    dk,  # [B, H, N, K] float32 written: (dO Uᵀ ⊙ M)ᵀ Q + U dS'
    dw,  # [B, H, N, K] float32 written: dW = −dU S
    N,
    K,
    V,
    BK: tl.constexpr,
    BV: tl.constexpr,
):
    """dQ = dO S + (dO Uᵀ ⊙ M) K, the first terms of dK, and dW = −dU S: one chunk, BK columns."""
    i_k, i_t, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    NT = tl.cdiv(N, 64)
    o_t = i_t * 64 + tl.arange(0, 64)
    m_t = o_t < N
    o_k = i_k * BK + tl.arange(0, BK)
    b_dq = tl.zeros([64, BK], dtype=tl.float32)
    b_dk = tl.zeros([64, BK], dtype=tl.float32)
    b_dw = tl.zeros([64, BK], dtype=tl.float32)
    b_p = tl.zeros([64, 64], dtype=tl.float32)  # dO Uᵀ
    for i_v in range(V // BV):
        o_v = i_v * BV + tl.arange(0, BV)
        rows = (i_bh * N + o_t[:, None]) * V + o_v[None, :]  # [64, BV]
        b_do = tl.load(do + rows, mask=m_t[:, None], other=0.0)
        b_u = tl.load(u + rows, mask=m_t[:, None], other=0.0)
        b_du = tl.load(du + rows, mask=m_t[:, None], other=0.0)
        state = ((i_bh * (NT + 1) + i_t) * V + o_v[:, None]) * K + o_k[None, :]  # [BV, BK]
        b_s = tl.load(s + state).to(b_do.dtype)
        b_dq = dot(b_do, b_s, b_dq)
        b_dw = dot((-b_du).to(b_s.dtype), b_s, b_dw)
        b_dk = dot(b_u, tl.load(ds + state + V * K).to(b_u.dtype), b_dk)  # U dS'
        b_p = dot(b_do, tl.trans(b_u), b_p)
    causal = tl.arange(0, 64)[:, None] >= tl.arange(0, 64)[None, :]
    rows = (i_bh * N + o_t[:, None]) * K + o_k[None, :]  # [64, BK]
    b_q = tl.load(q + rows, mask=m_t[:, None], other=0.0)
    b_k = tl.load(k + rows, mask=m_t[:, None], other=0.0)
    b_p = tl.where(causal, b_p, 0.0).to(b_k.dtype)
    b_dq = dot(b_p, b_k, b_dq)
    b_dk = dot(tl.trans(b_p), b_q, b_dk)
    tl.store(dq + rows, b_dq.to(dq.dtype.element_ty), mask=m_t[:, None])
    tl.store(dk + rows, b_dk, mask=m_t[:, None])
    tl.store(dw + rows, b_dw, mask=m_t[:, None])


@triton.jit(do_not_specialize=["N"])
def delta_wy_kernel(
    k,  # [B, H, N, K]
    v,  # [B, H, N, V]
    beta,  # [B, H, N]
    a,  # [B, H, NT·64, 64] float32 A, recomputed by delta_prepare_kernel
    w,  # [B, H, N, K] W, recomputed by delta_prepare_kernel
    u_free,  # [B, H, N, V] Ũ, recomputed by delta_prepare_kernel
    dw,  # [B, H, N, K] float32 dW
    du,  # [B, H, N, V] float32 dU
    dk_partial,  # [B, H, N, K] float32 the first terms of dK, from delta_dqk_kernel
    dk,  # [B, H, N, K] written
    dv,  # [B, H, N, V] written
    dbeta,  # [B, H, N] written
    N,
    K,
    V,
    BK: tl.constexpr,
    BV: tl.constexpr,
):
    """Through X = [W, Ũ] = A diag(β)[K, V] and A = (I + N)⁻¹: dV, dβ and the rest of dK, one
    chunk a program. With dR = Aᵀ dX, the inverse's derivative −Aᵀ dA Aᵀ = −Aᵀ dX Rᵀ Aᵀ is
    −dR Xᵀ: no C × C × C product, and dA is never formed."""
    i_t, i_bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    o_c = tl.arange(0, 64)
    o_t = i_t * 64 + o_c
    m_t = o_t < N
    b_beta = tl.load(beta + i_bh * N + o_t, mask=m_t, other=0.0).to(tl.float32)  # [64]
    p_a = a + (i_bh * tl.cdiv(N, 64) * 64 + i_t * 64 + o_c[None, :]) * 64 + o_c[:, None]
    b_at = tl.load(p_a)  # Aᵀ [64, 64]
    b_dn = tl.zeros([64, 64], dtype=tl.float32)  # −dR Xᵀ
    b_dbeta = tl.zeros([64], dtype=tl.float32)
    for i_k in range(K // BK):  # X = W: dR = Aᵀ dW into dβ and dK (diag(β) dR), and into dN
        rows = (i_bh * N + o_t[:, None]) * K + i_k * BK + tl.arange(0, BK)[None, :]
        b_k = tl.load(k + rows, mask=m_t[:, None], other=0.0).to(tl.float32)
        b_dr = dot(b_at, tl.load(dw + rows, mask=m_t[:, None], other=0.0), None)
        b_dbeta += tl.sum(b_dr * b_k, axis=1)
        b_w = tl.load(w + rows, mask=m_t[:, None], other=0.0).to(tl.float32)
        b_dn = dot(-b_dr, tl.trans(b_w), b_dn)
        b_dk = tl.load(dk_partial + rows, mask=m_t[:, None], other=0.0) + b_beta[:, None] * b_dr
        tl.store(dk_partial + rows, b_dk, mask=m_t[:, None])
    for i_v in range(V // BV):  # X = Ũ: dR = Aᵀ dU into dβ, dV and dN
        rows = (i_bh * N + o_t[:, None]) * V + i_v * BV + tl.arange(0, BV)[None, :]
        b_v = tl.load(v + rows, mask=m_t[:, None], other=0.0).to(tl.float32)
        b_dr = dot(b_at, tl.load(du + rows, mask=m_t[:, None], other=0.0), None)
        b_dbeta += tl.sum(b_dr * b_v, axis=1)
        b_uf = tl.load(u_free + rows, mask=m_t[:, None], other=0.0).to(tl.float32)
        b_dn = dot(-b_dr, tl.trans(b_uf), b_dn)
        tl.store(dv + rows, (b_beta[:, None] * b_dr).to(dv.dtype.element_ty), mask=m_t[:, None])
    b_dn = tl.where(o_c[:, None] > o_c[None, :], b_dn, 0.0)  # N has entries on M⁻ only
    for i_k in range(K // BK):  # N = diag(β)(K Kᵀ ⊙ M⁻): dβ and (dL + dLᵀ) K into dK
        rows = (i_bh * N + o_t[:, None]) * K + i_k * BK + tl.arange(0, BK)[None, :]
        b_k = tl.load(k + rows, mask=m_t[:, None], other=0.0).to(tl.float32)
        b_dnk = dot(b_dn, b_k, None)  # dN K
        b_dbeta += tl.sum(b_dnk * b_k, axis=1)  # Σ_j dN_ij k_i·k_j: rowsum(dN ⊙ L) by tiles
        b_dk = tl.load(dk_partial + rows, mask=m_t[:, None], other=0.0)
        b_dk += b_beta[:, None] * b_dnk  # dL K, dL = diag(β) dN
        b_dk = dot(tl.trans(b_beta[:, None] * b_dn), b_k, b_dk)  # dLᵀ K
        tl.store(dk + rows, b_dk.to(dk.dtype.element_ty), mask=m_t[:, None])
    tl.store(dbeta + i_bh * N + o_t, b_dbeta.to(dbeta.dtype.element_ty), mask=m_t)


def delta_rule_bwd(q, k, v, beta, initial_state, do, ds_final, *, arch):
    """Gradients (dq, dk, dv, dβ, d initial state) of the delta rule for the gradients `do` of
    the outputs and `ds_final` of the final state. Inputs contiguous."""
    batch, heads, n, d_k = q.shape
    d_v = v.shape[-1]
    n_chunks = triton.cdiv(n, CHUNK)
    a, w, u_free = delta_prepare(k, v, beta, arch=arch)
    u, s = delta_states(k, w, u_free, initial_state, arch=arch)

    fp32 = {"dtype": torch.float32}
    tile = tiles("delta_states_bwd", arch, d_k, d_v, v.dtype)
    ds = q.new_empty(batch, heads, n_chunks + 1, d_v, d_k, **fp32)
    du = v.new_empty(v.shape, **fp32)
    grid = (d_v // tile.block_v, batch * heads)
    delta_states_bwd_kernel[grid](q, k, w, do, ds_final, ds, du, n, d_k, d_v, **tile.launch_options)

    tile = tiles("delta_dqk", arch, d_k, d_v, v.dtype)
    dq = torch.empty_like(q)
    dk_partial, dw = q.new_empty(q.shape, **fp32), q.new_empty(q.shape, **fp32)
    grid = (d_k // tile.block_k, n_chunks, batch * heads)
    delta_dqk_kernel[grid](
        q, k, u, do, s, ds, du, dq, dk_partial, dw, n, d_k, d_v, **tile.launch_options
    )

    tile = tiles("delta_wy", arch, d_k, d_v, v.dtype)
    dk, dv, dbeta = torch.empty_like(k), torch.empty_like(v), torch.empty_like(beta)
    grid = (n_chunks, batch * heads)
    delta_wy_kernel[grid](
        k,
        v,
        beta,
        a,
        w,
        u_free,
        dw,
        du,
        dk_partial,
        dk,
        dv,
        dbeta,
        n,
        d_k,
        d_v,
        **tile.launch_options,
    )
    d_initial = None if initial_state is None else ds[:, :, 0].to(initial_state.dtype)
    return dq, dk, dv, dbeta, d_initial
