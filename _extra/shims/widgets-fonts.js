// The ipywidgets HTML manager looks for its fonts next to the URL of its AMD module, and
// require.js derives that URL from the folder of the page, which differs from page to page.
// Map the module to the folder where the book serves the manager (see scripts/vendor_assets.py).
(function () {
  "use strict";
  const manager = new URL("../vendor/html-manager", document.currentScript.src).href;
  window.require.config({ paths: { "@jupyter-widgets/html-manager/dist": manager } });
})();
