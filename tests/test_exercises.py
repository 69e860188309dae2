"""The puzzles' checkers: each passes its solution and names the typical mistakes; the references
agree with the package; the problems tell the sizes apart. A mistake here is the solution with
one edit (a mutant), written to a module so that Triton can read its source; the bank of other
kernels is `tests/exercises`."""

import importlib.util
import inspect
import itertools

import pytest
import torch

pytest.importorskip("triton")

from linattn_core import exercises, linear_attention
from linattn_core.exercises import references, solutions
from linattn_core.exercises.diagnoses import RTOL, close, relative_error
from linattn_core.exercises.layouts import evaluate, name_of, spans
from linattn_core.exercises.puzzles import PUZZLES

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


def test_the_chunked_references_agree_with_the_package():
    problem = PUZZLES["normalized_forward"].problems[1]
    generator = torch.Generator().manual_seed(1)
    inputs = PUZZLES["normalized_forward"].inputs(problem, generator)
    q, k, v = (inputs[name].double() for name in "qkv")
    for normalize in (False, True):
        want = linear_attention(
            q, k, v, causal=True, normalize=normalize, method="parallel", eps=problem.eps
        )
        got = references.normalized(q, k, v, problem, normalize=normalize)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    walk = references.states(k, v, problem)
    for t in range(problem.chunks + 1):
        rows = slice(0, min(t * problem.c, problem.n))
        torch.testing.assert_close(walk[:, t], k[:, rows].mT @ v[:, rows])


def test_the_value_gradient_reference_is_autograd():
    puzzle = PUZZLES["value_gradient"]
    problem = puzzle.problems[1]
    inputs = puzzle.inputs(problem, torch.Generator().manual_seed(2))
    q, k, do, dh = (inputs[name] for name in ("q", "k", "do", "dh"))
    got = references.value_gradient(q, k, do, dh, problem)  # dh was rounded to float32
    assert relative_error(got, puzzle.reference(inputs, problem)["dv"]) < 1e-6


@pytest.mark.parametrize("name", list(PUZZLES))
def test_the_problems_tell_the_sizes_apart(name):
    """Ragged N in every problem; D, DV and C (or BLOCK) all different in one at least; and no
    two of the sizes a message may name for a distance are equal, so the name is the one used."""
    puzzle = PUZZLES[name]
    assert all(p.n % p.c for p in puzzle.problems)
    sizes = [puzzle.symbols(p) for p in puzzle.problems]
    shown = [s for s in puzzle.sizes if s != "eps"]
    assert any(len({values[s] for s in shown}) == len(shown) for values in sizes)
    for values, layout in itertools.product(sizes, puzzle.layouts.values()):
        for part in ("head", "unit", "row"):
            right = layout.strides(puzzle.tile)[part]
            named = [e for e in layout.wrong(part, puzzle.tile) if e != right]
            numbers = [evaluate(e, values) for e in named if evaluate(e, values) is not None]
            assert len(set(numbers)) == len(numbers), (name, part, named, numbers)


@pytest.mark.parametrize("name", list(PUZZLES))
def test_every_typical_mistake_differs_from_the_reference(name):
    """A typical mistake that matched the reference on every problem could never be named."""
    puzzle = PUZZLES[name]
    generator = torch.Generator().manual_seed(0)
    problems = [(p, puzzle.inputs(p, generator)) for p in puzzle.problems]
    for mistake in puzzle.mistakes:
        assert any(
            not close(
                *(f(inputs, p)[o] for f in (mistake.outputs, puzzle.reference)),
            )
            for p, inputs in problems
            for o in puzzle.reference(inputs, p)
        ), mistake.message


def test_names_and_spans():
    sizes = {"N": 40, "NT": 3, "C": 16, "D": 32, "DV": 128}
    assert evaluate("N·DV", sizes) == 5120 and evaluate("BLOCK·D", sizes) is None
    assert name_of(512, ("C·DV", "C·D"), sizes) == "C·D"
    assert name_of(7, ("C·DV", "C·D"), sizes) is None
    assert spans([3, 0, 1, 2, 7, 9, 10]) == "0–3, 7, 9–10"


UNMASKED_LOAD = ("mask=inside, other=0.0)", ")")
MISTAKES = {
    "feature_map": [
        (
            [("x + offsets, mask=inside, other=0.0)", "x + offsets)")],
            "program 1 loads rows 21–31 of x, past N = 21 (line 12, `tl.load(x + offsets)`): "
            "mask the load with rows < N (other=0.0)",
        ),
        ([(", mask=inside)", ")")], "program 1 stores rows 21–31 of y, past N = 21 (line 14"),
        ([("tile + 1.0, tl.exp(tile)", "tile, tl.exp(tile) - 1.0")], "y is elu(x): add 1"),
        ([("tile + 1.0, tl.exp(tile)", "tl.exp(tile), tl.exp(tile)")], "y is exp(x) everywhere"),
        (
            [("tl.program_id(0) * BLOCK + ", "")],
            "N = 21 (D = 32, BLOCK = 16): every program starts x and y at row 0 (lines 12 and 14)",
        ),
    ],
    "chunk_scores": [
        ([("scores = tl.where(causal, scores, 0.0)", "")], "queries see keys after them"),
        ([("] >= tl.arange", "] > tl.arange")], "the diagonal is masked out"),
        ([("tl.dot(b_q, tl.trans(b_k))", "tl.dot(b_k, tl.trans(b_q))")], "s holds k_i·q_j"),
        ([UNMASKED_LOAD], "N = 21 (D = 32, C = 16): program 1 loads rows 21–31 of q"),
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
            "every program addresses head 0 of q, k and v (lines 15, 16 and 17): move the "
            "pointers to the program's own head first, q + head·N·D, k + head·N·D, v + head·N·DV",
        ),
        (
            [(", mask=inside)", ")")],
            "program (1, 1) stores rows 21–31 of head 1 of o, past N = 21",
        ),
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
            "h: the state at boundary t = 2 of every head is never written (still NaN): store "
            "the final state, h[NT], after the loop",
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
        (
            [("+ tl.sum(scores, axis=1) + eps", "+ tl.sum(scores, axis=1)")],
            "N = 72 (2 heads, D = 128, DV = 16, C = 32, eps = 0.5): the denominator has no eps",
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


def test_a_kernel_that_fails_to_run_is_reported_with_its_line(mutant):
    broken = mutant(solutions.intra_chunk, ("b_v = tl.load(v", "b_v = tl.load(v_missing"))
    verdict = exercises.check_intra_chunk(broken)
    assert not verdict
    assert "the kernel raised NameError at line 17, `v_missing`" in verdict.message


def test_a_product_of_tiles_that_do_not_fit_is_told_in_tile_shapes(mutant):
    broken = mutant(solutions.intra_chunk, ("tl.dot(scores, b_v)", "tl.dot(b_v, scores)"))
    message = exercises.check_intra_chunk(broken).message
    assert "input and other" not in message
    assert (
        "line 20, `tl.dot(b_v, scores)`, multiplies b_v [C, DV] by scores [C, C], but the "
        "columns of the first (DV) must match the rows of the second (C): tl.dot(scores, b_v)?"
    ) in message


def test_tiles_that_do_not_broadcast_are_told_in_tile_shapes(mutant):
    broken = mutant(solutions.normalized_forward, ("key_sum[None, :]", "key_sum[:, None]"))
    message = exercises.check_normalized_forward(broken).message
    assert "make_shape_compatible" not in message
    assert (
        "line 24, `b_q * key_sum[:, None]`, combines b_q [C, D] with key_sum[:, None] [D, 1], "
        "which do not broadcast (axis 0: C against D); turn key_sum[:, None] around: "
        "key_sum[None, :]"
    ) in message


def test_a_head_offset_of_a_chunk_is_a_wrong_head_distance_not_swapped_ids(mutant):
    """head·C·D moves the head as far as a chunk: not swapped ids, and swapping them (as a
    reader told so would) is then named swapped, at the program id line."""
    wrong_head = (
        "q, k = q + head * N * D, k + head * N * D",
        "q, k = q + head * C * D, k + head * C * D",
    )
    message = exercises.check_intra_chunk(mutant(solutions.intra_chunk, wrong_head)).message
    assert (
        "head b of q and k is addressed at b·C·D (line 10, `q, k = q + head * C * D, k + head "
        "* C * D`), but heads are N·D elements apart"
    ) in message
    swapped = (
        "t, head = tl.program_id(0), tl.program_id(1)",
        "head, t = tl.program_id(0), tl.program_id(1)",
    )
    message = exercises.check_intra_chunk(mutant(solutions.intra_chunk, swapped)).message
    assert "addressed with the program ids swapped (line 9, `head, t = tl.program_id(0)" in message


def test_wrong_rows_are_listed_when_nothing_explains_them(mutant):
    halved = mutant(solutions.intra_chunk, ("tl.dot(scores, b_v)", "0.5 * tl.dot(scores, b_v)"))
    message = exercises.check_intra_chunk(halved).message
    assert "o: rows 0–20 (chunks 0–1) of every head are wrong (largest relative error" in message


def test_a_kernel_that_is_not_interpreted_is_refused():
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        exercises.check_feature_map(solutions.feature_map.fn)


def test_precision_is_told_from_logic(mutant):
    """A float16 product is off by more than RTOL yet right without its rounding."""
    rounded = mutant(
        solutions.chunked_forward,
        ("tl.dot(scores, b_v)", "tl.dot(scores.to(tl.float16), b_v.to(tl.float16))"),
    )
    message = exercises.check_chunked_forward(rounded).message
    assert "o is off by " in message and RTOL < float(message.split("off by ")[1][:7])
    assert (
        "the kernel rounds to float16 at line 22, `scores.to(tl.float16)` and line 22, "
        "`b_v.to(tl.float16)`, and without those roundings it is right"
    ) in message
