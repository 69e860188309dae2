r"""Small Sphinx fixes for the book's pages (loaded from _config.yml's local_extensions).

sphinx-thebe registers its inline configuration script once per reading pass, and the book is
read in two passes (the bibliography needs the citations of every page), so each page used to
declare `const THEBE_JS_URL` twice: a JavaScript error on every page. Identical scripts are
kept once (inline scripts come with the filename None or "", hence the `or`).

pydata-sphinx-theme starts each page with `localStorage.getItem("mode") || "{{ default_mode }}"`,
a template variable that sphinx-book-theme never sets: a first visit logged "Got invalid theme
mode" to the console. The pages state the theme's own fallback, "auto" (the reader's system
setting), explicitly.

A notebook executed with widgets stores their state (for JupyterLab), and myst-nb puts that state
and the ipywidgets scripts on its page. The book shows every widget output by its HTML twin
(`linattn_core.book.explorable`, ranked first in _config.yml), so no widget view is rendered: a page
with no widget view gets neither the state nor the scripts (megabytes of saved plot outputs that
nothing reads).

The search page lists each result with a snippet of the page's text, where Sphinx shows math as
its TeX source ("\(\exp(q^\T k)\)"), and with the title of the section it found, math again as
bare TeX ("\sigma_1 by power iteration", no delimiters left to tell math from prose). The index
keeps each formula of a title delimited, \(...\), and search.html alone loads MathJax, the book's
macros and _extra/shims/search.js, which typesets the formulas of titles and snippets (and ranks
the results and takes their snippets from the article).
"""

import copy
import html
import json

from docutils import nodes
from sphinx.search import IndexBuilder


def drop_duplicate_scripts(app, pagename, templatename, context, doctree):
    seen, unique = set(), []
    for script in context.get("script_files", []):
        key = (script.filename or "", tuple(sorted(script.attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def drop_unused_widget_state(app, pagename, templatename, context, doctree):
    if WIDGET_VIEW in context.get("body", ""):
        return
    widget_scripts = {f"_static/{path}" for path in app.config.nb_ipywidgets_js}  # as added
    context["script_files"] = [
        script
        for script in context.get("script_files", [])
        if script.attributes.get("type") != WIDGET_STATE
        and (script.filename or "") not in widget_scripts
    ]


def default_theme_mode(app, pagename, templatename, context, doctree):
    context.setdefault("default_mode", "auto")


def search_page_math(app, pagename, templatename, context, doctree):
    if pagename != "search" or not app.config.mathjax_path:
        return
    config = copy.deepcopy(app.config.mathjax3_config or {})
    config.setdefault("startup", {})["typeset"] = False  # the shim typesets what it shows
    app.builder.add_js_file("", body=f"window.MathJax = {json.dumps(config)}")
    app.builder.add_js_file(app.config.mathjax_path, defer="defer")
    # After searchtools.js (a plain script further down the page), before the search starts.
    app.builder.add_js_file("../shims/search.js", defer="defer")


def _title_text(node):
    """A title's text as the index shows it, each formula delimited and escaped for the
    innerHTML that searchtools.js sets it with."""
    if isinstance(node, nodes.math):
        return rf"\({html.escape(node.astext(), quote=False)}\)"
    if isinstance(node, nodes.Text):
        return node.astext()
    return "".join(_title_text(child) for child in node.children)


_collect_words = IndexBuilder._word_collector


def _word_collector(self, doctree):
    store = _collect_words(self, doctree)
    titles = [_title_text(node) for node in doctree.findall(nodes.title)]
    if len(titles) == len(store.titles):  # the same titles, in the same order
        store.titles = [(text, ref) for text, (_, ref) in zip(titles, store.titles, strict=True)]
    return store


def setup(app):
    IndexBuilder._word_collector = _word_collector
    app.connect("html-page-context", search_page_math)
    app.connect("html-page-context", default_theme_mode)
    app.connect("html-page-context", drop_duplicate_scripts, priority=900)
    app.connect("html-page-context", drop_unused_widget_state, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
