"""Checkers for the Triton puzzles: run a reader's kernel in the interpreter and say what is wrong.

A checker launches the kernel on several problems (ragged N among them) with float32 inputs
and outputs filled with NaN, under `linattn_core.kernels.trace.record(bounds=...)`, so that

- a load or store outside the tensors is caught (and never performed), with the program and
  the tensor whose end it crossed;
- an output element the kernel never wrote stays NaN and is reported by row or chunk;
- a wrong result is compared with the typical mistakes of that puzzle (a missing mask, a state
  that was not carried, …), and the matching one is named; otherwise the wrong rows are listed.

The answer is a `Verdict`, true when the kernel is right, whose text says why.
"""

import dataclasses
import math
import textwrap

import torch

from linattn_core.kernels.forward import INTERPRETED
from linattn_core.kernels.trace import record

RTOL = 1e-4  # float32 products against float64 references: far below any real mistake


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A checker's answer: `passed`, and a message that says what was checked or what is wrong."""

    passed: bool
    message: str

    def __bool__(self):
        return self.passed

    def __repr__(self):  # wrapped for a notebook's output box; `message` is one line
        return textwrap.fill(self.message, width=88, subsequent_indent="  ")


@dataclasses.dataclass(frozen=True)
class Problem:
    """One problem a checker runs: heads, tokens, widths, tile height."""

    heads: int
    n: int
    d: int
    d_v: int
    c: int

    @property
    def chunks(self):
        return math.ceil(self.n / self.c)

    def __str__(self):
        heads = f"{self.heads} heads, " if self.heads > 1 else ""
        return f"N = {self.n} ({heads}D = {self.d}, DV = {self.d_v}, C = {self.c})"


@dataclasses.dataclass(frozen=True)
class Mistake:
    """A typical wrong answer: what it computes (`outputs(inputs, problem)`) and what to say."""

    outputs: object
    message: str


@dataclasses.dataclass(frozen=True)
class Puzzle:
    """A puzzle's problems, inputs, launch, reference and typical mistakes.

    inputs(problem, generator) → {name: tensor}, outputs NaN-filled; launch(kernel, inputs,
    problem) runs the kernel; reference(inputs, problem) → {output name: float64 tensor};
    `unit` says how the output's elements group in messages (`_where`).
    """

    name: str
    problems: tuple
    inputs: object
    launch: object
    reference: object
    mistakes: tuple = ()
    unit: str = "chunk"  # how the output's elements group, for messages: see `_where`

    def check(self, kernel):
        """Run `kernel` on every problem; the first failure's Verdict, or a passing one."""
        _require_interpreter(kernel, self.name)
        generator = torch.Generator().manual_seed(0)
        for problem in self.problems:
            inputs = self.inputs(problem, generator)
            failure = self._run(kernel, inputs, problem)
            if failure:
                return Verdict(False, f"✗ {self.name}, {problem}: {failure}")
        sizes = ", ".join(str(p.n) for p in self.problems)
        return Verdict(True, f"✓ {self.name}: correct for N = {sizes}, ragged ends included")

    def _run(self, kernel, inputs, problem):
        try:
            with record(bounds=inputs) as trace:
                self.launch(kernel, inputs, problem)
        except Exception as error:  # the reader's kernel failed: say how, don't crash
            cause = error.__cause__ or error
            return f"the kernel raised {type(cause).__name__}: {_first_line(cause)}"
        if trace.out_of_bounds:
            return _out_of_bounds_message(trace.out_of_bounds[0], problem)
        expected = self.reference(inputs, problem)
        for name, want in expected.items():
            got = inputs[name]
            if torch.isnan(got).any():
                return self._unwritten_message(name, got, problem)
            if _relative_error(got, want) > RTOL:
                return self._wrong_message(name, inputs, problem)
        return None

    def _unwritten_message(self, name, got, problem):
        unwritten = torch.isnan(got)
        whole_heads = unwritten.reshape(problem.heads, -1).all(dim=-1)
        if problem.heads > 1 and whole_heads[1:].all() and not unwritten[0].any():
            heads = "head 1" if problem.heads == 2 else f"heads 1–{problem.heads - 1}"
            return (
                f"{name}: nothing of {heads} was written: every program must first move its "
                "pointers to its own head (heads are stacked, N rows each)"
            )
        where = _where(unwritten, problem, self.unit)
        return f"{name}: {where} never written (still NaN): is every tile stored?"

    def _wrong_message(self, name, inputs, problem):
        for mistake in self.mistakes:
            wrong = mistake.outputs(inputs, problem)[name]
            if _relative_error(inputs[name], wrong) <= RTOL:
                return mistake.message
        expected = self.reference(inputs, problem)[name]
        errors = _vector_errors(inputs[name], expected)
        where = _where(errors > RTOL, problem, self.unit)
        return f"{name}: {where} wrong (largest relative error {errors.max():.2g})"


def _require_interpreter(kernel, name):
    from triton.runtime.interpreter import InterpretedFunction

    if not (INTERPRETED and isinstance(kernel, InterpretedFunction)):
        raise RuntimeError(
            f"check_{name} runs your kernel in Triton's interpreter: set "
            "os.environ['TRITON_INTERPRET'] = '1' before triton is first imported (the first cell "
            "of the chapter does), then define the kernel with @triton.jit"
        )


def _first_line(error):
    text = str(error).strip().splitlines()
    return text[0] if text else "(no message)"


def _relative_error(got, want):
    """‖got − want‖ / ‖want‖ in float64 (0 when both are zero)."""
    got, want = got.double(), want.double()
    scale = want.norm()
    return float((got - want).norm() / scale) if scale > 0 else float(got.norm())


def _vector_errors(got, want):
    """The error of each vector along the last dimension, relative to the reference's root mean
    square vector norm; shaped like the outputs without their last dimension."""
    got, want = got.double(), want.double()
    scale = want.norm() / math.sqrt(want.numel() / want.shape[-1]) + 1e-300
    return (got - want).norm(dim=-1) / scale


# How an output's elements group into what a reader thinks about, for messages:
#   "tile"   (N, D) rows, BLOCK (= problem.c) a program;   "chunk" (BH, N, ·) rows in chunks;
#   "score"  (NT, C, C) one C × C block per chunk;          "state" (BH, NT + 1, D, DV) boundaries.
def _where(bad, problem, unit):
    """Which rows, chunks or states of an output a bool tensor shaped like it marks, as the
    subject of a sentence: "rows 16–31 (chunk 1) of every head are"."""
    if unit == "score":
        marked = bad.reshape(1, problem.chunks, -1).any(dim=-1)
        return _phrase(marked, "the score block of chunk", "the score blocks of chunks")
    if unit == "state":
        marked = bad.reshape(problem.heads, problem.chunks + 1, -1).any(dim=-1)
        return _phrase(marked, "the state at boundary t =", "the states at boundaries t =")
    marked = bad.reshape(problem.heads, problem.n, -1).any(dim=-1)
    group = "program" if unit == "tile" else "chunk"
    return _phrase(marked, "row", "rows", (group, problem.c))


def _phrase(marked, one, many, group=None):
    """`marked` (heads, items) in words, items grouped (e.g. rows into chunks) when `group` is
    (noun, items per group)."""
    heads = [row.nonzero().flatten().tolist() for row in marked]

    def items(indices):
        text = _list(indices)
        if group:
            noun, size = group
            groups = sorted({i // size for i in indices})
            text += f" ({noun}{'s' if len(groups) > 1 else ''} {_list(groups)})"
        return text

    if all(h == heads[0] for h in heads):
        plural = len(heads[0]) > 1
        every = " of every head" if len(heads) > 1 else ""
        return f"{many if plural else one} {items(heads[0])}{every} {'are' if plural else 'is'}"
    parts = "; ".join(f"{items(h)} of head {b}" for b, h in enumerate(heads) if h)
    return f"{many} {parts} are"


def _list(indices):
    """0–15, 32, 40–47 (ranges of consecutive integers; at most five)."""
    spans = []
    for i in indices:
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    text = ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in spans[:5])
    return text + (", …" if len(spans) > 5 else "")


def _out_of_bounds_message(event, problem):
    if event.elements_past == 0:
        where = f"right after the end of {event.nearest}"
    elif event.elements_past > 0:
        where = f"{event.elements_past} elements after the end of {event.nearest}"
    else:
        where = f"{-event.elements_past} elements before the start of {event.nearest}"
    program = event.program[0] if len(event.program) == 1 else event.program
    fix = (
        "mask the load with rows < N (other=0.0)"
        if event.op == "load"
        else "mask the store with rows < N"
    )
    return (
        f"program {program} {event.op}s {event.count} elements outside the tensors, "
        f"starting {where}: {fix}"
    )
