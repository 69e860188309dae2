"""Benchmarks: how time and memory of attention grow with N, on the CPU and on GPUs.

- `complexity`: median time and peak memory of each method over sequence lengths, with a memory
  and time guard, as records (the data of the book's scaling plots);
- `METHODS`: the one registry of methods (name, callable, time exponent, memory estimate);
  `parse_method` and `record_name` read and write the '_causal' suffix of the records' names;
- `estimate_peak_bytes`: the estimate of one call's peak memory that the guard checks;
- `gpu_benchmark`: our Triton kernels against torch, SDPA's backends and FLA on a CUDA device,
  linear attention and the delta rule (`gpu_check` runs it with the checks, `make gpu-check`);
- `tile_sweep`: the kernels timed under other tiles on a CUDA device, the measurements behind
  `kernels/tiles.py` (`python -m linattn_core.bench.tile_sweep`);
- `load_gpu_results`: the committed GPU measurements of a folder, with the measured and the
  predicted crossover length of each comparison;
- `plot_complexity`: time and memory against N on log-log axes, with fitted slopes (the one
  plotter, `linattn_core.bench.plot.loglog_panel`, also draws the explorers' and the chapter's).

The command line (`python -m linattn_core.bench --help`) runs the same functions and writes JSON
with a provenance header: {"provenance": {...}, "records": [...]}.
"""

from linattn_core.bench.complexity import RECORD_KEYS, complexity, default_methods, slopes
from linattn_core.bench.methods import METHODS, estimate_peak_bytes, parse_method, record_name
from linattn_core.provenance import provenance

__all__ = [
    "METHODS",
    "RECORD_KEYS",
    "complexity",
    "default_methods",
    "estimate_peak_bytes",
    "gpu_benchmark",
    "load_gpu_results",
    "parse_method",
    "plot_complexity",
    "provenance",
    "record_name",
    "slopes",
]


def __getattr__(name):
    # matplotlib and the GPU code load only when used
    if name == "plot_complexity":
        from linattn_core.bench.plot import plot_complexity

        return plot_complexity
    if name == "gpu_benchmark":
        from linattn_core.bench.gpu import gpu_benchmark

        return gpu_benchmark
    if name == "load_gpu_results":
        from linattn_core.bench.results import load_gpu_results

        return load_gpu_results
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
