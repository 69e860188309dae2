"""Each rank's check against one process: the demo's and the tests' one comparison.

Every rank draws the whole sequence from the same seed, keeps its shard, runs the context
parallel operation forward and backward, and compares its output shard, the final state and
its inputs' gradients with the single-process computation of the same loss, which it also runs.
"""

import time

import torch
import torch.distributed as dist

from linattn_core.attention import linear_attention
from linattn_core.delta import delta_rule, deltanet_inputs
from linattn_core.gated import gated_delta_rule, gated_deltanet_inputs
from linattn_core.parallel.context import (
    context_parallel_delta_rule,
    context_parallel_linear_attention,
)
from linattn_core.parallel.exchange import bytes_per_rank, count_bytes
from linattn_core.testing import random_qkv, relative_error

__all__ = ["compare", "inputs", "measure", "mismatch", "one_process_seconds", "timed"]


def inputs(case):
    """The whole sequence's inputs of a case, and the weights of the loss.

    A case is a dict: kind ("linear", "delta" or "gated"), lengths (tokens per rank), batch (tuple),
    d, d_v, dtype, seed; for "linear" also normalize; method (this rank's), and reference
    (the single-process method). The loss is Σ o ⊙ W plus, for the delta rule,
    Σ_r ⟨S, W_r⟩ (rank r adds its own term).
    """
    n, batch, dtype = sum(case["lengths"]), case["batch"], case["dtype"]
    if case["kind"] == "linear":
        q, k, v = random_qkv(
            *batch, n=n, d=case["d"], d_v=case["d_v"], positive=True, seed=case["seed"]
        )
        tensors = (q, k, v)
    elif case["kind"] == "delta":
        tensors = deltanet_inputs(*batch, n=n, d_k=case["d"], d_v=case["d_v"], seed=case["seed"])
        tensors = tensors[:4]
    else:
        sizes = {"n": n, "d_k": case["d"], "d_v": case["d_v"], "seed": case["seed"]}
        tensors = gated_deltanet_inputs(*batch, **sizes, gate=(-2.0, 0.0))[:5]
    draw = {"generator": torch.Generator().manual_seed(case["seed"] + 1), "dtype": torch.float64}
    weights = torch.randn(*batch, n, case["d_v"], **draw)
    state_weights = torch.randn(len(case["lengths"]), *batch, case["d_v"], case["d"], **draw)
    return [x.to(dtype) for x in (*tensors, weights, state_weights)]


ARITY = {"linear": 3, "delta": 4, "gated": 5}  # the differentiable inputs: q, k, v, beta, g


def compare(rank, world_size, cases):
    """For each case: this rank's relative errors against one process (outputs, final state,
    each input's gradient), the bytes it passed to the collectives and the predicted bytes."""
    results = []
    for case in cases:
        tensors = inputs(case)
        arity = ARITY[case["kind"]]
        full = [x.clone().requires_grad_() for x in tensors[:arity]]
        reference = _forward(case, full, tensors[arity:], case["reference"], rank=None)
        expected = torch.autograd.grad(reference["loss"], full)
        rows = _shard(case, rank)
        local = [rows(x).requires_grad_() for x in tensors[:arity]]
        weights = [rows(tensors[arity]), tensors[arity + 1]]
        with count_bytes() as sent:
            mine = _forward(case, local, weights, case["method"], rank=rank)
            grads = torch.autograd.grad(mine["loss"], local, materialize_grads=True)
        errors = {"output": relative_error(mine["out"], rows(reference["out"]))}
        if "state" in mine:
            errors["state"] = relative_error(mine["state"], reference["state"])
        names = ("q", "k", "v", "beta", "g")[:arity]
        for name, grad, whole in zip(names, grads, expected, strict=True):
            errors[f"grad_{name}"] = relative_error(grad, rows(whole))
        predicted = bytes_per_rank(
            batch=case["batch"],
            d_k=case["d"],
            d_v=case["d_v"],
            dtype=case["dtype"],
            delta=case["kind"] != "linear",
            normalize=case.get("normalize", True),
        )
        results.append({"errors": errors, "bytes": dict(sent), "predicted": dict(predicted)})
    return results


def mismatch(rank, world_size, cases):
    """Call the operation with inputs that differ between ranks; returns, per case, the error
    message this rank raised (None if it raised nothing). A case is as in `inputs` (lengths
    left out: 2 tokens per rank), with `per_rank`, a list of each rank's changes to it (keys of
    `inputs`, or method, or grad: whether the inputs require gradients)."""
    messages = []
    for case in cases:
        mine = dict(case, **case["per_rank"][rank])
        tensors = inputs(dict(mine, lengths=[2] * world_size))
        tensors = [x.requires_grad_(mine.get("grad", False)) for x in tensors]
        options = {"method": mine.get("method", "auto")}
        try:
            if mine["kind"] == "linear":
                normalize = mine["normalize"]
                context_parallel_linear_attention(*tensors[:3], normalize=normalize, **options)
            else:
                context_parallel_delta_rule(*tensors[: ARITY[mine["kind"]]], **options)
            messages.append(None)
        except ValueError as error:
            messages.append(str(error))
    return messages


def timed(rank, world_size, case, repeats):
    """Median seconds of this rank's forward and backward pass (ranks start together), after
    one untimed warm-up run."""
    tensors = inputs(case)
    arity = 3 if case["kind"] == "linear" else 4
    rows = _shard(case, rank)
    local = [rows(x).requires_grad_() for x in tensors[:arity]]
    weights = [rows(tensors[arity]), tensors[arity + 1]]
    seconds = []
    for _ in range(repeats + 1):  # the first run warms up, untimed
        dist.barrier()
        start = time.perf_counter()
        loss = _forward(case, local, weights, case["method"], rank=rank)["loss"]
        torch.autograd.grad(loss, local)
        seconds.append(time.perf_counter() - start)
    return _median(seconds[1:])


def measure(rank, world_size, cases, repeats):
    """`compare` for each case, then this rank's median seconds (`timed`) for each case."""
    results = compare(rank, world_size, cases)
    return {"compare": results, "seconds": [timed(rank, world_size, c, repeats) for c in cases]}


def one_process_seconds(case, repeats):
    """Median seconds of the forward and backward pass of a case's whole sequence in this
    process, with the method the ranks use."""
    tensors = inputs(case)
    arity = 3 if case["kind"] == "linear" else 4
    args = [x.requires_grad_() for x in tensors[:arity]]
    seconds = []
    for _ in range(repeats + 1):  # the first run warms up, untimed
        start = time.perf_counter()
        loss = _forward(case, args, tensors[arity:], case["method"], rank=None)["loss"]
        torch.autograd.grad(loss, args)
        seconds.append(time.perf_counter() - start)
    return _median(seconds[1:])


def _forward(case, args, weights, method, *, rank):
    """Output, final state and loss of one process (rank None) or of this rank's shard."""
    out_weights, state_weights = weights
    if case["kind"] == "linear":
        options = {"normalize": case["normalize"], "method": method}
        if rank is None:
            out = linear_attention(*args, causal=True, **options)
        else:
            out = context_parallel_linear_attention(*args, **options)
        return {"out": out, "loss": (out * out_weights).sum()}
    if rank is None:
        rule = delta_rule if case["kind"] == "delta" else gated_delta_rule
        out, state = rule(*args, method=method)
        extra = (state * state_weights.sum(0)).sum()
    else:
        out, state = context_parallel_delta_rule(*args, method=method)
        extra = (state * state_weights[rank]).sum()
    return {"out": out, "state": state, "loss": (out * out_weights).sum() + extra}


def _median(seconds):
    return sorted(seconds)[len(seconds) // 2]


def _shard(case, rank):
    """The function that keeps the tokens of rank's shard of a tensor (the axis after the
    batch dimensions: N of `(..., N, ·)` and of beta `(..., N)`)."""
    start = sum(case["lengths"][:rank])
    index = (slice(None),) * len(case["batch"]) + (slice(start, start + case["lengths"][rank]),)
    return lambda x: x.detach()[index] if x.requires_grad else x[index]
