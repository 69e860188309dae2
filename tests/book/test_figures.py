"""Figures in the built book are displayed as large as `linattn_core.plotting` assumes.

The notebooks store each figure's smallest text as displayed (`text_px`), computed for a figure
shown at its natural width or shrunk to `plotting.COLUMN_PX`; tests/test_notebooks.py checks
those numbers. This check measures the assumption in Chromium at 1400 px: no figure is shown
narrower than min(its width, COLUMN_PX).
"""

from pathlib import Path

import pytest

from linattn_core.plotting import COLUMN_PX

HTML = Path(__file__).resolve().parents[2] / "_build" / "html"
CHAPTERS = sorted(p.name for p in (HTML / "chapters").glob("*.html")) if HTML.is_dir() else []

pytestmark = pytest.mark.book

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
def test_figures_are_not_shrunk_below_the_column(server, desktop_page, name):
    desktop_page.goto(f"{server}/chapters/{name}", wait_until="load")
    sizes = desktop_page.evaluate(SIZES)
    shrunk = [s for s in sizes if s["shown"] < min(s["width"], COLUMN_PX) - 1]
    assert not shrunk, f"{name}: figures shown narrower than assumed: {shrunk[:5]}"
