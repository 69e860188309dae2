"""The gated delta rule (Gated DeltaNet): the delta rule with a forgetting gate.

Yang, Kautz and Hatamizadeh (2024) multiply DeltaNet's state by a gate α_t = exp(g_t) before
each correction (the state stored as S_t ∈ R^{d_v×d_k}, as in `linattn_core.delta`):

    S_t = α_t S_{t-1} (I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ,        o_t = S_t q_t.

With g = 0 it is the delta rule. Chunk by chunk, the gates enter through the in-chunk
cumulative log-gates G_i = g_1 + ... + g_i, and only through exponentials of sums of g over
segments inside a chunk: G_i − G_j (i ≥ j), G_i and G_C − G_i. For g ≤ 0 each of them is ≤ 0,
so every exponential lies in [0, 1] whatever the size of g; the factorization
exp(G_i)·exp(−G_j) would overflow as soon as −G_j passes the dtype's range.

- `gated_delta_rule`: the recurrence token by token ("recurrent"), the chunked UT / WY form
  with gates ("chunked"), or that form in the delta rule's Triton kernels given the log-gates
  ("triton", `linattn_core.kernels.delta_rule`);
- `segment_sums`: the matrix of the exponents G_i − G_j, computed as sums of g (no subtraction);
- `gated_deltanet_inputs`: seeded inputs of the kind Gated DeltaNet feeds the rule, for checks.
"""

import math
import numbers

import torch
import torch.nn.functional as F

from linattn_core.delta import (
    _check_delta_inputs,
    _check_one_per_row,
    _split_chunks,
    deltanet_inputs,
)
from linattn_core.methods import GATED_DELTA_RULE_METHODS, auto_method
from linattn_core.packing import run_packed
from linattn_core.validation import check_choice, check_positive_int

__all__ = [
    "GATED_DELTA_RULE_METHODS",
    "gated_delta_rule",
    "gated_deltanet_inputs",
    "segment_sums",
]


def gated_delta_rule(
    q, k, v, beta, g, *, method="auto", chunk_size=64, initial_state=None, cu_seqlens=None
):
    """The gated delta rule over a sequence, as a recurrence or chunk by chunk.

        S_t = exp(g_t) S_{t-1} (I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ,        o_t = S_t q_t,

    with S_0 = `initial_state` (zeros if None); q is not scaled. With g = 0 it is
    `linattn_core.delta.delta_rule`, to the last bit.

    Methods:
        "recurrent" one token at a time: O(N d_k d_v) time, an O(d_k d_v) state;
        "chunked"   for a chunk of C tokens with state S_0 at its start, cumulative log-gates
                    G_i = g_1 + ... + g_i and the decay matrix Γ_ij = exp(G_i − G_j) (i ≥ j,
                    0 above), the corrections u_t = β_t (v_t − α_t S_{t-1} k_t) are
                    U = Ũ − W S_0ᵀ with A = (I + diag(β)(Γ ⊙ tril(K Kᵀ, −1)))⁻¹,
                    W = A diag(β exp(G)) K and Ũ = A diag(β) V; then
                    O = diag(exp(G)) Q S_0ᵀ + (Γ ⊙ tril(Q Kᵀ)) U and
                    S_C = exp(G_C) S_0 + Uᵀ diag(exp(G_C − G)) K (16-bit inputs: the
                    triangular solve in float32, everything else in their dtype);
        "triton"    the chunked form in the delta rule's Triton kernels given the log-gates
                    (`linattn_core.kernels.delta_rule`), forward and backward: chunks of 64,
                    d_k and d_v in {16, 32, 64, 128}, float32 / bfloat16 / float16; on CUDA
                    tensors, or on the CPU in the Triton interpreter;
        "auto"      "triton" on a CUDA device when the kernels take the inputs, "chunked"
                    otherwise (`linattn_core.methods`).

    Args:
        q, k: queries and keys `(..., N, d_k)` (Gated DeltaNet normalizes keys to unit length).
        v: values `(..., N, d_v)`.
        beta: learning rates β_t `(..., N)`.
        g: log-gates g_t `(..., N)`, α_t = exp(g_t). Any real value is computed stably (g ≤ 0
            is the model's range; g = −inf is a gate of 0, a reset); a positive g makes the state
            grow like exp(Σ g) and can overflow, as the recurrence itself does.
        method: "auto", "recurrent", "chunked" or "triton" (see above).
        chunk_size: tokens per chunk of "chunked" (positive int); N need not be a multiple.
        initial_state: S_0 `(..., d_v, d_k)`, or None for zeros.
        cu_seqlens: None, or the boundaries of S packed sequences, as `delta.delta_rule` takes
            them (`linattn_core.packing`): states `(S, H, d_v, d_k)`, one per sequence;
            every method takes them, "triton" in one pass of the kernels, without reading
            cu_seqlens on the host.

    Returns:
        (o, S): outputs `(..., N, d_v)` and the final state S_N `(..., d_v, d_k)`, differentiable
        with respect to q, k, v, beta, g and initial_state.

    >>> from linattn_core.testing import relative_error
    >>> q, k, v, beta, g, state = gated_deltanet_inputs(2, n=50, d_k=4, d_v=3)
    >>> o, final = gated_delta_rule(q, k, v, beta, g, method="recurrent", initial_state=state)
    >>> o_c, final_c = gated_delta_rule(q, k, v, beta, g, chunk_size=16, initial_state=state)
    >>> relative_error(o_c, o) < 1e-12 and relative_error(final_c, final) < 1e-12
    True
    """
    fn = "gated_delta_rule"
    _check_delta_inputs(fn, q, k, v, beta, initial_state, cu_seqlens)
    _check_one_per_row(fn, "g", g, q, rows="N")
    check_choice(fn, "method", method, GATED_DELTA_RULE_METHODS)
    check_positive_int(fn, "chunk_size", chunk_size)
    if cu_seqlens is not None and method != "triton":
        return run_packed(
            fn, gated_delta_rule, cu_seqlens, (q, k, v, beta, g), initial_state,
            methods=GATED_DELTA_RULE_METHODS, method=method, returns_state=True,
            chunk_size=chunk_size,
        )  # fmt: skip
    if method == "auto":
        method = auto_method(GATED_DELTA_RULE_METHODS, q, v, chunk_size=chunk_size)
    if method == "triton":
        from linattn_core.kernels.delta_rule.function import gated_delta_rule_kernels

        return gated_delta_rule_kernels(
            q, k, v, beta, g, chunk_size=chunk_size, initial_state=initial_state,
            cu_seqlens=cu_seqlens,
        )  # fmt: skip
    if initial_state is None:
        initial_state = q.new_zeros(*q.shape[:-2], v.shape[-1], q.shape[-1])  # (..., d_v, d_k)
    if q.shape[-2] == 0:
        return v.new_zeros(v.shape), initial_state
    if method == "recurrent":
        return _gated_recurrent(q, k, v, beta, g, initial_state)
    return _gated_chunked(q, k, v, beta, g, initial_state, chunk_size=chunk_size)


def segment_sums(g):
    """L_ij = g_{j+1} + ... + g_i for i ≥ j (so L_ii = 0) and −inf for i < j: L = G_i − G_j.

    Each entry is a sum over the segment (j, i], accumulated down a column of the masked
    matrix, never a difference of two cumulative sums: no cancellation, and exp(L) is the
    lower triangular decay matrix Γ with Γ_ij = α_{j+1} ⋯ α_i (0 above the diagonal). A g of
    −inf gives −inf (a factor 0), not inf − inf.

    Args:
        g: log-gates `(..., C)`.

    Returns:
        L `(..., C, C)`.

    >>> segment_sums(torch.tensor([-1.0, -2.0, -3.0]))
    tensor([[ 0., -inf, -inf],
            [-2.,  0., -inf],
            [-5., -3.,  0.]])
    """
    c = g.shape[-1]
    lower = torch.ones(c, c, dtype=torch.bool, device=g.device).tril()  # i ≥ j
    terms = g[..., :, None].expand(*g.shape, c).masked_fill(lower.T, 0.0)  # g_i [i > j]
    sums = terms.cumsum(dim=-2)  # Σ_{j < l ≤ i} g_l  (..., C, C)
    return sums.masked_fill(~lower, -torch.inf)


def gated_deltanet_inputs(*batch, n, d_k, d_v, gate=(-0.5, 0.0), seed=0, dtype=torch.float64):
    """Seeded inputs of the gated delta rule: `deltanet_inputs` plus log-gates g.

    q, k, v, β and S_0 as `linattn_core.delta.deltanet_inputs` draws them (unit keys, β in
    [0, 1)), then g uniform on [gate[0], gate[1]) from the same seed's generator.

    Args:
        *batch: leading batch dimensions (non-negative ints).
        n: sequence length N; d_k, d_v: key and value dimensions (non-negative ints).
        gate: (low, high), the range of the log-gates (finite numbers, low ≤ high).
        seed: seed of the generator.
        dtype: dtype of the returned tensors.

    Returns:
        (q, k, v, beta, g, initial_state): `(*batch, N, d_k)` twice, `(*batch, N, d_v)`,
        `(*batch, N)` twice, `(*batch, d_v, d_k)`.

    >>> q, k, v, beta, g, state = gated_deltanet_inputs(2, n=5, d_k=4, d_v=3, gate=(-3, -1))
    >>> g.shape, bool(((g >= -3) & (g < -1)).all())
    (torch.Size([2, 5]), True)
    """
    fn = "gated_deltanet_inputs"
    low, high = gate
    finite = all(isinstance(x, numbers.Real) and math.isfinite(x) for x in (low, high))
    if not (finite and low <= high):
        raise ValueError(f"{fn}: gate must be (low, high) with finite low ≤ high; got gate={gate}")
    q, k, v, beta, state = deltanet_inputs(*batch, n=n, d_k=d_k, d_v=d_v, seed=seed, dtype=dtype)
    draw = torch.Generator().manual_seed(seed + 1)
    g = low + (high - low) * torch.rand(*batch, n, generator=draw, dtype=torch.float64)
    return q, k, v, beta, g.to(dtype), state


def _gated_recurrent(q, k, v, beta, g, state):
    """S_t = α_t S_{t-1} + β_t (v_t − α_t S_{t-1}k_t) k_tᵀ out of place, so autograd sees it."""
    outputs = []
    for t in range(q.shape[-2]):
        state = torch.exp(g[..., t, None, None]) * state  # α_t S_{t-1}  (..., d_v, d_k)
        k_t = k[..., t, :]  # (..., d_k)
        error = v[..., t, :] - (state @ k_t[..., None])[..., 0]  # (..., d_v)
        update = (beta[..., t, None] * error)[..., :, None] * k_t[..., None, :]  # (..., d_v, d_k)
        state = state + update
        outputs.append((state @ q[..., t, :, None])[..., 0])  # (..., d_v)
    return torch.stack(outputs, dim=-2), state  # (..., N, d_v), (..., d_v, d_k)


def _gated_chunked(q, k, v, beta, g, state, *, chunk_size):
    """The UT / WY form with gates: W and Ũ for every chunk in one solve, then a loop.

    Padded tokens have k = 0, β = 0 and g = 0 (a gate of 1): they change neither outputs nor
    state. Every exponent is a sum of g over a segment of one chunk.
    """
    n, d_k, d_v = q.shape[-2], q.shape[-1], v.shape[-1]
    chunk_size = min(chunk_size, n)
    q_chunks, k_chunks, v_chunks = (_split_chunks(x, chunk_size) for x in (q, k, v))
    beta_chunks = _split_chunks(beta[..., None], chunk_size)  # (..., m, C, 1)
    g_chunks = _split_chunks(g[..., None], chunk_size)[..., 0]  # (..., m, C)
    decay = torch.exp(segment_sums(g_chunks))  # Γ_ij = exp(G_i − G_j), 0 above  (..., m, C, C)
    from_start = torch.exp(g_chunks.cumsum(dim=-1))[..., None]  # exp(G_i)  (..., m, C, 1)
    after = F.pad(g_chunks[..., 1:].flip(-1).cumsum(dim=-1).flip(-1), (0, 1))  # G_C − G_i
    to_end = torch.exp(after)[..., None]  # (..., m, C, 1)
    # (I + diag(β)(Γ ⊙ tril(K Kᵀ, −1))) [W, Ũ] = diag(β) [diag(exp(G)) K, V]
    strictly_lower = ((beta_chunks * k_chunks) @ k_chunks.mT * decay).tril(-1)  # (..., m, C, C)
    ones = torch.ones_like(beta_chunks[..., 0])  # (..., m, C)
    blocks = torch.diagonal_scatter(strictly_lower, ones, dim1=-2, dim2=-1)
    rhs = beta_chunks * torch.cat([k_chunks * from_start, v_chunks], dim=-1)
    wide = torch.promote_types(q.dtype, torch.float32)  # torch solves no 16-bit systems
    solved = torch.linalg.solve_triangular(blocks.to(wide), rhs.to(wide), upper=False)
    solved = solved.to(q.dtype).contiguous()  # row-major as the delta rule's: g = 0, its bits
    w, u_free = solved.split([d_k, d_v], dim=-1)  # (..., m, C, d_k), (..., m, C, d_v)
    scores = (q_chunks @ k_chunks.mT * decay).tril()  # Γ_ti q_t·k_i for i ≤ t  (..., m, C, C)
    outputs = []
    for i in range(q_chunks.shape[-3]):
        u = u_free[..., i, :, :] - w[..., i, :, :] @ state.mT  # corrections U  (..., C, d_v)
        read = (q_chunks[..., i, :, :] * from_start[..., i, :, :]) @ state.mT  # (..., C, d_v)
        outputs.append(read + scores[..., i, :, :] @ u)
        chunk_gate = from_start[..., i, -1, :, None]  # exp(G_C)  (..., 1, 1)
        state = chunk_gate * state + (u * to_end[..., i, :, :]).mT @ k_chunks[..., i, :, :]
    return torch.cat(outputs, dim=-2)[..., :n, :], state  # (..., N, d_v), (..., d_v, d_k)
