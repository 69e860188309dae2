"""Puzzle 2, the causal scores s[t, i, j] = q_{tC+i}·k_{tC+j} (j ≤ i) of every chunk: the bank."""

import triton
import triton.language as tl

from tests.exercises import Mutant


@triton.jit
def global_positions(q, k, s, N, D: tl.constexpr, C: tl.constexpr):
    chunk = tl.program_id(0)
    pos = chunk * C + tl.arange(0, C)
    feat = tl.arange(0, D)
    ok = pos[:, None] < N
    a = tl.load(q + pos[:, None] * D + feat[None, :], mask=ok, other=0.0)
    b = tl.load(k + pos[:, None] * D + feat[None, :], mask=ok, other=0.0)
    scores = tl.dot(a, tl.trans(b))
    scores = tl.where(pos[:, None] >= pos[None, :], scores, 0.0)
    block = tl.arange(0, C)[:, None] * C + tl.arange(0, C)[None, :]
    tl.store(s + chunk * C * C + block, scores)


@triton.jit
def mask_arithmetic(q, k, s, N, D: tl.constexpr, C: tl.constexpr):
    t = tl.program_id(0)
    i = tl.arange(0, C)
    rows = t * C + i
    cols = tl.arange(0, D)
    b_q = tl.load(q + rows[:, None] * D + cols[None, :], mask=rows[:, None] < N, other=0.0)
    b_k = tl.load(k + rows[:, None] * D + cols[None, :], mask=rows[:, None] < N, other=0.0)
    lower = (i[:, None] >= i[None, :]).to(tl.float32)
    out = s + t * C * C + i[:, None] * C + i[None, :]
    tl.store(out, tl.dot(b_q, tl.trans(b_k)) * lower)


@triton.jit
def broadcast_and_sum(q, k, s, N, D: tl.constexpr, C: tl.constexpr):
    t = tl.program_id(0)
    r = t * C + tl.arange(0, C)
    f = tl.arange(0, D)
    q_tile = tl.load(q + r[:, None] * D + f[None, :], mask=r[:, None] < N, other=0.0)
    k_tile = tl.load(k + r[:, None] * D + f[None, :], mask=r[:, None] < N, other=0.0)
    products = q_tile[:, None, :] * k_tile[None, :, :]  # [C, C, D]
    scores = tl.sum(products, axis=2)
    i = tl.arange(0, C)
    tl.store(
        s + t * C * C + i[:, None] * C + i[None, :], tl.where(i[:, None] >= i[None, :], scores, 0)
    )


@triton.jit
def block_pointers(q, k, s, N, D: tl.constexpr, C: tl.constexpr):
    t = tl.program_id(0)
    p_q = tl.make_block_ptr(q, (N, D), (D, 1), (t * C, 0), (C, D), (1, 0))
    p_kt = tl.make_block_ptr(k, (D, N), (1, D), (0, t * C), (D, C), (0, 1))  # kᵀ
    p_s = tl.make_block_ptr(s + t * C * C, (C, C), (C, 1), (0, 0), (C, C), (1, 0))
    b_q = tl.load(p_q, boundary_check=(0,), padding_option="zero")
    b_kt = tl.load(p_kt, boundary_check=(1,), padding_option="zero")
    i = tl.arange(0, C)
    tl.store(p_s, tl.where(i[:, None] >= i[None, :], tl.dot(b_q, b_kt), 0.0))


@triton.jit
def tensor_descriptors(q, k, s, N, D: tl.constexpr, C: tl.constexpr):
    t = tl.program_id(0)
    q_desc = tl.make_tensor_descriptor(q, [N, D], [D, 1], [C, D])
    k_desc = tl.make_tensor_descriptor(k, [N, D], [D, 1], [C, D])
    s_desc = tl.make_tensor_descriptor(s, [tl.cdiv(N, C) * C, C], [C, 1], [C, C])
    dots = tl.dot(q_desc.load([t * C, 0]), tl.trans(k_desc.load([t * C, 0])))
    i = tl.arange(0, C)
    s_desc.store([t * C, 0], tl.where(i[:, None] >= i[None, :], dots, 0.0))


CORRECT = (global_positions, mask_arithmetic, broadcast_and_sum, block_pointers, tensor_descriptors)

MISTAKES = (
    Mutant(
        global_positions,
        (("scores = tl.where(pos[:, None] >= pos[None, :], scores, 0.0)", ""),),
        "queries see keys after them within their chunk",
    ),
    Mutant(
        mask_arithmetic,
        (("i[:, None] >= i[None, :]", "i[:, None] > i[None, :]"),),
        "the diagonal is masked out",
    ),
    Mutant(
        broadcast_and_sum,
        (("tl.where(i[:, None] >= i[None, :]", "tl.where(i[:, None] <= i[None, :]"),),
        "the causal mask is flipped",
    ),
    Mutant(
        block_pointers, (("tl.dot(b_q, b_kt)", "tl.trans(tl.dot(b_q, b_kt))"),), "s holds k_i·q_j"
    ),
    Mutant(
        global_positions,
        (("mask=ok, other=0.0", ""),),
        "program 1 loads rows 21–31 of q, past N = 21",
    ),
    Mutant(
        global_positions,
        (
            (
                "a = tl.load(q + pos[:, None] * D + feat[None, :], mask=ok, other=0.0)",
                "a = tl.load(q + pos[:, None] * D + feat[None, :], mask=ok)",
            ),
        ),
        "has no other=, so masked-off lanes are undefined (NaN here) and reach the result",
    ),
    Mutant(
        mask_arithmetic,
        (("mask=rows[:, None] < N, other=0.0)\n    lower", "mask=rows[:, None] < N)\n    lower"),),
        "s: the score block of chunk 1 is NaN: the load at line 30",
    ),
    Mutant(
        global_positions, (("s + chunk * C * C", "s + chunk * C"),), "program t addresses s at t·C"
    ),
    Mutant(
        mask_arithmetic,
        (("i[:, None] * C + i[None, :]", "i[:, None] * D + i[None, :]"),),
        "the rows of s are addressed D elements apart",
    ),
    Mutant(
        broadcast_and_sum,
        (("q + r[:, None] * D", "q + r[:, None] * C"),),
        "the rows of q are addressed C elements apart",
    ),
    Mutant(
        block_pointers,
        (
            (
                'b_kt = tl.load(p_kt, boundary_check=(1,), padding_option="zero")',
                "b_kt = tl.load(p_kt)",
            ),
        ),
        "program 1 loads rows 21–31 of k, past N = 21",
    ),
    Mutant(
        tensor_descriptors,
        (("s_desc.store([t * C, 0]", "s_desc.store([t, 0]"),),
        "program t addresses s at t·C",
    ),
    Mutant(
        global_positions,
        (("s + chunk * C * C + block, scores)", "s + chunk * C * C + block, scores, mask=ok)"),),
        "the store is masked at row N",
        "line 14, `ok = pos[:, None] < N`",
    ),
    Mutant(
        mask_arithmetic,
        (("b_q = tl.load(q + rows", "b_q = tl.load(k + rows"),),
        "the queries are loaded from k",
        "look at line 29, `tl.load(k + rows",
    ),
    Mutant(
        global_positions,
        (("pos[:, None] >= pos[None, :]", "pos[:, None] >= tl.arange(0, C)[None, :]"),),
        "the causal mask compares a place in the sequence with a place in the chunk",
        "look at line 18, `pos[:, None] >= tl.arange(0, C)[None, :]`",
    ),
    Mutant(
        global_positions,
        (("tl.dot(a, tl.trans(b))", "tl.dot(a, b)"),),
        "multiplies a [C, D] by b [C, D], but the columns of the first (D) must match the rows "
        "of the second (C): tl.dot(a, tl.trans(b))?",
        "line 17, `tl.dot(a, b)`",
    ),
)
