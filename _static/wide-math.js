// MathJax 3 does not break a formula across lines: on a phone an inline formula wider than the
// text column ran past the edge of the page, where nobody could read it. Each inline formula
// wider than its paragraph gets the class math-wide (book.css), which lets it scroll sideways
// on its own. The formulas are typeset when the book is built (_ext/static_pages.py): they are
// measured as soon as the page is parsed, and again when the window changes width (all read
// first, then all marked: one layout, not one per formula).
(function () {
  "use strict";
  const INLINE = "mjx-container:not([display='true'])";
  function fitAll() {
    const article = document.querySelector("article") || document.body;
    const formulas = [...article.querySelectorAll(INLINE)]
      .map((formula) => [formula, formula.closest("p, li, dd, td, .admonition, article")])
      .filter(([, block]) => block);
    formulas.forEach(([formula]) => formula.classList.remove("math-wide"));
    formulas
      .filter(([formula, block]) => {
        const edge = block.getBoundingClientRect().right;
        return formula.getBoundingClientRect().right > edge + 1;
      })
      .forEach(([formula]) => formula.classList.add("math-wide"));
  }
  let pending = null;
  window.addEventListener("resize", () => {
    cancelAnimationFrame(pending);
    pending = requestAnimationFrame(fitAll);
  });
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", fitAll);
  else fitAll();
})();
