"""The book's machinery: how the chapters show the package (the `widgets` extra: ipywidgets,
matplotlib, pillow, pygments).

- `explorable`: an interactive figure that works with a running kernel and without one;
- `explorers`: the scaling chapter's explorers (`ComplexityExplorer`, `ChunkSizeExplorer`,
  `GenerationExplorer`, on their base class `Explorer`), which measure on the reader's machine;
- `plotting`: how a matplotlib figure is displayed, and the book's minimum text sizes;
- `show`: `show_source`, a package function's source in a notebook and in the HTML book.

It stands above the rest: it uses the attention code and `linattn_core.bench`; nothing in the
package imports it.
"""
