"""An interactive figure that works with a running kernel and without one.

`explorable(function, **controls)` is `ipywidgets.interactive` for the live notebook, and it also
carries the book's static version: `function` is run once for every combination of the
controls' stops when the notebook is executed, and the results (printed text and figures) are
stored as frames in self-contained HTML behind plain HTML controls. In JupyterLab the live widget
renders (its mime type outranks HTML); the built book prefers the HTML (`_config.yml` ranks the
widget view after it), so every control of the static page shows the exact result for that
setting, with no kernel and no network.

A control is `(widget, stops)`: the ipywidgets control of the live version and the values the
static version offers (None: all options of a dropdown, toggle or selection slider, or every
value of an integer slider). Figures are PNGs at twice the displayed resolution, in 64 colours,
and their smallest text must be at least `plotting.MIN_EXPLORABLE_TEXT_PX` as displayed.
`measured="cpu"` (or a CUDA device) says on the page that the frames hold measurements (timings)
made on that device when the notebook was executed, names the device and the date, and that the
live controls measure on the reader's machine. `alt` describes
what the figure shows, for a reader who cannot see it: each frame's image says it, followed by
the frame's settings. The controls are the only place the page names the settings (a figure
that also prints or titles them says them three times). The book gives the figure its number
and caption (the cell's `mystnb.figure` metadata) and loads each frame's images only when a
reader picks the frame (`_ext/static_pages.py` writes them to files).

Checking a notebook (`make nbval`) needs every stop run, not every combination: with the
environment variable `LINATTN_FRAMES=each-stop` a figure computes the frame of its widgets'
values and, from there, each stop of one control at a time, the others held (1 + Σ (stops − 1)
frames instead of Π stops); the other frames say that they were not computed. Its second run
(`make nbval-portable`, which only asks whether stored outputs depend on the processor, and
nbval ignores the figures' outputs) sets `LINATTN_FRAMES=opening`: the opening frame alone. The
notebooks' own command (`scripts/execute_notebooks.py`) always computes them all.
"""

import contextlib
import datetime
import html
import io
import itertools
import json
import os
import zlib

import ipywidgets as widgets
import matplotlib.pyplot as plt

from linattn_core.book.plotting import MIN_EXPLORABLE_TEXT_PX, image_html
from linattn_core.provenance import device_name

__all__ = ["Explorable", "explorable"]

MAX_FRAMES = 200  # combinations a static figure may precompute
FRAMES = "LINATTN_FRAMES"  # "each-stop" or "opening": the frames a check needs (module docstring)
# the stops away from the opening frame that each value of LINATTN_FRAMES computes
STOPS_AWAY = {"each-stop": 1, "opening": 0}
NOT_COMPUTED = "<pre>not computed: LINATTN_FRAMES asked for fewer frames</pre>"


def explorable(function, /, *, alt=None, measured=None, **controls):
    """The interactive figure of `function` with these controls: name → (widget, stops);
    `alt`: what its images show, in words; `measured`: the device its frames were timed on."""
    return Explorable(function, controls, alt=alt, measured=measured)


class Explorable:
    """Live ipywidgets controls with a precomputed static twin (see the module docstring)."""

    def __init__(self, function, controls, *, alt=None, measured=None):
        self.function, self.alt, self.measured = function, alt, measured
        # where and when the frames are measured, recorded as they are
        self.measured_on = f"{device_name(measured)}, {datetime.date.today()}" if measured else None
        self.controls = {
            name: (widget, _stops(name, widget, stops))
            for name, (widget, stops) in controls.items()
        }
        count = 1
        for _, stops in self.controls.values():
            count *= len(stops)
        if count > MAX_FRAMES:
            raise ValueError(
                f"explorable: {count} combinations of stops; at most {MAX_FRAMES} are precomputed"
            )
        self.widget = widgets.interactive(
            function, **{name: widget for name, (widget, _) in self.controls.items()}
        )
        self._html = None

    def frames(self):
        """[(caption, HTML of what `function` printed and drew)] for every combination, the
        last control varying fastest."""
        names, titles = list(self.controls), _titles(self)
        stops = [stops for _, stops in self.controls.values()]
        start = _start(self)
        away = STOPS_AWAY.get(os.environ.get(FRAMES))
        found = []
        for indices in itertools.product(*(range(len(s)) for s in stops)):
            combination = [s[i] for s, i in zip(stops, indices, strict=True)]
            caption = ", ".join(
                f"{title} = {label}" for title, (label, _) in zip(titles, combination, strict=True)
            )
            if away is not None and sum(i != j for i, j in zip(indices, start, strict=True)) > away:
                found.append((caption, NOT_COMPUTED))
                continue
            values = dict(zip(names, (value for _, value in combination), strict=True))
            alt = f"{self.alt} ({caption})" if self.alt else caption
            found.append((caption, _run(self.function, values, caption, alt)))
        return found

    def static_html(self):
        """Self-contained HTML: one control per parameter, the frame of the chosen setting."""
        if self._html is None:
            self._html = _page(self)
        return self._html

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = self.widget._repr_mimebundle_(include=include, exclude=exclude)
        return bundle | {"text/html": self.static_html()}


def _stops(name, widget, stops):
    """[(label, value)] of the static control."""
    if stops is None:
        if hasattr(widget, "options") and widget.options:
            options = widget.options
            pairs = options.items() if isinstance(options, dict) else options
            return [
                (" ".join(pair[0].split()), pair[1])
                if isinstance(pair, tuple)
                else (str(pair), pair)
                for pair in pairs
            ]  # labels as HTML shows them: runs of spaces collapse
        if isinstance(widget, widgets.IntSlider):
            return [(str(v), v) for v in range(widget.min, widget.max + 1, widget.step)]
        if isinstance(widget, widgets.Checkbox):
            return [("off", False), ("on", True)]
        raise ValueError(f"explorable: give the stops of the static control {name!r}")
    labels = dict(_stops(name, widget, None)) if hasattr(widget, "options") else {}
    inverse = {value: label for label, value in labels.items()}
    return [(inverse.get(v, _label(v)), v) for v in stops]


def _label(value):
    return f"{value:g}" if isinstance(value, float) else str(value)


def _run(function, values, caption, alt):
    """What `function(**values)` prints and draws, as HTML."""
    text, images, before = io.StringIO(), [], set(plt.get_fignums())

    def show(*args, **kwargs):  # every figure it drew becomes an image of the page
        for number in sorted(set(plt.get_fignums()) - before):
            figure = plt.figure(number)
            where = f"explorable: at {caption}"
            images.append(
                image_html(figure, alt=alt, min_text_px=MIN_EXPLORABLE_TEXT_PX, where=where)
            )
            plt.close(figure)

    original = plt.show
    plt.show = show
    try:
        with contextlib.redirect_stdout(text):
            function(**values)
        show()
    finally:
        plt.show = original
    parts = [f"<pre>{html.escape(text.getvalue())}</pre>"] if text.getvalue() else []
    return "".join(parts + images)


def _page(figure):
    frames = figure.frames()
    titles = _titles(figure)
    uid = f"explorable-{zlib.crc32(''.join(f for _, f in frames).encode()):08x}"
    rows, sizes, start = [], [], _start(figure)
    for title, current, (name, (_, stops)) in zip(
        titles, start, figure.controls.items(), strict=True
    ):
        sizes.append(len(stops))
        options = "".join(
            f'<option value="{i}"{" selected" if i == current else ""}>{html.escape(text)}</option>'
            for i, (text, _) in enumerate(stops)
        )
        rows.append(
            f'<label style="margin-right: 1em">{html.escape(title)} '
            f'<select data-name="{html.escape(name)}">{options}</select></label>'
        )
    index = 0
    for size, position in zip(sizes, start, strict=True):
        index = index * size + position
    return f"""<div class="explorable" id="{uid}">
<div class="explorable-controls">{"".join(rows)}</div>
<div class="explorable-note" style="font-size: 0.85em; color: #555">{_note(figure)}</div>
<div class="explorable-frame">{frames[index][1]}</div>
<script>(function () {{
  const root = document.getElementById("{uid}");
  const frames = {json.dumps([f for _, f in frames])};
  const sizes = {json.dumps(sizes)};
  const selects = [...root.querySelectorAll("select")];
  function update() {{
    let index = 0;
    selects.forEach((select, i) => {{ index = index * sizes[i] + Number(select.value); }});
    root.querySelector(".explorable-frame").innerHTML = frames[index];
  }}
  selects.forEach((select) => select.addEventListener("change", update));
}})();</script>
</div>"""


def _note(figure):
    if figure.measured:
        return (
            f"Measured for every setting when the notebook was executed, on "
            f"{html.escape(figure.measured_on)}; in Jupyter the controls measure live on "
            "your machine."
        )
    return (
        "Precomputed for every setting when the notebook was executed; in Jupyter the controls "
        "run live."
    )


def _start(figure):
    """The index of each control's stop nearest its widget's value: the frame a page opens on."""
    return [
        min(range(len(stops)), key=lambda i: _distance(stops[i][1], widget.value))
        for widget, stops in figure.controls.values()
    ]


def _titles(figure):
    """What each control is called on the page: its description, or its parameter's name."""
    return [widget.description or name for name, (widget, _) in figure.controls.items()]


def _distance(stop, value):
    try:
        return abs(stop - value)
    except TypeError:
        return 0 if stop == value else 1
