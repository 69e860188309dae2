"""Fixtures of the kernel tests: poisoned allocations, the interpreter's bfloat16 products and
each architecture's tiles."""

import pytest
import torch

from linattn_core.kernels.tiles import ARCHITECTURES


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


@pytest.fixture
def fresh_plans():
    """Linear attention's launch plans (`per_shape` caches) emptied before and after the test: a
    test that patches `segment_length` must not get a plan made before the patch (its one walk
    would run instead of the segments), nor leave its segments to the tests after."""
    from linattn_core.kernels.linear_attention import backward, forward

    plans = (forward.forward_plan, backward.backward_plan)
    for plan in plans:
        plan.cache_clear()
    yield
    for plan in plans:
        plan.cache_clear()
