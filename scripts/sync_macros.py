"""Give every chapter notebook the book's math macros, for JupyterLab (`make macros`).

The macros (`\\R`, `\\T`, `\\bigO`, …) have one home: `_config.yml`
(`sphinx.config.mathjax3_config.tex.macros`), where the book's MathJax reads them. In
JupyterLab, jupyterlab-myst renders the Markdown cells with KaTeX and takes macros only from
MyST front matter (`math:`) at the top of a notebook's first Markdown cell; it reads no
notebook metadata. Myst-nb, which builds the book, does not read front matter in a
notebook's cells (it would show it as a rule and a heading), so the macros go in a cell of
their own, the first of the notebook, tagged `remove-cell`: the book leaves it out.

    python scripts/sync_macros.py                    # write the cell into chapters/*.ipynb
    python scripts/sync_macros.py --check            # exit 1 naming the notebooks that differ
    python scripts/sync_macros.py chapters/x.ipynb   # just these

Idempotent; everything else in a notebook stays byte for byte as nbformat writes it.
"""

import argparse
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
CELL_ID = "book-macros"
TAG = "remove-cell"
NOTE = (
    "% The book's notation macros, for JupyterLab (jupyterlab-myst reads this front matter).\n"
    "% Written by `make macros` from _config.yml: edit them there. The book leaves this cell\n"
    "% out (tag remove-cell)."
)


def config_macros(config: Path = ROOT / "_config.yml") -> dict[str, str]:
    """The macros of `_config.yml` as MyST front matter (and KaTeX) wants them: `{"\\\\R":
    "\\\\mathbb{R}", …}`. MathJax's `[body, number of arguments]` becomes the body, since
    KaTeX counts the `#1`…`#9` of a body itself; MathJax's optional-argument form has no
    KaTeX equivalent and is refused."""
    tex = yaml.safe_load(config.read_text())["sphinx"]["config"]["mathjax3_config"]["tex"]
    macros = {}
    for name, value in tex["macros"].items():
        if isinstance(value, list):
            body, count, *default = value
            uses = {n for n in range(1, 10) if f"#{n}" in body}
            if default or uses != set(range(1, count + 1)):
                raise ValueError(f"_config.yml: macro \\{name} {value!r} has no KaTeX form")
            value = body
        macros[f"\\{name}"] = value
    return macros


def quote(text: str) -> str:
    """A YAML single-quoted scalar: backslashes stay literal, a quote is doubled."""
    return "'" + text.replace("'", "''") + "'"


def macros_source(macros: dict[str, str]) -> str:
    lines = [f"  {quote(name)}: {quote(body)}" for name, body in macros.items()]
    return "---\nmath:\n" + "\n".join(lines) + "\n---\n" + NOTE


def front_matter(source: str) -> dict:
    """The YAML front matter at the top of a Markdown cell's source ({} if none)."""
    lines = source.split("\n")
    if not lines or lines[0].strip() != "---":
        return {}
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if end is None:
        return {}
    return yaml.safe_load("\n".join(lines[1:end])) or {}


def synced(notebook: nbformat.NotebookNode, macros: dict[str, str]) -> nbformat.NotebookNode:
    """The notebook with the macros cell first (added, updated or moved there)."""
    cells = [c for c in notebook.cells if c.get("id") != CELL_ID]
    old = next((c for c in notebook.cells if c.get("id") == CELL_ID), None)
    cell = nbformat.v4.new_markdown_cell(macros_source(macros), id=CELL_ID)
    cell.metadata = old.metadata if old is not None else nbformat.NotebookNode()
    tags = cell.metadata.get("tags", [])
    if TAG not in tags:
        cell.metadata["tags"] = [*tags, TAG]
    notebook.cells = [cell, *cells]
    return notebook


def sync_text(text: str, macros: dict[str, str]) -> str:
    """A notebook's file contents after syncing, as `nbformat.write` writes them."""
    notebook = synced(nbformat.reads(text, as_version=4), macros)
    out = nbformat.writes(notebook)
    return out if out.endswith("\n") else out + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if any differ")
    parser.add_argument("--config", type=Path, default=ROOT / "_config.yml")
    args = parser.parse_args(argv)
    macros = config_macros(args.config)
    paths = args.notebooks or sorted((ROOT / "chapters").glob("*.ipynb"))
    differ = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        new = sync_text(text, macros)
        if new == text:
            continue
        differ.append(path)
        if not args.check:
            path.write_text(new, encoding="utf-8")
            print(f"wrote the macros into {path}")
    if args.check and differ:
        print(
            "these notebooks lack the macros of _config.yml (run `make macros`):\n"
            + "\n".join(f"  {p}" for p in differ),
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
