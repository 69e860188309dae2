"""Time the kernels under other tiles on a CUDA device: the measurements behind `tiles.py`.

    python -m linattn_core.bench.tile_sweep --out DIR [--ns 16384 65536]

Each variant replaces the tile of some kernels (their BK, BV, warps, stages) or the programs the
segments of linear attention give each multiprocessor (`PROGRAMS_PER_SM`), and runs one
operation — causal linear attention (unnormalized) or the delta rule, bfloat16, B·H = 16,
d = 64 — forward and forward+backward, timed with `triton.testing.do_bench` (median) beside the
table's own tiles in the same run. Every variant's kernels are compiled first, in parallel
processes (`bench.gpu_check.compile_launches`). Writes DIR/tile_sweep.json with provenance and
prints one line per variant, its time over the table's.
"""

import argparse
import contextlib
import dataclasses
import json
import sys
from pathlib import Path
from unittest import mock

import torch

from linattn_core.kernels import tiles as tile_table
from linattn_core.kernels.linear_attention import forward as linear_forward

# (op, name, {kernel: tile changes} or {"PROGRAMS_PER_SM": n})
VARIANTS = (
    ("linear", "table", {}),
    ("linear", "2 programs per SM", {"PROGRAMS_PER_SM": 2}),
    ("linear", "output: 3 stages", {"segment_output": {"num_stages": 3}}),
    (
        "linear",
        "dq, dk, dv: 8 warps",
        {k: {"num_warps": 8} for k in ("segment_dq", "segment_dk", "segment_dv")},
    ),
    ("delta", "table", {}),
    ("delta", "prepare: BK 32", {"delta_prepare": {"block_k": 32, "block_v": 32}}),
    ("delta", "prepare: 4 warps", {"delta_prepare": {"num_warps": 4}}),
    ("delta", "wy: BK 32", {"delta_wy": {"block_k": 32, "block_v": 32}}),
    ("delta", "walks: BV 32", {k: {"block_v": 32} for k in ("delta_states", "delta_states_bwd")}),
)


@contextlib.contextmanager
def variant(changes):
    """The kernels run with `changes`: tile fields per kernel, or PROGRAMS_PER_SM."""
    original = tile_table.tiles

    def tiles(kernel, *args, **kwargs):
        tile = original(kernel, *args, **kwargs)
        return dataclasses.replace(tile, **changes.get(tile_table.kernel_name(kernel), {}))

    with contextlib.ExitStack() as stack:
        for module in _users_of_tiles():
            stack.enter_context(mock.patch.object(module, "tiles", tiles))
        programs = changes.get("PROGRAMS_PER_SM", linear_forward.PROGRAMS_PER_SM)
        stack.enter_context(mock.patch.object(linear_forward, "PROGRAMS_PER_SM", programs))
        yield


def _users_of_tiles():
    from linattn_core.kernels.delta_rule import backward as delta_backward
    from linattn_core.kernels.delta_rule import forward as delta_forward
    from linattn_core.kernels.linear_attention import backward as linear_backward

    return (linear_forward, linear_backward, delta_forward, delta_backward)


def launches(op, changes, arch):
    """The launches of one forward and backward pass of `op` under `changes`."""
    from linattn_core.kernels.tools.launches import delta_rule_launches, linear_attention_launches

    with variant(changes):
        if op == "linear":
            found = linear_attention_launches(arch, torch.bfloat16, 64, 64, 64, False)
        else:
            found = delta_rule_launches(arch, torch.bfloat16, 64, 64, 64, False)
    return [launch for _, launch in found]


def time_variant(op, changes, n, mode):
    """do_bench median (ms) of `op` at N = n under `changes`."""
    from triton.testing import do_bench

    from linattn_core.bench.gpu import compared_methods, make_inputs

    method = compared_methods()["linear_triton" if op == "linear" else "delta_triton"]
    backward = mode == "fwd+bwd"
    inputs = make_inputs(
        op, {"B": 1, "H": 16, "N": n, "d": 64}, torch.bfloat16, "cuda", requires_grad=backward
    )
    forward, leaves = method.make(inputs)
    with variant(changes):
        grad = torch.randn_like(forward()) if backward else None

        def step():
            out = forward()
            if backward:
                out.backward(grad)

        return do_bench(step, grad_to_none=list(leaves) if backward else None, return_mode="median")


def profile(op, n):
    """Where one forward and backward pass of `op` at N = n (the table's tiles) spends its time:
    each kernel's GPU time (torch.profiler, the median of 20 calls' sums), and the host's time
    to issue the forward and the backward pass (after a synchronize, without waiting for them)."""
    import statistics
    import time

    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from linattn_core.bench.gpu import compared_methods, make_inputs

    method = compared_methods()["linear_triton" if op == "linear" else "delta_triton"]
    shape = {"B": 1, "H": 16, "N": n, "d": 64}
    inputs = make_inputs(op, shape, torch.bfloat16, "cuda", requires_grad=True)
    forward, leaves = method.make(inputs)
    grad = torch.randn_like(forward())
    host = {"forward": [], "backward": []}
    for _ in range(30):
        for leaf in leaves:
            leaf.grad = None
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = forward()
        host["forward"].append(time.perf_counter() - start)
        start = time.perf_counter()
        out.backward(grad)
        host["backward"].append(time.perf_counter() - start)
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            out = forward()
            out.backward(grad)
        torch.cuda.synchronize()
    kernels = {
        e.key: e.device_time_total / e.count * 1e-3
        for e in prof.key_averages()
        if e.device_time_total > 0
    }
    host_ms = {pass_: 1e3 * statistics.median(times) for pass_, times in host.items()}
    print(f"profile {op} N={n}: host ms {host_ms}", flush=True)
    for name, ms in sorted(kernels.items(), key=lambda item: -item[1]):
        print(f"  {ms:8.4f} ms  {name[:90]}", flush=True)
    return {"op": op, "N": n, "host_ms": host_ms, "kernel_ms": kernels}


def main(argv=None):
    from linattn_core.bench.gpu_check import compile_launches, project_commit
    from linattn_core.kernels.common import device_arch
    from linattn_core.provenance import provenance

    parser = argparse.ArgumentParser(
        prog="python -m linattn_core.bench.tile_sweep", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ns", type=int, nargs="*", default=[16384, 65536])
    parser.add_argument(
        "--profile", type=int, nargs="*", default=[], help="N at which to profile each kernel"
    )
    arguments = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.exit(2, "sweep: needs a CUDA device\n")
    device = torch.device("cuda")
    arch = device_arch(device)
    variants = VARIANTS if arguments.ns else [v for v in VARIANTS if v[1] == "table"]
    seconds = compile_launches(
        [launch for op, _, changes in variants for launch in launches(op, changes, arch)]
    )
    print(f"compiled the variants in {seconds:.0f} s", flush=True)
    records = []
    for n in arguments.ns:
        for mode in ("fwd", "fwd+bwd"):
            base = {}
            for op, name, changes in VARIANTS:
                try:
                    ms = time_variant(op, changes, n, mode)
                except Exception as error:  # a variant that does not run is a finding
                    records.append(
                        {
                            "op": op,
                            "variant": name,
                            "N": n,
                            "mode": mode,
                            "error": f"{type(error).__name__}: {error}"[:300],
                        }
                    )
                    continue
                base.setdefault(op, ms)
                records.append(
                    {
                        "op": op,
                        "variant": name,
                        "N": n,
                        "mode": mode,
                        "ms": ms,
                        "vs_table": ms / base[op],
                    }
                )
                print(
                    f"{op:<7}{n:>7} {mode:<8}{name:<24}{ms:8.3f} ms {ms / base[op]:6.2f}",
                    flush=True,
                )
    profiles = [profile(op, n) for n in arguments.profile for op in ("linear", "delta")]
    arguments.out.mkdir(parents=True, exist_ok=True)
    report = {
        "provenance": provenance(device) | {"project_commit": project_commit()},
        "records": records,
        "profiles": profiles,
    }
    (arguments.out / "tile_sweep.json").write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
