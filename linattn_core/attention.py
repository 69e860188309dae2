"""Softmax attention, kernelized attention, and linear attention in three equivalent forms.

Kernelized attention replaces exp(q·k/√d) by a similarity of feature-mapped queries and keys,
s_ij = φ(q_i)·φ(k_j):

    o_i = Σ_j s_ij v_j / (Σ_j s_ij + eps),        j ≤ i when causal.

Because s_ij is a dot product, Σ_j s_ij v_j = φ(q_i) Σ_j φ(k_j)ᵀ v_j: the N×N similarity matrix
never has to exist. `linear_attention` computes the same function as `kernel_attention` in the
forms below, which trade memory for parallelism:

- "parallel": the masked N×N similarity matrix, O(N² d) time and O(N²) memory (for teaching);
- "recurrent": the state S_t = S_{t-1} + φ(k_t)ᵀ v_t one token at a time, O(N d d_v) time and an
  O(d d_v) state (the inference form);
- "chunked": the parallel form inside chunks of C tokens and the state across chunks,
  O(N C d + N d d_v) time in large matrix products (the training form); causal, it walks the
  sequence in segments with a backward pass of its own, so that its memory is the output's plus
  O(segment) (`linattn_core.chunked`).

The denominator Σ_j s_ij is the numerator for a value that is constantly 1, so the parallel and
recurrent forms compute numerators only, for v with a column of ones appended; the causal chunked
form carries the key sums beside the state instead.

`online_softmax_attention` is the other way out of the N×N matrix: exact softmax attention with
the keys in blocks (FlashAttention's recurrence), which saves memory but not arithmetic.
"""

import math
from typing import NamedTuple

import torch

from linattn_core.chunked import causal_chunked
from linattn_core.methods import LINEAR_ATTENTION_METHODS, auto_method
from linattn_core.packing import run_packed
from linattn_core.validation import (
    check_attention_inputs,
    check_choice,
    check_cu_seqlens,
    check_eps,
    check_flag,
    check_positive_int,
    check_same_dtype_and_device,
    check_tensor,
    one_per_sequence,
    softmax_scale,
    state_batch,
)


def softmax_attention(q, k, v, *, causal=False, scale=None):
    """Softmax attention, materializing the N×N matrix: the reference for everything else.

    o_i = Σ_j a_ij v_j with a_ij = exp(scale q_i·k_j) / Σ_l exp(scale q_i·k_l), over j, l ≤ i when
    causal; `scale=None` means 1/√d. Matches `torch.nn.functional.scaled_dot_product_attention`.

    Args:
        q, k: queries and keys `(..., N, d)`.
        v: values `(..., N, d_v)`.
        causal: let position i attend to positions j ≤ i only.
        scale: positive multiplier of q·k, or None for 1/√d.

    Returns:
        `(..., N, d_v)`; empty if N = 0 or a batch dimension is 0.

    >>> from linattn_core.testing import random_qkv
    >>> q, k, v = random_qkv(2, n=5, d=4, d_v=3)
    >>> softmax_attention(q, k, v, causal=True).shape
    torch.Size([2, 5, 3])
    >>> bool(torch.allclose(softmax_attention(q, k, v, causal=True)[..., 0, :], v[..., 0, :]))
    True
    """
    check_attention_inputs("softmax_attention", ("q", "k", "v"), q, k, v)
    scale = softmax_scale("softmax_attention", scale, q.shape[-1])
    scores = scale * (q @ k.mT)  # (..., N, N)
    if causal:
        n = q.shape[-2]
        future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)  # (N, N)
        scores = scores.masked_fill(future, float("-inf"))
    return scores.softmax(dim=-1) @ v  # (..., N, d_v)


def online_softmax_attention(q, k, v, *, chunk_size=64, scale=None):
    """`softmax_attention` with the keys in chunks, never holding more than N × chunk_size scores.

    FlashAttention's recurrence (Dao et al., 2022), built on the online softmax of Milakov and
    Gimelshein (2018): for every query, a running largest score μ, sum of exponentials ℓ and
    unnormalized output o, all relative to μ. A block of scores s_j updates them as

        μ' = max(μ, max_j s_j),
        ℓ' = e^(μ−μ') ℓ + Σ_j e^(s_j−μ'),
        o' = e^(μ−μ') o + Σ_j e^(s_j−μ') v_j,

    and the output is o/ℓ. The arithmetic is that of `softmax_attention`: 2N²(d + d_v) FLOPs in
    matrix products; only the memory changes, O(N · chunk_size) scores instead of N².

    Args:
        q, k: queries and keys `(..., N, d)`.
        v: values `(..., N, d_v)`.
        chunk_size: keys per block (positive int; the last block may be shorter).
        scale: positive multiplier of q·k, or None for 1/√d.

    Returns:
        `(..., N, d_v)`; empty if N = 0 or a batch dimension is 0.

    >>> from linattn_core.testing import random_qkv
    >>> q, k, v = random_qkv(2, n=50, d=8, d_v=4)
    >>> out = online_softmax_attention(q, k, v, chunk_size=16)
    >>> bool(torch.allclose(out, softmax_attention(q, k, v)))
    True
    """
    fn = "online_softmax_attention"
    check_attention_inputs(fn, ("q", "k", "v"), q, k, v)
    check_positive_int(fn, "chunk_size", chunk_size)
    scale = softmax_scale(fn, scale, q.shape[-1])
    row_max = q.new_full((*q.shape[:-1], 1), -math.inf)  # (..., N, 1): μ
    row_sum = q.new_zeros((*q.shape[:-1], 1))  # (..., N, 1): ℓ
    out = q.new_zeros((*q.shape[:-1], v.shape[-1]))  # (..., N, d_v): o
    for start in range(0, k.shape[-2], chunk_size):
        block = slice(start, start + chunk_size)  # B keys, fewer in the last block
        scores = scale * (q @ k[..., block, :].mT)  # (..., N, B): the only scores held
        new_max = torch.maximum(row_max, scores.amax(dim=-1, keepdim=True))  # μ'
        weights = torch.exp(scores - new_max)  # (..., N, B)
        rescale = torch.exp(row_max - new_max)  # (..., N, 1): e^(μ−μ')
        row_sum = rescale * row_sum + weights.sum(dim=-1, keepdim=True)
        out = rescale * out + weights @ v[..., block, :]
        row_max = new_max
    return out / row_sum  # (..., N, d_v)


def kernel_attention(phi_q, phi_k, v, *, causal=False, eps=1e-6):
    """Kernelized attention in its quadratic form, written as the definition reads.

    o_i = Σ_j s_ij v_j / (Σ_j s_ij + eps) with s_ij = φ(q_i)·φ(k_j), over j ≤ i when causal.
    With s_ij = exp(q_i·k_j/√d) and eps = 0 this is `softmax_attention`.

    Args:
        phi_q, phi_k: feature-mapped queries and keys `(..., N, d)`.
        v: values `(..., N, d_v)`.
        causal: let position i attend to positions j ≤ i only.
        eps: non-negative number added to the denominator.

    Returns:
        `(..., N, d_v)`; empty if N = 0 or a batch dimension is 0.

    >>> from linattn_core.testing import random_qkv
    >>> phi_q, phi_k, v = random_qkv(n=4, d=3, positive=True)
    >>> out = kernel_attention(phi_q, phi_k, v, causal=True, eps=0.0)
    >>> out.shape
    torch.Size([4, 3])
    >>> bool(torch.allclose(out[0], v[0]))  # the first token sees only itself
    True
    """
    check_attention_inputs("kernel_attention", ("phi_q", "phi_k", "v"), phi_q, phi_k, v)
    check_eps("kernel_attention", eps)
    similarities = _similarities(phi_q, phi_k, causal=causal)  # (..., N, N)
    return (similarities @ v) / (similarities.sum(dim=-1, keepdim=True) + eps)  # (..., N, d_v)


class LinearAttentionState(NamedTuple):
    """What causal linear attention carries from one token to the next: after tokens 1 … t,

        S = Σ_{j ≤ t} v_j φ(k_j)ᵀ `(..., d_v, d)`,    z = Σ_{j ≤ t} φ(k_j) `(..., d)`

    (z is None for unnormalized attention, which has no denominator). S has the orientation of
    the delta rule's state (`delta.delta_rule`): the output of a query is o = S φ(q), divided by
    φ(q)·z + eps when normalized. Every function of the package that takes or returns the state
    of linear attention (`linear_attention`, `decoding.linear_decode_step`) uses this one.
    """

    S: torch.Tensor
    z: torch.Tensor | None


def linear_attention(
    phi_q,
    phi_k,
    v,
    *,
    causal=False,
    normalize=True,
    method="auto",
    chunk_size=64,
    eps=1e-6,
    initial_state=None,
    output_final_state=False,
    cu_seqlens=None,
):
    """`kernel_attention` (or its numerator) in O(N) memory, in a choice of equivalent forms.

    normalize=True:  o_i = S_i φ(q_i) / (φ(q_i)·z_i + eps)
    normalize=False: o_i = S_i φ(q_i) = Σ_j s_ij v_j
    with S_i = S_0 + Σ_j v_j φ(k_j)ᵀ `(d_v, d)` and z_i = z_0 + Σ_j φ(k_j) `(d,)`, over j ≤ i when
    causal and over all j otherwise; (S_0, z_0) = `initial_state`, zero by default: the state of
    the tokens before these (a `LinearAttentionState`).

    Methods (see the module docstring for their costs):
        "parallel"  builds the masked N×N similarity matrix (O(N²) memory; for teaching);
        "recurrent" updates S_t = S_{t-1} + v_t φ(k_t)ᵀ token by token; non-causal, it
                    accumulates the full state first and then applies it to every query;
        "chunked"   causal: the parallel form inside chunks of `chunk_size` tokens plus the
                    running state of the earlier chunks (N need not be a multiple of
                    `chunk_size`), walked in segments with a backward pass of its own, so that
                    it adds its output and one segment's temporaries (`linattn_core.chunked`);
                    non-causal: every query sees the same state Vᵀφ(K), computed in one product;
        "triton"    the Triton kernels of `linattn_core.kernels` (causal: chunked kernels,
                    forward and backward; non-causal: two matrix products); CUDA tensors, or
                    CPU tensors under TRITON_INTERPRET=1; d, d_v and `chunk_size` in
                    {16, 32, 64, 128}; float32, bfloat16 or float16;
        "auto"      the fastest exact method for the inputs (`methods.auto_method`): "triton"
                    for causal attention on a CUDA device when the kernels apply; on a CPU
                    "parallel" for causal attention up to N = max(128, 2d) and "chunked"
                    otherwise (measured: `python -m linattn_core.bench auto`).

    The denominator is not checked: features that can be negative (`feature_maps.identity`,
    odd-order `feature_maps.taylor`) can make φ(q_i)·z_i + eps close to zero and the output
    blow up; the formula is computed as written. A data-dependent check would force a GPU
    synchronization on every call. `elu_plus_one` and `relu` features, and even-order `taylor`
    features, give non-negative similarities.

    Args:
        phi_q, phi_k: feature-mapped queries and keys `(..., N, d)`.
        v: values `(..., N, d_v)`.
        causal: let position i attend to positions j ≤ i only.
        normalize: divide by the denominator; False returns the numerator.
        method: one of "auto", "parallel", "recurrent", "chunked", "triton".
        chunk_size: tokens per chunk of the "chunked" and "triton" methods (positive int).
        eps: non-negative number added to the denominator.
        initial_state: a `LinearAttentionState` (S_0 `(..., d_v, d)`, z_0 `(..., d)`, z_0 None
            when normalize=False) in the inputs' dtype, or None for zeros. Gradients flow to it.
        output_final_state: also return the state after the last token, (S_0 + Σ_j v_j φ(k_j)ᵀ,
            z_0 + Σ_j φ(k_j)), which continues the sequence as `initial_state` of the next call.
        cu_seqlens: None, or for causal attention the boundaries of S packed sequences, int64
            `(S + 1,)` (0 first, N last, non-decreasing; `linattn_core.packing`): the inputs
            `(1, H, N, ·)` hold them along N, each computed as if alone, initial and final
            states one per sequence, `(S, H, ·, ·)`. The methods "parallel", "recurrent" and
            "chunked" run each sequence on its own, reading cu_seqlens on the host ("auto"
            picks among these for each sequence); "triton" runs all of them in one pass of the
            kernels, each program walking one sequence of one head, and reads nothing on the
            host (the values of cu_seqlens are checked on a CPU only).

    Returns:
        `(..., N, d_v)`, empty if N = 0 or a batch dimension is 0; with output_final_state,
        (output, `LinearAttentionState`) in the inputs' dtype.

    >>> from linattn_core import feature_maps
    >>> from linattn_core.testing import random_qkv, relative_error
    >>> q, k, v = random_qkv(2, n=100, d=8, d_v=4)
    >>> phi_q, phi_k = feature_maps.elu_plus_one(q), feature_maps.elu_plus_one(k)
    >>> out = linear_attention(phi_q, phi_k, v, causal=True, method="chunked", chunk_size=16)
    >>> out.shape
    torch.Size([2, 100, 4])
    >>> relative_error(out, kernel_attention(phi_q, phi_k, v, causal=True)) < 1e-12
    True

    A sequence cut in two, the second part starting from the first part's final state:

    >>> first, state = linear_attention(
    ...     phi_q[..., :60, :], phi_k[..., :60, :], v[..., :60, :], causal=True,
    ...     output_final_state=True)
    >>> second = linear_attention(
    ...     phi_q[..., 60:, :], phi_k[..., 60:, :], v[..., 60:, :], causal=True,
    ...     initial_state=state)
    >>> state.S.shape, state.z.shape
    (torch.Size([2, 4, 8]), torch.Size([2, 8]))
    >>> relative_error(torch.cat([first, second], dim=-2), out) < 1e-12
    True
    """
    fn = "linear_attention"
    check_attention_inputs(fn, ("phi_q", "phi_k", "v"), phi_q, phi_k, v)
    check_choice(fn, "method", method, LINEAR_ATTENTION_METHODS)
    check_positive_int(fn, "chunk_size", chunk_size)
    check_eps(fn, eps)
    flags = {"causal": causal, "normalize": normalize, "output_final_state": output_final_state}
    for name, flag in flags.items():
        check_flag(fn, name, flag)
    if cu_seqlens is not None:
        check_cu_seqlens(fn, cu_seqlens, phi_q, q_name="phi_q")
        if not causal:
            raise ValueError(
                f"{fn}: cu_seqlens needs causal=True (packed sequences); got causal=False"
            )
    check_linear_state(fn, initial_state, phi_q, v, normalize=normalize, cu_seqlens=cu_seqlens)
    if cu_seqlens is not None and method == "triton":  # on the device, no synchronization
        out = _triton(
            phi_q, phi_k, v, causal=True, normalize=normalize, chunk_size=chunk_size, eps=eps,
            initial_state=initial_state, output_final_state=output_final_state,
            cu_seqlens=cu_seqlens,
        )  # fmt: skip
        return (out[0], LinearAttentionState(*out[1])) if output_final_state else out
    if cu_seqlens is not None:
        return run_packed(
            fn, linear_attention, cu_seqlens, (phi_q, phi_k, v), initial_state,
            methods=LINEAR_ATTENTION_METHODS, method=method, returns_state=output_final_state,
            causal=True, normalize=normalize, chunk_size=chunk_size, eps=eps,
            output_final_state=output_final_state,
        )  # fmt: skip

    if method == "auto":
        method = auto_method(
            LINEAR_ATTENTION_METHODS, phi_q, v, causal=causal, chunk_size=chunk_size
        )
    if method == "triton":
        out = _triton(
            phi_q, phi_k, v, causal=causal, normalize=normalize, chunk_size=chunk_size, eps=eps,
            initial_state=initial_state, output_final_state=output_final_state,
        )  # fmt: skip
        out, state = out if output_final_state else (out, None)
    elif method == "chunked" and causal:
        out, state = causal_chunked(
            phi_q, phi_k, v, normalize=normalize, eps=eps, chunk_size=chunk_size,
            initial_state=initial_state,
        )  # fmt: skip
    else:
        out, state = _numerators(
            phi_q, phi_k, v, method, causal, normalize, eps, initial_state, output_final_state
        )
    return (out, LinearAttentionState(*state)) if output_final_state else out


def _numerators(phi_q, phi_k, v, method, causal, normalize, eps, initial_state, final):
    """The parallel and recurrent forms, and the non-causal chunked one: (output, final state),
    the parallel form's final state None unless asked for (`final`), as it costs a product.

    They compute numerators only: the denominator is the numerator of a value that is
    constantly 1, so v gets a column of ones and the state S its row zᵀ, `(..., d_v + 1, d)`.
    """
    if normalize:
        v = torch.cat([v, v.new_ones(*v.shape[:-1], 1)], dim=-1)  # (..., N, d_v + 1)
    state = None  # (..., d, d_v + 1): the state, in the orientation of φ(K)ᵀV
    if initial_state is not None:
        rows = initial_state if normalize else initial_state[:1]  # S_0 and z_0, or S_0 alone
        state = torch.cat([rows[0], *(z[..., None, :] for z in rows[1:])], dim=-2).mT
    if method == "parallel":
        out = _similarities(phi_q, phi_k, causal=causal) @ v
        if state is not None:
            out = out + phi_q @ state
        if not final:
            state = None
        elif state is None:
            state = phi_k.mT @ v
        else:
            state = state + phi_k.mT @ v
    elif method == "recurrent":
        out, state = _recurrent(phi_q, phi_k, v, state, causal=causal)
    else:  # chunked, not causal: every query sees the same state φ(K)ᵀV (..., d, d_v)
        state = phi_k.mT @ v if state is None else state + phi_k.mT @ v
        out = phi_q @ state
    if not normalize:
        return out, None if state is None else (state.mT, None)  # (..., N, d_v)
    numerator, denominator = out[..., :-1], out[..., -1:]  # (..., N, d_v), (..., N, 1)
    state = None if state is None else (state[..., :-1].mT, state[..., -1])
    return numerator / (denominator + eps), state


def check_linear_state(fn, state, phi_q, v, *, normalize, cu_seqlens=None):
    """`initial_state` of linear attention: None, or a `LinearAttentionState` (any pair) with
    S `(..., d_v, d)` and z `(..., d)` (None when not normalized), batch, dtype and device of
    the inputs; for packed inputs, one state per sequence, `(S, H, …)` (`state_batch`)."""
    if state is None:
        return
    batch, d, d_v = state_batch(phi_q, cu_seqlens), phi_q.shape[-1], v.shape[-1]
    if not isinstance(state, tuple) or len(state) != 2:
        raise TypeError(
            f"{fn}: initial_state must be a LinearAttentionState (S, z) or None; "
            f"got {type(state).__name__}"
        )
    S, z = state
    check_tensor(fn, "initial_state.S", S, min_rank=2)
    if tuple(S.shape) != (*batch, d_v, d):
        raise ValueError(
            f"{fn}: initial_state.S must have the shape (..., d_v, d) = {(*batch, d_v, d)} of "
            f"phi_q and v{one_per_sequence(cu_seqlens)}; got initial_state.S.shape={tuple(S.shape)}"
        )
    check_same_dtype_and_device(fn, "phi_q", phi_q, **{"initial_state.S": S})
    if not normalize:
        if z is not None:
            raise ValueError(
                f"{fn}: initial_state.z must be None when normalize=False (no denominator); "
                f"got a tensor of shape {tuple(z.shape)}"
            )
        return
    if z is None:
        raise ValueError(f"{fn}: initial_state.z must be a tensor when normalize=True; got None")
    check_tensor(fn, "initial_state.z", z, min_rank=1)
    if tuple(z.shape) != (*batch, d):
        raise ValueError(
            f"{fn}: initial_state.z must have the shape (..., d) = {(*batch, d)} of phi_q"
            f"{one_per_sequence(cu_seqlens)}; got initial_state.z.shape={tuple(z.shape)}"
        )
    check_same_dtype_and_device(fn, "phi_q", phi_q, **{"initial_state.z": z})


def _triton(phi_q, phi_k, v, **options):
    """The Triton kernels (`linattn_core.kernels.triton_linear_attention`) for inputs that
    `linear_attention` checked, imported on first use: triton is optional."""
    try:
        from linattn_core.kernels.linear_attention.function import linear_attention_kernels
    except ImportError as error:
        raise ImportError(
            "linear_attention: method='triton' needs the triton package (`pip install triton`, "
            f"installed with the CUDA build of torch); importing it failed: {error}"
        ) from error
    return linear_attention_kernels(phi_q, phi_k, v, **options)


def _similarities(phi_q, phi_k, *, causal):
    """s_ij = φ(q_i)·φ(k_j), zeroed above the diagonal when causal. `(..., N, N)`"""
    similarities = phi_q @ phi_k.mT  # (..., N, N)
    return similarities.tril() if causal else similarities


def _recurrent(phi_q, phi_k, v, state, *, causal):
    """(Σ_j s_ij v_j, the final state) through S_t = S_{t-1} + φ(k_t)ᵀ v_t, one token at a time,
    from `state` `(..., d, d_v)` (zeros if None).

    The state is updated out of place, so autograd can differentiate through the loop; the
    backward pass then keeps all N states, O(N d d_v) memory, fine for the sequences this form
    teaches on. Each output row is written into the output when nothing is differentiated, and
    stacked at the end when something is: written rows would make autograd copy the whole output
    at every step (O(N²) time in the backward pass), stacked ones would fragment the heap with N
    small tensors between the freed states when nothing needs them.
    """
    if state is None:
        state = v.new_zeros(*v.shape[:-2], phi_k.shape[-1], v.shape[-1])  # (..., d, d_v)
    inputs = (phi_q, phi_k, v, state)
    training = torch.is_grad_enabled() and any(x.requires_grad for x in inputs)
    out, rows = (None, []) if training else (v.new_empty(v.shape), None)  # (..., N, d_v)
    for t in range(v.shape[-2]):
        state = torch.addcmul(state, phi_k[..., t, :, None], v[..., t, None, :])  # (..., d, d_v)
        if causal:
            row = (phi_q[..., t, None, :] @ state)[..., 0, :]  # (..., d_v)
            if training:
                rows.append(row)
            else:
                out[..., t, :] = row
    if not causal:
        return phi_q @ state, state
    if not training:
        return out, state
    return (torch.stack(rows, dim=-2) if rows else v.new_empty(v.shape)), state
