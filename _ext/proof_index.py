"""A proof index that reads like a table of contents, and a way to reach it.

sphinx-proof's index (prf-prf.html) lists every labelled definition, theorem and proof by its raw
label ("def-aj-commutation"), alphabetically. This one groups them by chapter, in the book's
order, and names each as the chapter shows it, by its kind, number and title ("Definition 4:
commutation matrix"; a title with math, which an index entry cannot typeset, is left out).
The titles are collected from the directives' nodes as each page is read; the numbers are
Sphinx's (the figure numbers of each page). Every page links to this index and to the index of
terms from the foot of its sidebar (`_templates/book-indexes.html`).
"""

from sphinx_proof.domain import ProofIndex


def collect_titles(app, doctree):
    env = app.env
    titles = env.__dict__.setdefault("proof_titles", {})
    for node in doctree.findall(lambda n: "label" in getattr(n, "attributes", {})):
        label = node.get("label")
        if label in getattr(env, "proof_list", {}):
            titles[label] = _unwrap(node.get("title", ""), app.config.proof_title_format)


def _unwrap(title, title_format):
    """The title as written in the directive: sphinx-proof wraps it as `proof_title_format`
    (" (%t)" by default)."""
    before, _, after = title_format.partition("%t")
    if title.startswith(before) and title.endswith(after):
        return title[len(before) : len(title) - len(after)].strip()
    return title.strip()


def purge_titles(app, env, docname):
    titles = env.__dict__.get("proof_titles", {})
    for label in [
        k for k, v in env.__dict__.get("proof_list", {}).items() if v["docname"] == docname
    ]:
        titles.pop(label, None)


def merge_titles(app, env, docnames, other):
    env.__dict__.setdefault("proof_titles", {}).update(other.__dict__.get("proof_titles", {}))


def generate(self, docnames=None):
    env = self.domain.env
    proofs, titles = getattr(env, "proof_list", {}), env.__dict__.get("proof_titles", {})
    groups = {}
    for label, values in proofs.items():
        docname = values["docname"]
        chapter = env.titles[docname].astext() if docname in env.titles else docname
        kind = values["realtype"].capitalize()
        number = env.toc_fignumbers.get(docname, {}).get(values["countertype"], {}).get(label)
        name = f"{kind} {'.'.join(map(str, number))}" if number else kind
        title = titles.get(label, "")
        # A title with math would show its TeX here (index entries are not typeset).
        if title and "$" not in title and "\\" not in title:
            name = f"{name}: {title}"
        entry = (name, 0, docname, label, "", "", "")  # in the order the page has them
        groups.setdefault((docname, chapter), []).append(entry)
    content = [(chapter, entries) for (_, chapter), entries in sorted(groups.items())]  # page order
    return content, False


def setup(app):
    ProofIndex.generate = generate
    ProofIndex.localname = "Definitions, theorems and proofs"
    app.connect("doctree-read", collect_titles)
    app.connect("env-purge-doc", purge_titles)
    app.connect("env-merge-info", merge_titles)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
