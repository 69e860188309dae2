"""What a reader's browser shows of a built page: each page loaded once in a 1400 px window and
once on a 390 px phone, everything measured in that one visit.

A chapter takes seconds to load (its formulas, figures and widgets), and the browser checks ask
many questions of each page (test_browser.py, test_pages.py, test_layout.py). `desktop` and
`phone` load a page, ask every question in an order that leaves each answer as a fresh load gives
it (the layout shift first, the page's bytes before anything is scrolled or clicked, the controls
moved last), and return the answers; the `look` fixture (conftest.py) keeps them for the session.
"""

import re
from pathlib import Path
from urllib.parse import urlparse

import yaml

ROOT = Path(__file__).resolve().parents[2]
DESKTOP = {"width": 1400, "height": 900}
PHONE = {"width": 390, "height": 844}


def keep_offline(page, problems):
    """Let `page` load only 127.0.0.1, data: and blob: URLs: append every request it refuses, and
    every JavaScript error the page raises, to `problems`."""

    def route(route):
        host = urlparse(route.request.url).hostname
        if route.request.url.startswith(("data:", "blob:")) or host == "127.0.0.1":
            route.continue_()
        else:
            problems.append(f"request leaves 127.0.0.1: {route.request.url}")
            route.abort()

    page.route("**/*", route)
    page.on("pageerror", lambda error: problems.append(f"JavaScript error: {error}"))


def tex_pattern():
    r"""What TeX source looks like in text a reader sees: a dollar, a math delimiter, a sub- or
    superscript in braces, a command with a braced argument (\url{, \emph{), an accent (\"o), a
    command of TeX's or of the book's own (the macros of _config.yml's mathjax3_config, read from
    there), a whole command name (\T, not \Theta); last, in a group of its own, any other command
    (\times, \sigma), which FIND_RAW_TEX lets pass in a Windows path (C:\Temp)."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    macros = config["sphinx"]["config"]["mathjax3_config"]["tex"]["macros"]
    commands = ["begin", "end", "frac", "mathbf", "mathbb", "operatorname", "sum", "top", *macros]
    named = "|".join(map(re.escape, commands))
    return (
        rf"\$|\\[()[\]]|[_^]\{{|\\[A-Za-z]+\{{|\\[\"'`^~][A-Za-z{{\\]"
        rf"|\\(?:{named})(?![A-Za-z])|(\\[A-Za-z]+)"
    )


TEX = tex_pattern()


# Every text node a reader sees outside typeset math (mjx-container), code (pre, code, kbd, samp,
# a highlighted listing, a code cell) and what the browser does not show (script, style, template,
# display: none, visibility: hidden), that matches the pattern: where it is (the enclosing block)
# and 60 characters of its text around the TeX, math shown as [math]. A closed <details> is opened
# for the look (its content is the reader's one click away).
FIND_RAW_TEX = """(root, pattern) => {
  const tex = new RegExp(pattern, "g");
  const windowsPath = /(^|[^A-Za-z])[A-Za-z]:\\\\|^\\\\\\\\|%\\w+%\\\\/;
  const find = (data) => {
    for (const match of data.matchAll(tex)) {
      if (match[1] === undefined) return match;
      const [before, after] = [data.slice(0, match.index), data.slice(match.index)];
      const word = before.split(/\\s/).pop() + after.split(/\\s/)[0];
      if (!windowsPath.test(word)) return match;
    }
    return null;
  };
  const skip = "mjx-container, pre, code, kbd, samp, script, style, textarea, noscript, template, "
    + ".highlight, .cell_input, .literal-block";
  const blocks = "p, li, dt, dd, td, th, caption, figcaption, h1, h2, h3, h4, h5, h6, pre, "
    + "blockquote, div, section, article, nav";
  const closed = [...root.querySelectorAll("details:not([open])")];
  closed.forEach((details) => (details.open = true));
  const text = (block, target, index) => {
    let all = "", at = 0;
    const walk = (node) => {
      if (node === target) at = all.length + index;
      if (node.nodeType === Node.TEXT_NODE) all += node.data;
      else if (node.nodeType !== Node.ELEMENT_NODE || node.matches("script, style")) return;
      else if (node.matches("mjx-container")) all += "[math]";
      else node.childNodes.forEach(walk);
    };
    walk(block);
    const start = Math.max(0, at - 20);
    return all.slice(start, start + 120).replace(/\\s+/g, " ").trim().slice(0, 60);
  };
  const found = [];
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const match = find(node.data);
    const element = node.parentElement;
    if (!match || !element || element.closest(skip)) continue;
    if (!element.checkVisibility({ visibilityProperty: true })) continue;
    const block = element.closest(blocks) || element;
    const name = block.localName + (block.classList.length ? "." + block.classList[0] : "");
    found.push(`${name} "${text(block, node, match.index)}"`);
  }
  closed.forEach((details) => (details.open = false));
  return found;
}"""


# What a page looks like once it has settled, measured in the page itself.
# The search page (search.html?q=...) has settled once its status line reports the count and every
# result shows its snippet, typeset (_extra/shims/search.js).
INSPECT = """async (texPattern) => {
  const deadline = Date.now() + 10000;
  const wait = async (done) => {
    while (!done() && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  };
  const query = new URLSearchParams(location.search).get("q");
  const results = document.getElementById("search-results");
  const listed = () => [...document.querySelectorAll("#search-results ul.search > li")];
  if (results && query) {
    await wait(() => results.querySelector(".search-summary")?.textContent
      && listed().every((li) => li.querySelector(":scope > .context, :scope > span")));
    if (window.bookSearchMath) await window.bookSearchMath();
  }
  // the search page typesets its snippets in the browser; every other page arrives typeset
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  const views = document.querySelectorAll(
    'script[type="application/vnd.jupyter.widget-view+json"]');
  const settled = () => document.querySelectorAll(
    '.widget-subarea > .jupyter-widgets, .widget-error').length >= views.length;
  await wait(() => settled());
  const untypeset = [...document.querySelectorAll('span.math, div.math')]
    .filter((el) => !el.querySelector('mjx-container'))
    .map((el) => el.textContent.slice(0, 60));
  const mathErrors = [...document.querySelectorAll('mjx-merror')].map((el) => el.textContent);
  // images load as they near the screen: load them all, and wait for them
  const images = [...document.images];
  images.forEach((img) => { img.loading = "eager"; });
  await Promise.all(images.map((img) => img.decode().catch(() => null)));
  const brokenImages = images
    .filter((img) => !(img.complete && img.naturalWidth > 0))
    .map((img) => img.getAttribute('src').slice(0, 80));
  return {
    math: document.querySelectorAll('mjx-container').length,
    untypeset, mathErrors, brokenImages,
    search: results && query ? {
      status: results.querySelector(".search-summary")?.textContent || "",
      listed: listed().length,
      snippets: document.querySelectorAll("#search-results ul.search > li > p.context").length,
    } : null,
    rawTex: (FIND_RAW_TEX)(document.body, texPattern),
    widgetViews: views.length,
    widgetsRendered: document.querySelectorAll('.widget-subarea > .jupyter-widgets').length,
    widgetErrors: [...document.querySelectorAll('.widget-error')]
      .map((el) => el.textContent.slice(0, 120)),
  };
}""".replace("FIND_RAW_TEX", FIND_RAW_TEX)


EXPLORE = """async (root) => {
  // Every option of every control: the frame must change when a control does (each control
  // changes something), and the frame's images must load and name the chosen settings in their
  // words (alt text); the settings are shown nowhere else than in the controls.
  const selects = [...root.querySelectorAll("select")];
  const titles = [...root.querySelectorAll("label")].map((l) => l.firstChild.textContent.trim());
  const frame = root.querySelector(".explorable-frame");
  const problems = [];
  root.scrollIntoView();  // the page loads images as they near the screen
  const loads = (img) => Promise.race([
    img.decode().then(() => true, () => false),
    new Promise((resolve) => setTimeout(() => resolve(false), 5000)),
  ]);
  if (root.querySelector(".explorable-caption")) problems.push("a caption of the settings");
  for (const [i, select] of selects.entries()) {
    let changed = false;
    const first = frame.innerHTML;
    for (const option of [...select.options]) {
      select.value = option.value;
      select.dispatchEvent(new Event("change"));
      const settings = selects
        .map((s, j) => titles[j] + " = " + s.options[s.selectedIndex].text).join(", ");
      for (const img of frame.querySelectorAll("img")) {
        if (!(await loads(img))) problems.push(`image does not load at ${settings}`);
        if (!img.alt.endsWith(settings) && !img.alt.endsWith(`(${settings})`)) {
          problems.push(`alt "${img.alt}" at ${settings}`);
        }
      }
      if (frame.innerHTML !== first) changed = true;
    }
    if (!changed) problems.push(`control ${titles[i]} changes nothing`);
    select.selectedIndex = 0;
    select.dispatchEvent(new Event("change"));
  }
  return problems;
}"""


# The layout shifts of the page so far (no reader input: there was none), once it has settled.
LAYOUT_SHIFT = """() => new Promise((resolve) => {
  let total = 0;
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) if (!entry.hadRecentInput) total += entry.value;
  }).observe({ type: "layout-shift", buffered: true });
  setTimeout(() => resolve(total), 300);
})"""


# Displayed formulas wider than their box at this width.
CLIPPED = """() => [...document.querySelectorAll("article div.math mjx-container[display='true']")]
  .filter((formula) => formula.scrollWidth > formula.clientWidth + 1)
  .map((formula) => formula.textContent.slice(0, 50))"""


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


def desktop(browser, url):
    """Load `url` as a reader's browser does in a 1400 px window, serving only 127.0.0.1 (and
    data:, blob:): the page's first view (`received`, the bytes of everything it loads until the
    network is idle, compressed as sent; `shift`, its layout shift at load; `clipped`, displayed
    formulas wider than the column), its figures and code as shown (`figures`, `code`), what it
    looks like once settled (`state`, INSPECT), the problems of the load (`problems`: requests
    refused or failed, HTTP errors, JavaScript and console errors), then every control of every
    static figure moved (`controls`, EXPLORE, and the problems that raised)."""
    page = browser.new_page(viewport=DESKTOP)
    problems, sizes = [], []
    keep_offline(page, problems)
    origin = f"{urlparse(url).scheme}://{urlparse(url).netloc}"
    page.on(
        "console",
        lambda message: (
            message.type == "error" and problems.append(f"console error: {message.text}")
        ),
    )
    page.on(
        "requestfailed",
        lambda request: (
            request.url.startswith(origin)
            and problems.append(f"request failed: {request.url} ({request.failure})")
        ),
    )
    page.on(
        "response",
        lambda response: (
            response.status >= 400 and problems.append(f"HTTP {response.status}: {response.url}")
        ),
    )
    page.on("requestfinished", lambda request: sizes.append(request.sizes()))
    page.goto(url, wait_until="load")
    page.wait_for_load_state("networkidle")
    look = {"received": sum(s["responseBodySize"] + s["responseHeadersSize"] for s in sizes)}
    look["shift"] = page.evaluate(LAYOUT_SHIFT)
    look["clipped"] = page.evaluate(CLIPPED)
    look["figures"] = page.evaluate(SIZES)
    look["code"] = page.evaluate(CODE)
    look["state"] = page.evaluate(INSPECT, TEX)
    look["problems"] = list(problems)
    controls = []
    for figure in page.query_selector_all(".explorable"):
        if figure.query_selector("select"):
            controls += figure.evaluate(EXPLORE)
        else:
            controls.append("a static figure without controls")
    look["controls"] = controls + problems[len(look["problems"]) :]
    page.close()
    return look


def phone(browser, url):
    """Load `url` on a 390 px phone: its layout shift at load (`shift`), the width of the page
    (`width`, which wide content must not make wider than the screen) and the inline formulas that
    reach past the text column (`past the edge`)."""
    # Not Playwright's is_mobile: Chromium's mobile emulation reports no layout shift at all.
    page = browser.new_page(viewport=PHONE)
    page.goto(url, wait_until="load")
    look = {"shift": page.evaluate(LAYOUT_SHIFT)}
    look["width"] = page.evaluate("document.documentElement.scrollWidth")
    look["past the edge"] = page.evaluate(PAST_THE_EDGE)
    page.close()
    return look
