"""A proof index that reads like a table of contents, and a way to reach it.

sphinx-proof's index (prf-prf.html) lists every labelled definition, theorem and proof by its raw
label ("def-aj-commutation"), alphabetically. This one groups them by chapter, in the book's
order, and names each by its kind and title ("Definition: commutation matrix"), keeping the label
as a note (a title with math, which an index entry cannot typeset, gives way to the label).
The titles are collected from the directives' nodes as each page is read.
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
        title = titles.get(label, "")
        # A title with math would show its TeX here (index entries are not typeset): the kind
        # and the label stand in for it.
        name = f"{kind}: {title}" if title and "$" not in title and "\\" not in title else kind
        entry = (name, 0, docname, label, label, "", "")  # the label in brackets after it
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
