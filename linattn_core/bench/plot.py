"""Time and memory against N on log-log axes, from `complexity` records, with fitted slopes."""

import json

from linattn_core.bench.complexity import slopes

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


def plot_complexity(records, *, title=None, axes=None):
    """Draw time and memory against N on log-log axes; return the figure.

    Each method is one line through its measured points, labelled with its log-log slope (the
    empirical exponent of `linattn_core.timing.loglog_slope`); dashed grey guides show O(N) and
    O(N²) through the first measured point of the panel. Skipped points are not drawn.

    Args:
        records: as returned by `linattn_core.bench.complexity`.
        title: the figure's title.
        axes: two matplotlib axes to draw on; None creates a figure.

    >>> records = [{"method": "m", "n": n, "median_ms": n / 1e3, "peak_bytes": 8 * n}
    ...            for n in (256, 512, 1024)]
    >>> figure = plot_complexity(records)
    >>> [axis.get_legend_handles_labels()[1][0] for axis in figure.axes]
    ['m (slope 1.00)', 'm (slope 1.00)']
    """
    import matplotlib.pyplot as plt

    if axes is None:
        figure, axes = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    else:
        figure = axes[0].figure
    methods = list(dict.fromkeys(record["method"] for record in records))
    for axis, (key, label) in zip(axes, PANELS, strict=True):
        fitted = slopes(records, key=key)
        anchor = None
        for method in methods:
            points = sorted(
                (r["n"], r[key]) for r in records if r["method"] == method and r.get(key)
            )
            if not points:
                continue
            ns, values = zip(*points, strict=True)
            slope = fitted.get(method)
            name = method if slope is None else f"{method} (slope {slope:.2f})"
            axis.plot(ns, values, marker="o", label=name)
            anchor = anchor or points[0]
        if anchor is not None:
            _guides(axis, anchor, max(r["n"] for r in records))
        axis.set(xscale="log", yscale="log", xlabel="sequence length N", ylabel=label)
        axis.set_xscale("log", base=2)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize="small")
    if title:
        figure.suptitle(title)
    return figure


def _guides(axis, anchor, n_max):
    """Dashed O(N) and O(N²) lines through `anchor`, out to `n_max`."""
    n0, value0 = anchor
    ns = [n0, n_max]
    for exponent, style in ((1, "--"), (2, ":")):
        label = "O(N)" if exponent == 1 else "O(N²)"
        values = [value0 * (n / n0) ** exponent for n in ns]
        axis.plot(ns, values, linestyle=style, color="grey", linewidth=1, label=label)


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
