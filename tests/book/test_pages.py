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

import pytest

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

# The layout shifts of the page so far (no reader input: there was none), once it has settled.
LAYOUT_SHIFT = """() => new Promise((resolve) => {
  let total = 0;
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) if (!entry.hadRecentInput) total += entry.value;
  }).observe({ type: "layout-shift", buffered: true });
  setTimeout(() => resolve(total), 300);
})"""

# Displayed formulas wider than their box at this width.
CLIPPED = """() => [...document.querySelectorAll("article div.math mjx-container[display='true']")]
  .filter((formula) => formula.scrollWidth > formula.clientWidth + 1)
  .map((formula) => formula.textContent.slice(0, 50))"""


def load(page, url):
    """Load `url` and wait until the network is idle; the bytes received (compressed as sent)."""
    sizes = []
    page.on("requestfinished", lambda request: sizes.append(request.sizes()))
    page.goto(url, wait_until="load")
    page.wait_for_load_state("networkidle")
    return sum(s["responseBodySize"] + s["responseHeadersSize"] for s in sizes)


@pytest.mark.parametrize("path", CHAPTERS)
def test_first_view_is_light_and_still_at_1400_px(server, browser, path):
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    received = load(page, f"{server}/{path}")
    shift = page.evaluate(LAYOUT_SHIFT)
    clipped = page.evaluate(CLIPPED)
    page.close()
    assert received <= FIRST_VIEW_BYTES, f"{path}: first view {received:,} bytes"
    assert shift <= MAX_LAYOUT_SHIFT, f"{path}: layout shift {shift:.3f} at load"
    assert not clipped, f"{path}: displayed formulas wider than the column: {clipped}"


@pytest.mark.parametrize("path", CHAPTERS)
def test_page_is_still_at_load_on_a_phone(server, browser, path):
    page = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True)
    page.goto(f"{server}/{path}", wait_until="load")
    shift = page.evaluate(LAYOUT_SHIFT)
    page.close()
    assert shift <= MAX_LAYOUT_SHIFT, f"{path}: layout shift {shift:.3f} at load"


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
