"""The cost model of the Triton kernels against the kernels themselves: `kernels.tools.trace`
counts every product's FLOPs and every byte loaded and stored in the interpreter, per kernel, and
the model must predict them exactly (N a multiple of C, so that no load is masked)."""

import pytest
import torch

pytest.importorskip("triton")

from linattn_core.kernels.linear_attention.backward import chunk_linear_attention_bwd
from linattn_core.kernels.linear_attention.forward import chunk_linear_attention_fwd
from linattn_core.kernels.tools.cost_model import (
    PUBLISHED_PEAKS,
    backward_costs,
    forward_costs,
    kernel_roofline_crossover_length,
    linear_attention_costs,
    predicted_seconds,
    softmax_costs,
)
from linattn_core.kernels.tools.trace import record
from linattn_core.testing import random_qkv


def counts(trace):
    """{kernel: [FLOPs, bytes]} of what the interpreter executed."""
    return {kernel: [trace.flops(kernel), trace.bytes(kernel)] for kernel in trace.kernels()}


@pytest.mark.interpreter
@pytest.mark.parametrize(
    ("dtype", "d", "d_v", "arch", "batch_heads", "normalize", "segment"),
    [  # each tiling through both paths; each path normalized and not
        (torch.float32, 16, 32, 90, 2, True, 2),
        (torch.float32, 16, 32, 90, 2, False, 6),
        (torch.float16, 128, 64, 80, 1, True, 6),
        (torch.float16, 128, 64, 80, 1, False, 2),
        (torch.float16, 32, 128, 90, 2, True, 2),
        (torch.float16, 32, 128, 90, 2, False, 6),
    ],
)
def test_model_counts_what_the_kernels_do(dtype, d, d_v, arch, batch_heads, normalize, segment):
    """Six chunks in three segments of two, or in one walk, of one or two heads; float32 and
    sm_80's tiles split the sums over several feature or value tiles (float32 shares), sm_90's
    16-bit tiles do not."""
    n, chunk_size = 384, 64
    q, k, v = random_qkv(1, batch_heads, n=n, d=d, d_v=d_v, dtype=dtype, positive=True)
    options = {"chunk_size": chunk_size, "arch": arch, "segment": segment}
    with record() as forward:
        _, rden, o32, _ = chunk_linear_attention_fwd(
            q, k, v, normalize=normalize, eps=1e-6, keep_float32=normalize, **options
        )
    with record() as backward:
        chunk_linear_attention_bwd(q, k, v, o32, rden, torch.ones_like(v), **options)
    model = {"chunk_size": chunk_size, "dtype": dtype, "normalize": normalize} | {
        "arch": arch,
        "segment": segment,
    }
    for measured, costs in (
        (counts(forward), forward_costs(batch_heads, n, d, d_v, keep_float32=normalize, **model)),
        (counts(backward), backward_costs(batch_heads, n, d, d_v, **model)),
    ):
        predicted = {
            c.kernel: [c.flops, c.bytes] for c in costs if not c.kernel.endswith("(torch)")
        }
        assert predicted == measured


def test_predicted_forward_time_is_linear_in_n_and_memory_bound():
    """Once the segments' number stops growing (33 segments fill an H100 with 16 heads), the
    predicted forward time is affine in N: a cost per token, plus the segment sums that each walk
    adds up first. And a 16-bit forward pass is memory-bound: its bytes over β."""
    h100 = PUBLISHED_PEAKS["H100"]
    t32, t64, t128 = (
        predicted_seconds(linear_attention_costs(16, n, 64), h100, torch.bfloat16)
        for n in (32768, 65536, 131072)
    )
    assert t128 - t64 == pytest.approx(2 * (t64 - t32), rel=0.02)
    costs = linear_attention_costs(16, 65536, 64)
    assert all(c.bytes / h100.bandwidth > c.flops / h100.tensor_flops for c in costs)


def test_kernel_roofline_crossover_is_where_the_roofline_times_meet():
    h100 = PUBLISHED_PEAKS["H100"]
    n_star = kernel_roofline_crossover_length(h100, 64)
    times = [
        predicted_seconds(costs, h100, torch.bfloat16)
        for n in (n_star - 64, n_star)
        for costs in (linear_attention_costs(16, n, 64), softmax_costs(16, n, 64))
    ]
    assert times[0] >= times[1] and times[2] < times[3]
