"""The attention methods the benchmarks compare, with the cost model of each.

A method is a name, a callable `run(q, k, v, causal)` on inputs `(1, 1, N, d)` (d_v = d), and
its estimates: the exponent p of its time, t ∝ N^p, and the memory one call needs beyond its
inputs (the working set: intermediates and the output), from which the memory guard
(`linattn_core.bench.memory.skip_reason`) decides whether a point fits before running it. The
estimates follow the code of each method and err on the large side. Causality is an argument;
only the records' names carry it, as a '_causal' suffix (`record_name`, `parse_method`).
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from linattn_core.attention import linear_attention, softmax_attention
from linattn_core.costs import CHUNK_SIZE, chunked_peak_bytes
from linattn_core.delta import delta_rule


@dataclass(frozen=True)
class Method:
    """One benchmarked method: a name, how to run it, and its cost model."""

    name: str
    run: Callable  # (q, k, v, causal) -> output
    time_exponent: int  # p in t ∝ N^p
    working_bytes: Callable  # (n, d, itemsize, causal, device, dtype) -> bytes beyond inputs
    needs_cuda: bool = False  # runs on the CPU only in the Triton interpreter
    description: str = ""


def _softmax_naive(q, k, v, causal):
    return softmax_attention(q, k, v, causal=causal)


def _sdpa(q, k, v, causal):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _linear(method):
    def run(q, k, v, causal):
        return linear_attention(q, k, v, causal=causal, method=method, chunk_size=CHUNK_SIZE)

    return run


def _delta(method):
    def run(q, k, v, causal):
        # DeltaNet's inputs: unit keys and rates in (0, 1); the delta rule is causal whatever
        # `causal` says (its state only ever sees the past)
        beta = torch.full(q.shape[:-1], 0.5, dtype=q.dtype, device=q.device)
        unit_k = k / k.norm(dim=-1, keepdim=True)
        return delta_rule(q, unit_k, v, beta, method=method, chunk_size=CHUNK_SIZE)[0]

    return run


def _softmax_naive_bytes(n, d, itemsize, causal, device, dtype):
    # scores, scaled scores, masked scores, probabilities: at most three N×N alive at once,
    # the boolean mask when causal, the output
    return 3 * n * n * itemsize + (n * n if causal else 0) + n * d * itemsize


def _sdpa_bytes(n, d, itemsize, causal, device, dtype):
    # flash-style kernels (CPU float32/bfloat16/float64; CUDA float16/bfloat16) work in blocks:
    # the output, log-sum-exp rows and per-thread tiles; any other case may fall back to the
    # math backend, which materializes N×N like the naive form
    flash_dtypes = {
        "cpu": (torch.float32, torch.bfloat16, torch.float64),
        "cuda": (torch.float16, torch.bfloat16),
    }
    if dtype in flash_dtypes.get(device, ()):
        return 2 * n * d * itemsize + 8 * n + 2**20
    return _softmax_naive_bytes(n, d, itemsize, causal, device, dtype)


def _linear_parallel_bytes(n, d, itemsize, causal, device, dtype):
    # the N×N similarities and their masked copy; values with the ones column; the output
    return 2 * n * n * itemsize + 3 * n * (d + 1) * itemsize


def _linear_recurrent_bytes(n, d, itemsize, causal, device, dtype):
    # values with the ones column, the output rows, a few d×(d+1) states
    return 3 * n * (d + 1) * itemsize + 4 * d * (d + 1) * itemsize


def _linear_chunked_bytes(n, d, itemsize, causal, device, dtype):
    if not causal:  # φ(K)ᵀV and two N×(d+1) products
        return 3 * n * (d + 1) * itemsize + d * (d + 1) * itemsize
    return chunked_peak_bytes(n, d, CHUNK_SIZE, itemsize)


def _linear_triton_bytes(n, d, itemsize, causal, device, dtype):
    if not causal:
        return _linear_chunked_bytes(n, d, itemsize, causal, device, dtype)
    # the output and the float32 reciprocal denominators; the N/C + 2 mean states (d × d, in the
    # inputs' dtype) and float32 key sums at the chunk boundaries
    n_chunks = n // CHUNK_SIZE + 2
    return n * (d * itemsize + 4) + n_chunks * d * (d * itemsize + 4) + 2**20


def _delta_recurrent_bytes(n, d, itemsize, causal, device, dtype):
    # unit keys, the rates, the output rows and their stacked copy, a few d×d states
    return 4 * n * d * itemsize + n * itemsize + 4 * d * d * itemsize


def _delta_chunked_bytes(n, d, itemsize, causal, device, dtype):
    # unit keys and rates; padded q, k, v chunks; one C×C block and its inverse per chunk;
    # [W, Ũ], its right-hand side and the solve's copies; outputs and their concatenation
    blocks = (n // CHUNK_SIZE + 1) * CHUNK_SIZE
    return (2 * n * d + 3 * blocks * d + 2 * blocks * CHUNK_SIZE + 8 * blocks * d) * itemsize


def _delta_triton_bytes(n, d, itemsize, causal, device, dtype):
    # unit keys and rates; A (float32, C per token), W, U and the output; the N/C + 1 states
    blocks = (n // CHUNK_SIZE + 1) * CHUNK_SIZE
    states = (n // CHUNK_SIZE + 2) * d * d * itemsize
    return (5 * n * d + n) * itemsize + 4 * blocks * CHUNK_SIZE + states + 2**20


METHODS = {
    method.name: method
    for method in (
        Method("softmax_naive", _softmax_naive, 2, _softmax_naive_bytes,
               description="softmax_attention: the N×N matrix, materialized"),
        Method("sdpa", _sdpa, 2, _sdpa_bytes,
               description="torch.nn.functional.scaled_dot_product_attention (fused kernels)"),
        Method("linear_parallel", _linear("parallel"), 2, _linear_parallel_bytes,
               description="linear_attention, method='parallel' (N×N similarities)"),
        Method("linear_recurrent", _linear("recurrent"), 1, _linear_recurrent_bytes,
               description="linear_attention, method='recurrent' (one token at a time)"),
        Method("linear_chunked", _linear("chunked"), 1, _linear_chunked_bytes,
               description=f"linear_attention, method='chunked', chunk_size={CHUNK_SIZE}"),
        Method("linear_triton", _linear("triton"), 1, _linear_triton_bytes, needs_cuda=True,
               description=f"linear_attention, method='triton', chunk_size={CHUNK_SIZE}"),
        Method("delta_recurrent", _delta("recurrent"), 1, _delta_recurrent_bytes,
               description="delta_rule, method='recurrent' (one token at a time; always causal)"),
        Method("delta_chunked", _delta("chunked"), 1, _delta_chunked_bytes,
               description=f"delta_rule, method='chunked', chunk_size={CHUNK_SIZE}, always causal"),
        Method("delta_triton", _delta("triton"), 1, _delta_triton_bytes, needs_cuda=True,
               description="delta_rule, method='triton' (always causal)"),
    )
}  # fmt: skip
CAUSAL_SUFFIX = "_causal"


def parse_method(name):
    """The method and the causality a record's name says; unknown names raise.

    >>> method, causal = parse_method("linear_chunked_causal")
    >>> method.name, method.time_exponent, causal
    ('linear_chunked', 1, True)
    """
    base, causal = name, False
    if name.endswith(CAUSAL_SUFFIX) and name.removesuffix(CAUSAL_SUFFIX) in METHODS:
        base, causal = name.removesuffix(CAUSAL_SUFFIX), True
    if base not in METHODS:
        choices = ", ".join(METHODS)
        raise ValueError(
            f"method names must be among {choices} (each with an optional '{CAUSAL_SUFFIX}' "
            f"suffix); got {name!r}"
        )
    return METHODS[base], causal


def record_name(method, causal):
    """The name a record carries: the method's name, with '_causal' for causal attention.

    >>> record_name("sdpa", causal=True), record_name("sdpa", causal=False)
    ('sdpa_causal', 'sdpa')
    """
    return method + (CAUSAL_SUFFIX if causal else "")


def estimate_peak_bytes(method, n, d, *, causal=False, dtype=torch.float32, device="cpu"):
    """Estimated peak memory in bytes of one call of `method` at sequence length `n`: the inputs
    q, k, v `(1, 1, n, d)` plus the method's working set (intermediates and the output). The
    working set alone is what the measurements report as `peak_bytes`; the guard adds a margin.

    Args:
        method: a name of `METHODS`.
        n, d: sequence length and feature dimension (d_v = d).
        causal: causal attention.
        dtype: the inputs' dtype.
        device: "cpu" or "cuda".

    >>> estimate_peak_bytes("softmax_naive", 2**16, 64) > 3 * 2**32 * 4  # three 64k×64k floats
    True
    >>> estimate_peak_bytes("linear_chunked", 2**16, 64) < 2**30  # linear: well under 1 GiB
    True
    """
    if method not in METHODS:
        raise ValueError(
            f"estimate_peak_bytes: method must be among {', '.join(METHODS)}; got {method!r}"
        )
    itemsize = torch.empty((), dtype=dtype).element_size()
    device = torch.device(device).type
    working = METHODS[method].working_bytes(n, d, itemsize, causal, device, dtype)
    return 3 * n * d * itemsize + working
