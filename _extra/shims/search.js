// The search page (search.html), as a reader needs it. _ext/book_pages.py loads this file,
// MathJax and the book's macros on search.html only.
//
// Ranking: Sphinx scores a page by the best place each word is found, and every section title
// of a page counts as its title, so "delta rule" found Corrections and Matrix calculus (which
// have sections on it) before the chapter named after it. A result on a page whose own title
// holds the words searched for now comes first, the page itself before its sections.
//
// Snippets: Sphinx shows each result with a snippet of the page's text, taken from the page's
// main element, where the buttons of the article header come first ("Repository Open issue
// .ipynb .pdf"); the math in that text is TeX source (\(\exp(q^\T k)\)), cut at 240
// characters (in the middle of a formula at times), and a result anchored at an empty target
// (an {index} entry) got no snippet at all (a JavaScript error, appendChild(null)). Here a
// snippet is taken from the article alone, keeps each formula whole (or leaves it out where the
// cut would halve it), shows code as code, and MathJax typesets the formulas from the TeX each
// typeset formula of a page keeps (_ext/static_pages.py), those of the results' titles too
// (_ext/book_pages.py delimits math in the index's titles).
(function () {
  "use strict";
  if (typeof Search === "undefined") return;

  // --- ranking ---------------------------------------------------------------------------
  const words = (text) => (text || "").toLowerCase().match(/[\p{L}\p{N}]+/gu) || [];
  // A word of the query is in a title if a word of the title starts with it or with its stem
  // ("chunked" finds "chunked", "form" finds "forms").
  const inTitle = (word, titleWords) =>
    titleWords.some((t) => t === word || (word.length > 3 && t.startsWith(word.slice(0, -1))));
  let queryWords = [];
  const query = Search.query;
  Search.query = (text) => {
    queryWords = words(text);
    return query(text);
  };
  const score = Scorer.score;
  Scorer.score = (result) => {
    const [docName, , anchor] = result;
    const base = score ? score(result) : result[4];
    const index = Search._index;
    const titleWords = words(index.titles[index.docnames.indexOf(docName)]);
    const found = queryWords.filter((word) => inTitle(word, titleWords)).length;
    if (!found) return base;
    return base + Math.round((anchor ? 40 : 100) * (found / queryWords.length));
  };

  // --- snippets and math --------------------------------------------------------------------

  // One MathJax pass after another (MathJax 3 asks that typesetting calls do not overlap).
  let queue = Promise.resolve();
  const typeset = (element) => {
    queue = queue
      .then(() => window.MathJax && MathJax.startup && MathJax.startup.promise)
      .then(() => window.MathJax.typesetPromise([element]))
      .catch((error) => console.warn("MathJax typeset failed:", error));
  };
  // For the book's browser check: resolves once every formula shown so far is typeset.
  window.bookSearchMath = async () => {
    let seen;
    do {
      seen = queue;
      await seen;
    } while (seen !== queue);
  };

  const mathSpan = (tex) => {
    const span = document.createElement("span");
    span.className = "math notranslate nohighlight"; // sphinx_highlight.js leaves it alone
    span.textContent = "\\(" + tex + "\\)";
    return span;
  };

  // A displayed formula shown inline, within the line of the snippet.
  const inline = (tex) =>
    tex
      .replace(/\\(label|tag\*?)\{[^{}]*\}|\\nonumber|\\notag/g, "")
      .replace(/\\(begin|end)\{(align|flalign|split)\*?\}/g, "\\$1{aligned}")
      .replace(/\\(begin|end)\{alignat\*?\}/g, "\\$1{alignedat}")
      .replace(/\\(begin|end)\{gather\*?\}/g, "\\$1{gathered}")
      .replace(/\\(begin|end)\{multline\*?\}/g, "\\$1{multlined}")
      .replace(/\\(begin|end)\{equation\*?\}/g, "");

  // The text of a page (or of the part an anchor names) as pieces: text, math and code.
  const pieces = (htmlString, anchor) => {
    const html = new DOMParser().parseFromString(htmlString, "text/html");
    for (const removal of [".headerlink", "script", "style", ".eqno"]) {
      html.querySelectorAll(removal).forEach((el) => el.remove());
    }
    const main = html.querySelector("article.bd-article") || html.querySelector('[role="main"]');
    let root = main;
    if (main && anchor) {
      try {
        root = main.querySelector(anchor) || main;
      } catch {
        root = main; // an anchor that is no valid selector
      }
      // An empty target ({index}, a label) stands before what it names: its section.
      while (root !== main && !root.textContent.trim()) root = root.parentElement;
    }
    const found = [];
    const walk = (node) => {
      if (node.nodeType === Node.TEXT_NODE) {
        const text = node.data.replace(/\s+/g, " ");
        found.push({ text, flat: text });
      } else if (node.nodeType !== Node.ELEMENT_NODE) {
        return;
      } else if (node.matches(".math")) {
        // the pages arrive typeset (_ext/static_pages.py): each formula keeps its TeX
        const typeset = [...node.querySelectorAll("mjx-container[data-tex]")];
        const display = node.localName === "div";
        const tex = typeset.map((formula) => formula.dataset.tex).join(" \\quad ");
        found.push({ math: display ? inline(tex) : tex, flat: tex });
      } else if (node.matches("pre, code, kbd, samp")) {
        const code = node.textContent.replace(/\s+/g, " ");
        found.push({ code, flat: code });
      } else {
        node.childNodes.forEach(walk);
      }
    };
    if (root) walk(root);
    return found;
  };

  Search.makeSearchSummary = (htmlText, keywords, anchor) => {
    const parts = pieces(htmlText, anchor);
    let text = "";
    for (const part of parts) {
      part.start = text.length;
      text += part.flat; // math as TeX, where Sphinx finds the keywords too
    }
    // Where Sphinx starts its snippet: 120 characters before the last keyword found.
    const textLower = text.toLowerCase();
    const position = [...keywords]
      .map((k) => textLower.indexOf(k.toLowerCase()))
      .filter((i) => i > -1)
      .slice(-1)[0];
    const start = Math.max((position ?? 0) - 120, 0);
    const end = start + 240;

    const summary = document.createElement("p");
    summary.classList.add("context");
    const add = (node) => summary.appendChild(node);
    if (start > 0) add(document.createTextNode("..."));
    for (const part of parts) {
      if (part.start + part.flat.length <= start || part.start >= end) continue;
      if ("math" in part) {
        if (part.start >= start) add(mathSpan(part.math)); // whole, or not at all
        continue;
      }
      const shown = part.flat.slice(Math.max(start - part.start, 0), end - part.start);
      if ("code" in part) {
        add(document.createElement("code")).textContent = shown;
      } else {
        add(document.createTextNode(shown));
      }
    }
    if (end < text.length) add(document.createTextNode("..."));
    summary.normalize();
    if (summary.firstChild && summary.firstChild.nodeType === Node.TEXT_NODE) {
      summary.firstChild.data = summary.firstChild.data.trimStart();
    }
    typeset(summary);
    return summary;
  };

  // The results' titles: a title with math reads "\(\sigma_1\) by power iteration"; the formula
  // goes into a span that the highlighting of search terms leaves alone, then MathJax sets it.
  const DELIMITED = /\\\((.*?)\\\)/g;
  const titles = (list) => {
    for (const link of list.querySelectorAll("li > a:not([data-math])")) {
      link.dataset.math = "";
      const text = link.textContent;
      if (!text.includes("\\(")) continue;
      link.textContent = "";
      let last = 0;
      for (const match of text.matchAll(DELIMITED)) {
        link.append(text.slice(last, match.index), mathSpan(match[1]));
        last = match.index + match[0].length;
      }
      link.append(text.slice(last));
      typeset(link);
    }
  };
  const watch = () => {
    const results = document.getElementById("search-results");
    if (!results) return;
    new MutationObserver(() => titles(results)).observe(results, { childList: true, subtree: true });
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", watch);
  else watch();
})();
