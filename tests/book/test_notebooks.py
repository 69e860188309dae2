"""Structure of the chapter notebooks and the table of contents.

nbval re-executes the notebooks and compares outputs; these checks catch what it cannot: a
notebook committed with unexecuted cells, cells run out of order, stored errors, widgets saved
without their state or without a static twin for the book, figures whose text is too small to
read, and pages missing from (or dangling in) the table of contents.
"""

import json
import re
from pathlib import Path

import pytest
import yaml

from linattn_core.book.plotting import MIN_EXPLORABLE_TEXT_PX, MIN_TEXT_PX

ROOT = Path(__file__).resolve().parents[2]
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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_widget_has_a_static_twin_for_the_book(path):
    # explorable or a live explorer: without a kernel the book shows the HTML, never a dead widget
    _, cells = code_cells(path)
    dead = [
        i
        for i, c in enumerate(cells)
        for o in c["outputs"]
        if WIDGET_VIEW in o.get("data", {})
        and not re.search(
            r'class="(explorable|live-explorer)"', "".join(o["data"].get("text/html", ""))
        )
    ]
    assert not dead, f"{path.name}: code cells {dead} show a widget with no static twin"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_figure_text_is_readable_as_displayed(path):
    # use_book_figures() stores each figure's smallest text as displayed (plotting.text_px)
    _, cells = code_cells(path)
    small, unmeasured = [], []
    for i, cell in enumerate(cells):
        for output in cell["outputs"]:
            if "image/png" in output.get("data", {}):
                px = output.get("metadata", {}).get("image/png", {}).get("text_px")
                if px is None:
                    unmeasured.append(i)
                elif px < MIN_TEXT_PX:
                    small.append((i, px))
            html = "".join(output.get("data", {}).get("text/html", ""))
            minimum = MIN_EXPLORABLE_TEXT_PX if 'class="explorable"' in html else MIN_TEXT_PX
            small += [
                (i, float(px))
                for px in re.findall(r'data-text-px="([\d.]+)"', html)
                if float(px) < minimum
            ]
    assert not unmeasured, (
        f"{path.name}: figures of code cells {unmeasured} were not shown by use_book_figures()"
    )
    assert not small, f"{path.name}: (code cell, smallest text in px) {small}"


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


def math_problems(markdown):
    """Places where MyST would not read the math as written: `$$` opening or closing inside a
    paragraph (read as inline `$…$`), and a line starting with "+ ", "- " or "* " while inline
    math is open (read as a list item, leaving the formula as TeX source)."""
    problems, lines, display, fence = [], markdown.split("\n"), False, False
    for i, line in enumerate(lines):
        text = line.strip()
        if text.startswith("```") and not text[3:].startswith("{"):
            fence = not fence if (fence or text[3:].strip()) else fence
        if fence:
            continue
        if text.startswith("$$") and not (len(text) > 4 and text.endswith("$$")):
            opening = not display
            display = not display
            neighbour = lines[i - 1] if opening else (lines[i + 1] if i + 1 < len(lines) else "")
            if neighbour.strip() and not neighbour.strip().startswith("```"):
                problems.append(f"line {i + 1}: $$ {'after' if opening else 'before'} text")
            continue
        if not display and text[:2] in ("+ ", "- ", "* ") and i:
            paragraph = []
            for previous in reversed(lines[:i]):
                if not previous.strip():
                    break
                paragraph.append(previous)
            if "".join(paragraph).replace("$$", "").count("$") % 2:
                problems.append(f"line {i + 1}: {text[:2]!r} starts a line inside inline math")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_math_is_written_so_that_myst_reads_it(path):
    notebook = json.loads(path.read_text())
    problems = [
        f"cell {cell.get('id', index)} {problem}"
        for index, cell in enumerate(notebook["cells"])
        if cell["cell_type"] == "markdown"
        for problem in math_problems("".join(cell["source"]))
    ]
    assert not problems, f"{path.name}: " + "; ".join(problems[:5])


def test_math_problems_are_found():
    assert math_problems("text\n$$\nx\n$$\n\ntext") == ["line 2: $$ after text"]
    assert math_problems("a\n\n$$\nx\n$$\nmore") == ["line 5: $$ before text"]
    assert math_problems("$a\n+ b$ and") == ["line 2: '+ ' starts a line inside inline math"]
    assert math_problems("a\n\n$$\nx\n$$\n\n- item $x$") == []


EXERCISE = re.compile(r"\{exercise\}[^\n]*\n(?:[^\n]*\n)*?:label: (\S+)")
HINT = re.compile(r"\{admonition\} Hint[^\n]*\n:class: dropdown")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_exercise_has_a_hint_before_its_solution(path):
    notebook = json.loads(path.read_text())
    markdown = "\n".join(
        "".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "markdown"
    )
    missing = []
    for match in EXERCISE.finditer(markdown):
        label = match.group(1)
        solution = re.compile(r"\{solution(-start)?\} " + re.escape(label)).search(
            markdown, match.end()
        )
        solution = solution.start() if solution else -1
        if solution < 0 or not HINT.search(markdown, match.end(), solution):
            missing.append(label)
    assert not missing, (
        f"{path.name}: exercises with no hint dropdown before the solution: {missing}"
    )


def figure_outputs(cell):
    """The outputs of `cell` that the book shows as figures: images, and interactive figures."""
    return [
        o
        for o in cell["outputs"]
        if "image/png" in o.get("data", {})
        or re.search(
            r'class="(explorable|live-explorer)"', "".join(o.get("data", {}).get("text/html", ""))
        )
    ]


def frames_html(html):
    """The HTML of an interactive figure: the frame it shows, and every frame its script holds
    (JSON strings)."""
    held = re.search(r"const frames = (\[.*?\]);\n", html, re.S)
    return [html, *(json.loads(held.group(1)) if held else [])]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_figure_is_numbered_captioned_and_described(path):
    """The book numbers a figure and sets its caption from the cell's `mystnb.figure` metadata;
    its image is described by `mystnb.image.alt` (an interactive figure describes each frame's
    image itself: `explorable(..., alt=...)`). One figure per cell, so each caption is its own."""
    _, cells = code_cells(path)
    problems = []
    for i, cell in enumerate(cells):
        figures = figure_outputs(cell)
        if not figures:
            continue
        options = cell["metadata"].get("mystnb", {})
        if not options.get("figure", {}).get("caption", "").strip():
            problems.append(f"code cell {i}: no caption (mystnb.figure.caption)")
        if len(figures) > 1:
            problems.append(f"code cell {i}: {len(figures)} figures in one cell")
        for output in figures:
            if "image/png" in output["data"]:
                alt = options.get("image", {}).get("alt", "")
                if len(alt.split()) < 5 or re.search(r"\.png|_images/", alt):
                    problems.append(f"code cell {i}: no description (mystnb.image.alt): {alt!r}")
            else:  # an explorable's frames add their settings to what the image shows
                html = "".join(output["data"]["text/html"])
                described = r"\w \(.+ = .+\)$" if 'class="explorable"' in html else r"(\w+\W+){4}\w"
                undescribed = [
                    alt
                    for frame in frames_html(html)
                    for alt in re.findall(r'alt="([^"]*)"', frame)
                    if not re.search(described, alt)
                ]
                if undescribed:
                    problems.append(f"code cell {i}: images without a description")
    assert not problems, f"{path.name}: " + "; ".join(problems)


MAX_SHOWN_LINES = 40
DRAWS = re.compile(r"\bplt\.|\bexplorable\(|\.imshow\(|\.plot\(|\bplot_[a-z_]+\(")
FOLDED = {"hide-input", "hide-cell", "remove-input", "remove-cell"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_helper_code_is_folded(path):
    """The book shows the code that is the lesson; the code that only draws a figure, and any
    cell longer than `MAX_SHOWN_LINES`, is folded behind a "Show code cell source" toggle
    (the cell tag `hide-input`)."""
    _, cells = code_cells(path)
    shown = [
        (i, "".join(c["source"]))
        for i, c in enumerate(cells)
        if not FOLDED & set(c["metadata"].get("tags", []))
    ]
    drawing = [i for i, source in shown if DRAWS.search(source) and figure_outputs(cells[i])]
    long = [(i, len(s.splitlines())) for i, s in shown if len(s.splitlines()) > MAX_SHOWN_LINES]
    assert not drawing, f"{path.name}: code cells {drawing} draw a figure, unfolded"
    assert not long, (
        f"{path.name}: unfolded code cells of more lines than {MAX_SHOWN_LINES}: {long}"
    )


def first_authors():
    """The surname of the first author of every entry of references.bib, by key."""
    bib = (ROOT / "references.bib").read_text(encoding="utf-8")
    found = {}
    for key, body in re.findall(r"@\w+\{([^,]+),(.*?)\n\}", bib, re.S):
        author = re.search(r"author\s*=\s*[{\"](.*?)[}\"],?\n", body, re.S)
        if author:
            first = author.group(1).split(" and ")[0].strip()
            surname = first.split(",")[0] if "," in first else first.split()[-1]
            found[key.strip()] = re.sub(r"[{}\\\"']", "", surname).lower()
    return found


REPEATED_AUTHOR = re.compile(
    r"([A-Z][\w\-]+)(?: et al\.| and [A-Z][\w\-]+)?(?:'s|’s)?\s+\{cite\}`([^`]+)`"
)
PROSE = [*NOTEBOOKS, *sorted((ROOT / "chapters").rglob("*.md")), ROOT / "intro.md"]


@pytest.mark.parametrize("path", PROSE, ids=lambda p: p.name)
def test_a_citation_does_not_repeat_its_author(path):
    """ "Katharopoulos et al. {cite}`katharopoulos2020`" reads "Katharopoulos et al.
    [Katharopoulos et al., 2020]": a sentence that names the authors cites with {cite:t}."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    else:
        text = path.read_text(encoding="utf-8")
    authors = first_authors()
    repeated = [
        m.group(0).replace("\n", " ")
        for m in REPEATED_AUTHOR.finditer(text)
        if authors.get(m.group(2).split(",")[0].strip()) == m.group(1).lower()
    ]
    assert not repeated, f"{path.name}: write {{cite:t}} for {repeated}"


def page_title(path):
    """The first heading of a chapter (notebook or Markdown)."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    else:
        text = path.read_text(encoding="utf-8")
    return re.search(r"^# (.+)$", text, re.M).group(1).strip()


CORRECTIONS = sorted((ROOT / "chapters" / "corrections").glob("*.md"))


@pytest.mark.parametrize("path", CORRECTIONS, ids=lambda p: p.name)
def test_corrections_are_headed_by_their_chapters_title(path):
    """The corrections appendix lists its items under the title of the chapter they concern,
    as the table of contents names it (a heading made of a {doc} link showed the file name)."""
    chapter = next((ROOT / "chapters").glob(f"{path.stem}.*"))
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first == f"## {page_title(chapter)}", f"{path.name} starts with {first!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_paragraph_starts_with_a_bare_equation_number(path):
    """A paragraph that opens with {eq}`…` reads "(7), where …": name what is referred to."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    bare = [
        paragraph.strip()[:60]
        for cell in cells
        if cell["cell_type"] == "markdown"
        for paragraph in re.split(r"\n\s*\n", "".join(cell["source"]))
        if re.match(r"\s*\{eq\}`", paragraph)
    ]
    assert not bare, f"{path.name}: paragraphs that start with an equation number: {bare}"
