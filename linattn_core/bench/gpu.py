"""Causal attention on a GPU, side by side on the same inputs: our Triton kernel, our torch
chunked form, naive softmax, SDPA with each backend pinned, and FLA's `chunk_linear_attn` when
the optional `fla` package is installed (never a runtime dependency).

Each row is one (shape, method, mode) with mode "fwd" or "fwd+bwd":
    median_ms          `triton.testing.do_bench` median (warm-up excluded, L2 flushed per run);
    tflops             flops / time, with `linattn_core.costs.flop_count` (softmax methods
                       count the attention products; linear methods those of the chunked form);
    gbps               minimum traffic / time (`linattn_core.costs.traffic_bytes`);
    bandwidth_fraction gbps over the device-to-device copy bandwidth measured in the same run;
    compute_fraction   tflops over a large bfloat16 matmul measured in the same run;
    roofline_fraction  the larger of the two: the roofline time bound over the measured time;
    peak_bytes         torch.cuda.max_memory_allocated during one call, beyond the inputs;
    vs_sdpa_best       the fastest pinned SDPA backend's time over this row's (> 1: faster);
    vs_fla             FLA's time over this row's (> 1: faster);
    skipped            None, or why the row did not run (memory guard, backend unavailable).
"""

import inspect

import torch
from tqdm.auto import tqdm

from linattn_core.attention import linear_attention
from linattn_core.bench.memory import cuda_peak_bytes, memory_budget, skip_reason
from linattn_core.bench.methods import METHODS
from linattn_core.bench.provenance import provenance
from linattn_core.costs import FORMULAS, flop_count, traffic_bytes

SDPA_BACKENDS = {  # name -> torch.nn.attention.SDPBackend member
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
    "math": "MATH",
}
MODES = ("fwd", "fwd+bwd")


def default_shapes():
    """The crossover sweep (B·H = 16, N = 1k…64k, d ∈ {64, 128}) and the fixed-token shapes
    (B·N = 16k, H·d = 2048)."""
    shapes = []
    for d in (64, 128):
        for log_n in range(10, 17):
            shapes.append({"sweep": "crossover", "B": 1, "H": 16, "N": 2**log_n, "d": d})
    for d in (64, 128):
        for batch in (1, 4, 16):
            shapes.append(
                {"sweep": "tokens", "B": batch, "H": 2048 // d, "N": 16384 // batch, "d": d}
            )
    return shapes


def gpu_benchmark(
    *, shapes=None, modes=MODES, dtype=torch.bfloat16, device="cuda", progress=False, timer=None
):
    """Benchmark causal attention methods on a CUDA device; return rows, roofline and provenance.

    Args:
        shapes: dicts with keys B, H, N, d (and a "sweep" label); None: `default_shapes()`.
        modes: a subset of ("fwd", "fwd+bwd").
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
    roofline = _roofline(device, dtype, timer)
    methods = _comparison_methods()
    budget = memory_budget(device)
    rows = []
    total = len(shapes) * len(modes) * len(methods)
    with tqdm(total=total, desc="gpu", disable=not progress, leave=False) as bar:
        for shape in shapes:
            for mode in modes:
                group = []
                for name, (kind, make) in methods.items():
                    group.append(_row(name, kind, make, shape, mode, dtype, device, budget, timer))
                    bar.update()
                _add_ratios(group)
                for row in group:
                    _add_rates(row, shape, roofline, dtype)
                rows.extend(group)
    return {
        "provenance": provenance(device),
        "roofline": roofline,
        "formulas": FORMULAS,
        "rows": rows,
    }


def _comparison_methods():
    """name -> (kind, make), kind "softmax" or "linear" (which FLOP count of `flop_count`).

    make(q, k, v) returns (forward, leaves): a zero-argument causal forward call and the tensors
    that collect its gradients; or a string saying why the method cannot run here. The methods
    of the benchmark registry (`METHODS`) where they are the same, and the comparison's own
    variants: the kernels unnormalized (as FLA's), SDPA with each backend pinned, and FLA.
    """

    def registered(name, backend=None):
        def make(q, k, v):
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
        def make(q, k, v):
            options = {"causal": True, "normalize": False, "method": method}
            return (lambda: linear_attention(q, k, v, **options)), (q, k, v)

        return make

    methods = {
        "linear_triton": ("linear", unnormalized("triton")),
        "linear_triton_normalized": ("linear", registered("linear_triton")),
        "linear_chunked": ("linear", unnormalized("chunked")),
        "fla_chunk_linear_attn": ("linear", _fla),
        "softmax_naive": ("softmax", registered("softmax_naive")),
    }
    for backend in SDPA_BACKENDS:
        methods[f"sdpa_{backend}"] = ("softmax", registered("sdpa", backend))
    return methods


def _fla(q, k, v):
    """FLA's chunk_linear_attn, unnormalized and unscaled like linear_triton, on (B, N, H, d)."""
    try:
        from fla.ops.linear_attn import chunk_linear_attn
    except ImportError:
        return "fla is not installed (pip install flash-linear-attention)"
    except Exception as error:  # an fla built for another torch or triton fails in many ways
        return f"fla does not import here: {type(error).__name__}: {error}"
    parameters = inspect.signature(chunk_linear_attn).parameters
    options = {"scale": 1.0, "normalize": False}
    if "head_first" in parameters:
        options["head_first"] = False
    # FLA's own layout, prepared outside the timed call; these copies collect the gradients
    q, k, v = (
        x.detach().transpose(1, 2).contiguous().requires_grad_(x.requires_grad) for x in (q, k, v)
    )
    return (lambda: chunk_linear_attn(q, k, v, **options)[0]), (q, k, v)


def _row(name, kind, make, shape, mode, dtype, device, budget, timer):
    row = {**shape, "method": name, "kind": kind, "mode": mode}
    row["dtype"] = str(dtype).removeprefix("torch.")
    row.update(median_ms=None, peak_bytes=None, skipped=None)
    row["skipped"] = skip_reason(_estimate_bytes(name, shape, mode, dtype), budget)
    if row["skipped"]:
        return row
    backward = mode == "fwd+bwd"
    generator = torch.Generator(device=device).manual_seed(0)
    b, h, n, d = shape["B"], shape["H"], shape["N"], shape["d"]
    q, k, v = (
        torch.rand(b, h, n, d, generator=generator, device=device).to(dtype) for _ in range(3)
    )  # (B, H, N, d) each, positive features
    q, k, v = (x.requires_grad_(backward) for x in (q, k, v))
    try:
        made = make(q, k, v)
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
    fla = times.get("fla_chunk_linear_attn")
    for row in group:
        ms = row["median_ms"]
        row["vs_sdpa_best"] = sdpa_best / ms if ms and sdpa_best else None
        row["vs_fla"] = fla / ms if ms and fla else None


def _add_rates(row, shape, roofline, dtype):
    """tflops, gbps and the roofline fractions of a row that ran."""
    flops = flop_count(shape, row["mode"], row["kind"])
    traffic = traffic_bytes(shape, row["mode"], dtype)
    ms = row["median_ms"]
    row["tflops"] = flops / ms / 1e9 if ms else None
    row["gbps"] = traffic / ms / 1e6 if ms else None
    bandwidth = row["gbps"] / roofline["copy_gbps"] if ms else None
    compute = row["tflops"] / roofline["matmul_tflops"] if ms else None
    row["bandwidth_fraction"], row["compute_fraction"] = bandwidth, compute
    row["roofline_fraction"] = max(bandwidth, compute) if ms else None


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
    from linattn_core.timing import median_times

    def timer(fn, grad_to_none):
        return 1e3 * median_times({"fn": fn}, repeats=3, device=device)["fn"]

    return timer
