"""Cost models: FLOP, byte and memory counts of the attention methods, the crossover lengths they
predict, and fits of measured times to them. Formulas on sizes, shared by the chapters, the
explorers, the benchmarks and their tests; `matmul_flops` instead counts what a function actually
runs, under torch's `FlopCounterMode`, to check the formulas against.

Three crossovers, one per model: `flop_crossover_length` (FLOP counts of a feature map, the
Taylor-kernel chapter), `roofline_crossover_length` (the roofline with minimum bytes, the
scaling chapter's proposition) and, for the bytes the Triton kernels move,
`linattn_core.kernels.tools.cost_model.kernel_roofline_crossover_length`;
`linattn_core.bench.results.measured_crossovers` sets the measured one beside the roofline's.
"""

import math

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from linattn_core.chunked import segments

__all__ = [
    "CHUNK_SIZE",
    "FORMULAS",
    "chunked_flops",
    "chunked_peak_bytes",
    "fit_chunk_model",
    "flop_count",
    "flop_crossover_length",
    "linear_flops",
    "matmul_flops",
    "roofline_crossover_length",
    "roofline_times",
    "softmax_flops",
    "traffic_bytes",
]


def chunked_flops(n, d, d_v, chunk_size, *, normalize=True):
    """FLOPs in the matrix products of causal chunked linear attention (`linattn_core.chunked`),
    2 per multiply-add, for chunks of C tokens and a ragged last chunk of r = N mod C:

        F(C) = 2 (N − r + r²/C) C (d + d_v)   intra-chunk: q kᵀ and its product with V
             + 4 N d d_v                      chunk states Kᵀ V and the queries' q S
             + 2 N d                          the queries' q·z (normalized only)

    The prefix sums of the states (N d d_v / C additions) are already in F: counting 2 FLOPs per
    multiply-add counts C additions for each entry of a chunk's Kᵀ V, where C − 1 are made, and
    the one left over is the addition to the running state. Not counted: the masked scores' row
    sums (N C) and the key sums (N d). F grows with C: it counts no per-chunk overhead.

    >>> chunked_flops(1024, 64, 64, 64) == 2 * 1024 * 64 * 128 + 4 * 1024 * 64 * 64 + 2 * 1024 * 64
    True
    """
    ragged = n % chunk_size
    intra = 2 * ((n - ragged) * chunk_size + ragged * ragged) * (d + d_v)
    return intra + 4 * n * d * d_v + (2 * n * d if normalize else 0)


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
    """Estimated memory one call of causal chunked linear attention (`linattn_core.chunked`) needs
    beyond its inputs `(n, d)` (one head, d_v = d), chunk size C: the output and the reciprocal
    denominators, and one segment's temporaries (its q, k, v chunks, the C×C similarities, three
    partial outputs, the chunk states and their prefix sums). Errs on the large side (the memory
    guard's estimate).

    >>> output, segment = 4096 * 65, 4096 * (6 * 64 + 64) + 3 * 66 * 64 * 65
    >>> chunked_peak_bytes(4096, 64, 64) == (output + segment) * 4
    True
    """
    longest = max((stop - start for start, stop, _ in segments(1, n, chunk_size)), default=0)
    per_segment = longest * (6 * d + chunk_size) + 3 * (longest // chunk_size + 2) * d * (d + 1)
    return (n * (d + 1) + per_segment) * itemsize


def softmax_flops(n, d, d_v):
    """FLOPs of the matrix products of non-causal softmax attention, a multiply-add counting 2:

        F_softmax = 2 N² d + 2 N² d_v        Q Kᵀ, then the weights times V

    (the exponentials and the normalization add O(N²)). Works elementwise on arrays of sizes.

    >>> softmax_flops(1024, 64, 64)
    268435456
    """
    return 2 * n * n * d + 2 * n * n * d_v


def linear_flops(n, features, d_v):
    """FLOPs of the matrix products of non-causal linear attention with m = `features` features:

        F_linear = 4 N m (d_v + 1)        the state φ(K)ᵀ[V, 1], then φ(Q) times it

    (the ones column of [V, 1] carries the denominator; computing the features is not counted).

    >>> linear_flops(1024, 64, 64)
    17039360
    """
    return 4 * n * features * (d_v + 1)


def flop_crossover_length(d, d_v, features):
    """The FLOP-count crossover of non-causal attention: the sequence length
    N* = 2 m (d_v + 1) / (d + d_v) at which `softmax_flops` equals `linear_flops` (m = `features`);
    beyond it linear attention does fewer FLOPs. Bytes and the machine do not enter (for those,
    `roofline_crossover_length`).

    >>> flop_crossover_length(64, 64, 2145)  # Taylor-2 features at d = 64
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


# The chunk size of the benchmarks and the GPU formulas: linear_attention's default (a test
# checks that they agree; reading it from the signature would put this model above attention).
CHUNK_SIZE = 64

FORMULAS = {
    "softmax_fwd_flops": "2·B·H·N²·d (Q Kᵀ and P V, 4·B·H·N²·d halved by the causal mask)",
    "linear_fwd_flops": f"B·H·N·(2·C·(d + d_v) + 4·d·d_v), C = {CHUNK_SIZE}: per chunk Q Kᵀ and "
    "P V (C×C blocks), Q S and Kᵀ V (d×d_v state)",
    "fwd+bwd_flops": "softmax: 3.5 × fwd (FlashAttention's count); linear: 4 × fwd (the "
    "gradients of q, k and v, each a forward's work)",
    "fwd_bytes": "itemsize·B·H·N·(2·d + 2·d_v): read q, k, v, write o",
    "fwd+bwd_bytes": "itemsize·B·H·N·(6·d + 5·d_v): fwd, then read q, k, v, dO, write dq, dk, dv",
}


def flop_count(shape, mode, kind):
    """FLOPs of one causal attention call on a GPU by FORMULAS: `shape` a dict with B, H, N, d
    (d_v = d; N may be a tensor of lengths), mode "fwd" or "fwd+bwd", kind "softmax"
    (FlashAttention-style) or "linear" (chunked, C = CHUNK_SIZE).

    >>> flop_count({"B": 1, "H": 1, "N": 1024, "d": 64}, "fwd", "softmax") == 2 * 1024**2 * 64
    True
    """
    b, h, n, d = shape["B"], shape["H"], shape["N"], shape["d"]
    if kind == "softmax":
        forward = 2 * b * h * n * n * d
        return forward * (3.5 if mode == "fwd+bwd" else 1)
    forward = b * h * n * (2 * CHUNK_SIZE * (d + d) + 4 * d * d)
    return forward * (4 if mode == "fwd+bwd" else 1)


def traffic_bytes(shape, mode, dtype):
    """Minimum bytes one causal attention call moves by FORMULAS (d_v = d): the inputs read and
    the outputs written once.

    >>> traffic_bytes({"B": 1, "H": 1, "N": 1024, "d": 64}, "fwd", torch.bfloat16)
    524288
    """
    b, h, n, d = shape["B"], shape["H"], shape["N"], shape["d"]
    itemsize = torch.empty((), dtype=dtype).element_size()
    per_token = 4 * d if mode == "fwd" else 11 * d
    return itemsize * b * h * n * per_token


def roofline_times(n, peak, bandwidth, *, d=64, dtype=torch.bfloat16, mode="fwd"):
    """The roofline's lower bounds on the time of causal softmax and linear attention, (softmax,
    linear) seconds: max(FLOPs / P, bytes / β) with `flop_count` and `traffic_bytes`, for one
    head of `n` tokens (a tensor of lengths works elementwise); P = `peak` FLOP/s, β = `bandwidth`
    bytes/s.

    >>> softmax, linear = roofline_times(torch.tensor([64.0, 8192.0]), 989e12, 3.35e12)
    >>> (softmax > linear).tolist()  # memory-bound alike at short N, softmax slower at long N
    [False, True]
    """
    shape = {"B": 1, "H": 1, "N": n, "d": d}
    memory = torch.as_tensor(traffic_bytes(shape, mode, dtype) / bandwidth)
    softmax = torch.maximum(torch.as_tensor(flop_count(shape, mode, "softmax") / peak), memory)
    linear = torch.maximum(torch.as_tensor(flop_count(shape, mode, "linear") / peak), memory)
    return softmax, linear


def roofline_crossover_length(roofline, *, d, mode="fwd", dtype="bfloat16"):
    """The roofline's crossover length N* of causal softmax and linear attention, both moving
    their minimum bytes (`traffic_bytes`): a closed form. For the bytes the book's Triton kernels
    move, `linattn_core.kernels.tools.cost_model.kernel_roofline_crossover_length` searches N; the
    benchmark sets this prediction beside the measured crossover
    (`linattn_core.bench.results.measured_crossovers`).

    With the counts of `flop_count` and `traffic_bytes`, softmax does s·N² FLOPs, linear
    attention l·N, and both move m·N bytes; the roofline times max(s N²/P, m N/β) and
    max(l N/P, m N/β) cross at N* = max(l, m P/β) / s. For the forward pass (s = 2d,
    l = 4d(C + d), m = 4db) this is max(2bP/β, 2(C + d)), the scaling chapter's proposition.
    P is the matmul rate (`roofline["matmul_tflops"]`), β the copy bandwidth
    (`roofline["copy_gbps"]`, bytes read plus written).

    >>> h100 = {"matmul_tflops": 989, "copy_gbps": 3350}  # published peaks, not measured
    >>> round(roofline_crossover_length(h100, d=64))
    1181
    >>> round(roofline_crossover_length(h100, d=64, mode="fwd+bwd"))  # max(11bP/β, 16(C + d)) / 7
    928
    """
    unit = {"B": 1, "H": 1, "N": 1, "d": d}
    softmax = flop_count(unit, mode, "softmax")  # FLOPs per N²
    linear = flop_count(unit, mode, "linear")  # FLOPs per N
    traffic = traffic_bytes(unit, mode, getattr(torch, dtype))  # bytes per N
    balance = 1e12 * roofline["matmul_tflops"] / (1e9 * roofline["copy_gbps"])  # P/β
    return max(linear, traffic * balance) / softmax
