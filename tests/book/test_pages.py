"""Pages that arrive light and stay still while they load (_ext/static_pages.py).

Every chapter is loaded as a reader's browser loads it (served by scripts/serve.py, text
compressed as static hosts send it) in a 1400 px window and on a 390 px phone, and fails if

- its first view (everything the page loads before anything is scrolled or clicked) weighs more
  than `FIRST_VIEW_BYTES`;
- its layout shifts at load by more than `MAX_LAYOUT_SHIFT` (the cumulative layout shift of
  Chrome's Web Vitals, where 0.1 is "good");
- a displayed formula is wider than the text column at 1400 px (clipped, or scrolling where
  nothing says so).

And every built page (the files themselves) arrives typeset: no formula is TeX source waiting
for a script, no page but the search page loads MathJax, no page loads the icon script, no
image is embedded as data, and no page offers a launch button (Binder, Colab).
"""

import re
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.book import looks

HTML = Path(__file__).resolve().parents[2] / "_build" / "html"
CHAPTERS = (
    sorted(f"chapters/{p.name}" for p in (HTML / "chapters").glob("*.html"))
    if HTML.is_dir()
    else []
)
FILES = (
    sorted(
        p.relative_to(HTML).as_posix()
        for p in HTML.rglob("*.html")
        if p.relative_to(HTML).parts[0] not in {"_static", "_sources", "vendor", "_images"}
    )
    if HTML.is_dir()
    else []
)

FIRST_VIEW_BYTES = 1_500_000
MAX_LAYOUT_SHIFT = 0.1

pytestmark = pytest.mark.book


@pytest.mark.parametrize("path", CHAPTERS)
def test_first_view_is_light_and_still_at_1400_px(look, path):
    seen = look(path, "desktop")
    assert seen["received"] <= FIRST_VIEW_BYTES, f"{path}: first view {seen['received']:,} bytes"
    assert seen["shift"] <= MAX_LAYOUT_SHIFT, f"{path}: layout shift {seen['shift']:.3f} at load"
    clipped = seen["clipped"]
    assert not clipped, f"{path}: displayed formulas wider than the column: {clipped}"


@pytest.mark.parametrize("path", CHAPTERS)
def test_page_is_still_at_load_on_a_phone(look, path):
    shift = look(path, "phone")["shift"]
    assert shift <= MAX_LAYOUT_SHIFT, f"{path}: layout shift {shift:.3f} at load"


# A page of text that moves it 200 px down once it has been drawn (two animation frames after it
# loads: content added before the first paint is no shift), with a box wider than a phone.
UNSTILL = """<!DOCTYPE html><html><head><meta name="viewport" content="width=device-width"></head>
<body><article><p>{text}</p><div style="width: 800px">wide</div>
<script>addEventListener("load", () => requestAnimationFrame(() => requestAnimationFrame(() =>
  document.body.insertAdjacentHTML("afterbegin", '<div style="height: 200px">late</div>'))));
</script></article></body></html>"""


def test_the_phone_look_sees_a_late_shift_and_a_page_too_wide(browser):
    """The phone's measurements on a page known to fail both: a check that cannot fail proves
    nothing (under Playwright's mobile emulation this one could not: it measured no shift)."""
    page = UNSTILL.format(text="Text a reader has started to read. " * 200)
    seen = looks.phone(browser, "data:text/html," + quote(page))
    assert seen["shift"] > MAX_LAYOUT_SHIFT, seen
    assert seen["width"] >= 800, seen


# A wide formula on a phone scrolls inside the column, with a scrollbar that shows.
SCROLLS = """() => [...document.querySelectorAll("article div.math mjx-container[display='true']")]
  .filter((formula) => formula.scrollWidth > formula.clientWidth + 1)
  .map((formula) => {
    const style = getComputedStyle(formula);
    return { overflow: style.overflowX, scrollbar: style.scrollbarWidth,
             shadow: style.backgroundImage.includes("gradient") };
  })"""


def test_a_wide_formula_scrolls_with_a_cue_on_a_phone(server, browser):
    page = browser.new_page(viewport={"width": 390, "height": 844})
    page.goto(f"{server}/chapters/08_matrix_calculus.html", wait_until="load")
    wide = page.evaluate(SCROLLS)
    page.close()
    assert wide, "no formula of the matrix-calculus chapter is wider than a phone"
    assert all(w == {"overflow": "auto", "scrollbar": "thin", "shadow": True} for w in wide), wide


# A formula's element whose content does not start with the typeset formula (after its number).
UNTYPESET = re.compile(
    r'class="math notranslate nohighlight"[^>]*>'
    r'(?!\s*(?:<span class="eqno">.*?</span>\s*)?<mjx-container)',
    re.S,
)


@pytest.mark.parametrize("path", FILES)
def test_page_arrives_typeset_and_without_heavy_scripts(path):
    text = (HTML / path).read_text(encoding="utf-8")
    untypeset = [text[m.end() : m.end() + 60] for m in UNTYPESET.finditer(text)]
    assert not untypeset, f"{path}: formulas left as TeX source: {untypeset[:3]}"
    assert "fontawesome.js" not in text, f"{path} loads the icon script"
    assert "data:image/png;base64" not in text, f"{path} embeds an image as data"
    assert not re.findall(r"<i class=\"fa", text), f"{path}: an icon left to the icon script"
    # no launch button that cannot work: neither service can run the book's notebooks
    assert "mybinder.org" not in text and "colab.research" not in text, f"{path}: launch button"
    if path != "search.html":
        assert "tex-chtml.js" not in text and "window.MathJax" not in text, f"{path} loads MathJax"
        assert "searchindex.js" not in text, f"{path} loads the search index"
