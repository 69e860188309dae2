"""Puzzle 6, normalized causal linear attention o_i = Σ_{j ≤ i} (q_i·k_j) v_j / (Σ_{j ≤ i} q_i·k_j
+ eps), grid (BH,): the bank."""

import triton
import triton.language as tl

from tests.exercises import Mutant


@triton.jit
def carried_key_sum(q, k, v, o, N, eps, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    head = tl.program_id(0)
    qh, kh = q + head * N * D, k + head * N * D
    vh, oh = v + head * N * DV, o + head * N * DV
    fd, fv = tl.arange(0, D), tl.arange(0, DV)
    kv = tl.zeros([D, DV], dtype=tl.float32)
    z = tl.zeros([D], dtype=tl.float32)
    for c in range(tl.cdiv(N, C)):
        pos = c * C + tl.arange(0, C)
        live = pos[:, None] < N
        qc = tl.load(qh + pos[:, None] * D + fd[None, :], mask=live, other=0.0)
        kc = tl.load(kh + pos[:, None] * D + fd[None, :], mask=live, other=0.0)
        vc = tl.load(vh + pos[:, None] * DV + fv[None, :], mask=live, other=0.0)
        a = tl.where(pos[:, None] >= pos[None, :], tl.dot(qc, tl.trans(kc)), 0.0)
        num = tl.dot(qc, kv) + tl.dot(a, vc)
        den = tl.sum(qc * z[None, :], axis=1) + tl.sum(a, axis=1) + eps
        tl.store(oh + pos[:, None] * DV + fv[None, :], num / den[:, None], mask=live)
        kv += tl.dot(tl.trans(kc), vc)
        z += tl.sum(kc, axis=0)


@triton.jit
def cumulative_key_sum(q, k, v, o, N, eps, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    # z_i = Σ_{j ≤ i} k_j for every row at once, the key sum before the chunk plus a cumsum
    b = tl.program_id(0)
    d, e = tl.arange(0, D), tl.arange(0, DV)
    state = tl.zeros([D, DV], dtype=tl.float32)
    before = tl.zeros([D], dtype=tl.float32)
    for t in range(tl.cdiv(N, C)):
        rows = t * C + tl.arange(0, C)
        ok = rows[:, None] < N
        b_q = tl.load(q + (b * N + rows[:, None]) * D + d[None, :], mask=ok, other=0.0)
        b_k = tl.load(k + (b * N + rows[:, None]) * D + d[None, :], mask=ok, other=0.0)
        b_v = tl.load(v + (b * N + rows[:, None]) * DV + e[None, :], mask=ok, other=0.0)
        z_rows = before[None, :] + tl.cumsum(b_k, axis=0)  # [C, D]
        scores = tl.dot(b_q, tl.trans(b_k))
        scores = tl.where(rows[:, None] >= rows[None, :], scores, 0.0)
        top = tl.dot(b_q, state) + tl.dot(scores, b_v)
        bottom = tl.sum(b_q * z_rows, axis=1) + eps
        tl.store(o + (b * N + rows[:, None]) * DV + e[None, :], top / bottom[:, None], mask=ok)
        state += tl.dot(tl.trans(b_k), b_v)
        before += tl.sum(b_k, axis=0)


@triton.jit
def block_pointers_reciprocal(
    q, k, v, o, N, eps, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr
):
    i_bh = tl.program_id(0)
    p_q = tl.make_block_ptr(q + i_bh * N * D, (N, D), (D, 1), (0, 0), (C, D), (1, 0))
    p_k = tl.make_block_ptr(k + i_bh * N * D, (N, D), (D, 1), (0, 0), (C, D), (1, 0))
    p_v = tl.make_block_ptr(v + i_bh * N * DV, (N, DV), (DV, 1), (0, 0), (C, DV), (1, 0))
    p_o = tl.make_block_ptr(o + i_bh * N * DV, (N, DV), (DV, 1), (0, 0), (C, DV), (1, 0))
    b_h = tl.zeros([D, DV], dtype=tl.float32)
    b_z = tl.zeros([D], dtype=tl.float32)
    m_s = tl.arange(0, C)[:, None] >= tl.arange(0, C)[None, :]
    for _ in range(tl.cdiv(N, C)):
        b_q = tl.load(p_q, boundary_check=(0,), padding_option="zero")
        b_k = tl.load(p_k, boundary_check=(0,), padding_option="zero")
        b_v = tl.load(p_v, boundary_check=(0,), padding_option="zero")
        b_s = tl.where(m_s, tl.dot(b_q, tl.trans(b_k)), 0.0)
        b_r = 1.0 / (tl.sum(b_q * b_z[None, :], 1) + tl.sum(b_s, 1) + eps)
        b_o = (tl.dot(b_q, b_h) + tl.dot(b_s, b_v)) * b_r[:, None]
        tl.store(p_o, b_o, boundary_check=(0,))
        b_h += tl.dot(tl.trans(b_k), b_v)
        b_z += tl.sum(b_k, 0)
        p_q, p_k = tl.advance(p_q, (C, 0)), tl.advance(p_k, (C, 0))
        p_v, p_o = tl.advance(p_v, (C, 0)), tl.advance(p_o, (C, 0))


@triton.jit
def transposed_state_in_float64(
    q, k, v, o, N, eps, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr
):
    head = tl.program_id(0)
    q, k = q + head * N * D, k + head * N * D
    v, o = v + head * N * DV, o + head * N * DV
    i = tl.arange(0, C)
    kd, vd = tl.arange(0, D), tl.arange(0, DV)
    s_t = tl.zeros([DV, D], dtype=tl.float64)  # Sᵀ
    z = tl.zeros([D], dtype=tl.float64)
    t = 0
    while t * C < N:
        r = t * C + i
        m = r[:, None] < N
        qt = tl.load(q + r[:, None] * D + kd[None, :], mask=m, other=0.0).to(tl.float64)
        kt = tl.load(k + r[:, None] * D + kd[None, :], mask=m, other=0.0).to(tl.float64)
        vt = tl.load(v + r[:, None] * DV + vd[None, :], mask=m, other=0.0).to(tl.float64)
        s = tl.dot(qt, tl.trans(kt)) * (i[:, None] >= i[None, :])
        numerator = tl.dot(qt, tl.trans(s_t)) + tl.dot(s, vt)
        denominator = tl.sum(qt * z[None, :], axis=1) + tl.sum(s, axis=1) + eps
        tl.store(o + r[:, None] * DV + vd[None, :], numerator / denominator[:, None], mask=m)
        s_t += tl.dot(tl.trans(vt), kt)
        z += tl.sum(kt, axis=0)
        t += 1


@triton.jit
def three_dimensional_descriptors(
    q, k, v, o, N, eps, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr
):
    head = tl.program_id(0)
    BH = tl.num_programs(0)
    q_desc = tl.make_tensor_descriptor(q, [BH, N, D], [N * D, D, 1], [1, C, D])
    k_desc = tl.make_tensor_descriptor(k, [BH, N, D], [N * D, D, 1], [1, C, D])
    v_desc = tl.make_tensor_descriptor(v, [BH, N, DV], [N * DV, DV, 1], [1, C, DV])
    o_desc = tl.make_tensor_descriptor(o, [BH, N, DV], [N * DV, DV, 1], [1, C, DV])
    lower = tl.arange(0, C)[:, None] >= tl.arange(0, C)[None, :]
    h = tl.zeros([D, DV], dtype=tl.float32)
    key_sum = tl.zeros([1, D], dtype=tl.float32)
    for t in range(tl.cdiv(N, C)):
        b_q = q_desc.load([head, t * C, 0]).reshape(C, D)
        b_k = k_desc.load([head, t * C, 0]).reshape(C, D)
        b_v = v_desc.load([head, t * C, 0]).reshape(C, DV)
        s = tl.where(lower, tl.dot(b_q, tl.trans(b_k)), 0.0)
        norm = tl.sum(b_q * key_sum, axis=1) + tl.sum(s, axis=1) + eps
        b_o = (tl.dot(b_q, h) + tl.dot(s, b_v)) / norm[:, None]
        o_desc.store([head, t * C, 0], b_o.reshape(1, C, DV))
        h += tl.dot(tl.trans(b_k), b_v)
        key_sum += tl.sum(b_k, axis=0, keep_dims=True)


CORRECT = (
    carried_key_sum,
    cumulative_key_sum,
    block_pointers_reciprocal,
    transposed_state_in_float64,
    three_dimensional_descriptors,
)

MISTAKES = (
    Mutant(
        block_pointers_reciprocal,
        (("b_h += tl.dot", "b_h = tl.dot"),),
        "rows see only the previous chunk",
    ),
    Mutant(cumulative_key_sum, (("tl.dot(b_q, state) + ", ""),), "rows see only their own chunk"),
    Mutant(carried_key_sum, (("num / den[:, None]", "num"),), "o is the numerator only"),
    Mutant(
        transposed_state_in_float64,
        (("z += tl.sum(kt, axis=0)", "z = tl.sum(kt, axis=0)"),),
        "the denominator's key sum holds the previous chunk's keys only",
    ),
    Mutant(
        block_pointers_reciprocal,
        (("        b_z += tl.sum(b_k, 0)\n", ""),),
        "the denominator misses the keys of earlier chunks",
    ),
    Mutant(
        carried_key_sum,
        (
            ("        z += tl.sum(kc, axis=0)\n", ""),
            ("        den = tl.sum", "        z += tl.sum(kc, axis=0)\n        den = tl.sum"),
        ),
        "the denominator counts the chunk's own keys twice",
    ),
    Mutant(
        three_dimensional_descriptors,
        (("tl.sum(s, axis=1) + eps", "tl.sum(tl.dot(b_q, tl.trans(b_k)), axis=1) + eps"),),
        "the denominator counts keys after the query in its chunk",
    ),
    Mutant(
        transposed_state_in_float64,
        (("tl.sum(s, axis=1) + eps", "tl.sum(s, axis=0) + eps"),),
        "the denominator sums the scores' columns",
    ),
    Mutant(
        carried_key_sum,
        (("tl.sum(a, axis=1) + eps", "tl.sum(a, axis=1)"),),
        "the denominator has no eps",
    ),
    Mutant(
        cumulative_key_sum,
        (
            (
                "bottom = tl.sum(b_q * z_rows, axis=1) + eps",
                "bottom = tl.sum(b_q * z_rows, axis=1)",
            ),
            ("top / bottom[:, None]", "top / bottom[:, None] + eps"),
        ),
        "eps is added to the quotient",
    ),
    Mutant(
        three_dimensional_descriptors,
        (
            ("        h += tl.dot(tl.trans(b_k), b_v)\n", ""),
            (
                "        s = tl.where",
                "        h += tl.dot(tl.trans(b_k), b_v)\n        s = tl.where",
            ),
        ),
        "rows see every key of their chunk, later ones included",
    ),
    Mutant(
        block_pointers_reciprocal,
        (
            (
                "m_s = tl.arange(0, C)[:, None] >= tl.arange",
                "m_s = tl.arange(0, C)[:, None] > tl.arange",
            ),
        ),
        "the diagonal is masked out",
    ),
    Mutant(
        cumulative_key_sum,
        (("rows[:, None] >= rows[None, :]", "rows[:, None] <= rows[None, :]"),),
        "the causal mask is flipped",
    ),
    Mutant(
        carried_key_sum,
        (
            (
                "pos[:, None] * DV + fv[None, :], mask=live, other=0.0)",
                "pos[:, None] * DV + fv[None, :], mask=live)",
            ),
        ),
        "has no other=, so masked-off lanes are undefined",
    ),
    Mutant(
        transposed_state_in_float64,
        (
            (
                "s = tl.dot(qt, tl.trans(kt)) * (i[:, None] >= i[None, :])",
                "s = tl.dot(qt, tl.trans(kt))",
            ),
        ),
        "rows see keys after them within their chunk",
    ),
    Mutant(
        block_pointers_reciprocal,
        (
            (
                "p_v = tl.make_block_ptr(v + i_bh * N * DV",
                "p_v = tl.make_block_ptr(v + i_bh * N * D",
            ),
        ),
        "head b of v is addressed at b·N·D",
    ),
    Mutant(
        carried_key_sum,
        (
            (
                "tl.dot(a, vc)",
                "tl.dot(a.to(tl.float16), vc.to(tl.float16))",
            ),
        ),
        "the kernel rounds to float16 at line 25, `a.to(tl.float16)`",
    ),
    Mutant(
        carried_key_sum,
        (("tl.sum(a, axis=1) + eps", "tl.sum(a, axis=1) + 1.0"),),
        "the denominator adds 1 where eps belongs",
        "look at line 26, `den = tl.sum(qc * z[None, :], axis=1) + tl.sum(a, axis=1) + 1.0`",
    ),
    Mutant(
        carried_key_sum,
        (
            (
                "    for c in range(tl.cdiv(N, C)):\n",
                "    for c in range(tl.cdiv(N, C)):\n"
                "        kv = tl.zeros([D, DV], dtype=tl.float32)\n"
                "        z = tl.zeros([D], dtype=tl.float32)\n",
            ),
        ),
        "the state and the key sum start from zero in every chunk",
        "look at line 19, `kv = tl.zeros([D, DV], dtype=tl.float32)`",
    ),
    Mutant(
        cumulative_key_sum,
        (("state += tl.dot", "state = tl.dot"), ("before += tl.sum", "before = tl.sum")),
        "the state and the key sum hold the previous chunk alone",
        "look at line 51, `state = tl.dot(tl.trans(b_k), b_v)`",
    ),
    Mutant(
        transposed_state_in_float64,
        (("qt = tl.load(q + r", "qt = tl.load(k + r"),),
        "the queries are loaded from k",
        "look at line 96, `tl.load(k + r",
    ),
    Mutant(
        carried_key_sum,
        (("pos[:, None] >= pos[None, :]", "pos[:, None] >= tl.arange(0, C)[None, :]"),),
        "the causal mask compares a place in the sequence with a place in the chunk",
        "look at line 24, `pos[:, None] >= tl.arange(0, C)[None, :]`",
    ),
    Mutant(
        carried_key_sum,
        (("qc * z[None, :]", "qc * z[:, None]"),),
        "combines qc [C, D] with z[:, None] [D, 1], which do not broadcast (axis 0: C against "
        "D); turn z[:, None] around: z[None, :]",
        "line 26, `qc * z[:, None]`",
    ),
)
