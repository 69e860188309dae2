"""Shared test configuration and fixtures."""

import dataclasses
import os

import pytest
import torch
from hypothesis import settings

# Without a GPU the Triton kernels run in the interpreter, which must be on before triton is
# first imported (triton reads it then).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from linattn_core.kernels import INTERPRETED  # imports triton: after the line above
from linattn_core.kernels.tiles import ARCHITECTURES

# Derandomized by default so CI runs the same examples every time; HYPOTHESIS_PROFILE=explore
# draws fresh ones.
settings.register_profile("ci", derandomize=True, deadline=None, max_examples=40, database=None)
settings.register_profile("explore", deadline=None, max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.hookimpl(tryfirst=True)  # before -m selects by the markers
def pytest_collection_modifyitems(items):
    """Tests marked `interpreter` run Triton kernels in the interpreter: seconds each, so also
    `slow`; skipped where the kernels are compiled (on a GPU machine)."""
    skip = pytest.mark.skip(reason="CPU kernels need TRITON_INTERPRET=1 before the first import")
    for item in items:
        if item.get_closest_marker("interpreter"):
            item.add_marker(pytest.mark.slow)
            if not INTERPRETED:
                item.add_marker(skip)


@pytest.fixture
def softmax_naive_calls(monkeypatch):
    """The sequence lengths that the benchmark method "softmax_naive" is run at, recorded by a
    spy in its place: a point the guards refuse must never appear."""
    from linattn_core.bench import METHODS

    calls, method = [], METHODS["softmax_naive"]

    def spy(q, k, v, causal):
        calls.append(q.shape[-2])
        return method.run(q, k, v, causal)

    monkeypatch.setitem(METHODS, "softmax_naive", dataclasses.replace(method, run=spy))
    return calls


@pytest.fixture
def poisoned_empty(monkeypatch):
    """Uninitialized tensors come NaN-filled, so an element a kernel leaves unwritten fails."""

    def poisoned(allocate):
        def nan_filled(*args, **kwargs):
            x = allocate(*args, **kwargs)
            return x.fill_(float("nan")) if x.is_floating_point() else x

        return nan_filled

    monkeypatch.setattr(torch, "empty", poisoned(torch.empty))
    monkeypatch.setattr(torch, "empty_like", poisoned(torch.empty_like))
    monkeypatch.setattr(torch.Tensor, "new_empty", poisoned(torch.Tensor.new_empty))


@pytest.fixture
def interpreter_bfloat16_dot(monkeypatch):
    """The Triton interpreter keeps bfloat16 tensors as their uint16 bit patterns and its tl.dot
    multiplies those (triton-lang/triton#11584, unsupported in triton 3.7). Widen bfloat16
    operands to float32 first: exact, since a product of two bfloat16 numbers fits in float32,
    so the dot then does what a GPU does, 16-bit operands and float32 accumulation."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    dot = interpreter.InterpreterBuilder.create_dot

    def widen(x):
        if x.dtype.scalar != tl.bfloat16:
            return x
        data = interpreter._convert_float(x.data, tl.bfloat16, tl.float32, None)
        return interpreter.TensorHandle(data.view(np.float32), tl.float32)

    def create_dot(self, a, b, *args):
        return dot(self, widen(a), widen(b), *args)

    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_dot", create_dot)


@pytest.fixture(params=ARCHITECTURES)
def arch(request, monkeypatch):
    """Run the Triton kernels with the tiles of each architecture (`kernels.tiles`): the
    interpreter checks the numbers of every launch configuration the GPUs will get."""
    from linattn_core.kernels.delta_rule import function as delta_rule
    from linattn_core.kernels.linear_attention import function as linear_attention

    for module in (linear_attention, delta_rule):
        monkeypatch.setattr(module, "device_arch", lambda device: request.param)
    return request.param
