"""The chapters in Chromium, as a reader sees them: figures and code in a 1400 px window, inline
math on a 390 px phone.

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
from tests.book.looks import PHONE

HTML = Path(__file__).resolve().parents[2] / "_build" / "html"
CHAPTERS = sorted(p.name for p in (HTML / "chapters").glob("*.html")) if HTML.is_dir() else []

pytestmark = pytest.mark.book


@pytest.mark.parametrize("name", CHAPTERS)
def test_figures_and_code_fit_the_column(look, name):
    seen = look(f"chapters/{name}", "desktop")
    shrunk = [s for s in seen["figures"] if s["shown"] < min(s["width"], COLUMN_PX) - 1]
    assert not shrunk, f"{name}: figures shown narrower than assumed: {shrunk[:5]}"
    wide = seen["code"]
    assert not wide, f"{name}: code cells that scroll sideways, longest lines: {wide}"


@pytest.mark.parametrize("name", CHAPTERS)
def test_inline_math_stays_within_a_phone_screen(look, name):
    past = look(f"chapters/{name}", "phone")["past the edge"]
    width = PHONE["width"]
    assert not past, f"{name}: inline formulas past the edge of a {width} px screen: {past[:5]}"
