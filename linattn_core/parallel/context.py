"""Causal linear attention and the delta rule of one sequence split over the ranks of a group.

Each rank: (1) checks its inputs and agrees with the others on shapes and dtype (one small
all-gather); (2) summarizes its shard as an affine map of the state, S ↦ S M_r + U_r, in
`summary_dtype`; (3) exchanges the summaries and merges those of the ranks before it
(`exchange.PassState`, one all-gather forward and one backward); (4) computes its outputs with
the package's own functions, starting from that state. Autograd does the rest: the gradients
of steps (2) and (4) are the package's, that of step (3) is `PassState.backward`.
"""

import torch
import torch.distributed as dist

from linattn_core.attention import LinearAttentionState, linear_attention
from linattn_core.delta import delta_rule
from linattn_core.gated import gated_delta_rule
from linattn_core.methods import DELTA_RULE_METHODS
from linattn_core.parallel.exchange import PassState, agree, summary_dtype
from linattn_core.validation import (
    check_attention_inputs,
    check_choice,
    check_eps,
    check_flag,
    check_same_dtype_and_device,
    check_tensor,
)

__all__ = ["context_parallel_delta_rule", "context_parallel_linear_attention"]

LINEAR_METHODS = ("auto", "parallel", "recurrent", "chunked", "triton")


def context_parallel_linear_attention(
    phi_q, phi_k, v, *, group=None, normalize=True, method="auto", eps=1e-6
):
    """Causal linear attention of one sequence whose tokens are split over the ranks of `group`.

    Rank r holds a contiguous shard of the tokens, in rank order (shards may differ in length,
    even be empty), and gets its shard of `linear_attention(..., causal=True)` on the whole
    sequence. Its shard's summary is the sum U_r = [Σ v φ(k)ᵀ; Σ φ(k)ᵀ] (the
    `LinearAttentionState` it adds); the state before it is P_r = U_0 + … + U_{r−1}, from one
    all-gather, and its outputs are `linear_attention` started from P_r. Differentiable: the
    backward pass all-gathers the gradients of the P_r once, and rank r's summary receives
    ∂P_{r+1} + … + ∂P_{R−1}. Every rank must run its backward pass (as with
    DistributedDataParallel), and all ranks must agree on whether gradients are needed.

    Each rank sends (d_v + 1)·d numbers per batch element forward and as many backward (d_v·d
    when not normalized), in float32 (float64 for float64 inputs), whatever N is
    (`exchange.bytes_per_rank`).

    Args:
        phi_q, phi_k: this rank's feature-mapped queries and keys `(..., N_r, d)`.
        v: this rank's values `(..., N_r, d_v)`.
        group: the `torch.distributed` process group (None: the default group). Any backend.
        normalize, method, eps: as in `linear_attention` (causal; `method` may differ between
            ranks, every method being exact).

    Returns:
        This rank's output shard `(..., N_r, d_v)`.

    Raises:
        ValueError on every rank when one rank's inputs fail their checks or the ranks disagree
        on dtype, batch dimensions, d, d_v, `normalize` or whether gradients are needed;
        TypeError/ValueError locally as `linear_attention` for a wrong argument, and
        ValueError if torch.distributed is not initialized.
    """
    fn = "context_parallel_linear_attention"
    group = _group(fn, group)
    error = _local_error(
        lambda: (
            check_attention_inputs(fn, ("phi_q", "phi_k", "v"), phi_q, phi_k, v),
            check_choice(fn, "method", method, LINEAR_METHODS),
            check_eps(fn, eps),
            check_flag(fn, "normalize", normalize),
        )
    )
    _agree(fn, group, error, (phi_q, phi_k, v), flag=("normalize", normalize))
    dtype = summary_dtype(phi_q.dtype)
    values = v.to(dtype)
    if normalize:  # z is the state of a value constantly 1: U = [S; zᵀ]
        values = torch.cat([values, values.new_ones(*values.shape[:-1], 1)], dim=-1)
    shift = values.mT @ phi_k.to(dtype)  # (..., d_v (+1), d)
    prefix = PassState.apply(shift, None, group, False).to(phi_q.dtype)
    if normalize:
        state = LinearAttentionState(prefix[..., :-1, :], prefix[..., -1, :])
    else:
        state = LinearAttentionState(prefix, None)
    if phi_q.shape[-2] == 0:  # empty, but computed from the state so that backward reaches it
        return phi_q @ state.S.mT
    return linear_attention(
        phi_q,
        phi_k,
        v,
        causal=True,
        normalize=normalize,
        method=method,
        eps=eps,
        initial_state=state,
    )


def context_parallel_delta_rule(q, k, v, beta, g=None, *, group=None, method="auto"):
    """The delta rule of one sequence whose tokens are split over the ranks of `group`.

    Rank r's shard maps the state before it to the state after it affinely,
    S ↦ S M_r + U_r, with M_r = Π_t (I − β_t k_t k_tᵀ) over the shard's tokens in order and
    U_r the shard's state from S = 0. Both come from one `delta_rule` call on the values
    widened by d_k zero columns from the state [0; I] (the rows of the state evolve
    independently), in float32 (float64 for float64 inputs) whatever the inputs' dtype. One
    all-gather exchanges (U_r, M_r); rank r composes the maps of ranks 0 … r−1 to get its
    initial state, and all ranks the whole sequence's final state. The backward pass runs the
    composition in reverse with transposed maps after one all-gather of the states' gradients.
    Every rank must run its backward pass, and all must agree on whether gradients are needed.

    Args:
        q, k: this rank's queries and keys `(..., N_r, d_k)`; v: values `(..., N_r, d_v)`;
        beta: rates `(..., N_r)` (as `delta.delta_rule`).
        g: this rank's log-gates `(..., N_r)` for the gated delta rule (`gated_delta_rule`), or
            None for the delta rule. A gate is a scalar per token, so it commutes with every
            factor of M_r and enters it as one factor exp(g_1 + … + g_{N_r}): the same
            summary, from `gated_delta_rule` on the widened values. All ranks pass g or none.
        group: the `torch.distributed` process group (None: the default group). Any backend.
        method: as in `delta_rule`, for this rank's outputs; the summary uses "auto" for
            "auto" and "triton" (Triton where the kernels take the widened values, "chunked"
            otherwise) and the named method otherwise.

    Returns:
        (o_r, S): this rank's outputs `(..., N_r, d_v)` and the whole sequence's final state
        `(..., d_v, d_k)`, the same on every rank (its gradients from all ranks add up).

    Raises:
        As `context_parallel_linear_attention`: ranks that disagree on dtype, batch dimensions,
        d_k, d_v or whether g is given raise ValueError on every rank.
    """
    fn = "context_parallel_delta_rule"
    group = _group(fn, group)
    error = _local_error(
        lambda: (
            check_attention_inputs(fn, ("q", "k", "v"), q, k, v),
            _check_beta(fn, "beta", beta, q),
            None if g is None else _check_beta(fn, "g", g, q),
            check_choice(fn, "method", method, DELTA_RULE_METHODS),
        )
    )
    _agree(
        fn,
        group,
        error,
        (q, k, v, beta, *([] if g is None else [g])),
        flag=("gated", g is not None),
    )
    dtype, d_k, d_v = summary_dtype(q.dtype), q.shape[-1], v.shape[-1]
    batch = q.shape[:-2]
    widened = torch.cat([v.to(dtype), v.new_zeros(*v.shape[:-1], d_k, dtype=dtype)], dim=-1)
    eye = torch.eye(d_k, dtype=dtype, device=q.device)
    start = torch.cat([eye.new_zeros(d_v, d_k), eye]).expand(*batch, d_v + d_k, d_k)  # [0; I]
    summary_method = "auto" if method == "triton" else method
    keys, rates = k.to(dtype), beta.to(dtype)
    if q.shape[-2] == 0:  # the identity map, from k and v so that backward reaches the exchange
        after = start + widened.mT @ keys
    else:
        gates = None if g is None else g.to(dtype)
        _, after = _delta(
            keys,
            keys,
            widened,
            rates,
            gates,
            method=summary_method,
            initial_state=start.contiguous(),
        )
    shift, transition = after[..., :d_v, :], after[..., d_v:, :]  # [U_r; M_r]
    prefix, final = PassState.apply(shift, transition, group, True)
    prefix, final = prefix.to(q.dtype), final.to(q.dtype)
    if q.shape[-2] == 0:  # empty, but computed from the state so that backward reaches it
        return q @ prefix.mT, final
    o, _ = _delta(q, k, v, beta, g, method=method, initial_state=prefix)
    return o, final


def _delta(q, k, v, beta, g, **options):
    """`delta_rule`, or `gated_delta_rule` when log-gates g are given."""
    if g is None:
        return delta_rule(q, k, v, beta, **options)
    return gated_delta_rule(q, k, v, beta, g, **options)


def _group(fn, group):
    """The process group to use; a clear error where torch.distributed is not set up."""
    if not dist.is_available() or not dist.is_initialized():
        raise ValueError(
            f"{fn}: torch.distributed is not initialized; call "
            "torch.distributed.init_process_group first (python -m linattn_core.parallel "
            "shows how)"
        )
    return dist.group.WORLD if group is None else group


def _local_error(checks):
    """The exception this rank's input checks raise, or None: raised only after every rank
    has learned of it (`exchange.agree`)."""
    try:
        checks()
    except (TypeError, ValueError) as error:
        return error
    return None


def _agree(fn, group, error, inputs, *, flag):
    """`exchange.agree` on the dtype, batch dimensions, d and d_v of `inputs` (q, k, v, …),
    a named flag and whether gradients are needed; with a local `error`, on nothing but it."""
    if error is not None:
        agree(fn, group, error=error, dtype=None, batch=(), sizes=dict.fromkeys("abcd", 0))
    q, v = inputs[0], inputs[2]
    needs_grad = torch.is_grad_enabled() and any(x.requires_grad for x in inputs)
    name, value = flag
    sizes = {"d": q.shape[-1], "d_v": v.shape[-1], name: int(value)}
    sizes["need for gradients"] = int(needs_grad)
    agree(fn, group, error=None, dtype=q.dtype, batch=q.shape[:-2], sizes=sizes)


def _check_beta(fn, name, x, q):
    """beta or g `(..., N)`: one number per token of q, of q's dtype and device."""
    check_tensor(fn, name, x, min_rank=1)
    if x.shape != q.shape[:-1]:
        raise ValueError(
            f"{fn}: {name} must have shape q.shape[:-1] = (..., N); "
            f"got q.shape={tuple(q.shape)}, {name}.shape={tuple(x.shape)}"
        )
    check_same_dtype_and_device(fn, "q", q, **{name: x})
