"""The scaling chapter's kernel-free figure in the built book: moving its slider over N changes
the frame and the caption, with no JavaScript error and no request leaving 127.0.0.1.

Runs after `make book`, like test_browser.py (same server and Chromium set-up).
"""

import functools
import http.server
import shutil
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"
PAGE = "chapters/09_scaling.html"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]

pytestmark = pytest.mark.book


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    if not (HTML / PAGE).is_file():
        pytest.fail(f"{HTML / PAGE} does not exist: build the book first (make book)")
    handler = functools.partial(QuietHandler, directory=str(HTML))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium not found: install Debian's chromium (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


def shown(figure):
    """What the figure shows now: the frame's image source and the caption."""
    return figure.evaluate(
        """(root) => [root.querySelector("img").src,
                      root.querySelector(".offline-slider-caption").textContent]"""
    )


def test_slider_over_n_changes_the_figure_offline(server, browser):
    problems = []
    page = browser.new_page()

    def route(route):
        host = urlparse(route.request.url).hostname
        if route.request.url.startswith(("data:", "blob:")) or host == "127.0.0.1":
            route.continue_()
        else:
            problems.append(f"request leaves 127.0.0.1: {route.request.url}")
            route.abort()

    page.route("**/*", route)
    page.on("pageerror", lambda error: problems.append(f"JavaScript error: {error}"))
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
