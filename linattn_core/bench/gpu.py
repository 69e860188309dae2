"""Causal attention on a GPU, side by side on the same inputs, for two operations:

    linear  causal linear attention: our Triton kernels (unnormalized like FLA's, and normalized),
            our torch chunked form, FLA's `chunk_linear_attn`, naive softmax, and SDPA with each
            backend pinned (softmax attention, the O(N²) baseline);
    delta   the delta rule (DeltaNet): our Triton kernels and FLA's `chunk_delta_rule`;
    gated   the gated delta rule (Gated DeltaNet): ours and FLA's `chunk_gated_delta_rule`.

FLA runs when the optional `fla` package (fla-core) is installed; it is never a dependency.

Each row is one (op, shape, method, mode) with mode "fwd" or "fwd+bwd":
    median_ms          `triton.testing.do_bench` median (warm-up excluded, L2 flushed per run);
    tflops             flops / time, with `linattn_core.costs.flop_count` (softmax methods
                       count the attention products; linear methods those of the chunked form;
                       None for the delta rule);
    gbps               minimum traffic / time (`linattn_core.costs.traffic_bytes`; linear only);
    bandwidth_fraction gbps over the device-to-device copy bandwidth measured in the same run;
    compute_fraction   tflops over a large bfloat16 matmul measured in the same run;
    roofline_fraction  the larger of the two: the roofline time bound over the measured time;
    peak_bytes         torch.cuda.max_memory_allocated during one call, beyond the inputs;
    vs_sdpa_best       the fastest pinned SDPA backend's time over this row's (> 1: faster);
    vs_fla             FLA's time for the same op over this row's (> 1: faster);
    skipped            None, or why the row did not run (memory guard, backend unavailable).
"""

import dataclasses
import inspect
from collections.abc import Callable

import torch
from tqdm.auto import tqdm

from linattn_core.attention import linear_attention
from linattn_core.bench.memory import cuda_peak_bytes, memory_budget, skip_reason
from linattn_core.bench.methods import METHODS
from linattn_core.costs import FORMULAS, flop_count, traffic_bytes
from linattn_core.delta import delta_rule
from linattn_core.gated import gated_delta_rule
from linattn_core.provenance import provenance

SDPA_BACKENDS = {  # name -> torch.nn.attention.SDPBackend member
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
    "math": "MATH",
}
MODES = ("fwd", "fwd+bwd")
OURS = {"linear": "linear_triton", "delta": "delta_triton", "gated": "gated_triton"}
FLA = {
    "linear": "fla_chunk_linear_attn",
    "delta": "fla_chunk_delta_rule",
    "gated": "fla_chunk_gated_delta_rule",
}


@dataclasses.dataclass(frozen=True)
class Compared:
    """A method of the comparison: its operation, its FLOP count's kind (None: not counted) and
    `make(inputs)`, which returns (forward, leaves) — a zero-argument call and the tensors that
    collect its gradients — or a string saying why the method cannot run here."""

    op: str
    kind: str | None
    make: Callable


def default_shapes():
    """The crossover sweep (B·H = 16, N = 1k…64k, d ∈ {64, 128}), the fixed-token shapes
    (B·N = 16k, H·d = 2048), the delta rule's sweep (B·H = 16, N = 1k…64k, d = 64) and the
    gated delta rule's (B·H = 16, N = 1k…64k, d ∈ {64, 128})."""
    shapes = []
    for d in (64, 128):
        for log_n in range(10, 17):
            shapes.append({"sweep": "crossover", "B": 1, "H": 16, "N": 2**log_n, "d": d})
    for d in (64, 128):
        for batch in (1, 4, 16):
            shapes.append(
                {"sweep": "tokens", "B": batch, "H": 2048 // d, "N": 16384 // batch, "d": d}
            )
    for log_n in range(10, 17):
        shapes.append({"sweep": "delta", "op": "delta", "B": 1, "H": 16, "N": 2**log_n, "d": 64})
    for d in (64, 128):
        for log_n in range(10, 17):
            shapes.append({"sweep": "gated", "op": "gated", "B": 1, "H": 16, "N": 2**log_n, "d": d})
    return shapes


def gpu_benchmark(
    *,
    shapes=None,
    modes=MODES,
    methods=None,
    dtype=torch.bfloat16,
    device="cuda",
    progress=False,
    timer=None,
):
    """Benchmark causal attention methods on a CUDA device; return rows, roofline and provenance.

    Args:
        shapes: dicts with keys B, H, N, d, "op" ("linear" when absent) and a "sweep" label;
            None: `default_shapes()`.
        modes: a subset of ("fwd", "fwd+bwd").
        methods: names of `compared_methods()` to run (each on the shapes of its op); None: all.
        dtype: the inputs' dtype (bfloat16 for the book's numbers).
        device: a CUDA device. A CPU device runs the same code with wall-clock medians, to test
            the harness; its numbers mean nothing.
        progress: show a progress bar.
        timer: function(fn, grad_to_none) -> median ms; None: do_bench on CUDA.

    Returns:
        {"provenance", "roofline", "formulas", "rows"}; see the module docstring for the rows.
    """
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("gpu_benchmark: needs a CUDA device; torch.cuda.is_available() is False")
    timer = timer or (_do_bench if device.type == "cuda" else _wall_clock(device))
    shapes = default_shapes() if shapes is None else shapes
    compared = compared_methods()
    unknown = set(methods or ()) - set(compared)
    if unknown:
        raise ValueError(
            f"gpu_benchmark: unknown methods {sorted(unknown)}; known: {list(compared)}"
        )
    compared = {name: m for name, m in compared.items() if methods is None or name in methods}
    roofline = _roofline(device, dtype, timer)
    budget = memory_budget(device)
    work = [
        (
            shape,
            mode,
            [(name, m) for name, m in compared.items() if m.op == shape.get("op", "linear")],
        )
        for shape in shapes
        for mode in modes
    ]
    rows = []
    with tqdm(total=sum(len(group) for *_, group in work), desc="gpu", disable=not progress) as bar:
        for shape, mode, group in work:
            measured = []
            for name, method in group:
                measured.append(_row(name, method, shape, mode, dtype, device, budget, timer))
                bar.update()
            _add_ratios(measured)
            for row in measured:
                _add_rates(row, shape, roofline, dtype)
            rows.extend(measured)
    return {
        "provenance": provenance(device),
        "roofline": roofline,
        "formulas": FORMULAS,
        "rows": rows,
    }


def compared_methods():
    """name -> Compared: the methods of the benchmark registry (`METHODS`) where they are the
    same, and the comparison's own: the kernels unnormalized (as FLA's), SDPA with each backend
    pinned, the delta rule, and FLA."""

    def registered(name, backend=None):
        def make(inputs):
            q, k, v = inputs
            run = METHODS[name].run
            if backend is None:
                return (lambda: run(q, k, v, True)), (q, k, v)
            from torch.nn.attention import SDPBackend, sdpa_kernel

            def forward():
                with sdpa_kernel(getattr(SDPBackend, SDPA_BACKENDS[backend])):
                    return run(q, k, v, True)

            return forward, (q, k, v)

        return make

    def unnormalized(method):
        def make(inputs):
            q, k, v = inputs
            options = {"causal": True, "normalize": False, "method": method}
            return (lambda: linear_attention(q, k, v, **options)), (q, k, v)

        return make

    def delta(inputs):
        q, k, v, beta = inputs
        return (lambda: delta_rule(q, k, v, beta, method="triton")[0]), (q, k, v, beta)

    def gated(inputs):
        return (lambda: gated_delta_rule(*inputs, method="triton")[0]), inputs

    methods = {
        "linear_triton": Compared("linear", "linear", unnormalized("triton")),
        "linear_triton_normalized": Compared("linear", "linear", registered("linear_triton")),
        "linear_chunked": Compared("linear", "linear", unnormalized("chunked")),
        FLA["linear"]: Compared("linear", "linear", _fla_linear),
        "softmax_naive": Compared("linear", "softmax", registered("softmax_naive")),
    }
    for backend in SDPA_BACKENDS:
        methods[f"sdpa_{backend}"] = Compared("linear", "softmax", registered("sdpa", backend))
    methods[OURS["delta"]] = Compared("delta", None, delta)
    methods[FLA["delta"]] = Compared("delta", None, _fla_delta)
    methods[OURS["gated"]] = Compared("gated", None, gated)
    methods[FLA["gated"]] = Compared("gated", None, _fla_gated)
    return methods


def _fla_linear(inputs):
    """FLA's chunk_linear_attn, unnormalized and unscaled like linear_triton, on (B, N, H, d)."""
    fla = _import_fla("linear_attn", "chunk_linear_attn")
    if isinstance(fla, str):
        return fla
    options = {"scale": 1.0, "normalize": False}
    if "head_first" in inspect.signature(fla).parameters:
        options["head_first"] = False
    leaves = _fla_layout(inputs)
    return (lambda: fla(*leaves, **options)[0]), leaves


def _fla_delta(inputs):
    """FLA's chunk_delta_rule with q unscaled like ours, on (B, N, H, d) and β (B, N, H)."""
    fla = _import_fla("delta_rule", "chunk_delta_rule")
    if isinstance(fla, str):
        return fla
    options = {"scale": 1.0}
    if "head_first" in inspect.signature(fla).parameters:
        options["head_first"] = False
    leaves = _fla_layout(inputs)
    return (lambda: fla(*leaves, **options)[0]), leaves


def _fla_gated(inputs):
    """FLA's chunk_gated_delta_rule with q unscaled like ours, on (B, N, H, d), β and the
    log-gates g (B, N, H), which it takes in the order (q, k, v, g, β)."""
    fla = _import_fla("gated_delta_rule", "chunk_gated_delta_rule")
    if isinstance(fla, str):
        return fla
    q, k, v, beta, g = _fla_layout(inputs)
    return (lambda: fla(q, k, v, g, beta, scale=1.0)[0]), (q, k, v, beta, g)


def _import_fla(module, name):
    try:
        return getattr(__import__(f"fla.ops.{module}", fromlist=[name]), name)
    except ImportError:
        return "fla is not installed (pip install fla-core)"
    except Exception as error:  # an fla built for another torch or triton fails in many ways
        return f"fla does not import here: {type(error).__name__}: {error}"


def _fla_layout(inputs):
    """FLA's layout (B, N, H, ·), prepared outside the timed call; these copies collect the
    gradients."""
    return tuple(
        x.detach().transpose(1, 2).contiguous().requires_grad_(x.requires_grad) for x in inputs
    )


def make_inputs(op, shape, dtype, device, *, requires_grad=False, seed=0):
    """A row's inputs `(B, H, N, d)`: for linear attention q, k, v uniform in [0, 1) (positive
    features); for the delta rule DeltaNet's — q scaled by 1/√d, unit keys, v standard normal and
    β uniform in [0, 1) `(B, H, N)`; for the gated delta rule those and log-gates g uniform in
    [−0.5, 0) `(B, H, N)`, as `linattn_core.gated.gated_deltanet_inputs` draws them."""
    generator = torch.Generator(device=device).manual_seed(seed)
    b, h, n, d = shape["B"], shape["H"], shape["N"], shape["d"]

    def draw(fill, *size):
        return fill(*size, generator=generator, device=device)

    if op == "linear":
        inputs = [draw(torch.rand, b, h, n, d) for _ in range(3)]
    else:
        q, k, v = (draw(torch.randn, b, h, n, d) for _ in range(3))
        inputs = [q / d**0.5, k / k.norm(dim=-1, keepdim=True), v, draw(torch.rand, b, h, n)]
        if op == "gated":
            inputs.append(-0.5 * draw(torch.rand, b, h, n))
    return tuple(x.to(dtype).requires_grad_(requires_grad) for x in inputs)


def _row(name, method, shape, mode, dtype, device, budget, timer):
    row = {**shape, "op": method.op, "method": name, "kind": method.kind, "mode": mode}
    row["dtype"] = str(dtype).removeprefix("torch.")
    row.update(median_ms=None, peak_bytes=None, skipped=None)
    row["skipped"] = skip_reason(_estimate_bytes(name, shape, mode, dtype), budget)
    if row["skipped"]:
        return row
    backward = mode == "fwd+bwd"
    inputs = make_inputs(method.op, shape, dtype, device, requires_grad=backward)
    try:
        made = method.make(inputs)
        if isinstance(made, str):
            row["skipped"] = made
            return row
        forward, leaves = made
        grad_out = torch.randn_like(forward()) if backward else None

        def step():
            out = forward()
            if backward:
                out.backward(grad_out)

        row["median_ms"] = timer(step, list(leaves) if backward else None)
        for leaf in leaves:
            leaf.grad = None  # the measured call allocates its gradients afresh
        row["peak_bytes"] = cuda_peak_bytes(step, device) if device.type == "cuda" else None
    # a backend that refuses these inputs, a kernel that fails to compile, memory that runs
    # out: the row says why, and the benchmark goes on
    except Exception as error:
        first_line = (str(error).splitlines() or [""])[0]
        row["skipped"] = f"{type(error).__name__}: {first_line[:200]}"
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return row


def _estimate_bytes(name, shape, mode, dtype):
    """The row's peak memory estimate for the guard: N×N matrices for naive and math softmax,
    linear in N otherwise; float32 scores, several alive, four times more with autograd."""
    b, h, n, d = shape["B"], shape["H"], shape["N"], shape["d"]
    itemsize = torch.empty((), dtype=dtype).element_size()
    linear = 16 * b * h * n * d * itemsize + 2**28
    if name not in ("softmax_naive", "sdpa_math"):
        return linear
    quadratic = 3 * b * h * n * n * 4
    return linear + (4 if mode == "fwd+bwd" else 1) * quadratic


def _add_ratios(group):
    """vs_sdpa_best and vs_fla of each row: the reference's time over the row's."""
    times = {row["method"]: row["median_ms"] for row in group}
    sdpa = [times[f"sdpa_{backend}"] for backend in SDPA_BACKENDS if times.get(f"sdpa_{backend}")]
    sdpa_best = min(sdpa) if sdpa else None
    for row in group:
        ms, fla = row["median_ms"], times.get(FLA[row["op"]])
        row["vs_sdpa_best"] = sdpa_best / ms if ms and sdpa_best else None
        row["vs_fla"] = fla / ms if ms and fla else None


def _add_rates(row, shape, roofline, dtype):
    """tflops, gbps and the roofline fractions of a row that ran (linear attention and softmax)."""
    ms = row["median_ms"]
    if not ms or row["kind"] is None:
        row.update(tflops=None, gbps=None, bandwidth_fraction=None, compute_fraction=None)
        row["roofline_fraction"] = None
        return
    row["tflops"] = flop_count(shape, row["mode"], row["kind"]) / ms / 1e9
    row["gbps"] = traffic_bytes(shape, row["mode"], dtype) / ms / 1e6
    row["bandwidth_fraction"] = row["gbps"] / roofline["copy_gbps"]
    row["compute_fraction"] = row["tflops"] / roofline["matmul_tflops"]
    row["roofline_fraction"] = max(row["bandwidth_fraction"], row["compute_fraction"])


def _roofline(device, dtype, timer):
    """Device copy bandwidth (GB/s, bytes read + written) and bfloat16 matmul TFLOP/s."""
    copy_elements = 2**28 if device.type == "cuda" else 2**22
    source = torch.empty(copy_elements, dtype=dtype, device=device).fill_(1)
    target = torch.empty_like(source)
    copy_ms = timer(lambda: target.copy_(source), None)
    size = 8192 if device.type == "cuda" else 512
    a = torch.randn(size, size, device=device).to(torch.bfloat16)
    b = torch.randn(size, size, device=device).to(torch.bfloat16)
    matmul_ms = timer(lambda: a @ b, None)
    return {
        "copy_bytes": 2 * source.numel() * source.element_size(),
        "copy_gbps": 2 * source.numel() * source.element_size() / copy_ms / 1e6,
        "matmul_size": size,
        "matmul_tflops": 2 * size**3 / matmul_ms / 1e9,
    }


def _do_bench(fn, grad_to_none):
    from triton.testing import do_bench

    return do_bench(fn, grad_to_none=grad_to_none, return_mode="median")


def _wall_clock(device):
    from linattn_core.bench.timing import median_times

    def timer(fn, grad_to_none):
        return 1e3 * median_times({"fn": fn}, repeats=3, device=device)["fn"]

    return timer
