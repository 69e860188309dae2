"""Solutions to the Triton puzzles of the book's kernel chapter, one `@triton.jit` kernel each.

Every tensor is contiguous and float32; `BH` heads are stacked in the first dimension, so head b
of q `(BH, N, D)` starts at element b·N·D. C is the chunk (tile) height, NT = ⌈N/C⌉ the number
of chunks; the last chunk may be short, and every load and store of a token row is masked with
`rows < N`. The checkers in `linattn_core.exercises` launch these kernels (and the reader's) with
the grids given in each docstring.
"""

import triton
import triton.language as tl


@triton.jit
def feature_map(x, y, N, D: tl.constexpr, BLOCK: tl.constexpr):
    """y = elu(x) + 1 for x `(N, D)`; grid (⌈N / BLOCK⌉,), BLOCK rows a program."""
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    cols = tl.arange(0, D)
    offsets = rows[:, None] * D + cols[None, :]  # [BLOCK, D] element offsets
    inside = rows[:, None] < N  # the last tile may stick out past row N − 1
    tile = tl.load(x + offsets, mask=inside, other=0.0)
    phi = tl.where(tile > 0, tile + 1.0, tl.exp(tile))  # elu(x) + 1
    tl.store(y + offsets, phi, mask=inside)


@triton.jit
def chunk_scores(q, k, s, N, D: tl.constexpr, C: tl.constexpr):
    """s[t] = the causal scores of chunk t, s[t, i, j] = q_{tC+i}·k_{tC+j} for j ≤ i, else 0;
    q, k `(N, D)`, s `(NT, C, C)`; grid (NT,)."""
    t = tl.program_id(0)
    rows = t * C + tl.arange(0, C)
    cols = tl.arange(0, D)
    inside = rows[:, None] < N
    b_q = tl.load(q + rows[:, None] * D + cols[None, :], mask=inside, other=0.0)  # [C, D]
    b_k = tl.load(k + rows[:, None] * D + cols[None, :], mask=inside, other=0.0)
    scores = tl.dot(b_q, tl.trans(b_k))  # [C, C]: query i, key j
    causal = tl.arange(0, C)[:, None] >= tl.arange(0, C)[None, :]
    scores = tl.where(causal, scores, 0.0)
    square = tl.arange(0, C)[:, None] * C + tl.arange(0, C)[None, :]
    tl.store(s + t * C * C + square, scores)


@triton.jit
def intra_chunk(q, k, v, o, N, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    """o_t = tril(Q_t K_tᵀ) V_t, chunk t alone (no earlier chunks); q, k `(BH, N, D)`, v, o
    `(BH, N, DV)`; grid (NT, BH)."""
    t, head = tl.program_id(0), tl.program_id(1)
    q, k = q + head * N * D, k + head * N * D  # this head's matrices
    v, o = v + head * N * DV, o + head * N * DV
    rows = t * C + tl.arange(0, C)
    inside = rows[:, None] < N
    d, dv = tl.arange(0, D), tl.arange(0, DV)
    b_q = tl.load(q + rows[:, None] * D + d[None, :], mask=inside, other=0.0)
    b_k = tl.load(k + rows[:, None] * D + d[None, :], mask=inside, other=0.0)
    b_v = tl.load(v + rows[:, None] * DV + dv[None, :], mask=inside, other=0.0)
    causal = tl.arange(0, C)[:, None] >= tl.arange(0, C)[None, :]
    scores = tl.where(causal, tl.dot(b_q, tl.trans(b_k)), 0.0)
    tl.store(o + rows[:, None] * DV + dv[None, :], tl.dot(scores, b_v), mask=inside)


@triton.jit
def chunk_states(k, v, h, N, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    """h[t] = Σ_{j < tC} k_jᵀ v_j at every chunk boundary t = 0 … NT; k `(BH, N, D)`, v
    `(BH, N, DV)`, h `(BH, NT + 1, D, DV)`; grid (BH,)."""
    head = tl.program_id(0)
    n_chunks = tl.cdiv(N, C)
    k, v = k + head * N * D, v + head * N * DV
    h = h + head * (n_chunks + 1) * D * DV
    d, dv = tl.arange(0, D), tl.arange(0, DV)
    square = d[:, None] * DV + dv[None, :]  # [D, DV] offsets of one state
    state = tl.zeros([D, DV], dtype=tl.float32)
    for t in range(n_chunks):
        tl.store(h + t * D * DV + square, state)  # the state *before* chunk t
        rows = t * C + tl.arange(0, C)
        inside = rows[:, None] < N
        b_k = tl.load(k + rows[:, None] * D + d[None, :], mask=inside, other=0.0)
        b_v = tl.load(v + rows[:, None] * DV + dv[None, :], mask=inside, other=0.0)
        state += tl.dot(tl.trans(b_k), b_v)  # carried to the next chunk
    tl.store(h + n_chunks * D * DV + square, state)


@triton.jit
def chunked_forward(q, k, v, o, N, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    """Causal linear attention, unnormalized: o_i = Σ_{j ≤ i} (q_i·k_j) v_j, chunk by chunk with
    the state carried; q, k `(BH, N, D)`, v, o `(BH, N, DV)`; grid (BH,)."""
    head = tl.program_id(0)
    q, k = q + head * N * D, k + head * N * D
    v, o = v + head * N * DV, o + head * N * DV
    d, dv = tl.arange(0, D), tl.arange(0, DV)
    causal = tl.arange(0, C)[:, None] >= tl.arange(0, C)[None, :]
    state = tl.zeros([D, DV], dtype=tl.float32)  # Σ k_jᵀ v_j over the earlier chunks
    for t in range(tl.cdiv(N, C)):
        rows = t * C + tl.arange(0, C)
        inside = rows[:, None] < N
        b_q = tl.load(q + rows[:, None] * D + d[None, :], mask=inside, other=0.0)
        b_k = tl.load(k + rows[:, None] * D + d[None, :], mask=inside, other=0.0)
        b_v = tl.load(v + rows[:, None] * DV + dv[None, :], mask=inside, other=0.0)
        scores = tl.where(causal, tl.dot(b_q, tl.trans(b_k)), 0.0)
        b_o = tl.dot(b_q, state) + tl.dot(scores, b_v)  # earlier chunks + this chunk
        tl.store(o + rows[:, None] * DV + dv[None, :], b_o, mask=inside)
        state += tl.dot(tl.trans(b_k), b_v)  # only now: the chunk's keys join the state


@triton.jit
def normalized_forward(q, k, v, o, N, eps, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    """Causal linear attention: o_i = Σ_{j ≤ i} (q_i·k_j) v_j / (Σ_{j ≤ i} q_i·k_j + eps), with
    the state and the key sum z carried across chunks; shapes and grid of `chunked_forward`."""
    head = tl.program_id(0)
    q, k = q + head * N * D, k + head * N * D
    v, o = v + head * N * DV, o + head * N * DV
    d, dv = tl.arange(0, D), tl.arange(0, DV)
    causal = tl.arange(0, C)[:, None] >= tl.arange(0, C)[None, :]
    state = tl.zeros([D, DV], dtype=tl.float32)
    key_sum = tl.zeros([D], dtype=tl.float32)  # z = Σ k_j over the earlier chunks
    for t in range(tl.cdiv(N, C)):
        rows = t * C + tl.arange(0, C)
        inside = rows[:, None] < N
        b_q = tl.load(q + rows[:, None] * D + d[None, :], mask=inside, other=0.0)
        b_k = tl.load(k + rows[:, None] * D + d[None, :], mask=inside, other=0.0)
        b_v = tl.load(v + rows[:, None] * DV + dv[None, :], mask=inside, other=0.0)
        scores = tl.where(causal, tl.dot(b_q, tl.trans(b_k)), 0.0)
        numerator = tl.dot(b_q, state) + tl.dot(scores, b_v)
        denominator = tl.sum(b_q * key_sum[None, :], axis=1) + tl.sum(scores, axis=1) + eps
        b_o = numerator / denominator[:, None]
        tl.store(o + rows[:, None] * DV + dv[None, :], b_o, mask=inside)
        state += tl.dot(tl.trans(b_k), b_v)
        key_sum += tl.sum(b_k, axis=0)


@triton.jit
def value_gradient(q, k, do, dh, dv, N, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    """One backward tile: dv_j = k_j D_{t+1} + Σ_{i ≥ j in chunk t} (q_i·k_j) g_i for the rows j of
    chunk t, where g = do and D_{t+1} = dh[t + 1] = Σ_{i ≥ (t+1)C} q_iᵀ g_i is the backward state
    of the later chunks; q, k `(BH, N, D)`, do, dv `(BH, N, DV)`, dh `(BH, NT + 1, D, DV)`;
    grid (NT, BH)."""
    t, head = tl.program_id(0), tl.program_id(1)
    n_chunks = tl.cdiv(N, C)
    q, k = q + head * N * D, k + head * N * D
    do, dv = do + head * N * DV, dv + head * N * DV
    dh = dh + (head * (n_chunks + 1) + t + 1) * D * DV  # D_{t+1}: after this chunk
    rows = t * C + tl.arange(0, C)
    inside = rows[:, None] < N
    d, dv_cols = tl.arange(0, D), tl.arange(0, DV)
    b_q = tl.load(q + rows[:, None] * D + d[None, :], mask=inside, other=0.0)
    b_k = tl.load(k + rows[:, None] * D + d[None, :], mask=inside, other=0.0)
    b_do = tl.load(do + rows[:, None] * DV + dv_cols[None, :], mask=inside, other=0.0)
    b_dh = tl.load(dh + d[:, None] * DV + dv_cols[None, :])  # [D, DV]
    scores_t = tl.dot(b_k, tl.trans(b_q))  # [j, i] = k_j·q_i
    later = tl.arange(0, C)[:, None] <= tl.arange(0, C)[None, :]  # query i at or after key j
    scores_t = tl.where(later, scores_t, 0.0)
    b_dv = tl.dot(b_k, b_dh) + tl.dot(scores_t, b_do)
    tl.store(dv + rows[:, None] * DV + dv_cols[None, :], b_dv, mask=inside)
