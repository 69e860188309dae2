"""Command line of the benchmarks: `python -m linattn_core.bench {complexity,plot,gpu,peers,auto}`.

    complexity  time and memory of each method over N = powers of two in [--min-n, --max-n]
    plot        a results file as time and memory against N, log-log, with fitted slopes
    gpu         the Triton kernels against torch, SDPA's backends and FLA on a CUDA device
                (linear attention and the delta rule)
    peers       causal linear attention on the CPU against the peer libraries (`bench.peers`)
    auto        parallel against chunked on the CPU over N and d: what method="auto" runs

Results are JSON: {"provenance": {...}, "settings": {...}, "records": [...]} for complexity
(records as documented in `linattn_core.bench.complexity`), {"provenance", "roofline",
"formulas", "rows"} for gpu.
"""

import argparse
import json
import sys

import torch

from linattn_core.bench.complexity import complexity, powers_of_two, slopes
from linattn_core.bench.methods import METHODS
from linattn_core.provenance import provenance
from linattn_core.validation import check_positive_int

DTYPES = ("float32", "bfloat16", "float16", "float64")


def main(argv=None):
    parser = _parser()
    arguments = parser.parse_args(argv)
    try:
        arguments.command_function(arguments)
    except ValueError as error:
        parser.exit(2, f"linattn_core.bench {arguments.command}: {error}\n")


def _parser():
    parser = argparse.ArgumentParser(
        prog="python -m linattn_core.bench",
        description="Benchmarks of linear and softmax attention.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("complexity", help="time and memory against N")
    run.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    run.add_argument("--d", type=int, default=64, help="feature dimension (d_v = d)")
    run.add_argument("--min-n", type=int, default=256)
    run.add_argument("--max-n", type=int, required=True)
    run.add_argument(
        "--methods",
        help=f"comma-separated, from {', '.join(METHODS)} (optional '_causal' suffix); "
        "default: all that run on the device",
    )
    run.add_argument("--causal", action="store_true", help="causal attention for every method")
    run.add_argument("--dtype", choices=DTYPES, default="float32")
    run.add_argument("--repeats", type=int, default=5, help="measured rounds per point")
    run.add_argument(
        "--max-seconds", type=float, default=30, help="skip points estimated to take longer"
    )
    run.add_argument(
        "--memory-budget-gb", type=float, help="default: half the memory available now"
    )
    run.add_argument("--threads", type=int, help="torch CPU threads (default: torch's own choice)")
    run.add_argument("--no-memory", action="store_true", help="skip the memory measurements")
    run.add_argument("--no-progress", action="store_true")
    run.add_argument("--json", required=True, help="output file")
    run.set_defaults(command_function=_complexity)

    plot = commands.add_parser("plot", help="plot a complexity results file")
    plot.add_argument("results", help="JSON written by the complexity command")
    plot.add_argument("--out", required=True, help="image file (PNG, SVG, ...)")
    plot.set_defaults(command_function=_plot)

    gpu = commands.add_parser("gpu", help="Triton kernel vs torch, SDPA and FLA on a GPU")
    gpu.add_argument("--json", required=True, help="output file")
    gpu.add_argument("--modes", default="fwd,fwd+bwd", help="comma-separated: fwd, fwd+bwd")
    gpu.add_argument(
        "--sweeps",
        default="crossover,tokens,delta",
        help="comma-separated: crossover, tokens (linear attention), delta (the delta rule)",
    )
    gpu.add_argument("--no-progress", action="store_true")
    gpu.set_defaults(command_function=_gpu)

    peers = commands.add_parser("peers", help="CPU linear attention against peer libraries")
    peers.add_argument("--ns", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    peers.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    peers.add_argument("--rounds", type=int, default=5, help="timed rounds per point")
    peers.add_argument(
        "--max-seconds", type=float, default=20, help="time a slower first call only once"
    )
    peers.add_argument("--json", required=True, help="output file")
    peers.set_defaults(command_function=_peers)

    auto = commands.add_parser("auto", help='what method="auto" runs on a CPU, measured')
    auto.add_argument("--json", required=True, help="output file")
    auto.set_defaults(command_function=_auto)
    return parser


def _complexity(arguments):
    methods = arguments.methods.split(",") if arguments.methods else None
    ns = powers_of_two(arguments.min_n, arguments.max_n)
    if not ns:
        raise ValueError(f"no power of two in [{arguments.min_n}, {arguments.max_n}]")
    budget = arguments.memory_budget_gb
    settings = {
        "d": arguments.d,
        "dtype": arguments.dtype,
        "causal": arguments.causal,
        "repeats": arguments.repeats,
        "max_seconds": arguments.max_seconds,
        "memory_budget_bytes": None if budget is None else int(budget * 1e9),
        "inputs": "q, k, v of shape (1, 1, N, d), uniform in [0, 1)",
        "methods": {name: method.description for name, method in METHODS.items()},
        "median_ms": "median wall time of one call over interleaved rounds, after one warm-up",
        "peak_bytes": (
            "peak memory one call adds to its inputs: on the CPU a fresh process per point, "
            "VmHWM after a reset minus VmRSS before the call; on CUDA max_memory_allocated"
        ),
    }
    if arguments.threads is not None:
        check_positive_int("complexity", "--threads", arguments.threads)
        torch.set_num_threads(arguments.threads)
    header = provenance(arguments.device)
    records = complexity(
        methods,
        ns,
        d=arguments.d,
        device=arguments.device,
        causal=arguments.causal,
        dtype=getattr(torch, arguments.dtype),
        repeats=arguments.repeats,
        max_seconds=arguments.max_seconds,
        memory_budget=settings["memory_budget_bytes"],
        measure_memory=not arguments.no_memory,
        progress=not arguments.no_progress,
    )
    header["cpu_pressure_avg10_end"] = provenance(arguments.device)["cpu_pressure_avg10"]
    _write(arguments.json, {"provenance": header, "settings": settings, "records": records})
    for key in ("median_ms", "peak_bytes"):
        fitted = ", ".join(f"{m} {s:.2f}" for m, s in slopes(records, key=key).items())
        print(f"log-log slopes of {key}: {fitted or 'fewer than two points'}")
    print(f"wrote {len(records)} records to {arguments.json}")


def _plot(arguments):
    from linattn_core.bench.plot import plot_file

    plot_file(arguments.results, arguments.out)
    print(f"wrote {arguments.out}")


def _gpu(arguments):
    if not torch.cuda.is_available():
        sys.exit(
            "linattn_core.bench gpu: needs a CUDA device, and torch.cuda.is_available() is False "
            f"here (torch {torch.__version__}). Run it on a machine with an NVIDIA GPU and the "
            "CUDA build of torch."
        )
    from linattn_core.bench.gpu import MODES, default_shapes, gpu_benchmark

    sweeps, modes = arguments.sweeps.split(","), tuple(arguments.modes.split(","))
    known_sweeps = {shape["sweep"] for shape in default_shapes()}
    if not set(sweeps) <= known_sweeps or not set(modes) <= set(MODES):
        raise ValueError(
            f"--sweeps must be among {', '.join(sorted(known_sweeps))} and --modes among "
            f"{', '.join(MODES)}; got --sweeps={arguments.sweeps} --modes={arguments.modes}"
        )
    shapes = [shape for shape in default_shapes() if shape["sweep"] in sweeps]
    results = gpu_benchmark(shapes=shapes, modes=modes, progress=not arguments.no_progress)
    _write(arguments.json, results)
    print(f"wrote {len(results['rows'])} rows to {arguments.json}")


def _peers(arguments):
    from linattn_core.bench.peers import run

    for value in (*arguments.ns, *arguments.threads, arguments.rounds):
        check_positive_int("peers", "--ns, --threads and --rounds", value)
    header = provenance("cpu")
    results = run(
        arguments.ns, arguments.threads, rounds=arguments.rounds, max_seconds=arguments.max_seconds
    )
    header["cpu_pressure_avg10_end"] = provenance("cpu")["cpu_pressure_avg10"]
    _write(arguments.json, {"provenance": header} | results)
    print(f"wrote {len(results['records'])} records to {arguments.json}")
    if results["missing"]:
        print("left out: " + "; ".join(f"{k} ({v})" for k, v in results["missing"].items()))


def _auto(arguments):
    from linattn_core.bench.auto import measure

    header = provenance("cpu")
    records = measure()
    header["cpu_pressure_avg10_end"] = provenance("cpu")["cpu_pressure_avg10"]
    _write(arguments.json, {"provenance": header, "records": records})
    print(f"wrote {len(records)} records to {arguments.json}")


def _write(path, data):
    with open(path, "w") as file:
        json.dump(data, file, indent=1)
        file.write("\n")


if __name__ == "__main__":
    main()
