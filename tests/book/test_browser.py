"""Load every page of the built book in Chromium, offline, and check what a reader sees.

Runs after `make book` (the Makefile's `test` target builds first): a server on 127.0.0.1
serves `_build/html`, and Playwright drives Debian's Chromium (never a downloaded browser).
A page fails if a request fails or leaves 127.0.0.1, if it raises a JavaScript error, if
math is left untypeset, if an image does not load, or if a saved widget does not render.
"""

import re
from pathlib import Path

import pytest

HTML = Path(__file__).resolve().parents[2] / "_build" / "html"
# Pages Sphinx generates around the book (no content of ours to check).
GENERATED = {"genindex.html", "search.html", "index.html"}
PAGES = (
    sorted(
        p.relative_to(HTML).as_posix()
        for p in HTML.rglob("*.html")
        if not p.relative_to(HTML).parts[0].startswith(("_", "vendor")) and p.name not in GENERATED
    )
    if HTML.is_dir()
    else []
)

pytestmark = pytest.mark.book

# What a page looks like once it has settled, measured in the page itself.
INSPECT = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  const views = document.querySelectorAll(
    'script[type="application/vnd.jupyter.widget-view+json"]');
  const deadline = Date.now() + 10000;
  const settled = () => document.querySelectorAll(
    '.widget-subarea > .jupyter-widgets, .widget-error').length >= views.length;
  while (views.length && !settled() && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  const untypeset = [...document.querySelectorAll('span.math, div.math')]
    .filter((el) => !el.querySelector('mjx-container'))
    .map((el) => el.textContent.slice(0, 60));
  const mathErrors = [...document.querySelectorAll('mjx-merror')].map((el) => el.textContent);
  const brokenImages = [...document.images]
    .filter((img) => !(img.complete && img.naturalWidth > 0))
    .map((img) => img.getAttribute('src').slice(0, 80));
  return {
    math: document.querySelectorAll('mjx-container').length,
    untypeset, mathErrors, brokenImages,
    widgetViews: views.length,
    widgetsRendered: document.querySelectorAll('.widget-subarea > .jupyter-widgets').length,
    widgetErrors: [...document.querySelectorAll('.widget-error')]
      .map((el) => el.textContent.slice(0, 120)),
  };
}"""


def test_pages_were_built():
    assert PAGES, f"no pages found under {HTML}: build the book first (make book)"


@pytest.mark.parametrize("page_path", PAGES)
def test_page_works_offline(server, offline_page, page_path):
    page, problems = offline_page
    page.on(
        "requestfailed",
        lambda request: (
            request.url.startswith(server)
            and problems.append(f"request failed: {request.url} ({request.failure})")
        ),
    )
    page.on(
        "response",
        lambda response: (
            response.status >= 400 and problems.append(f"HTTP {response.status}: {response.url}")
        ),
    )
    page.goto(f"{server}/{page_path}", wait_until="load")
    state = page.evaluate(INSPECT)
    page.wait_for_load_state("networkidle")
    page.close()

    problems += [f"untypeset math: {text!r}" for text in state["untypeset"]]
    problems += [f"MathJax error: {text!r}" for text in state["mathErrors"]]
    problems += [f"image does not load: {src}" for src in state["brokenImages"]]
    problems += [f"widget error: {text!r}" for text in state["widgetErrors"]]
    if state["widgetsRendered"] < state["widgetViews"]:
        problems.append(
            f"{state['widgetViews']} saved widget views, {state['widgetsRendered']} rendered"
        )
    assert not problems, f"{page_path}:\n  " + "\n  ".join(problems)


# A stray dollar next to typeset math: display math ($$) that opened inside a paragraph was read as
# inline math ($…$), so prose became italic math and formulas stayed TeX source.
STRAY_DOLLAR = re.compile(r'\$<span class="math|</span>\$')


@pytest.mark.parametrize("page_path", PAGES)
def test_no_dollar_is_left_beside_math(page_path):
    html = (HTML / page_path).read_text(encoding="utf-8")
    stray = [html[max(0, m.start() - 80) : m.end() + 40] for m in STRAY_DOLLAR.finditer(html)]
    assert not stray, f"{page_path}: {len(stray)} stray '$' beside math, first: {stray[0]!r}"


PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def phone_page(browser):
    page = browser.new_page(viewport=PHONE)
    yield page
    page.close()


@pytest.mark.parametrize("page_path", PAGES)
def test_page_fits_a_phone_without_sideways_scrolling(server, phone_page, page_path):
    """Wide content (code, tables, formulas, figures) scrolls inside its own box; the page itself
    never grows wider than a 390 px phone screen."""
    phone_page.goto(f"{server}/{page_path}", wait_until="load")
    width = phone_page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"{page_path} is {width} px wide on a {PHONE['width']} px phone"


def test_bibliography_labels_read_like_the_citations():
    """The text cites "Katharopoulos et al. (2020)"; the bibliography entry it links to must be
    labelled the same way, not [1] (_ext/author_year.py)."""
    page = (HTML / "chapters" / "bibliography.html").read_text()
    labels = re.findall(r'<span class="label"><span class="fn-bracket">\[</span>(.*?)<', page)
    assert labels, "no bibliography labels found"
    assert "Katharopoulos et al., 2020" in labels
    assert not [label for label in labels if label.isdigit()]
    assert len(set(labels)) == len(labels)


EXPLORE = """async (root) => {
  // Every option of every control: the caption must name the chosen settings, and the frame
  // must change when a control does (each control changes something).
  const selects = [...root.querySelectorAll("select")];
  const titles = [...root.querySelectorAll("label")].map((l) => l.firstChild.textContent.trim());
  const problems = [];
  for (const [i, select] of selects.entries()) {
    let changed = false;
    const first = root.querySelector(".explorable-frame").innerHTML;
    for (const option of [...select.options]) {
      select.value = option.value;
      select.dispatchEvent(new Event("change"));
      const caption = root.querySelector(".explorable-caption").textContent;
      const expected = selects.map((s, j) => titles[j] + " = " + s.options[s.selectedIndex].text);
      if (caption !== expected.join(", ")) problems.push(`caption "${caption}"`);
      if (root.querySelector(".explorable-frame").innerHTML !== first) changed = true;
    }
    if (!changed) problems.push(`control ${titles[i]} changes nothing`);
    select.selectedIndex = 0;
    select.dispatchEvent(new Event("change"));
  }
  return problems;
}"""


@pytest.mark.parametrize("page_path", PAGES)
def test_every_control_of_a_static_figure_changes_it(server, offline_page, page_path):
    """The book's interactive figures work without a kernel: moving any control shows the
    precomputed result of that setting, captioned with it."""
    page, problems = offline_page
    page.goto(f"{server}/{page_path}", wait_until="load")
    for figure in page.query_selector_all(".explorable"):
        assert figure.query_selector("select"), "a static figure without controls"
        problems += figure.evaluate(EXPLORE)
    assert not problems, f"{page_path}:\n  " + "\n  ".join(problems)


def test_proof_index_is_linked_and_lists_titles_by_chapter():
    """The index of definitions, theorems and proofs (_ext/proof_index.py) is reachable from the
    introduction and names each entry by kind and title under its chapter, not by raw label."""
    assert 'href="prf-prf.html"' in (HTML / "intro.html").read_text()
    page = (HTML / "prf-prf.html").read_text()
    chapters = re.findall(r'<tr class="cap"[^>]*><td></td><td>\s*<strong>([^<]+)</strong>', page)
    assert chapters[0] == "From softmax attention to kernels" and len(chapters) >= 8
    names = re.findall(r'<code class="xref">([^<]+)</code></a>\s*<em>\(([^)]+)\)</em>', page)
    assert ("Definition: Kernel, feature map, Gram matrix", "def-kn-kernel") in names
    assert all(name.split(":")[0] in KINDS for name, _ in names), names[:5]
    assert not [name for name, _ in names if "$" in name or "\\" in name]  # no raw TeX


def test_index_of_terms_is_linked_and_filled():
    """The general index lists the book's key terms (``{index}`` directives in the chapters)."""
    assert 'href="genindex.html"' in (HTML / "intro.html").read_text()
    page = (HTML / "genindex.html").read_text()
    terms = re.findall(r'<a href="chapters/[^"]+#index-\d+">([^<]+)</a>', page)
    assert len(terms) >= 40 and "Gram matrix" in terms and "roofline model" in terms


KINDS = {
    "Definition", "Theorem", "Lemma", "Proposition", "Corollary", "Remark", "Example",
    "Algorithm", "Axiom", "Conjecture", "Criterion", "Observation", "Property", "Assumption",
    "Notation", "Proof",
}  # fmt: skip
