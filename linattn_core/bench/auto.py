"""What `linear_attention(method="auto")` chooses on a CPU, measured: the parallel form against
the chunked form over N and d.

    python -m linattn_core.bench auto --json figures/auto_cpu.json

For short sequences one masked N × N product beats the chunked form's walk (its segments, chunks
and prefix sums cost a fixed overhead); from some N on the quadratic work loses. Both are exact,
so "auto" takes the faster; the recurrent form, a loop over tokens, is never the faster. The
rule it supports is `linattn_core.methods.parallel_up_to`. Measured: causal, normalized,
float32, 8 heads, one thread, the forward pass and the forward and backward pass, interleaved
medians (`timing.median_times`); `ratio` is parallel / chunked (above 1: chunked is faster).
"""

import torch

from linattn_core.attention import linear_attention
from linattn_core.bench.timing import median_times

NS = (32, 64, 128, 256, 512, 1024)
DS = (16, 32, 64, 128)
HEADS = 8


def _call(method, n, d, backward):
    """One call of `method` on fresh inputs, with its backward pass when `backward`."""
    q, k, v = (torch.rand(1, HEADS, n, d, requires_grad=backward) for _ in range(3))

    def once():
        out = linear_attention(q, k, v, causal=True, method=method)
        if backward:
            out.sum().backward()

    return once


def measure(ns=NS, ds=DS, *, rounds=7):
    """One record per (d, N, pass): median seconds of both forms and their ratio."""
    torch.set_num_threads(1)
    records = []
    for d in ds:
        for n in ns:
            for backward in (False, True):
                calls = {m: _call(m, n, d, backward) for m in ("parallel", "chunked")}
                times = median_times(calls, repeats=rounds)
                parallel, chunked = times["parallel"], times["chunked"]
                records.append(
                    {
                        "d": d,
                        "n": n,
                        "pass": "fwd+bwd" if backward else "fwd",
                        "parallel_ms": 1e3 * parallel,
                        "chunked_ms": 1e3 * chunked,
                        "ratio": parallel / chunked,
                    }
                )
    return records
