"""Autoregressive decoding: the cost of generating one token, softmax against linear attention.

A decoder generates token t from its query and everything before it. Softmax attention keeps a
*KV cache* of all past keys and values and reads all of it at every step, so a step costs
O(t (d + d_v)) and the cache grows by one key and one value per token. Causal linear attention
keeps the state S_t = Σ_{j≤t} φ(k_j) v_jᵀ `(m, d_v)` and z_t = Σ_{j≤t} φ(k_j) `(m,)` instead
(Katharopoulos et al., 2020): a step updates and reads that fixed-size state, O(m d_v) at every
position. Run over t = 1, …, N, the steps give `softmax_attention(..., causal=True)` and
`linear_attention(..., causal=True, eps=0)` row by row.
"""

import torch

from linattn_core.validation import (
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


def linear_decode_step(phi_q, phi_k, v, state, normalizer):
    """One generated token of causal linear attention, updating the state in place.

        S += φ(k) vᵀ,   z += φ(k),   o = Sᵀφ(q) / φ(q)·z

    The cost does not depend on the position: 4m(d_v + 1) FLOPs in matrix products. As in
    `linear_attention`, the normalizer z is the state of a value that is constantly 1: one outer
    product with [v 1] updates [S z], and φ(q) reads both; every product is a matrix product, so
    that `costs.matmul_flops` counts all of them. No eps is added to the denominator (the form of
    `linear_attention(..., eps=0)`), so features should be positive.

    Args:
        phi_q, phi_k: the new token's feature-mapped query and key `(..., m)`.
        v: its value `(..., d_v)`.
        state: S `(..., m, d_v)`, the sum of φ(k_j) v_jᵀ over earlier tokens (zeros at the
            start); updated in place.
        normalizer: z `(..., m)`, the sum of φ(k_j) over earlier tokens; updated in place.

    Returns:
        `(..., d_v)`.

    >>> from linattn_core import linear_attention
    >>> from linattn_core.testing import random_qkv
    >>> phi_q, phi_k, v = random_qkv(n=6, d=4, d_v=3, positive=True)
    >>> state, normalizer = v.new_zeros(4, 3), v.new_zeros(4)  # S_0 = 0, z_0 = 0
    >>> steps = [linear_decode_step(phi_q[t], phi_k[t], v[t], state, normalizer) for t in range(6)]
    >>> expected = linear_attention(phi_q, phi_k, v, causal=True, eps=0.0)
    >>> bool(torch.allclose(torch.stack(steps), expected))
    True
    """
    _check_state(phi_q, phi_k, v, state, normalizer)
    values = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)  # (..., d_v + 1): [v 1]
    update = phi_k[..., :, None] @ values[..., None, :]  # (..., m, d_v + 1): φ(k)[v 1]
    state.add_(update[..., :-1])  # S += φ(k) vᵀ
    normalizer.add_(update[..., -1])  # z += φ(k)
    row = phi_q[..., None, :]  # (..., 1, m)
    return (row @ state)[..., 0, :] / (row @ normalizer[..., :, None])[..., 0, :]  # (..., d_v)


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


def _check_state(phi_q, phi_k, v, state, normalizer):
    """phi_q, phi_k, normalizer `(..., m)`, v `(..., d_v)`, state `(..., m, d_v)`, one dtype."""
    fn = "linear_decode_step"
    for name, x in (("phi_q", phi_q), ("phi_k", phi_k), ("v", v), ("normalizer", normalizer)):
        check_tensor(fn, name, x, min_rank=1)
    check_tensor(fn, "state", state, min_rank=2)
    shapes = {"phi_q": phi_q.shape, "phi_k": phi_k.shape, "normalizer": normalizer.shape}
    if len(set(shapes.values())) > 1 or v.shape[:-1] != phi_q.shape[:-1]:
        received = ", ".join(f"{name}.shape={tuple(s)}" for name, s in shapes.items())
        raise ValueError(
            f"{fn}: phi_q, phi_k and normalizer must have the same shape (..., m) and v the shape "
            f"(..., d_v) with the same batch dimensions; got {received}, v.shape={tuple(v.shape)}"
        )
    if state.shape != (*phi_k.shape, v.shape[-1]):
        raise ValueError(
            f"{fn}: state must have the shape (..., m, d_v) of phi_k and v; got "
            f"phi_k.shape={tuple(phi_k.shape)}, v.shape={tuple(v.shape)}, "
            f"state.shape={tuple(state.shape)}"
        )
    others = {"phi_k": phi_k, "v": v, "state": state, "normalizer": normalizer}
    check_same_dtype_and_device(fn, "phi_q", phi_q, **others)
