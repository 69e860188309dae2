"""explorable: live ipywidgets controls with a precomputed static twin for the book."""

import html
import re
from pathlib import Path

import ipywidgets as widgets
import matplotlib.pyplot as plt
import pytest

from linattn_core.book.explorable import MAX_FRAMES, NOT_COMPUTED, explorable


def report(n=2, kind="a", scale=1.0):
    print(f"n = {n}, kind = {kind}, scale = {scale:g}")
    if kind == "b":
        plt.figure(figsize=(2, 1))
        plt.plot([0, n], [0, scale])
        plt.show()


def figure(alt=None, **stops):
    return explorable(
        report,
        alt=alt,
        n=(widgets.IntSlider(value=3, min=2, max=4, description="n"), stops.get("n")),
        kind=(widgets.ToggleButtons(options=["a", "b"], value="b", description="kind"), None),
        scale=(widgets.FloatSlider(value=1.0, min=0.5, max=2, description="σ"), [0.5, 1.0, 2.0]),
    )


def test_every_combination_is_precomputed_in_order():
    explorer = figure()
    open_before = plt.get_fignums()
    frames = explorer.frames()
    assert len(frames) == 3 * 2 * 3
    assert frames[0][0] == "n = 2, kind = a, σ = 0.5"
    assert frames[-1][0] == "n = 4, kind = b, σ = 2"  # the last control varies fastest
    assert "<pre>n = 2, kind = a, scale = 0.5\n</pre>" == frames[0][1]
    assert frames[-1][1].count('<img src="data:image/png;base64,') == 1  # the figure, as PNG
    assert plt.get_fignums() == open_before  # every figure drawn was captured and closed


def test_static_html_opens_on_the_widgets_values_and_switches_by_script():
    page = figure().static_html()
    selected = re.findall(r'<option value="(\d+)" selected>', page)
    assert selected == ["1", "1", "1"]  # n = 3, kind = b, σ = 1
    assert "in Jupyter the controls run live" in page
    assert page.count("<select") == 3 and "addEventListener" in page


def test_the_settings_are_named_by_the_controls_and_in_the_images_words():
    """The page shows the settings once, in its controls; each image says what it shows and
    for which settings (its alt text), for a reader who cannot see it."""
    page = figure(alt="a line from the origin").static_html()
    shown = re.sub(r"<script>.*?</script>|<select.*?</select>", "", page, flags=re.S)
    assert "σ = 1" not in re.sub(r'alt="[^"]*"', "", shown)  # no caption of the settings
    alts = re.findall(r'alt=\\?"([^"\\]*)', page)
    assert alts and all(alt.startswith("a line from the origin (n = ") for alt in alts)
    assert "a line from the origin (n = 3, kind = b, σ = 1)" in alts
    assert re.findall(r'alt="([^"]*)"', figure().static_html()) == ["n = 3, kind = b, σ = 1"]


def test_the_live_widget_comes_first_and_the_book_gets_html():
    bundle = figure()._repr_mimebundle_()
    assert {"application/vnd.jupyter.widget-view+json", "text/html", "text/plain"} <= set(bundle)


def test_bad_controls_are_refused():
    with pytest.raises(ValueError, match="give the stops of the static control 'scale'"):
        explorable(report, scale=(widgets.FloatSlider(), None))
    many = [float(i) for i in range(MAX_FRAMES + 1)]
    with pytest.raises(ValueError, match=f"{MAX_FRAMES + 1} combinations"):
        explorable(report, scale=(widgets.FloatSlider(), many))


def test_measured_frames_say_where_and_when():
    """Timed frames name the device and the date they were measured on, beside the promise that
    the live controls measure on the reader's machine."""
    from linattn_core.provenance import device_name

    page = explorable(
        report, measured="cpu", n=(widgets.IntSlider(value=2, min=2, max=3), None)
    ).static_html()
    note = re.search(r'class="explorable-note"[^>]*>(.*?)</div>', page).group(1)
    assert device_name("cpu") in html.unescape(note)
    assert re.search(r", \d{4}-\d\d-\d\d;", note) and "measure live on your machine" in note


def test_a_check_computes_each_stop_once_from_the_opening_frame(monkeypatch):
    """LINATTN_FRAMES=each-stop (`make nbval`): the opening frame (n = 3, kind = b, σ = 1) and
    every other stop of one control at a time; the rest say they were not computed."""
    monkeypatch.setenv("LINATTN_FRAMES", "each-stop")
    frames = dict(figure().frames())
    computed = {caption for caption, frame in frames.items() if frame != NOT_COMPUTED}
    assert computed == {
        "n = 3, kind = b, σ = 1",
        "n = 2, kind = b, σ = 1",
        "n = 4, kind = b, σ = 1",
        "n = 3, kind = a, σ = 1",
        "n = 3, kind = b, σ = 0.5",
        "n = 3, kind = b, σ = 2",
    }
    assert len(frames) == 18


def test_the_portable_check_computes_the_opening_frame_alone(monkeypatch):
    """LINATTN_FRAMES=opening (`make nbval-portable`): the widgets' own values, nothing else."""
    monkeypatch.setenv("LINATTN_FRAMES", "opening")
    frames = dict(figure().frames())
    computed = [caption for caption, frame in frames.items() if frame != NOT_COMPUTED]
    assert computed == ["n = 3, kind = b, σ = 1"] and len(frames) == 18


def test_committed_notebooks_hold_every_frame():
    """No notebook was executed with LINATTN_FRAMES set and committed."""
    chapters = Path(__file__).resolve().parents[1] / "chapters"
    marker = NOT_COMPUTED.split(":")[0].removeprefix("<pre>")
    for notebook in chapters.glob("*.ipynb"):
        assert f"{marker}: LINATTN_FRAMES" not in notebook.read_text(), notebook.name
