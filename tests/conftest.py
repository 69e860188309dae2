"""Shared test configuration."""

import os

import torch
from hypothesis import settings

# Without a GPU the Triton kernels run in the interpreter, which must be on before they are
# defined (when linattn_core.kernels is first imported).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Derandomized by default so CI runs the same examples every time; HYPOTHESIS_PROFILE=explore
# draws fresh ones.
settings.register_profile("ci", derandomize=True, deadline=None, max_examples=40, database=None)
settings.register_profile("explore", deadline=None, max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
