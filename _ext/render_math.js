// Typeset the book's formulas when it is built (_ext/static_pages.py runs this with node).
//
// stdin:  {"macros": {...}, "pages": [{"fontURL": "../vendor/...", "formulas": [[tex, display], ...]}]}
// stdout: {"pages": [{"html": ["<mjx-container ...>", ...], "css": "..."}]}
//
// The output is what MathJax 3 makes in the browser (CommonHTML with its TeX fonts, and the
// formula as MathML for screen readers), so a page shows its formulas as it is drawn: no TeX
// source before MathJax has loaded, no jump when a formula replaces its source, and no
// typesetting script at all. Each page gets the stylesheet of the characters it uses. A formula
// that TeX cannot read is an error that names it: the build fails instead of showing it in red.
"use strict";
const fs = require("fs");
const { mathjax } = require("mathjax-full/js/mathjax.js");
const { TeX } = require("mathjax-full/js/input/tex.js");
const { CHTML } = require("mathjax-full/js/output/chtml.js");
const { liteAdaptor } = require("mathjax-full/js/adaptors/liteAdaptor.js");
const { RegisterHTMLHandler } = require("mathjax-full/js/handlers/html.js");
const { AssistiveMmlHandler } = require("mathjax-full/js/a11y/assistive-mml.js");
require("mathjax-full/js/input/tex/AllPackages.js");

// What the browser's TeX input has (tex-chtml: base, ams, newcommand, configmacros and the
// book's mathtools), and the packages it would load on demand for a macro a formula uses.
// Not noundefined: an unknown macro must fail the build, not be drawn in red.
const PACKAGES = [
  "base", "ams", "newcommand", "configmacros", "mathtools", "boldsymbol", "braket", "cancel",
  "cases", "centernot", "color", "enclose", "extpfeil", "gensymb", "html", "unicode", "upgreek",
];

const input = JSON.parse(fs.readFileSync(0, "utf8"));
const adaptor = liteAdaptor();
AssistiveMmlHandler(RegisterHTMLHandler(adaptor));

const errors = [];
const pages = input.pages.map((page) => {
  const tex = new TeX({
    packages: PACKAGES,
    macros: input.macros,
    formatError: (_jax, error) => {
      throw error;
    },
  });
  // The browser scaled the formulas to the x-height of the text around them (matchFontHeight):
  // the theme's system fonts give the factor `scale`.
  const chtml = new CHTML({
    fontURL: page.fontURL,
    adaptiveCSS: true,
    matchFontHeight: false,
    scale: input.scale,
  });
  const document = mathjax.document("", { InputJax: tex, OutputJax: chtml });
  const html = page.formulas.map(([source, display]) => {
    try {
      return adaptor.outerHTML(document.convert(source, { display, em: 16, ex: 8 }));
    } catch (error) {
      errors.push(`${page.name}: ${error.message} in ${JSON.stringify(source.slice(0, 200))}`);
      return "";
    }
  });
  return { html, css: adaptor.textContent(chtml.styleSheet(document)) };
});

if (errors.length) {
  process.stderr.write(errors.join("\n") + "\n");
  process.exit(1);
}
process.stdout.write(JSON.stringify({ pages }));
