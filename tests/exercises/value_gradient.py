"""Puzzle 7, one backward tile dv_j = k_j dh[t + 1] + Σ_{i ≥ j in chunk t} (q_i·k_j) do_i, grid
(NT, BH): the bank."""

import triton
import triton.language as tl

from tests.exercises import Mutant


@triton.jit
def scores_then_transpose(q, k, do, dh, dv, N, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    t = tl.program_id(0)
    bh = tl.program_id(1)
    nt = tl.cdiv(N, C)
    rows = t * C + tl.arange(0, C)
    live = rows[:, None] < N
    a, b = tl.arange(0, D), tl.arange(0, DV)
    qq = tl.load(q + (bh * N + rows[:, None]) * D + a[None, :], mask=live, other=0.0)
    kk = tl.load(k + (bh * N + rows[:, None]) * D + a[None, :], mask=live, other=0.0)
    gg = tl.load(do + (bh * N + rows[:, None]) * DV + b[None, :], mask=live, other=0.0)
    after = dh + (bh * (nt + 1) + t + 1) * D * DV
    state = tl.load(after + a[:, None] * DV + b[None, :])
    s = tl.where(rows[:, None] >= rows[None, :], tl.dot(qq, tl.trans(kk)), 0.0)  # [i, j]
    out = tl.dot(tl.trans(s), gg) + tl.dot(kk, state)
    tl.store(dv + (bh * N + rows[:, None]) * DV + b[None, :], out, mask=live)


@triton.jit
def block_pointers(q, k, do, dh, dv, N, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    NT = tl.cdiv(N, C)
    p_q = tl.make_block_ptr(q + i_bh * N * D, (N, D), (D, 1), (i_t * C, 0), (C, D), (1, 0))
    p_k = tl.make_block_ptr(k + i_bh * N * D, (N, D), (D, 1), (i_t * C, 0), (C, D), (1, 0))
    p_do = tl.make_block_ptr(do + i_bh * N * DV, (N, DV), (DV, 1), (i_t * C, 0), (C, DV), (1, 0))
    p_dv = tl.make_block_ptr(dv + i_bh * N * DV, (N, DV), (DV, 1), (i_t * C, 0), (C, DV), (1, 0))
    p_dh = tl.make_block_ptr(
        dh + (i_bh * (NT + 1) + i_t + 1) * D * DV, (D, DV), (DV, 1), (0, 0), (D, DV), (1, 0)
    )
    b_q = tl.load(p_q, boundary_check=(0,), padding_option="zero")
    b_k = tl.load(p_k, boundary_check=(0,), padding_option="zero")
    b_do = tl.load(p_do, boundary_check=(0,), padding_option="zero")
    b_dh = tl.load(p_dh)
    m = tl.arange(0, C)[:, None] <= tl.arange(0, C)[None, :]  # [j, i]: query i at or after j
    b_a = tl.where(m, tl.dot(b_k, tl.trans(b_q)), 0.0)
    tl.store(p_dv, tl.dot(b_a, b_do) + tl.dot(b_k, b_dh), boundary_check=(0,))


@triton.jit
def broadcast_state_term(q, k, do, dh, dv, N, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    chunk, head = tl.program_id(0), tl.program_id(1)
    n_chunks = tl.cdiv(N, C)
    q, k = q + head * N * D, k + head * N * D
    do, dv = do + head * N * DV, dv + head * N * DV
    dh = dh + head * (n_chunks + 1) * D * DV
    j = chunk * C + tl.arange(0, C)
    inside = j[:, None] < N
    fk, fv = tl.arange(0, D), tl.arange(0, DV)
    b_q = tl.load(q + j[:, None] * D + fk[None, :], mask=inside, other=0.0)
    b_k = tl.load(k + j[:, None] * D + fk[None, :], mask=inside, other=0.0)
    b_g = tl.load(do + j[:, None] * DV + fv[None, :], mask=inside, other=0.0)
    later = tl.load(dh + (chunk + 1) * D * DV + fk[:, None] * DV + fv[None, :])
    from_later = tl.sum(b_k[:, :, None] * later[None, :, :], axis=1)  # [C, DV]
    kq = tl.dot(b_k, tl.trans(b_q))  # [j, i]
    kq = tl.where(j[:, None] <= j[None, :], kq, 0.0)
    tl.store(dv + j[:, None] * DV + fv[None, :], from_later + tl.dot(kq, b_g), mask=inside)


@triton.jit
def mask_arithmetic_in_float64(
    q, k, do, dh, dv, N, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr
):
    t = tl.program_id(0)
    h = tl.program_id(1)
    rows = t * C + tl.arange(0, C)
    m = rows[:, None] < N
    d, e = tl.arange(0, D), tl.arange(0, DV)
    b_q = tl.load(q + h * N * D + rows[:, None] * D + d[None, :], mask=m, other=0.0)
    b_k = tl.load(k + h * N * D + rows[:, None] * D + d[None, :], mask=m, other=0.0)
    b_do = tl.load(do + h * N * DV + rows[:, None] * DV + e[None, :], mask=m, other=0.0)
    b_dh = tl.load(dh + ((h * (tl.cdiv(N, C) + 1) + t + 1) * D + d[:, None]) * DV + e[None, :])
    b_q, b_k, b_do, b_dh = (
        b_q.to(tl.float64),
        b_k.to(tl.float64),
        b_do.to(tl.float64),
        b_dh.to(tl.float64),
    )
    upper = (tl.arange(0, C)[:, None] <= tl.arange(0, C)[None, :]).to(tl.float64)
    b_dv = tl.dot(tl.dot(b_k, tl.trans(b_q)) * upper, b_do) + tl.dot(b_k, b_dh)
    tl.store(dv + h * N * DV + rows[:, None] * DV + e[None, :], b_dv, mask=m)


@triton.jit
def tensor_descriptors(q, k, do, dh, dv, N, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    t, head = tl.program_id(0), tl.program_id(1)
    BH = tl.num_programs(1)
    NT = tl.cdiv(N, C)
    q_desc = tl.make_tensor_descriptor(q, [BH, N, D], [N * D, D, 1], [1, C, D])
    k_desc = tl.make_tensor_descriptor(k, [BH, N, D], [N * D, D, 1], [1, C, D])
    do_desc = tl.make_tensor_descriptor(do, [BH, N, DV], [N * DV, DV, 1], [1, C, DV])
    dv_desc = tl.make_tensor_descriptor(dv, [BH, N, DV], [N * DV, DV, 1], [1, C, DV])
    dh_desc = tl.make_tensor_descriptor(
        dh, [BH, NT + 1, D, DV], [(NT + 1) * D * DV, D * DV, DV, 1], [1, 1, D, DV]
    )
    b_q = q_desc.load([head, t * C, 0]).reshape(C, D)
    b_k = k_desc.load([head, t * C, 0]).reshape(C, D)
    b_do = do_desc.load([head, t * C, 0]).reshape(C, DV)
    b_dh = dh_desc.load([head, t + 1, 0, 0]).reshape(D, DV)
    s = tl.dot(b_q, tl.trans(b_k))  # [i, j]
    s = tl.where(tl.arange(0, C)[:, None] >= tl.arange(0, C)[None, :], s, 0.0)
    b_dv = tl.dot(tl.trans(s), b_do) + tl.dot(b_k, b_dh)
    dv_desc.store([head, t * C, 0], b_dv.reshape(1, C, DV))


CORRECT = (
    scores_then_transpose,
    block_pointers,
    broadcast_state_term,
    mask_arithmetic_in_float64,
    tensor_descriptors,
)

MISTAKES = (
    Mutant(
        tensor_descriptors,
        (("[(NT + 1) * D * DV, D * DV, DV, 1]", "[(NT + 1) * D * D, D * DV, DV, 1]"),),
        "head b of dh is addressed at b·(NT + 1)·D·D",
    ),
    Mutant(
        scores_then_transpose,
        (("rows[:, None] >= rows[None, :]", "rows[:, None] <= rows[None, :]"),),
        "key j collects gradients from queries before it",
    ),
    Mutant(
        block_pointers,
        (
            (
                "m = tl.arange(0, C)[:, None] <= tl.arange",
                "m = tl.arange(0, C)[:, None] < tl.arange",
            ),
        ),
        "key j misses the gradient of its own query",
    ),
    Mutant(
        broadcast_state_term,
        (("    kq = tl.where(j[:, None] <= j[None, :], kq, 0.0)\n", ""),),
        "key j collects gradients from every query of its chunk",
    ),
    Mutant(
        mask_arithmetic_in_float64,
        (("+ t + 1) * D + d[:, None]", "+ t) * D + d[:, None]"),),
        "the state term uses dh[t]",
    ),
    Mutant(
        tensor_descriptors,
        (("+ tl.dot(b_k, b_dh)", ""),),
        "rows miss the gradient from later chunks",
    ),
    Mutant(
        scores_then_transpose,
        (("+ tl.dot(kk, state)", "+ tl.dot(qq, state)"),),
        "the state term multiplies q_j",
    ),
    Mutant(
        broadcast_state_term,
        (("dh = dh + head * (n_chunks + 1) * D * DV", "dh = dh + head * n_chunks * D * DV"),),
        "head b of dh is addressed at b·NT·D·DV",
    ),
    Mutant(
        mask_arithmetic_in_float64,
        (
            (
                "t = tl.program_id(0)\n    h = tl.program_id(1)",
                "t = tl.program_id(1)\n    h = tl.program_id(0)",
            ),
        ),
        "are addressed with the program ids swapped",
    ),
    Mutant(
        scores_then_transpose,
        (("b[None, :], mask=live, other=0.0)", "b[None, :], mask=live)"),),
        "has no other=, so masked-off lanes are undefined",
    ),
    Mutant(
        broadcast_state_term,
        (
            (
                "b_q = tl.load(q + j[:, None] * D + fk[None, :], mask=inside, other=0.0)",
                "b_q = tl.load(q + j[:, None] * D + fk[None, :], mask=inside)",
            ),
        ),
        "has no other=, so masked-off lanes are undefined",
    ),
    Mutant(
        block_pointers,
        (("tl.dot(b_k, b_dh), boundary_check=(0,))", "tl.dot(b_k, b_dh))"),),
        "stores rows 21–31 of head 1 of dv, past N = 21",
    ),
    Mutant(
        scores_then_transpose,
        (
            (
                "state = tl.load(after + a[:, None] * DV + b[None, :])",
                "state = tl.load(after + a[:, None] * D + b[None, :])",
            ),
        ),
        "the rows of dh are addressed D elements apart",
    ),
    Mutant(
        broadcast_state_term,
        (
            (
                "do, dv = do + head * N * DV, dv + head * N * DV",
                "do, dv = do + head * N * D, dv + head * N * DV",
            ),
        ),
        "head b of do is addressed at b·N·D",
    ),
    Mutant(
        scores_then_transpose,
        (("qq = tl.load(q + (bh", "qq = tl.load(k + (bh"),),
        "the queries are loaded from k",
        "look at line 18, `tl.load(k + (bh",
    ),
    Mutant(
        block_pointers,
        (("p_q = tl.make_block_ptr(q + i_bh * N * D", "p_q = tl.make_block_ptr(q + i_bh * C * D"),),
        "head b of q is addressed at b·C·D",
        "line 32, `p_q = tl.make_block_ptr(q + i_bh * C * D",
    ),
)
