"""Structure of the chapter notebooks and the table of contents.

nbval re-executes the notebooks and compares outputs; these checks catch what it cannot: a
notebook committed with unexecuted cells, cells run out of order, stored errors, widgets saved
without their state, and pages missing from (or dangling in) the table of contents.
"""

import json
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb"))
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
UNCOMPARED = {"nbval-ignore-output", "nbval-skip"}


def code_cells(path):
    notebook = json.loads(path.read_text())
    cells = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    return notebook, [c for c in cells if "".join(c["source"]).strip()]


def toc_files():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [chapter["file"] for chapter in part["chapters"]]
    return files


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executed_in_order_without_errors(path):
    notebook, cells = code_cells(path)
    counts = [c["execution_count"] for c in cells]
    unexecuted = [i for i, n in enumerate(counts) if n is None]
    assert not unexecuted, (
        f"{path.name}: code cells {unexecuted} were never executed (make notebooks)"
    )
    assert counts == list(range(1, len(cells) + 1)), (
        f"{path.name}: cells executed out of order {counts}: re-run top to bottom (make notebooks)"
    )
    errors = [o.get("ename") for c in cells for o in c["outputs"] if o["output_type"] == "error"]
    assert not errors, f"{path.name}: stored error outputs {errors}"
    assert notebook["metadata"]["kernelspec"]["name"] == "python3", f"{path.name}: kernel"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_widgets_have_saved_state_and_are_not_compared(path):
    notebook, cells = code_cells(path)
    views = [
        (i, o["data"][WIDGET_VIEW]["model_id"])
        for i, c in enumerate(cells)
        for o in c["outputs"]
        if WIDGET_VIEW in o.get("data", {})
    ]
    state = (
        notebook["metadata"]
        .get("widgets", {})
        .get("application/vnd.jupyter.widget-state+json", {})
        .get("state", {})
    )
    for i, model_id in views:
        assert model_id in state, f"{path.name}: widget of code cell {i} has no saved state"
        tags = set(cells[i]["metadata"].get("tags", []))
        assert tags & UNCOMPARED, f"{path.name}: widget cell {i} needs an nbval-ignore-output tag"


def test_table_of_contents_matches_the_pages():
    listed = toc_files()
    for file in listed:
        matches = [p for p in ROOT.glob(f"{file}.*") if p.suffix in {".md", ".ipynb"}]
        assert matches, f"_toc.yml lists {file}, which has no .md or .ipynb file"
    pages = {
        p.relative_to(ROOT).with_suffix("").as_posix()
        for p in (ROOT / "chapters").iterdir()
        if p.suffix in {".md", ".ipynb"}
    }
    unlisted = sorted(pages - set(listed))
    assert not unlisted, f"pages in chapters/ missing from _toc.yml: {unlisted}"
