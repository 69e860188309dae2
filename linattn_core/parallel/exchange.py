"""What the ranks exchange: a check that they agree, their summaries, and the merge.

A rank r holding tokens [a_r, b_r) of one sequence needs only the state of the tokens before
a_r. Its shard acts on a state as an affine map, S ↦ S M_r + U_r (M_r = I for linear attention,
whose shard adds U_r = Σ v φ(k)ᵀ; the product of the shard's (I − β k kᵀ) factors for the delta
rule, its U_r the shard's state from zero). `PassState` all-gathers (U_r, M_r) once, and each
rank composes the maps of the ranks before it: P_r = (…(0 M_0 + U_0) M_1 + U_1 …) M_{r−1} +
U_{r−1}, the chunk recurrence with ranks for chunks. Its backward pass all-gathers once more,
the gradients of the prefix states (and of the final state), and runs the same recurrence in
reverse with transposed maps.

Every collective goes through `all_gather`, which counts the bytes a rank passes to it
(`count_bytes`); `bytes_per_rank` predicts them from the shapes, and no count depends on N.
"""

import collections
import contextlib

import torch
import torch.distributed as dist

__all__ = [
    "DTYPES",
    "MAX_BATCH_DIMS",
    "PassState",
    "agree",
    "all_gather",
    "bytes_per_rank",
    "compose",
    "count_bytes",
    "summary_dtype",
]

DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)
MAX_BATCH_DIMS = 8
SIZES = 4  # the named sizes and flags every call checks: d_k, d_v and two flags
METADATA_FIELDS = 3 + MAX_BATCH_DIMS + SIZES  # error flag, dtype, batch rank and dims, sizes

_COUNTERS = []


@contextlib.contextmanager
def count_bytes():
    """Count the bytes this process passes to the collectives inside the block, by phase.

    Yields a `collections.Counter` with keys "metadata" (the agreement check), "forward" (the
    summaries) and "backward" (the gradients of the states), filled as the collectives run
    (a backward pass counts when it runs inside the block).
    """
    counter = collections.Counter()
    _COUNTERS.append(counter)
    try:
        yield counter
    finally:
        _COUNTERS.remove(counter)


def all_gather(tensor, group, phase):
    """`torch.distributed.all_gather` of one tensor from every rank of `group`, in rank order;
    the bytes this rank passes are added to every active `count_bytes` counter under `phase`."""
    tensor = tensor.contiguous()
    for counter in _COUNTERS:
        counter[phase] += tensor.numel() * tensor.element_size()
    gathered = [torch.empty_like(tensor) for _ in range(dist.get_world_size(group))]
    dist.all_gather(gathered, tensor, group=group)
    return gathered


def summary_dtype(dtype):
    """The precision summaries are kept and merged in: float64 for float64 inputs, float32
    otherwise (a product of many (I − β k kᵀ) factors must not be rounded to 16 bits)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def agree(fn, group, *, error, dtype, batch, sizes):
    """Check, in one small all-gather, that every rank of `group` can take part: no rank
    failed its own input checks (`error`, the exception it raised, or None) and all ranks have
    the same dtype, batch dimensions and named `sizes` (a dict name → int, the same names on
    every rank). Raises on every rank, so that no rank waits for a collective the others
    skip: the failing rank its own error, the others a ValueError that names it; a
    disagreement raises a ValueError that names the quantity and each rank's value.
    """
    batch = tuple(batch)
    too_many = error is None and len(batch) > MAX_BATCH_DIMS
    if too_many:
        error = ValueError(
            f"{fn}: at most {MAX_BATCH_DIMS} batch dimensions; got {len(batch)} ({batch})"
        )
    code = DTYPES.index(dtype) if dtype in DTYPES else len(DTYPES)
    padded = (*batch, *[-1] * MAX_BATCH_DIMS)[:MAX_BATCH_DIMS]
    fields = [int(error is not None), code, len(batch), *padded, *sizes.values()]
    device = _collective_device(group)
    rows = torch.stack(all_gather(torch.tensor(fields, device=device), group, "metadata"))
    rows = rows.cpu().tolist()
    failed = [rank for rank, row in enumerate(rows) if row[0]]
    if error is not None:
        raise error
    if failed:
        raise ValueError(f"{fn}: the inputs of rank(s) {failed} failed their checks (see there)")
    names = ["dtype", "number of batch dimensions"]
    names += [f"batch dimension {i}" for i in range(MAX_BATCH_DIMS)] + list(sizes)
    for i, name in enumerate(names, start=1):
        values = [row[i] for row in rows]
        if len(set(values)) > 1:
            if name == "dtype":
                values = [str(DTYPES[v]) if v < len(DTYPES) else "other" for v in values]
            got = ", ".join(f"{value} on rank {rank}" for rank, value in enumerate(values))
            raise ValueError(f"{fn}: every rank must pass inputs with the same {name}; got {got}")


def compose(state, transition, shift):
    """The affine map of one shard applied to a state: S M + U (S + U when M is None, the
    identity of linear attention)."""
    return state + shift if transition is None else state @ transition + shift


class PassState(torch.autograd.Function):
    """(U_r, M_r) of this rank ↦ the state before its shard, P_r, and after the last, P_R.

    Forward: one all-gather of (U_r, M_r); P_r composes the maps of ranks 0 … r−1 applied to
    0, and P_R continues through the rest. Backward: one all-gather of (∂P_r, ∂P_R) from every
    rank, then the adjoint recurrence Λ_R = Σ_ranks ∂P_R, Λ_s = ∂P_s + Λ_{s+1} M_sᵀ for
    s = R−1, …, r+1: rank r's shift gets ∂U_r = Λ_{r+1}, its transition ∂M_r = P_rᵀ Λ_{r+1}.
    With `with_final=False` (linear attention) P_R is neither returned nor differentiated.
    """

    @staticmethod
    def forward(ctx, shift, transition, group, with_final):
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        parts = [shift] if transition is None else [shift, transition]
        shifts, transitions = _unpack(all_gather(_pack(parts), group, "forward"), parts)
        prefix = torch.zeros_like(shift)
        for s in range(rank):
            prefix = compose(prefix, transitions[s], shifts[s])
        ctx.group, ctx.rank, ctx.with_final = group, rank, with_final
        ctx.transitions = transitions
        ctx.save_for_backward(prefix)
        if not with_final:
            return prefix
        final = prefix
        for s in range(rank, world):
            final = compose(final, transitions[s], shifts[s])
        return prefix, final

    @staticmethod
    def backward(ctx, grad_prefix, grad_final=None):
        (prefix,) = ctx.saved_tensors
        parts = [grad_prefix] if grad_final is None else [grad_prefix, grad_final]
        grads, grad_finals = _unpack(
            all_gather(_pack(parts), group=ctx.group, phase="backward"), parts
        )
        adjoint = torch.zeros_like(grad_prefix)
        if ctx.with_final:
            adjoint = sum(grad_finals, adjoint)
        for s in reversed(range(ctx.rank + 1, len(grads))):
            transition = ctx.transitions[s]
            adjoint = grads[s] + (adjoint if transition is None else adjoint @ transition.mT)
        grad_transition = None if ctx.transitions[ctx.rank] is None else prefix.mT @ adjoint
        return adjoint, grad_transition, None, None


def bytes_per_rank(*, batch, d_k, d_v, dtype, delta, normalize=True):
    """The bytes one rank passes to the collectives of one forward and backward pass, by phase
    (what `count_bytes` counts): independent of N and of the number of ranks.

    Linear attention sends U = [S; zᵀ] `(..., d_v + 1, d_k)` (S alone when not normalized)
    forward and its gradient backward; the delta rule sends U `(..., d_v, d_k)` and M
    `(..., d_k, d_k)` forward, ∂P_r and ∂P_R `(..., d_v, d_k)` backward, all in
    `summary_dtype(dtype)`. A rank of a ring all-gather forwards R − 1 such blocks.

    >>> bytes_per_rank(batch=(2,), d_k=64, d_v=64, dtype=torch.bfloat16, delta=True)
    Counter({'forward': 65536, 'backward': 65536, 'metadata': 120})
    """
    heads = 1
    for size in batch:
        heads *= size
    element = torch.empty((), dtype=summary_dtype(dtype)).element_size()
    if delta:
        forward, backward = (d_v + d_k) * d_k, 2 * d_v * d_k
    else:
        forward = backward = (d_v + int(normalize)) * d_k
    return collections.Counter(
        forward=heads * forward * element,
        backward=heads * backward * element,
        metadata=METADATA_FIELDS * 8,  # int64
    )


def _pack(parts):
    """One flat tensor of the parts, for a single collective."""
    return torch.cat([part.reshape(-1) for part in parts])


def _unpack(gathered, parts):
    """Every rank's parts from the gathered flat tensors: (first parts, second parts or Nones)."""
    sizes = [part.numel() for part in parts]
    pieces = [flat.split(sizes) for flat in gathered]
    firsts = [piece[0].view_as(parts[0]) for piece in pieces]
    if len(parts) == 1:
        return firsts, [None] * len(gathered)
    return firsts, [piece[1].view_as(parts[1]) for piece in pieces]


def _collective_device(group):
    """Where small tensors for `group`'s collectives live: the current GPU for nccl, the CPU
    otherwise."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
