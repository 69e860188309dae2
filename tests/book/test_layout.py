"""The chapters in Chromium, as a reader sees them: figures and code in a 1400 px window, inline
math on a 430 px phone.

The notebooks store each figure's smallest text as displayed (`text_px`), computed for a figure
shown at its natural width or shrunk to `plotting.COLUMN_PX`; tests/book/test_notebooks.py checks
those numbers. Here the assumption is measured: no figure is shown narrower than
min(its width, COLUMN_PX). And code cells, formatted to 88 characters, fit their boxes: no code
input needs sideways scrolling. On a phone, no inline formula reaches past the text column (one
wider than its paragraph scrolls on its own).
"""

from pathlib import Path

import pytest

from linattn_core.book.plotting import COLUMN_PX

HTML = Path(__file__).resolve().parents[2] / "_build" / "html"
CHAPTERS = sorted(p.name for p in (HTML / "chapters").glob("*.html")) if HTML.is_dir() else []

pytestmark = pytest.mark.book

CODE = """() => [...document.querySelectorAll('.cell_input pre')]
  .filter((pre) => pre.checkVisibility() && pre.scrollWidth > pre.clientWidth + 1)
  .map((pre) => pre.textContent.split('\\n').reduce((a, b) => (b.length > a.length ? b : a)))"""

SIZES = """() => [...document.querySelectorAll('.cell_output img[width], .explorable img[width]')]
  .filter((img) => img.checkVisibility())
  .map((img) => ({
    width: Number(img.getAttribute('width')),
    shown: img.getBoundingClientRect().width,
    alt: (img.getAttribute('alt') || img.getAttribute('src')).slice(0, 60),
  }))"""


@pytest.fixture(scope="module")
def desktop_page(browser):
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    yield page
    page.close()


@pytest.mark.parametrize("name", CHAPTERS)
def test_figures_and_code_fit_the_column(server, desktop_page, name):
    desktop_page.goto(f"{server}/chapters/{name}", wait_until="load")
    sizes = desktop_page.evaluate(SIZES)
    shrunk = [s for s in sizes if s["shown"] < min(s["width"], COLUMN_PX) - 1]
    assert not shrunk, f"{name}: figures shown narrower than assumed: {shrunk[:5]}"
    wide = desktop_page.evaluate(CODE)
    assert not wide, f"{name}: code cells that scroll sideways, longest lines: {wide}"


# The inline formulas (typeset when the book was built) that reach past the text column: on a
# phone a formula there cannot be read, so one wider than its paragraph must scroll on its own
# (_static/wide-math.js marks it math-wide, book.css).
PAST_THE_EDGE = """async () => {
  await new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 100)));
  const edge = document.querySelector('article').getBoundingClientRect().right;
  return [...document.querySelectorAll("article mjx-container:not([display='true'])")]
    .filter((m) => !m.closest('pre, table, .cell_output'))
    .filter((m) => m.getBoundingClientRect().right > edge + 1)
    .map((m) => m.textContent.slice(0, 40));
}"""


@pytest.fixture(scope="module")
def phone_page(browser):
    page = browser.new_page(viewport={"width": 430, "height": 900})
    yield page
    page.close()


@pytest.mark.parametrize("name", CHAPTERS)
def test_inline_math_stays_within_a_phone_screen(server, phone_page, name):
    phone_page.goto(f"{server}/chapters/{name}", wait_until="load")
    past = phone_page.evaluate(PAST_THE_EDGE)
    assert not past, f"{name}: inline formulas past the edge of a 430 px screen: {past[:5]}"
