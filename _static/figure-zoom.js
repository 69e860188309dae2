// A figure is drawn for the 784 px column of a wide window; on a phone it shrinks to the width of
// the screen, and its text with it (to 4 or 5 px). Tapping (or clicking) a figure that is shown
// smaller than it was drawn opens it at its drawn size in a dialog that scrolls, where its text
// is as large as the book measured it (linattn_core.book.plotting); the close button, Escape or a tap
// outside the figure close it. The frames of interactive figures are replaced as their controls
// move, so the page listens once, for every figure image, present or future.
(function () {
  "use strict";
  const FIGURES = "article .cell_output img, article figure img, article .explorable-frame img";

  // The size the figure was drawn for: its width attribute (the PNG has twice as many pixels,
  // for sharp screens).
  const drawnWidth = (img) => Number(img.getAttribute("width")) || img.naturalWidth / 2;
  const shrunk = (img) => img.getBoundingClientRect().width < drawnWidth(img) - 1;

  let dialog = null;
  function open(img) {
    if (!dialog) {
      dialog = document.createElement("dialog");
      dialog.className = "figure-zoom";
      dialog.setAttribute("aria-label", "Figure at full size");
      dialog.innerHTML =
        '<button type="button" class="figure-zoom-close" aria-label="Close">×</button>' +
        '<div class="figure-zoom-scroll"></div>';
      dialog.querySelector(".figure-zoom-close").addEventListener("click", () => dialog.close());
      dialog.addEventListener("click", (event) => {
        if (event.target === dialog) dialog.close(); // a tap on the backdrop
      });
      document.body.appendChild(dialog);
    }
    const copy = document.createElement("img");
    copy.src = img.currentSrc || img.src;
    copy.alt = img.alt;
    copy.style.width = `${drawnWidth(img)}px`;
    dialog.querySelector(".figure-zoom-scroll").replaceChildren(copy);
    dialog.showModal();
  }

  document.addEventListener("click", (event) => {
    const img = event.target.closest && event.target.closest(FIGURES);
    if (img && shrunk(img)) {
      event.preventDefault(); // not the link to the image file that Sphinx wraps it in
      open(img);
    }
  });
  // Say so where it applies: the figures shown smaller than they were drawn.
  function mark() {
    document.querySelectorAll(FIGURES).forEach((img) => {
      img.classList.toggle("figure-zoomable", shrunk(img));
    });
  }
  window.addEventListener("resize", mark);
  window.addEventListener("load", mark);
})();
