"""The delta rule and the "diagonal + masked low-rank" triangular systems behind it.

DeltaNet's state (Schlag et al. 2021; Yang et al. 2024) S_t ∈ R^{d_v×d_k} corrects its
prediction S_{t-1}k_t of the value v_t:

    S_t = S_{t-1} + β_t (v_t − S_{t-1} k_t) k_tᵀ,        o_t = S_t q_t.

Unrolled over a chunk of tokens, the corrections u_t = β_t (v_t − S_{t-1} k_t) solve the lower
triangular system (I + diag(β) tril(K Kᵀ, −1)) U = diag(β)(V − K S_0ᵀ). Systems of this shape,

    T = diag(λ) + tril(Q Kᵀ, −1),        Q, K ∈ R^{n×d},  n ≫ d,

are cheap although T is full below the diagonal: the strictly lower part is low rank before
the mask, so a running d×(...) summary of the rows already solved replaces T's rows.

- `triangular_matrix`: T itself, O(n²) memory, for checks;
- `triangular_inverse`: T⁻¹ in O(n²d), caching Z = K_{[:l]}ᵀ (T⁻¹)_{[:l,:l]} `(d, l)`;
- `triangular_solve`: T⁻¹V in O(n d (c + d_v)), caching H = K_{[:l]}ᵀ (T⁻¹V)_{[:l]} `(d, d_v)`
  and building only T's c×c diagonal blocks;
- `delta_rule`: the recurrence token by token ("recurrent"), or chunk by chunk with the chunk's
  triangular system solved for all chunks at once (the UT / WY form, "chunked"), or that form
  in Triton kernels, forward and backward ("triton", `linattn_core.kernels.delta_rule`);
- `delta_rule_loop`: the recurrence for one sequence as the formula reads, the reference;
- `deltanet_inputs`: well-conditioned DeltaNet inputs (unit keys, β in [0, 1)) for checks;
- `triangular_system_inputs`: factors of a general T (diagonal of both signs) for checks.

The functions check shapes, dtypes, devices and options, never tensor values
(`linattn_core.validation`): a zero on the diagonal makes T singular, and the result then holds
inf or nan.
"""

import math

import torch
import torch.nn.functional as F

from linattn_core.methods import DELTA_RULE_METHODS, auto_method
from linattn_core.packing import run_packed
from linattn_core.validation import (
    check_attention_inputs,
    check_choice,
    check_cu_seqlens,
    check_flag,
    check_matrix,
    check_non_negative_int,
    check_positive_int,
    check_positive_number,
    check_same_dtype_and_device,
    check_tensor,
    one_per_sequence,
    state_batch,
)

__all__ = [
    "delta_rule",
    "delta_rule_loop",
    "deltanet_inputs",
    "gated_delta_rule",
    "triangular_inverse",
    "triangular_matrix",
    "triangular_solve",
    "triangular_system_inputs",
]


def triangular_matrix(q, k, diag):
    """T = diag(diag) + tril(q kᵀ, −1), formed explicitly: O(n²) memory, for checks.

    Args:
        q, k: the factors of the strictly lower part `(..., n, d)`.
        diag: the diagonal λ `(..., n)`.

    Returns:
        T `(..., n, n)`: λ_i on the diagonal, q_i·k_j below it (i > j), 0 above.

    >>> q = torch.ones(3, 1, dtype=torch.float64)
    >>> k = torch.tensor([[0.0], [1.0], [2.0]], dtype=torch.float64)
    >>> triangular_matrix(q, k, torch.full((3,), 5.0, dtype=torch.float64))
    tensor([[5., 0., 0.],
            [0., 5., 0.],
            [0., 1., 5.]], dtype=torch.float64)
    """
    _check_system("triangular_matrix", q, k, diag)
    return torch.diag_embed(diag) + (q @ k.mT).tril(-1)  # (..., n, n)


def triangular_inverse(q, k, diag, *, chunk_size=64):
    """T⁻¹ for T = diag(diag) + tril(q kᵀ, −1), by the chunked low-rank recursion.

    Chunk by chunk (rows l, ..., l + c − 1), with Z = K_{[:l]}ᵀ (T⁻¹)_{[:l,:l]} `(d, l)`:

        (T⁻¹)_{cc} = (T_{cc})⁻¹                        (a c×c triangular inverse)
        (T⁻¹)_{c,:l} = −(T_{cc})⁻¹ Q_c Z
        Z ← [Z, 0] + K_cᵀ (T⁻¹)_{c,:l+c}

    O(n² d + n c²) time; T itself is never formed and no general inverse is taken.

    Args:
        q, k: the factors of the strictly lower part `(..., n, d)`.
        diag: the diagonal λ `(..., n)`. Its values are not checked: T is invertible exactly
            when every λ_i is nonzero, and a zero λ_i gives inf or nan in row i of the result
            and in every row computed from it.
        chunk_size: rows per step (positive int); any value gives the same T⁻¹.

    Returns:
        T⁻¹ `(..., n, n)`, lower triangular with diagonal 1/λ.

    >>> from linattn_core.testing import random_qkv, relative_error
    >>> q, k, _ = random_qkv(n=10, d=3)
    >>> diag = torch.full((10,), 2.0, dtype=torch.float64)
    >>> inverse = triangular_inverse(q, k, diag, chunk_size=4)
    >>> T = torch.diag(diag) + (q @ k.mT).tril(-1)
    >>> relative_error(inverse @ T, torch.eye(10, dtype=torch.float64)) < 1e-12
    True
    """
    fn = "triangular_inverse"
    _check_system(fn, q, k, diag)
    check_positive_int(fn, "chunk_size", chunk_size)
    n, d = q.shape[-2:]
    if n == 0:
        return q.new_zeros(*q.shape[:-1], 0)  # (..., 0, 0)
    chunk_size = min(chunk_size, n)
    q_chunks, k_chunks = _split_chunks(q, chunk_size), _split_chunks(k, chunk_size)
    diag_chunks = _split_chunks(diag[..., None], chunk_size, fill=1.0)[..., 0]  # (..., m, C)
    blocks = _diagonal_blocks(q_chunks, k_chunks, diag_chunks)  # (..., m, C, C)
    identity = torch.eye(chunk_size, dtype=q.dtype, device=q.device)  # (C, C)
    block_inverses = torch.linalg.solve_triangular(blocks, identity, upper=False)  # (..., m, C, C)
    solved_q = block_inverses @ q_chunks  # (T_cc)⁻¹ Q_c  (..., m, C, d)
    padded_n = q_chunks.shape[-3] * chunk_size
    inverse = q.new_zeros(*q.shape[:-2], padded_n, padded_n)  # (..., m C, m C)
    cache = q.new_zeros(*q.shape[:-2], d, 0)  # Z = K_{[:l]}ᵀ (T⁻¹)_{[:l,:l]}  (..., d, l)
    for i, start in enumerate(range(0, padded_n, chunk_size)):
        left = -solved_q[..., i, :, :] @ cache  # (..., C, l)
        row = torch.cat([left, block_inverses[..., i, :, :]], dim=-1)  # (..., C, l + C)
        cache = F.pad(cache, (0, chunk_size)) + k_chunks[..., i, :, :].mT @ row  # (..., d, l + C)
        end = start + chunk_size
        inverse[..., start:end, :end] = row  # rows [l, l + C) of T⁻¹
    return inverse[..., :n, :n]  # (..., n, n)


def triangular_solve(q, k, diag, v, *, chunk_size=64):
    """X = T⁻¹ v for T = diag(diag) + tril(q kᵀ, −1), without forming T or any n×n matrix.

    Chunk by chunk, with H = K_{[:l]}ᵀ X_{[:l]} `(d, d_v)` summarizing the rows solved so far:

        X_c = (T_{cc})⁻¹ (V_c − Q_c H),        H ← H + K_cᵀ X_c.

    Only T's c×c diagonal blocks are built; (T_{cc})⁻¹V_c and (T_{cc})⁻¹Q_c are solved for all
    chunks at once, so the sequential part is d×d_v-sized. O(n c (d + d_v) + n d d_v) time,
    O(n (c + d + d_v)) memory.

    Args:
        q, k: the factors of the strictly lower part `(..., n, d)`.
        diag: the diagonal λ `(..., n)`. Its values are not checked: T is invertible exactly
            when every λ_i is nonzero, and a zero λ_i gives inf or nan in row i of X and in the
            rows after it (they depend on it).
        v: right-hand sides `(..., n, d_v)`.
        chunk_size: rows per step (positive int); any value gives the same X.

    Returns:
        X `(..., n, d_v)` with T X = v.

    >>> from linattn_core.testing import random_qkv, relative_error
    >>> q, k, v = random_qkv(2, n=100, d=4, d_v=3)
    >>> diag = torch.ones(2, 100, dtype=torch.float64)
    >>> x = triangular_solve(q / 4, k / 4, diag, v, chunk_size=16)
    >>> T = torch.diag_embed(diag) + (q @ k.mT / 16).tril(-1)
    >>> relative_error(T @ x, v) < 1e-12
    True
    """
    fn = "triangular_solve"
    _check_system(fn, q, k, diag, v)
    check_positive_int(fn, "chunk_size", chunk_size)
    return _triangular_solve(q, k, diag, v, chunk_size=chunk_size)


def delta_rule(
    q,
    k,
    v,
    beta,
    *,
    method="auto",
    chunk_size=64,
    initial_state=None,
    output_final_state=True,
    cu_seqlens=None,
):
    """The delta rule (DeltaNet's recurrence) over a sequence, as a recurrence or chunk by chunk.

        S_t = S_{t-1} + β_t (v_t − S_{t-1} k_t) k_tᵀ,        o_t = S_t q_t,

    with S_0 = `initial_state` (zeros if None); q is not scaled.

    Methods (the names and the "auto" rule of every operation: `linattn_core.methods`):
        "recurrent" one token at a time: O(N d_k d_v) time, an O(d_k d_v) state;
        "chunked"   for a chunk of C tokens with state S_0 at its start, the corrections
                    U = (u_t), u_t = β_t (v_t − S_{t-1} k_t), are U = Ũ − W S_0ᵀ, where
                    W = A diag(β) K and Ũ = A diag(β) V with A = (I + diag(β) tril(K Kᵀ, −1))⁻¹
                    (the UT transform; Π_t (I − β_t k_t k_tᵀ) = I − Wᵀ K is the WY form).
                    W and Ũ come from one triangular solve for all chunks at once; then chunk
                    by chunk O = Q S_0ᵀ + tril(Q Kᵀ) U and S_C = S_0 + Uᵀ K.
                    O(N C (d_k + d_v) + N d_k d_v) time in matrix products.
        "triton"    the chunked form in Triton kernels (`linattn_core.kernels.delta_rule`):
                    chunks of 64, d_k and d_v in {16, 32, 64, 128}, float32 / bfloat16 /
                    float16; on CUDA tensors, or on the CPU in the Triton interpreter;
        "auto"      the default, as for `linear_attention`: "triton" on a CUDA device when the
                    kernels take the inputs, "chunked" otherwise (exact, and faster than the
                    token loop); a caller that needs one form names it.

    Args:
        q, k: queries and keys `(..., N, d_k)` (DeltaNet normalizes keys to unit length).
        v: values `(..., N, d_v)`.
        beta: learning rates β_t `(..., N)` (DeltaNet: in (0, 1)).
        method: "auto", "recurrent", "chunked" or "triton".
        chunk_size: tokens per chunk of "chunked" (positive int); N need not be a multiple.
        initial_state: S_0 `(..., d_v, d_k)`, or None for zeros. Gradients flow to it.
        output_final_state: also return the state after the last token (the default: the
            pair (o, S) of the API), which continues the sequence as `initial_state` of the
            next call; False returns o alone, as `linear_attention` does by default.
        cu_seqlens: None, or the boundaries of S packed sequences, int64 `(S + 1,)` (0 first,
            N last, non-decreasing; `linattn_core.packing`): the inputs `(1, H, N, ·)` hold
            them along N, each computed as if alone, initial and final states one per
            sequence, `(S, H, d_v, d_k)`. Every method takes them ("auto" picks "chunked"
            for each sequence); "triton" runs all of them in one pass of the kernels, without
            reading cu_seqlens on the host (no synchronization with a GPU).

    Returns:
        (o, S): outputs `(..., N, d_v)` and the final state S_N `(..., d_v, d_k)`, in the
        orientation of `LinearAttentionState.S`; o alone when output_final_state=False.

    >>> from linattn_core.testing import random_qkv, relative_error
    >>> q, k, v = random_qkv(2, n=50, d=4, d_v=3)
    >>> k = k / k.norm(dim=-1, keepdim=True)
    >>> beta = torch.full((2, 50), 0.5, dtype=torch.float64)
    >>> o, state = delta_rule(q, k, v, beta, method="recurrent")
    >>> o.shape, state.shape
    (torch.Size([2, 50, 3]), torch.Size([2, 3, 4]))
    >>> o_chunked, state_chunked = delta_rule(q, k, v, beta, method="chunked", chunk_size=16)
    >>> relative_error(o_chunked, o) < 1e-12 and relative_error(state_chunked, state) < 1e-12
    True
    >>> relative_error(delta_rule(q, k, v, beta, output_final_state=False), o) < 1e-12
    True
    """
    fn = "delta_rule"
    _check_delta_inputs(fn, q, k, v, beta, initial_state, cu_seqlens)
    check_choice(fn, "method", method, DELTA_RULE_METHODS)
    check_positive_int(fn, "chunk_size", chunk_size)
    check_flag(fn, "output_final_state", output_final_state)
    if cu_seqlens is not None and method != "triton":
        return run_packed(
            fn, delta_rule, cu_seqlens, (q, k, v, beta), initial_state,
            methods=DELTA_RULE_METHODS, method=method, returns_state=output_final_state,
            chunk_size=chunk_size, output_final_state=output_final_state,
        )  # fmt: skip
    if method == "auto":
        method = auto_method(DELTA_RULE_METHODS, q, v, chunk_size=chunk_size)
    if method == "triton":
        from linattn_core.kernels.delta_rule.function import delta_rule_kernels  # triton: optional

        o, state = delta_rule_kernels(
            q, k, v, beta, chunk_size=chunk_size, initial_state=initial_state, cu_seqlens=cu_seqlens
        )
    else:
        o, state = _delta_rule(q, k, v, beta, initial_state, method, chunk_size)
    return (o, state) if output_final_state else o


def _delta_rule(q, k, v, beta, state, method, chunk_size):
    """The recurrent and chunked forms on checked inputs: (o, the final state)."""
    if state is None:
        state = q.new_zeros(*q.shape[:-2], v.shape[-1], q.shape[-1])  # (..., d_v, d_k)
    if q.shape[-2] == 0:
        return v.new_zeros(v.shape), state
    if method == "recurrent":
        return _delta_recurrent(q, k, v, beta, state)
    return _delta_chunked(q, k, v, beta, state, chunk_size=chunk_size)


def delta_rule_loop(q, k, v, beta, *, initial_state=None):
    """The delta rule for one sequence, token by token, as the recurrence reads: the reference.

        S_t = S_{t-1} + β_t (v_t − S_{t-1} k_t) k_tᵀ,        o_t = S_t q_t.

    The same function as `delta_rule(..., method="recurrent")` without batch dimensions, written
    so that every line is one line of the math; `delta_rule` is checked against it.

    Args:
        q, k: queries and keys `(N, d_k)`.
        v: values `(N, d_v)`.
        beta: learning rates β_t `(N,)`.
        initial_state: S_0 `(d_v, d_k)`, or None for zeros.

    Returns:
        (o, S): outputs `(N, d_v)` and the final state S_N `(d_v, d_k)`.

    >>> q, k, v, beta, state = deltanet_inputs(n=20, d_k=4, d_v=3)
    >>> o, final_state = delta_rule_loop(q, k, v, beta, initial_state=state)
    >>> o_batched, state_batched = delta_rule(q, k, v, beta, initial_state=state)
    >>> torch.allclose(o, o_batched) and torch.allclose(final_state, state_batched)
    True
    """
    fn = "delta_rule_loop"
    check_matrix(fn, "q", q)
    _check_delta_inputs(fn, q, k, v, beta, initial_state)
    state = q.new_zeros(v.shape[-1], q.shape[-1]) if initial_state is None else initial_state
    outputs = []
    for q_t, k_t, v_t, beta_t in zip(q, k, v, beta, strict=True):
        state = state + beta_t * torch.outer(v_t - state @ k_t, k_t)  # (d_v, d_k)
        outputs.append(state @ q_t)  # (d_v,)
    return torch.stack(outputs) if outputs else v.new_zeros(v.shape), state


def deltanet_inputs(*batch, n, d_k, d_v, seed=0, dtype=torch.float64):
    """Seeded inputs of the kind DeltaNet feeds the delta rule, for checks and experiments.

    q, k, v standard normal with the keys scaled to unit length, rates β uniform on [0, 1) and
    an initial state S_0 standard normal: the regime where the delta rule's triangular systems
    are well conditioned (every I − β_t k_t k_tᵀ is non-expansive). Drawn in float64 from a
    private generator in the order q, k, v, β, S_0, then cast to `dtype`.

    Args:
        *batch: leading batch dimensions (non-negative ints).
        n: sequence length N; d_k, d_v: key and value dimensions (non-negative ints).
        seed: seed of the generator.
        dtype: dtype of the returned tensors.

    Returns:
        (q, k, v, beta, initial_state): `(*batch, N, d_k)`, `(*batch, N, d_k)`, `(*batch, N, d_v)`,
        `(*batch, N)`, `(*batch, d_v, d_k)`.

    >>> q, k, v, beta, state = deltanet_inputs(2, n=5, d_k=4, d_v=3)
    >>> k.shape, beta.shape, state.shape
    (torch.Size([2, 5, 4]), torch.Size([2, 5]), torch.Size([2, 3, 4]))
    >>> torch.allclose(k.norm(dim=-1), torch.ones(2, 5, dtype=torch.float64))
    True
    >>> bool(((beta > 0) & (beta < 1)).all())
    True
    """
    fn = "deltanet_inputs"
    _check_sizes(fn, batch, n=n, d_k=d_k, d_v=d_v)
    draw = {"generator": torch.Generator().manual_seed(seed), "dtype": torch.float64}
    q, k, v = (torch.randn(*batch, n, d, **draw) for d in (d_k, d_k, d_v))
    k = k / k.norm(dim=-1, keepdim=True)  # unit keys
    beta = torch.rand(*batch, n, **draw)  # (*batch, N), in [0, 1)
    initial_state = torch.randn(*batch, d_v, d_k, **draw)
    return tuple(x.to(dtype) for x in (q, k, v, beta, initial_state))


def triangular_system_inputs(*batch, n, d, d_v=1, scale=1.0, seed=0, dtype=torch.float64):
    """Seeded factors of a general T = diag(λ) + tril(q kᵀ, −1) and right-hand sides v.

    q and k standard normal divided by √d (rows of norm ≈ 1; q also multiplied by `scale`, which
    scales the strictly lower part of T), λ_i of random sign with |λ_i| uniform on [0.5, 2], v
    standard normal. The diagonal stays away from 0 and has both signs, unlike the delta rule's
    (`deltanet_inputs`); how well T is conditioned depends on n, d and `scale` (a smaller scale,
    a better conditioned T). Drawn in float64 from a private generator in the order q, k, the
    signs, |λ|, v, then cast to `dtype`.

    Args:
        *batch: leading batch dimensions (non-negative ints).
        n: size of T; d: rank of its strictly lower part; d_v: columns of v (non-negative ints).
        scale: factor of q (positive finite number).
        seed: seed of the generator.
        dtype: dtype of the returned tensors.

    Returns:
        (q, k, diag, v): `(*batch, n, d)`, `(*batch, n, d)`, `(*batch, n)`, `(*batch, n, d_v)`.

    >>> q, k, diag, v = triangular_system_inputs(2, n=6, d=3, d_v=4)
    >>> q.shape, diag.shape, v.shape
    (torch.Size([2, 6, 3]), torch.Size([2, 6]), torch.Size([2, 6, 4]))
    >>> bool(((diag.abs() >= 0.5) & (diag.abs() <= 2)).all())
    True
    """
    fn = "triangular_system_inputs"
    _check_sizes(fn, batch, n=n, d=d, d_v=d_v)
    check_positive_number(fn, "scale", scale)
    draw = {"generator": torch.Generator().manual_seed(seed), "dtype": torch.float64}
    root_d = math.sqrt(max(d, 1))  # d = 0: empty factors, T = diag(λ)
    q = scale * torch.randn(*batch, n, d, **draw) / root_d  # (*batch, n, d)
    k = torch.randn(*batch, n, d, **draw) / root_d  # (*batch, n, d)
    signs = torch.where(torch.rand(*batch, n, **draw) < 0.5, -1.0, 1.0)  # (*batch, n)
    diag = signs * (0.5 + 1.5 * torch.rand(*batch, n, **draw))  # (*batch, n), 0.5 ≤ |λ_i| ≤ 2
    v = torch.randn(*batch, n, d_v, **draw)  # (*batch, n, d_v)
    return tuple(x.to(dtype) for x in (q, k, diag, v))


def _triangular_solve(q, k, diag, v, *, chunk_size):
    """`triangular_solve` without the input checks (the delta rule calls it with diag = 1)."""
    n, d = q.shape[-2:]
    if n == 0:
        return v.new_zeros(v.shape)
    chunk_size = min(chunk_size, n)
    q_chunks, k_chunks, v_chunks = (_split_chunks(x, chunk_size) for x in (q, k, v))
    diag_chunks = _split_chunks(diag[..., None], chunk_size, fill=1.0)[..., 0]  # (..., m, C)
    blocks = _diagonal_blocks(q_chunks, k_chunks, diag_chunks)  # (..., m, C, C)
    solved = torch.linalg.solve_triangular(
        blocks, torch.cat([v_chunks, q_chunks], dim=-1), upper=False
    )  # (..., m, C, d_v + d)
    solved_v, solved_q = solved.split([v.shape[-1], d], dim=-1)  # (T_cc)⁻¹V_c, (T_cc)⁻¹Q_c
    cache = v.new_zeros(*v.shape[:-2], d, v.shape[-1])  # H = K_{[:l]}ᵀ X_{[:l]}  (..., d, d_v)
    x_chunks = []
    for i in range(q_chunks.shape[-3]):
        x = solved_v[..., i, :, :] - solved_q[..., i, :, :] @ cache  # (..., C, d_v)
        cache = cache + k_chunks[..., i, :, :].mT @ x  # (..., d, d_v)
        x_chunks.append(x)
    return torch.cat(x_chunks, dim=-2)[..., :n, :]  # (..., n, d_v)


def _delta_recurrent(q, k, v, beta, state):
    """S_t = S_{t-1} + β_t (v_t − S_{t-1}k_t) k_tᵀ out of place, so autograd sees every step."""
    outputs = []
    for t in range(q.shape[-2]):
        k_t = k[..., t, :]  # (..., d_k)
        error = v[..., t, :] - (state @ k_t[..., None])[..., 0]  # v_t − S_{t-1}k_t  (..., d_v)
        update = (beta[..., t, None] * error)[..., :, None] * k_t[..., None, :]  # (..., d_v, d_k)
        state = state + update
        outputs.append((state @ q[..., t, :, None])[..., 0])  # (..., d_v)
    return torch.stack(outputs, dim=-2), state  # (..., N, d_v), (..., d_v, d_k)


def _delta_chunked(q, k, v, beta, state, *, chunk_size):
    """The UT / WY form: W and Ũ for every chunk in one solve, then a loop over chunks.

    Padded tokens have k = 0 and β = 0: their rows of the system are rows of I with a zero
    right-hand side, so their corrections are 0 and they change neither outputs nor state.
    """
    n, d_k, d_v = q.shape[-2], q.shape[-1], v.shape[-1]
    chunk_size = min(chunk_size, n)
    q_chunks, k_chunks, v_chunks = (_split_chunks(x, chunk_size) for x in (q, k, v))
    beta_chunks = _split_chunks(beta[..., None], chunk_size)  # (..., m, C, 1)
    # (I + diag(β) tril(K Kᵀ, −1)) [W, Ũ] = diag(β) [K, V], one C×C system per chunk
    rhs = beta_chunks * torch.cat([k_chunks, v_chunks], dim=-1)  # (..., m, C, d_k + d_v)
    ones = torch.ones_like(beta_chunks[..., 0])  # (..., m, C)
    solved = _triangular_solve(beta_chunks * k_chunks, k_chunks, ones, rhs, chunk_size=chunk_size)
    w, u_free = solved.split([d_k, d_v], dim=-1)  # (..., m, C, d_k), (..., m, C, d_v)
    scores = (q_chunks @ k_chunks.mT).tril()  # q_t·k_i for i ≤ t  (..., m, C, C)
    outputs = []
    for i in range(q_chunks.shape[-3]):
        u = u_free[..., i, :, :] - w[..., i, :, :] @ state.mT  # corrections U  (..., C, d_v)
        outputs.append(q_chunks[..., i, :, :] @ state.mT + scores[..., i, :, :] @ u)
        state = state + u.mT @ k_chunks[..., i, :, :]  # (..., d_v, d_k)
    return torch.cat(outputs, dim=-2)[..., :n, :], state  # (..., N, d_v), (..., d_v, d_k)


def _diagonal_blocks(q_chunks, k_chunks, diag_chunks):
    """T's diagonal blocks diag(λ_c) + tril(Q_c K_cᵀ, −1) for all chunks. `(..., m, C, C)`"""
    strictly_lower = (q_chunks @ k_chunks.mT).tril(-1)  # (..., m, C, C)
    return torch.diagonal_scatter(strictly_lower, diag_chunks, dim1=-2, dim2=-1)


def _split_chunks(x, chunk_size, fill=0.0):
    """(..., n, f) -> (..., m, C, f), padding n up to a multiple of C with rows of `fill`.

    With q = k = 0 and λ = 1 the padded rows add an identity block to T, which leaves the
    solution of the original rows unchanged; they are cut off at the end.
    """
    n_chunks = -(-x.shape[-2] // chunk_size)
    padded = F.pad(x, (0, 0, 0, n_chunks * chunk_size - x.shape[-2]), value=fill)
    return padded.unflatten(-2, (n_chunks, chunk_size))


def _check_sizes(fn, batch, **sizes):
    """Batch dimensions and named sizes of the tensors a generator draws: non-negative ints."""
    for i, size in enumerate(batch):
        check_non_negative_int(fn, f"batch[{i}]", size)
    for name, size in sizes.items():
        check_non_negative_int(fn, name, size)


def _check_delta_inputs(fn, q, k, v, beta, initial_state, cu_seqlens=None):
    """q, k `(..., N, d_k)`, v `(..., N, d_v)`, beta `(..., N)` and initial_state (None or
    `(..., d_v, d_k)`), all of one dtype and device; with cu_seqlens, packed inputs
    `(1, H, N, ·)` and one initial state per sequence, `(S, H, d_v, d_k)`."""
    check_attention_inputs(fn, ("q", "k", "v"), q, k, v)
    _check_one_per_row(fn, "beta", beta, q, rows="N")
    if cu_seqlens is not None:
        check_cu_seqlens(fn, cu_seqlens, q)
    if initial_state is None:
        return
    state_shape = (*state_batch(q, cu_seqlens), v.shape[-1], q.shape[-1])
    check_tensor(fn, "initial_state", initial_state, min_rank=2)
    if initial_state.shape != state_shape:
        raise ValueError(
            f"{fn}: initial_state must have shape (..., d_v, d_k) = {state_shape}"
            f"{one_per_sequence(cu_seqlens)}; got initial_state.shape={tuple(initial_state.shape)}"
        )
    check_same_dtype_and_device(fn, "q", q, initial_state=initial_state)


def _check_system(fn, q, k, diag, v=None):
    """q, k `(..., n, d)` of equal shape, diag `(..., n)` and v `(..., n, d_v)` (if given), all of
    one dtype and device; d ≥ 1."""
    names, v = (("q", "k", "k"), k) if v is None else (("q", "k", "v"), v)
    check_attention_inputs(fn, names, q, k, v)  # the checks of attention inputs, n for N
    _check_one_per_row(fn, "diag", diag, q, rows="n")


def _check_one_per_row(fn, name, x, q, *, rows):
    """x `(..., rows)`: one number per row of q, of q's dtype and device."""
    check_tensor(fn, name, x, min_rank=1)
    if x.shape != q.shape[:-1]:
        raise ValueError(
            f"{fn}: {name} must have shape q.shape[:-1] = (..., {rows}); "
            f"got q.shape={tuple(q.shape)}, {name}.shape={tuple(x.shape)}"
        )
    check_same_dtype_and_device(fn, "q", q, **{name: x})


# the gated rule (linattn_core/gated.py) builds on the helpers above; api.md names it here too
from linattn_core.gated import gated_delta_rule  # noqa: E402
