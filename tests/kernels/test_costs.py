"""The cost model of the Triton kernels against the kernels themselves: `kernels.trace` counts
every product's FLOPs and every byte loaded and stored in the interpreter, per kernel, and the
model must predict them exactly (N a multiple of C, so that no load is masked)."""

import pytest
import torch

pytest.importorskip("triton")

from linattn_core.kernels.backward import chunk_linear_attention_bwd
from linattn_core.kernels.costs import (
    PUBLISHED_PEAKS,
    backward_costs,
    forward_costs,
    predicted_seconds,
)
from linattn_core.kernels.forward import chunk_linear_attention_fwd
from linattn_core.kernels.trace import record
from linattn_core.testing import random_qkv


def counts(trace):
    """{kernel: [FLOPs, bytes]} of what the interpreter executed."""
    return {kernel: [trace.flops(kernel), trace.bytes(kernel)] for kernel in trace.kernels()}


@pytest.mark.interpreter
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize(
    ("dtype", "d", "d_v", "arch"),
    [(torch.float32, 16, 32, 90), (torch.float16, 128, 64, 80), (torch.float16, 32, 128, 90)],
)
def test_model_counts_what_the_kernels_do(dtype, d, d_v, arch, normalize):
    batch_heads, n, chunk_size = 2, 192, 64
    q, k, v = random_qkv(1, batch_heads, n=n, d=d, d_v=d_v, dtype=dtype, positive=True)
    options = {"chunk_size": chunk_size, "arch": arch}
    with record() as forward:
        o, rden = chunk_linear_attention_fwd(q, k, v, normalize=normalize, eps=1e-6, **options)
    with record() as backward:
        chunk_linear_attention_bwd(
            q, k, v, o if normalize else None, rden, torch.ones_like(v), **options
        )
    model = {"chunk_size": chunk_size, "dtype": dtype, "normalize": normalize, "arch": arch}
    for measured, costs in (
        (counts(forward), forward_costs(batch_heads, n, d, d_v, **model)),
        (counts(backward), backward_costs(batch_heads, n, d, d_v, **model)),
    ):
        predicted = {
            c.kernel: [c.flops, c.bytes] for c in costs if not c.kernel.endswith("(torch)")
        }
        assert predicted == measured


def test_predicted_forward_time_is_linear_in_n_and_memory_bound():
    """Per token, the predicted forward time stays flat as N grows (linear attention), and the
    memory-bound roofline of a 16-bit forward pass on an H100 is its bytes over β."""
    h100 = PUBLISHED_PEAKS["H100"]
    per_token = [
        predicted_seconds(forward_costs(16, n, 64, 64), h100, torch.bfloat16) / n
        for n in (4096, 65536)
    ]
    assert per_token[1] == pytest.approx(per_token[0], rel=0.02)
    costs = forward_costs(16, 65536, 64, 64)
    assert all(c.bytes / h100.bandwidth > c.flops / h100.tensor_flops for c in costs)
