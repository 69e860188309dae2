"""Finding one's way: the sidebars open and close with their toggles on a phone and in a wide
window, the wide window has one search box, the indexes are a click away from every page, and a
figure can be enlarged on a phone (_templates/layout.html, _templates/book-indexes.html,
_static/figure-zoom.js).
"""

import time

import pytest

pytestmark = pytest.mark.book

PAGE = "chapters/02_linear_attention.html"

# What a reader sees of the navigation: each dialog's state, whether the sidebar of the site is
# on the screen, and tooltips left on the screen.
STATE = """() => {
  const shown = (el) => {
    if (!el || !el.checkVisibility({ visibilityProperty: true })) return false;
    const box = el.getBoundingClientRect();
    return box.width > 0 && box.right > 0 && box.left < window.innerWidth;
  };
  return {
    siteDialog: document.getElementById("pst-primary-sidebar-modal").open,
    pageDialog: document.getElementById("pst-secondary-sidebar-modal").open,
    siteLinks: shown(document.querySelector(".bd-docs-nav a.reference")),
    pageLinks: shown(document.querySelector(".bd-sidebar-secondary .toc-entry a, "
      + "#pst-secondary-sidebar-modal .toc-entry a")),
    tooltips: [...document.querySelectorAll(".tooltip")].filter(shown).length,
  };
}"""


def visible(page, selector):
    found = [e for e in page.query_selector_all(selector) if e.is_visible()]
    assert len(found) == 1, f"{len(found)} visible {selector!r}"
    return found[0]


def settle(page, **want):
    """Wait until the navigation's state holds `want`; fail after 5 s with the last state seen.
    The sidebars slide and the tooltips fade on the page's clock, which a busy machine slows: a
    check after a fixed wait failed in CI with a tooltip still fading out."""
    deadline = time.monotonic() + 5
    while True:
        state = page.evaluate(STATE)
        if all(state[key] == value for key, value in want.items()):
            return
        assert time.monotonic() < deadline, f"after 5 s, {state} is not {want}"
        page.wait_for_timeout(50)


# Longer than the theme's delay before a tooltip shows (500 ms, bootstrap's initialisation).
TOOLTIP_DELAY_MS = 700


@pytest.fixture
def phone(server, browser):
    viewport = {"width": 390, "height": 844}
    context = browser.new_context(viewport=viewport, has_touch=True, is_mobile=True)
    page = context.new_page()
    page.goto(f"{server}/{PAGE}", wait_until="load")
    yield page
    context.close()


def test_phone_toggles_open_and_close_both_sidebars(phone):
    closed = dict(siteDialog=False, pageDialog=False, siteLinks=False, pageLinks=False)
    settle(phone, **closed)
    visible(phone, ".primary-toggle").tap()
    settle(phone, siteDialog=True, siteLinks=True)
    phone.wait_for_timeout(TOOLTIP_DELAY_MS)
    assert phone.evaluate(STATE)["tooltips"] == 0, "a tooltip shown on a touch screen"
    phone.mouse.click(370, 400)  # beside the sidebar: it closes
    settle(phone, **closed, tooltips=0)

    visible(phone, ".secondary-toggle").tap()
    settle(phone, pageDialog=True, pageLinks=True)
    phone.wait_for_timeout(TOOLTIP_DELAY_MS)
    assert phone.evaluate(STATE)["tooltips"] == 0, "a tooltip shown on a touch screen"
    phone.keyboard.press("Escape")
    settle(phone, **closed, tooltips=0)


def test_wide_window_toggle_hides_and_shows_the_sidebar(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(f"{server}/{PAGE}", wait_until="load")
    settle(page, siteLinks=True)
    visible(page, ".primary-toggle").click()
    settle(page, siteLinks=False)
    visible(page, ".primary-toggle").click()
    settle(page, siteLinks=True)
    page.goto(f"{server}/intro.html", wait_until="load")
    searches = [e for e in page.query_selector_all(".search-button__button") if e.is_visible()]
    assert len(searches) == 1, f"{len(searches)} search boxes in a 1400 px window"
    page.close()


def test_indexes_are_linked_from_every_sidebar(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(f"{server}/{PAGE}", wait_until="load")
    links = page.eval_on_selector_all(
        ".book-indexes a", "(links) => links.map((a) => [a.textContent, a.href])"
    )
    page.close()
    assert links == [
        ["Definitions, theorems and proofs", f"{server}/prf-prf.html"],
        ["Index of terms", f"{server}/genindex.html"],
    ]


ZOOM = """() => {
  const dialog = document.querySelector("dialog.figure-zoom");
  const img = dialog && dialog.querySelector("img");
  return dialog ? { open: dialog.open, width: img.getBoundingClientRect().width,
                    loaded: img.complete && img.naturalWidth > 0 } : null;
}"""


@pytest.mark.parametrize("figure_id", ["fig-lin-flops", "fig-lin-forms"])
def test_a_figure_opens_at_its_drawn_size_on_a_phone(phone, figure_id):
    """A static figure (wrapped by Sphinx in a link to its file) and an interactive one open in
    the page, at the size they were drawn for, keeping their aspect ratio on the page."""
    figure = phone.locator(f"#{figure_id} img").first
    figure.scroll_into_view_if_needed()
    drawn = figure.evaluate("(img) => Number(img.getAttribute('width'))")
    box = figure.bounding_box()
    assert box["width"] < drawn, (box, drawn)  # shrunk to the phone
    ratio = figure.evaluate("(img) => img.getAttribute('width') / img.getAttribute('height')")
    assert abs(box["width"] / box["height"] - ratio) < 0.02, (box, ratio)  # not squashed
    url = phone.url
    figure.tap()
    phone.wait_for_function("document.querySelector('dialog.figure-zoom img')?.complete")
    zoom = phone.evaluate(ZOOM)
    assert zoom["open"] and zoom["loaded"] and zoom["width"] >= drawn - 1, zoom
    phone.tap("dialog.figure-zoom .figure-zoom-close")
    assert not phone.evaluate(ZOOM)["open"] and phone.url == url
