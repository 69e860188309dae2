"""Puzzle 5, causal linear attention's numerator o_i = Σ_{j ≤ i} (q_i·k_j) v_j with the state
carried across chunks, grid (BH,): the bank."""

import triton
import triton.language as tl

from tests.exercises import Mutant


@triton.jit
def pointer_walk(q, k, v, o, N, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    hid = tl.program_id(0)
    q_base, k_base = q + hid * N * D, k + hid * N * D
    v_base, o_base = v + hid * N * DV, o + hid * N * DV
    fd, fv = tl.arange(0, D), tl.arange(0, DV)
    kv = tl.zeros([D, DV], dtype=tl.float32)
    for start in range(0, N, C):
        pos = start + tl.arange(0, C)
        live = pos[:, None] < N
        qc = tl.load(q_base + pos[:, None] * D + fd[None, :], mask=live, other=0.0)
        kc = tl.load(k_base + pos[:, None] * D + fd[None, :], mask=live, other=0.0)
        vc = tl.load(v_base + pos[:, None] * DV + fv[None, :], mask=live, other=0.0)
        att = tl.where(pos[:, None] >= pos[None, :], tl.dot(qc, tl.trans(kc)), 0.0)
        out = tl.dot(qc, kv) + tl.dot(att, vc)
        tl.store(o_base + pos[:, None] * DV + fv[None, :], out, mask=live)
        kv += tl.dot(tl.trans(kc), vc)


@triton.jit
def token_by_token(q, k, v, o, N, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    # the recurrent form, no chunks: S += k_iᵀ v_i, then o_i = q_i S
    head = tl.program_id(0)
    d, e = tl.arange(0, D), tl.arange(0, DV)
    state = tl.zeros([D, DV], dtype=tl.float32)
    for i in range(N):
        q_i = tl.load(q + (head * N + i) * D + d)
        k_i = tl.load(k + (head * N + i) * D + d)
        v_i = tl.load(v + (head * N + i) * DV + e)
        state += k_i[:, None] * v_i[None, :]
        tl.store(o + (head * N + i) * DV + e, tl.sum(q_i[:, None] * state, axis=0))


@triton.jit
def block_pointers_advanced(q, k, v, o, N, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    i_bh = tl.program_id(0)
    p_q = tl.make_block_ptr(q + i_bh * N * D, (N, D), (D, 1), (0, 0), (C, D), (1, 0))
    p_k = tl.make_block_ptr(k + i_bh * N * D, (N, D), (D, 1), (0, 0), (C, D), (1, 0))
    p_v = tl.make_block_ptr(v + i_bh * N * DV, (N, DV), (DV, 1), (0, 0), (C, DV), (1, 0))
    p_o = tl.make_block_ptr(o + i_bh * N * DV, (N, DV), (DV, 1), (0, 0), (C, DV), (1, 0))
    b_h = tl.zeros([D, DV], dtype=tl.float32)
    causal = tl.arange(0, C)[:, None] >= tl.arange(0, C)[None, :]
    for _ in range(tl.cdiv(N, C)):
        b_q = tl.load(p_q, boundary_check=(0,), padding_option="zero")
        b_k = tl.load(p_k, boundary_check=(0,), padding_option="zero")
        b_v = tl.load(p_v, boundary_check=(0,), padding_option="zero")
        b_s = tl.where(causal, tl.dot(b_q, tl.trans(b_k)), 0.0)
        tl.store(p_o, tl.dot(b_q, b_h) + tl.dot(b_s, b_v), boundary_check=(0,))
        b_h += tl.dot(tl.trans(b_k), b_v)
        p_q = tl.advance(p_q, (C, 0))
        p_k = tl.advance(p_k, (C, 0))
        p_v = tl.advance(p_v, (C, 0))
        p_o = tl.advance(p_o, (C, 0))


@triton.jit
def transposed_state_while(q, k, v, o, N, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    b = tl.program_id(0)
    cols_k, cols_v = tl.arange(0, D), tl.arange(0, DV)
    lower = (tl.arange(0, C)[:, None] >= tl.arange(0, C)[None, :]).to(tl.float32)
    s_t = tl.zeros([DV, D], dtype=tl.float32)  # Sᵀ = Σ v_jᵀ k_j
    t = 0
    while t * C < N:
        r = t * C + tl.arange(0, C)
        m = r[:, None] < N
        qq = tl.load(q + (b * N + r[:, None]) * D + cols_k[None, :], mask=m, other=0.0)
        kk = tl.load(k + (b * N + r[:, None]) * D + cols_k[None, :], mask=m, other=0.0)
        vv = tl.load(v + (b * N + r[:, None]) * DV + cols_v[None, :], mask=m, other=0.0)
        inter = tl.dot(qq, tl.trans(s_t))
        intra = tl.dot(tl.dot(qq, tl.trans(kk)) * lower, vv)
        tl.store(o + (b * N + r[:, None]) * DV + cols_v[None, :], inter + intra, mask=m)
        s_t += tl.dot(tl.trans(vv), kk)
        t += 1


@triton.jit
def load_rows(base, rows, N, WIDTH: tl.constexpr):
    return tl.load(base + rows[:, None] * WIDTH + tl.arange(0, WIDTH)[None, :],
                   mask=rows[:, None] < N, other=0.0)  # fmt: skip


@triton.jit
def with_a_helper(q, k, v, o, N, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    head = tl.program_id(0)
    q, k = q + head * N * D, k + head * N * D
    v, o = v + head * N * DV, o + head * N * DV
    state = tl.zeros([D, DV], dtype=tl.float32)
    for t in range(tl.cdiv(N, C)):
        rows = t * C + tl.arange(0, C)
        b_q, b_k, b_v = (
            load_rows(q, rows, N, D),
            load_rows(k, rows, N, D),
            load_rows(v, rows, N, DV),
        )
        scores = tl.dot(b_q, tl.trans(b_k))
        scores = tl.where(rows[:, None] >= rows[None, :], scores, 0.0)
        b_o = tl.dot(b_q, state) + tl.dot(scores, b_v)
        tl.store(o + rows[:, None] * DV + tl.arange(0, DV)[None, :], b_o, mask=rows[:, None] < N)
        state += tl.dot(tl.trans(b_k), b_v)


@triton.jit
def three_dimensional_descriptors(
    q, k, v, o, N, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr
):
    head = tl.program_id(0)
    BH = tl.num_programs(0)
    q_desc = tl.make_tensor_descriptor(q, [BH, N, D], [N * D, D, 1], [1, C, D])
    k_desc = tl.make_tensor_descriptor(k, [BH, N, D], [N * D, D, 1], [1, C, D])
    v_desc = tl.make_tensor_descriptor(v, [BH, N, DV], [N * DV, DV, 1], [1, C, DV])
    o_desc = tl.make_tensor_descriptor(o, [BH, N, DV], [N * DV, DV, 1], [1, C, DV])
    causal = tl.arange(0, C)[:, None] >= tl.arange(0, C)[None, :]
    h = tl.zeros([D, DV], dtype=tl.float32)
    for t in range(tl.cdiv(N, C)):
        b_q = q_desc.load([head, t * C, 0]).reshape(C, D)
        b_k = k_desc.load([head, t * C, 0]).reshape(C, D)
        b_v = v_desc.load([head, t * C, 0]).reshape(C, DV)
        s = tl.where(causal, tl.dot(b_q, tl.trans(b_k)), 0.0)
        o_desc.store([head, t * C, 0], (tl.dot(b_q, h) + tl.dot(s, b_v)).reshape(1, C, DV))
        h += tl.dot(tl.trans(b_k), b_v)


CORRECT = (
    pointer_walk,
    token_by_token,
    block_pointers_advanced,
    transposed_state_while,
    with_a_helper,
    three_dimensional_descriptors,
)

MISTAKES = (
    Mutant(
        transposed_state_while,
        (("        t += 1\n", ""),),
        "the kernel made more than 2,000 loads, stores and products in one program without "
        "finishing, the last at line 75",
    ),
    Mutant(
        pointer_walk,
        (
            ("        kv += tl.dot(tl.trans(kc), vc)\n", ""),
            (
                "        out = tl.dot(qc, kv)",
                "        kv += tl.dot(tl.trans(kc), vc)\n        out = tl.dot(qc, kv)",
            ),
        ),
        "rows see every key of their chunk, later ones included",
    ),
    Mutant(
        block_pointers_advanced,
        (("b_h += tl.dot", "b_h = tl.dot"),),
        "rows see only the previous chunk",
    ),
    Mutant(with_a_helper, (("tl.dot(b_q, state) + ", ""),), "rows see only their own chunk"),
    Mutant(
        transposed_state_while,
        (("tl.dot(qq, tl.trans(kk)) * lower", "tl.dot(qq, tl.trans(kk))"),),
        "rows see keys after them within their chunk",
    ),
    Mutant(
        three_dimensional_descriptors,
        (
            (
                "causal = tl.arange(0, C)[:, None] >= tl.arange",
                "causal = tl.arange(0, C)[:, None] > tl.arange",
            ),
        ),
        "the diagonal is masked out",
    ),
    Mutant(
        pointer_walk,
        (("pos[:, None] >= pos[None, :]", "pos[None, :] >= pos[:, None]"),),
        "the causal mask is flipped",
    ),
    Mutant(
        pointer_walk,
        (("kv += tl.dot(tl.trans(kc), vc)", "kv += tl.dot(tl.trans(qc), vc)"),),
        "the state sums q_jᵀ v_j: it sums the keys",
    ),
    Mutant(
        pointer_walk,
        (("fv[None, :], mask=live, other=0.0)", "fv[None, :], mask=live)"),),
        "has no other=, so masked-off lanes are undefined",
    ),
    Mutant(
        with_a_helper,
        (("mask=rows[:, None] < N, other=0.0)", "mask=rows[:, None] < N)"),),
        "the load at line 87, `tl.load(base + rows[:, None] * WIDTH + tl.arange(0, WIDTH)[None, "
        ":], mask=rows[:, None] < N)` has no other=",
    ),
    Mutant(
        transposed_state_while,
        (("while t * C < N", "while (t + 1) * C <= N"),),
        "the walk leaves out the last, ragged chunk",
    ),
    Mutant(
        pointer_walk,
        (
            (
                "v_base, o_base = v + hid * N * DV, o + hid * N * DV",
                "v_base, o_base = v + hid * N * D, o + hid * N * D",
            ),
        ),
        "head b of v and o is addressed at b·N·D",
    ),
    Mutant(
        block_pointers_advanced,
        (("tl.dot(b_s, b_v), boundary_check=(0,))", "tl.dot(b_s, b_v))"),),
        "stores rows 21–31 of head 1 of o, past N = 21",
    ),
    Mutant(
        block_pointers_advanced,
        (("        p_o = tl.advance(p_o, (C, 0))\n", ""),),
        "the loop never moves o",
    ),
    Mutant(
        token_by_token,
        (("tl.store(o + (head * N + i) * DV + e", "tl.store(o + (head * N + i) * D + e"),),
        "head b of o is addressed at b·N·D",
    ),
    Mutant(
        with_a_helper,
        (
            (
                "state += tl.dot(tl.trans(b_k), b_v)",
                "state += tl.dot(tl.trans(b_k.to(tl.float16)), b_v.to(tl.float16))",
            ),
        ),
        "the kernel rounds to float16 at line 108, `b_k.to(tl.float16)`",
    ),
    Mutant(
        pointer_walk,
        (("qc = tl.load(q_base", "qc = tl.load(k_base"),),
        "the queries are loaded from k",
        "look at line 20, `tl.load(k_base",
    ),
    Mutant(
        pointer_walk,
        (("pos[:, None] >= pos[None, :]", "pos[:, None] >= tl.arange(0, C)[None, :]"),),
        "the causal mask compares a place in the sequence with a place in the chunk",
        "look at line 23, `pos[:, None] >= tl.arange(0, C)[None, :]`",
    ),
    Mutant(
        pointer_walk,
        (
            (
                "    for start in range(0, N, C):\n",
                "    for start in range(0, N, C):\n"
                "        kv = tl.zeros([D, DV], dtype=tl.float32)\n",
            ),
        ),
        "rows see only their own chunk",
        "look at line 18, `kv = tl.zeros([D, DV], dtype=tl.float32)`",
    ),
)
