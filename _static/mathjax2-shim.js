// ipywidgets (HTMLMath, Label, slider descriptions) typesets through the MathJax 2 API,
// MathJax.Hub.Queue(["Typeset", MathJax.Hub, element]); the book loads MathJax 3, which
// offers MathJax.typesetPromise instead. Whatever object is put in window.MathJax (Sphinx's
// configuration, then MathJax 3 itself) gets a small Hub that forwards to MathJax 3.
(function () {
  "use strict";
  function typeset(command) {
    const mathjax = window.MathJax;
    if (!Array.isArray(command) || command[0] !== "Typeset" || !mathjax.typesetPromise) {
      return;
    }
    const element = command[2];
    mathjax.startup.promise
      .then(() => mathjax.typesetPromise(element ? [element] : undefined))
      .catch((error) => console.warn("MathJax typeset failed:", error));
  }
  const hub = { Queue: (...commands) => commands.forEach(typeset) };
  let current = window.MathJax;
  Object.defineProperty(window, "MathJax", {
    configurable: true,
    get() {
      return current;
    },
    set(value) {
      current = value;
      if (value && typeof value === "object" && !("Hub" in value)) {
        Object.defineProperty(value, "Hub", { value: hub, enumerable: false });
      }
    },
  });
})();
