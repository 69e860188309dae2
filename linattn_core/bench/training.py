"""One training step — forward, loss = output.sum(), backward — timed three ways: eagerly, replayed
from a CUDA graph, and compiled by `torch.compile(fullgraph=True)` (`make gpu-check`'s
`training_step` rows).

A row is `{"op", "N", "B", "H", "d", "method", "mode", "ms", "error"}`: op "linear_attention"
(ours unnormalized, as FLA's `chunk_linear_attn`), "delta_rule", "gated_delta_rule" (log-gates
uniform in [−0.5, 0), as the gated chapter draws them; FLA's `chunk_gated_delta_rule`) or
"softmax" (SDPA, causal, the baseline); method "ours", "fla" or "sdpa"; mode "eager", "graph"
(the step captured once in a `torch.cuda.CUDAGraph`, then replayed; its gradients must equal the
eager step's) or "compiled" (the forward pass and the loss compiled, the backward pass by
AOTAutograd); ms the median time of a step, with steps queued back to back as in a training
loop, so that a step bound by the host shows the host's time; error None, or why the row has no
time ("skipped: …" when it did not run).
"""

import inspect
import time

import torch
import torch.nn.functional as F

from linattn_core.attention import linear_attention
from linattn_core.bench.gpu import make_inputs
from linattn_core.delta import delta_rule
from linattn_core.gated import gated_delta_rule

OPS = ("linear_attention", "delta_rule", "gated_delta_rule", "softmax")
METHODS = {op: ("ours", "fla") for op in OPS[:3]} | {"softmax": ("sdpa",)}
MODES = ("eager", "graph", "compiled")
INPUTS = {"linear_attention": "linear", "delta_rule": "delta", "gated_delta_rule": "gated"}
FLA = {  # op: (module of fla.ops, function)
    "linear_attention": ("linear_attn", "chunk_linear_attn"),
    "delta_rule": ("delta_rule", "chunk_delta_rule"),
    "gated_delta_rule": ("gated_delta_rule", "chunk_gated_delta_rule"),
}


def forward_of(op, method):
    """(forward(*leaves) → output, layout of the leaves: "heads" `(B, H, N, d)` or "fla"
    `(B, N, H, d)`), or a string saying why the method does not run here."""
    if method == "sdpa":
        return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)), "heads"
    if method == "ours" and op == "linear_attention":
        options = {"causal": True, "normalize": False, "method": "triton"}
        return (lambda q, k, v: linear_attention(q, k, v, **options)), "heads"
    if method == "ours" and op == "delta_rule":
        return (lambda q, k, v, beta: delta_rule(q, k, v, beta, method="triton")[0]), "heads"
    if method == "ours":
        return (lambda *leaves: gated_delta_rule(*leaves, method="triton")[0]), "heads"
    module, name = FLA[op]
    try:
        fla = getattr(__import__(f"fla.ops.{module}", fromlist=[name]), name)
    except ImportError:
        return "skipped: fla is not installed (pip install fla-core)"
    except Exception as error:  # an fla built for another torch or triton fails in many ways
        return f"skipped: fla does not import here: {type(error).__name__}: {error}"
    options = {"scale": 1.0} | ({"normalize": False} if op == "linear_attention" else {})
    if "head_first" in inspect.signature(fla).parameters:
        options["head_first"] = False
    if op == "gated_delta_rule":  # FLA takes (q, k, v, g, β)
        return (lambda q, k, v, beta, g: fla(q, k, v, g, beta, **options)[0]), "fla"
    return (lambda *leaves: fla(*leaves, **options)[0]), "fla"


def step_of(forward, leaves):
    """A training step: the loss output.sum() of `forward(*leaves)` and its gradients."""

    def step():
        return torch.autograd.grad(forward(*leaves).sum(), leaves)

    return step


def timed_ms(step, device, *, steps, rounds):
    """Median milliseconds of one `step()` over `rounds` rounds of `steps` steps queued back to
    back (CUDA events on a GPU, the wall clock on the CPU)."""
    times = []
    for _ in range(rounds):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(steps):
                step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / steps)
        else:
            begin = time.perf_counter()
            for _ in range(steps):
                step()
            times.append((time.perf_counter() - begin) * 1e3 / steps)
    return sorted(times)[len(times) // 2]


def captured(step, device, *, warmup=3):
    """The step captured in a CUDA graph after `warmup` steps on a side stream: (replay, the
    gradients the replays write)."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            step()
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        grads = step()
    return graph.replay, grads


def training_row(op, method, mode, shape, dtype, device, *, steps=20, rounds=5, backend=None):
    """One row of the module's docstring (`backend`: torch.compile's, None for its default)."""
    row = {"op": op, **{key: shape[key] for key in ("N", "B", "H", "d")}}
    row |= {"method": method, "mode": mode, "ms": None, "error": None}
    if mode == "graph" and device.type != "cuda":
        return row | {"error": "skipped: no CUDA (CUDA graphs need a GPU)"}
    made = forward_of(op, method)
    if isinstance(made, str):
        return row | {"error": made}
    forward, layout = made
    inputs = make_inputs(INPUTS.get(op, "linear"), shape, dtype, device)
    if layout == "fla":
        inputs = tuple(x.transpose(1, 2).contiguous() for x in inputs)
    leaves = tuple(x.requires_grad_() for x in inputs)
    try:
        if mode == "compiled":
            forward = torch.compile(forward, fullgraph=True, backend=backend or "inductor")
        step = step_of(forward, leaves)
        expected = step()  # compiles when compiled
        if mode == "graph":
            replay, grads = captured(step, device)
            replay()
            error = max(_relative(g, e) for g, e in zip(grads, expected, strict=True))
            if not error <= 1e-2:  # the replay must compute the eager step's gradients
                return row | {"error": f"replayed gradients differ: relative error {error:.2e}"}
            step = replay
        row["ms"] = timed_ms(step, device, steps=steps, rounds=rounds)
    except Exception as failure:  # a compile or capture that fails here: the row says why
        first_line = (str(failure).strip().splitlines() or [""])[0]
        row["error"] = f"{type(failure).__name__}: {first_line[:300]}"
    finally:
        if mode == "compiled":
            torch._dynamo.reset()
    return row


def _relative(actual, expected):
    actual, expected = actual.double(), expected.double()
    return float((actual - expected).norm() / expected.norm().clamp_min(1e-30))


# a compiled row starts only with this much of the budget left (FLA's compiles trace its kernels)
COMPILE_SECONDS = {"ours": 20, "sdpa": 20, "fla": 60}


def training_step(shapes, dtype, device, *, seconds, compiled_shapes=(), backend=None, **timing):
    """The rows of `shapes` (dicts with N, B, H, d) in eager and graph mode and those of
    `compiled_shapes` compiled, each op's methods in turn, within about `seconds`, most wanted
    first: ours and SDPA's rows of every shape, eager and graph, then compiled; FLA's (its first
    call at each shape compiles and tunes its kernels, tens of seconds), FLA compiled last (its
    compiles cost the most). A row that would start past the budget (a compiled one, with
    less than its COMPILE_SECONDS left) is "skipped: time budget"."""
    deadline = time.perf_counter() + seconds
    methods = [(op, method) for op in OPS for method in METHODS[op]]

    def rows_of(shapes, modes, wanted):
        return [
            (shape, mode, op, method)
            for shape in shapes
            for mode in modes
            for op, method in methods
            if wanted(method)
        ]

    def ours(method):
        return method != "fla"

    def fla(method):
        return method == "fla"

    plan = rows_of(shapes, ("eager", "graph"), ours)
    plan += rows_of(compiled_shapes, ("compiled",), ours)
    plan += rows_of(shapes, ("eager", "graph"), fla)  # each shape's first call tunes FLA's kernels
    plan += rows_of(compiled_shapes, ("compiled",), fla)
    rows = []
    for shape, mode, op, method in plan:
        left = deadline - time.perf_counter()
        if left > (COMPILE_SECONDS[method] if mode == "compiled" else 0):
            rows.append(
                training_row(op, method, mode, shape, dtype, device, backend=backend, **timing)
            )
            continue
        row = {"op": op, **{key: shape[key] for key in ("N", "B", "H", "d")}}
        rows.append(
            row
            | {"method": method, "mode": mode, "ms": None}
            | {"error": f"skipped: time budget ({seconds:g} s) spent"}
        )
    return rows


def training_line(row):
    """One line for the terminal."""
    shape = f"N={row['N']:<5} B={row['B']:<2} H={row['H']:<3} d={row['d']:<4}"
    ms = f"{row['ms']:.3f} ms" if row["ms"] is not None else row["error"]
    return f"{row['op']:<17}{row['method']:<5}{row['mode']:<9}{shape} {ms}"
