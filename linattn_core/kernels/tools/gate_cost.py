"""What the log-gates add to the delta rule's kernels, and from it a PREDICTION (not a
measurement) of the gated delta rule's time on a GPU where only the ungated rule was timed.

`gated_delta_rule(..., method="triton")` runs the delta rule's kernels given g: the same
launches, tiles and loops (`GATED_OPTIONS` changes registers, warps or stages, never a tile),
plus, per chunk, the loads of g and element-wise work on the tiles already in registers. For B·H
heads of N tokens (a multiple of the chunk C), K = d_k, V = d_v, itemsize b of q, k, v and b_g
of g, the bytes the gated pass moves beyond the ungated one are, per head:

    forward     prepare: N·b_g; states walk: (V/BV)·N·b_g; output: (V/BV)·N·b_g
    backward    prepare and states again (recomputed); du_local: (V/BV)·N·b_g, and it writes
                diag(exp(G)) dO and reads k to write diag(exp(G_C − G)) K (N·V·b + 2·N·K·b), which
                the backward walk then reads in place of dO and K; states_bwd: (V/BV)·N·b_g;
                dqk: (K/BK)·N·b_g and its float32 parts of dg (K/BK)·N·4; wy: 2·N·b_g, the
                parts of dg (K/BK of dqk)·N·4 and dg out, N·b_g

with each kernel's BK, BV from `tiles.tiles`. `tests/kernels/test_gate_cost.py` checks every
count against the interpreter: traced bytes with g minus traced bytes without.

`gated_prediction` turns these bytes into times on the GPU of a `gpu_check` report that timed
the ungated rule (ours, `delta_triton`, and FLA's `chunk_delta_rule`):

    ours, gated (predicted) = ours, ungated (measured) + gate bytes / β,

β the copy bandwidth measured on that GPU (the report's "roofline"): the least time the extra
bytes can take. Assumed: the gate's element-wise work (cumulative sums and exponentials of C
numbers, C × C factors exp(G_i − G_j)) hides under the kernels' loads and products, and the
walks' steps, which carry the state from chunk to chunk, take no longer (the gate's load does
not depend on the state). If either fails, ours is slower than predicted. FLA's gated kernels
do at least the work of its ungated ones, so FLA, gated ≥ FLA, ungated (measured), and

    speedup ≥ FLA, ungated (measured) / ours, gated (predicted)

is the predicted lower bound on our speedup, under the assumptions above. Where the report has
no ungated row (d = 128 in the H200 report of 2026-11-27) nothing is predicted: only the gate's
bytes and their least time are known.
"""

import torch
import triton

from linattn_core.kernels.delta_rule.backward import (
    delta_dqk_kernel,
    delta_du_local_kernel,
    delta_states_bwd_kernel,
    delta_wy_kernel,
)
from linattn_core.kernels.delta_rule.forward import (
    delta_output_kernel,
    delta_prepare_kernel,
    delta_states_kernel,
)
from linattn_core.kernels.tiles import kernel_chunk, tiles
from linattn_core.kernels.tools.cost_model import KernelCost

OURS, FLA = "delta_triton", "fla_chunk_delta_rule"  # the ungated rows a report holds


def gate_costs(batch_heads, n, d_k, d_v, *, mode="fwd", dtype="bfloat16", gate_dtype=None, arch=90):
    """The bytes that the log-gates add to each kernel of a pass (mode "fwd", "bwd" or
    "fwd+bwd"), as `KernelCost`s without FLOPs: B·H = `batch_heads`, N = `n` tokens (counts
    exact for N a multiple of the kernels' chunk), q, k, v in `dtype`, g in `gate_dtype`
    (default: `dtype`), the tiles of compute capability `arch`.

    >>> [(c.kernel, c.bytes) for c in gate_costs(1, 128, 64, 64)]
    [('delta_prepare_kernel', 256), ('delta_states_kernel', 1024), ('delta_output_kernel', 256)]
    """
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    gate_dtype = getattr(torch, gate_dtype) if isinstance(gate_dtype, str) else gate_dtype or dtype
    b, bg = dtype.itemsize, gate_dtype.itemsize
    rows = batch_heads * triton.cdiv(n, kernel_chunk(64, dtype)) * kernel_chunk(64, dtype)

    def value_tiles(kernel):
        return d_v // tiles(kernel, arch, d_k, d_v, dtype).block_v

    def cost(kernel, moved):
        return KernelCost(kernel.fn.__name__, 0, moved)

    forward = [
        cost(delta_prepare_kernel, rows * bg),
        cost(delta_states_kernel, value_tiles(delta_states_kernel) * rows * bg),
        cost(delta_output_kernel, value_tiles(delta_output_kernel) * rows * bg),
    ]
    nk = d_k // tiles(delta_dqk_kernel, arch, d_k, d_v, dtype).block_k
    backward = [
        *forward[:2],  # A, W, U and the states, recomputed
        cost(
            delta_du_local_kernel,
            value_tiles(delta_du_local_kernel) * rows * bg + rows * (d_v + 2 * d_k) * b,
        ),
        cost(delta_states_bwd_kernel, value_tiles(delta_states_bwd_kernel) * rows * bg),
        cost(delta_dqk_kernel, nk * rows * (bg + 4)),
        cost(delta_wy_kernel, rows * (3 * bg + 4 * nk)),
    ]
    return {"fwd": forward, "bwd": backward, "fwd+bwd": forward + backward}[mode]


def gated_prediction(report):
    """Predicted times of our gated kernels against FLA's, from a `gpu_check` report's rows of
    the ungated rule (op "delta") and its measured copy bandwidth, as the module's docstring
    derives them: one row per (d, mode, N) that has both ungated timings, with the measured
    times (ms), the gate's bytes, their least time, our predicted gated time and the predicted
    lower bound on the speedup, FLA, ungated / ours, gated. Rows are sorted by d, mode and N.

    >>> rows = [{"op": "delta", "method": m, "mode": "fwd", "N": 1024, "d": 64, "B": 1, "H": 16,
    ...          "dtype": "bfloat16", "median_ms": t} for m, t in ((OURS, 0.2), (FLA, 0.7))]
    >>> row, = gated_prediction({"rows": rows, "roofline": {"copy_gbps": 4000.0}})
    >>> row["gate_bytes"], round(row["gate_ms"], 5), round(row["speedup_at_least"], 3)
    (196608, 5e-05, 3.499)
    """
    bandwidth = report["roofline"]["copy_gbps"] * 1e9
    timed = {}
    for r in report["rows"]:
        if r.get("op") == "delta" and r["method"] in (OURS, FLA) and r.get("median_ms"):
            key = (r["d"], r["mode"], r["N"], r["B"] * r["H"], r["dtype"])
            timed.setdefault(key, {})[r["method"]] = r["median_ms"]
    predicted = []
    for (d, mode, n, bh, dtype), times in sorted(timed.items()):
        if len(times) < 2:
            continue
        moved = sum(c.bytes for c in gate_costs(bh, n, d, d, mode=mode, dtype=dtype))
        gate_ms = 1e3 * moved / bandwidth
        ours = times[OURS] + gate_ms
        predicted.append(
            {"d": d, "mode": mode, "N": n, "batch_heads": bh, "ours_delta_ms": times[OURS]}
            | {"fla_delta_ms": times[FLA], "gate_bytes": moved, "gate_ms": gate_ms}
            | {"ours_gated_ms": ours, "speedup_at_least": times[FLA] / ours}
        )
    return predicted
