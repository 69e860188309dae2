"""The book's math macros in the chapter notebooks, for JupyterLab (scripts/sync_macros.py).

`_config.yml` is the macros' one home; `make macros` writes them into each chapter's first cell
as the MyST front matter that jupyterlab-myst reads (tests/book/test_lab.py checks that
JupyterLab then typesets them). A chapter whose macros differ from `_config.yml` fails here.
"""

import importlib.util
import json
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "sync_macros.py"
NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb"))


def load_script():
    spec = importlib.util.spec_from_file_location("sync_macros", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sync = load_script()


def book_macros():
    """`_config.yml`'s MathJax macros as KaTeX names them: `\\R`, and a body without the
    argument count (`[body, 1]` becomes `body`)."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    macros = config["sphinx"]["config"]["mathjax3_config"]["tex"]["macros"]
    return {f"\\{k}": v[0] if isinstance(v, list) else v for k, v in macros.items()}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_carries_the_book_macros(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    first = cells[0]
    where = f"{path.name}: the first cell should hold the macros of _config.yml (run make macros)"
    assert first["cell_type"] == "markdown" and first.get("id") == sync.CELL_ID, where
    assert "remove-cell" in first["metadata"].get("tags", []), f"{where}, tagged remove-cell"
    macros = sync.front_matter("".join(first["source"])).get("math")
    assert macros == book_macros(), where
    assert sum(c.get("id") == sync.CELL_ID for c in cells) == 1, f"{path.name}: two macro cells"


def test_config_macros_are_the_book_macros():
    assert sync.config_macros() == book_macros()
    assert {"\\R", "\\T", "\\bigO", "\\norm"} <= set(book_macros())


def test_config_macros_refuse_what_katex_cannot_take(tmp_path):
    config = tmp_path / "_config.yml"
    tex = {"sphinx": {"config": {"mathjax3_config": {"tex": {"macros": {}}}}}}
    macros = tex["sphinx"]["config"]["mathjax3_config"]["tex"]["macros"]
    macros.update(a="\\alpha", pair=["(#1, #2)", 2])
    config.write_text(yaml.safe_dump(tex))
    assert sync.config_macros(config) == {"\\a": "\\alpha", "\\pair": "(#1, #2)"}
    for bad in (["(#1, #2)", 3], ["[#1]", 1, "default"]):
        macros["bad"] = bad
        config.write_text(yaml.safe_dump(tex))
        with pytest.raises(ValueError, match="bad"):
            sync.config_macros(config)


def test_front_matter_round_trips_quotes_and_backslashes():
    macros = {"\\q": "\\text{it's}", "\\n": "\\left\\lVert #1 \\right\\rVert"}
    assert sync.front_matter(sync.macros_source(macros)) == {"math": macros}
    assert sync.front_matter("# A title\n---\n") == {}


def test_sync_adds_one_cell_and_changes_nothing_else(tmp_path, capsys):
    # the smallest chapter, without its macro cell if `make macros` has already run
    notebook = nbformat.read(ROOT / "chapters" / "running.ipynb", as_version=4)
    notebook.cells = [c for c in notebook.cells if c.get("id") != sync.CELL_ID]
    before = nbformat.writes(notebook) + "\n"
    path = tmp_path / "running.ipynb"
    path.write_text(before, encoding="utf-8")

    assert sync.main(["--check", str(path)]) == 1
    assert str(path) in capsys.readouterr().err
    assert path.read_text(encoding="utf-8") == before  # --check writes nothing

    assert sync.main([str(path)]) == 0
    after = path.read_text(encoding="utf-8")
    synced = nbformat.reads(after, as_version=4)
    assert synced.cells[0].id == sync.CELL_ID
    assert synced.cells[0].metadata.tags == ["remove-cell"]
    synced.cells = synced.cells[1:]
    assert nbformat.writes(synced) + "\n" == before  # every other byte as it was

    assert sync.main(["--check", str(path)]) == 0
    assert sync.main([str(path)]) == 0
    assert path.read_text(encoding="utf-8") == after  # idempotent


def test_sync_updates_and_moves_a_stale_macro_cell(tmp_path):
    notebook = nbformat.v4.new_notebook()
    stale = nbformat.v4.new_markdown_cell("---\nmath:\n  '\\R': 'R'\n---\n", id=sync.CELL_ID)
    stale.metadata["tags"] = ["remove-cell", "keep-me"]
    notebook.cells = [nbformat.v4.new_markdown_cell("# Title", id="title"), stale]
    text = sync.sync_text(nbformat.writes(notebook), sync.config_macros())
    cells = nbformat.reads(text, as_version=4).cells
    assert [c.id for c in cells] == [sync.CELL_ID, "title"]
    assert sync.front_matter(cells[0].source) == {"math": book_macros()}
    assert cells[0].metadata.tags == ["remove-cell", "keep-me"]
