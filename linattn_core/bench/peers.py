"""Causal linear attention on the CPU against the peer libraries: time and peak memory.

    python -m linattn_core.bench peers [--ns 1024 4096 16384] [--threads 1 2] [--json PATH]

Run it with the Python of the peers' environment, which `make peers` builds in `.peers/` (the
peers are never dependencies of linattn_core; a peer that does not import is reported and left
out). The problem is the one a reader's laptop runs: B = 1, H = 8, d = d_v = 64, float32, causal,
normalized, the features elu(x) + 1 computed outside the timed call. Every implementation:

    ours               linattn_core.linear_attention(..., causal=True), its default method
    fast_transformers  pytorch-fast-transformers 0.4.0: the C++ CPU `causal_dot_product` for the
                       numerator, the denominator as its `CausalLinearAttention` forms it
    fla_naive          fla-core 0.6.0 `naive_chunk_linear_attn` (read from its file: importing
                       `fla.ops` imports triton)
    performer          performer-pytorch 1.1.4 `causal_linear_attention_noncuda`
    sdpa               torch's `scaled_dot_product_attention`, causal softmax: the quadratic
                       method all of them replace (not an exact peer)

First every output and gradient is checked against a float64 reference (ours, "parallel"), at
N = 1024. Then, per thread count: the forward pass and the forward and backward pass, timed
round-robin (every implementation once per round, medians over the rounds); the peak memory one
call adds, each in a fresh process (as `bench.memory`); and the time of the first call at each N
in a fresh process with glibc's default allocator against the warm median (an allocator that
returns large blocks to the system page-faults them again on every call).
"""

import functools
import importlib.metadata
import importlib.util
import os
import time

import torch
import torch.nn.functional as F

from linattn_core.bench.fresh import run_fresh
from linattn_core.bench.memory import MMAP_THRESHOLD, resident_peak_growth
from linattn_core.bench.timing import median_times
from linattn_core.testing import relative_error

HEADS, D, EPS = 8, 64, 1e-6
CHECK_N = 1024


def ours(q, k, v):
    from linattn_core.attention import linear_attention

    return linear_attention(q, k, v, causal=True, eps=EPS)


def fast_transformers(q, k, v):
    from fast_transformers.causal_product import causal_dot_product

    rden = 1 / ((q * k.cumsum(dim=-2)).sum(dim=-1) + EPS)  # (B, H, N)
    return causal_dot_product(q, k, v) * rden[..., None]


def fla_naive(q, k, v):
    naive = _fla_naive_module()
    out = naive.naive_chunk_linear_attn(
        *(x.transpose(1, 2) for x in (q, k, v)), scale=1.0, normalize=True
    )
    return out.transpose(1, 2)  # its layout is (B, N, H, d)


def performer(q, k, v):
    from performer_pytorch.performer_pytorch import causal_linear_attention_noncuda

    return causal_linear_attention_noncuda(q, k, v, eps=EPS)


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


IMPLEMENTATIONS = {
    "ours": (ours, "linattn-core"),
    "fast_transformers": (fast_transformers, "pytorch-fast-transformers"),
    "fla_naive": (fla_naive, "fla-core"),
    "performer": (performer, "performer-pytorch"),
    "sdpa": (sdpa, "torch"),
}
EXACT = ("ours", "fast_transformers", "fla_naive", "performer")  # linear attention itself


def _fla_naive_module():
    spec = importlib.util.find_spec("fla")
    if spec is None:
        raise ImportError("fla-core is not installed")
    path = os.path.join(os.path.dirname(spec.origin), "ops", "linear_attn", "naive.py")
    module_spec = importlib.util.spec_from_file_location("fla_linear_attn_naive", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def inputs(n, *, seed=0, grad=False):
    """φ(q), φ(k), v `(1, H, n, d)` float32: elu + 1 features, computed here, outside any timing."""
    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, HEADS, n, D, generator=generator) for _ in range(3))
    q, k = F.elu(q) + 1, F.elu(k) + 1
    return tuple(x.requires_grad_(grad) for x in (q, k, v))


def available():
    """{name: version} of the implementations that import here, and {name: error} of the rest."""
    found, missing = {}, {}
    for name, (function, package) in IMPLEMENTATIONS.items():
        try:
            function(*inputs(64))
            found[name] = _version(package)
        except Exception as error:  # a peer that is absent or broken is a finding, not a crash
            missing[name] = f"{type(error).__name__}: {error}"
    return found, missing


def _version(package):
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "source tree"


def agreement(names):
    """{name: {"output": e, "grad_q": …, "grad_k": …, "grad_v": …}}: relative errors against a
    float64 reference at N = CHECK_N (SDPA, a different function, is not compared)."""
    from linattn_core.attention import linear_attention

    reference_inputs = tuple(x.double().requires_grad_() for x in inputs(CHECK_N))
    reference = linear_attention(*reference_inputs, causal=True, eps=EPS, method="parallel")
    grad_out = torch.randn(reference.shape, generator=torch.Generator().manual_seed(1))
    reference_grads = torch.autograd.grad(reference, reference_inputs, grad_out.double())
    errors = {}
    for name in names:
        if name not in EXACT:
            continue
        args = inputs(CHECK_N, grad=True)
        out = IMPLEMENTATIONS[name][0](*args)
        grads = torch.autograd.grad(out, args, grad_out)
        errors[name] = {"output": relative_error(out, reference)} | {
            f"grad_{x}": relative_error(g, r)
            for x, g, r in zip("qkv", grads, reference_grads, strict=True)
        }
    return errors


def call(function, args, backward):
    """One timed unit: the forward pass, or the forward and backward pass."""
    if not backward:
        with torch.no_grad():
            return function(*args)
    out = function(*args)
    out.backward(torch.ones_like(out))
    for x in args:
        x.grad = None
    return out


def round_robin(names, n, *, backward, rounds, max_seconds):
    """{name: median seconds} at N = n, every implementation once per round (`median_times`);
    an implementation whose first call takes longer than `max_seconds` is timed once
    ("single": True)."""
    args = {name: inputs(n, grad=backward) for name in names}
    calls = {
        name: functools.partial(call, IMPLEMENTATIONS[name][0], args[name], backward)
        for name in names
    }
    first = {}
    for name in names:  # the first call: warms caches and thread pools, and guards the time
        start = time.perf_counter()
        calls[name]()
        first[name] = time.perf_counter() - start
    slow = {name for name in names if first[name] > max_seconds}
    timed = median_times(
        {name: calls[name] for name in names if name not in slow}, repeats=rounds, warmup=0
    )
    return {
        name: {"seconds": first[name] if name in slow else timed[name], "single": name in slow}
        for name in names
    }


def measure_once(name, n, backward, threads, measure):
    """One implementation's call in this process, which must be fresh (`fresh_process`): "memory"
    (the peak bytes it adds, `resident_peak_growth`) or "first" (the first call's time and the
    median of three warm calls after it)."""
    torch.set_num_threads(threads)
    function = IMPLEMENTATIONS[name][0]
    call(function, inputs(256, grad=backward), backward)  # thread pools and library buffers
    args = inputs(n, grad=backward)
    if measure == "memory":
        peak, _, _ = resident_peak_growth(lambda: call(function, args, backward))
        return {"peak_bytes": peak}
    start = time.perf_counter()
    call(function, args, backward)
    result = {"first_seconds": time.perf_counter() - start}
    warm = []
    for _ in range(3):
        start = time.perf_counter()
        call(function, args, backward)
        warm.append(time.perf_counter() - start)
    return result | {"warm_seconds": sorted(warm)[1]}


def fresh_process(name, n, *, backward, threads, measure):
    """`measure_once` in a new process: for "memory" with a fixed mmap threshold, so that
    resident memory follows the live tensors; for "first" with the default allocator."""
    env = dict(os.environ)
    if measure == "memory":
        env["MALLOC_MMAP_THRESHOLD_"] = str(MMAP_THRESHOLD)
    else:
        env.pop("MALLOC_MMAP_THRESHOLD_", None)
    request = {"name": name, "n": n, "backward": backward, "threads": threads, "measure": measure}
    return run_fresh(measure_once, env=env, **request)


def run(ns, threads, *, rounds=5, max_seconds=20.0, progress=print):
    """The whole comparison as a dict: implementations, agreement and one record per
    (threads, pass, implementation, N)."""
    found, missing = available()
    names = list(found)
    result = {"implementations": found, "missing": missing, "agreement": agreement(names)}
    records = []
    for thread_count in threads:
        torch.set_num_threads(thread_count)
        for backward in (False, True):
            step = "fwd+bwd" if backward else "fwd"
            for n in ns:
                progress(f"{thread_count} thread(s), {step}, N = {n}")
                timed = round_robin(
                    names, n, backward=backward, rounds=rounds, max_seconds=max_seconds
                )
                for name in names:
                    record = {"threads": thread_count, "pass": step, "name": name, "n": n}
                    record |= {
                        "median_ms": 1e3 * timed[name]["seconds"],
                        "single": timed[name]["single"],
                    }
                    if thread_count == threads[0]:
                        memory = fresh_process(
                            name, n, backward=backward, threads=1, measure="memory"
                        )
                        record["peak_bytes"] = memory["peak_bytes"]
                    if n == max(ns) and not timed[name]["single"]:
                        first = fresh_process(
                            name, n, backward=backward, threads=thread_count, measure="first"
                        )
                        record |= {
                            "first_ms": 1e3 * first["first_seconds"],
                            "warm_ms": 1e3 * first["warm_seconds"],
                        }
                    records.append(record)
    result["records"] = records
    return result


def ratios(records, *, key="median_ms", to="ours"):
    """{(threads, pass, n): {name: value / ours}}: each implementation against ours."""
    table = {}
    for r in records:
        table.setdefault((r["threads"], r["pass"], r["n"]), {})[r["name"]] = r.get(key)
    return {
        point: {name: value / row[to] for name, value in row.items() if value is not None}
        for point, row in table.items()
        if row.get(to)
    }
