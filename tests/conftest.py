"""Shared test configuration and fixtures. Triton is imported only by the tests that run the
kernels (`tests/kernels/conftest.py` holds their fixtures), never here."""

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


@pytest.hookimpl(tryfirst=True)  # before -m selects by the markers
def pytest_collection_modifyitems(items):
    """Tests marked `interpreter` run Triton kernels in the interpreter: seconds each, so also
    `slow`; skipped where the kernels are compiled (on a GPU machine)."""
    marked = [item for item in items if item.get_closest_marker("interpreter")]
    if not marked:  # a session without kernel tests never imports triton
        return
    from linattn_core.kernels import INTERPRETED  # imports triton: after TRITON_INTERPRET above

    skip = pytest.mark.skip(reason="CPU kernels need TRITON_INTERPRET=1 before the first import")
    for item in marked:
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
