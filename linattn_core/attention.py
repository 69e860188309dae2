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

import torch

from linattn_core.chunked import causal_chunked
from linattn_core.validation import (
    check_attention_inputs,
    check_choice,
    check_eps,
    check_positive_int,
    softmax_scale,
)

LINEAR_ATTENTION_METHODS = ("auto", "parallel", "recurrent", "chunked", "triton")


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


def online_softmax_attention(q, k, v, *, block_size=64, scale=None):
    """`softmax_attention` with the keys in blocks, never holding more than N × block_size scores.

    FlashAttention's recurrence (Dao et al., 2022), built on the online softmax of Milakov and
    Gimelshein (2018): for every query, a running largest score μ, sum of exponentials ℓ and
    unnormalized output o, all relative to μ. A block of scores s_j updates them as

        μ' = max(μ, max_j s_j),
        ℓ' = e^(μ−μ') ℓ + Σ_j e^(s_j−μ'),
        o' = e^(μ−μ') o + Σ_j e^(s_j−μ') v_j,

    and the output is o/ℓ. The arithmetic is that of `softmax_attention`: 2N²(d + d_v) FLOPs in
    matrix products; only the memory changes, O(N · block_size) scores instead of N².

    Args:
        q, k: queries and keys `(..., N, d)`.
        v: values `(..., N, d_v)`.
        block_size: keys per block (positive int; the last block may be shorter).
        scale: positive multiplier of q·k, or None for 1/√d.

    Returns:
        `(..., N, d_v)`; empty if N = 0 or a batch dimension is 0.

    >>> from linattn_core.testing import random_qkv
    >>> q, k, v = random_qkv(2, n=50, d=8, d_v=4)
    >>> out = online_softmax_attention(q, k, v, block_size=16)
    >>> bool(torch.allclose(out, softmax_attention(q, k, v)))
    True
    """
    fn = "online_softmax_attention"
    check_attention_inputs(fn, ("q", "k", "v"), q, k, v)
    check_positive_int(fn, "block_size", block_size)
    scale = softmax_scale(fn, scale, q.shape[-1])
    row_max = q.new_full((*q.shape[:-1], 1), -math.inf)  # (..., N, 1): μ
    row_sum = q.new_zeros((*q.shape[:-1], 1))  # (..., N, 1): ℓ
    out = q.new_zeros((*q.shape[:-1], v.shape[-1]))  # (..., N, d_v): o
    for start in range(0, k.shape[-2], block_size):
        block = slice(start, start + block_size)  # B keys, fewer in the last block
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


def linear_attention(
    phi_q, phi_k, v, *, causal=False, normalize=True, method="auto", chunk_size=64, eps=1e-6
):
    """`kernel_attention` (or its numerator) in O(N) memory, in a choice of equivalent forms.

    normalize=True:  o_i = φ(q_i) S_i / (φ(q_i)·z_i + eps)
    normalize=False: o_i = φ(q_i) S_i = Σ_j s_ij v_j
    with S_i = Σ_j φ(k_j)ᵀ v_j `(d, d_v)` and z_i = Σ_j φ(k_j) `(d,)`, over j ≤ i when causal and
    over all j otherwise.

    Methods (see the module docstring for their costs):
        "parallel"  builds the masked N×N similarity matrix (O(N²) memory; for teaching);
        "recurrent" updates S_t = S_{t-1} + φ(k_t)ᵀ v_t token by token; non-causal, it
                    accumulates the full state first and then applies it to every query;
        "chunked"   causal: the parallel form inside chunks of `chunk_size` tokens plus the
                    running state of the earlier chunks (N need not be a multiple of
                    `chunk_size`), walked in segments with a backward pass of its own, so that
                    it adds its output and one segment's temporaries (`linattn_core.chunked`);
                    non-causal: every query sees the same state φ(K)ᵀV, computed in one product;
        "triton"    the Triton kernels of `linattn_core.kernels` (causal: chunked kernels,
                    forward and backward; non-causal: two matrix products); CUDA tensors, or
                    CPU tensors under TRITON_INTERPRET=1; d, d_v and `chunk_size` in
                    {16, 32, 64, 128}; float32, bfloat16 or float16;
        "auto"      the fastest exact method for the inputs: "triton" for causal attention
                    on a CUDA device when the kernels apply; on a CPU "parallel" for causal
                    attention up to N = max(128, 2d) and "chunked" otherwise (measured:
                    `python -m linattn_core.bench auto`).

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

    Returns:
        `(..., N, d_v)`; empty if N = 0 or a batch dimension is 0.

    >>> from linattn_core import feature_maps
    >>> from linattn_core.testing import random_qkv, relative_error
    >>> q, k, v = random_qkv(2, n=100, d=8, d_v=4)
    >>> phi_q, phi_k = feature_maps.elu_plus_one(q), feature_maps.elu_plus_one(k)
    >>> out = linear_attention(phi_q, phi_k, v, causal=True, method="chunked", chunk_size=16)
    >>> out.shape
    torch.Size([2, 100, 4])
    >>> relative_error(out, kernel_attention(phi_q, phi_k, v, causal=True)) < 1e-12
    True
    """
    fn = "linear_attention"
    check_attention_inputs(fn, ("phi_q", "phi_k", "v"), phi_q, phi_k, v)
    check_choice(fn, "method", method, LINEAR_ATTENTION_METHODS)
    check_positive_int(fn, "chunk_size", chunk_size)
    check_eps(fn, eps)

    if method == "auto":
        method = _auto_method(phi_q, v, causal=causal, chunk_size=chunk_size)
    if method == "triton":
        return _triton(
            phi_q, phi_k, v, causal=causal, normalize=normalize, chunk_size=chunk_size, eps=eps
        )
    if method == "chunked" and causal:
        return causal_chunked(phi_q, phi_k, v, normalize=normalize, eps=eps, chunk_size=chunk_size)
    if normalize:
        v = torch.cat([v, v.new_ones(*v.shape[:-1], 1)], dim=-1)  # (..., N, d_v + 1)
    if method == "parallel":
        out = _similarities(phi_q, phi_k, causal=causal) @ v
    elif method == "recurrent":
        out = _recurrent(phi_q, phi_k, v, causal=causal)
    else:  # chunked, not causal: every query sees the same state φ(K)ᵀV (..., d, d_v)
        out = phi_q @ (phi_k.mT @ v)
    if not normalize:
        return out  # (..., N, d_v)
    numerator, denominator = out[..., :-1], out[..., -1:]  # (..., N, d_v), (..., N, 1)
    return numerator / (denominator + eps)


def _auto_method(phi_q, v, *, causal, chunk_size) -> str:
    """The method `method="auto"` runs: the one place where that choice is made.

    On the CPU, causal attention runs the parallel form up to N = `parallel_up_to(d)` and the
    chunked form beyond (`linattn_core.bench.auto`, measured in figures/auto_cpu.json: one
    masked N × N product is faster for short sequences, the chunked walk from there on, forward
    and backward);
    non-causal attention is two matrix products, the chunked form. On a CUDA device causal
    attention runs the Triton kernels when triton is installed and they take these shapes, dtype
    and chunk size.
    """
    if phi_q.device.type != "cuda" or not causal:
        if causal and phi_q.shape[-2] <= parallel_up_to(phi_q.shape[-1]):
            return "parallel"
        return "chunked"
    try:
        from linattn_core.kernels import SUPPORTED_CHUNK_SIZES, SUPPORTED_DIMS, SUPPORTED_DTYPES
    except ImportError:
        return "chunked"
    fits = (
        phi_q.shape[-1] in SUPPORTED_DIMS
        and v.shape[-1] in SUPPORTED_DIMS
        and str(phi_q.dtype).removeprefix("torch.") in SUPPORTED_DTYPES
        and chunk_size in SUPPORTED_CHUNK_SIZES
    )
    return "triton" if fits else "chunked"


def parallel_up_to(d):
    """The longest N for which `method="auto"` runs the parallel form of causal attention on a
    CPU: max(128, 2d) (measured by `linattn_core.bench.auto`, committed in figures/auto_cpu.json).

    >>> parallel_up_to(16), parallel_up_to(64), parallel_up_to(128)
    (128, 128, 256)
    """
    return max(128, 2 * d)


def _triton(phi_q, phi_k, v, **options):
    """`linattn_core.kernels.triton_linear_attention`, imported on first use: triton is optional."""
    try:
        from linattn_core.kernels import triton_linear_attention
    except ImportError as error:
        raise ImportError(
            "linear_attention: method='triton' needs the triton package (`pip install triton`, "
            f"installed with the CUDA build of torch); importing it failed: {error}"
        ) from error
    return triton_linear_attention(phi_q, phi_k, v, **options)


def _similarities(phi_q, phi_k, *, causal):
    """s_ij = φ(q_i)·φ(k_j), zeroed above the diagonal when causal. `(..., N, N)`"""
    similarities = phi_q @ phi_k.mT  # (..., N, N)
    return similarities.tril() if causal else similarities


def _recurrent(phi_q, phi_k, v, *, causal):
    """Σ_j s_ij v_j through the state S_t = S_{t-1} + φ(k_t)ᵀ v_t, one token at a time.

    The state is updated out of place, so autograd can differentiate through the loop; the
    backward pass then keeps all N states, O(N d d_v) memory, fine for the sequences this form
    teaches on. Each output row is written into the output when nothing is differentiated, and
    stacked at the end when something is: written rows would make autograd copy the whole output
    at every step (O(N²) time in the backward pass), stacked ones would fragment the heap with N
    small tensors between the freed states when nothing needs them.
    """
    state = v.new_zeros(*v.shape[:-2], phi_k.shape[-1], v.shape[-1])  # (..., d, d_v)
    training = torch.is_grad_enabled() and any(x.requires_grad for x in (phi_q, phi_k, v))
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
        return phi_q @ state
    if not training:
        return out
    return torch.stack(rows, dim=-2) if rows else v.new_empty(v.shape)
