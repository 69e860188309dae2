"""plotting: figures rendered at 2×, and the size of their smallest text as displayed."""

import base64
import io

import matplotlib.pyplot as plt
import pytest
from PIL import Image

from linattn_core.book import plotting


@pytest.fixture
def figure():
    figure, axes = plt.subplots(figsize=(4, 2), dpi=100)
    axes.plot([0, 1], [0, 1], label="line")
    axes.legend(fontsize=8)
    axes.set_title("title", fontsize=14)
    yield figure
    plt.close(figure)


def test_smallest_text_counts_only_visible_nonempty_text(figure):
    assert plotting.smallest_text_pt(figure) == 8  # the legend
    figure.axes[0].get_legend().set_visible(False)
    tick = figure.axes[0].get_xticklabels()[0].get_fontsize()
    assert plotting.smallest_text_pt(figure) == min(tick, 14)
    figure.axes[0].get_legend().set_visible(True)
    figure.axes[0].set_visible(False)  # a hidden axes hides its labels, legend and title
    assert plotting.smallest_text_pt(figure) is None


def test_text_shrinks_with_a_figure_wider_than_the_column(figure):
    narrow = plotting.text_px(figure, plotting.COLUMN_PX / 2)
    wide = plotting.text_px(figure, 2 * plotting.COLUMN_PX)
    assert narrow == pytest.approx(8 * 100 / 72)  # shown at its natural size
    assert wide == pytest.approx(narrow / 2)  # shrunk to the column
    empty = plt.figure()
    assert plotting.text_px(empty, 100) == float("inf")
    plt.close(empty)


def test_render_is_twice_the_displayed_resolution(figure):
    rendered = plotting.render(figure)
    image = Image.open(io.BytesIO(rendered.png))
    assert (image.width, image.height) == pytest.approx(
        (2 * rendered.width, 2 * rendered.height), abs=1
    )
    assert rendered.width <= 400  # tight bounding box of a 4-inch figure at 100 dpi
    assert rendered.metadata() == {
        "width": rendered.width,
        "height": rendered.height,
        "text_px": round(plotting.text_px(figure, rendered.width), 2),
    }
    quantized = plotting.render(figure, colors=16)
    assert len(Image.open(io.BytesIO(quantized.png)).getcolors()) <= 16


def test_the_notebook_formatter_stores_size_and_text(figure):
    data, metadata = plotting._png_with_metadata(figure)
    assert base64.b64decode(data).startswith(b"\x89PNG")
    assert set(metadata) == {"width", "height", "text_px"}


def test_image_html_is_the_png_its_size_smallest_text_and_alt(figure):
    tag = plotting.image_html(figure, alt='a "line" & a title')
    rendered = plotting.render(figure, colors=64)
    png = base64.b64decode(tag.split("base64,")[1].split('"')[0])
    width, height = Image.open(io.BytesIO(png)).size  # at 2×: the displayed size, rounded
    assert (round(width / 2), round(height / 2)) == (rendered.width, rendered.height)
    assert f'width="{rendered.width}" height="{rendered.height}"' in tag
    assert f'data-text-px="{rendered.text_px:.1f}"' in tag
    assert 'alt="a &quot;line&quot; &amp; a title"' in tag


def test_image_html_refuses_text_below_the_minimum(figure):
    with pytest.raises(ValueError, match=r"^explorable: at n = 4: the smallest text .* 99 px"):
        plotting.image_html(figure, alt="", min_text_px=99, where="explorable: at n = 4")
