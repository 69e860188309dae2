"""The benchmark harness at tiny sizes: the command line writes records with the contract's keys,
the memory guard skips points without running them, figures are drawn, and the GPU command
refuses to run without CUDA."""

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from linattn_core.bench import RECORD_KEYS, complexity, estimate_peak_bytes, slopes
from linattn_core.bench.__main__ import main
from linattn_core.bench.complexity import powers_of_two
from linattn_core.bench.fresh import run_fresh
from linattn_core.bench.memory import (
    MMAP_THRESHOLD,
    SAFETY,
    memory_budget,
    resident_peak_growth,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cli_results(tmp_path_factory):
    """One run of the complexity command: two methods from N = 256 up to an absurd 2**24, with a
    50 MB budget, so that the guard stops each method at a different N."""
    path = tmp_path_factory.mktemp("bench") / "complexity.json"
    command = [
        sys.executable,
        "-m",
        "linattn_core.bench",
        "complexity",
        "--device=cpu",
        "--d=16",
        "--min-n=256",
        f"--max-n={2**24}",
        "--methods=softmax_naive,linear_chunked",
        "--causal",
        "--repeats=2",
        "--memory-budget-gb=0.05",
        "--no-progress",
        f"--json={path}",
    ]
    child = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr
    return json.loads(path.read_text()), child.stdout, path


@pytest.mark.slow
def test_complexity_command_writes_the_contract(cli_results):
    results, stdout, _ = cli_results
    assert set(results) == {"provenance", "settings", "records"}
    provenance = results["provenance"]
    for key in ("device", "torch", "triton", "python", "date", "command"):
        assert provenance[key], key
    assert "--max-n=16777216" in provenance["command"]
    records = results["records"]
    ns = [2**p for p in range(8, 25)]
    assert [(r["n"], r["method"]) for r in records] == [
        (n, method) for n in ns for method in ("softmax_naive_causal", "linear_chunked_causal")
    ]
    for record in records:
        assert tuple(record) == RECORD_KEYS
        assert record["d"] == 16 and record["device"] == "cpu"
        ran = record["skipped"] is None
        assert (record["median_ms"] is not None) == ran == (record["peak_bytes"] is not None)
    assert "log-log slopes of median_ms" in stdout


@pytest.mark.slow
def test_memory_guard_skips_what_does_not_fit(cli_results):
    """Each method runs exactly up to the last N whose memory estimate (with the guard's margin)
    fits the 50 MB budget; beyond it every point is skipped with the reason."""
    records = cli_results[0]["records"]
    largest = {}
    for method in ("softmax_naive", "linear_chunked"):
        series = [r for r in records if r["method"] == f"{method}_causal"]
        fitting = [
            r["n"]
            for r in series
            if SAFETY * estimate_peak_bytes(method, r["n"], 16, causal=True) <= 0.05e9
        ]
        largest_run = largest[method] = max(r["n"] for r in series if r["skipped"] is None)
        assert largest_run == max(fitting)
        for record in series:
            if record["n"] > largest_run:
                assert record["skipped"].startswith("needs ~")
                assert record["skipped"].endswith("GB > budget 0.05 GB")
    assert largest["softmax_naive"] < largest["linear_chunked"]


@pytest.mark.slow
def test_records_grow_with_n(cli_results):
    # timings on a loaded 2-core machine are too noisy for a test; the memory is deterministic
    records = cli_results[0]["records"]
    for method in ("softmax_naive_causal", "linear_chunked_causal"):
        peaks = [r["peak_bytes"] for r in records if r["method"] == method and r["peak_bytes"]]
        # never shrinking by more than the allocator's noise once the buffers that grow with N
        # dominate: below 1 MiB (linear_chunked at small N) fixed buffers and the allocator's
        # first arenas do, and two points can swap by 15 % (380,928 then 331,776 bytes, seen)
        grown = [b for b in peaks if b >= 2**20]
        assert all(b >= 0.95 * a for a, b in itertools.pairwise(grown)), (method, peaks)
        assert peaks[-1] > 2 * peaks[0], method
    softmax = {r["n"]: r["peak_bytes"] for r in records if r["method"] == "softmax_naive_causal"}
    matrix = 1024 * 1024 * 4
    assert 2 * matrix <= softmax[1024] < 5 * matrix  # scores, masked scores, probabilities
    # N×N growth: at least two more 1024² − 256² float32 matrices (the small point also carries
    # a fixed cost of allocator and thread state, about a MiB, so a ratio would be fragile)
    assert softmax[1024] - softmax[256] > 0.9 * 2 * (1024**2 - 256**2) * 4


@pytest.mark.parametrize("exponent", [1, 2])
def test_loglog_panel_reports_the_slope(exponent):
    import matplotlib.pyplot as plt

    from linattn_core.bench.plot import loglog_panel

    figure, axis = plt.subplots()
    ns = [256, 512, 1024]
    loglog_panel(axis, {"m": (ns, [n**exponent for n in ns])}, xlabel="N", ylabel="t", up_to=512)
    labels = axis.get_legend_handles_labels()[1]
    assert labels[0] == f"m (slope {exponent:.2f})"  # fitted up to N = 512
    assert [line.get_alpha() for line in axis.lines[:2]] == [0.2, None]  # all faint, then shown
    plt.close(figure)


def test_gpu_series_name_the_methods_the_benchmark_writes():
    """Each op's ours and FLA series are the method names `bench.gpu` writes rows under, and a
    report without gated rows (the H200's of 2026-11-27) keeps its two rows of panels."""
    import json
    from pathlib import Path

    import matplotlib.pyplot as plt

    from linattn_core.bench.gpu import FLA, OURS
    from linattn_core.bench.plot import GPU_SERIES, plot_gpu_comparison

    for op, series in GPU_SERIES.items():
        assert dict(series)["ours"] == OURS[op] and dict(series)["FLA"] == FLA[op]
    report = Path(__file__).parents[1] / "figures/gpu/h200-2026-11-27-505baa4/gpu_check.json"
    figure = plot_gpu_comparison(json.loads(report.read_text())["rows"])
    assert [axis.get_title() for axis in figure.axes[::2]] == [
        "linear attention, fwd",
        "delta rule, fwd",
    ]
    plt.close(figure)


def test_guard_adds_its_margin_and_checks_the_time():
    from linattn_core.bench.memory import SAFETY, skip_reason

    assert skip_reason(100, SAFETY * 100) is None
    assert skip_reason(101, SAFETY * 100).startswith("needs ~")
    assert skip_reason(1, 10**9, seconds=2.0, max_seconds=1) == "needs ~2 s > max_seconds 1 s"
    assert skip_reason(1, 10**9, seconds=None, max_seconds=1) is None


@pytest.mark.slow
def test_plot_command_draws_a_png(cli_results, tmp_path):
    figure = tmp_path / "complexity.png"
    main(["plot", str(cli_results[2]), "--out", str(figure)])
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_guard_never_runs_the_skipped_point(softmax_naive_calls):
    records = complexity(["softmax_naive"], [2**24], measure_memory=False)
    assert records[0]["skipped"].startswith("needs ~") and records[0]["median_ms"] is None
    assert 2**24 not in softmax_naive_calls  # only the small calibration call ran


def test_time_guard():
    # the calibration call at N = 512 extrapolates to N = 2**20 far beyond a millisecond
    (record,) = complexity(["linear_chunked"], [2**20], max_seconds=1e-3, measure_memory=False)
    assert record["skipped"].endswith("> max_seconds 0.001 s") and record["median_ms"] is None


def test_estimates_scale_like_the_methods():
    """Growth of the estimates: E(4N) − E(2N) = 2^p (E(2N) − E(N)) for a method of exponent p
    (true for a + b N^p, whatever the fixed part a)."""
    for name, exponent in (("softmax_naive", 2), ("linear_parallel", 2), ("linear_chunked", 1)):
        e1, e2, e4 = (estimate_peak_bytes(name, n, 64, causal=True) for n in (2**14, 2**15, 2**16))
        assert (e4 - e2) / (e2 - e1) == pytest.approx(2**exponent, rel=0.1), name
    flash = [estimate_peak_bytes("sdpa", n, 64, causal=True) for n in (2**14, 2**15)]
    assert flash[1] / flash[0] < 2.1  # the CPU's flash kernel works in blocks: linear memory
    with pytest.raises(ValueError, match=r"got 'flash'"):
        estimate_peak_bytes("flash", 1024, 64)


def test_helpers():
    assert powers_of_two(200, 1000) == [256, 512]
    records = [{"method": "m", "n": n, "median_ms": 3 * n} for n in (256, 512, 1024)]
    assert slopes(records)["m"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="method names"):
        complexity(["nope"], [256])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_gpu_command_refuses_without_cuda(tmp_path):
    with pytest.raises(SystemExit, match="needs a CUDA device"):
        main(["gpu", "--json", str(tmp_path / "gpu.json")])


@pytest.mark.slow
def test_gpu_benchmark_rows_on_the_cpu(tmp_path):
    from linattn_core.bench import load_gpu_results
    from linattn_core.bench.gpu import flop_count, gpu_benchmark

    shape = {"sweep": "crossover", "B": 1, "H": 1, "N": 32, "d": 16}
    results = gpu_benchmark(shapes=[shape], device="cpu")
    assert set(results) == {"provenance", "roofline", "formulas", "rows"}
    rows = {(row["method"], row["mode"]): row for row in results["rows"]}
    assert len(rows) == 2 * 9
    for mode in ("fwd", "fwd+bwd"):
        ran = rows[("linear_chunked", mode)]
        assert ran["median_ms"] > 0 and ran["skipped"] is None
        assert ran["vs_sdpa_best"] > 0 and ran["roofline_fraction"] > 0
        expected = flop_count(shape, mode, "linear") / ran["median_ms"] / 1e9
        assert ran["tflops"] == pytest.approx(expected)
        assert rows[("sdpa_cudnn", mode)]["skipped"]  # no cuDNN on the CPU
    fla = rows[("fla_chunk_linear_attn", "fwd")]
    assert fla["skipped"] or fla["median_ms"] > 0
    # what the command writes, the chapter's loader reads: one crossover per mode
    (tmp_path / "bench_gpu_test.json").write_text(json.dumps(results))
    [comparison] = load_gpu_results(tmp_path)["comparisons"]
    assert sorted(c["mode"] for c in comparison["crossovers"]) == ["fwd", "fwd+bwd"]
    assert all(c["ns"] == [32] and c["dtype"] == "bfloat16" for c in comparison["crossovers"])


def _comparison_rows(speedups):
    """Rows of a `gpu` run's crossover sweep: our kernel at the given speed-ups over SDPA's best
    (None: the row was skipped), and an SDPA row that the crossover must ignore."""
    rows = []
    for (d, mode), by_n in speedups.items():
        for n, speedup in by_n.items():
            shape = {"sweep": "crossover", "B": 1, "H": 16, "N": n, "d": d}
            common = {**shape, "mode": mode, "dtype": "bfloat16", "skipped": None}
            rows.append({**common, "method": "linear_triton", "vs_sdpa_best": speedup})
            rows.append({**common, "method": "sdpa_flash", "vs_sdpa_best": 1.0})
    tokens = {"sweep": "tokens", "B": 4, "H": 32, "N": 4096, "d": 64, "mode": "fwd"}
    rows.append({**tokens, "dtype": "bfloat16", "method": "linear_triton", "vs_sdpa_best": 9.0})
    return rows


def test_load_gpu_results_reads_committed_files(tmp_path):
    from linattn_core.bench import load_gpu_results
    from linattn_core.bench.results import measured_crossovers

    roofline = {"copy_gbps": 3000.0, "matmul_tflops": 600.0}  # 2bP/β = 800 in bfloat16
    speedups = {
        (64, "fwd"): {1024: 0.7, 2048: 1.2, 4096: 0.95, 8192: 1.3, 16384: 1.9},
        (128, "fwd"): {1024: 1.1, 2048: 1.5},
        (64, "fwd+bwd"): {1024: 0.5, 2048: None, 4096: 0.9},
    }
    comparison = {"provenance": {"device": "H100"}, "roofline": roofline, "formulas": {}}
    comparison["rows"] = _comparison_rows(speedups)
    cuda_run = {"provenance": {"device": "H100"}, "settings": {}, "records": []}
    cuda_run["records"] = [{"method": "sdpa_causal", "n": 256, "device": "cuda"}]
    cpu_run = {"provenance": {}, "records": [{"method": "sdpa_causal", "n": 256, "device": "cpu"}]}
    files = {"bench_gpu_h100.json": comparison, "complexity_cuda.json": cuda_run}
    files |= {"scaling_cpu.json": cpu_run, "bare_list.json": []}
    for name, data in files.items():
        (tmp_path / name).write_text(json.dumps(data))

    results = load_gpu_results(tmp_path)
    [run] = results["complexity"]
    assert run["path"].endswith("complexity_cuda.json") and run["records"] == cuda_run["records"]
    [found] = results["comparisons"]
    assert found["provenance"] == {"device": "H100"} and found["roofline"] == roofline
    assert all({"sweep", "B", "H", "N", "d"} <= set(row) for row in found["rows"])
    by_shape = {(c["d"], c["mode"]): c for c in found["crossovers"]}
    assert set(by_shape) == set(speedups)  # the tokens sweep has no crossover
    # ahead from 8192 on (the win at 2048 does not last), from the start, and never
    assert by_shape[(64, "fwd")]["measured_n"] == 8192
    assert by_shape[(128, "fwd")]["measured_n"] == 1024
    assert by_shape[(64, "fwd+bwd")]["measured_n"] is None
    assert by_shape[(64, "fwd")]["ns"] == [1024, 2048, 4096, 8192, 16384]
    # forward: N* = max(2bP/β, 2(C + d)) = max(800, 256 or 384); forward and backward, with
    # 3.5× and 4× the forward FLOPs and 11 d b bytes per token: max(11bP/β, 16(C + d)) / 7
    balance = 600e12 / 3000e9
    assert by_shape[(64, "fwd")]["predicted_n"] == pytest.approx(2 * 2 * balance)
    assert by_shape[(128, "fwd")]["predicted_n"] == pytest.approx(2 * 2 * balance)
    assert by_shape[(64, "fwd+bwd")]["predicted_n"] == pytest.approx(11 * 2 * balance / 7)
    slow_memory = {"copy_gbps": 3000.0, "matmul_tflops": 100.0}  # 2bP/β ≈ 133 < 2(C + d)
    [compute_bound] = measured_crossovers(
        _comparison_rows({(128, "fwd"): {1024: 1.1}}), slow_memory
    )
    assert compute_bound["predicted_n"] == 2 * (64 + 128)

    broken = dict(comparison, rows=[{"method": "linear_triton", "N": 1024}])
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    with pytest.raises(
        ValueError, match=r"broken.json rows\[0\] must have the keys.*missing sweep"
    ):
        load_gpu_results(tmp_path)


def test_delta_rule_methods_agree_and_the_kernel_is_left_out_on_the_cpu():
    from linattn_core.bench import METHODS, default_methods
    from linattn_core.testing import assert_close, random_qkv

    q, k, v = random_qkv(1, 1, n=100, d=16)
    outputs = [METHODS[name].run(q, k, v, True) for name in ("delta_recurrent", "delta_chunked")]
    assert_close(outputs[1], outputs[0], rtol=1e-10)
    assert METHODS["delta_triton"].needs_cuda
    assert {"delta_recurrent", "delta_chunked"} <= set(default_methods("cpu"))
    assert "delta_triton" not in default_methods("cpu")
    for name in ("delta_recurrent", "delta_chunked", "delta_triton"):  # linear in N
        ratio = estimate_peak_bytes(name, 2**16, 64) / estimate_peak_bytes(name, 2**15, 64)
        assert 1.5 < ratio < 2.1, (name, ratio)


def test_peers_compares_what_imports_and_names_what_does_not():
    from linattn_core.bench import peers

    found, missing = peers.available()
    assert {"ours", "sdpa"} <= set(found)
    assert set(found) | set(missing) == set(peers.IMPLEMENTATIONS)
    assert all(reason for reason in missing.values())  # why a peer was left out
    errors = peers.agreement(list(found))
    assert "sdpa" not in errors  # softmax: a different function
    assert max(errors["ours"].values()) < 1e-5


@pytest.mark.slow
def test_peers_command_writes_time_memory_and_first_calls(tmp_path, monkeypatch):
    """The command's records for ours alone (each implementation's memory and first call are
    fresh processes: the others add time, not paths), with a peer that is absent here listed."""
    from linattn_core.bench import peers

    def absent(q, k, v):
        raise ModuleNotFoundError("No module named 'absent'")

    implementations = {"ours": peers.IMPLEMENTATIONS["ours"], "absent": (absent, "absent")}
    monkeypatch.setattr(peers, "IMPLEMENTATIONS", implementations)
    path = tmp_path / "peers.json"
    main(["peers", "--ns", "128", "--threads", "1", "--rounds", "1", "--json", str(path)])
    results = json.loads(path.read_text())
    assert {"provenance", "implementations", "missing", "agreement", "records"} <= set(results)
    records = results["records"]
    for name in results["implementations"]:
        mine = [r for r in records if r["name"] == name]
        assert {(r["pass"], r["n"]) for r in mine} == {(p, 128) for p in ("fwd", "fwd+bwd")}
        assert all(r["median_ms"] > 0 and r["peak_bytes"] > 0 for r in mine)
        assert all("first_ms" in r for r in mine)
    assert set(results["implementations"]) == {"ours"} and set(results["missing"]) == {"absent"}
    assert peers.ratios(records)[1, "fwd", 128]["ours"] == 1


def test_committed_peer_comparison_checked_every_peer_first():
    committed = json.loads((ROOT / "figures" / "peers_cpu.json").read_text())
    assert set(committed["agreement"]) == {"ours", "fast_transformers", "fla_naive", "performer"}
    for errors in committed["agreement"].values():
        assert max(errors.values()) < 1e-5
    assert {r["n"] for r in committed["records"]} >= {4096, 16384}


def test_gpu_check_table_sets_ours_beside_fla_and_sdpa():
    from linattn_core.bench.gpu_check import check_line, table

    def row(method, ms, **extra):
        return (
            {"op": "linear", "d": 64, "N": 65536, "mode": "fwd", "method": method}
            | {
                "median_ms": ms,
                "peak_bytes": 2**27,
                "vs_fla": None,
                "vs_sdpa_best": None,
            }
            | extra
        )

    rows = [
        row("linear_triton", 0.25, vs_fla=2.0, vs_sdpa_best=72.0, bandwidth_fraction=0.51),
        row("fla_chunk_linear_attn", 0.5),
        row("sdpa_flash", 18.0),
        row("sdpa_cudnn", None),  # skipped: the fastest SDPA backend that ran is shown
    ]
    header, line = table(rows)
    assert header.split()[:5] == ["op", "d", "N", "pass", "ours"]
    assert line.split() == [
        "linear", "64", "65536", "fwd", "0.250", "0.500", "18.000", "2.00", "72.00", "128/128/128",
        "51", "%",
    ]  # fmt: skip
    check = {"op": "delta", "dtype": "float16", "d": 64, "N": 777, "flag": False}
    check |= {"rtol": 2e-3, "errors": {"o": 7e-4, "dq": 3e-3}, "passed": False}
    assert check_line(check).startswith("FAIL delta  float16  d=64  N=777")
    assert check_line(check).endswith("o 7.0e-04, dq 3.0e-03 (rtol 0.002)")


@pytest.mark.slow
def test_run_fresh_returns_the_functions_json_or_its_error():
    assert 0 < run_fresh(memory_budget, device="cpu") < 2**50
    with pytest.raises(RuntimeError, match=r"memory_budget(.|\n)*Invalid device string"):
        run_fresh(memory_budget, device="no such device")


@pytest.mark.slow
def test_resident_peak_growth_sees_a_buffer_touched_and_freed():
    """In a fresh process with glibc's mmap threshold fixed, as `resident_peak_growth` asks: a
    long-lived process (pytest's) may reuse memory it already holds, and its high-water mark
    may not rise."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(MMAP_THRESHOLD))
    grown, how, result = run_fresh(touched_buffer_growth, env=env, cwd=ROOT, timeout=120)
    assert result == 1.0 and how in {"VmHWM", "ru_maxrss"}
    assert grown >= 60 * 2**20


def touched_buffer_growth():
    """`resident_peak_growth` of writing a 64 MiB buffer and freeing it (run by `run_fresh`)."""

    def touch():
        buffer = torch.ones(64 * 2**20 // 8, dtype=torch.float64)  # 64 MiB, written
        return float(buffer[-1])

    return resident_peak_growth(touch)


def test_addressing_rows_pass_2_31_elements_and_compare_the_tokens_past_it():
    """B·H·N·d just past 2³¹ with each head far below; the compared tokens of the last head are
    exactly those whose elements lie past 2³¹ (a toy run compares its last TAIL tokens)."""
    from linattn_core.bench.addressing import LIMIT, TAIL, addressing_shape, compared_tokens

    shape = addressing_shape(dry=False)
    heads, n, d = shape["B"] * shape["H"], shape["N"], shape["d"]
    assert heads * n * d > LIMIT > n * d
    tokens = compared_tokens(shape)
    assert tokens.stop == n and tokens.stop - tokens.start == 1024
    assert ((heads - 1) * n + tokens.start) * d == LIMIT  # the first element past 2³¹ - 1
    toy = addressing_shape(dry=True)
    assert compared_tokens(toy) == slice(max(0, toy["N"] - TAIL), toy["N"])


@pytest.mark.slow  # alone, its first autograd.grad imports torch's symbolic shapes: seconds
def test_an_addressing_row_fails_where_the_last_head_differs_alone(monkeypatch):
    """A stand-in for the kernels that corrupts the tokens past 2³¹ when the heads pass it fails
    the row, the same stand-in without the corruption passes, and an exception is the row's
    error."""
    from linattn_core.bench import addressing

    def stand_in(corrupt):
        def outputs(op, inputs):
            q, k, v, beta = inputs
            o = q * k + v * beta[..., None]
            if corrupt and q.shape[1] > 1:  # all the heads: the last one's tail is wrong
                o = o.clone()
                o[-1, -1, -3:] = 0
            return o, q.mT @ v

        return outputs

    shape = {"B": 1, "H": 3, "N": 100, "d": 4}
    cpu = torch.device("cpu")
    for corrupt in (False, True):
        monkeypatch.setattr(addressing, "outputs", stand_in(corrupt))
        row = addressing.addressing_row("delta", shape, torch.float32, cpu)
        assert row["passed"] is not corrupt and row["error"] is None
        assert set(row) == {"op", "B", "H", "N", "d", "elements", "max_relative_error", "passed",
                            "seconds", "error"}  # fmt: skip
    monkeypatch.setattr(addressing, "make_inputs", lambda *args: 1 / 0)
    row = addressing.addressing_row("delta", shape, torch.float32, cpu)
    assert not row["passed"] and row["error"].startswith("ZeroDivisionError")
    assert addressing.addressing_line(row).startswith("FAIL")
