"""Three explorers of the scaling chapter: vary N and watch time and memory grow.

- `ComplexityExplorer`: time and peak memory of each attention method against N (the records of
  `linattn_core.bench.complexity`), with fitted log-log slopes and O(N) / O(N²) guides;
- `ChunkSizeExplorer`: time of the chunked linear form against its chunk size C at a fixed N,
  with the cost model t(C) = F(C) / P + (N / C) τ fitted through the measurements;
- `GenerationExplorer`: the cost of one generated token against its position: softmax attention
  over a KV cache that grows with the position, against the constant-size recurrent state;

Each explorer has controls, a Run button, a progress bar, log-log plots and a table. Every point
is checked against a memory budget before it runs (half the available memory by default): a
point that does not fit is listed as "skipped: needs X GB" and never run, whatever the controls.
The last results stay on the explorer (`records`, and the plot as `figure`). Displayed, an
explorer is its live widget in Jupyter; the book, which has no kernel, shows `static_html()`: the
run made when the notebook was executed, with a note that the explorer measures live.
"""

import html
import math

import ipywidgets as widgets
import numpy as np
import torch

from linattn_core.attention import LinearAttentionState, linear_attention
from linattn_core.bench import complexity, default_methods, slopes
from linattn_core.bench.complexity import powers_of_two
from linattn_core.bench.memory import make_inputs, memory_budget, skip_reason
from linattn_core.bench.plot import loglog_panel, plot_complexity
from linattn_core.bench.timing import median_times
from linattn_core.book.plotting import image_html
from linattn_core.costs import chunked_peak_bytes, fit_chunk_model
from linattn_core.decoding import linear_decode_step, softmax_decode_step

SIZES = [2**p for p in range(4, 25)]  # the N choices: 16 ... 16M, far past what fits
CHUNK_SIZES = [2**p for p in range(13)]  # 1 ... 4096
CALIBRATION_N = 1024  # the chunk-size explorer's time guard times one call this long first


class Explorer:
    """Controls, a Run button, a progress bar, a plot and a table. Subclasses provide
    `measure()` -> records (advancing `progress`), `draw()` -> figure and `table_html()`."""

    title = ""

    def __init__(self, controls, *, memory_budget=None):
        self.memory_budget = memory_budget
        self.records = []
        self.figure = None  # the last plot, a matplotlib figure
        self.button = widgets.Button(description="Run", button_style="primary")
        self.button.on_click(lambda _: self.run())
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description="progress")
        self.plot = widgets.Output()
        self.table = widgets.HTML()
        self.widget = widgets.VBox(
            [
                widgets.HTML(f"<b>{self.title}</b>"),
                *controls,
                widgets.HBox([self.button, self.progress]),
                self.plot,
                self.table,
            ]
        )

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = self.widget._repr_mimebundle_(include=include, exclude=exclude)
        return bundle | {"text/html": self.static_html()}

    def static_html(self):
        """What the book shows without a kernel: the last run (its settings, plot and table)
        and a note that the explorer measures live in Jupyter. No control is shown: none
        could respond without a kernel."""
        if not self.records:
            run = "<p>Not run when the notebook was executed.</p>"
        else:
            settings = ", ".join(
                f"{control.description} = {_shown(control.value)}"
                for control in _controls(self.widget)
            )
            run = f'<div style="font-size: 0.85em">Run shown: {html.escape(settings)}.</div>'
            if self.figure is not None:
                run += image_html(self.figure, alt=self.title)
            run += self.table_html()
        return (
            f'<div class="live-explorer"><b>{html.escape(self.title)}</b>'
            '<div class="live-explorer-note" style="font-size: 0.85em; color: #555">'
            "This explorer measures live: in Jupyter, with a running kernel, its controls and "
            "Run button time your machine. Here: the run made when the notebook was executed."
            f"</div>{run}</div>"
        )

    def budget(self, device="cpu"):
        """Bytes a point may use: the explorer's budget, or half the memory available now."""
        return memory_budget(device) if self.memory_budget is None else self.memory_budget

    def run(self):
        """Measure with the current settings, then redraw the plot and the table."""
        import matplotlib.pyplot as plt
        from IPython.display import display

        self.button.disabled = True
        try:
            self.records = self.measure()
        finally:
            self.button.disabled = False
        self.plot.clear_output(wait=True)
        self.figure = self.draw()
        with self.plot:
            display(self.figure)
        plt.close(self.figure)
        self.table.value = self.table_html()
        return self.records

    def start_progress(self, total):
        self.progress.max, self.progress.value = max(total, 1), 0


def _controls(widget):
    """The settings among a widget tree's leaves: every control with a description and value."""
    if isinstance(widget, widgets.Box):
        return [leaf for child in widget.children for leaf in _controls(child)]
    described = isinstance(widget, widgets.ValueWidget) and getattr(widget, "description", "")
    return [widget] if described and not isinstance(widget, widgets.IntProgress) else []


def _shown(value):
    if isinstance(value, tuple):
        return "–".join(map(str, value)) if len(value) == 2 else ", ".join(map(str, value))
    return f"{value:g}" if isinstance(value, float) else str(value)


def _wide():
    """Layout options of a range slider wide enough to read."""
    return {"layout": widgets.Layout(width="420px"), "style": {"description_width": "initial"}}


def records_table(records, columns):
    """An HTML table of records; `columns` is a list of (header, function of a record -> str)."""
    cell_style = 'style="padding: 1px 10px; border-bottom: 1px solid #ddd"'
    head = "".join(f"<th {cell_style}>{html.escape(header)}</th>" for header, _ in columns)
    rows = "".join(
        "<tr>"
        + "".join(f"<td {cell_style}>{html.escape(cell(r))}</td>" for _, cell in columns)
        + "</tr>"
        for r in records
    )
    return f'<table style="border-collapse: collapse"><tr>{head}</tr>{rows}</table>'


def _number(value, unit="", scale=1.0):
    return "" if value is None else f"{value * scale:.3g}{unit}"


class ComplexityExplorer(Explorer):
    """Time and peak memory of attention methods against N, measured live with the guard.

    >>> explorer = ComplexityExplorer()
    >>> explorer.n_range.value = (256, 2**24)
    >>> explorer.methods.value = ("softmax_naive",)
    >>> explorer.measure_memory.value = False
    >>> explorer.memory_budget = 2**30
    >>> records = explorer.measure()  # N = 256 ... 2^24: the large N are refused, not run
    >>> records[0]["skipped"], records[-1]["skipped"]
    (None, 'needs ~5.49e+06 GB > budget 1.07 GB')
    """

    title = "Complexity explorer: time and memory against N"

    def __init__(self, *, device="cpu", memory_budget=None):
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        self.device = widgets.Dropdown(options=devices, value=device, description="device")
        self.n_range = widgets.SelectionRangeSlider(
            options=SIZES,
            index=(SIZES.index(256), SIZES.index(4096)),
            description="N range",
            **_wide(),
        )
        self.d = widgets.Dropdown(options=[16, 32, 64, 128], value=64, description="d")
        self.causal = widgets.Checkbox(value=True, description="causal")
        methods = default_methods(device)
        self.methods = widgets.SelectMultiple(
            options=methods, value=tuple(methods), description="methods", rows=len(methods)
        )
        self.repeats = widgets.IntSlider(value=3, min=1, max=9, description="repeats")
        self.max_seconds = widgets.FloatLogSlider(
            value=5, base=10, min=-1, max=2, description="max s/point"
        )
        self.measure_memory = widgets.Checkbox(value=True, description="measure memory")
        self.device.observe(self._on_device, names="value")
        row = widgets.HBox
        super().__init__(
            [
                row([self.device, self.d]),
                self.n_range,
                row([self.methods, widgets.VBox([self.causal, self.measure_memory])]),
                row([self.repeats, self.max_seconds]),
            ],
            memory_budget=memory_budget,
        )

    def _on_device(self, change):
        device = change["new"]
        if device == "cuda" and not torch.cuda.is_available():
            self.table.value = (
                "<p>device 'cuda' needs a CUDA GPU, and torch.cuda.is_available() is False "
                "here: the explorer measures on the CPU.</p>"
            )
            device = self.device.value = "cpu"
        self.methods.options = default_methods(device)
        self.methods.value = tuple(self.methods.options)
        self.methods.rows = len(self.methods.options)

    def measure(self):
        """Run `bench.complexity` one N at a time (methods interleaved), advancing the bar."""
        ns = powers_of_two(*self.n_range.value)
        self.start_progress(len(ns))
        records = []
        for n in ns:
            records += complexity(
                list(self.methods.value),
                [n],
                d=self.d.value,
                device=self.device.value,
                causal=self.causal.value,
                repeats=self.repeats.value,
                max_seconds=self.max_seconds.value,
                memory_budget=self.budget(self.device.value),
                measure_memory=self.measure_memory.value,
            )
            self.progress.value += 1
        return records

    def draw(self):
        import matplotlib.pyplot as plt

        figure, axes = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
        plot_complexity(self.records, axes=axes)
        if not any(r["peak_bytes"] for r in self.records):
            axes[1].set_title("memory not measured (tick 'measure memory')", fontsize="medium")
        return figure

    def table_html(self):
        fitted = slopes(self.records)
        columns = [
            ("method", lambda r: r["method"]),
            ("N", lambda r: str(r["n"])),
            ("time (ms)", lambda r: _number(r["median_ms"])),
            ("peak memory (MB)", lambda r: _number(r["peak_bytes"], scale=1e-6)),
            ("note", lambda r: f"skipped: {r['skipped']}" if r["skipped"] else ""),
        ]
        fits = ", ".join(f"{m} {s:.1f}" for m, s in fitted.items())
        return records_table(self.records, columns) + f"<p>time slopes: {html.escape(fits)}</p>"


class ChunkSizeExplorer(Explorer):
    """Time of `linear_attention(..., causal=True, method="chunked")` against the chunk size.

    >>> explorer = ChunkSizeExplorer(memory_budget=2**20)
    >>> explorer.n.value, explorer.chunk_range.value = 2**16, (16, 64)
    >>> records = explorer.measure()  # 1 MiB is far too little: nothing runs
    >>> [r["skipped"] for r in records]
    ['needs ~0.217 GB > budget 0.00105 GB', 'needs ~0.141 GB > budget 0.00105 GB', \
'needs ~0.117 GB > budget 0.00105 GB']
    >>> [r["median_ms"] for r in records]
    [None, None, None]
    """

    title = "Chunk-size explorer: intra-chunk quadratic work against inter-chunk state updates"

    def __init__(self, *, memory_budget=None):
        self.n = widgets.Dropdown(
            options=[2**p for p in range(10, 21)], value=4096, description="N"
        )
        self.d = widgets.Dropdown(options=[16, 32, 64, 128], value=64, description="d")
        self.chunk_range = widgets.SelectionRangeSlider(
            options=CHUNK_SIZES, index=(2, 10), description="chunk sizes", **_wide()
        )
        self.repeats = widgets.IntSlider(value=3, min=1, max=9, description="repeats")
        self.max_seconds = widgets.FloatLogSlider(
            value=5, base=10, min=-1, max=2, description="max s/point"
        )
        super().__init__(
            [
                widgets.HBox([self.n, self.d]),
                self.chunk_range,
                widgets.HBox([self.repeats, self.max_seconds]),
            ],
            memory_budget=memory_budget,
        )
        self.model = None

    def measure(self):
        """Time each chunk size that fits the budget (each in its own loop, for the bar), then
        fit the cost model through the measured points. A chunk size whose time, extrapolated
        linearly in N from one call at N = 1024, exceeds `max_seconds` is skipped too."""
        n, d, budget = self.n.value, self.d.value, self.budget()
        chunk_sizes = powers_of_two(*self.chunk_range.value)
        self.start_progress(len(chunk_sizes))
        records, inputs = [], None
        for c in chunk_sizes:
            needed = 3 * n * d * 4 + chunked_peak_bytes(n, d, c)  # inputs and working set
            record = {"chunk_size": c, "n": n, "d": d, "median_ms": None, "model_ms": None}
            record["skipped"] = skip_reason(needed, budget)
            if not record["skipped"]:
                inputs = inputs or make_inputs(n, d)
                record["skipped"] = self._too_slow(inputs, c)
                if record["skipped"] is None:
                    record["median_ms"] = 1e3 * self._seconds(inputs, c, self.repeats.value)
            records.append(record)
            self.progress.value += 1
        measured = [r for r in records if r["median_ms"] is not None]
        self.model = None
        if len(measured) >= 2:
            cs, seconds = (
                [r["chunk_size"] for r in measured],
                [r["median_ms"] / 1e3 for r in measured],
            )
            self.model = fit_chunk_model(n, d, cs, seconds)
            for r in records:
                r["model_ms"] = 1e3 * self.model[2](r["chunk_size"])
        return records

    def _too_slow(self, inputs, chunk_size):
        """Why timing this chunk size would exceed `max_seconds`, or None."""
        n = inputs[0].shape[-2]
        calibration = tuple(x[..., : min(n, CALIBRATION_N), :] for x in inputs)
        one_call = self._seconds(calibration, chunk_size, 1) * n / calibration[0].shape[-2]
        seconds = (1 + self.repeats.value) * one_call  # a warm-up call, then the repeats
        return skip_reason(0, math.inf, seconds=seconds, max_seconds=self.max_seconds.value)

    @staticmethod
    def _seconds(inputs, chunk_size, repeats):
        def call():
            return linear_attention(*inputs, causal=True, method="chunked", chunk_size=chunk_size)

        with torch.inference_mode():
            return median_times({"chunked": call}, repeats=repeats)["chunked"]

    def draw(self):
        import matplotlib.pyplot as plt

        figure, axis = plt.subplots(figsize=(6.5, 3.8), layout="constrained")
        measured = [r for r in self.records if r["median_ms"] is not None]
        if measured:
            cs = [r["chunk_size"] for r in measured]
            axis.plot(cs, [r["median_ms"] for r in measured], "o-", label="measured")
            if self.model is not None:
                fine = np.geomspace(cs[0], cs[-1], 50)
                rate, tau, predict = self.model
                label = f"model: F(C)/{rate / 1e9:.2g} GFLOP/s + (N/C)·{tau * 1e6:.2g} µs"
                axis.plot(fine, [1e3 * predict(c) for c in fine], "--", color="grey", label=label)
            axis.legend(fontsize="small")
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set(xlabel="chunk size C", ylabel="time per call (ms)")
        axis.set_title(f"N = {self.n.value}, d = {self.d.value}, causal", fontsize="medium")
        axis.grid(True, which="both", alpha=0.3)
        return figure

    def table_html(self):
        columns = [
            ("chunk size C", lambda r: str(r["chunk_size"])),
            ("time (ms)", lambda r: _number(r["median_ms"])),
            ("model (ms)", lambda r: _number(r.get("model_ms"))),
            ("note", lambda r: f"skipped: {r['skipped']}" if r["skipped"] else ""),
        ]
        return records_table(self.records, columns)


class GenerationExplorer(Explorer):
    """Per-token latency against position: a KV-cache softmax step vs the recurrent linear step.

    >>> explorer = GenerationExplorer(memory_budget=2**20)
    >>> explorer.positions.value = (64, 2**24)
    >>> records = explorer.measure()
    >>> records[0]["skipped"], records[-1]["skipped"]
    (None, 'needs ~13.1 GB > budget 0.00105 GB')
    """

    title = "Generation explorer: the cost of one token against its position"

    def __init__(self, *, memory_budget=None):
        self.positions = widgets.SelectionRangeSlider(
            options=SIZES,
            index=(SIZES.index(64), SIZES.index(2**15)),
            description="positions",
            **_wide(),
        )
        self.d = widgets.Dropdown(options=[16, 32, 64, 128], value=64, description="d")
        self.repeats = widgets.IntSlider(value=15, min=1, max=50, description="repeats")
        super().__init__(
            [self.positions, widgets.HBox([self.d, self.repeats])], memory_budget=memory_budget
        )

    @staticmethod
    def cache_bytes(position, d, itemsize=4):
        """Keys and values cached for `position` tokens, plus the step's scores and weights."""
        return 2 * position * d * itemsize + 2 * position * itemsize

    def measure(self):
        d, budget = self.d.value, self.budget()
        positions = powers_of_two(*self.positions.value)
        self.start_progress(len(positions))
        records = []
        for t in positions:
            record = {"position": t, "d": d, "softmax_us": None, "linear_us": None}
            record["cache_bytes"], record["state_bytes"] = self.cache_bytes(t, d), 4 * d * (d + 1)
            record["skipped"] = skip_reason(record["cache_bytes"], budget)
            if not record["skipped"]:
                record["softmax_us"], record["linear_us"] = self._time_step(t, d)
            records.append(record)
            self.progress.value += 1
        return records

    def _time_step(self, position, d):
        """Median µs of one token at `position`, each step timed in its own steady loop (as in
        generation; interleaved, the softmax step's sweep over the cache would evict the
        linear step's working set and charge it for cache misses that a decode loop avoids)."""
        generator = torch.Generator().manual_seed(0)
        k_cache, v_cache = torch.rand(2, position, d, generator=generator)  # (t, d) each
        q = torch.rand(d, generator=generator)  # (d,)
        # the summary of the same t tokens: S = Σ v_j k_jᵀ (d, d), z = Σ k_j (d,)
        state = LinearAttentionState(S=v_cache.mT @ k_cache, z=k_cache.sum(dim=0))
        steps = {
            "softmax": lambda: softmax_decode_step(q, k_cache, v_cache),
            "linear": lambda: linear_decode_step(q, q, q, initial_state=state),
        }
        with torch.inference_mode():
            times = {
                name: median_times({name: step}, repeats=self.repeats.value, warmup=2)[name]
                for name, step in steps.items()
            }
        return 1e6 * times["softmax"], 1e6 * times["linear"]

    def draw(self):
        import matplotlib.pyplot as plt

        figure, axes = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
        ts = [r["position"] for r in self.records]
        loglog_panel(
            axes[0],
            {
                "softmax + KV cache": (ts, [r["softmax_us"] for r in self.records]),
                "linear, recurrent": (ts, [r["linear_us"] for r in self.records]),
            },
            xlabel="position t",
            ylabel="time per token (µs)",
            guides=(0, 1),
        )
        ran = [r for r in self.records if not r["skipped"]]
        loglog_panel(
            axes[1],
            {
                "KV cache": ([r["position"] for r in ran], [r["cache_bytes"] for r in ran]),
                "recurrent state": ([r["position"] for r in ran], [r["state_bytes"] for r in ran]),
            },
            xlabel="position t",
            ylabel="memory carried per head (bytes)",
            guides=(0, 1),
        )
        return figure

    def table_html(self):
        columns = [
            ("position", lambda r: str(r["position"])),
            ("softmax + KV cache (µs)", lambda r: _number(r["softmax_us"])),
            ("linear recurrent (µs)", lambda r: _number(r["linear_us"])),
            ("KV cache (MB)", lambda r: _number(r["cache_bytes"], scale=1e-6)),
            ("state (MB)", lambda r: _number(r["state_bytes"], scale=1e-6)),
            ("note", lambda r: f"skipped: {r['skipped']}" if r["skipped"] else ""),
        ]
        return records_table(self.records, columns)
