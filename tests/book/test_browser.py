"""Load every page of the built book in Chromium, offline, and check what a reader sees.

Runs after `make book` (the Makefile's `test` target builds first): a server on 127.0.0.1
serves `_build/html`, and Playwright drives Debian's Chromium (never a downloaded browser).
A page fails if a request fails or leaves 127.0.0.1, if it raises a JavaScript error, if
math is left untypeset, if a reader sees TeX source outside typeset math, if an image does not
load, or if a saved widget does not render.
"""

import json
import re
from pathlib import Path

import pytest

from tests.book.looks import FIND_RAW_TEX, INSPECT, PHONE, TEX

ROOT = Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"
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
# The search page lists what it finds with a snippet of each page's text, math included.
SEARCHES = ("kernel", "softmax", "Jacobian", "matrix on the unit circle", "delta rule")
VISITED = [*PAGES, "genindex.html", *(f"search.html?q={query}" for query in SEARCHES)]

pytestmark = pytest.mark.book


def test_pages_were_built():
    assert PAGES, f"no pages found under {HTML}: build the book first (make book)"


@pytest.mark.parametrize("page_path", VISITED)
def test_page_works_offline(look, page_path):
    seen = look(page_path, "desktop")
    state = seen["state"]
    problems = list(seen["problems"])
    problems += [f"raw TeX: {page_path}: {where}" for where in state["rawTex"]]
    problems += [f"untypeset math: {text!r}" for text in state["untypeset"]]
    problems += [f"MathJax error: {text!r}" for text in state["mathErrors"]]
    problems += [f"image does not load: {src}" for src in state["brokenImages"]]
    problems += [f"widget error: {text!r}" for text in state["widgetErrors"]]
    if state["widgetsRendered"] < state["widgetViews"]:
        problems.append(
            f"{state['widgetViews']} saved widget views, {state['widgetsRendered']} rendered"
        )
    if search := state["search"]:
        if not search["listed"] or search["snippets"] < search["listed"]:
            problems.append(
                f"search lists {search['listed']} results, {search['snippets']} with a snippet"
                f" ({search['status']!r})"
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


# The raw-TeX check on small pieces of HTML: each "yes" must be reported, no "no".
RAW_TEX_CASES = r"""
<p>yes1 a dollar $x$ in prose</p>
<p>yes2 the kernel \(\exp(q^\T k)\) as source</p>
<ul><li>yes3 a macro \softmax in a list</li></ul>
<p>yes4 <a href="#">Gradients in \bigO{Nd} memory</a>, a link</p>
<p>yes5 a subscript x_{i}</p><p>yes6 a superscript e^{x}</p>
<table><tr><td>yes7 \begin{aligned} in a table</td></tr></table>
<p>yes8 a display \[ a \] and</p><p>yes9 a \frac</p><p>yes10 \R alone</p>
<p>yes11 <span class="math notranslate nohighlight">\(x\)</span> left untypeset</p>
<details><summary>closed</summary><p>yes12 $hidden one click away$</p></details>
<h2>yes13 a \mathbf heading</h2>
<p>yes14 Sch\"olkopf, an accent</p><p>yes15 at \url{https://example.org}</p>
<p>no1 <code>$HOME</code> <kbd>$</kbd> <samp>x_{i}</samp> in code</p>
<pre>no2 \frac{1}{2} in a listing</pre>
<div class="highlight"><span>no3 x_{i} highlighted</span></div>
<p style="display: none">no4 $x$ not displayed</p><p hidden>no5 $x$ hidden</p>
<p style="visibility: hidden">no6 \frac invisible</p>
<p>no7 <mjx-container>$x$ typeset</mjx-container></p>
<p>no8 C:\Temp\Theta\Editor\Results, \\server\share and %USERPROFILE%\x, paths</p>
<p>yes16 a 2\times 2 matrix, a command of TeX's own</p>
<p>no9 x^2, a_b and 5 % are no TeX</p>
<textarea>no10 $x$</textarea><script>const no11 = "$";</script>
"""


def test_the_raw_tex_check_finds_tex_and_only_tex(browser):
    page = browser.new_page()
    page.set_content(f"<html><body>{RAW_TEX_CASES}</body></html>")
    found = page.evaluate(f"(pattern) => ({FIND_RAW_TEX})(document.body, pattern)", TEX)
    page.close()
    found_cases = {re.search(r"\b(yes|no)\d+", where).group() for where in found}
    expected = set(re.findall(r"\byes\d+", RAW_TEX_CASES))
    assert found_cases == expected, found
    assert len(found) == len(expected), found  # one finding per spot
    assert 'li "yes3 a macro \\softmax in a list"' in found
    assert 'p "yes4 Gradients in \\bigO{Nd} memory, a link"' in found


def test_the_raw_tex_check_fails_a_built_page_with_tex(server, offline_page):
    """The same check the book's pages pass, on a built page served with a slip of TeX added:
    it must fail there."""
    page, problems = offline_page
    slip = r"<p>A slip: the cost $x$ as typed</p>"
    slip += r"<p>and \(\softmax(QK^\T)\), no script typesets it</p>"

    def serve_with_slip(route):
        response = route.fetch()
        route.fulfill(response=response, body=response.text().replace("</main>", slip + "</main>"))

    page.route(f"{server}/intro.html", serve_with_slip)
    page.goto(f"{server}/intro.html", wait_until="load")
    state = page.evaluate(INSPECT, TEX)
    assert state["math"] > 0  # the page's own formulas, typeset when the book was built
    assert state["rawTex"] == [
        'p "A slip: the cost $x$ as typed"',
        'p "and \\(\\softmax(QK^\\T)\\), no script typesets it"',
    ], state["rawTex"]
    assert not problems, problems


def test_search_index_delimits_the_math_of_titles():
    """A search result found by its section title shows the title; searchtools.js sets it as
    HTML, where _extra/shims/search.js typesets each \\(...\\) (_ext/book_pages.py)."""
    text = (HTML / "searchindex.js").read_text(encoding="utf-8")
    titles = json.loads(text[text.index("(") + 1 : text.rindex(")")])["alltitles"]
    assert r"\(\phi(x) = x\): a kernel, but not a similarity" in titles
    outside = [t for t in titles if re.search(TEX, re.sub(r"\\\(.*?\\\)", "", t))]
    assert not outside, f"titles with TeX outside \\(...\\): {outside}"


@pytest.mark.parametrize("page_path", PAGES)
def test_page_fits_a_phone_without_sideways_scrolling(look, page_path):
    """Wide content (code, tables, formulas, figures) scrolls inside its own box; the page itself
    never grows wider than a 390 px phone screen."""
    width = look(page_path, "phone")["width"]
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


@pytest.mark.parametrize("page_path", PAGES)
def test_every_control_of_a_static_figure_changes_it(look, page_path):
    """The book's interactive figures work without a kernel: moving any control shows the
    precomputed result of that setting, whose images (files loaded as they are picked) say in
    words which setting they show (EXPLORE, looks.py)."""
    problems = look(page_path, "desktop")["controls"]
    assert not problems, f"{page_path}:\n  " + "\n  ".join(problems)


def test_proof_index_is_linked_and_lists_numbers_and_titles_by_chapter():
    """The index of definitions, theorems and proofs (_ext/proof_index.py) is reachable from the
    introduction and names each entry under its chapter as the chapter does, by kind, number
    and title ("Theorem 3: …"), never by its raw label."""
    assert 'href="prf-prf.html"' in (HTML / "intro.html").read_text()
    page = (HTML / "prf-prf.html").read_text()
    chapters = re.findall(r'<tr class="cap"[^>]*><td></td><td>\s*<strong>([^<]+)</strong>', page)
    assert chapters[0] == "From softmax attention to kernels" and len(chapters) >= 8
    names = re.findall(r'<code class="xref">([^<]+)</code></a>', page)
    assert "Definition 1: Kernel, feature map, Gram matrix" in names
    numbered = [re.match(r"(\w+) (\d+)(: .+)?$", name) for name in names]
    assert all(match and match[1] in KINDS for match in numbered), names[:5]
    assert not [name for name in names if "$" in name or "\\" in name]  # no raw TeX
    assert "<em>(" not in page  # no label beside an entry


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


# What a search finds first: the chapter named by the words searched for (_extra/shims/search.js).
FIRST_RESULTS = """async () => {
  if (window.bookSearchMath) await window.bookSearchMath();
  return [...document.querySelectorAll("#search-results ul.search > li")].slice(0, 3)
    .map((li) => ({ title: li.querySelector("a").textContent.trim(),
                    snippet: li.querySelector("p.context")?.textContent || "",
                    // each formula of a snippet typeset again from the page's TeX: S_t, not St
                    math: [...li.querySelectorAll("p.context mjx-container")]
                      .map((m) => m.querySelector("mjx-assistive-mml")?.textContent || "") }));
}"""


@pytest.mark.parametrize(
    ("query", "chapter"),
    [
        ("delta rule", "The delta rule and triangular inverses"),
        ("recurrent and chunked", "Linear attention: causal, recurrent and chunked"),
        ("Taylor", "The exponential kernel and its Taylor expansion"),
    ],
)
def test_search_ranks_the_chapter_named_first(server, offline_page, query, chapter):
    page, problems = offline_page
    page.goto(f"{server}/search.html?q={query}", wait_until="load")
    page.wait_for_function("document.querySelector('#search-results .search-summary')?.textContent")
    results = page.evaluate(FIRST_RESULTS)
    assert results[0]["title"] == chapter, results
    if query == "delta rule":  # its snippet opens with the recurrence S_t = S_(t−1) + φ(k_t)v_tᵀ
        assert results[0]["math"] and results[0]["math"][0].startswith("St=St−1+"), results
    for result in results:  # a snippet of the article, not the buttons above it
        assert not re.search(r"\bRepository\b|Open issue|\.ipynb|\.pdf", result["snippet"]), result
    assert not problems, problems
