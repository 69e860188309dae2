"""How the puzzles' tensors are laid out, in the names of the kernels' arguments.

Every tensor of a puzzle is contiguous. Its `Layout` splits an element's offset into a head, a
unit (a chunk or tile of token rows, a chunk boundary, a score block) and a row, and says how far
apart heads, units and rows are, as expressions of the sizes (`N·DV`, `C·D`, …). A checker reads
a kernel's trace through them: which head and rows each program touched, and, where a program
touched another's, which size the kernel used in place of the right one (`name_of`).
"""

import dataclasses
import math

import numpy as np


@dataclasses.dataclass(frozen=True)
class Layout:
    """kind "rows": token rows of `width` elements ("D" or "DV"), `(BH, N, width)` when the
    puzzle has heads, `(N, width)` when not; "states": `(BH, NT + 1, D, DV)`, one state per chunk
    boundary; "blocks": `(NT, C, C)`, one score block per chunk."""

    kind: str
    width: str = "D"

    def strides(self, tile):
        """{"head", "unit", "row"}: the right distance between heads, units and rows, as
        expressions; `tile` is the name of the rows a program or chunk holds ("C" or "BLOCK")."""
        if self.kind == "rows":
            return {"head": f"N·{self.width}", "unit": f"{tile}·{self.width}", "row": self.width}
        if self.kind == "states":
            return {"head": "(NT + 1)·D·DV", "unit": "D·DV", "row": "DV"}
        return {"head": "NT·C·C", "unit": "C·C", "row": "C"}

    def wrong(self, part, tile):
        """The distances a kernel may use in place of the right `part` ("head", "unit", "row"),
        most likely first: the expressions that `name_of` tries."""
        w = self.width
        if self.kind == "rows":
            return {
                "head": ("N·D", "N·DV", f"N·{tile}", "N", w, f"NT·{tile}·{w}", f"{tile}·{w}", "0"),
                "unit": (f"{tile}·D", f"{tile}·DV", f"{tile}·{tile}", f"{w}·{w}", w, tile, "0"),
                "row": ("D", "DV", tile, "1"),
            }[part]
        if self.kind == "states":
            return {
                "head": ("NT·D·DV", "(NT + 1)·D·D", "(NT + 1)·DV·DV", "N·D·DV", "D·DV", "0"),
                "unit": ("D·D", "DV·DV", "C·D", "C·DV", "D", "DV", "0"),
                "row": ("D", "C", "1"),
            }[part]
        return {"head": (), "unit": ("C", "C·D", "D·D", "0"), "row": ("D", "1")}[part]

    def split(self, flat, sizes, tile):
        """(head, unit) of each flat element offset (arrays; offsets past the tensor's end
        extrapolate: row N + r of head b is row r of head b + 1)."""
        strides = {part: evaluate(e, sizes) for part, e in self.strides(tile).items()}
        head = np.floor_divide(flat, strides["head"])
        return head, (flat - head * strides["head"]) // strides["unit"]


def evaluate(expression, sizes):
    """The value of an expression such as "(NT + 1)·D·DV" for `sizes` ({"N": 40, …}), or None
    when it names a size the puzzle does not have.

    >>> evaluate("(NT + 1)·D·DV", {"(NT + 1)": 3, "D": 16, "DV": 32}), evaluate("C·D", {"D": 16})
    (1536, None)
    """
    factors = expression.split("·")
    if not all(f in sizes or f.isdigit() for f in factors):
        return None
    return math.prod(sizes[f] if f in sizes else int(f) for f in factors)


def name_of(value, candidates, sizes):
    """The first of `candidates` (expressions) whose value is `value`, or None.

    >>> name_of(640, ("N·DV", "N·D"), {"N": 40, "D": 16, "DV": 32})
    'N·D'
    """
    for expression in candidates:
        if evaluate(expression, sizes) == value:
            return expression
    return None


def listed(words):
    """Words joined as in a sentence.

    >>> listed(["q", "k", "v"])
    'q, k and v'
    """
    words = list(words)
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def spans(indices, limit=5):
    """Integers as ranges of consecutive ones, sorted (at most `limit` ranges).

    >>> spans([40, 32, *range(16), 41])
    '0–15, 32, 40–41'
    """
    runs = []
    for i in sorted(set(indices)):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in runs[:limit])
    return text + (", …" if len(runs) > limit else "")


# How an output's elements group into what a reader thinks about, for messages:
#   "tile"   (N, D) rows, BLOCK (= problem.c) a program;   "chunk" (BH, N, ·) rows in chunks;
#   "score"  (NT, C, C) one C × C block per chunk;          "state" (BH, NT + 1, D, DV) boundaries.
def where(bad, problem, unit):
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
        text = spans(indices)
        if group:
            noun, size = group
            groups = sorted({i // size for i in indices})
            text += f" ({noun}{'s' if len(groups) > 1 else ''} {spans(groups)})"
        return text

    if all(h == heads[0] for h in heads):
        plural = len(heads[0]) > 1
        every = " of every head" if len(heads) > 1 else ""
        return f"{many if plural else one} {items(heads[0])}{every} {'are' if plural else 'is'}"
    parts = "; ".join(f"{items(h)} of head {b}" for b, h in enumerate(heads) if h)
    return f"{many} {parts} are"
