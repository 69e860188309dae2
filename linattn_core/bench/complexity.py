"""Time and memory of attention methods against the sequence length N, with a guard.

For each N in increasing order, the methods that fit are timed together, interleaved
(`linattn_core.bench.timing.median_times`: a burst of background load hits all of them alike), and
then the peak memory of each is measured alone (`memory.memory_probe`). A point runs only if the
guard (`memory.skip_reason`) lets it: its estimated peak memory fits the budget and its estimated
time fits `max_seconds`; otherwise its record says why it was skipped, and carries null figures.
The time estimate extrapolates the method's last measured time (at first, a quick calibration
call at a small N) with its exponent: t(N) = t(N₀) (N / N₀)^p.
"""

import contextlib
import math
import warnings

import torch
from tqdm.auto import tqdm

from linattn_core.bench import memory
from linattn_core.bench.methods import METHODS, estimate_peak_bytes, parse_method, record_name
from linattn_core.bench.timing import loglog_slope, median_times
from linattn_core.validation import check_positive_int, check_positive_number

RECORD_KEYS = ("method", "n", "d", "device", "median_ms", "peak_bytes", "skipped")
CALIBRATION_N = 512
WARMUP = 1


def default_methods(device):
    """Every method that runs on `device`: on the CPU, all but the Triton kernels (which run
    there only in the interpreter, for tests: their times mean nothing; name `linear_triton` or
    `delta_triton` to include one anyway)."""
    on_cuda = torch.device(device).type == "cuda"
    return [name for name, method in METHODS.items() if on_cuda or not method.needs_cuda]


def complexity(
    methods=None,
    ns=None,
    *,
    d=64,
    device="cpu",
    causal=True,
    dtype=torch.float32,
    repeats=5,
    max_seconds=30,
    memory_budget=None,
    measure_memory=True,
    progress=False,
):
    """Median time and peak memory of each method at each sequence length, as records.

    Each record is a dict with the keys
        method      the method's name, with '_causal' appended for causal attention;
        n, d        the sequence length and feature dimension (inputs `(1, 1, n, d)`, d_v = d);
        device      "cpu" or "cuda";
        median_ms   median wall time of one call in milliseconds (`repeats` interleaved rounds
                    after one warm-up round), or None when skipped;
        peak_bytes  peak memory one call adds to its inputs (its working set, output included),
                    or None when skipped or not measured. CPU: the high-water mark of resident
                    memory in a fresh process per point (`memory.py`); CUDA:
                    torch.cuda.max_memory_allocated;
        skipped     None, or why the point did not run: "needs ~X GB > budget Y GB" (estimated
                    peak memory, `estimate_peak_bytes`) or "needs ~X s > max_seconds Y s"
                    (estimated time of the warm-up and measured rounds).

    Args:
        methods: names from `METHODS` (each may end in '_causal'); None: `default_methods`.
        ns: sequence lengths; None means powers of two from 256 to 4096.
        d: feature dimension.
        device: "cpu" or "cuda".
        causal: causal attention for every method (names ending in '_causal' are causal anyway).
        dtype: the inputs' dtype.
        repeats: measured rounds per point (positive int).
        max_seconds: skip a point whose estimated time for one method exceeds this.
        memory_budget: bytes a point may use; None means half the memory available now.
        measure_memory: measure peak memory (on the CPU, a fresh process per point).
        progress: show a progress bar.

    Returns:
        list of records, by increasing n, then in the order of `methods`.

    >>> records = complexity(["linear_chunked", "softmax_naive"], [256, 2**24], repeats=1,
    ...                      memory_budget=2**30, measure_memory=False)
    >>> for r in records:
    ...     print(r["method"], r["n"], r["median_ms"] is not None, r["skipped"])
    linear_chunked_causal 256 True None
    softmax_naive_causal 256 True None
    linear_chunked_causal 16777216 False needs ~25.9 GB > budget 1.07 GB
    softmax_naive_causal 16777216 False needs ~5.49e+06 GB > budget 1.07 GB
    """
    fn = "complexity"
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{fn}: device={str(device)!r}, but CUDA is not available here")
    names = default_methods(device) if methods is None else list(methods)
    specs = {}  # record name -> (method, causal), in order, without repeats
    for method, suffix_causal in map(parse_method, names):
        spec = (method, suffix_causal or causal)
        specs.setdefault(record_name(spec[0].name, spec[1]), spec)
    specs = list(specs.values())
    ns = [2**p for p in range(8, 13)] if ns is None else list(ns)
    if not ns:
        raise ValueError(f"{fn}: ns must hold at least one sequence length; got ns={ns!r}")
    for i, n in enumerate(ns):
        check_positive_int(fn, f"ns[{i}]", n)
    ns = sorted(set(ns))
    check_positive_int(fn, "d", d)
    check_positive_int(fn, "repeats", repeats)
    check_positive_number(fn, "max_seconds", max_seconds)
    budget = memory.memory_budget(device) if memory_budget is None else memory_budget
    check_positive_number(fn, "memory_budget", budget)
    _check_devices(specs, device)

    last_timing = {}  # record name -> (n, seconds per call): the base of the time estimates
    records = []
    with contextlib.ExitStack() as context:
        total = len(ns) * len(specs)
        bar = context.enter_context(
            tqdm(total=total, desc="complexity", disable=not progress, leave=False)
        )
        probe = context.enter_context(memory.memory_probe(device)) if measure_memory else None
        for method, method_causal in specs:
            _calibrate(method, method_causal, ns[0], d, device, dtype, budget, last_timing)
        for n in ns:
            fits, skipped = {}, {}
            for method, method_causal in specs:
                name = record_name(method.name, method_causal)
                needed = estimate_peak_bytes(
                    method.name, n, d, causal=method_causal, dtype=dtype, device=device
                )
                seconds = _estimated_seconds(method, name, n, repeats, last_timing)
                reason = memory.skip_reason(
                    needed, budget, seconds=seconds, max_seconds=max_seconds
                )
                if reason is None:
                    fits[name] = (method, method_causal)
                else:
                    skipped[name] = reason
            times, peaks = _measure_point(fits, n, d, device, dtype, repeats, probe, last_timing)
            for method, method_causal in specs:
                name = record_name(method.name, method_causal)
                seconds = times.get(name)
                records.append(
                    {
                        "method": name,
                        "n": n,
                        "d": d,
                        "device": device.type,
                        "median_ms": None if seconds is None else 1e3 * seconds,
                        "peak_bytes": peaks.get(name),
                        "skipped": skipped.get(name),
                    }
                )
                bar.update()
    return records


def _measure_point(fits, n, d, device, dtype, repeats, probe, last_timing):
    """Interleaved median times of the methods that fit at `n`, then their peak memory."""
    if not fits:
        return {}, {}
    q, k, v = memory.make_inputs(n, d, dtype=dtype, device=device)
    functions = {
        name: _bind(method.run, q, k, v, method_causal)
        for name, (method, method_causal) in fits.items()
    }
    with torch.inference_mode():
        times = median_times(functions, repeats=repeats, warmup=WARMUP, device=device)
    del q, k, v, functions
    last_timing.update({name: (n, seconds) for name, seconds in times.items()})
    if probe is None:
        return times, {}
    peaks = {}
    for name, (method, method_causal) in fits.items():
        peak, how = probe.measure(method.name, n, d, causal=method_causal, dtype=dtype)
        if how == "ru_maxrss":
            warnings.warn(
                "complexity: /proc/self/clear_refs is not writable here; peak memory is "
                "ru_maxrss minus the resident size before the call, which misses a call's "
                "peak below the import's",
                stacklevel=3,
            )
        peaks[name] = peak
    return times, peaks


def _bind(run, q, k, v, causal):
    return lambda: run(q, k, v, causal)


def _calibrate(method, causal, first_n, d, device, dtype, budget, last_timing):
    """Time one call at a small N, the first base of the time estimates."""
    n = min(first_n, CALIBRATION_N)
    name = record_name(method.name, causal)
    needed = estimate_peak_bytes(method.name, n, d, causal=causal, dtype=dtype, device=device)
    if memory.skip_reason(needed, budget):
        return
    q, k, v = memory.make_inputs(n, d, dtype=dtype, device=device)
    with torch.inference_mode():
        function = {name: _bind(method.run, q, k, v, causal)}
        seconds = median_times(function, repeats=1, warmup=1, device=device)[name]
    last_timing[name] = (n, seconds)


def _estimated_seconds(method, name, n, repeats, last_timing):
    """The time of the warm-up and measured rounds at `n`, extrapolated from the last measured
    time with the method's exponent; None before any measurement."""
    if name not in last_timing:
        return None
    base_n, base_seconds = last_timing[name]
    return (WARMUP + repeats) * base_seconds * (n / base_n) ** method.time_exponent


def _check_devices(specs, device):
    for method, _ in specs:
        if method.needs_cuda and device.type != "cuda":
            from linattn_core.kernels import INTERPRETED

            if not INTERPRETED:
                raise ValueError(
                    f"complexity: {method.name} runs on the CPU only in the Triton interpreter "
                    "(TRITON_INTERPRET=1 set before the first import of linattn_core.kernels); "
                    f"got device={device.type!r} without it"
                )


def slopes(records, *, key="median_ms", ns=None):
    """Log-log slope of `key` against n for each method, over the points that ran.

    Args:
        records: as returned by `complexity`.
        key: "median_ms" or "peak_bytes".
        ns: restrict the fit to these n (None: all measured points).

    Returns:
        dict method -> slope (methods with fewer than two measured points are left out).

    >>> records = [{"method": "m", "n": n, "median_ms": n**2 / 1e6} for n in (256, 512, 1024)]
    >>> round(slopes(records)["m"], 6)
    2.0
    """
    points = {}
    for record in records:
        value = record.get(key)
        if value is None or value <= 0 or (ns is not None and record["n"] not in ns):
            continue
        points.setdefault(record["method"], []).append((record["n"], value))
    return {
        method: loglog_slope([n for n, _ in xy], [value for _, value in xy])
        for method, xy in points.items()
        if len({n for n, _ in xy}) >= 2
    }


def powers_of_two(min_n, max_n):
    """The powers of two in [min_n, max_n]: 256, 512, ... (min_n rounded up to one)."""
    check_positive_int("powers_of_two", "min_n", min_n)
    check_positive_int("powers_of_two", "max_n", max_n)
    first = math.ceil(math.log2(min_n))
    return [2**p for p in range(first, int(math.log2(max_n)) + 1) if 2**p <= max_n]
