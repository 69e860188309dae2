"""The seven Triton puzzles of the kernel chapter: problems, inputs, launch, reference, mistakes.

Each puzzle's kernel signature and grid are those of its solution in `solutions.py`. The
problems are ragged (N not a multiple of the tile) and, in each puzzle, tell the sizes apart
(D ≠ DV ≠ C, D ≠ BLOCK), so that a kernel that confuses two of them fails; the normalized
forward has a problem whose eps is large enough to see. References are computed in float64
(`references.py`, the package's `linear_attention`); a mistake is what a kernel with that one
error computes, so a checker can name the error when a kernel's output matches it.
"""

import math

import torch

from linattn_core.attention import linear_attention
from linattn_core.exercises import references as ref
from linattn_core.exercises.checks import Mistake, Problem, Puzzle
from linattn_core.exercises.layouts import Layout

ROWS, VALUE_ROWS = Layout("rows", "D"), Layout("rows", "DV")
# (heads, N, D, DV, C): NT = 2, 3, 2; BH ≠ NT in the last two. D, DV and C are 2^4, 2^5 and
# 2^7 in some order, so that no two of the products that a kernel can confuse (C·D, D·D, …) are
# equal and a message can name the one it used.
SIZES = ((2, 21, 32, 128, 16), (2, 72, 128, 16, 32), (3, 45, 16, 128, 32))
PROBLEMS = tuple(Problem(*sizes) for sizes in SIZES)
ONE_HEAD = tuple(Problem(1, n, d, d, c) for _, n, d, _, c in SIZES)  # D ≠ BLOCK, D ≠ C
LARGE_EPS = 0.5  # beside row sums of D/4 a key (positive features): o moves by up to 1.5 %


def _poisoned(*shape):
    return torch.full(shape, math.nan)


def _heads(problem, generator, *, positive=False):
    """q, k `(BH, N, D)`, v `(BH, N, DV)` float32, and a NaN-filled output shaped like v."""
    draw = torch.rand if positive else torch.randn
    b, n = problem.heads, problem.n
    q, k = (draw(b, n, problem.d, generator=generator) for _ in range(2))
    v = torch.randn(b, n, problem.d_v, generator=generator)
    return {"q": q, "k": k, "v": v, "o": _poisoned(b, n, problem.d_v)}


GLOBAL_MASK = "the causal mask compares a place in the sequence with a place in the chunk"


def _mask_mistakes(outputs, subject, fix):
    """The five wrong causal masks: `outputs(mask)` computes the output with one."""
    return (
        Mistake(
            outputs("none"),
            f"{subject} see keys after them within their chunk: mask the scores, keeping j ≤ i "
            f"({fix})",
            "scores",
        ),
        Mistake(
            outputs("strict"),
            "the diagonal is masked out: query i sees its own key too, so keep j ≤ i (>=, not >)",
            "mask",
        ),
        Mistake(
            outputs("flipped"),
            "the causal mask is flipped: it keeps the keys after each query (j ≥ i); keep the "
            "row index ≥ the column index",
            "mask",
        ),
        Mistake(
            outputs("global query"),
            f"{GLOBAL_MASK} (query t·C + i, key j), so from chunk 1 on it keeps every key: "
            "compare places in the chunk, i >= j",
            "mask",
        ),
        Mistake(
            outputs("global key"),
            f"{GLOBAL_MASK} (query i, key t·C + j), so from chunk 1 on it keeps no key: "
            "compare places in the chunk, i >= j",
            "mask",
        ),
    )


def _misread(reference):
    """What `reference` computes when the kernel loads k where it should load q."""
    return lambda inputs, problem: reference({**inputs, "q": inputs["k"]}, problem)


QUERIES_FROM_KEYS = (
    "the queries are loaded from k: load the tile of queries from q",
    ("misread", "k", "q"),
)


# --- 1. feature_map: a tile of rows, a mask for the ragged end ---------------------------------
def _feature_map_inputs(problem, generator):
    return {
        "x": torch.randn(problem.n, problem.d, generator=generator),
        "y": _poisoned(problem.n, problem.d),
    }


def _feature_map_launch(kernel, inputs, problem):
    kernel[(math.ceil(problem.n / problem.c),)](
        inputs["x"], inputs["y"], problem.n, problem.d, problem.c
    )


def _elementwise(function):
    return lambda inputs, problem: {"y": function(inputs["x"].double())}


Y = ("value", "y")  # the line that computes what is stored in y

FEATURE_MAP = Puzzle(
    "feature_map",
    problems=ONE_HEAD,
    inputs=_feature_map_inputs,
    launch=_feature_map_launch,
    reference=_elementwise(lambda x: torch.nn.functional.elu(x) + 1),
    grid=("tile",),
    layouts={"x": ROWS, "y": ROWS},
    mistakes=(
        Mistake(
            _elementwise(torch.nn.functional.elu),
            "y is elu(x): add 1, so that φ(x) = elu(x) + 1 is positive",
            Y,
        ),
        Mistake(
            _elementwise(torch.exp),
            "y is exp(x) everywhere: elu(x) + 1 is x + 1 where x > 0 and exp(x) elsewhere "
            "(tl.where(x > 0, x + 1, tl.exp(x)))",
            Y,
        ),
        Mistake(
            _elementwise(lambda x: x + 1),
            "y is x + 1 everywhere: where x ≤ 0, elu(x) + 1 is exp(x) (tl.where(x > 0, x + 1, "
            "tl.exp(x)))",
            Y,
        ),
        Mistake(
            _elementwise(lambda x: torch.where(x > 0, x, x.exp())),
            "y is x where x > 0: elu(x) + 1 is x + 1 there",
            Y,
        ),
        Mistake(
            _elementwise(lambda x: torch.where(x > 0, x.exp(), x + 1)),
            "the two branches are swapped: x + 1 where x > 0, exp(x) elsewhere",
            Y,
        ),
        Mistake(
            _elementwise(lambda x: x.clamp(min=0) + 1),
            "y is max(x, 0) + 1: where x ≤ 0, elu(x) + 1 is exp(x), not 1",
            Y,
        ),
    ),
    tile="BLOCK",
    sizes=("D", "BLOCK"),
    unit="tile",
)


# --- 2. chunk_scores: tl.dot and the causal mask of one chunk -----------------------------------
def _chunk_scores_inputs(problem, generator):
    q, k = (torch.randn(problem.n, problem.d, generator=generator) for _ in range(2))
    return {"q": q, "k": k, "s": _poisoned(problem.chunks, problem.c, problem.c)}


def _chunk_scores_launch(kernel, inputs, problem):
    kernel[(problem.chunks,)](
        inputs["q"], inputs["k"], inputs["s"], problem.n, problem.d, problem.c
    )


def _scores(mask="causal", transposed=False):
    return lambda inputs, problem: {
        "s": ref.scores(inputs["q"], inputs["k"], problem, mask, transposed)
    }


CHUNK_SCORES = Puzzle(
    "chunk_scores",
    problems=ONE_HEAD,
    inputs=_chunk_scores_inputs,
    launch=_chunk_scores_launch,
    reference=_scores(),
    grid=("chunk",),
    layouts={"q": ROWS, "k": ROWS, "s": Layout("blocks")},
    mistakes=(
        *_mask_mistakes(_scores, "queries", "tl.where(i >= j, s, 0.0)"),
        Mistake(
            _scores(transposed=True),
            "s holds k_i·q_j: rows are queries, s = q kᵀ (tl.dot(q, tl.trans(k)))",
            "scores",
        ),
        Mistake(_misread(_scores()), *QUERIES_FROM_KEYS),
    ),
    sizes=("D", "C"),
    unit="score",
)


# --- 3. intra_chunk: the chunk's own part of the output, every head -----------------------------
def _intra_chunk_launch(kernel, inputs, problem):
    kernel[(problem.chunks, problem.heads)](
        inputs["q"], inputs["k"], inputs["v"], inputs["o"],
        problem.n, problem.d, problem.d_v, problem.c,
    )  # fmt: skip


def _intra(mask="causal"):
    def outputs(inputs, problem):
        o = ref.scores(inputs["q"], inputs["k"], problem, mask) @ ref.chunked(inputs["v"], problem)
        return {"o": ref.unchunked(o, problem)}

    return outputs


HEADS = {"q": ROWS, "k": ROWS, "v": VALUE_ROWS, "o": VALUE_ROWS}

INTRA_CHUNK = Puzzle(
    "intra_chunk",
    problems=PROBLEMS,
    inputs=_heads,
    launch=_intra_chunk_launch,
    reference=_intra(),
    grid=("chunk", "head"),
    layouts=HEADS,
    mistakes=(
        *_mask_mistakes(_intra, "rows", "tl.where(i >= j, s, 0.0) before · V"),
        Mistake(_misread(_intra()), *QUERIES_FROM_KEYS),
    ),
)


# --- 4. chunk_states: the state carried across chunks -------------------------------------------
def _chunk_states_inputs(problem, generator):
    inputs = _heads(problem, generator)
    del inputs["o"], inputs["q"]
    inputs["h"] = _poisoned(problem.heads, problem.chunks + 1, problem.d, problem.d_v)
    return inputs


def _chunk_states_launch(kernel, inputs, problem):
    kernel[(problem.heads,)](
        inputs["k"], inputs["v"], inputs["h"], problem.n, problem.d, problem.d_v, problem.c
    )


def _walk(walk="carried"):
    return lambda inputs, problem: {"h": ref.states(inputs["k"], inputs["v"], problem, walk)}


CHUNK_STATES = Puzzle(
    "chunk_states",
    problems=PROBLEMS,
    inputs=_chunk_states_inputs,
    launch=_chunk_states_launch,
    reference=_walk(),
    grid=("head",),
    layouts={"k": ROWS, "v": VALUE_ROWS, "h": Layout("states")},
    mistakes=(
        Mistake(
            _walk("alone"),
            "the state was not carried: h[t + 1] holds chunk t alone; add each chunk to the "
            "running state (state += …) instead of replacing it",
            "state",
        ),
        Mistake(
            _walk("inclusive"),
            "h[t] already includes chunk t: store the state before adding the chunk's kᵀv",
            ("store", "h"),
        ),
        Mistake(
            _walk("reset"),
            "the state starts from zero in every chunk, so h[t] is 0 until the last: create it "
            "with tl.zeros once, before the loop",
            ["reset", "state"],
        ),
    ),
    unit="state",
)


# --- 5. chunked_forward: the whole causal forward, unnormalized ---------------------------------
def _forward_launch(kernel, inputs, problem, *extra):
    kernel[(problem.heads,)](
        inputs["q"], inputs["k"], inputs["v"], inputs["o"], problem.n, *extra,
        problem.d, problem.d_v, problem.c,
    )  # fmt: skip


def _forward(queries_as_keys=False, **options):
    def outputs(inputs, problem):
        q, k, v = (inputs[name] for name in "qkv")
        keys = q if queries_as_keys else None
        return {"o": ref.unchunked(ref.numerator(q, k, v, problem, keys=keys, **options), problem)}

    return outputs


def _linear_attention(normalize):
    def outputs(inputs, problem):
        q, k, v = (inputs[name].double() for name in "qkv")
        o = linear_attention(
            q, k, v, causal=True, normalize=normalize, method="parallel", eps=problem.eps
        )
        return {"o": o}

    return outputs


STATE_MISTAKES = (  # (state, message, the line to look at)
    (
        "after",
        "rows see every key of their chunk, later ones included: read the state before "
        "adding the chunk to it",
        "state",
    ),
    (
        "previous",
        "rows see only the previous chunk, not all earlier ones: accumulate the state "
        "(state += …) instead of overwriting it",
        ["reset", "state"],
    ),
    (
        "none",
        "rows see only their own chunk: carry the state of the earlier chunks "
        "(state += kᵀv after each chunk) and add q · state",
        ["reset", ("value", "o")],
    ),
)

CHUNKED_FORWARD = Puzzle(
    "chunked_forward",
    problems=PROBLEMS,
    inputs=_heads,
    launch=_forward_launch,
    reference=_linear_attention(normalize=False),
    grid=("head",),
    layouts=HEADS,
    mistakes=(
        *(Mistake(_forward(state=state), *told) for state, *told in STATE_MISTAKES),
        *_mask_mistakes(lambda mask: _forward(mask=mask), "rows", "tl.where(i >= j, s, 0.0)"),
        Mistake(
            _forward(queries_as_keys=True),
            "the state sums q_jᵀ v_j: it sums the keys, state += tl.dot(tl.trans(k), v)",
            "state",
        ),
        Mistake(_misread(_linear_attention(normalize=False)), *QUERIES_FROM_KEYS),
    ),
)


# --- 6. normalized_forward: the normalizer carried beside the state -----------------------------
def _normalized(**options):
    return lambda inputs, problem: {
        "o": ref.normalized(*(inputs[name] for name in "qkv"), problem, **options)
    }


DENOMINATOR = ("denominator", "o")  # the line that computes what o is divided by

NORMALIZED_FORWARD = Puzzle(
    "normalized_forward",
    problems=(PROBLEMS[0], Problem(*SIZES[1], eps=LARGE_EPS), PROBLEMS[2]),
    inputs=lambda problem, generator: _heads(problem, generator, positive=True),
    launch=lambda kernel, inputs, problem: _forward_launch(kernel, inputs, problem, problem.eps),
    reference=_linear_attention(normalize=True),
    grid=("head",),
    layouts=HEADS,
    mistakes=(
        Mistake(
            _normalized(normalize=False),
            "o is the numerator only: divide row i by q_i·z + Σ_{j ≤ i in the chunk} q_i·k_j + eps",
            ("store", "o"),
        ),
        Mistake(
            _normalized(key_sum="none"),
            "the denominator misses the keys of earlier chunks: carry z = Σ k_j across chunks, "
            "as the state is carried, and add q_i·z",
            DENOMINATOR,
        ),
        Mistake(
            _normalized(key_sum="previous"),
            "the denominator's key sum holds the previous chunk's keys only: accumulate z "
            "(z += …) instead of overwriting it",
            ["reset", DENOMINATOR],
        ),
        Mistake(
            _normalized(key_sum="after"),
            "the denominator counts the chunk's own keys twice: add them to z after the "
            "chunk's output, as the state",
            DENOMINATOR,
        ),
        Mistake(
            _normalized(denominator_mask="none"),
            "the denominator counts keys after the query in its chunk: sum the masked scores",
            DENOMINATOR,
        ),
        Mistake(
            _normalized(axis=-2),
            "the denominator sums the scores' columns: row i's sum runs over its keys, "
            "tl.sum(s, axis=1)",
            DENOMINATOR,
        ),
        Mistake(
            _normalized(eps="none"),
            "the denominator has no eps: add it, q_i·z + Σ q_i·k_j + eps",
            DENOMINATOR,
        ),
        Mistake(
            _normalized(eps="one"),
            "the denominator adds 1 where eps belongs: add the kernel's argument eps, "
            "q_i·z + Σ q_i·k_j + eps",
            DENOMINATOR,
        ),
        Mistake(
            _normalized(eps="after"),
            "eps is added to the quotient: it belongs in the denominator, numerator / (… + eps)",
            ("value", "o"),
        ),
        Mistake(
            _normalized(state="none", key_sum="none"),
            "the state and the key sum start from zero in every chunk: create them with "
            "tl.zeros once, before the loop, and add each chunk to them",
            ["reset", "state"],
        ),
        Mistake(
            _normalized(state="previous", key_sum="previous"),
            "the state and the key sum hold the previous chunk alone: create them once, before "
            "the loop, and add each chunk to them (+=)",
            ["reset", "state"],
        ),
        Mistake(_misread(_linear_attention(normalize=True)), *QUERIES_FROM_KEYS),
        *(Mistake(_normalized(state=state), *told) for state, *told in STATE_MISTAKES),
        *_mask_mistakes(
            lambda mask: _normalized(mask=mask), "rows", "tl.where(i >= j, s, 0.0), then sum"
        ),
        *_mask_mistakes(  # in the numerator alone (a kernel whose denominator uses no scores)
            lambda mask: _normalized(mask=mask, denominator_mask="causal"),
            "rows",
            "tl.where(i >= j, s, 0.0) before · V",
        ),
    ),
    sizes=("D", "DV", "C", "eps"),
)


# --- 7. value_gradient: one backward tile --------------------------------------------------------
def _value_gradient_inputs(problem, generator):
    inputs = _heads(problem, generator)
    do = torch.randn(problem.heads, problem.n, problem.d_v, generator=generator)
    per_chunk = ref.chunked(inputs["q"], problem).mT @ ref.chunked(do, problem)  # (BH, NT, D, DV)
    later = per_chunk.flip(1).cumsum(dim=1).flip(1)  # Σ over the chunks ≥ t
    dh = torch.cat([later, torch.zeros_like(later[:, :1])], dim=1).float()
    return {"q": inputs["q"], "k": inputs["k"], "do": do, "dh": dh, "dv": inputs["o"]}


def _value_gradient_launch(kernel, inputs, problem):
    kernel[(problem.chunks, problem.heads)](
        inputs["q"], inputs["k"], inputs["do"], inputs["dh"], inputs["dv"],
        problem.n, problem.d, problem.d_v, problem.c,
    )  # fmt: skip


def _value_gradient(queries_as_keys=False, **options):
    def outputs(inputs, problem):
        q, k, do, dh = (inputs[name] for name in ("q", "k", "do", "dh"))
        keys = q if queries_as_keys else None
        return {"dv": ref.value_gradient(q, k, do, dh, problem, keys=keys, **options)}

    return outputs


def _value_gradient_reference(inputs, problem):
    q, k, do = (inputs[name].double() for name in ("q", "k", "do"))
    v = torch.zeros(problem.heads, problem.n, problem.d_v, dtype=torch.float64, requires_grad=True)
    o = linear_attention(q, k, v, causal=True, normalize=False, method="parallel")
    (dv,) = torch.autograd.grad(o, v, do)
    return {"dv": dv}


VALUE_GRADIENT = Puzzle(
    "value_gradient",
    problems=PROBLEMS,
    inputs=_value_gradient_inputs,
    launch=_value_gradient_launch,
    reference=_value_gradient_reference,
    grid=("chunk", "head"),
    layouts={"q": ROWS, "k": ROWS, "do": VALUE_ROWS, "dv": VALUE_ROWS, "dh": Layout("states")},
    mistakes=(
        Mistake(
            _value_gradient(mask="flipped"),
            "key j collects gradients from queries before it: in the backward pass key j "
            "receives from the queries i ≥ j that saw it (keep [j, i] with j ≤ i)",
            "mask",
        ),
        Mistake(
            _value_gradient(mask="strict"),
            "key j misses the gradient of its own query: the queries i ≥ j saw it, i = j "
            "included (keep [j, i] with j ≤ i, not j < i)",
            "mask",
        ),
        Mistake(
            _value_gradient(mask="none"),
            "key j collects gradients from every query of its chunk: only the queries i ≥ j "
            "saw it (keep [j, i] with j ≤ i)",
            "scores",
        ),
        Mistake(
            _value_gradient(state=0),
            "the state term uses dh[t], which counts this chunk's queries a second time: use "
            "dh[t + 1], the queries after the chunk",
            ("load", "dh"),
        ),
        Mistake(
            _value_gradient(state=None),
            "rows miss the gradient from later chunks: add k_j · dh[t + 1]",
            ("value", "dv"),
        ),
        Mistake(
            _value_gradient(queries_as_keys=True),
            "the state term multiplies q_j: key j's row of dv gets k_j · dh[t + 1]",
            ("value", "dv"),
        ),
        Mistake(_misread(_value_gradient()), *QUERIES_FROM_KEYS),
    ),
)

PUZZLES = {
    puzzle.name: puzzle
    for puzzle in (
        FEATURE_MAP,
        CHUNK_SCORES,
        INTRA_CHUNK,
        CHUNK_STATES,
        CHUNKED_FORWARD,
        NORMALIZED_FORWARD,
        VALUE_GRADIENT,
    )
}
