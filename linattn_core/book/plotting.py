"""How the book shows a matplotlib figure: crisp, and with text a reader can read.

A figure is displayed at its natural width (inches × dpi, in CSS pixels) or, when that is wider,
shrunk to the book's text column, `COLUMN_PX` wide in a 1400 px window (the browser check
measures the column again). Shrinking shrinks the text with it, so the size that matters is
`text_px`: the height of the figure's smallest text as displayed. The book asks for at least
`MIN_TEXT_PX` in a figure and `MIN_EXPLORABLE_TEXT_PX` in an interactive one.

`use_book_figures()`, called at the top of every chapter, makes Jupyter show each figure as a
PNG rendered at twice its displayed resolution in a palette of 256 colours, with its display
width and its `text_px` in the output's metadata; the tests read that metadata from the
executed notebooks, and every stored figure must meet the minimum.
"""

import base64
import html
import io

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.text import Text

__all__ = [
    "COLUMN_PX",
    "MIN_EXPLORABLE_TEXT_PX",
    "MIN_TEXT_PX",
    "Rendered",
    "render",
    "text_px",
    "use_book_figures",
]

COLUMN_PX = 780  # the width of a cell's output in the book, in a 1400 px wide window
MIN_TEXT_PX = 9  # the smallest text of a figure as displayed
MIN_EXPLORABLE_TEXT_PX = 11  # the same in an interactive figure, read while moving controls
DPI = 100  # CSS pixels per inch of a figure: rcParams["figure.dpi"] under use_book_figures
STYLE = {
    "figure.dpi": DPI,
    "font.size": 11,
    "axes.titlesize": 11,
    "axes.labelsize": 11,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "legend.fontsize": 10,
    "figure.titlesize": 12,
}


class Rendered:
    """A figure as a PNG at twice its displayed resolution: `png` (bytes), the displayed
    `width` and `height` in CSS pixels, and `text_px`, its smallest text as displayed."""

    def __init__(self, png, width, height, text_px):
        self.png, self.width, self.height, self.text_px = png, width, height, text_px

    def metadata(self):
        """The output metadata Jupyter and the book read (display size) and the tests check."""
        return {"width": self.width, "height": self.height, "text_px": round(self.text_px, 2)}


def smallest_text_pt(figure):
    """The size in points of the smallest visible, non-empty text of `figure` (None if none)."""
    return min((text.get_fontsize() for text in _visible_texts(figure)), default=None)


def _visible_texts(artist):
    """The texts shown under `artist`: a hidden artist hides everything it holds."""
    if not artist.get_visible():
        return
    if isinstance(artist, Text) and artist.get_text().strip():
        yield artist
    for child in artist.get_children():
        yield from _visible_texts(child)


def render(figure, *, colors=None):
    """`figure` as a `Rendered` PNG (tight bounding box, 2× resolution; `colors`: quantize to
    that many colours, for line art where bytes matter)."""
    from PIL import Image

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=2 * figure.dpi, bbox_inches="tight")
    image = Image.open(io.BytesIO(buffer.getvalue()))
    width, height = round(image.width / 2), round(image.height / 2)
    if colors is not None:
        buffer = io.BytesIO()
        image.convert("RGB").quantize(colors=colors).save(buffer, "PNG", optimize=True)
    return Rendered(buffer.getvalue(), width, height, text_px(figure, width))


def image_html(figure, *, alt, min_text_px=None, where="figure"):
    """`figure` as the book's static image: an `<img>` of its PNG at 2× resolution in 64 colours
    (line art), its size and smallest text as displayed (`data-text-px`, which the book's checks
    read) and `alt` for a reader who cannot see it; with `min_text_px`, a ValueError naming
    `where` when its smallest text is smaller. The one way interactive figures (`explorable`)
    and the scaling explorers put a figure into the HTML of the book."""
    image = render(figure, colors=64)
    if min_text_px is not None and image.text_px < min_text_px:
        raise ValueError(
            f"{where}: the smallest text of a figure is {image.text_px:.1f} px as displayed (at "
            f"least {min_text_px} px): enlarge its fonts or narrow the figure"
        )
    return (
        f'<img src="data:image/png;base64,{base64.b64encode(image.png).decode()}"'
        f' width="{image.width}" height="{image.height}" data-text-px="{image.text_px:.1f}"'
        f' style="max-width: 100%; height: auto" alt="{html.escape(alt)}">'
    )


def text_px(figure, width):
    """The smallest text of `figure`, in CSS pixels, when it is displayed `width` px wide and
    shrunk to the column if wider (infinite when the figure has no text)."""
    points = smallest_text_pt(figure)
    if points is None:
        return float("inf")
    return points * figure.dpi / 72 * min(1.0, COLUMN_PX / width)


def _png_with_metadata(figure):
    rendered = render(figure, colors=256)  # a palette of 256: the same look, a third of the bytes
    return base64.b64encode(rendered.png).decode(), rendered.metadata()


def use_book_figures():
    """The book's figure style (`STYLE`), and Jupyter showing every figure as `render` makes
    it, with its display size and `text_px` in the metadata. Outside IPython only the style."""
    plt.rcParams.update(STYLE)
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency of the book
        return
    shell = get_ipython()
    if shell is not None:
        # The inline backend registers its own PNG printer when it is loaded, which pyplot
        # does lazily: load it first, then replace its printer.
        plt.switch_backend(plt.get_backend())
        shell.display_formatter.formatters["image/png"].for_type(Figure, _png_with_metadata)
