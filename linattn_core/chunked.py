"""Causal linear attention in chunks, walked in segments, with a backward pass of its own.

The chunked form computes, for chunk t of C tokens with the state of the chunks before it,
S_t = Σ_{j < tC} k_jᵀ v_j `(d, d_v)` and z_t = Σ_{j < tC} k_j `(d,)`,

    o_i = r_i (q_i S_t + Σ_{tC ≤ j ≤ i} (q_i·k_j) v_j),
    r_i = 1 / (q_i·z_t + Σ_{tC ≤ j ≤ i} q_i·k_j + eps)        (r_i = 1 without normalization).

Done for the whole sequence at once, every intermediate (the chunks' similarities, their states,
the inter-chunk products) is a tensor of N rows, several times the output; above glibc's 32 MiB
threshold each one is returned to the system when freed and page-faulted anew on the next call.
Here the sequence is walked in **segments** of whole chunks, about `SEGMENT_ELEMENTS` similarities
each, carrying S and z from one segment to the next: every intermediate is O(segment), the
output and r are the only O(N) tensors, and a ragged end is one short chunk (nothing is padded).

The backward pass (`CausalChunked.backward`) is written for the same bound. With g_i = ∂L/∂o_i,
ĝ_i = r_i g_i and â_i = −r_i g_i·o_i (zero without normalization; the denominator is the
numerator of a value column of ones, whose output gradient is â), and M_ij = ĝ_i·v_j + â_i:

    dq_i = Σ_{j ≤ i} M_ij k_j = ĝ_i S_tᵀ + â_i z_t + Σ_{tC ≤ j ≤ i} M_ij k_j
    dk_j = Σ_{i ≥ j} M_ij q_i = v_j D_{t+1}ᵀ + y_{t+1} + Σ_{j ≤ i < (t+1)C} M_ij q_i
    dv_j = Σ_{i ≥ j} (q_i·k_j) ĝ_i = k_j D_{t+1} + Σ_{j ≤ i < (t+1)C} (q_i·k_j) ĝ_i

with the backward states D_t = Σ_{i ≥ tC} q_iᵀ ĝ_i and y_t = Σ_{i ≥ tC} â_i q_i (the book's
chapter "Writing the kernel", section "The backward pass"). The forward pass saves its inputs,
o, r and the state at the start of each segment (N / segment states of d × d_v); the backward
pass walks the segments from last to first, carrying D and y.

The walk starts from an initial state (S_0, z_0), zero unless given, and returns the state
after the last token. Their gradients close the two walks: the backward pass starts D and y
from the final state's gradient (D after the last chunk), and what they hold before the first
token is the initial state's gradient.
"""

import math

import torch

SEGMENT_ELEMENTS = 2**18  # similarities per segment (1 MiB in float32), summed over the heads


class CausalChunked(torch.autograd.Function):
    """Causal chunked linear attention on `(BH, N, ·)` tensors; `linear_attention`'s "chunked"."""

    @staticmethod
    def forward(ctx, q, k, v, state, key_sum, normalize, eps, chunk_size):
        heads, n, d = q.shape
        d_v = v.shape[-1]
        out = v.new_empty(heads, n, d_v)
        rden = q.new_empty(heads, n) if normalize else None
        state = q.new_zeros(heads, d, d_v) if state is None else state  # S_0 (BH, d, d_v)
        key_sum = q.new_zeros(heads, d) if key_sum is None else key_sum  # z_0 (BH, d)
        starts = []  # (S, z) at the start of every segment, for the backward pass
        for start, stop, size in segments(heads, n, chunk_size):
            starts.append((state, key_sum))
            qc, kc, vc = (_chunks(x, start, stop, size) for x in (q, k, v))
            scores = (qc @ kc.mT).tril_()  # (BH, m, C, C): q_i·k_j, j ≤ i within each chunk
            states, key_sums = _prefix(kc.mT @ vc, state), _prefix(kc.sum(dim=-2), key_sum)
            o = torch.matmul(qc, states[:, :-1]).add_(scores @ vc)  # (BH, m, C, d_v)
            if normalize:
                den = (qc @ key_sums[:, :-1, :, None]).squeeze(-1).add_(scores.sum(dim=-1))
                r = den.add_(eps).reciprocal_()  # (BH, m, C)
                o.mul_(r[..., None])
                rden[:, start:stop] = r.flatten(1)
            out[:, start:stop] = o.flatten(1, 2)
            state, key_sum = states[:, -1].clone(), key_sums[:, -1].clone()
        # saved through autograd, so that saved-tensor hooks see (and count) everything kept
        ctx.save_for_backward(
            q,
            k,
            v,
            out,
            rden,
            torch.stack([s for s, _ in starts]) if starts else None,
            torch.stack([z for _, z in starts]) if starts else None,
        )
        ctx.chunk_size = chunk_size
        return out, state, key_sum

    @staticmethod
    def backward(ctx, grad, grad_state, grad_key_sum):
        q, k, v, out, rden, start_states, start_sums = ctx.saved_tensors
        heads, n = q.shape[:2]
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        later = grad_state  # D: Σ q_iᵀ ĝ_i over the later segments, and ∂L/∂S_N
        later_sum = grad_key_sum  # y: Σ â_i q_i over the later segments, and ∂L/∂z_N
        pieces = list(enumerate(segments(heads, n, ctx.chunk_size)))
        for index, (start, stop, size) in reversed(pieces):
            state, key_sum = start_states[index], start_sums[index]
            qc, kc, vc, gc = (_chunks(x, start, stop, size) for x in (q, k, v, grad))
            a = None
            if rden is not None:
                r = _chunks(rden[..., None], start, stop, size)  # (BH, m, C, 1)
                a = -(gc * _chunks(out, start, stop, size)).sum(dim=-1, keepdim=True).mul_(r)
                gc = gc * r  # ĝ
            scores = (qc @ kc.mT).tril_()
            mixed = gc @ vc.mT  # M without â: ĝ_i·v_j
            if a is not None:
                mixed.add_(a)
            mixed.tril_()
            states = _prefix(kc.mT @ vc, state)[:, :-1]  # S_t
            after = _suffix(qc.mT @ gc, later)  # D_{t+1} for each chunk, and D at its start
            dq_c = torch.matmul(mixed, kc).add_(gc @ states.mT)
            dk_c = torch.matmul(mixed.mT, qc).add_(vc @ after[:, 1:].mT)
            dv_c = torch.matmul(scores.mT, gc).add_(kc @ after[:, 1:])
            if a is not None:
                key_sums = _prefix(kc.sum(dim=-2), key_sum)[:, :-1]  # z_t
                dq_c.add_(a * key_sums[:, :, None, :])
                after_sums = _suffix((a * qc).sum(dim=-2), later_sum)  # y
                dk_c.add_(after_sums[:, 1:, None, :])
                later_sum = after_sums[:, 0]
            later = after[:, 0]
            dq[:, start:stop], dk[:, start:stop], dv[:, start:stop] = (
                x.flatten(1, 2) for x in (dq_c, dk_c, dv_c)
            )
        d_state = later if ctx.needs_input_grad[3] else None  # ∂L/∂S_0: D at the start
        d_key_sum = later_sum if ctx.needs_input_grad[4] else None  # ∂L/∂z_0: y at the start
        return dq, dk, dv, d_state, d_key_sum, None, None, None


def segments(heads, n, chunk_size):
    """(start, stop, chunk size) of each segment: whole chunks, `SEGMENT_ELEMENTS` similarities
    or fewer for all heads together, then the ragged end as one short chunk.

    >>> list(segments(8, 200, 64))  # 8 heads: 512 tokens a segment; 200 = 3·64 + 8
    [(0, 192, 64), (192, 200, 8)]
    """
    per_segment = max(1, SEGMENT_ELEMENTS // (heads * chunk_size * chunk_size)) * chunk_size
    whole = n - n % chunk_size
    found = [(a, min(a + per_segment, whole), chunk_size) for a in range(0, whole, per_segment)]
    if whole < n:
        found.append((whole, n, n - whole))
    return found


def _chunks(x, start, stop, size):
    """Rows start … stop − 1 of `(BH, N, f)` as contiguous `(BH, m, C, f)` chunks of `size` rows
    (one copy of the segment, so that every product runs on contiguous blocks)."""
    return x[:, start:stop].unflatten(1, (-1, size)).contiguous()


def _prefix(per_chunk, initial):
    """The running sums before each chunk and after the last: `(BH, m + 1, …)` from the
    per-chunk sums `(BH, m, …)` and the sum before the first chunk."""
    return torch.cat([initial[:, None], per_chunk], dim=1).cumsum_(dim=1)


def _suffix(per_chunk, final):
    """The sums over each chunk and all after it, and after the last: `(BH, m + 1, …)` from the
    per-chunk sums and the sum after the last chunk; entry t + 1 is what comes after chunk t."""
    running = torch.cat([per_chunk, final[:, None]], dim=1).flip(1).cumsum_(dim=1)
    return running.flip(1)


def causal_chunked(phi_q, phi_k, v, *, normalize, eps, chunk_size, initial_state=None):
    """`CausalChunked` for `(..., N, ·)` inputs, the leading dimensions one batch: (output,
    final `LinearAttentionState`), the states in the public orientation S `(..., d_v, d)`."""
    *batch, n, d = phi_q.shape
    d_v = v.shape[-1]
    heads = math.prod(batch)
    if heads == 0 or n == 0:  # nothing to attend over: the state passes through
        zeros = (v.new_zeros(*batch, d_v, d), v.new_zeros(*batch, d) if normalize else None)
        return v.new_zeros(v.shape), zeros if initial_state is None else tuple(initial_state)
    state, key_sum = (None, None) if initial_state is None else initial_state
    if state is not None:
        state = state.reshape(heads, d_v, d).mT  # (BH, d, d_v): φ(K)ᵀV's orientation
        key_sum = key_sum.reshape(heads, d) if normalize else None
    flat = [x.reshape(heads, n, x.shape[-1]) for x in (phi_q, phi_k, v)]
    out, state, key_sum = CausalChunked.apply(*flat, state, key_sum, normalize, eps, chunk_size)
    final = (state.mT.reshape(*batch, d_v, d), key_sum.reshape(*batch, d) if normalize else None)
    return out.reshape(*batch, n, d_v), final
