"""The scaling chapter in the built book, without a kernel: its three live explorers show the run
made when the chapter was executed, say that they measure live in Jupyter, and offer no control
that could not respond; the figure over N is an interactive figure (moved by test_browser.py).

Runs after `make book`, like test_browser.py (the harness of conftest.py).
"""

from pathlib import Path

import pytest

HTML = Path(__file__).resolve().parents[2] / "_build" / "html"

PAGE = "chapters/10_scaling.html"

pytestmark = pytest.mark.book

EXPLORERS = """async () => {
 const images = [...document.querySelectorAll(".live-explorer img")];
 images.forEach((img) => { img.loading = "eager"; });  // not only as they near the screen
 await Promise.all(images.map((img) => img.decode().catch(() => null)));
 return [...document.querySelectorAll(".live-explorer")].map((root) => ({
  title: root.querySelector("b").textContent,
  note: root.querySelector(".live-explorer-note").textContent,
  images: [...root.querySelectorAll("img")].filter((img) => img.naturalWidth > 0).length,
  rows: root.querySelectorAll("tr").length,
  controls: root.querySelectorAll("input, select, button, textarea").length,
}));
}"""


def test_live_explorers_show_their_run_and_no_dead_control(server, offline_page):
    assert (HTML / PAGE).is_file(), f"{HTML / PAGE} does not exist: build the book first"
    page, problems = offline_page
    page.goto(f"{server}/{PAGE}", wait_until="load")
    explorers = page.evaluate(EXPLORERS)
    assert [e["title"].split(":")[0] for e in explorers] == [
        "Complexity explorer",
        "Chunk-size explorer",
        "Generation explorer",
    ]
    for explorer in explorers:
        assert "measures live" in explorer["note"], explorer
        assert explorer["images"] == 1 and explorer["rows"] > 1, explorer  # the run: plot, table
        assert explorer["controls"] == 0, explorer
    assert page.locator(".widget-subarea").count() == 0  # no widget view rendered at all
    page.close()
    assert not problems, "\n".join(problems)
