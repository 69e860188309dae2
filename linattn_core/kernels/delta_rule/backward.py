"""The backward pass of the delta rule in four Triton kernels, and their launcher.

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
`delta_du_local_kernel` computes the part of dU within each chunk, for all chunks at once;
`delta_states_bwd_kernel` walks the chunks backwards with dS in registers, for dU and every
chunk's dS' (dS at the first chunk's start is the initial state's gradient); `delta_dqk_kernel`
computes dQ, the first two terms of dK, and dW; `delta_wy_kernel` differentiates the triangular
inverse: the rest of dK, dV and dβ.

The forward quantities are recomputed by the forward's kernels, so the forward pass saves only
its inputs: memory O(N(d_k + d_v)) beside the inputs. Operands as in the forward pass: the
inputs' dtype, with the float32 tiles dR and dN as two terms of it (`split_dot`); accumulation
in float32, and the partial dK in float32. The launcher takes its grids and tiles from the
forward's `delta_plan`, made once per shape. Packed sequences take the forward kernels' work
lists (`forward.py`): the backward walk runs each sequence from its end to its start, and
∂L/∂S_0 is one per sequence.
"""

import torch
import triton
import triton.language as tl

from linattn_core.kernels.common import dot, per_shape, split_dot
from linattn_core.kernels.delta_rule.forward import (
    chunk_count,
    chunk_gates,
    chunk_span,
    delta_plan,
    delta_prepare,
    delta_states,
    gated_options,
    log_gates,
    walk_launch,
    walk_span,
)
from linattn_core.kernels.tiles import tile_rule, tiles


@tile_rule(widest=(64, 32, 16))
@triton.jit(do_not_specialize=["N"])
def delta_du_local_kernel(
    q,  # [B, H, N, K]
    k,  # [B, H, N, K]
    g,  # [B, H, N] the log-gates, or None
    chunks,  # [NT, 3] packed sequences' chunks (`packing.chunk_indices`), or None
    do,  # [B, H, N, V]
    du,  # [B, H, N, V] written: (Q Kᵀ ⊙ M)ᵀ dO, dU's part within the chunk
    k_decayed,  # [B, H, N, K] written with gates: diag(exp(G_C − G)) K
    do_gated,  # [B, H, N, V] written with gates: diag(exp(G)) dO
    N,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
):
    """(Q Kᵀ ⊙ M)ᵀ dO, the part of dU that does not depend on the state: one chunk, BV columns.
    With gates, (Q Kᵀ ⊙ Γ ⊙ M)ᵀ dO, and the operands of `delta_states_bwd_kernel` scaled by
    their decays, so that the walk holds no more registers than without."""
    i_v, i_t, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    start, end = chunk_span(chunks, i_t, N, C)
    if chunks is not None:
        if start >= end:  # a program after the last chunk: nothing to do
            return
    o_t = start + tl.arange(0, C)
    m_t = o_t < end
    o_v = i_v * BV + tl.arange(0, BV)
    b_a = tl.zeros([C, C], dtype=tl.float32)  # [j, i]: k_j·q_i
    for i_k in range(K // BK):
        o_k = i_k * BK + tl.arange(0, BK)
        b_k = tl.load(
            k + (i_bh * N + o_t[:, None]) * K + o_k[None, :], mask=m_t[:, None], other=0.0
        )
        b_qt = tl.load(
            q + (i_bh * N + o_t[None, :]) * K + o_k[:, None], mask=m_t[None, :], other=0.0
        )
        b_a = dot(b_k, b_qt, b_a)
    after = tl.arange(0, C)[:, None] <= tl.arange(0, C)[None, :]  # Mᵀ: i ≥ j for [j, i]
    rows = (i_bh * N + o_t[:, None]) * V + o_v[None, :]  # [C, BV]
    b_do = tl.load(do + rows, mask=m_t[:, None], other=0.0)
    if g is not None:  # ⊙ Γᵀ
        b_g = chunk_gates(g, i_bh, N, o_t, m_t)
        b_a *= tl.exp(tl.where(after, b_g[None, :] - b_g[:, None], 0.0))
        tl.store(do_gated + rows, (b_do * tl.exp(b_g)[:, None]).to(b_do.dtype), mask=m_t[:, None])
        if i_v == 0:
            b_last = tl.sum(tl.where(tl.arange(0, C) == C - 1, b_g, 0.0))  # G_C
            decay_rows(k, k_decayed, tl.exp(b_last - b_g), i_bh, N, o_t, m_t, K, BK)
    tl.store(
        du + rows, dot(tl.where(after, b_a, 0.0).to(b_do.dtype), b_do, None), mask=m_t[:, None]
    )


@triton.jit
def decay_rows(x, y, b_decay, i_bh, N, o_t, m_t, D: tl.constexpr, BD: tl.constexpr):
    """Y = diag(decay) X on the rows o_t of X `[B, H, N, D]`, in X's dtype."""
    for i_d in range(D // BD):
        rows = (i_bh * N + o_t[:, None]) * D + i_d * BD + tl.arange(0, BD)[None, :]
        b_x = tl.load(x + rows, mask=m_t[:, None], other=0.0)
        tl.store(y + rows, (b_x * b_decay[:, None]).to(b_x.dtype), mask=m_t[:, None])


# a walk, as `delta_states_kernel`: 3 stages on sm_90
@tile_rule(widest=(16, 32, 16), num_stages=(3, 2))
@triton.jit(do_not_specialize=["N"])
def delta_states_bwd_kernel(
    q,  # [B, H, N, K]
    k,  # [B, H, N, K] (with gates diag(exp(G_C − G)) K, from delta_du_local_kernel)
    w,  # [B, H, N, K] W, recomputed by delta_prepare_kernel
    g,  # [B, H, N] the log-gates, or None
    sequences,  # [S, 3] packed sequences' (start, end, first chunk), or None
    do,  # [B, H, N, V] (with gates diag(exp(G)) dO, from delta_du_local_kernel)
    ds_final,  # [B, H, V, K] ([S, H, V, K] packed) the gradient of the final state
    dh,  # [B, H, NT, K, V] written: dS'ᵀ, the gradient of the state at every chunk's end
    du,  # [B, H, N, V] (Q Kᵀ ⊙ M)ᵀ dO, from delta_du_local_kernel; overwritten: dU
    ds0,  # [B, H, V, K] ([S, H, V, K] packed) written: the initial state's gradient, or None
    N,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BV: tl.constexpr,
):
    """dU = (Q Kᵀ ⊙ M)ᵀ dO + K dS'ᵀ and dS = dS' + dOᵀ Q − dUᵀ W over chunks t = NT − 1, …, 0:
    BV rows of the state's gradient a program, held in registers (as dSᵀ `[K, BV]`). With gates,
    dU = (Q Kᵀ ⊙ Γ ⊙ M)ᵀ dO + diag(exp(G_C − G)) K dS'ᵀ and
    dS = exp(G_C) dS' + dOᵀ diag(exp(G)) Q − dUᵀ W, for k and do given scaled. Packed, a
    program walks one sequence."""
    i_v, i_bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    start, end, first, NT, i_state = walk_span(sequences, N, C)
    o_k = tl.arange(0, K)
    o_v = i_v * BV + tl.arange(0, BV)
    state = (i_state * V + o_v[None, :]) * K + o_k[:, None]  # dSᵀ in a (V, K) state  [K, BV]
    b_ds = tl.load(ds_final + state).to(tl.float32)
    for i_t in range(tl.cdiv(end - start, C) - 1, -1, -1):
        o_t = start + i_t * C + tl.arange(0, C)
        m_t = o_t < end
        p_dh = dh + ((i_bh * NT + first + i_t) * K + o_k[:, None]) * V + o_v[None, :]
        tl.store(p_dh, b_ds.to(p_dh.dtype.element_ty))
        transposed = (i_bh * N + o_t[None, :]) * K + o_k[:, None]  # [K, C]
        rows = (i_bh * N + o_t[:, None]) * V + o_v[None, :]  # [C, BV]
        b_k = tl.load(
            k + (i_bh * N + o_t[:, None]) * K + o_k[None, :], mask=m_t[:, None], other=0.0
        )
        b_du = tl.load(du + rows, mask=m_t[:, None], other=0.0).to(tl.float32)
        b_du = dot(b_k, b_ds.to(b_k.dtype), b_du)  # + K dS'ᵀ
        tl.store(du + rows, b_du.to(du.dtype.element_ty), mask=m_t[:, None])
        if g is not None:  # exp(G_C) dS', G_C the sum of the chunk's gates
            b_ds *= tl.exp(tl.sum(log_gates(g, i_bh, N, o_t, m_t)))
        b_qt = tl.load(q + transposed, mask=m_t[None, :], other=0.0)  # Qᵀ
        b_ds = dot(b_qt, tl.load(do + rows, mask=m_t[:, None], other=0.0), b_ds)  # + Qᵀ dO
        b_wt = tl.load(w + transposed, mask=m_t[None, :], other=0.0)  # Wᵀ
        b_ds = dot(b_wt, (-b_du).to(b_wt.dtype), b_ds)  # − Wᵀ dU
    if ds0 is not None:
        tl.store(ds0 + state, b_ds.to(ds0.dtype.element_ty))


@tile_rule(widest=(32, 32, 16))
@triton.jit(do_not_specialize=["N"])
def delta_dqk_kernel(
    q,  # [B, H, N, K]
    k,  # [B, H, N, K]
    u,  # [B, H, N, V] the corrections U, recomputed by delta_states_kernel
    do,  # [B, H, N, V]
    h,  # [B, H, NT, K, V] Sᵀ at the chunks' starts
    dh,  # [B, H, NT, K, V] dS'ᵀ at the chunks' ends, from delta_states_bwd_kernel
    du,  # [B, H, N, V] dU
    g,  # [B, H, N] the log-gates, or None
    chunks,  # [NT, 3] packed sequences' chunks, or None
    dq,  # [B, H, N, K] written
    dk,  # [B, H, N, K] float32 written: (dO Uᵀ ⊙ M)ᵀ Q + U dS'
    dw,  # [B, H, N, K] written: dW = −dU S
    dg,  # [K / BK, B, H, N] float32 written with gates: the parts of dg of these columns
    N,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
):
    """dQ = dO S + (dO Uᵀ ⊙ M) K, the first terms of dK, and dW = −dU S: one chunk, BK columns.

    With gates, dQ = diag(exp(G)) dO S + (dO Uᵀ ⊙ Γ ⊙ M) K, the terms of dK
    (dO Uᵀ ⊙ Γ ⊙ M)ᵀ Q + diag(exp(G_C − G)) U dS', and these columns' part of dg through O
    and S' (`gate_grads`)."""
    i_k, i_t, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    NT = tl.cdiv(N, C) if chunks is None else tl.num_programs(1)
    start, end = chunk_span(chunks, i_t, N, C)
    if chunks is not None:
        if start >= end:  # a program after the last chunk: nothing to do
            return
    o_t = start + tl.arange(0, C)
    m_t = o_t < end
    o_k = i_k * BK + tl.arange(0, BK)
    b_dq = tl.zeros([C, BK], dtype=tl.float32)
    b_dk = tl.zeros([C, BK], dtype=tl.float32)
    b_dus = tl.zeros([C, BK], dtype=tl.float32)  # dU S
    b_p = tl.zeros([C, C], dtype=tl.float32)  # dO Uᵀ
    b_sds = 0.0  # ⟨dS', S⟩, with gates
    for i_v in range(V // BV):
        o_v = i_v * BV + tl.arange(0, BV)
        rows = (i_bh * N + o_t[:, None]) * V + o_v[None, :]  # [C, BV]
        b_do = tl.load(do + rows, mask=m_t[:, None], other=0.0)
        b_u = tl.load(u + rows, mask=m_t[:, None], other=0.0)
        b_du = tl.load(du + rows, mask=m_t[:, None], other=0.0)
        state = ((i_bh * NT + i_t) * K + o_k[None, :]) * V + o_v[:, None]  # S [BV, BK]
        b_s = tl.load(h + state)
        b_dh = tl.load(dh + state)
        b_dq = dot(b_do, b_s, b_dq)
        b_dus = dot(b_du.to(b_s.dtype), b_s, b_dus)
        b_dk = dot(b_u, b_dh, b_dk)  # U dS'
        b_p = dot(b_do, tl.trans(b_u), b_p)
        if g is not None:  # ⟨dS', S⟩ on these columns
            b_sds += tl.sum(tl.sum(b_s.to(tl.float32) * b_dh.to(tl.float32), axis=1), axis=0)
    causal = tl.arange(0, C)[:, None] >= tl.arange(0, C)[None, :]
    rows = (i_bh * N + o_t[:, None]) * K + o_k[None, :]  # [C, BK]
    b_q = tl.load(q + rows, mask=m_t[:, None], other=0.0)
    b_k = tl.load(k + rows, mask=m_t[:, None], other=0.0)
    if g is not None:
        b_g = chunk_gates(g, i_bh, N, o_t, m_t)
        b_last = tl.sum(tl.where(tl.arange(0, C) == C - 1, b_g, 0.0))  # G_C
        b_dq *= tl.exp(b_g)[:, None]  # diag(exp(G)) dO S
        b_dk *= tl.exp(b_last - b_g)[:, None]  # diag(exp(G_C − G)) U dS'
        b_p *= tl.exp(tl.where(causal, b_g[:, None] - b_g[None, :], 0.0))  # ⊙ Γ
        gate_grads(b_q, b_k, b_dq, b_dk, b_p, b_sds, b_last, dg, i_k, i_bh, N, o_t, m_t, C)
    b_p = tl.where(causal, b_p, 0.0).to(b_k.dtype)
    b_dq = dot(b_p, b_k, b_dq)
    b_dk = dot(tl.trans(b_p), b_q, b_dk)
    tl.store(dq + rows, b_dq.to(dq.dtype.element_ty), mask=m_t[:, None])
    tl.store(dk + rows, b_dk, mask=m_t[:, None])
    tl.store(dw + rows, (-b_dus).to(dw.dtype.element_ty), mask=m_t[:, None])  # dW = −dU S


@triton.jit
def gate_grads(b_q, b_k, b_dqs, b_dks, b_p, b_sds, b_last, dg, i_k, i_bh, N, o_t, m_t, C):
    """The gradient of the log-gates through O and S', these columns' part, stored in `dg`:
    dg_j = Σ_{i ≥ j} dG_i with dG_i = q_i·(exp(G_i) S dO_i) + Σ_l Z_il − Σ_l Z_li,
    Z = (dO Uᵀ ⊙ Γ ⊙ M⁻) ⊙ Q Kᵀ (g_j scales what reaches token i ≥ j from before j), plus
    exp(G_C) ⟨dS', S⟩ + Σ_{l < j} exp(G_C − G_l) u_lᵀ dS' k_l (g_j scales S and the updates
    before j in S'). Each term is written with its own factor Γ_il (l < i), exp(G_i) or
    exp(G_C − G_l), so that extreme gates give small gradients, not cancelling sums of large
    ones: the diagonal of Γ, whose terms cancel, never enters. `b_dqs` = exp(G) dO S,
    `b_dks` = diag(exp(G_C − G)) U dS', `b_p` = dO Uᵀ ⊙ Γ, `b_sds` = ⟨dS', S⟩."""
    o_c = tl.arange(0, C)
    before = o_c[None, :] < o_c[:, None]  # [i, l]: l < i
    b_z = tl.where(before, b_p * dot(b_q, tl.trans(b_k), None), 0.0)
    b_dg = tl.sum(b_dqs * b_q.to(tl.float32), axis=1) + tl.sum(b_z, axis=1) - tl.sum(b_z, axis=0)
    b_x = tl.sum(b_dks * b_k.to(tl.float32), axis=1)  # exp(G_C − G_l) u_lᵀ dS' k_l
    b_dg = tl.cumsum(b_dg, 0, reverse=True) + tl.exp(b_last) * b_sds
    b_dg += tl.sum(tl.where(before, b_x[None, :], 0.0), axis=1)
    tl.store(dg + (i_k * tl.num_programs(2) + i_bh) * N + o_t, b_dg, mask=m_t)


# float32 C × C tiles (dN) whatever the inputs
@tile_rule(widest=(16, 16, 16))
@triton.jit(do_not_specialize=["N"])
def delta_wy_kernel(
    k,  # [B, H, N, K]
    v,  # [B, H, N, V]
    beta,  # [B, H, N]
    a,  # [B, H, NT·C, C] A, recomputed by delta_prepare_kernel
    w,  # [B, H, N, K] W, recomputed by delta_prepare_kernel
    u_free,  # [B, H, N, V] Ũ, recomputed by delta_prepare_kernel
    dw,  # [B, H, N, K] dW
    du,  # [B, H, N, V] dU
    dk_partial,  # [B, H, N, K] float32 the first terms of dK, from delta_dqk_kernel
    g,  # [B, H, N] the log-gates, or None
    chunks,  # [NT, 3] packed sequences' chunks, or None
    dg_partial,  # [NK, B, H, N] float32 parts of dg, from delta_dqk_kernel (with gates)
    dk,  # [B, H, N, K] written
    dv,  # [B, H, N, V] written
    dbeta,  # [B, H, N] written
    dg,  # [B, H, N] written with gates: the log-gates' gradient
    N,
    NK,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
):
    """Through X = [W, Ũ] = A diag(β)[K, V] and A = (I + N)⁻¹: dV, dβ and the rest of dK, one
    chunk a program. With dR = Aᵀ dX, the inverse's derivative −Aᵀ dA Aᵀ = −Aᵀ dX Rᵀ Aᵀ is
    −dR Xᵀ: no C × C × C product, and dA is never formed.

    With gates, W = A diag(β exp(G)) K and N = diag(β)(K Kᵀ ⊙ Γ ⊙ M⁻): dN ⊙ Γ takes dN's place
    and exp(G) scales K in W's terms; dG gains rowsum(dK_W ⊙ K) (W's part of dK) and
    rowsum(dL K ⊙ K) − rowsum(dLᵀ K ⊙ K), and dg is dG summed from each row to the chunk's end."""
    i_t, i_bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    NT = tl.cdiv(N, C) if chunks is None else tl.num_programs(0)
    start, end = chunk_span(chunks, i_t, N, C)
    if chunks is not None:
        if start >= end:  # a program after the last chunk: nothing to do
            return
    o_c = tl.arange(0, C)
    o_t = start + o_c
    m_t = o_t < end
    b_beta = tl.load(beta + i_bh * N + o_t, mask=m_t, other=0.0).to(tl.float32)  # [C]
    p_a = a + (i_bh * NT * C + i_t * C + o_c[None, :]) * C + o_c[:, None]
    b_at = tl.load(p_a)  # Aᵀ [C, C], in the inputs' dtype
    b_dn = tl.zeros([C, C], dtype=tl.float32)  # −dR Xᵀ
    b_dbeta = tl.zeros([C], dtype=tl.float32)
    b_dg = tl.zeros([C], dtype=tl.float32)  # dG, with gates
    b_scale = tl.full([C], 1.0, dtype=tl.float32)  # exp(G) with gates
    if g is not None:
        b_scale = tl.exp(chunk_gates(g, i_bh, N, o_t, m_t))
    for i_k in range(K // BK):  # X = W: dR = Aᵀ dW into dβ and dK (diag(β) dR), and into dN
        rows = (i_bh * N + o_t[:, None]) * K + i_k * BK + tl.arange(0, BK)[None, :]
        b_k = tl.load(k + rows, mask=m_t[:, None], other=0.0).to(tl.float32)
        b_dr = dot(b_at, tl.load(dw + rows, mask=m_t[:, None], other=0.0), None)
        b_drk = tl.sum(b_dr * b_k, axis=1)
        if g is None:
            b_dbeta += b_drk
        else:  # W = A diag(β exp(G)) K
            b_dbeta += b_scale * b_drk
            b_dg += b_beta * b_scale * b_drk
        b_w = tl.load(w + rows, mask=m_t[:, None], other=0.0)
        b_dn -= split_dot(b_dr, tl.trans(b_w))
        b_dk = tl.load(dk_partial + rows, mask=m_t[:, None], other=0.0)
        b_dk += (b_beta * b_scale)[:, None] * b_dr
        tl.store(dk_partial + rows, b_dk, mask=m_t[:, None])
    for i_v in range(V // BV):  # X = Ũ: dR = Aᵀ dU into dβ, dV and dN
        rows = (i_bh * N + o_t[:, None]) * V + i_v * BV + tl.arange(0, BV)[None, :]
        b_v = tl.load(v + rows, mask=m_t[:, None], other=0.0).to(tl.float32)
        b_dr = dot(b_at, tl.load(du + rows, mask=m_t[:, None], other=0.0), None)
        b_dbeta += tl.sum(b_dr * b_v, axis=1)
        b_uf = tl.load(u_free + rows, mask=m_t[:, None], other=0.0)
        b_dn -= split_dot(b_dr, tl.trans(b_uf))
        tl.store(dv + rows, (b_beta[:, None] * b_dr).to(dv.dtype.element_ty), mask=m_t[:, None])
    below = o_c[:, None] > o_c[None, :]
    b_dn = tl.where(below, b_dn, 0.0)  # N has entries on M⁻ only
    if g is not None:  # dN ⊙ Γ
        b_g = chunk_gates(g, i_bh, N, o_t, m_t)
        b_dn *= tl.exp(tl.where(below, b_g[:, None] - b_g[None, :], 0.0))
    b_dlt = tl.trans(b_beta[:, None] * b_dn)  # dLᵀ, dL = diag(β) dN
    for i_k in range(K // BK):  # N = diag(β)(K Kᵀ ⊙ M⁻): dβ and (dL + dLᵀ) K into dK
        rows = (i_bh * N + o_t[:, None]) * K + i_k * BK + tl.arange(0, BK)[None, :]
        b_k = tl.load(k + rows, mask=m_t[:, None], other=0.0)
        b_dnk = split_dot(b_dn, b_k)  # dN K
        b_dbeta += tl.sum(b_dnk * b_k.to(tl.float32), axis=1)  # rowsum(dN ⊙ L) by tiles
        b_dk = tl.load(dk_partial + rows, mask=m_t[:, None], other=0.0)
        b_dk += b_beta[:, None] * b_dnk  # dL K
        b_dltk = split_dot(b_dlt, b_k)  # dLᵀ K
        b_dk += b_dltk
        if g is not None:  # G_i scales k_i by exp(G_i) as a row of L, by exp(−G_i) as a column
            b_dg += tl.sum((b_beta[:, None] * b_dnk - b_dltk) * b_k.to(tl.float32), axis=1)
        tl.store(dk + rows, b_dk.to(dk.dtype.element_ty), mask=m_t[:, None])
    tl.store(dbeta + i_bh * N + o_t, b_dbeta.to(dbeta.dtype.element_ty), mask=m_t)
    if g is not None:  # G_i = g_1 + … + g_i: dg_j = Σ_{i ≥ j} dG_i, and dg's other parts
        b_dg = tl.cumsum(b_dg, 0, reverse=True)
        for i in range(NK):
            b_dg += tl.load(dg_partial + (i * tl.num_programs(1) + i_bh) * N + o_t, mask=m_t)
        tl.store(dg + i_bh * N + o_t, b_dg.to(dg.dtype.element_ty), mask=m_t)


@per_shape
def delta_backward_plan(
    batch, heads, n, d_k, d_v, dtype, chunk_size, arch, gated=False, sequences=None
):
    """The forward kernels' launches (`delta_plan`) and the backward kernels', decided once per
    shape (and `gated`, and the number of packed sequences `sequences` or None):
    {kernel: (grid, launch options)}."""
    n_chunks, bh = chunk_count(n, chunk_size, sequences), batch * heads
    kernels = (delta_du_local_kernel, delta_states_bwd_kernel, delta_dqk_kernel, delta_wy_kernel)
    du, states, dqk, wy = (tiles(kernel, arch, d_k, d_v, dtype) for kernel in kernels)
    forward = delta_plan(batch, heads, n, d_k, d_v, dtype, chunk_size, arch, gated, sequences)
    plan = forward | {
        delta_du_local_kernel: ((d_v // du.block_v, n_chunks, bh), du.launch_options),
        delta_states_bwd_kernel: walk_launch(states, d_v, bh, sequences),
        delta_dqk_kernel: ((d_k // dqk.block_k, n_chunks, bh), dqk.launch_options),
        delta_wy_kernel: ((n_chunks, bh), wy.launch_options),
    }
    return gated_options(plan, arch, d_k, d_v, dtype) if gated else plan


def delta_rule_bwd(
    q, k, v, beta, initial_state, do, ds_final, *, chunk_size, arch, g=None, packing=None
):
    """Gradients (dq, dk, dv, dβ, d initial state, dg) of the delta rule — gated by the log-gates
    `g` unless None, then dg is None — for the gradients `do` of the outputs and `ds_final` of
    the final state. Inputs contiguous; `packing` as `forward.delta_rule_fwd` takes it (states
    and their gradients `(S, H, V, K)`)."""
    batch, heads, n, d_k = q.shape
    d_v = v.shape[-1]
    sizes = (n, d_k, d_v, chunk_size)
    chunks, sequences = packing or (None, None)
    count = None if packing is None else len(sequences)
    gated = g is not None
    plan = delta_backward_plan(batch, heads, n, d_k, d_v, v.dtype, chunk_size, arch, gated, count)
    options = {"chunk_size": chunk_size, "plan": plan, "packing": packing}
    a, w, u_free = delta_prepare(k, v, beta, g, store_a=True, arch=arch, **options)
    u = torch.empty_like(u_free)
    h, _ = delta_states(k, w, u_free, u, g, initial_state, **options)

    du = torch.empty_like(v)
    decayed = (None, None) if g is None else (torch.empty_like(k), torch.empty_like(do))
    grid, options = plan[delta_du_local_kernel]
    delta_du_local_kernel[grid](q, k, g, chunks, do, du, *decayed, *sizes, **options)
    k_walk, do_walk = (k, do) if g is None else decayed
    dh = torch.empty_like(h)
    ds0 = None if initial_state is None else torch.empty_like(initial_state)
    grid, options = plan[delta_states_bwd_kernel]
    walk = (q, k_walk, w, g, sequences, do_walk, ds_final, dh, du, ds0)
    delta_states_bwd_kernel[grid](*walk, *sizes, **options)
    del decayed, k_walk, do_walk

    dq = torch.empty_like(q)
    dk_partial, dw = torch.empty_like(q, dtype=torch.float32), torch.empty_like(q)
    grid, options = plan[delta_dqk_kernel]
    dg_partial = None if g is None else g.new_empty(grid[0], *g.shape, dtype=torch.float32)
    delta_dqk_kernel[grid](
        q, k, u, do, h, dh, du, g, chunks, dq, dk_partial, dw, dg_partial, *sizes, **options
    )
    del u, h, dh  # the last kernel allocates dk and dv: free what it does not read

    dk, dv, dbeta = torch.empty_like(k), torch.empty_like(v), torch.empty_like(beta)
    dg = None if g is None else torch.empty_like(g)
    grid, options = plan[delta_wy_kernel]
    inputs = (k, v, beta, a, w, u_free, dw, du, dk_partial, g, chunks, dg_partial)
    n_k = 0 if g is None else len(dg_partial)  # programs of delta_dqk_kernel along d_k
    delta_wy_kernel[grid](*inputs, dk, dv, dbeta, dg, n, n_k, d_k, d_v, chunk_size, **options)
    return dq, dk, dv, dbeta, ds0, dg
