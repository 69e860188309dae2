"""The puzzles' checkers: each passes its solution and names the typical mistakes. A mistake is
the solution with one edit (a mutant), written to a module so that Triton can read its source."""

import importlib.util
import inspect

import pytest

pytest.importorskip("triton")

from linattn_core import exercises
from linattn_core.exercises import solutions

pytestmark = pytest.mark.interpreter


@pytest.fixture
def mutant(tmp_path):
    """mutant(solution, (old, new), …): the solution's kernel with each `old` replaced by `new`."""

    def make(solution, *edits):
        source = inspect.getsource(solution.fn)
        for old, new in edits:
            assert old in source, f"{old!r} is not in {solution.fn.__name__}"
            source = source.replace(old, new)
        path = tmp_path / f"mutant_{len(list(tmp_path.iterdir()))}.py"
        path.write_text("import triton\nimport triton.language as tl\n\n\n" + source)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return getattr(module, solution.fn.__name__)

    return make


@pytest.mark.parametrize("name", list(exercises.PUZZLES))
def test_the_solution_passes(name):
    verdict = getattr(exercises, f"check_{name}")(getattr(solutions, name))
    assert verdict and verdict.message.startswith(f"✓ {name}: correct for N = ")


UNMASKED_LOAD = ("mask=inside, other=0.0)", ")")
MISTAKES = {
    "feature_map": [
        (
            [UNMASKED_LOAD],
            "program 0 loads 176 elements outside the tensors, starting right after the end of x",
        ),
        ([(", mask=inside)", ")")], "program 0 stores 176 elements outside the tensors"),
        ([("tile + 1.0, tl.exp(tile)", "tile, tl.exp(tile) - 1.0")], "y is elu(x): add 1"),
        ([("tile + 1.0, tl.exp(tile)", "tl.exp(tile), tl.exp(tile)")], "y is exp(x) everywhere"),
        (
            [("tl.program_id(0) * BLOCK + ", "")],
            "N = 40 (D = 16, DV = 16, C = 16): y: rows 16–39 (programs 1–2) are never written",
        ),
    ],
    "chunk_scores": [
        ([("scores = tl.where(causal, scores, 0.0)", "")], "the entries above the diagonal"),
        ([("] >= tl.arange", "] > tl.arange")], "the diagonal is zero"),
        ([("tl.dot(b_q, tl.trans(b_k))", "tl.dot(b_k, tl.trans(b_q))")], "s holds k_i·q_j"),
        ([UNMASKED_LOAD], "N = 40 (D = 16, DV = 16, C = 16): program 2 loads 128 elements"),
    ],
    "intra_chunk": [
        (
            [("tl.where(causal, tl.dot(b_q, tl.trans(b_k)), 0.0)", "tl.dot(b_q, tl.trans(b_k))")],
            "rows see keys after them within their chunk",
        ),
        (
            [
                ("q, k = q + head * N * D, k + head * N * D", ""),
                ("v, o = v + head", "v, o = v + 0"),
            ],
            "every head got head 0's output",
        ),
        ([(", mask=inside)", ")")], "program (2, 1) stores 256 elements outside the tensors"),
    ],
    "chunk_states": [
        ([("state += tl.dot", "state = tl.dot")], "the state was not carried"),
        (
            [
                ("tl.store(h + t * D * DV + square, state)  # the state *before* chunk t", ""),
                (
                    "b_v)  # carried to the next chunk",
                    "b_v)\n        tl.store(h + t * D * DV + square, state)",
                ),
            ],
            "h[t] already includes chunk t",
        ),
        (
            [("    tl.store(h + n_chunks * D * DV + square, state)", "")],
            "h: the state at boundary t = 1 of every head is never written",
        ),
    ],
    "chunked_forward": [
        (
            [
                ("        state += tl.dot(tl.trans(b_k), b_v)  # only now", "        # only now"),
                (
                    "        b_o = tl.dot(",
                    "        state += tl.dot(tl.trans(b_k), b_v)\n        b_o = tl.dot(",
                ),
            ],
            "rows see every key of their chunk, later ones included",
        ),
        ([("state += tl.dot", "state = tl.dot")], "rows see only the previous chunk"),
        ([("tl.dot(b_q, state) + ", "")], "rows see only their own chunk"),
        (
            [("tl.where(causal, tl.dot(b_q, tl.trans(b_k)), 0.0)", "tl.dot(b_q, tl.trans(b_k))")],
            "rows see keys after them within their chunk",
        ),
    ],
    "normalized_forward": [
        (
            [("b_o = numerator / denominator[:, None]", "b_o = numerator")],
            "o is the numerator only",
        ),
        ([("key_sum += tl.sum(b_k, axis=0)", "")], "the denominator misses the keys of earlier"),
        (
            [("tl.sum(scores, axis=1) + eps", "tl.sum(tl.dot(b_q, tl.trans(b_k)), axis=1) + eps")],
            "the denominator counts keys after the query",
        ),
    ],
    "value_gradient": [
        ([("] <= tl.arange", "] >= tl.arange")], "key j collects gradients from queries before it"),
        ([("+ t + 1) * D * DV", "+ t) * D * DV")], "the state term uses dh[t]"),
        ([("tl.dot(b_k, b_dh) + ", "")], "rows miss the gradient from later chunks"),
    ],
}


@pytest.mark.parametrize(
    ("name", "edits", "message"),
    [(name, edits, message) for name, cases in MISTAKES.items() for edits, message in cases],
)
def test_a_typical_mistake_is_named(mutant, name, edits, message):
    verdict = getattr(exercises, f"check_{name}")(mutant(getattr(solutions, name), *edits))
    assert not verdict
    assert message in verdict.message, verdict.message
    assert max(map(len, repr(verdict).splitlines())) <= 88  # wrapped for a notebook's output


def test_a_kernel_that_fails_to_run_is_reported(mutant):
    broken = mutant(solutions.intra_chunk, ("tl.dot(scores, b_v)", "tl.dot(b_v, scores)"))
    verdict = exercises.check_intra_chunk(broken)
    assert not verdict and "the kernel raised" in verdict.message, verdict.message


def test_wrong_rows_are_listed_when_no_typical_mistake_matches(mutant):
    halved = mutant(solutions.intra_chunk, ("tl.dot(scores, b_v)", "0.5 * tl.dot(scores, b_v)"))
    message = exercises.check_intra_chunk(halved).message
    assert "o: rows 0–15 (chunk 0) of every head are wrong" in message


def test_heads_left_unwritten_are_named(mutant):
    one_head = mutant(
        solutions.intra_chunk,
        ("q, k = q + head * N * D, k + head * N * D", ""),
        ("v, o = v + head * N * DV, o + head * N * DV", ""),
    )
    verdict = exercises.check_intra_chunk(one_head)
    assert "o: nothing of head 1 was written: every program must first move" in verdict.message
