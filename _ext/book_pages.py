"""Small Sphinx fixes for the book's pages (loaded from _config.yml's local_extensions).

sphinx-thebe registers its inline configuration script once per reading pass, and the book is
read in two passes (the bibliography needs the citations of every page), so each page used to
declare `const THEBE_JS_URL` twice: a JavaScript error on every page. Identical scripts are
kept once (inline scripts come with the filename None or "", hence the `or`).

pydata-sphinx-theme starts each page with `localStorage.getItem("mode") || "{{ default_mode }}"`,
a template variable that sphinx-book-theme never sets: a first visit logged "Got invalid theme
mode" to the console. The pages state the theme's own fallback, "auto" (the reader's system
setting), explicitly.
"""


def drop_duplicate_scripts(app, pagename, templatename, context, doctree):
    seen, unique = set(), []
    for script in context.get("script_files", []):
        key = (script.filename or "", tuple(sorted(script.attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def default_theme_mode(app, pagename, templatename, context, doctree):
    context.setdefault("default_mode", "auto")


def setup(app):
    app.connect("html-page-context", default_theme_mode)
    app.connect("html-page-context", drop_duplicate_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
