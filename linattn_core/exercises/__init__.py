"""Self-checking Triton puzzles for the book's kernel chapter.

Each `check_<name>(kernel)` runs a reader's `@triton.jit` kernel in Triton's interpreter on
three problems (N ragged in each; D, DV and C told apart) and returns a `Verdict`: true when the
kernel is right, else a message that names the likely mistake and the line to look at (the one
that builds the wrong offset, mask or value): a load or store past N or out of its tensor, a
mask on flat offsets, masked-off lanes without `other=` that reach the result, a program that
touched another's rows or head (a wrong size for an offset, swapped program ids), a typical
mistake of the puzzle (a flipped, strict or global mask, a state not carried or reset, eps
misplaced, k loaded as q, …), tiles whose shapes do not fit, float16 rounding, or else the rows,
chunks or states that are wrong. Any way of loading works:
pointers, block pointers, tensor descriptors. The puzzles, in the chapter's order, and the
signature and grid each kernel is launched with (as in `solutions.py`):

    feature_map(x, y, N, D, BLOCK)                 y = elu(x) + 1, grid (⌈N/BLOCK⌉,)
    chunk_scores(q, k, s, N, D, C)                 causal q kᵀ of each chunk, grid (NT,)
    intra_chunk(q, k, v, o, N, D, DV, C)           tril(Q_t K_tᵀ) V_t, grid (NT, BH)
    chunk_states(k, v, h, N, D, DV, C)             the state at every boundary, grid (BH,)
    chunked_forward(q, k, v, o, N, D, DV, C)       causal numerator, grid (BH,)
    normalized_forward(q, k, v, o, N, eps, D, DV, C)  with the normalizer, grid (BH,)
    value_gradient(q, k, do, dh, dv, N, D, DV, C)  one backward tile: dv, grid (NT, BH)

Needs TRITON_INTERPRET=1 before triton is first imported.
"""

from linattn_core.exercises.checks import Verdict
from linattn_core.exercises.puzzles import PUZZLES

__all__ = [
    "PUZZLES",
    "Verdict",
    "check_chunk_scores",
    "check_chunk_states",
    "check_chunked_forward",
    "check_feature_map",
    "check_intra_chunk",
    "check_normalized_forward",
    "check_value_gradient",
]


def check_feature_map(kernel) -> Verdict:
    """Check a kernel for y = elu(x) + 1 over x `(N, D)`, BLOCK rows a program."""
    return PUZZLES["feature_map"].check(kernel)


def check_chunk_scores(kernel) -> Verdict:
    """Check a kernel for the causal scores q_i·k_j (j ≤ i) of every chunk."""
    return PUZZLES["chunk_scores"].check(kernel)


def check_intra_chunk(kernel) -> Verdict:
    """Check a kernel for each chunk's own part of the output, tril(Q_t K_tᵀ) V_t, every head."""
    return PUZZLES["intra_chunk"].check(kernel)


def check_chunk_states(kernel) -> Verdict:
    """Check a kernel for the state Σ_{j < tC} k_jᵀ v_j at every chunk boundary t."""
    return PUZZLES["chunk_states"].check(kernel)


def check_chunked_forward(kernel) -> Verdict:
    """Check a kernel for causal linear attention's numerator, the state carried across chunks."""
    return PUZZLES["chunked_forward"].check(kernel)


def check_normalized_forward(kernel) -> Verdict:
    """Check a kernel for normalized causal linear attention (state and key sum carried)."""
    return PUZZLES["normalized_forward"].check(kernel)


def check_value_gradient(kernel) -> Verdict:
    """Check a kernel for one backward tile: dv of a chunk from the backward state after it."""
    return PUZZLES["value_gradient"].check(kernel)
