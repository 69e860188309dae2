"""What the puzzles' kernels compute, right and wrong, in float64 chunks.

Each function takes the float32 inputs of a problem and returns an output in float64, computed
chunk by chunk as the kernels do: the chunk's masked scores, the state carried across chunks,
the key sum of the normalizer. An option names one typical mistake (a flipped mask, a state not
carried, eps in the wrong place, …); with the default options the result is the right one, and
`tests/test_exercises.py` checks it against the package's `linear_attention`.
"""

import torch
import torch.nn.functional as F


def _positions(s):
    """(t·C, i, j) for blocks of scores `(…, NT, C, C)`: where each chunk starts, the query's
    and the key's place in it."""
    chunks, c = s.shape[-3], s.shape[-1]
    starts = torch.arange(chunks)[:, None, None] * c
    return starts, torch.arange(c)[:, None], torch.arange(c)[None, :]


def _global_query(s):  # t·C + i ≥ j: the query's place in the sequence, the key's in the chunk
    start, i, j = _positions(s)
    return s * (start + i >= j)


def _global_key(s):  # i ≥ t·C + j: the query's place in the chunk, the key's in the sequence
    start, i, j = _positions(s)
    return s * (i >= start + j)


MASKS = {  # how a C × C block of scores s[i, j] (query i, key j) of chunk t is masked
    "causal": lambda s: s.tril(),  # j ≤ i: right
    "strict": lambda s: s.tril(-1),  # j < i: the diagonal left out
    "flipped": lambda s: s.triu(),  # j ≥ i: the keys after the query
    "none": lambda s: s,
    "global query": _global_query,  # every key from chunk 1 on
    "global key": _global_key,  # no key from chunk 1 on
}


def chunked(x, problem):
    """(…, N, ·) float64 → (…, NT, C, ·), the ragged end padded with zero rows."""
    padded = F.pad(x.double(), (0, 0, 0, problem.chunks * problem.c - problem.n))
    return padded.unflatten(-2, (problem.chunks, problem.c))


def unchunked(x, problem):
    return x.flatten(-3, -2)[..., : problem.n, :]


def scores(q, k, problem, mask="causal", transposed=False):
    """(…, NT, C, C): the masked scores q_i·k_j of every chunk (k_i·q_j when `transposed`)."""
    q, k = chunked(q, problem), chunked(k, problem)
    return MASKS[mask]((k @ q.mT) if transposed else (q @ k.mT))


def states(k, v, problem, walk="carried"):
    """(BH, NT + 1, D, DV): S_t = Σ_{j < tC} k_jᵀ v_j at every boundary t; `walk` "alone": each
    chunk's kᵀv replaces the state; "inclusive": h[t] stored after adding chunk t; "reset":
    the state set to zero at the start of every chunk, before h[t] is stored."""
    per_chunk = chunked(k, problem).mT @ chunked(v, problem)  # (BH, NT, D, DV)
    zero = torch.zeros_like(per_chunk[:, :1])
    if walk == "alone":
        return torch.cat([zero, per_chunk], dim=1)
    if walk == "reset":  # zeros stored, then the last chunk alone
        return torch.cat([torch.zeros_like(per_chunk), per_chunk[:, -1:]], dim=1)
    carried = torch.cat([zero, per_chunk.cumsum(dim=1)], dim=1)
    if walk == "inclusive":  # the last one stored twice
        return torch.cat([carried[:, 1:], carried[:, -1:]], dim=1)
    return carried


def numerator(q, k, v, problem, state="before", mask="causal", keys=None):
    """Chunks of o = q S_t + masked(q kᵀ) v `(BH, NT, C, DV)`, with S_t the state `state` the
    chunk (right), "after" it, "previous" (chunk t − 1 alone) or "none"; the state summed over
    `keys` instead of k when given."""
    walk = states(
        k if keys is None else keys, v, problem, "alone" if state == "previous" else "carried"
    )
    walk = walk[:, 1:] if state == "after" else walk[:, :-1]
    if state == "none":
        walk = torch.zeros_like(walk)
    return chunked(q, problem) @ walk + scores(q, k, problem, mask) @ chunked(v, problem)


def normalized(q, k, v, problem, *, normalize=True, key_sum="before", mask="causal",
               denominator_mask=None, axis=-1, eps="inside", state="before"):  # fmt: skip
    """o = numerator / (q z_t + row sums of the masked scores + eps) `(BH, N, DV)`; mistakes:
    `key_sum` "none", "previous" (chunk t − 1 alone) or "after" (the chunk's keys in z),
    `denominator_mask` another mask in the
    denominator, `axis` −2 (column sums), `eps` "none", "one" (1 in its place) or "after"
    (added to the quotient),
    `state` and `mask` as in `numerator`, `normalize=False` (the numerator alone)."""
    top = numerator(q, k, v, problem, state=state, mask=mask)
    if not normalize:
        return unchunked(top, problem)
    block = scores(q, k, problem, denominator_mask or mask)
    sums = block.sum(dim=axis).unsqueeze(-1)  # (BH, NT, C, 1)
    per_chunk = chunked(k, problem).sum(dim=-2)  # (BH, NT, D)
    z = per_chunk.cumsum(dim=1) - (per_chunk if key_sum != "after" else 0)
    if key_sum == "previous":  # overwritten by each chunk's keys: z_t = Σ k over chunk t − 1
        z = F.pad(per_chunk, (0, 0, 1, 0))[:, :-1]
    if key_sum != "none":
        sums = sums + chunked(q, problem) @ z.unsqueeze(-1)
    bottom = sums + {"inside": problem.eps, "one": 1.0}.get(eps, 0.0)
    o = top / bottom + (problem.eps if eps == "after" else 0.0)
    return unchunked(o, problem)


def value_gradient(q, k, do, dh, problem, state=1, mask="causal", keys=None):
    """dv of each chunk `(BH, N, DV)`: masked(k qᵀ) do + k dh[t + state] (`state` None: no
    state term; `keys` in place of k in that term), the transposed scores [j, i] masked for
    queries i at or after key j when `mask` is "causal" (as the forward's j ≤ i, transposed)."""
    transposed = scores(q, k, problem, mask, transposed=False).mT  # [j, i] = q_i·k_j, masked
    dv = transposed @ chunked(do, problem)
    if state is not None:
        dh = dh.double()[:, state : state + problem.chunks]
        dv = dv + chunked(k if keys is None else keys, problem) @ dh
    return unchunked(dv, problem)
