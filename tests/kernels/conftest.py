"""Tests marked `interpreter` run the kernels in the Triton interpreter: seconds each, so also
`slow`; skipped where the kernels are compiled (TRITON_INTERPRET=1 is set by tests/conftest.py
before triton's first import, on machines without a GPU)."""

import pytest

from linattn_core.kernels import INTERPRETED


@pytest.hookimpl(tryfirst=True)  # before -m selects by the markers
def pytest_collection_modifyitems(items):
    skip = pytest.mark.skip(reason="CPU kernels need TRITON_INTERPRET=1 before the first import")
    for item in items:
        if item.get_closest_marker("interpreter"):
            item.add_marker(pytest.mark.slow)
            if not INTERPRETED:
                item.add_marker(skip)
