"""Packed sequences: S sequences of different lengths in one tensor, each computed as if alone.

A training batch of documents of different lengths is stored without padding: the documents are
concatenated along the sequence axis of one batch row, inputs `(1, H, N, ·)`, and `cu_seqlens`,
the cumulative sequence lengths (int64 `(S + 1,)`: 0 first, N last, non-decreasing), says where
each one lies: sequence s holds the tokens cu_seqlens[s] ≤ t < cu_seqlens[s + 1]. Each sequence
is computed as if it were alone: the state restarts at every boundary, from the sequence's own
initial state, and each sequence ends with its own final state (states `(S, H, ·, ·)`).
`linear_attention` (causal), `delta_rule` and `gated_delta_rule` take `cu_seqlens`.

- `run_packed`: the PyTorch methods ("parallel", "recurrent", "chunked"). Each sequence is one
  call of the operation on its slice of the inputs; the outputs are concatenated and the final
  states stacked, so the result is, by construction, that of calling each sequence on its own,
  gradients included. The boundaries are read on the host to slice the inputs
  (`cu_seqlens.tolist()`: on a GPU, one synchronization per call). "auto" where the Triton
  kernels apply (`methods.triton_applies`: CUDA, their shapes and dtypes) runs them instead.
- `chunk_indices`: for the Triton kernels (`method="triton"`), which take all sequences in one
  pass: the work list of a grid of programs over all sequences' chunks, built on the device from
  `cu_seqlens` without reading it on the host (no `.tolist()`, no `.item()`), so that a pass
  can be captured in a CUDA graph or traced by `torch.compile`.
"""

import itertools

import torch

from linattn_core.methods import auto_method, triton_applies
from linattn_core.validation import (
    check_cu_seqlens,
    check_cu_seqlens_values,
    check_non_negative_int,
    check_positive_int,
)

__all__ = ["chunk_indices", "run_packed"]


def run_packed(
    fn, operation, cu_seqlens, tokens, initial_state, *, methods, method, returns_state, **options
):
    """`operation` on packed inputs, one call per sequence, or, for "auto" where the Triton
    kernels apply, one call of the kernels on all sequences; the inputs are checked by the caller.

    Args:
        fn: the operation's name, for error messages.
        operation: the public function (`linear_attention`, `delta_rule`, `gated_delta_rule`),
            called as `operation(*sequence_tokens, initial_state=…, method=…, **options)`.
        cu_seqlens: the boundaries `(S + 1,)`, checked by `validation.check_cu_seqlens`; their
            values are read here and checked by `validation.check_cu_seqlens_values`.
        tokens: the operation's inputs with one row per token, q first and v third, each
            `(1, H, N, ·)` or `(1, H, N)` (β, g): sliced along the axis of N.
        initial_state: None, or the initial states `(S, H, ·, ·)`, a tensor or a tuple of them
            (None fields allowed, as the z of unnormalized linear attention).
        methods: the operation's method names. "auto" runs the kernels on all sequences at once
            where `methods.triton_applies`, and otherwise for each sequence the method that
            `methods.auto_method` picks for it.
        method: one of `methods` but "triton" (which the operations run without this function).
        returns_state: whether `operation` returns (output, final state), not the output alone.
        **options: the operation's other arguments (chunk_size, normalize, ...).

    Returns:
        The output `(1, H, N, d_v)`, and with returns_state the final states `(S, H, ·, ·)` of
        the type of each sequence's.
    """
    if method == "auto" and triton_applies(tokens[0], tokens[2], options["chunk_size"]):
        return operation(
            *tokens, initial_state=initial_state, method="triton", cu_seqlens=cu_seqlens, **options
        )
    axis = tokens[0].dim() - 2  # the axis of N
    bounds = cu_seqlens.tolist()  # on the host: one synchronization on a GPU
    check_cu_seqlens_values(fn, bounds, tokens[0].shape[axis])
    outputs, finals = [], []
    for s, (start, end) in enumerate(itertools.pairwise(bounds)):
        sequence = [x.narrow(axis, start, end - start) for x in tokens]
        chosen = method
        if method == "auto":
            chosen = auto_method(
                methods, sequence[0], sequence[2], chunk_size=options["chunk_size"]
            )
        result = operation(
            *sequence, initial_state=_select(initial_state, s), method=chosen, **options
        )
        output, final = result if returns_state else (result, None)
        outputs.append(output)
        finals.append(final)
    output = torch.cat(outputs, dim=axis)
    return (output, _concatenate(finals)) if returns_state else output


def chunk_indices(cu_seqlens, n, chunk_size):
    """The chunks of packed sequences, one per program of a grid, built on the device.

    Sequence s, of n_s = cu_seqlens[s + 1] − cu_seqlens[s] tokens, is cut into ⌈n_s / C⌉ chunks
    of C = `chunk_size` tokens, the last one shorter (an empty sequence has none). Since
    ⌈n_s / C⌉ ≤ ⌊n_s / C⌋ + 1 and Σ_s ⌊n_s / C⌋ ≤ ⌊N / C⌋, there are at most G = N // C + S
    chunks: a grid size known on the host from shapes alone. Program p takes the p-th chunk,
    sequences in order and chunks in order within each; the programs after the last chunk have
    nothing to do.

    Every step is a tensor operation on cu_seqlens's device (a cumulative sum, a sorted search,
    gathers): nothing is read on the host, so no synchronization with a GPU, and a CUDA graph
    or `torch.compile(fullgraph=True)` can hold it. For the same reason the values of
    cu_seqlens are not checked (`validation.check_cu_seqlens`).

    Args:
        cu_seqlens: the boundaries, int64 `(S + 1,)` (0 first, `n` last, non-decreasing).
        n: the packed length N (non-negative int).
        chunk_size: C (positive int).

    Returns:
        int64 `(N // C + S, 3)` on cu_seqlens's device: row p is (s, start, end), program p's
        chunk being the packed tokens start ≤ t < end, of sequence s (1 ≤ end − start ≤ C);
        the rows after the last chunk are (−1, N, N).

    >>> chunk_indices(torch.tensor([0, 5, 5, 7]), n=7, chunk_size=4)
    tensor([[ 0,  0,  4],
            [ 0,  4,  5],
            [ 2,  5,  7],
            [-1,  7,  7]])
    """
    fn = "chunk_indices"
    check_cu_seqlens(fn, cu_seqlens)
    check_positive_int(fn, "chunk_size", chunk_size)
    check_non_negative_int(fn, "n", n)
    sequences = cu_seqlens.shape[0] - 1
    starts, ends = cu_seqlens[:-1], cu_seqlens[1:]  # (S,)
    chunks = (ends - starts + chunk_size - 1) // chunk_size  # ⌈n_s / C⌉  (S,)
    after = chunks.cumsum(0)  # one past each sequence's last chunk  (S,)
    program = torch.arange(n // chunk_size + sequences, device=cu_seqlens.device)  # (G,)
    sequence = torch.searchsorted(after, program, right=True)  # S for the programs past the end
    valid = sequence < sequences
    s = sequence.clamp(max=sequences - 1)
    start = starts[s] + (program - (after[s] - chunks[s])) * chunk_size
    end = torch.minimum(start + chunk_size, ends[s])
    none = torch.full_like(program, n)
    return torch.stack(
        [sequence.masked_fill(~valid, -1), torch.where(valid, start, none), end.where(valid, none)],
        dim=1,
    )


def _select(state, s):
    """Sequence s's initial state, `state[s : s + 1]`, field by field for a tuple of states."""
    if state is None or isinstance(state, torch.Tensor):
        return None if state is None else state[s : s + 1]
    return _like(state, [_select(x, s) for x in state])


def _concatenate(states):
    """The per-sequence final states (each with a leading batch of 1) as one `(S, ...)`."""
    first = states[0]
    if first is None or isinstance(first, torch.Tensor):
        return None if first is None else torch.cat(states)
    return _like(first, [_concatenate(list(column)) for column in zip(*states, strict=True)])


def _like(pair, fields):
    """A tuple of `fields` of the type of `pair` (a NamedTuple, as `LinearAttentionState`)."""
    return pair._make(fields) if hasattr(pair, "_make") else tuple(fields)
