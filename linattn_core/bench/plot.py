"""The one plotter: time and memory against N on log-log axes, with fitted slopes."""

import itertools
import json

from linattn_core.bench.timing import loglog_slope

PANELS = (
    ("median_ms", "median time per call (ms)"),
    ("peak_bytes", "peak memory per call (bytes)"),
)


def load_results(path):
    """(records, provenance, settings) from a JSON file written by `python -m linattn_core.bench
    complexity` (a bare list of records also works, with empty provenance and settings)."""
    with open(path) as file:
        data = json.load(file)
    if isinstance(data, list):
        return data, {}, {}
    return data["records"], data.get("provenance", {}), data.get("settings", {})


def plot_complexity(records, *, title=None, axes=None, up_to=None):
    """Draw time and memory against N on log-log axes (`loglog_panel`); return the figure.

    Args:
        records: as returned by `linattn_core.bench.complexity` (skipped points are not drawn).
        title: the figure's title.
        axes: two matplotlib axes to draw on; None creates a figure.
        up_to: draw the points up to this N, the rest faintly (None: all).

    >>> records = [{"method": "m", "n": n, "median_ms": n / 1e3, "peak_bytes": 8 * n}
    ...            for n in (256, 512, 1024)]
    >>> figure = plot_complexity(records)
    >>> [axis.get_legend_handles_labels()[1][0] for axis in figure.axes]
    ['m (slope 1.00)', 'm (slope 1.00)']
    """
    import matplotlib.pyplot as plt

    if axes is None:
        figure, axes = plt.subplots(1, 2, figsize=(9, 3.8), layout="constrained")
    else:
        figure = axes[0].figure
    methods = list(dict.fromkeys(record["method"] for record in records))
    for axis, (key, label) in zip(axes, PANELS, strict=True):
        series = {
            method: (
                [r["n"] for r in records if r["method"] == method],
                [r.get(key) for r in records if r["method"] == method],
            )
            for method in methods
        }
        loglog_panel(axis, series, xlabel="sequence length N", ylabel=label, up_to=up_to)
    if title:
        figure.suptitle(title)
    return figure


def loglog_panel(axis, series, *, xlabel, ylabel, guides=(1, 2), up_to=None):
    """One log-log panel: a line per series labelled with its log-log slope (the empirical
    exponent of `linattn_core.bench.timing.loglog_slope`), and dashed grey guides O(N^p) for p in
    `guides` through the first point drawn. The one plotter of the command line, the explorers and
    the scaling chapter.

    Args:
        axis: a matplotlib axis.
        series: dict label -> (xs, ys); points with a missing or non-positive y are left out.
        xlabel, ylabel: axis labels.
        guides: exponents of the guide lines.
        up_to: draw the points up to this x (and fit the slope there), those beyond faintly,
            with a vertical line at `up_to`; None: all.

    >>> import matplotlib.pyplot as plt
    >>> figure, axis = plt.subplots()
    >>> loglog_panel(axis, {"m": ([1, 2, 4], [3, 6, 12])}, xlabel="N", ylabel="ms")
    >>> axis.get_legend_handles_labels()[1]
    ['m (slope 1.00)', 'O(N)', 'O(N²)']
    >>> plt.close(figure)
    """
    anchor, x_max = None, None
    for i, (label, (xs, ys)) in enumerate(series.items()):
        points = sorted((x, y) for x, y in zip(xs, ys, strict=True) if y is not None and y > 0)
        shown = [(x, y) for x, y in points if up_to is None or x <= up_to]
        if not shown:
            continue
        px, py = zip(*shown, strict=True)
        name = label if len(px) < 2 else f"{label} (slope {loglog_slope(px, py):.2f})"
        if len(shown) < len(points):
            axis.plot(*zip(*points, strict=True), color=f"C{i}", alpha=0.2)
        axis.plot(px, py, marker="o", color=f"C{i}", label=name)
        anchor = anchor or shown[0]
        x_max = max(px[-1], x_max or px[-1])
    if anchor is not None and x_max > anchor[0]:
        for exponent, style in zip(guides, ("--", ":", "-."), strict=False):
            name = {0: "O(1)", 1: "O(N)", 2: "O(N²)"}.get(exponent, f"O(N^{exponent})")
            ys = [anchor[1] * (x / anchor[0]) ** exponent for x in (anchor[0], x_max)]
            axis.plot((anchor[0], x_max), ys, style, color="grey", linewidth=1, label=name)
    if up_to is not None:
        axis.axvline(up_to, color="grey", linewidth=0.8)
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.set(xlabel=xlabel, ylabel=ylabel)
    axis.grid(True, which="both", alpha=0.3)
    if anchor is not None:
        axis.legend(fontsize="small")


GPU_SERIES = {  # op -> (label, method or "sdpa" for the fastest pinned SDPA backend)
    "linear": (("ours", "linear_triton"), ("FLA", "fla_chunk_linear_attn"), ("SDPA", "sdpa")),
    "delta": (("ours", "delta_triton"), ("FLA", "fla_chunk_delta_rule")),
    "gated": (("ours", "gated_triton"), ("FLA", "fla_chunk_gated_delta_rule")),
}
GPU_OPS = {"linear": "linear attention", "delta": "delta rule", "gated": "gated delta rule"}


def plot_gpu_comparison(rows, *, key="median_ms", axes=None, title=None):
    """A GPU comparison (`gpu.gpu_benchmark` or `gpu_check` rows, one shape sweep per op and
    head dimension d) on log-log panels, a row of two (forward, forward+backward) for each op of
    `GPU_SERIES` that has rows — linear attention, the delta rule, the gated delta rule — ours
    against FLA's and SDPA's fastest backend, `key` "median_ms" or "peak_bytes" (in MB) against
    N, a line per d where an op was timed at several; return the figure.

    >>> rows = [{"op": op, "method": m, "mode": mode, "N": n, "d": d, "median_ms": n / s,
    ...          "peak_bytes": n} for op, m, s, ds in (("linear", "linear_triton", 2e3, [64]),
    ...                                                 ("linear", "sdpa_flash", 1e3, [64]),
    ...                                                 ("gated", "gated_triton", 1e3, [64, 128]))
    ...         for mode in ("fwd", "fwd+bwd") for n in (1024, 2048) for d in ds]
    >>> figure = plot_gpu_comparison(rows)
    >>> [axis.get_title() for axis in figure.axes[::2]]
    ['linear attention, fwd', 'gated delta rule, fwd']
    >>> figure.axes[0].get_legend_handles_labels()[1][:2]
    ['ours (slope 1.00)', 'SDPA (slope 1.00)']
    >>> figure.axes[2].get_legend_handles_labels()[1][:2]
    ['ours, d = 64 (slope 1.00)', 'ours, d = 128 (slope 1.00)']
    """
    import matplotlib.pyplot as plt

    ops = [op for op in GPU_SERIES if any(r.get("op", "linear") == op for r in rows)]
    if axes is None:
        _, axes = plt.subplots(len(ops), 2, figsize=(9, 3.5 * len(ops)), layout="constrained")
        axes = axes.reshape(len(ops), 2)
    figure = axes[0][0].figure
    scale, unit = (1, "ms") if key == "median_ms" else (2**-20, "MB")
    for row_axes, op in zip(axes, ops, strict=True):
        dims = sorted({r.get("d") or 0 for r in rows if r.get("op", "linear") == op})
        for axis, mode in zip(row_axes, ("fwd", "fwd+bwd"), strict=True):
            series = {}
            for (label, method), d in itertools.product(GPU_SERIES[op], dims):
                points = {}
                for r in rows:
                    if (r.get("op", "linear"), r["mode"], r.get("d") or 0) != (op, mode, d):
                        continue
                    name = "sdpa" if r["method"].startswith("sdpa_") else r["method"]
                    if name == method and r.get(key):
                        value = scale * r[key]
                        points[r["N"]] = min(points.get(r["N"], value), value)
                if points:
                    named = label if len(dims) == 1 else f"{label}, d = {d}"
                    series[named] = (list(points), list(points.values()))
            loglog_panel(axis, series, xlabel="sequence length N", ylabel=f"{unit}, {mode}")
            axis.set_title(f"{GPU_OPS[op]}, {mode}", fontsize="medium")
    if title:
        figure.suptitle(title)
    return figure


def plot_file(path, out):
    """Plot a results file to an image file (PNG, SVG, ...), titled with its provenance."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records, provenance, settings = load_results(path)
    threads = provenance.get("threads")
    parts = (
        provenance.get("device"),
        settings.get("d") and f"d = {settings['d']}",
        settings.get("dtype"),
        threads and f"{threads} thread{'s' if threads > 1 else ''}",
        provenance.get("date", "")[:10],
    )
    title = " · ".join(str(part) for part in parts if part)
    figure = plot_complexity(records, title=title or None)
    figure.savefig(out, dpi=120)
    plt.close(figure)
