"""Cost models: FLOP, byte and memory counts of the attention methods, and fits of measured
times to them. Pure arithmetic on sizes (no tensors), shared by the chapters, the widgets, the
benchmarks and their tests.
"""

import math

import numpy as np
from torch.utils.flop_counter import FlopCounterMode

from linattn_core.bench.methods import SAFETY

__all__ = [
    "chunked_flops",
    "chunked_peak_bytes",
    "crossover_length",
    "fit_chunk_model",
    "linear_flops",
    "matmul_flops",
    "softmax_flops",
]


def chunked_flops(n, d, d_v, chunk_size):
    """Multiply-adds ×2 of causal chunked linear attention with chunk size C (normalized, so
    the values carry a ones column, d_v + 1 wide):

        F(C) = 2 N C (d + d_v + 1)        intra-chunk: C×C similarities and their product with V
             + 4 N d (d_v + 1)            chunk states φ(K_c)ᵀV_c and the queries' inter-chunk term
             + (N / C) d (d_v + 1)        the prefix sum of the chunk states

    >>> chunked_flops(1024, 64, 64, 64) == 2 * 1024 * 64 * 129 + 4 * 1024 * 64 * 65 + 16 * 64 * 65
    True
    """
    return (
        2 * n * chunk_size * (d + d_v + 1) + 4 * n * d * (d_v + 1) + n * d * (d_v + 1) / chunk_size
    )


def fit_chunk_model(n, d, chunk_sizes, seconds):
    """Least-squares fit of t(C) = F(C) / P + (N / C) τ: the arithmetic at an effective rate P
    (FLOP/s) plus a fixed cost τ per chunk (small matrix products run below peak).

    Returns:
        (P, τ, predict), predict(C) -> seconds; P and τ are clipped at ≥ 0 (1/P ≥ 0).

    >>> cs = [16, 64, 256]
    >>> t = [chunked_flops(4096, 32, 32, c) / 1e9 + 4096 / c * 1e-6 for c in cs]
    >>> rate, tau, predict = fit_chunk_model(4096, 32, cs, t)
    >>> round(rate / 1e9, 3), round(tau * 1e6, 3)
    (1.0, 1.0)
    """
    basis = np.array([[chunked_flops(n, d, d, c), n / c] for c in chunk_sizes])
    inverse_rate, tau = np.clip(np.linalg.lstsq(basis, np.asarray(seconds), rcond=None)[0], 0, None)

    def predict(chunk_size):
        return float(chunked_flops(n, d, d, chunk_size) * inverse_rate + n / chunk_size * tau)

    rate = math.inf if inverse_rate == 0 else 1 / float(inverse_rate)
    return rate, float(tau), predict


def chunked_peak_bytes(n, d, chunk_size, itemsize=4):
    """The guard's estimate for chunked causal linear attention with chunk size C: inputs, padded
    chunks, C×C similarities per chunk, the intermediates and chunk states, with the bench margin.
    """
    n_chunks = -(-n // chunk_size)
    padded = n_chunks * chunk_size
    per_token = 3 * d + chunk_size + 5 * (d + 1)
    working = padded * per_token * itemsize + 3 * n_chunks * d * (d + 1) * itemsize
    return int(SAFETY * (3 * n * d * itemsize + working))


def softmax_flops(n, d, d_v):
    """FLOPs of the matrix products of non-causal softmax attention, a multiply-add counting 2:

        F_softmax = 2 N² d + 2 N² d_v        Q Kᵀ, then the weights times V

    (the exponentials and the normalization add O(N²)). Works elementwise on arrays of sizes.

    >>> softmax_flops(1024, 64, 64)
    268435456
    """
    return 2 * n * n * d + 2 * n * n * d_v


def linear_flops(n, features, d_v):
    """FLOPs of the matrix products of non-causal linear attention with D = `features` features:

        F_linear = 4 N D (d_v + 1)        the state φ(K)ᵀ[V, 1], then φ(Q) times it

    (the ones column of [V, 1] carries the denominator; computing the features is not counted).

    >>> linear_flops(1024, 64, 64)
    17039360
    """
    return 4 * n * features * (d_v + 1)


def crossover_length(d, d_v, features):
    """The sequence length N* = 2 D (d_v + 1) / (d + d_v) at which `softmax_flops` equals
    `linear_flops` (D = `features`); beyond it linear attention does fewer FLOPs.

    >>> crossover_length(64, 64, 2145)  # Taylor-2 features at d = 64
    2178.515625
    """
    return 2 * features * (d_v + 1) / (d + d_v)


def matmul_flops(fn, *args, **kwargs):
    """FLOPs of the matrix products in `fn(*args, **kwargs)`, as counted by PyTorch's
    `FlopCounterMode` (a multiply-add counts 2; elementwise operations are not counted).

    >>> import torch
    >>> matmul_flops(torch.matmul, torch.ones(8, 3), torch.ones(3, 5))
    240
    """
    with FlopCounterMode(display=False) as counter:
        fn(*args, **kwargs)
    return counter.get_total_flops()
