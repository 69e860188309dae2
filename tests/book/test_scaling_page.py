"""The scaling chapter's kernel-free figure in the built book: moving its slider over N changes
the frame and the caption, with no JavaScript error and no request leaving 127.0.0.1.

Runs after `make book`, like test_browser.py (the harness of conftest.py).
"""

from pathlib import Path

import pytest

HTML = Path(__file__).resolve().parents[2] / "_build" / "html"

PAGE = "chapters/09_scaling.html"

pytestmark = pytest.mark.book


def shown(figure):
    """What the figure shows now: the frame's image source and the caption."""
    return figure.evaluate(
        """(root) => [root.querySelector("img").src,
                      root.querySelector(".offline-slider-caption").textContent]"""
    )


def test_slider_over_n_changes_the_figure_offline(server, offline_page):
    assert (HTML / PAGE).is_file(), f"{HTML / PAGE} does not exist: build the book first"
    page, problems = offline_page
    page.goto(f"{server}/{PAGE}", wait_until="load")

    figure = page.locator(".offline-slider").first
    slider = figure.locator('input[type="range"]')
    last = int(slider.get_attribute("max"))
    assert last >= 2, "the figure should have a frame per measured N"
    image, caption = shown(figure)
    assert image.startswith("data:image/png;base64,") and caption.startswith("this CPU, N = ")

    seen = {caption}
    for position in (0, last // 2):
        slider.fill(str(position))  # sets the value and fires the input event
        new_image, new_caption = shown(figure)
        assert new_image != image and new_caption not in seen
        image = new_image
        seen.add(new_caption)
    assert figure.locator("img").evaluate("(img) => img.complete && img.naturalWidth > 0")
    page.close()
    assert not problems, "\n".join(problems)
