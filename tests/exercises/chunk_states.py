"""Puzzle 4, the states h[t] = Σ_{j < tC} k_jᵀ v_j at every chunk boundary, grid (BH,): the
bank."""

import triton
import triton.language as tl

from tests.exercises import Mutant


@triton.jit
def keys_loaded_transposed(k, v, h, N, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    bh = tl.program_id(0)
    nt = (N + C - 1) // C
    k_head = k + bh * N * D
    v_head = v + bh * N * DV
    h_head = h + bh * (nt + 1) * D * DV
    dd = tl.arange(0, D)
    ee = tl.arange(0, DV)
    hs = dd[:, None] * DV + ee[None, :]
    acc = tl.zeros([D, DV], dtype=tl.float32)
    for c in range(nt):
        tl.store(h_head + c * D * DV + hs, acc)
        tok = c * C + tl.arange(0, C)
        kt = tl.load(k_head + tok[None, :] * D + dd[:, None], mask=tok[None, :] < N, other=0.0)
        vv = tl.load(v_head + tok[:, None] * DV + ee[None, :], mask=tok[:, None] < N, other=0.0)
        acc += tl.dot(kt, vv)  # [D, C] @ [C, DV]
    tl.store(h_head + nt * D * DV + hs, acc)


@triton.jit
def transposed_state(k, v, h, N, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    head = tl.program_id(0)
    n_chunks = tl.cdiv(N, C)
    d = tl.arange(0, D)
    e = tl.arange(0, DV)
    base = h + head * (n_chunks + 1) * D * DV
    where_t = e[:, None] + d[None, :] * DV  # [DV, D]: state_t[e, d] is h[d, e]
    state_t = tl.zeros([DV, D], dtype=tl.float32)  # Sᵀ
    for t in range(n_chunks):
        tl.store(base + t * D * DV + where_t, state_t)
        rows = t * C + tl.arange(0, C)
        m = rows[:, None] < N
        b_k = tl.load(k + (head * N + rows[:, None]) * D + d[None, :], mask=m, other=0.0)
        b_v = tl.load(v + (head * N + rows[:, None]) * DV + e[None, :], mask=m, other=0.0)
        state_t += tl.dot(tl.trans(b_v), b_k)
    tl.store(base + n_chunks * D * DV + where_t, state_t)


@triton.jit
def block_pointers_advanced(k, v, h, N, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    i_h = tl.program_id(0)
    NT = tl.cdiv(N, C)
    p_k = tl.make_block_ptr(k + i_h * N * D, (N, D), (D, 1), (0, 0), (C, D), (1, 0))
    p_v = tl.make_block_ptr(v + i_h * N * DV, (N, DV), (DV, 1), (0, 0), (C, DV), (1, 0))
    p_h = tl.make_block_ptr(
        h + i_h * (NT + 1) * D * DV, ((NT + 1) * D, DV), (DV, 1), (0, 0), (D, DV), (1, 0)
    )
    b_h = tl.zeros([D, DV], dtype=tl.float32)
    for _ in range(NT):
        tl.store(p_h, b_h)
        b_k = tl.load(p_k, boundary_check=(0,), padding_option="zero")
        b_v = tl.load(p_v, boundary_check=(0,), padding_option="zero")
        b_h += tl.dot(tl.trans(b_k), b_v)
        p_k = tl.advance(p_k, (C, 0))
        p_v = tl.advance(p_v, (C, 0))
        p_h = tl.advance(p_h, (D, 0))
    tl.store(p_h, b_h)


@triton.jit
def while_loop_outer_products(k, v, h, N, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    b = tl.program_id(0)
    chunks = tl.cdiv(N, C)
    dk = tl.arange(0, D)
    dv = tl.arange(0, DV)
    out = h + b * (chunks + 1) * D * DV + dk[:, None] * DV + dv[None, :]
    s = tl.zeros([D, DV], dtype=tl.float32)
    t = 0
    while t < chunks:
        tl.store(out + t * D * DV, s)
        r = t * C + tl.arange(0, C)
        kk = tl.load(k + b * N * D + r[:, None] * D + dk[None, :], mask=r[:, None] < N, other=0.0)
        vv = tl.load(v + b * N * DV + r[:, None] * DV + dv[None, :], mask=r[:, None] < N, other=0.0)
        s += tl.sum(kk[:, :, None] * vv[:, None, :], axis=0)  # Σ_j k_jᵀ v_j, [D, DV]
        t += 1
    tl.store(out + chunks * D * DV, s)


@triton.jit
def store_then_add(k, v, h, N, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    # NT + 1 steps: the last loads only masked-off rows, adds zero and stores h[NT]
    pid = tl.program_id(0)
    NT = tl.cdiv(N, C)
    k = k + pid * N * D
    v = v + pid * N * DV
    h = h + pid * (NT + 1) * D * DV
    kd = tl.arange(0, D)
    vd = tl.arange(0, DV)
    S = tl.zeros([D, DV], dtype=tl.float32)
    for t in range(NT + 1):
        tl.store(h + t * D * DV + kd[:, None] * DV + vd[None, :], S)
        rows = t * C + tl.arange(0, C)
        ks = tl.load(k + rows[:, None] * D + kd[None, :], mask=rows[:, None] < N, other=0.0)
        vs = tl.load(v + rows[:, None] * DV + vd[None, :], mask=rows[:, None] < N, other=0.0)
        S = S + tl.dot(tl.trans(ks), vs)


CORRECT = (
    keys_loaded_transposed,
    transposed_state,
    block_pointers_advanced,
    while_loop_outer_products,
    store_then_add,
)

MISTAKES = (
    Mutant(
        keys_loaded_transposed, (("acc += tl.dot", "acc = tl.dot"),), "the state was not carried"
    ),
    Mutant(
        store_then_add,
        (("S = S + tl.dot", "S = tl.dot"),),
        "the state was not carried",
    ),
    Mutant(
        transposed_state,
        (
            ("        tl.store(base + t * D * DV + where_t, state_t)\n", ""),
            (
                "state_t += tl.dot(tl.trans(b_v), b_k)",
                "state_t += tl.dot(tl.trans(b_v), b_k)\n"
                "        tl.store(base + t * D * DV + where_t, state_t)",
            ),
        ),
        "h[t] already includes chunk t",
    ),
    Mutant(
        block_pointers_advanced,
        (
            (
                "        p_h = tl.advance(p_h, (D, 0))\n    tl.store(p_h, b_h)",
                "        p_h = tl.advance(p_h, (D, 0))",
            ),
        ),
        "h: the state at boundary t = 2 of every head is never written (still NaN): store the "
        "final state, h[NT], after the loop",
    ),
    Mutant(
        keys_loaded_transposed,
        (("for c in range(nt)", "for c in range(N // C)"),),
        "the walk leaves out the last, ragged chunk: loop over tl.cdiv(N, C) chunks",
    ),
    Mutant(
        transposed_state,
        (("base = h + head * (n_chunks + 1) * D * DV", "base = h + head * n_chunks * D * DV"),),
        "head b of h is addressed at b·NT·D·DV",
    ),
    Mutant(
        while_loop_outer_products,
        (("tl.store(out + t * D * DV, s)", "tl.store(out + t * D * D, s)"),),
        "each step of the loop moves h by D·D elements",
    ),
    Mutant(
        store_then_add,
        (
            (
                "mask=rows[:, None] < N, other=0.0)\n        vs",
                "mask=rows[:, None] < N)\n        vs",
            ),
        ),
        "has no other=, so masked-off lanes are undefined",
    ),
    Mutant(
        keys_loaded_transposed,
        (("v_head = v + bh * N * DV", "v_head = v + bh * N * D"),),
        "head b of v is addressed at b·N·D",
    ),
    Mutant(
        transposed_state,
        (("where_t = e[:, None] + d[None, :] * DV", "where_t = e[:, None] * D + d[None, :]"),),
        "the rows of h are addressed D elements apart",
    ),
    Mutant(
        block_pointers_advanced,
        (("p_h = tl.advance(p_h, (D, 0))", "p_h = tl.advance(p_h, (C, 0))"),),
        "each step of the loop moves h by C·DV elements",
    ),
    Mutant(
        while_loop_outer_products,
        (("mask=r[:, None] < N, other=0.0)\n        vv", ")\n        vv"),),
        "program 1 loads rows 21–31 of head 1 of k, past N = 21",
    ),
    Mutant(
        block_pointers_advanced,
        (("p_v = tl.advance(p_v, (C, 0))", "p_v = tl.advance(p_v, (D, 0))"),),
        "each step of the loop moves v by D rows",
    ),
    Mutant(
        transposed_state,
        (
            (
                "    for t in range(n_chunks):\n        tl.store(base",
                "    for t in range(n_chunks):\n"
                "        state_t = tl.zeros([DV, D], dtype=tl.float32)\n        tl.store(base",
            ),
        ),
        "the state starts from zero in every chunk",
        "look at line 40, `state_t = tl.zeros([DV, D], dtype=tl.float32)`",
    ),
)
