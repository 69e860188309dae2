"""Execute chapter notebooks in place, top to bottom, storing outputs and widget state.

This is how outputs get into the committed notebooks (`make notebooks`): the book is built
with execution off, so it shows exactly what this script stored and what nbval re-checks.
The kernels run with LINATTN_RECORD=1, which tells chapters that measure (the scaling chapter)
to store their measurements under figures/ with the book; other runs leave them alone.

    python scripts/execute_notebooks.py                  # every notebook under chapters/
    python scripts/execute_notebooks.py chapters/x.ipynb # just these
"""

import argparse
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent


def execute(path: Path, timeout: int) -> float:
    """Run one notebook from a fresh kernel (cwd = its folder) and write it back."""
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        store_widget_state=True,
        record_timing=False,
    )
    start = time.perf_counter()
    client.execute()
    nbformat.write(notebook, path)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = parser.parse_args()
    os.environ["LINATTN_RECORD"] = "1"  # inherited by the kernels
    os.environ.pop("LINATTN_FRAMES", None)  # the book's figures hold every frame
    paths = args.notebooks or sorted((ROOT / "chapters").glob("*.ipynb"))
    for path in paths:
        print(f"executing {path.relative_to(ROOT) if path.is_absolute() else path} ...", flush=True)
        print(f"  done in {execute(path, args.timeout):.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
