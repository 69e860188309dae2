// MathJax 3 does not break a formula across lines: on a phone an inline formula wider than the
// text column ran past the edge of the page, where nobody could read it. Each inline formula
// wider than its paragraph gets the class math-wide (book.css), which lets it scroll sideways
// on its own. Formulas are typeset as they scroll into view (ui/lazy), so every new one is
// measured when it appears, and all of them again when the window changes width.
(function () {
  "use strict";
  const INLINE = "mjx-container:not([display='true'])";
  function fit(formula) {
    const block = formula.closest("p, li, dd, td, .admonition, article");
    if (!block) return;
    formula.classList.remove("math-wide");
    const edge = block.getBoundingClientRect().right;
    formula.classList.toggle("math-wide", formula.getBoundingClientRect().right > edge + 1);
  }
  function fitAll(root) {
    root.querySelectorAll(INLINE).forEach(fit);
  }
  function watch() {
    const article = document.querySelector("article") || document.body;
    fitAll(article);
    new MutationObserver((changes) => {
      for (const change of changes) {
        for (const node of change.addedNodes) {
          if (node.nodeType !== 1) continue;
          if (node.matches(INLINE)) fit(node);
          else fitAll(node);
        }
      }
    }).observe(article, { childList: true, subtree: true });
    let pending = null;
    window.addEventListener("resize", () => {
      cancelAnimationFrame(pending);
      pending = requestAnimationFrame(() => fitAll(article));
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", watch);
  else watch();
})();
