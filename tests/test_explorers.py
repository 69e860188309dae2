"""The scaling chapter's explorers, headless: controls change, Run measures, plot and table update,
and the memory guard refuses points that do not fit (they are listed, never run)."""

import re

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from linattn_core import linear_attention
from linattn_core.book import explorers

BUDGET = 2**30  # 1 GiB: a fixed budget, whatever the machine has free


def plotted(explorer, panel=0):
    """{label: (xs, ys)} of the lines drawn on one panel of the explorer's last figure."""
    axis = explorer.figure.axes[panel]
    return {
        line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in axis.lines
    }


def first_xs(lines):
    """The x data of the first line drawn."""
    return next(iter(lines.values()))[0]


def test_complexity_explorer_runs_and_updates():
    explorer = explorers.ComplexityExplorer(memory_budget=BUDGET)
    explorer.n_range.value = (256, 512)
    explorer.methods.value = ("softmax_naive", "linear_chunked")
    explorer.repeats.value = 1
    explorer.measure_memory.value = False
    explorer.button.click()
    assert [(r["method"], r["n"]) for r in explorer.records] == [
        ("softmax_naive_causal", 256),
        ("linear_chunked_causal", 256),
        ("softmax_naive_causal", 512),
        ("linear_chunked_causal", 512),
    ]
    assert all(r["median_ms"] > 0 and r["skipped"] is None for r in explorer.records)
    assert explorer.progress.value == explorer.progress.max == 2
    lines = plotted(explorer)
    assert [label.split(" (")[0] for label in lines] == [
        "softmax_naive_causal",
        "linear_chunked_causal",
        "O(N)",
        "O(N²)",
    ]
    assert first_xs(lines) == [256, 512]
    assert "softmax_naive_causal" in explorer.table.value and "time slopes" in explorer.table.value

    explorer.causal.value = False
    explorer.d.value = 16
    explorer.n_range.value = (1024, 1024)
    explorer.button.click()
    assert [(r["method"], r["n"], r["d"]) for r in explorer.records] == [
        ("softmax_naive", 1024, 16),
        ("linear_chunked", 1024, 16),
    ]
    assert first_xs(plotted(explorer)) == [1024]
    assert ">1024</td>" in explorer.table.value and ">512</td>" not in explorer.table.value


def test_complexity_explorer_guard_refuses_absurd_sizes():
    explorer = explorers.ComplexityExplorer(memory_budget=BUDGET)
    explorer.n_range.value = (2**22, 2**24)
    explorer.methods.value = ("softmax_naive", "linear_parallel")
    explorer.measure_memory.value = False
    records = explorer.run()
    assert len(records) == 6
    assert all(r["median_ms"] is None and r["peak_bytes"] is None for r in records)
    assert all(r["skipped"].startswith("needs ~") for r in records)
    assert explorer.table.value.count("skipped: needs ~") == 6
    assert "GB" in explorer.table.value


@pytest.mark.slow
def test_complexity_explorer_never_runs_a_refused_point(softmax_naive_calls):
    explorer = explorers.ComplexityExplorer(memory_budget=BUDGET)
    explorer.n_range.value = (256, 2**24)
    explorer.methods.value = ("softmax_naive",)
    explorer.repeats.value = 1
    explorer.measure_memory.value = False
    records = explorer.run()
    ran = {r["n"] for r in records if r["skipped"] is None}
    refused = {r["n"] for r in records if r["skipped"]}
    assert ran and refused and max(ran) < min(refused)
    calls = set(softmax_naive_calls)
    assert ran <= calls <= ran | {512}  # the measured points and the calibration call at 512
    assert not refused & calls


def test_chunk_size_explorer_never_runs_a_refused_chunk_size(monkeypatch):
    calls = []

    def spy(q, k, v, *, chunk_size, **options):
        calls.append(chunk_size)
        return linear_attention(q, k, v, chunk_size=chunk_size, **options)

    monkeypatch.setattr(explorers, "linear_attention", spy)
    explorer = explorers.ChunkSizeExplorer(memory_budget=8 * 10**6)
    explorer.n.value, explorer.d.value = 4096, 16
    explorer.chunk_range.value = (64, 1024)
    explorer.repeats.value = 1
    records = explorer.run()
    ran = {r["chunk_size"] for r in records if r["skipped"] is None}
    refused = {r["chunk_size"] for r in records if r["skipped"]}
    assert ran == {64, 128, 256, 512} and refused == {1024}
    assert set(calls) == ran


def test_generation_explorer_never_runs_a_refused_position(monkeypatch):
    positions = []

    def spy(q, k_cache, v_cache, **options):
        positions.append(k_cache.shape[0])
        return softmax_step(q, k_cache, v_cache, **options)

    softmax_step = explorers.softmax_decode_step
    monkeypatch.setattr(explorers, "softmax_decode_step", spy)
    explorer = explorers.GenerationExplorer(memory_budget=2**20)
    explorer.positions.value = (64, 2**16)
    explorer.repeats.value = 1
    records = explorer.run()
    ran = {r["position"] for r in records if r["skipped"] is None}
    refused = {r["position"] for r in records if r["skipped"]}
    assert ran and refused and set(positions) == ran


def test_complexity_explorer_follows_the_device():
    explorer = explorers.ComplexityExplorer()
    assert "linear_triton" not in explorer.methods.options  # CPU: no Triton kernels
    assert explorer.device.options[0] == "cpu"


def test_complexity_explorer_explains_a_missing_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    explorer = explorers.ComplexityExplorer(memory_budget=BUDGET)
    explorer._on_device({"new": "cuda"})
    assert "torch.cuda.is_available() is False" in explorer.table.value
    assert explorer.device.value == "cpu"
    assert explorer.methods.options == tuple(explorers.default_methods("cpu"))
    explorer.n_range.value = (256, 256)
    explorer.methods.value = ("linear_chunked",)
    explorer.measure_memory.value = False
    (record,) = explorer.run()  # still measures, on the CPU
    assert record["device"] == "cpu" and record["median_ms"] > 0


def test_chunk_size_explorer_runs_and_fits_the_model():
    explorer = explorers.ChunkSizeExplorer(memory_budget=BUDGET)
    explorer.n.value, explorer.d.value = 1024, 32
    explorer.chunk_range.value = (16, 128)
    explorer.repeats.value = 1
    explorer.run()
    assert [r["chunk_size"] for r in explorer.records] == [16, 32, 64, 128]
    assert all(r["median_ms"] > 0 and r["model_ms"] > 0 for r in explorer.records)
    assert explorer.progress.value == 4
    measured, model = plotted(explorer).values()
    assert measured[0] == [16, 32, 64, 128] and len(model[0]) > 4
    assert explorer.table.value.count("<tr>") == 5

    explorer.chunk_range.value = (64, 64)  # one point: no model to fit, still a plot and a row
    explorer.run()
    assert [r["chunk_size"] for r in explorer.records] == [64]
    assert explorer.model is None and explorer.records[0]["model_ms"] is None


def test_chunk_size_explorer_guard():
    explorer = explorers.ChunkSizeExplorer(memory_budget=2**20)
    explorer.n.value = 2**20
    explorer.chunk_range.value = (1, 4096)
    records = explorer.run()
    assert len(records) == 13
    assert all(r["median_ms"] is None and r["skipped"] for r in records)
    assert explorer.table.value.count("skipped: needs ~") == 13


def test_generation_explorer_runs_and_guards():
    explorer = explorers.GenerationExplorer(memory_budget=2**22)
    explorer.positions.value = (64, 2**20)
    explorer.d.value = 32
    explorer.repeats.value = 3
    explorer.run()
    ran = [r for r in explorer.records if r["skipped"] is None]
    skipped = [r for r in explorer.records if r["skipped"]]
    assert [r["position"] for r in ran] == [64, 128, 256, 512, 1024, 2048, 4096, 8192]
    assert all(r["softmax_us"] > 0 and r["linear_us"] > 0 for r in ran)
    assert skipped and all(r["softmax_us"] is None and r["linear_us"] is None for r in skipped)
    assert explorer.table.value.count("skipped: needs ~") == len(skipped)
    assert ran[-1]["cache_bytes"] > 100 * ran[-1]["state_bytes"]
    assert explorer.progress.value == len(explorer.records)
    times, memory = plotted(explorer, 0), plotted(explorer, 1)
    assert first_xs(times) == [r["position"] for r in ran]
    assert "O(1)" in times and "KV cache (slope 1.00)" in memory


def test_records_table_escapes():
    table = explorers.records_table([{"a": "<b>"}], [("a", lambda r: r["a"])])
    assert "&lt;b&gt;" in table and "<b>" not in table


def test_the_book_shows_the_last_run_with_a_note_and_no_dead_controls():
    explorer = explorers.GenerationExplorer(memory_budget=2**22)
    assert "Not run when the notebook was executed" in explorer.static_html()
    explorer.positions.value = (64, 128)
    explorer.d.value = 32
    explorer.repeats.value = 1
    explorer.run()
    bundle = explorer._repr_mimebundle_()
    page = bundle["text/html"]
    assert "application/vnd.jupyter.widget-view+json" in bundle  # the live widget, for Jupyter
    assert "measures live" in page and "Run shown: positions = 64–128, d = 32" in page
    assert page.count("data:image/png;base64,") == 1 and 'data-text-px="' in page
    assert "position</th>" in page  # the table of the run
    assert not re.search(r"<(select|input|button)\b", page)  # nothing that would not respond


def test_chunk_size_explorer_time_guard():
    explorer = explorers.ChunkSizeExplorer(memory_budget=2**40)  # memory no limit: time decides
    explorer.n.value, explorer.d.value = 2**18, 16
    explorer.chunk_range.value = (1024, 2048)
    explorer.max_seconds.value = 0.1
    records = explorer.run()
    assert all(r["median_ms"] is None for r in records)
    assert all(" s > max_seconds 0.1 s" in r["skipped"] for r in records)
