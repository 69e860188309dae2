"""The built pages as a reader receives them: light, and steady while they load.

Once Sphinx has written the book (`build-finished`), every page is finished here:

- **Formulas are typeset at build time** (`_ext/render_math.js`, MathJax 3 for node): a page
  arrives with its formulas drawn, as MathJax drew them in the browser, and with the stylesheet
  of the characters it uses. Nothing shows TeX source while a page loads, no text jumps when a
  formula replaces its source, and the pages load no MathJax (1.2 MB). Each formula keeps its
  TeX in `data-tex`, from which the search page typesets the formulas of its snippets, the one
  page that still loads MathJax (`_ext/book_pages.py`). The formulas are scaled to
  the x-height of the reader's text font, as MathJax did in the browser, by `MATH_SCALE`, an
  inline script that runs before the page is drawn.
- **Icons are inline SVG**, cut from Font Awesome's files for the dozen icons the theme shows, in
  place of the theme's icon script (1.5 MB for every icon of Font Awesome); the icon font of the
  theme's admonition titles is cut to the characters the theme's stylesheet uses.
- **Images embedded as data (`data:image/png;base64,…`) become files** under `_images/inline/`:
  the frames of an interactive figure (`linattn_core.book.explorable`) load when a reader picks
  them, not with the page. Every image of a page is loaded lazily, as it nears the screen, its
  size given by width and height attributes that keep its aspect ratio when it shrinks.
"""

import base64
import hashlib
import html
import json
import posixpath
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NODE_MODULES = ROOT / "node_modules"
ICONS = NODE_MODULES / "@fortawesome" / "fontawesome-free" / "svgs"
MATH_FONTS = "vendor/mathjax/output/chtml/fonts/woff-v2"  # vendored by scripts/vendor_assets.py

# The x-height of the text font over that of MathJax's TeX font (0.442 em), as MathJax measured
# it in the browser; set before the page is drawn, so that no formula changes size afterwards.
MATH_SCALE = """(function () {
  const probe = document.createElement("div");
  probe.style.cssText = "position: absolute; visibility: hidden; height: 1ex; width: 1em;"
    + " font-family: var(--pst-font-family-base); font-size: 1rem";
  document.documentElement.appendChild(probe);
  const scale = probe.offsetHeight / probe.offsetWidth / 0.442;
  probe.remove();
  if (scale > 0.5 && scale < 2) {
    document.documentElement.style.setProperty("--book-math-scale", scale.toFixed(3));
  }
})();"""

INLINE_MATH = re.compile(r'<span class="math notranslate nohighlight">\\\((.*?)\\\)</span>', re.S)
DISPLAY_MATH = re.compile(r'(<div class="math notranslate nohighlight"[^>]*>)(.*?)(</div>)', re.S)
DISPLAY_PART = re.compile(r"\\\[(.*?)\\\]", re.S)
EQNO = re.compile(r'\s*<span class="eqno">.*?</span>\s*', re.S)


def setup(app):
    app.add_js_file(None, body=MATH_SCALE)
    app.connect("html-page-context", drop_typesetting_scripts, priority=900)
    app.connect("build-finished", finish_pages)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def drop_typesetting_scripts(app, pagename, templatename, context, doctree):
    """MathJax and its configuration, on every page but the search page (its snippets are
    typeset in the browser)."""
    if pagename == "search":
        return
    mathjax = posixpath.join("_static", app.config.mathjax_path)  # as Sphinx adds it
    context["script_files"] = [
        script
        for script in context.get("script_files", [])
        if (script.filename or "") != mathjax
        and not script.attributes.get("body", "").startswith("window.MathJax")
    ]


def finish_pages(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    outdir = Path(app.outdir)
    pages = {
        path: path.read_text(encoding="utf-8")
        for path in sorted(outdir.rglob("*.html"))
        if path.relative_to(outdir).parts[0] not in {"_static", "_sources", "vendor", "_images"}
    }
    macros = (app.config.mathjax3_config or {}).get("tex", {}).get("macros", {})
    pages = typeset_math(pages, outdir, macros)
    icons = IconSet(ICONS)
    for path, text in pages.items():
        depth = "../" * (len(path.relative_to(outdir).parts) - 1)
        text = icons.inline(text)
        inline = outdir / "_images" / "inline"
        text = embedded_images_to_files(text, inline, f"{depth}_images/inline")
        text = lazy_images(sized_images(text))
        path.write_text(text, encoding="utf-8")
    subset_icon_font(outdir)


# --- formulas -----------------------------------------------------------------------------


def formulas(page):
    """[(tex, display)] of a page in the order `replace_formulas` puts them back."""
    found = []
    for match in DISPLAY_MATH.finditer(page):
        body = EQNO.sub("", match.group(2))
        parts = DISPLAY_PART.findall(body) or [body]  # an amsmath environment, undelimited
        found += [(html.unescape(part).strip(), True) for part in parts]
    found += [(html.unescape(m.group(1)), False) for m in INLINE_MATH.finditer(page)]
    return found


def replace_formulas(page, rendered):
    """`page` with each formula of `formulas(page)` replaced by its typeset HTML."""
    rendered = iter(rendered)

    def display(match):
        body = match.group(2)
        eqno = "".join(EQNO.findall(body))
        formula = EQNO.sub("", body)
        count = len(DISPLAY_PART.findall(formula)) or 1
        typeset = "".join(next(rendered) for _ in range(count))
        return f"{match.group(1)}{eqno.strip()}{typeset}{match.group(3)}"

    page = DISPLAY_MATH.sub(display, page)
    page = INLINE_MATH.sub(
        lambda m: f'<span class="math notranslate nohighlight">{next(rendered)}</span>', page
    )
    return page


def typeset_math(pages, outdir, macros):
    """Every formula of every page typeset by MathJax (one node process for the book)."""
    names = list(pages)
    sources = {path: formulas(pages[path]) for path in names}
    request = {
        "macros": macros,
        "scale": 1,  # the page scales formulas by --book-math-scale (MATH_SCALE, book.css)
        "pages": [
            {
                "name": str(path.relative_to(outdir)),
                "fontURL": "../" * (len(path.relative_to(outdir).parts) - 1) + MATH_FONTS,
                "formulas": sources[path],
            }
            for path in names
        ],
    }
    result = subprocess.run(
        ["node", str(Path(__file__).with_name("render_math.js"))],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if result.returncode:
        raise RuntimeError(f"typesetting the book's formulas failed:\n{result.stderr}")
    typeset = json.loads(result.stdout)["pages"]
    finished = {}
    for path, page in zip(names, typeset, strict=True):
        rendered = [
            with_source(html_, tex)
            for html_, (tex, _) in zip(page["html"], sources[path], strict=True)
        ]
        text = replace_formulas(pages[path], rendered)
        if page["html"]:
            style = f'<style id="book-math">{minify_css(page["css"])}</style>'
            head = "\n".join([*font_preloads(text, page["css"]), style])
            text = text.replace("</head>", f"{head}\n</head>", 1)
        finished[path] = text
    return finished


def with_source(typeset, tex):
    """The typeset formula, keeping its TeX in `data-tex`: the search page's snippets are taken
    from the pages and typeset again there (_extra/shims/search.js)."""
    return typeset.replace("<mjx-container", f'<mjx-container data-tex="{html.escape(tex)}"', 1)


FONT_FACE = re.compile(
    r'@font-face[^{]*\{font-family:\s*(MJX[A-Z0-9-]+);\s*src:\s*url\("([^"]+)"\)'
)


def font_preloads(page, css):
    """Links that fetch the fonts a page's formulas use as early as its stylesheets: the
    formulas are drawn with them from the start (a font that arrives later moves the text
    around a formula by a few pixels)."""
    urls = dict(FONT_FACE.findall(minify_css(css)))
    used = {"MJXZERO", "MJXTEX"} | {f"MJXTEX-{v}" for v in re.findall(r'TEX-([A-Z0-9]+)"', page)}
    return [
        f'<link rel="preload" href="{urls[family]}" as="font" type="font/woff" crossorigin>'
        for family in sorted(used)
        if family in urls
    ]


def minify_css(css):
    css = re.sub(r"\s+", " ", css)
    return re.sub(r"\s*([{};:,>])\s*", r"\1", css).strip()


# --- icons --------------------------------------------------------------------------------

ICON_ELEMENT = re.compile(r'<(i|span)\b([^>]*?)\bclass="([^"]*\bfa-[^"]*)"([^>]*)>\s*</\1>')
ICON_SCRIPT = re.compile(
    r'\s*<script defer src="[^"]*_static/scripts/fontawesome\.js[^"]*"></script>'
)
STYLES = {"fa-solid": "solid", "fas": "solid", "fa-regular": "regular", "far": "regular"}
STYLES |= {"fa-brands": "brands", "fab": "brands"}
MODIFIERS = {"fa-lg", "fa-xs", "fa-sm", "fa-xl", "fa-2x", "fa-fw", "fa-spin"}


class IconSet:
    """Font Awesome's icons as inline SVG, read from the package's own SVG files."""

    def __init__(self, folder):
        self.folder, self.cache = Path(folder), {}

    def svg(self, style, name):
        key = (style, name)
        if key not in self.cache:
            source = (self.folder / style / f"{name}.svg").read_text(encoding="utf-8")
            view_box = re.search(r'viewBox="([^"]+)"', source).group(1)
            paths = re.findall(r'<path d="([^"]+)"', source)
            self.cache[key] = view_box, paths
        return self.cache[key]

    def inline(self, page):
        page = ICON_SCRIPT.sub("", page)
        return ICON_ELEMENT.sub(self._element, page)

    def _element(self, match):
        _, before, classes, after = match.groups()
        names = classes.split()
        style = next((STYLES[c] for c in names if c in STYLES), "solid")
        icon = [c[3:] for c in names if c.startswith("fa-") and c not in STYLES.keys() | MODIFIERS]
        if len(icon) != 1:
            raise ValueError(f"static_pages: which icon is {match.group(0)!r}?")
        view_box, paths = self.svg(style, icon[0])
        attributes = f"{before}{after}".strip()
        attributes = f" {attributes}" if attributes else ""
        shapes = "".join(f'<path fill="currentColor" d="{d}"/>' for d in paths)
        # as Font Awesome's script draws it: the style classes (fa-solid, …) give way to
        # svg-inline--fa, which the theme's rules for the icon font do not match
        kept = " ".join(c for c in names if c not in STYLES)
        return (
            f'<svg class="svg-inline--fa {kept}"{attributes} aria-hidden="true" '
            f'focusable="false" xmlns="http://www.w3.org/2000/svg" viewBox="{view_box}">'
            f"{shapes}</svg>"
        )


ICON_PROPERTY = re.compile(r'--pst-(?:icon-[a-z-]+|breadcrumb-divider):\s*"([^"]*)"')
ICON_FONT = "_static/vendor/fontawesome/webfonts/fa-solid-900.ttf"
ICON_SUBSET = "_static/fonts/fa-solid-used.woff"  # book.css declares it after the theme's


def subset_icon_font(outdir):
    """The theme draws admonition and link icons with Font Awesome's solid font (150 kB), the
    characters its stylesheet names in its --pst-icon-… properties: keep those."""
    from fontTools import subset
    from fontTools.ttLib import TTFont

    theme = (outdir / "_static" / "styles" / "pydata-sphinx-theme.css").read_text("utf-8")
    used = set()
    for value in ICON_PROPERTY.findall(theme):
        used |= {int(h, 16) for h in re.findall(r"\\([0-9a-f]{4})", value)}
        used |= {ord(c) for c in value if 0xE000 <= ord(c) <= 0xF8FF}
    font = TTFont(outdir / ICON_FONT)
    subsetter = subset.Subsetter(subset.Options())
    subsetter.populate(unicodes=sorted(used))
    subsetter.subset(font)
    font.flavor = "woff"
    (outdir / ICON_SUBSET).parent.mkdir(parents=True, exist_ok=True)
    font.save(outdir / ICON_SUBSET)


# --- images -------------------------------------------------------------------------------

DATA_PNG = re.compile(r"data:image/png;base64,([A-Za-z0-9+/]+=*)")


def embedded_images_to_files(page, folder, url):
    """Each PNG embedded in `page` written once to `folder` (named by its content) and
    referenced by `url`/name instead."""

    def to_file(match):
        data = base64.b64decode(match.group(1))
        name = hashlib.sha256(data).hexdigest()[:24] + ".png"
        target = folder / name
        if not target.exists():
            folder.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        return f"{url}/{name}"

    return DATA_PNG.sub(to_file, page)


STYLE_SIZE = re.compile(r'style="width: (\d+)px; height: (\d+)px;"')


def sized_images(page):
    """myst-nb sizes a figure's image by a style of fixed width and height: shrunk to the
    column, the image kept its height and was squashed. The size becomes width and height
    attributes, which keep the aspect ratio (book.css lets the height follow the width) and
    reserve the image's space before it loads."""
    return STYLE_SIZE.sub(r'width="\1" height="\2"', page)


IMG = re.compile(r"<img\b(?![^>]*\bloading=)")


def lazy_images(page):
    """Every image of the article loads as it nears the screen (its size is reserved by its
    width and height); the logo of the sidebar, above the article, at once. The attribute is
    unquoted: it is also written into the frames of interactive figures, HTML held in
    JavaScript strings."""
    start = page.find("<article")
    if start < 0:
        return page
    return page[:start] + IMG.sub("<img loading=lazy", page[start:])
