"""The book's Sphinx extensions on small inputs (the built book is checked in tests/book).

_ext/static_pages.py finishes every built page (formulas typeset at build time, icons inline,
embedded images as files, images sized and loaded lazily); _ext/book_map.py draws the landing
page's map of the parts from _toc.yml.
"""

import base64
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "_ext" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


static_pages = load("static_pages")
book_map = load("book_map")

PAGE = (
    '<p>Inline <span class="math notranslate nohighlight">\\(a &lt; b\\)</span> and'
    ' <span class="math notranslate nohighlight">\\(x_i\\)</span>.</p>\n'
    '<div class="math notranslate nohighlight" id="equation-e1">\n'
    '<span class="eqno">(1)<a class="headerlink" href="#equation-e1">#</a></span>'
    "\\[\\sum_i x_i\\]</div>\n"
    '<div class="math notranslate nohighlight">\n\\begin{align}a &amp;= b\\end{align}</div>'
)


def test_formulas_are_found_in_page_order_and_put_back_in_place():
    found = static_pages.formulas(PAGE)
    assert found == [
        ("\\sum_i x_i", True),
        ("\\begin{align}a &= b\\end{align}", True),  # an environment, undelimited
        ("a < b", False),  # HTML entities read as TeX
        ("x_i", False),
    ]
    typeset = static_pages.replace_formulas(
        PAGE, [f"<mjx-container>{i}</mjx-container>" for i in range(4)]
    )
    assert typeset.count("<mjx-container>") == 4 and "\\(" not in typeset and "\\[" not in typeset
    assert '<span class="eqno">(1)' in typeset  # the equation number stays, before its formula
    where = [typeset.index(f"<mjx-container>{i}") for i in (2, 3, 0, 1)]
    assert where == sorted(where)  # each where its source was
    assert (
        '<span class="math notranslate nohighlight"><mjx-container>3</mjx-container></span>'
        in typeset
    )


def test_a_typeset_formula_keeps_its_tex():
    kept = static_pages.with_source('<mjx-container class="MathJax"><mjx-math>', 'a < "b"')
    assert kept.startswith('<mjx-container data-tex="a &lt; &quot;b&quot;" class="MathJax">')


def test_fonts_of_the_formulas_are_preloaded():
    css = (
        '@font-face /* 1 */ {font-family: MJXTEX; src: url("f/Main.woff") format("woff");}'
        '@font-face /* 2 */ {font-family: MJXTEX-I; src: url("f/Italic.woff") format("woff");}'
        '@font-face /* 3 */ {font-family: MJXTEX-B; src: url("f/Bold.woff") format("woff");}'
    )
    links = static_pages.font_preloads('<mjx-c class="mjx-c1D465 TEX-I"></mjx-c>', css)
    assert [link.split('"')[3] for link in links] == ["f/Main.woff", "f/Italic.woff"]
    assert all('as="font"' in link and "crossorigin" in link for link in links)


def test_icons_become_inline_svg_keeping_their_attributes(tmp_path):
    (tmp_path / "solid").mkdir()
    (tmp_path / "solid" / "sun.svg").write_text(
        '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 512 512"><path d="M1 2z"/></svg>'
    )
    page = (
        '<script defer src="../_static/scripts/fontawesome.js?digest=1"></script>'
        '<i class="theme-switch fa-solid fa-sun fa-lg" data-mode="light" title="Light"></i>'
    )
    inlined = static_pages.IconSet(tmp_path).inline(page)
    assert "fontawesome.js" not in inlined and "<i " not in inlined
    assert inlined.startswith('<svg class="svg-inline--fa theme-switch fa-sun fa-lg"')
    assert 'data-mode="light" title="Light"' in inlined and 'viewBox="0 0 512 512"' in inlined
    assert '<path fill="currentColor" d="M1 2z"/>' in inlined
    with pytest.raises(ValueError, match="which icon"):
        static_pages.IconSet(tmp_path).inline('<span class="fa-solid"></span>')


def test_embedded_images_become_files_named_by_their_content(tmp_path):
    png = base64.b64encode(b"\x89PNG not really").decode()
    page = f'<img src="data:image/png;base64,{png}"> "<img src=\\"data:image/png;base64,{png}\\">"'
    out = static_pages.embedded_images_to_files(page, tmp_path / "inline", "../_images/inline")
    files = list((tmp_path / "inline").iterdir())
    assert len(files) == 1 and files[0].read_bytes() == b"\x89PNG not really"
    assert out.count(f"../_images/inline/{files[0].name}") == 2 and "base64" not in out


def test_images_are_sized_by_attributes_and_load_lazily_in_the_article():
    page = (
        '<img src="logo.svg"><article>'
        '<img alt="a" src="f.png" style="width: 912px; height: 372px;" />'
        '<img loading="eager" src="g.png"></article>'
    )
    out = static_pages.lazy_images(static_pages.sized_images(page))
    assert out.startswith('<img src="logo.svg">')  # the sidebar's logo, at once
    assert '<img loading=lazy alt="a" src="f.png" width="912" height="372" />' in out
    assert '<img loading="eager" src="g.png">' in out


PARTS = [("First", ["chapters/a", "chapters/b"]), ("Second", ["chapters/c"])]


def test_the_map_names_every_chapter_and_only_earlier_prerequisites():
    good = {"chapters/a": [], "chapters/b": ["chapters/a"], "chapters/c": ["chapters/a"]}
    assert book_map.check_map(PARTS, good) == []
    bad = {"chapters/a": ["chapters/b"], "chapters/b": [], "chapters/d": []}
    assert book_map.check_map(PARTS, bad) == [
        "the map leaves out chapters/c",
        "chapters/d is no chapter of a part",
        "chapters/a builds on chapters/b, which does not come before it",
    ]


def test_the_map_covers_the_table_of_contents():
    intro = (ROOT / "intro.md").read_text(encoding="utf-8")
    block = intro.split("```{book-map}\n", 1)[1].split("```", 1)[0]
    assert book_map.check_map(book_map.toc_parts(ROOT), yaml.safe_load(block)) == []


def test_reading_time_counts_prose_and_unfolded_code(tmp_path):
    notebook = tmp_path / "x.ipynb"
    words = " ".join(["word"] * 600)  # 3 minutes at 200 words a minute
    code = "\n".join(["x = 1"] * 90)  # 3 minutes at 30 lines a minute
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": words},
        {"cell_type": "code", "metadata": {}, "source": code},
        {"cell_type": "code", "metadata": {"tags": ["hide-input"]}, "source": code},
    ]
    notebook.write_text(json.dumps({"cells": cells}))
    assert book_map.reading_minutes(notebook) == 10  # 6 minutes, rounded up to 5


def test_working_time_is_two_to_three_times_the_reading():
    assert book_map.working_time(5) == "10–15 min"
    assert book_map.working_time(25) == "50 min–1 h"
    assert book_map.working_time(30) == "1–1½ h"
    assert book_map.working_time(50) == "1½–2½ h"  # 100 and 150 minutes
