"""Autoregressive decoding: the cost of generating one token, softmax against linear attention.

A decoder generates token t from its query and everything before it. Softmax attention keeps a
*KV cache* of all past keys and values and reads all of it at every step, so a step costs
O(t (d + d_v)) and the cache grows by one key and one value per token. Causal linear attention
keeps the state S_t = Σ_{j≤t} v_j φ(k_j)ᵀ `(d_v, m)` and z_t = Σ_{j≤t} φ(k_j) `(m,)` instead
(Katharopoulos et al., 2020; `attention.LinearAttentionState`): a step updates and reads that
fixed-size state, O(m d_v) at every position. Run over t = 1, …, N, the steps give
`softmax_attention(..., causal=True)` and `linear_attention(..., causal=True)` row by row.
"""

import torch

from linattn_core.attention import LinearAttentionState, check_linear_state
from linattn_core.validation import (
    check_eps,
    check_flag,
    check_same_dtype_and_device,
    check_tensor,
    softmax_scale,
)

__all__ = ["linear_decode_step", "softmax_decode_step"]


def softmax_decode_step(q, k_cache, v_cache, *, scale=None):
    """One generated token of softmax attention over a KV cache.

    o = Σ_j a_j v_j with a_j = exp(scale q·k_j) / Σ_l exp(scale q·k_l) over the t cached keys;
    `scale=None` means 1/√d, as in `softmax_attention`. The cost grows with t: t scores, a softmax
    over them and a weighted sum of t values, 2t(d + d_v) FLOPs in matrix products.

    Args:
        q: the new token's query `(..., d)`.
        k_cache, v_cache: keys `(..., t, d)` and values `(..., t, d_v)` of the t ≥ 1 tokens so
            far, the new token's included.
        scale: positive multiplier of q·k, or None for 1/√d.

    Returns:
        `(..., d_v)`.

    >>> from linattn_core import softmax_attention
    >>> from linattn_core.testing import random_qkv
    >>> q, k, v = random_qkv(n=6, d=4, d_v=3)
    >>> steps = torch.stack([softmax_decode_step(q[t], k[: t + 1], v[: t + 1]) for t in range(6)])
    >>> bool(torch.allclose(steps, softmax_attention(q, k, v, causal=True)))
    True
    """
    _check_cache(q, k_cache, v_cache)
    scale = softmax_scale("softmax_decode_step", scale, q.shape[-1])
    scores = scale * (q[..., None, :] @ k_cache.mT)  # (..., 1, t)
    return (scores.softmax(dim=-1) @ v_cache)[..., 0, :]  # (..., d_v)


def linear_decode_step(phi_q, phi_k, v, *, initial_state=None, normalize=True, eps=1e-6):
    """One generated token of causal linear attention: (its output, the state after it).

        S' = S + v φ(k)ᵀ,   z' = z + φ(k),   o = S' φ(q) / (φ(q)·z' + eps)

    (o = S' φ(q) when normalize=False, and z is not kept). The state is the
    `LinearAttentionState` of `linear_attention`, S `(..., d_v, m)` and z `(..., m)`, and the
    step is `linear_attention(..., causal=True, initial_state=state, output_final_state=True)`
    for one token. The cost does not depend on the position: 4m(d_v + 1) FLOPs in matrix
    products. As in `linear_attention`, the normalizer z is the state of a value that is
    constantly 1: one outer product [v 1] φ(k)ᵀ updates [S; zᵀ], and one product with φ(q) reads
    both; every product is a matrix product, so that `costs.matmul_flops` counts all of them.

    Args:
        phi_q, phi_k: the new token's feature-mapped query and key `(..., m)`.
        v: its value `(..., d_v)`.
        initial_state: the state of the tokens before it, or None for zeros (the first token).
        normalize: divide by the denominator; False returns the numerator.
        eps: non-negative number added to the denominator.

    Returns:
        (o `(..., d_v)`, the `LinearAttentionState` after the token).

    >>> from linattn_core import linear_attention
    >>> from linattn_core.testing import random_qkv
    >>> phi_q, phi_k, v = random_qkv(n=6, d=4, d_v=3, positive=True)
    >>> state, steps = None, []
    >>> for t in range(6):
    ...     o, state = linear_decode_step(phi_q[t], phi_k[t], v[t], initial_state=state)
    ...     steps.append(o)
    >>> expected, final = linear_attention(phi_q, phi_k, v, causal=True, output_final_state=True)
    >>> bool(torch.allclose(torch.stack(steps), expected)), bool(torch.allclose(state.S, final.S))
    (True, True)
    """
    fn = "linear_decode_step"
    _check_token(fn, phi_q, phi_k, v)
    check_flag(fn, "normalize", normalize)
    check_eps(fn, eps)
    batch = (*phi_q.shape[:-1], 1)  # one token: the (..., N, ·) layout of linear_attention
    check_linear_state(
        fn,
        initial_state,
        phi_q.reshape(batch + phi_q.shape[-1:]),
        v[..., None, :],
        normalize=normalize,
    )
    values = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1) if normalize else v  # [v 1]
    update = values[..., :, None] @ phi_k[..., None, :]  # (..., d_v + 1, m): [v 1] φ(k)ᵀ
    if initial_state is not None:
        S, z = initial_state
        update = update + (torch.cat([S, z[..., None, :]], dim=-2) if normalize else S)
    out = (update @ phi_q[..., :, None])[..., 0]  # (..., d_v + 1): [S'φ(q); φ(q)·z']
    if not normalize:
        return out, LinearAttentionState(update, None)
    state = LinearAttentionState(update[..., :-1, :], update[..., -1, :])
    return out[..., :-1] / (out[..., -1:] + eps), state


def _check_cache(q, k_cache, v_cache):
    """q `(..., d)`, caches `(..., t, d)` and `(..., t, d_v)` with t ≥ 1, one dtype and device."""
    fn = "softmax_decode_step"
    check_tensor(fn, "q", q, min_rank=1)
    check_tensor(fn, "k_cache", k_cache, min_rank=2)
    check_tensor(fn, "v_cache", v_cache, min_rank=2)
    expected = (*q.shape[:-1], k_cache.shape[-2], q.shape[-1])
    if k_cache.shape != expected or k_cache.shape[-2] == 0:
        raise ValueError(
            f"{fn}: k_cache must have the shape (..., t, d) with t ≥ 1 and the batch dimensions "
            f"and d of q; got q.shape={tuple(q.shape)}, k_cache.shape={tuple(k_cache.shape)}"
        )
    if v_cache.shape[:-1] != k_cache.shape[:-1]:
        raise ValueError(
            f"{fn}: v_cache must have the shape (..., t, d_v) with the batch dimensions and t "
            f"of k_cache; got k_cache.shape={tuple(k_cache.shape)}, "
            f"v_cache.shape={tuple(v_cache.shape)}"
        )
    check_same_dtype_and_device(fn, "q", q, k_cache=k_cache, v_cache=v_cache)


def _check_token(fn, phi_q, phi_k, v):
    """phi_q, phi_k `(..., m)` and v `(..., d_v)` with the same batch dimensions, one dtype."""
    for name, x in (("phi_q", phi_q), ("phi_k", phi_k), ("v", v)):
        check_tensor(fn, name, x, min_rank=1)
    if phi_k.shape != phi_q.shape or v.shape[:-1] != phi_q.shape[:-1]:
        raise ValueError(
            f"{fn}: phi_q and phi_k must have the same shape (..., m) and v the shape "
            f"(..., d_v) with the same batch dimensions; got phi_q.shape={tuple(phi_q.shape)}, "
            f"phi_k.shape={tuple(phi_k.shape)}, v.shape={tuple(v.shape)}"
        )
    check_same_dtype_and_device(fn, "phi_q", phi_q, phi_k=phi_k, v=v)
