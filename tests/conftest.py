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

# Derandomized by default so CI runs the same examples every time; HYPOTHESIS_PROFILE=explore
# draws fresh ones.
settings.register_profile("ci", derandomize=True, deadline=None, max_examples=40, database=None)
settings.register_profile("explore", deadline=None, max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


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
