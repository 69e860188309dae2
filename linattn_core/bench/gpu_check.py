"""`make gpu-check`: what a short loan of a GPU machine must answer, in one command.

    python -m linattn_core.bench.gpu_check --out DIR [--notebooks] [--dry]

It needs torch and triton, and reads FLA (fla-core) when it is importable; no virtual
environment, no internet: run it from a copy of the repository (`PYTHONPATH=.`). In order:

1. compile: every kernel the run launches, compiled in parallel processes into Triton's cache
   (a cold compile costs an H100 machine's CPU 15–20 s per kernel; one at a time, the run
   would spend its budget there);
2. checks: the three operations' kernels (linear attention, the delta rule, the gated delta
   rule) against float64 on the GPU, each kernel in each dtype at least once — ragged N, d 64
   and 128, the output and every gradient (dg included), the delta rules with and without an
   initial state — against `KERNEL_RTOL`;
3. addressing: each operation forward and backward in bfloat16 past 2³¹ elements (B·H = 16,
   d = 128, N = 2²⁰ + 64), its last head against the same call on that head alone
   (`bench.addressing`);
4. host: where the host's time goes in a pass at N = 1024 (`bench.host`);
5. training_step: one training step (forward, loss, backward) of each operation, ours, FLA's
   and SDPA's, eager, replayed from a CUDA graph and compiled by torch.compile, N = 1k and 4k,
   B·H = 16 and the training shapes B = 8, H = 16, d = 64 and 128 (`bench.training`; within
   TRAINING_SECONDS, compiled at N = 1k only);
6. benchmark: ours, FLA's and SDPA's (flash and cuDNN backends), forward and forward+backward,
   bfloat16, B·H = 16, d = 64, N = 1k…64k, each operation, the gated delta rule (against FLA's
   `chunk_gated_delta_rule`) also at d = 128 (`gpu.gpu_benchmark`);
7. with --notebooks: executes chapters/10_scaling.ipynb top to bottom on the GPU (nbclient;
   its Python packages can be carried as wheels, see README) into DIR.

It writes DIR/gpu_check.json — provenance, the checks, the addressing rows, the host's costs, the
training steps, the benchmark's rows and roofline, the seconds each step took — and prints the
checks and a table; it exits with 1 when a check or an addressing row fails.
--dry runs the same code on the CPU through the Triton interpreter at toy sizes: a test of the
command (part of `make test`), whose numbers mean nothing.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "chapters" / "10_scaling.ipynb"

# (op, dtype, d, N, flag): linear attention's flag is `normalize`, the delta rule's an initial state
CHECKS = (
    ("linear", "float32", 64, 1000, True),
    ("linear", "float16", 64, 777, True),
    ("linear", "bfloat16", 128, 4099, True),
    ("linear", "bfloat16", 64, 1000, False),
    ("delta", "float32", 64, 1000, True),
    ("delta", "float16", 64, 777, False),
    ("delta", "bfloat16", 128, 4099, True),
    ("delta", "bfloat16", 64, 1000, False),
    ("gated", "float32", 64, 1000, True),
    ("gated", "float16", 64, 777, False),
    ("gated", "bfloat16", 128, 4099, True),
    ("gated", "bfloat16", 64, 1000, False),
)
DRY_CHECKS = (  # float16 for 16-bit: the interpreter's tl.dot mistreats bfloat16 (triton#11584)
    ("linear", "float32", 32, 100, True),
    ("linear", "float16", 16, 70, False),
    ("delta", "float32", 16, 70, True),
    ("delta", "float16", 16, 37, False),
    ("gated", "float32", 16, 70, True),
    ("gated", "float16", 16, 37, False),
)
TRAINING_SECONDS = 150  # the training steps' share of the check's 6 minutes (compiles included)


def training_shapes(dry):
    """(shapes timed eager and replayed, shapes compiled) of the training steps."""
    if dry:
        toy = [{"N": 64, "B": 1, "H": 2, "d": 16}]
        return toy, toy
    short = [{"N": n, "B": 1, "H": 16, "d": 64} for n in (1024, 4096)]
    training = [{"N": n, "B": 8, "H": 16, "d": d} for d in (64, 128) for n in (1024, 4096)]
    return short + training, short[:1]


BENCH_METHODS = (
    "linear_triton",
    "fla_chunk_linear_attn",
    "sdpa_flash",
    "sdpa_cudnn",
    "delta_triton",
    "fla_chunk_delta_rule",
    "gated_triton",
    "fla_chunk_gated_delta_rule",
)


def bench_shapes(dry):
    """The benchmark's shapes: B·H = 16, N = 1k…64k, d = 64 for each operation and also d = 128
    for the gated delta rule (dry: one chunk of each, in the interpreter)."""
    ns, heads, d = ((64,), 2, 16) if dry else ([2**p for p in range(10, 17)], 16, 64)
    gated_dims = (d,) if dry else (64, 128)
    ops = [("linear", "crossover", d), ("delta", "delta", d)]
    ops += [("gated", "gated", width) for width in gated_dims]
    return [
        {"sweep": sweep, "op": op, "B": 1, "H": heads, "N": n, "d": width}
        for op, sweep, width in ops
        for n in ns
    ]


def compile_kernels(cases, device):
    """Compile every kernel that `cases` and the benchmark launch (`compile_launches`): the
    seconds it took and the number of distinct kernels."""
    from linattn_core.kernels.common import device_arch
    from linattn_core.kernels.tools.launches import DTYPES, delta_rule_launches
    from linattn_core.kernels.tools.launches import linear_attention_launches as linear_launches

    arch = device_arch(device)
    configs = {(op, dtype, d, flag) for op, dtype, d, _, flag in cases}
    ops = ("linear", "delta", "gated")
    configs |= {(op, "bfloat16", d, False) for op in ops for d in (64, 128)}
    launches = []
    for op, dtype, d, flag in sorted(configs):
        if op == "linear":
            found = linear_launches(arch, DTYPES[dtype], d, d, 64, flag)
        else:
            found = delta_rule_launches(arch, DTYPES[dtype], d, d, 64, flag, op == "gated")
        launches += [launch for _, launch in found]
    unique = {_launch_key(launch): launch for launch in launches}
    return compile_launches(unique.values()), len(unique)


def compile_launches(launches):
    """Compile `launches` (`kernels.tools.launches.Launch`) into Triton's cache, one process per
    CPU (at most 16), without running them; the seconds it took."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    unique = list({_launch_key(launch): launch for launch in launches}.values())
    start = time.perf_counter()
    workers = max(1, min(len(unique), os.cpu_count() or 1, 16))
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        list(pool.map(_warm, unique))
    return time.perf_counter() - start


def _launch_key(launch):
    return (launch.name, repr(sorted(launch.kwargs.items())), _signature(launch.args))


def _signature(args):
    return tuple(str(a.dtype) if hasattr(a, "dtype") else type(a).__name__ for a in args)


def _warm(launch):
    """Compile one launch into Triton's cache without running it."""
    args = tuple(a.cuda() if hasattr(a, "cuda") else a for a in launch.args)
    launch.kernel.warmup(*args, grid=(1,), **launch.kwargs)


def run_checks(cases, device):
    """Relative errors of output and gradients against float64 on the same device, per case."""
    import torch

    from linattn_core.testing import KERNEL_RTOL, relative_error

    results = []
    for op, dtype_name, d, n, flag in cases:
        dtype = getattr(torch, dtype_name)
        inputs, names = _check_inputs(op, d, n, flag, device)
        grads = [torch.randn_like(x) for x in _outputs(op, flag, inputs, "chunked")]
        ours = [x.to(dtype) for x in inputs]
        actual = _gradients(op, flag, ours, [g.to(dtype) for g in grads], "triton")
        expected = _gradients(op, flag, inputs, grads, "chunked")
        errors = {
            name: relative_error(a.double(), e)
            for name, a, e in zip(names, actual, expected, strict=True)
        }
        rtol = KERNEL_RTOL[dtype]
        passed = all(error <= rtol for error in errors.values())
        case = {"op": op, "dtype": dtype_name, "d": d, "N": n, "flag": flag, "rtol": rtol}
        results.append(case | {"errors": errors, "passed": passed})
    return results


def _check_inputs(op, d, n, flag, device):
    """float64 inputs `(2, 3, N, d)` and the names of the outputs and gradients checked."""
    import torch

    from linattn_core.delta import deltanet_inputs
    from linattn_core.gated import gated_deltanet_inputs

    if op == "linear":  # from an initial state (S_0, z_0) to the final state (S, z)
        generator = torch.Generator(device=device).manual_seed(n)
        draw = torch.rand if flag else torch.randn  # normalized: positive features
        shapes = [(2, 3, n, d)] * 3 + [(2, 3, d, d)] + ([(2, 3, d)] if flag else [])
        inputs = [
            draw(*shape, generator=generator, device=device, dtype=torch.float64)
            for shape in shapes
        ]
        if flag:
            return inputs, ("o", "S", "z", "dq", "dk", "dv", "dS0", "dz0")
        return inputs, ("o", "S", "dq", "dk", "dv", "dS0")
    if op == "gated":  # log-gates of −0.5 to 0 per token
        *inputs, state = (
            x.to(device) for x in gated_deltanet_inputs(2, 3, n=n, d_k=d, d_v=d, seed=n)
        )
        names = ("o", "S", "dq", "dk", "dv", "dbeta", "dg") + (("dS0",) if flag else ())
        return inputs + ([state] if flag else []), names
    q, k, v, beta, state = (x.to(device) for x in deltanet_inputs(2, 3, n=n, d_k=d, d_v=d, seed=n))
    names = ("o", "S", "dq", "dk", "dv", "dbeta") + (("dS0",) if flag else ())
    return [q, k, v, beta] + ([state] if flag else []), names


def _outputs(op, flag, inputs, method):
    """The operation's outputs by `method` ("triton", or "chunked" for the float64 reference):
    (o, S, z) for linear attention (z when normalized), (o, final state) for the delta rules."""
    from linattn_core.attention import linear_attention
    from linattn_core.delta import delta_rule
    from linattn_core.gated import gated_delta_rule

    if op == "linear":
        initial = (inputs[3], inputs[4] if flag else None)
        o, (s, z) = linear_attention(
            *inputs[:3], causal=True, normalize=flag, method=method, initial_state=initial,
            output_final_state=True,
        )  # fmt: skip
        return (o, s, z) if flag else (o, s)
    if op == "gated":
        initial = inputs[5] if flag else None
        return gated_delta_rule(*inputs[:5], method=method, initial_state=initial)
    initial = inputs[4] if flag else None
    return delta_rule(*inputs[:4], method=method, initial_state=initial)


def _gradients(op, flag, inputs, grads, method):
    """Outputs and the gradients of every input by `method`, for output gradients `grads`."""
    from linattn_core.testing import values_and_gradients

    def run(*leaves):
        return tuple(_outputs(op, flag, list(leaves), method))

    return list(values_and_gradients(run, inputs, grads))


def execute_notebook(out):
    """Execute chapters/10_scaling.ipynb from a fresh kernel into `out`; seconds and error."""
    start = time.perf_counter()
    try:
        import nbformat
        from nbclient import NotebookClient
    except ImportError as error:
        return {"seconds": 0.0, "error": f"nbclient is not importable: {error}"}
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    error = None
    try:
        client.execute()
    except Exception as failure:  # a failing cell: keep the notebook up to it, and say which
        error = f"{type(failure).__name__}: {str(failure)[-2000:]}"
    nbformat.write(notebook, Path(out) / NOTEBOOK.name)
    return {"seconds": time.perf_counter() - start, "error": error}


def check_line(check):
    """One line per check: verdict, case and the relative error of each output and gradient."""
    flag = "normalized" if check["op"] == "linear" else "with S_0"
    case = f"{check['op']:<7}{check['dtype']:<9}d={check['d']:<4}N={check['N']:<5}"
    errors = ", ".join(f"{name} {error:.1e}" for name, error in check["errors"].items())
    verdict = "ok  " if check["passed"] else "FAIL"
    return f"{verdict} {case}{flag if check['flag'] else '':<11}{errors} (rtol {check['rtol']:g})"


def table(rows):
    """Lines of the benchmark table: per op, d, N and mode, the times of ours, FLA's and SDPA's
    fastest backend, the ratios, the peak memory and (forward linear attention) the share of
    the copy bandwidth's roofline."""
    from linattn_core.bench.gpu import FLA, OURS

    lines = [
        f"{'op':<7}{'d':>4}{'N':>7} {'pass':<8}{'ours ms':>9}{'FLA ms':>9}{'SDPA ms':>9}"
        f"{'FLA/ours':>9}{'SDPA/ours':>10}{'MB ours/FLA/SDPA':>20}{'roofline':>9}"
    ]
    groups = {}
    for row in rows:
        groups.setdefault((row["op"], row["d"], row["N"], row["mode"]), {})[row["method"]] = row
    for (op, d, n, mode), group in groups.items():
        ours, fla = group.get(OURS[op], {}), group.get(FLA[op], {})
        sdpa = min(
            (r for name, r in group.items() if name.startswith("sdpa_") and r["median_ms"]),
            key=lambda r: r["median_ms"],
            default={},
        )

        def ms(row):
            return f"{row['median_ms']:.3f}" if row.get("median_ms") else "–"

        def ratio(value):
            return f"{value:.2f}" if value else "–"

        def mb(row):
            return f"{row['peak_bytes'] / 2**20:.0f}" if row.get("peak_bytes") else "–"

        share = ours.get("bandwidth_fraction") if (op, mode) == ("linear", "fwd") else None
        lines.append(
            f"{op:<7}{d:>4}{n:>7} {mode:<8}{ms(ours):>9}{ms(fla):>9}{ms(sdpa):>9}"
            f"{ratio(ours.get('vs_fla')):>9}{ratio(ours.get('vs_sdpa_best')):>10}"
            f"{'/'.join(mb(r) for r in (ours, fla, sdpa)):>20}"
            f"{(f'{100 * share:.0f} %' if share else '–'):>9}"
        )
    return lines


def project_commit():
    """The repository's commit: $LINATTN_COMMIT when set (a copy of the tree may carry a stale
    .git), else git's."""
    if os.environ.get("LINATTN_COMMIT"):
        return os.environ["LINATTN_COMMIT"]
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        )
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m linattn_core.bench.gpu_check", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--out", type=Path, required=True, help="folder for gpu_check.json (and the notebook)"
    )
    parser.add_argument("--notebooks", action="store_true", help="also execute the scaling chapter")
    parser.add_argument(
        "--dry", action="store_true", help="on the CPU, in the Triton interpreter, toy sizes"
    )
    arguments = parser.parse_args(argv)
    if arguments.dry and os.environ.get("TRITON_INTERPRET") != "1":
        # the interpreter must be on before triton's first import, which importing this package
        # may already have done: start again with it on
        command = [sys.executable, "-m", "linattn_core.bench.gpu_check", *sys.argv[1:]]
        os.execve(sys.executable, command, os.environ | {"TRITON_INTERPRET": "1"})
    import torch

    from linattn_core.bench.addressing import addressing, addressing_line
    from linattn_core.bench.gpu import gpu_benchmark
    from linattn_core.bench.host import host_costs, host_line
    from linattn_core.bench.training import training_line, training_step
    from linattn_core.provenance import provenance

    if not arguments.dry and not torch.cuda.is_available():
        parser.exit(2, "gpu_check: needs a CUDA device (or --dry, which runs on the CPU)\n")
    device = torch.device("cpu" if arguments.dry else "cuda")
    cases = DRY_CHECKS if arguments.dry else CHECKS
    dtype = torch.float16 if arguments.dry else torch.bfloat16  # the interpreter's: triton#11584
    arguments.out.mkdir(parents=True, exist_ok=True)
    seconds = {}
    report = {"provenance": provenance(device) | {"project_commit": project_commit()}}
    if not arguments.dry:
        seconds["compile"], report["kernels_compiled"] = compile_kernels(cases, device)
        print(
            f"compiled {report['kernels_compiled']} kernels in {seconds['compile']:.0f} s",
            flush=True,
        )
    path = arguments.out / "gpu_check.json"

    def save():  # after each step: a run cut short keeps what it measured
        report["seconds"] = seconds
        path.write_text(json.dumps(report, indent=1) + "\n")

    start = time.perf_counter()
    report["checks"] = run_checks(cases, device)
    seconds["checks"] = time.perf_counter() - start
    save()
    for check in report["checks"]:
        print(check_line(check), flush=True)
    start = time.perf_counter()
    report["addressing"] = addressing(dtype, device, dry=arguments.dry)
    seconds["addressing"] = time.perf_counter() - start
    save()
    for row in report["addressing"]:
        print(addressing_line(row), flush=True)
    start = time.perf_counter()
    toy = {"n": 64, "heads": 2, "d": 16, "dtype": torch.float16, "calls": 2, "warmup": 1}
    report["host"] = host_costs(device, **(toy if arguments.dry else {}))
    seconds["host"] = time.perf_counter() - start
    save()
    print(host_line(report["host"]), flush=True)
    start = time.perf_counter()
    shapes, compiled_shapes = training_shapes(arguments.dry)
    training = {"seconds": TRAINING_SECONDS, "steps": 10, "rounds": 3}
    if arguments.dry:  # one step a row; compiled by AOTAutograd without code generation (cheap)
        training |= {"seconds": 600, "steps": 1, "rounds": 1, "backend": "aot_eager"}
    report["training_step"] = training_step(
        shapes, dtype, device, compiled_shapes=compiled_shapes, **training
    )
    seconds["training_step"] = time.perf_counter() - start
    save()
    for row in report["training_step"]:
        print(training_line(row), flush=True)
    report["rows"] = []
    for op in ("linear", "delta", "gated"):  # saved after each: a run cut short keeps the rest
        start = time.perf_counter()
        shapes = [shape for shape in bench_shapes(arguments.dry) if shape["op"] == op]
        benchmark = gpu_benchmark(shapes=shapes, methods=BENCH_METHODS, dtype=dtype, device=device)
        seconds[f"benchmark_{op}"] = time.perf_counter() - start
        report |= {k: benchmark[k] for k in ("roofline", "formulas")}
        report["rows"] += benchmark["rows"]
        save()
    if arguments.notebooks:
        report["notebook"] = execute_notebook(arguments.out)
        seconds["notebook"] = report["notebook"]["seconds"]
        save()
    print("\n".join(table(report["rows"])))
    print(f"steps (s): {json.dumps({k: round(v, 1) for k, v in seconds.items()})}; wrote {path}")
    if arguments.notebooks and report["notebook"]["error"]:
        print(f"the notebook failed: {report['notebook']['error']}")
    passed = [check["passed"] for check in report["checks"] + report["addressing"]]
    return 0 if all(passed) else 1


if __name__ == "__main__":
    sys.exit(main())
