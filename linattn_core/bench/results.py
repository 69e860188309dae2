"""Committed GPU measurements: load them from a folder and read off the crossover length.

The files are those the command line writes: `complexity --device cuda` results (records, as on
the CPU) and `gpu` comparisons ({"provenance", "roofline", "formulas", "rows"}, see `gpu.py`).
From a comparison's crossover sweep, `measured_crossovers` finds the measured crossover length (the
shortest N from which our kernel beats SDPA's fastest backend) and the roofline's prediction
from the matmul rate P and copy bandwidth β measured in the same run: for the forward pass
N* = max(2bP/β, 2(C + d)), the proposition of the scaling chapter (4P/β for 16-bit inputs when
linear attention is memory-bound; `linattn_core.costs.roofline_crossover_length`).
"""

import json
from pathlib import Path

from linattn_core.costs import roofline_crossover_length

OUR_KERNEL = "linear_triton"
SHAPE_KEYS = ("sweep", "B", "H", "N", "d")


def load_gpu_results(folder):
    """The GPU measurements among the JSON files of `folder` (CPU results are left out).

    Returns:
        {"complexity": [...], "comparisons": [...]}, each list sorted by file name:
        complexity  {"path", "provenance", "records"} of `complexity --device cuda` runs;
        comparisons {"path", "provenance", "roofline", "rows", "crossovers"} of `gpu` runs,
                    rows as written (with their shape: sweep, B, H, N, d), crossovers as
                    returned by `measured_crossovers(rows, roofline)`.

    >>> load_gpu_results("/nonexistent")
    {'complexity': [], 'comparisons': []}
    """
    results = {"complexity": [], "comparisons": []}
    for path in sorted(Path(folder).glob("*.json")):
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            continue
        origin = data.get("provenance", {})
        records = data.get("records") or []
        if records and all(record.get("device") == "cuda" for record in records):
            results["complexity"].append(
                {"path": str(path), "provenance": origin, "records": records}
            )
        elif "rows" in data and "roofline" in data:
            for i, row in enumerate(data["rows"]):
                missing = [key for key in SHAPE_KEYS if key not in row]
                if missing:
                    raise ValueError(
                        f"load_gpu_results: {path} rows[{i}] must have the keys "
                        f"{', '.join(SHAPE_KEYS)}; missing {', '.join(missing)}"
                    )
            results["comparisons"].append(
                {
                    "path": str(path),
                    "provenance": origin,
                    "roofline": data["roofline"],
                    "rows": data["rows"],
                    "crossovers": measured_crossovers(data["rows"], data["roofline"]),
                }
            )
    return results


def measured_crossovers(rows, roofline, *, method=OUR_KERNEL):
    """Measured and predicted crossover of `method` against SDPA's fastest backend.

    For each (d, B, H, mode, dtype) of the rows whose sweep is "crossover": the N measured, and
    the shortest N from which `method` is faster than the fastest SDPA backend at that N and at
    every longer N measured (`vs_sdpa_best` > 1); None when it is not faster at the longest.

    Returns:
        list of {"d", "B", "H", "mode", "dtype", "ns", "measured_n", "predicted_n"}.

    >>> rows = [{"sweep": "crossover", "B": 1, "H": 16, "N": n, "d": 64, "mode": "fwd",
    ...          "dtype": "bfloat16", "method": "linear_triton", "vs_sdpa_best": s}
    ...         for n, s in ((1024, 0.8), (2048, 1.1), (4096, 0.9), (8192, 1.4), (16384, 2.0))]
    >>> [found] = measured_crossovers(rows, {"matmul_tflops": 600, "copy_gbps": 2400})
    >>> found["measured_n"], found["predicted_n"]
    (8192, 1000.0)
    """
    groups = {}
    for row in rows:
        if row["sweep"] == "crossover" and row["method"] == method:
            key = (row["d"], row["B"], row["H"], row["mode"], row["dtype"])
            groups.setdefault(key, []).append(row)
    found = []
    for (d, batch, heads, mode, dtype), group in groups.items():
        group.sort(key=lambda row: row["N"])
        measured = None
        for row in reversed(group):  # walk down from the longest N while the kernel is ahead
            if not (row.get("vs_sdpa_best") or 0) > 1:
                break
            measured = row["N"]
        found.append(
            {
                "d": d,
                "B": batch,
                "H": heads,
                "mode": mode,
                "dtype": dtype,
                "ns": [row["N"] for row in group],
                "measured_n": measured,
                "predicted_n": roofline_crossover_length(roofline, d=d, mode=mode, dtype=dtype),
            }
        )
    return found
