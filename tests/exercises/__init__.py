"""A bank of Triton kernels for the puzzle checkers, one module per puzzle.

Each module holds `CORRECT`, kernels that solve its puzzle in styles other than the package's
solutions (block pointers, tensor descriptors, mask arithmetic, sums of broadcast products in
place of `tl.dot`, while loops, transposed states, float64, …), and `MISTAKES`, each one of
those kernels with one mistake a reader makes and a fragment of the message that must name it.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Mutant:
    """`kernel` with `edits` ((old, new) pairs) applied to its source: one mistake, which the
    checker's message must name with `named`, and point at with `line` (a line of the edited
    source, "line 12, `code`", where the fragment does not show it)."""

    kernel: object
    edits: tuple
    named: str
    line: str = ""
