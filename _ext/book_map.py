"""A map of the book for its landing page: the parts, and for each chapter what it builds on and
how long it takes to read.

    ```{book-map}
    chapters/02_linear_attention: [chapters/01_kernels]
    ```

The directive's content names, for every chapter in the parts of `_toc.yml`, the chapters it
builds on (YAML: page → list of pages; a chapter may build only on chapters before it, and the
map must name every chapter of every part, so that it cannot fall behind the table of
contents). It draws one table per part, in the order of `_toc.yml`: the chapter (a link with its
title), what to read first (links), and the reading time, computed from the chapter itself:
its prose at `WORDS_PER_MINUTE` and the code it shows unfolded at `CODE_LINES_PER_MINUTE`
(folded cells, `hide-input`, and removed ones are not counted), rounded to 5 minutes; and the
time to work through it, `WORKING_FACTORS` times the reading time (following the proofs with a
pencil, running and changing the cells, trying the exercises).
"""

import json
import math
import re
from pathlib import Path

import yaml
from docutils import nodes
from sphinx import addnodes
from sphinx.util.docutils import SphinxDirective

WORDS_PER_MINUTE = 200
CODE_LINES_PER_MINUTE = 30
WORKING_FACTORS = (2, 3)  # working through a chapter takes 2 to 3 times its reading
HIDDEN = {"hide-input", "hide-cell", "remove-input", "remove-cell"}
SKIPPED_PARTS = {"Getting started", "Appendices"}  # pages around the chapters


def reading_minutes(path):
    """Minutes to read the page at `path` (a notebook or Markdown), rounded up to 5."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        prose = " ".join(
            "".join(c["source"])
            for c in cells
            if c["cell_type"] == "markdown" and "remove-cell" not in c["metadata"].get("tags", [])
        )
        code = sum(
            len("".join(c["source"]).strip().splitlines())
            for c in cells
            if c["cell_type"] == "code" and not HIDDEN & set(c["metadata"].get("tags", []))
        )
    else:
        prose, code = path.read_text(encoding="utf-8"), 0
    words = len(re.findall(r"[^\W\d_]+", prose))
    minutes = words / WORDS_PER_MINUTE + code / CODE_LINES_PER_MINUTE
    return 5 * max(1, math.ceil(minutes / 5))


def duration(minutes):
    """`minutes` as a reader says it: "50 min", "2 h", "2½ h" (hours rounded to the half)."""
    if minutes < 60:
        return f"{minutes} min"
    halves = round(minutes / 30)
    return f"{halves // 2}{'½' if halves % 2 else ''} h"


def working_time(reading):
    """The time to work through a chapter read in `reading` minutes, as a range."""
    low, high = (duration(factor * reading) for factor in WORKING_FACTORS)
    low_value, low_unit = low.split(" ")
    return f"{low_value}–{high}" if high.endswith(low_unit) else f"{low}–{high}"


def toc_parts(root):
    """[(caption, [page, …])] of the parts of `_toc.yml` that hold chapters."""
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    return [
        (part["caption"], [entry["file"] for entry in part["chapters"]])
        for part in toc["parts"]
        if part["caption"] not in SKIPPED_PARTS
    ]


def source(root, page):
    return next(root.glob(f"{page}.*"))


def check_map(parts, builds_on):
    """The problems of a map: chapters it leaves out or adds, and prerequisites that are not
    earlier chapters."""
    order = [page for _, pages in parts for page in pages]
    problems = [f"the map leaves out {page}" for page in order if page not in builds_on]
    problems += [f"{page} is no chapter of a part" for page in builds_on if page not in order]
    for page, earlier in builds_on.items():
        for needed in earlier or []:
            if needed not in order or page not in order or order.index(needed) >= order.index(page):
                problems.append(f"{page} builds on {needed}, which does not come before it")
    return problems


def doc_link(page, docname):
    """A link to `page` with its title, as {doc} makes one."""
    target = "/" + page
    reference = addnodes.pending_xref(
        "", refdomain="std", reftype="doc", reftarget=target, refexplicit=False, refdoc=docname
    )
    reference += nodes.inline("", page)
    return reference


class BookMap(SphinxDirective):
    has_content = True

    def run(self):
        root = Path(self.env.srcdir)
        builds_on = yaml.safe_load("\n".join(self.content)) or {}
        parts = toc_parts(root)
        problems = check_map(parts, builds_on)
        if problems:
            raise self.error("book-map: " + "; ".join(problems))
        self.env.note_dependency(root / "_toc.yml")
        result = []
        for caption, pages in parts:
            rubric = nodes.rubric(text=caption, classes=["book-map-part"])
            table = nodes.table(classes=["book-map"])
            group = nodes.tgroup(cols=4)
            table += group
            for width in (40, 30, 12, 18):
                group += nodes.colspec(colwidth=width)
            header = ["Chapter", "Builds on", "Reading", "Working through"]
            group += nodes.thead("", self._row(header))
            body = nodes.tbody()
            for page in pages:
                path = source(root, page)
                self.env.note_dependency(path)
                earlier = builds_on[page] or []
                needs = nodes.paragraph()
                for i, needed in enumerate(earlier):
                    if i:
                        needs += nodes.Text(", ")
                    needs += doc_link(needed, self.env.docname)
                if not earlier:
                    needs += nodes.Text("the getting-started pages")
                minutes = reading_minutes(path)
                chapter = nodes.paragraph("", "", doc_link(page, self.env.docname))
                body += self._row([chapter, needs, f"{minutes} min", working_time(minutes)])
            group += body
            result += [rubric, table]
        return result

    @staticmethod
    def _row(cells):
        row = nodes.row()
        for cell in cells:
            entry = nodes.entry()
            entry += cell if isinstance(cell, nodes.Node) else nodes.paragraph(text=cell)
            row += entry
        return row


def setup(app):
    app.add_directive("book-map", BookMap)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
