"""Wall-clock timing that survives a noisy machine: warm-up, medians, interleaving, slopes.

Shared machines inflate single timings many times over, so the book never trusts one: it
takes the median of several runs, interleaves the functions it compares (so a burst of
background load hits all of them alike), and judges scaling by the slope of log(time) against
log(N) measured in one run, not by absolute times.
"""

import math
import time

import torch

from linattn_core.validation import check_non_negative_int, check_positive_int


def _synchronize(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def median_times(functions, *, repeats=5, warmup=1, device="cpu"):
    """Median wall time in seconds of each zero-argument function, measured interleaved.

    Round r runs every function once, in order, for `warmup` unmeasured rounds and then
    `repeats` measured ones; CUDA work is synchronized before each clock reading.

    Args:
        functions: dict name -> zero-argument callable.
        repeats: measured rounds (positive int).
        warmup: unmeasured rounds first (non-negative int).
        device: where the work runs ("cpu" or a CUDA device), for synchronization.

    Returns:
        dict name -> median seconds.

    >>> numbers = list(range(1000))
    >>> times = median_times({"sum": lambda: sum(numbers), "sort": lambda: sorted(numbers)})
    >>> sorted(times), all(t > 0 for t in times.values())
    (['sort', 'sum'], True)
    """
    check_positive_int("median_times", "repeats", repeats)
    check_non_negative_int("median_times", "warmup", warmup)
    samples = {name: [] for name in functions}
    for round_ in range(warmup + repeats):
        for name, function in functions.items():
            _synchronize(device)
            start = time.perf_counter()
            function()
            _synchronize(device)
            if round_ >= warmup:
                samples[name].append(time.perf_counter() - start)
    return {name: sorted(s)[len(s) // 2] for name, s in samples.items()}


def loglog_slope(sizes, values):
    """Least-squares slope of log(values) against log(sizes): the empirical exponent.

    A cost that grows like N^p has slope p: about 1 for linear, 2 for quadratic work.

    >>> ns = [256, 512, 1024, 2048]
    >>> round(loglog_slope(ns, [3 * n**2 for n in ns]), 6)
    2.0
    """
    if len(sizes) != len(values) or len(sizes) < 2:
        raise ValueError(
            "loglog_slope: sizes and values must have the same length, at least 2; "
            f"got {len(sizes)} sizes and {len(values)} values"
        )
    if min(sizes) <= 0 or min(values) <= 0:
        raise ValueError("loglog_slope: sizes and values must be positive")
    xs, ys = [math.log(s) for s in sizes], [math.log(v) for v in values]
    x_mean, y_mean = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - x_mean) ** 2 for x in xs)
    if spread == 0:
        raise ValueError("loglog_slope: sizes must not all be equal")
    return sum((x - x_mean) * (y - y_mean) for x, y in zip(xs, ys, strict=True)) / spread
