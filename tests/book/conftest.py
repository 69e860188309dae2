"""The harness of the built-book checks: a server on 127.0.0.1 for `_build/html` (the one of
`make serve`, scripts/serve.py: text compressed as static hosts send it), Debian's Chromium
driven by Playwright (never a downloaded browser), and pages that record every request leaving
127.0.0.1 and every JavaScript error as a problem.
"""

import importlib.util
import shutil
import threading
from pathlib import Path

import pytest

from tests.book import looks
from tests.book.looks import keep_offline

ROOT = Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"
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


def _serve_module():
    spec = importlib.util.spec_from_file_location("serve", ROOT / "scripts" / "serve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def server():
    if not HTML.is_dir():
        pytest.fail(f"{HTML} does not exist: build the book first (make book)")
    httpd = _serve_module().server(HTML)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="session")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium not found: install Debian's chromium (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def offline_page(browser):
    """A new page that serves only 127.0.0.1, data: and blob: URLs: `(page, problems)`, where
    problems lists the requests it refused, the JavaScript errors it saw and the errors logged to
    the console."""
    problems = []
    page = browser.new_page()
    keep_offline(page, problems)
    page.on(
        "console",
        lambda message: (
            message.type == "error" and problems.append(f"console error: {message.text}")
        ),
    )
    yield page, problems
    if not page.is_closed():
        page.close()


@pytest.fixture(scope="session")
def look(server, browser):
    """`look(path, view)`: what the browser shows of the built page `path` in `view` ("desktop",
    a 1400 px window, or "phone", 390 px), measured in one visit per page and view (looks.py) and
    kept for the session: each page loads twice, however many checks read it."""
    seen = {}

    def look(path, view):
        if (path, view) not in seen:
            seen[path, view] = getattr(looks, view)(browser, f"{server}/{path}")
        return seen[path, view]

    return look
