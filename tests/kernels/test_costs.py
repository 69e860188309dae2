"""The cost model of the Triton kernels against the kernels themselves: the Triton interpreter
counts every product's FLOPs and every byte loaded and stored, per kernel, and the model must
predict them exactly (N a multiple of C, so that no load is masked)."""

import collections

import pytest
import torch

pytest.importorskip("triton")

from triton.runtime import interpreter

from linattn_core.kernels.backward import chunk_linear_attention_bwd
from linattn_core.kernels.costs import (
    PUBLISHED_PEAKS,
    backward_costs,
    forward_costs,
    predicted_seconds,
)
from linattn_core.kernels.forward import chunk_linear_attention_fwd
from linattn_core.testing import random_qkv


@pytest.fixture
def interpreter_counts(monkeypatch):
    """{kernel: [FLOPs, bytes]} of what the interpreter executes while the fixture is active."""
    counts = collections.defaultdict(lambda: [0, 0])
    current = []
    run, dot = interpreter.InterpretedFunction.run, interpreter.InterpreterBuilder.create_dot
    load = interpreter.InterpreterBuilder.create_masked_load
    store = interpreter.InterpreterBuilder.create_masked_store

    def counting_run(self, *args, **kwargs):
        current.append(self.fn.__name__)
        try:
            return run(self, *args, **kwargs)
        finally:
            current.pop()

    def counting_dot(self, a, b, *args):
        (m, k), n = a.data.shape, b.data.shape[1]
        counts[current[-1]][0] += 2 * m * n * k
        return dot(self, a, b, *args)

    def counting_load(self, ptrs, mask, *args):
        counts[current[-1]][1] += (
            int(mask.data.sum()) * ptrs.get_element_ty().primitive_bitwidth // 8
        )
        return load(self, ptrs, mask, *args)

    def counting_store(self, ptrs, value, mask, *args):
        counts[current[-1]][1] += int(mask.data.sum()) * value.data.itemsize
        return store(self, ptrs, value, mask, *args)

    monkeypatch.setattr(interpreter.InterpretedFunction, "run", counting_run)
    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_dot", counting_dot)
    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_masked_load", counting_load)
    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_masked_store", counting_store)
    return counts


@pytest.mark.interpreter
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize(
    ("dtype", "d", "d_v", "arch"),
    [(torch.float32, 16, 32, 90), (torch.float16, 128, 64, 80), (torch.float16, 32, 128, 90)],
)
def test_model_counts_what_the_kernels_do(interpreter_counts, dtype, d, d_v, arch, normalize):
    batch_heads, n, chunk_size = 2, 192, 64
    q, k, v = random_qkv(1, batch_heads, n=n, d=d, d_v=d_v, dtype=dtype, positive=True)
    options = {"chunk_size": chunk_size, "arch": arch}
    o, rden = chunk_linear_attention_fwd(q, k, v, normalize=normalize, eps=1e-6, **options)
    forward = {name: list(count) for name, count in interpreter_counts.items()}
    interpreter_counts.clear()
    chunk_linear_attention_bwd(
        q, k, v, o if normalize else None, rden, torch.ones_like(v), **options
    )
    model = {"chunk_size": chunk_size, "dtype": dtype, "normalize": normalize, "arch": arch}
    for measured, costs in (
        (forward, forward_costs(batch_heads, n, d, d_v, **model)),
        (interpreter_counts, backward_costs(batch_heads, n, d, d_v, **model)),
    ):
        predicted = {
            c.kernel: [c.flops, c.bytes] for c in costs if not c.kernel.endswith("(torch)")
        }
        assert predicted == dict(measured)


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
