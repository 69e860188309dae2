"""Puzzle 3, o_t = tril(Q_t K_tᵀ) V_t for every chunk t and head, grid (NT, BH): the bank."""

import triton
import triton.language as tl

from tests.exercises import Mutant


@triton.jit
def advanced_pointers(q, k, v, o, N, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    chunk = tl.program_id(0)
    bh = tl.program_id(1)
    q += bh * N * D
    k += bh * N * D
    v += bh * N * DV
    o += bh * N * DV
    offs = chunk * C + tl.arange(0, C)
    keep = offs[:, None] < N
    fd = tl.arange(0, D)[None, :]
    fv = tl.arange(0, DV)[None, :]
    a = tl.load(q + offs[:, None] * D + fd, mask=keep, other=0.0)
    b = tl.load(k + offs[:, None] * D + fd, mask=keep, other=0.0)
    c = tl.load(v + offs[:, None] * DV + fv, mask=keep, other=0.0)
    attn = tl.dot(a, tl.trans(b))
    attn = tl.where(offs[:, None] >= offs[None, :], attn, 0.0)
    tl.store(o + offs[:, None] * DV + fv, tl.dot(attn, c), mask=keep)


@triton.jit
def block_pointers(q, k, v, o, N, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    t, h = tl.program_id(0), tl.program_id(1)
    p_q = tl.make_block_ptr(q + h * N * D, (N, D), (D, 1), (t * C, 0), (C, D), (1, 0))
    p_k = tl.make_block_ptr(k + h * N * D, (D, N), (1, D), (0, t * C), (D, C), (0, 1))
    p_v = tl.make_block_ptr(v + h * N * DV, (N, DV), (DV, 1), (t * C, 0), (C, DV), (1, 0))
    p_o = tl.make_block_ptr(o + h * N * DV, (N, DV), (DV, 1), (t * C, 0), (C, DV), (1, 0))
    b_q = tl.load(p_q, boundary_check=(0, 1), padding_option="zero")
    b_kt = tl.load(p_k, boundary_check=(0, 1), padding_option="zero")
    b_v = tl.load(p_v, boundary_check=(0, 1), padding_option="zero")
    i = tl.arange(0, C)
    b_s = tl.where(i[:, None] >= i[None, :], tl.dot(b_q, b_kt), 0.0)
    tl.store(p_o, tl.dot(b_s, b_v), boundary_check=(0, 1))


@triton.jit
def three_dimensional_descriptors(
    q, k, v, o, N, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr
):
    t, head = tl.program_id(0), tl.program_id(1)
    BH = tl.num_programs(1)
    q_desc = tl.make_tensor_descriptor(q, [BH, N, D], [N * D, D, 1], [1, C, D])
    k_desc = tl.make_tensor_descriptor(k, [BH, N, D], [N * D, D, 1], [1, C, D])
    v_desc = tl.make_tensor_descriptor(v, [BH, N, DV], [N * DV, DV, 1], [1, C, DV])
    o_desc = tl.make_tensor_descriptor(o, [BH, N, DV], [N * DV, DV, 1], [1, C, DV])
    b_q = q_desc.load([head, t * C, 0]).reshape(C, D)
    b_k = k_desc.load([head, t * C, 0]).reshape(C, D)
    b_v = v_desc.load([head, t * C, 0]).reshape(C, DV)
    i = tl.arange(0, C)
    s = tl.where(i[:, None] >= i[None, :], tl.dot(b_q, tl.trans(b_k)), 0.0)
    o_desc.store([head, t * C, 0], tl.dot(s, b_v).reshape(1, C, DV))


@triton.jit
def mask_arithmetic(q, k, v, o, N, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    t = tl.program_id(0)
    b = tl.program_id(1)
    rows = t * C + tl.arange(0, C)
    valid = rows[:, None] < N
    d = tl.arange(0, D)
    e = tl.arange(0, DV)
    qt = tl.load(q + b * N * D + rows[:, None] * D + d[None, :], mask=valid, other=0.0)
    kt = tl.load(k + b * N * D + rows[:, None] * D + d[None, :], mask=valid, other=0.0)
    vt = tl.load(v + b * N * DV + rows[:, None] * DV + e[None, :], mask=valid, other=0.0)
    causal = tl.arange(0, C)[:, None] >= tl.arange(0, C)[None, :]
    scores = tl.dot(qt, tl.trans(kt)) * causal
    tl.store(o + b * N * DV + rows[:, None] * DV + e[None, :], tl.dot(scores, vt), mask=valid)


@triton.jit
def broadcast_and_sum_in_float64(q, k, v, o, N, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    t, head = tl.program_id(0), tl.program_id(1)
    n = t * C + tl.arange(0, C)
    inside = n[:, None] < N
    fk = tl.arange(0, D)
    fv = tl.arange(0, DV)
    qq = tl.load(q + (head * N + n[:, None]) * D + fk[None, :], mask=inside, other=0.0)
    kk = tl.load(k + (head * N + n[:, None]) * D + fk[None, :], mask=inside, other=0.0)
    vv = tl.load(v + (head * N + n[:, None]) * DV + fv[None, :], mask=inside, other=0.0)
    qq, kk, vv = qq.to(tl.float64), kk.to(tl.float64), vv.to(tl.float64)
    a = tl.sum(qq[:, None, :] * kk[None, :, :], axis=2)  # [C, C]
    a = tl.where(n[:, None] >= n[None, :], a, 0.0)
    out = tl.sum(a[:, :, None] * vv[None, :, :], axis=1)  # [C, DV]
    tl.store(o + (head * N + n[:, None]) * DV + fv[None, :], out, mask=inside)


CORRECT = (
    advanced_pointers,
    block_pointers,
    three_dimensional_descriptors,
    mask_arithmetic,
    broadcast_and_sum_in_float64,
)

MISTAKES = (
    Mutant(
        advanced_pointers,
        (("    attn = tl.where(offs[:, None] >= offs[None, :], attn, 0.0)\n", ""),),
        "rows see keys after them within their chunk",
    ),
    Mutant(
        mask_arithmetic,
        (("[:, None] >= tl.arange", "[:, None] > tl.arange"),),
        "the diagonal is masked out",
    ),
    Mutant(
        block_pointers,
        (("i[:, None] >= i[None, :]", "i[:, None] <= i[None, :]"),),
        "the causal mask is flipped",
    ),
    Mutant(
        advanced_pointers,
        (
            (
                "    q += bh * N * D\n    k += bh * N * D\n"
                "    v += bh * N * DV\n    o += bh * N * DV\n",
                "",
            ),
        ),
        "every program addresses head 0 of q, k, v and o (lines 17, 18, 19 and 22): move the "
        "pointers to the program's own head first, q + head·N·D, k + head·N·D, v + head·N·DV, "
        "o + head·N·DV",
    ),
    Mutant(
        advanced_pointers,
        (("v += bh * N * DV\n    o += bh * N * DV", "v += bh * N * D\n    o += bh * N * D"),),
        "head b of v and o is addressed at b·N·D (lines 15 and 16), but heads are N·DV elements "
        "apart",
    ),
    Mutant(
        mask_arithmetic,
        (
            (
                "t = tl.program_id(0)\n    b = tl.program_id(1)",
                "t = tl.program_id(1)\n    b = tl.program_id(0)",
            ),
        ),
        "are addressed with the program ids swapped",
    ),
    Mutant(
        broadcast_and_sum_in_float64,
        (
            (
                "(head * N + n[:, None]) * DV + fv[None, :], mask=inside, other",
                "(head * N + n[:, None]) * D + fv[None, :], mask=inside, other",
            ),
        ),
        "the rows of v are addressed D elements apart",
    ),
    Mutant(
        advanced_pointers,
        ((", tl.dot(attn, c), mask=keep)", ", tl.dot(attn, c))"),),
        "stores rows 21–31 of head 1 of o, past N = 21",
    ),
    Mutant(
        mask_arithmetic,
        (
            (
                "rows[:, None] * DV + e[None, :], mask=valid, other=0.0)",
                "rows[:, None] * DV + e[None, :])",
            ),
        ),
        "loads rows 21–31 of head 1 of v, past N = 21",
    ),
    Mutant(
        advanced_pointers,
        (("fv, mask=keep, other=0.0)", "fv, mask=keep)"),),
        "has no other=, so masked-off lanes are undefined",
    ),
    Mutant(
        mask_arithmetic,
        (
            (
                "d[None, :], mask=valid, other=0.0)\n    vt",
                "d[None, :], mask=valid)\n    vt",
            ),
        ),
        "o: rows 16–20 (chunk 1) of every head are NaN: the load at line 71",
    ),
    Mutant(
        block_pointers,
        (
            (
                'b_v = tl.load(p_v, boundary_check=(0, 1), padding_option="zero")',
                "b_v = tl.load(p_v, boundary_check=(0, 1))",
            ),
        ),
        "has no padding_option, so masked-off lanes are undefined (NaN here) and reach the "
        'result: give it padding_option="zero"',
    ),
    Mutant(
        three_dimensional_descriptors,
        (
            (
                "o_desc = tl.make_tensor_descriptor(o, [BH, N, DV], [N * DV, DV, 1], [1, C, DV])",
                "o_desc = tl.make_tensor_descriptor(o, [1, BH * N, DV], [N * DV, DV, 1], "
                "[1, C, DV])",
            ),
            ("o_desc.store([head, t * C, 0]", "o_desc.store([0, head * N + t * C, 0]"),
        ),
        "stores rows 21–31 of head 0 of o, past N = 21, which are head 1's",
    ),
    Mutant(
        mask_arithmetic,
        (("rows = t * C + tl.arange(0, C)", "rows = t * D + tl.arange(0, C)"),),
        "program t starts q, k, v and o at row t·D",
    ),
    Mutant(
        advanced_pointers,
        (
            (
                "attn = tl.dot(a, tl.trans(b))",
                "attn = tl.dot(a.to(tl.float16), tl.trans(b.to(tl.float16)))",
            ),
        ),
        "o is off by",
        "the kernel rounds to float16 at line 24, `a.to(tl.float16)` and line 24, "
        "`b.to(tl.float16)`, and without those roundings it is right",
    ),
    Mutant(
        advanced_pointers,
        (("q += bh * N * D\n    k += bh * N * D", "q += bh * C * D\n    k += bh * C * D"),),
        "head b of q and k is addressed at b·C·D (lines 13 and 14), but heads are N·D elements "
        "apart",
    ),
    Mutant(
        advanced_pointers,
        (("a = tl.load(q + offs", "a = tl.load(k + offs"),),
        "the queries are loaded from k",
        "look at line 21, `tl.load(k + offs",
    ),
    Mutant(
        mask_arithmetic,
        (
            (
                "tl.arange(0, C)[:, None] >= tl.arange(0, C)[None, :]",
                "tl.arange(0, C)[:, None] >= rows[None, :]",
            ),
        ),
        "the causal mask compares a place in the sequence with a place in the chunk",
        "look at line 73, `tl.arange(0, C)[:, None] >= rows[None, :]`",
    ),
)
