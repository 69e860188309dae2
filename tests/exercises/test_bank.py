"""The checkers against the bank: every correct kernel passes, every one-mistake kernel fails
with a message that names its mistake. A mistake is a bank kernel with one edit, written with its
module to a file so that Triton can read its source (and the message its line)."""

import importlib.util
import inspect
import sys

import pytest

pytest.importorskip("triton")

from linattn_core import exercises
from tests.exercises import (
    chunk_scores,
    chunk_states,
    chunked_forward,
    feature_map,
    intra_chunk,
    normalized_forward,
    value_gradient,
)

pytestmark = [pytest.mark.interpreter, pytest.mark.filterwarnings("ignore:tl.make_block_ptr")]

BANKS = {
    module.__name__.rsplit(".", 1)[1]: module
    for module in (
        feature_map,
        chunk_scores,
        intra_chunk,
        chunk_states,
        chunked_forward,
        normalized_forward,
        value_gradient,
    )
}
CORRECT = [(name, kernel) for name, bank in BANKS.items() for kernel in bank.CORRECT]
MISTAKES = [(name, mutant) for name, bank in BANKS.items() for mutant in bank.MISTAKES]


def check(name, kernel):
    return getattr(exercises, f"check_{name}")(kernel)


def with_mistake(mutant, folder):
    """The mutant's kernel, from a copy of its bank module with the edits made."""
    module = sys.modules[mutant.kernel.fn.__module__]
    source, original = inspect.getsource(module), inspect.getsource(mutant.kernel.fn)
    edited = original
    for old, new in mutant.edits:  # in the kernel, or else in a helper of its module
        if old in edited:
            edited = edited.replace(old, new)
        else:
            assert old in source, f"{old!r} is not in {mutant.kernel.fn.__name__}'s module"
            source = source.replace(old, new)
    path = folder / f"{mutant.kernel.fn.__name__}.py"
    path.write_text(source.replace(original, edited))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    return getattr(copy, mutant.kernel.fn.__name__)


def test_the_bank_is_large():
    assert len(CORRECT) >= 25 and len(MISTAKES) >= 80


@pytest.mark.parametrize(
    ("name", "kernel"), CORRECT, ids=[f"{n}-{k.fn.__name__}" for n, k in CORRECT]
)
def test_a_correct_kernel_passes(name, kernel):
    verdict = check(name, kernel)
    assert verdict, verdict.message


@pytest.mark.parametrize(
    ("name", "mutant"),
    MISTAKES,
    ids=[f"{n}-{m.kernel.fn.__name__}-{i}" for i, (n, m) in enumerate(MISTAKES)],
)
def test_a_mistake_is_named(name, mutant, tmp_path):
    verdict = check(name, with_mistake(mutant, tmp_path))
    assert not verdict
    assert mutant.named in verdict.message, verdict.message
    assert mutant.line in verdict.message, verdict.message
    assert max(map(len, repr(verdict).splitlines())) <= 88  # wrapped for a notebook's output


@pytest.mark.parametrize("name", list(BANKS))
def test_every_typical_mistake_has_a_kernel_in_the_bank(name):
    named = [mutant.named for mutant in BANKS[name].MISTAKES]
    for mistake in exercises.PUZZLES[name].mistakes:
        assert any(fragment in mistake.message for fragment in named), mistake.message
