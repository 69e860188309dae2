"""Checkers for the Triton puzzles: run a reader's kernel in the interpreter and say what is wrong.

A checker launches the kernel on three problems (ragged N in each, sizes that differ from each
other) with float32 inputs and NaN-filled outputs, under
`linattn_core.kernels.tools.trace.record`, with masked-off lanes that the kernel gave no value
reading NaN. A kernel passes when every output is within `RTOL` of a float64 reference; the
first problem it fails gets a diagnosis from the evidence (`diagnoses.Evidence`), tried in turn:

1. the kernel raised: the exception and the kernel line it came from (a shape error in tile
   shapes, `shapes.py`);
2. a load or store outside the tensors: rows past N (a mask) or a wrong address (which size);
3. a mask that compares flat offsets (row·D + column) with N;
4. NaN that came from masked-off lanes without `other=` (confirmed by a run that fills them 0);
5. a program that touched another's rows or head, and the size or program id that put it there;
6. a typical mistake of the puzzle (`Mistake`) whose output the kernel's matches;
7. an offset that moves by a wrong size from program to program, or loop step to loop step;
8. output never written (still NaN), with the likely reason;
9. precision: the same kernel right when its roundings to 16-bit floats are skipped;
10. otherwise, the rows, chunks or states that are wrong, and the line that computes them.

The line a message points at is the one that builds what is wrong (`sources.py`): the statement
that computes an offset, a mask or a stored value, not only the load or store that uses it. The
answer is a `Verdict`, true when the kernel is right, whose text says why.
"""

import dataclasses
import math
import textwrap

import numpy as np
import torch

from linattn_core.exercises.diagnoses import RTOL, Evidence, close, raised
from linattn_core.exercises.layouts import where
from linattn_core.exercises.offsets import at_lines
from linattn_core.kernels.common import INTERPRETED
from linattn_core.kernels.tools.trace import record

LIMIT = 2_000  # loads, stores and products a program may make: seven times what a program of
# the busiest right kernel of tests/exercises makes (a walk token by token, 288)


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
    """One problem a checker runs: heads, tokens, widths, tile height (C or BLOCK), eps."""

    heads: int
    n: int
    d: int
    d_v: int
    c: int
    eps: float = 1e-6

    @property
    def chunks(self):
        return math.ceil(self.n / self.c)


@dataclasses.dataclass(frozen=True)
class Mistake:
    """A typical wrong answer: what it computes (`outputs(inputs, problem)`), what to say, and
    the line to look at (`diagnoses.Evidence.line`): "mask" (where the causal mask is built),
    "state" (the product that updates the state), "scores" (the C × C product), "reset" (a
    tl.zeros inside the loop, or an assignment there that overwrites what the loop carries),
    (op, tensor) (that access), ("value", output) (what is stored into it), ("denominator",
    output) (what it is divided by), ("misread", tensor, meant) (the load of `tensor` into a name
    like `meant`), a list of these (the first the kernel has), or None."""

    outputs: object
    message: str
    look_at: object = None


@dataclasses.dataclass(frozen=True)
class Puzzle:
    """A puzzle's problems, inputs, launch, reference, typical mistakes and memory layout.

    inputs(problem, generator) → {name: tensor}, outputs NaN-filled; launch(kernel, inputs,
    problem) runs the kernel; reference(inputs, problem) → {output name: float64 tensor}.
    `grid` names the program ids ("tile", "chunk", "head"), `layouts` the layout of each tensor,
    `tile` the name of a program's or chunk's rows ("C" or "BLOCK"), `sizes` those shown in
    messages, and `unit` how an output's elements group in messages (`layouts.where`).
    """

    name: str
    problems: tuple
    inputs: object
    launch: object
    reference: object
    grid: tuple
    layouts: dict
    mistakes: tuple = ()
    tile: str = "C"
    sizes: tuple = ("D", "DV", "C")
    unit: str = "chunk"

    def check(self, kernel):
        """Run `kernel` on every problem; the first failure's Verdict, or a passing one."""
        _require_interpreter(kernel, self.name)
        generator = torch.Generator().manual_seed(0)
        for problem in self.problems:
            inputs = self.inputs(problem, generator)
            failure = self._run(kernel, inputs, problem)
            if failure:
                return Verdict(False, f"✗ {self.name}, {self.describe(problem)}: {failure}")
        sizes = ", ".join(str(p.n) for p in self.problems)
        return Verdict(True, f"✓ {self.name}: correct for N = {sizes}, ragged ends included")

    def describe(self, problem):
        """N = 40 (2 heads, D = 16, DV = 64, C = 32): the sizes a reader's kernel sees."""
        values = self.symbols(problem)
        shown = [f"{problem.heads} heads"] if problem.heads > 1 else []
        shown += [f"{name} = {values[name]}" for name in self.sizes if name != "eps"]
        if "eps" in self.sizes:
            shown.append(f"eps = {problem.eps:g}")
        return f"N = {problem.n} ({', '.join(shown)})"

    def symbols(self, problem):
        """The sizes of a problem by the names the kernel uses for them."""
        values = {"N": problem.n, "NT": problem.chunks, "(NT + 1)": problem.chunks + 1}
        values.update({self.tile: problem.c, "D": problem.d})
        if "DV" in self.sizes:
            values["DV"] = problem.d_v
        return values

    def _run(self, kernel, inputs, problem):
        try:  # NaN and 0/0 are the kernel's to make: the outputs show them, NumPy need not
            with (
                record(bounds=inputs, undefined=math.nan, limit=LIMIT) as trace,
                np.errstate(all="ignore"),
            ):
                self.launch(kernel, inputs, problem)
        except Exception as error:  # the reader's kernel failed: say how, don't crash
            values = self.symbols(problem)
            return raised(error, {k: values[k] for k in (self.tile, "D", "DV") if k in values})
        evidence = Evidence(self, problem, inputs, trace)
        if trace.out_of_bounds:
            return evidence.out_of_bounds(trace.out_of_bounds[0])
        expected = self.reference(inputs, problem)
        wrong = [name for name, want in expected.items() if not close(inputs[name], want)]
        if not wrong:
            return None
        flat = evidence.flat_mask()
        if flat:
            return flat

        def rerun(**options):
            """The outputs of the same kernel on the same inputs under other `record` options."""
            again = {name: x.clone() for name, x in inputs.items()}
            for name in expected:
                again[name].fill_(math.nan)
            with record(bounds=again, limit=LIMIT, **options), np.errstate(all="ignore"):
                self.launch(kernel, again, problem)
            return again

        name = wrong[0]
        return (
            evidence.undefined(name, rerun)
            or evidence.misplaced(tuple(expected))
            or self._typical_message(name, inputs, problem, evidence)
            or evidence.misaddressed()
            or self._unwritten_message(name, inputs[name], problem, evidence)
            or evidence.imprecise(name, expected[name], rerun)
            or self._wrong_message(name, inputs[name], expected[name], problem, evidence)
        )

    def _unwritten_message(self, name, got, problem, evidence):
        unwritten = torch.isnan(got)
        if not unwritten.any():
            return None
        whole_heads = unwritten.reshape(problem.heads, -1).all(dim=-1)
        stores = evidence.sites("store", name)
        if problem.heads > 1 and whole_heads[1:].all() and not unwritten[0].any():
            heads = "head 1" if problem.heads == 2 else f"heads 1–{problem.heads - 1}"
            stored = f"; {name} is stored at {at_lines(stores)}" if stores else ""
            return (
                f"{name}: nothing of {heads} was written: every program must first move its "
                f"pointers to its own head (heads are stacked, N rows each){stored}"
            )
        rows = where(unwritten, problem, self.unit)
        reason = self._unwritten_reason(unwritten, problem, evidence, stores)
        return f"{name}: {rows} never written (still NaN): {reason}"

    def _unwritten_reason(self, unwritten, problem, evidence, stores):
        """What leaves exactly these elements unwritten, when the pattern tells, and the line
        to look at; `stores`: the Sites that store the output."""
        source = evidence.source(stores[0]) if stores else None
        loops = source.loops() if source else []
        walk = (
            "the walk leaves out the last, ragged chunk: loop over tl.cdiv(N, C) chunks "
            f"(N // C rounds down){f'; look at {loops[0]}' if loops else ''}"
        )
        ragged = problem.n % problem.c != 0
        if self.unit == "state":
            missing = unwritten.reshape(problem.heads, problem.chunks + 1, -1).any(dim=-1)
            boundaries = set(missing.any(dim=0).nonzero().flatten().tolist())
            if boundaries == {problem.chunks}:
                inside = f" (h is stored at {at_lines(stores)} only)" if stores else ""
                return f"store the final state, h[NT], after the loop{inside}"
            if ragged and boundaries == {problem.chunks - 1}:
                return walk
        elif self.unit == "score" and ragged and stores:
            past = torch.arange(problem.chunks * problem.c).reshape(-1, problem.c) >= problem.n
            rows, columns = past[:, :, None].expand_as(unwritten), past[:, None, :]
            if unwritten.equal(rows) or unwritten.equal(rows | columns):
                mask = source.mask(stores[0]) or stores[0]
                return (
                    f"the store is masked at row N ({mask}), but every block has {self.tile} "
                    f"rows, the ones past N zero: store the whole block, unmasked"
                )
        elif self.grid == ("head",) and ragged:
            rows = unwritten.reshape(problem.heads, problem.n, -1).any(dim=-1).any(dim=0)
            if rows.nonzero().min() >= (problem.chunks - 1) * problem.c:
                return walk
        if stores:
            return f"is every tile stored ({at_lines(stores)})?"
        return "is every tile stored?"

    def _typical_message(self, name, inputs, problem, evidence):
        for mistake in self.mistakes:
            wrong = mistake.outputs(inputs, problem)[name]
            if close(inputs[name], wrong):
                site = evidence.line(mistake.look_at)
                return mistake.message + (f"; look at {site}" if site else "")
        return None

    def _wrong_message(self, name, got, want, problem, evidence):
        errors = _vector_errors(got, want)
        rows = where(errors > RTOL, problem, self.unit)
        stores = evidence.sites("store", name)
        value = evidence.source(stores[0]).value(stores[0]) if stores else None
        computed = f"; it is computed at {value}" if value else ""
        return f"{name}: {rows} wrong (largest relative error {errors.max():.2g}){computed}"


def _require_interpreter(kernel, name):
    from triton.runtime.interpreter import InterpretedFunction

    if not (INTERPRETED and isinstance(kernel, InterpretedFunction)):
        raise RuntimeError(
            f"check_{name} runs your kernel in Triton's interpreter: set "
            "os.environ['TRITON_INTERPRET'] = '1' before triton is first imported (the first cell "
            "of the chapter does), then define the kernel with @triton.jit"
        )


def _vector_errors(got, want):
    """The error of each vector along the last dimension, relative to the reference's root mean
    square vector norm; shaped like the outputs without their last dimension."""
    got, want = got.double(), want.double()
    scale = want.norm() / math.sqrt(want.numel() / want.shape[-1]) + 1e-300
    return (got - want).norm(dim=-1) / scale
