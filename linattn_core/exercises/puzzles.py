"""The seven Triton puzzles of the kernel chapter: inputs, launch, reference and typical mistakes.

Each puzzle's kernel signature and grid are those of its solution in `solutions.py`. References
are computed in float64 from the definitions (the causal scores, the chunk states, the package's
`linear_attention`); a mistake is what a kernel with that one error computes, so a checker can
name the error when a kernel's output matches it.
"""

import math

import torch
import torch.nn.functional as F

from linattn_core.attention import linear_attention
from linattn_core.exercises.checks import Mistake, Problem, Puzzle

EPS = 1e-6
RAGGED = (16, 40, 64)  # one chunk, a ragged 2.5 chunks, four whole chunks (C = 16)


def _poisoned(*shape):
    return torch.full(shape, math.nan)


def _heads(problem, generator, *, positive=False):
    """q, k `(BH, N, D)`, v `(BH, N, DV)` float32, and a NaN-filled output shaped like v."""
    draw = torch.rand if positive else torch.randn
    b, n = problem.heads, problem.n
    q, k = (draw(b, n, problem.d, generator=generator) for _ in range(2))
    v = torch.randn(b, n, problem.d_v, generator=generator)
    return {"q": q, "k": k, "v": v, "o": _poisoned(b, n, problem.d_v)}


def _chunked(x, problem):
    """(…, N, ·) float64 → (…, NT, C, ·), the ragged end padded with zero rows."""
    padded = F.pad(x.double(), (0, 0, 0, problem.chunks * problem.c - problem.n))
    return padded.unflatten(-2, (problem.chunks, problem.c))


def _unchunked(x, problem):
    return x.flatten(-3, -2)[..., : problem.n, :]


def _causal_scores(q, k, problem, *, diagonal=0, transposed=False):
    """(…, NT, C, C) masked scores q_i·k_j of every chunk (k_i·q_j when `transposed`)."""
    q, k = _chunked(q, problem), _chunked(k, problem)
    scores = (k @ q.mT) if transposed else (q @ k.mT)
    return scores.tril(diagonal)


def _states(k, v, problem, *, carried=True, inclusive=False):
    """(BH, NT + 1, D, DV): Σ_{j < tC} k_jᵀ v_j at every boundary t, or the typical wrong walks."""
    per_chunk = _chunked(k, problem).mT @ _chunked(v, problem)  # (BH, NT, D, DV)
    zero = torch.zeros_like(per_chunk[:, :1])
    if not carried:  # the state overwritten by each chunk: h[t + 1] = k_tᵀ v_t
        return torch.cat([zero, per_chunk], dim=1)
    states = torch.cat([zero, per_chunk.cumsum(dim=1)], dim=1)
    if inclusive:  # stored after the update: h[t] = S_{t+1}, and the last one stored twice
        return torch.cat([states[:, 1:], states[:, -1:]], dim=1)
    return states


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


FEATURE_MAP = Puzzle(
    "feature_map",
    problems=tuple(Problem(1, n, 16, 16, 16) for n in (5, 40, 64)),
    inputs=_feature_map_inputs,
    launch=_feature_map_launch,
    reference=lambda inputs, problem: {"y": F.elu(inputs["x"].double()) + 1},
    mistakes=(
        Mistake(
            lambda inputs, problem: {"y": F.elu(inputs["x"].double())},
            "y is elu(x): add 1, so that φ(x) = elu(x) + 1 is positive",
        ),
        Mistake(
            lambda inputs, problem: {"y": inputs["x"].double().exp()},
            "y is exp(x) everywhere: elu(x) + 1 is x + 1 where x > 0 and exp(x) elsewhere "
            "(tl.where(x > 0, x + 1, tl.exp(x)))",
        ),
    ),
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


def _scores(**options):
    return lambda inputs, problem: {
        "s": _causal_scores(inputs["q"], inputs["k"], problem, **options)
    }


CHUNK_SCORES = Puzzle(
    "chunk_scores",
    problems=tuple(Problem(1, n, 16, 16, 16) for n in RAGGED),
    inputs=_chunk_scores_inputs,
    launch=_chunk_scores_launch,
    reference=_scores(),
    mistakes=(
        Mistake(
            _scores(diagonal=16),
            "the entries above the diagonal are not zero: key j > i comes after query i; "
            "keep s[i, j] for j ≤ i only (tl.where(i >= j, s, 0.0))",
        ),
        Mistake(
            _scores(diagonal=-1),
            "the diagonal is zero: query i sees its own key too (j ≤ i, not j < i)",
        ),
        Mistake(
            _scores(transposed=True),
            "s holds k_i·q_j: rows are queries, s = q kᵀ (tl.dot(q, tl.trans(k)))",
        ),
    ),
    unit="score",
)


# --- 3. intra_chunk: the chunk's own part of the output, every head -----------------------------
def _intra_chunk_launch(kernel, inputs, problem):
    kernel[(problem.chunks, problem.heads)](
        inputs["q"],
        inputs["k"],
        inputs["v"],
        inputs["o"],
        problem.n,
        problem.d,
        problem.d_v,
        problem.c,
    )


def _intra(masked=True, head_zero=False):
    def outputs(inputs, problem):
        scores = _chunked(inputs["q"], problem) @ _chunked(inputs["k"], problem).mT
        scores = scores.tril() if masked else scores
        o = _unchunked(scores @ _chunked(inputs["v"], problem), problem)
        return {"o": o[:1].expand_as(o) if head_zero else o}

    return outputs


PROBLEMS = tuple(Problem(2, n, 16, 32, 16) for n in RAGGED)

INTRA_CHUNK = Puzzle(
    "intra_chunk",
    problems=PROBLEMS,
    inputs=_heads,
    launch=_intra_chunk_launch,
    reference=_intra(),
    mistakes=(
        Mistake(
            _intra(masked=False),
            "rows see keys after them within their chunk: mask the scores (j ≤ i) before ·V",
        ),
        Mistake(
            _intra(head_zero=True),
            "every head got head 0's output: move the pointers to this head first, "
            "q + program_id(1) · N · D (and N · DV for v and o)",
        ),
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


def _walk(**options):
    return lambda inputs, problem: {"h": _states(inputs["k"], inputs["v"], problem, **options)}


CHUNK_STATES = Puzzle(
    "chunk_states",
    problems=PROBLEMS,
    inputs=_chunk_states_inputs,
    launch=_chunk_states_launch,
    reference=_walk(),
    mistakes=(
        Mistake(
            _walk(carried=False),
            "the state was not carried: h[t + 1] holds chunk t alone; add each chunk to the "
            "running state (state += …) instead of replacing it",
        ),
        Mistake(
            _walk(inclusive=True),
            "h[t] already includes chunk t: store the state before adding the chunk's kᵀv",
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


def _numerator(states="before", intra=0):
    """o = q S + (masked) intra-chunk part, with S the state of `states`: "before" the chunk
    (right), "after" it, "previous" (chunk t − 1 alone), or "none"."""

    def outputs(inputs, problem):
        q, k, v = (inputs[name] for name in "qkv")
        walk = _states(k, v, problem, carried=states != "previous")
        walk = walk[:, 1:] if states == "after" else walk[:, :-1]
        if states == "none":
            walk = torch.zeros_like(walk)
        scores = _chunked(q, problem) @ _chunked(k, problem).mT
        scores = scores.tril() if intra == 0 else scores
        o = _chunked(q, problem) @ walk + scores @ _chunked(v, problem)
        return {"o": _unchunked(o, problem)}

    return outputs


def _linear_attention(normalize):
    def outputs(inputs, problem):
        q, k, v = (inputs[name].double() for name in "qkv")
        o = linear_attention(q, k, v, causal=True, normalize=normalize, method="parallel", eps=EPS)
        return {"o": o}

    return outputs


CHUNKED_FORWARD = Puzzle(
    "chunked_forward",
    problems=PROBLEMS,
    inputs=_heads,
    launch=_forward_launch,
    reference=_linear_attention(normalize=False),
    mistakes=(
        Mistake(
            _numerator(states="after"),
            "rows see every key of their chunk, later ones included: read the state before "
            "adding the chunk to it",
        ),
        Mistake(
            _numerator(states="previous"),
            "rows see only the previous chunk, not all earlier ones: accumulate the state "
            "(state += …) instead of overwriting it",
        ),
        Mistake(
            _numerator(states="none"),
            "rows see only their own chunk: carry the state of the earlier chunks "
            "(state += kᵀv after each chunk) and add q · state",
        ),
        Mistake(
            _numerator(intra=1),
            "rows see keys after them within their chunk: mask the scores (j ≤ i)",
        ),
    ),
)


# --- 6. normalized_forward: the normalizer carried beside the state -----------------------------
def _denominator(key_sum=True, masked=True):
    def outputs(inputs, problem):
        q, k = inputs["q"].double(), inputs["k"].double()
        scores = _chunked(q, problem) @ _chunked(k, problem).mT
        row_sums = (scores.tril() if masked else scores).sum(dim=-1, keepdim=True)
        if key_sum:
            z = _chunked(k, problem).sum(dim=-2).cumsum(dim=1) - _chunked(k, problem).sum(dim=-2)
            row_sums = row_sums + _chunked(q, problem) @ z.unsqueeze(-1)
        numerator = _chunked(_numerator()(inputs, problem)["o"], problem)
        return {"o": _unchunked(numerator / (row_sums + EPS), problem)}

    return outputs


NORMALIZED_FORWARD = Puzzle(
    "normalized_forward",
    problems=PROBLEMS,
    inputs=lambda problem, generator: _heads(problem, generator, positive=True),
    launch=lambda kernel, inputs, problem: _forward_launch(kernel, inputs, problem, EPS),
    reference=_linear_attention(normalize=True),
    mistakes=(
        Mistake(
            _linear_attention(normalize=False),
            "o is the numerator only: divide row i by q_i·z + Σ_{j ≤ i in the chunk} q_i·k_j + eps",
        ),
        Mistake(
            _denominator(key_sum=False),
            "the denominator misses the keys of earlier chunks: carry z = Σ k_j across chunks, "
            "as the state is carried, and add q_i·z",
        ),
        Mistake(
            _denominator(masked=False),
            "the denominator counts keys after the query in its chunk: sum the masked scores",
        ),
    ),
)


# --- 7. value_gradient: one backward tile --------------------------------------------------------
def _value_gradient_inputs(problem, generator):
    inputs = _heads(problem, generator)
    do = torch.randn(problem.heads, problem.n, problem.d_v, generator=generator)
    per_chunk = _chunked(inputs["q"], problem).mT @ _chunked(do, problem)  # (BH, NT, D, DV)
    later = per_chunk.flip(1).cumsum(dim=1).flip(1)  # Σ over the chunks ≥ t
    dh = torch.cat([later, torch.zeros_like(later[:, :1])], dim=1).float()
    return {"q": inputs["q"], "k": inputs["k"], "do": do, "dh": dh, "dv": inputs["o"]}


def _value_gradient_launch(kernel, inputs, problem):
    kernel[(problem.chunks, problem.heads)](
        inputs["q"], inputs["k"], inputs["do"], inputs["dh"], inputs["dv"],
        problem.n, problem.d, problem.d_v, problem.c,
    )  # fmt: skip


def _value_gradient(state=1, lower=False):
    """dv of chunk t from dh[t + state] (state=None: no state term), the transposed scores masked
    for queries at or after the key (or, wrongly, before it: `lower`)."""

    def outputs(inputs, problem):
        k, do = _chunked(inputs["k"], problem), _chunked(inputs["do"], problem)
        scores_t = k @ _chunked(inputs["q"], problem).mT  # [j, i]
        scores_t = scores_t.tril() if lower else scores_t.triu()
        dv = scores_t @ do
        if state is not None:
            dh = inputs["dh"].double()
            dv = dv + k @ dh[:, state : state + problem.chunks]
        return {"dv": _unchunked(dv, problem)}

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
    mistakes=(
        Mistake(
            _value_gradient(lower=True),
            "key j collects gradients from queries before it: in the backward pass key j "
            "receives from the queries i ≥ j that saw it (mask the transposed scores with j ≤ i)",
        ),
        Mistake(
            _value_gradient(state=0),
            "the state term uses dh[t], which counts this chunk's queries a second time: use "
            "dh[t + 1], the queries after the chunk",
        ),
        Mistake(
            _value_gradient(state=None),
            "rows miss the gradient from later chunks: add k_j · dh[t + 1]",
        ),
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
