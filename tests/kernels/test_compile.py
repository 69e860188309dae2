"""The compile check (`python -m linattn_core.kernels.compile`, `kernels/compile.py`): it
finds what it must find, and the committed report describes the kernels as they are. `make
gpu-compile` compiles a sample against the report and `make kernels-report` the whole matrix;
these tests compile a handful of kernels, in a process without the Triton interpreter."""

import itertools
import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from linattn_core.kernels.common import SUPPORTED_CHUNK_SIZES, SUPPORTED_DIMS
from linattn_core.kernels.compile import occupancy, status, tile_experiment
from linattn_core.kernels.delta_rule.backward import delta_wy_kernel
from linattn_core.kernels.tiles import GPU_LIMITS, REGISTER_BUDGETS, tiles
from linattn_core.kernels.tools.launches import DTYPES, PACKED_DTYPES
from linattn_core.testing import run_python

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "figures" / "kernels_compiled.json"
KERNELS = {
    "segment_sums_kernel",
    "segment_output_kernel",
    "segment_sums_bwd_kernel",
    "segment_dq_kernel",
    "segment_dk_kernel",
    "segment_dv_kernel",
    "walk_bwd_kernel",
}
DELTA_KERNELS = {
    "delta_prepare_kernel",
    "delta_states_kernel",
    "delta_output_kernel",
    "delta_du_local_kernel",
    "delta_states_bwd_kernel",
    "delta_dqk_kernel",
    "delta_wy_kernel",
}


def compile_in_subprocess(code):
    """Run `code` where triton compiles for GPUs (no TRITON_INTERPRET); return its JSON output."""
    return json.loads(run_python(code, cwd=ROOT).strip().splitlines()[-1])


def test_one_configuration_runs_on_both_architectures_tensor_cores():
    """Linear attention in bfloat16 (d = 64, d_v = 32, chunks of 64), every kernel of every pass
    (packed sequences' too: bfloat16 is training's dtype), as the committed report records it for
    sm_80 and sm_90: no spill, at least two programs a multiprocessor (the backward walk of a short
    or packed sequence runs 8 warps, one program, tiles.py), and bfloat16 tensor-core instructions
    of each architecture (HMMA, Hopper's HGMMA). `make gpu-compile` compiles such records anew and
    fails unless they come out the same."""
    records = [
        r
        for r in json.loads(REPORT.read_text())["records"]
        if r["op"] == "linear_attention" and r["dtype"] == "bfloat16" and r["arch"] in (80, 90)
        and (r["d"], r["d_v"], r["chunk"], r["normalize"]) == (64, 32, 64, True)
    ]  # fmt: skip
    assert {r["kernel"] for r in records} == KERNELS
    passes = ("forward", "backward", "forward, one walk", "backward, one walk")
    passes += ("forward, packed", "backward, packed")
    assert {(r["arch"], r["pass"]) for r in records} == {
        (arch, p) for arch in (80, 90) for p in passes
    }
    for r in records:
        assert r["status"] == "ok", r
        assert r["spill_bytes"] == 0 and r["programs_per_sm"] >= (
            1 if r["kernel"] == "walk_bwd_kernel" else 2
        )
        opcode = "HGMMA" if r["arch"] == 90 else "MMA"
        assert any(opcode in o and o.endswith("BF16") for o in r["mma_opcodes"]), r


@pytest.mark.slow
def test_a_spilling_tile_is_reported():
    """64 × 64 float32 state tiles with 4 warps need more than 255 registers a thread: the check
    must say so (the launcher's table uses 16 × 16 for float32). `tile_experiment` compiles in a
    process of its own where the kernels are interpreted, as here (and uncached, as here)."""
    (record,) = tile_experiment(
        "segment_output_kernel", [80], [{"BK": 64, "BV": 64}], dtype="float32", cache_dir=None
    )
    assert record["spill_bytes"] > 0
    assert record["status"].startswith("spills")


def test_status_names_every_problem():
    ok = {"arch": 80, "dtype": "bfloat16", "spill_bytes": 0, "shared_bytes": 1024}
    ok |= {"mma_instructions": 8, "mma_opcodes": ["HMMA.16816.F32.BF16"]}
    assert status(ok) == "ok"
    assert status(ok | {"spill_bytes": 12}) == "spills 12 bytes"
    assert status(ok | {"shared_bytes": 200_000}).startswith("shared memory 200000 B > 166912 B")
    assert status(ok | {"mma_instructions": 0, "mma_opcodes": []}) == "no tensor-core MMA"
    assert status(ok | {"mma_opcodes": ["HMMA.1688.F32.TF32"]}) == "TF32 MMA for 16-bit inputs"
    assert status({"error": "PTXASError: ..."}) == "compile error: PTXASError: ..."


def test_occupancy_follows_cudas_limits():
    # 255 registers × 128 threads: 32,768 of the 65,536 registers, two programs
    assert occupancy(80, 255, 24 * 1024, 4) == 2
    # shared memory binds: 100 KiB + the 1 KiB reserved fits once into 164 KiB
    assert occupancy(80, 32, 100 * 1024, 4) == 1
    # warps bind: 64 warps a multiprocessor, 8 a program
    assert occupancy(90, 32, 1024, 8) == 8
    assert GPU_LIMITS[90].shared_per_block == 232_448


def test_committed_report_covers_every_configuration():
    """figures/kernels_compiled.json (`make kernels-report`) covers every configuration of every
    kernel on sm_80, sm_89 and sm_90, the packed passes in bfloat16 (`PACKED_DTYPES`), and every
    record compiled clean. Whether each record's `inputs` are this checkout's launch's (kernel
    source, tiles, warps, stages, register budget, Triton) is `make gpu-compile`'s first check,
    and the pre-commit hook's."""
    report = json.loads(REPORT.read_text())
    records = report["records"]
    assert report["provenance"]["triton"] == "3.7.1"
    assert {r["arch"] for r in records} == {80, 89, 90}
    assert all(r["status"] == "ok" for r in records)
    linear = {
        (r["dtype"], r["d"], r["d_v"], r["normalize"])
        for r in records
        if r["op"] == "linear_attention"
    }
    delta = {  # the delta rule's kernels, without and with gates
        op: {(r["dtype"], r["d"], r["d_v"], r["initial_state"]) for r in records if r["op"] == op}
        for op in ("delta_rule", "gated_delta_rule")
    }
    every = set(itertools.product(DTYPES, SUPPORTED_DIMS, SUPPORTED_DIMS, (True, False)))
    assert linear == every and all(found == every for found in delta.values())
    assert {r["chunk"] for r in records} == set(SUPPORTED_CHUNK_SIZES)
    assert {r["kernel"] for r in records} == KERNELS | DELTA_KERNELS
    packed = {(r["op"], r["dtype"]) for r in records if r["pass"].endswith(", packed")}
    ops = ("linear_attention", "delta_rule", "gated_delta_rule")
    assert packed == set(itertools.product(ops, PACKED_DTYPES))


@pytest.mark.slow
def test_a_stale_record_is_found_and_named():
    """A record whose `inputs` differ from the launch's (a kernel, tile or Triton changed since
    the report was made) fails the check, which names the record and the command. (The report's
    sm_80 records: a report of one architecture is checked against that architecture's launches.)
    """
    problems = compile_in_subprocess(
        f"""
        import json
        from linattn_core.kernels.compile import check_report, load_report

        report = load_report({str(REPORT)!r})
        report["records"] = [r for r in report["records"] if r["arch"] == 80]
        report["records"][0]["inputs"] = "0" * 32
        gone = report["records"].pop()
        print(json.dumps([gone["kernel"], check_report(report, progress=False)]))
        """
    )
    gone, problems = problems
    assert len(problems) == 3
    assert problems[0].startswith("stale") or problems[1].startswith("stale")
    assert any(p.startswith(f"missing: kernel={gone}, arch=80") for p in problems)
    assert problems[-1] == (
        "2 records out of date: run `make kernels-report` and commit figures/kernels_compiled.json"
    )


def test_a_register_budget_reaches_the_launch():
    """A configuration in `REGISTER_BUDGETS` launches with ptxas' `maxnreg`; the others leave
    ptxas its own choice."""
    budgeted = tiles(delta_wy_kernel, 90, 32, 16, torch.float32)
    assert budgeted.max_registers == REGISTER_BUDGETS["delta_wy", 90, "float32", 32, 16]
    assert budgeted.launch_options["maxnreg"] == budgeted.max_registers
    assert "maxnreg" not in tiles(delta_wy_kernel, 90, 64, 64, torch.bfloat16).launch_options


@pytest.mark.slow
def test_register_budget_fit_stops_a_spill():
    """Without its budget, ptxas squeezes the float32 wy kernel at d_k = 32, d_v = 16 into 128
    registers on sm_90 and spills; the fit finds the smallest budget that does not spill."""
    code = (
        "import json\n"
        "from linattn_core.kernels.compile import fit_register_budgets\n"
        "record = {'kernel': 'delta_wy_kernel', 'arch': 90, 'dtype': 'float32', 'd': 32,\n"
        "          'd_v': 16, 'registers': 128, 'spill_bytes': 8, 'op': 'delta_rule'}\n"
        "budgets = fit_register_budgets([record], jobs=1)\n"
        "print(json.dumps([[list(key), budget] for key, budget in budgets.items()]))\n"
    )
    assert compile_in_subprocess(code) == [[["delta_wy", 90, "float32", 32, 16, False], 136]]


@pytest.mark.slow
def test_a_records_inputs_ignore_line_numbers_but_not_source(tmp_path):
    """A kernel moved down its file keeps its `source_key` (and so its records); a changed
    line in a function it calls changes it."""
    helper = "@triton.jit\ndef scale(x):\n    return x * {}\n"
    kernel = "@triton.jit\ndef kernel(p):\n    tl.store(p, scale(tl.load(p)))\n"
    header = "import triton\nimport triton.language as tl\n"
    for name, gap, factor in [("a", "", 2), ("b", "\n" * 7, 2), ("c", "", 3)]:
        text = header + gap + helper.format(factor) + gap + kernel
        (tmp_path / f"moved_{name}.py").write_text(text)
    keys = compile_in_subprocess(
        f"""
        import json, sys
        sys.path.insert(0, {str(tmp_path)!r})
        from linattn_core.kernels.compile import source_key
        import moved_a, moved_b, moved_c

        print(json.dumps([source_key(m.kernel) for m in (moved_a, moved_b, moved_c)]))
        """
    )
    assert keys[0] == keys[1] != keys[2]
