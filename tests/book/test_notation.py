"""The notation page against the code and the chapters.

The statements of chapters/notation.md about vec, row-major storage and the commutation matrix
are checked on random matrices; then every chapter is scanned for the uses of a symbol that the
page's table rules out (a kernel written k(x, y), the commutation matrix written with a K, a
chunk size c, …), for the lecture notes named as documents, for chapters longer than the
reader's edition allows, and for the parts every chapter has.
"""

import json
import re
from pathlib import Path

import pytest
import torch
import yaml

from linattn_core.maths.linalg import commutation_matrix, kron, vec

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = ROOT / "chapters"
NOTEBOOKS = sorted(CHAPTERS.glob("*.ipynb"))
NUMBERED = [p for p in NOTEBOOKS if p.name[:2].isdigit()]
MAX_PROSE_WORDS = 6000


def test_vec_of_a_product_and_row_major_storage():
    gen = torch.Generator().manual_seed(0)
    a, x, b = (
        torch.randn(*s, generator=gen, dtype=torch.float64) for s in [(4, 3), (3, 5), (5, 2)]
    )
    assert torch.allclose(vec(a @ x @ b), kron(b.T, a) @ vec(x))
    assert torch.equal(x.reshape(-1), vec(x.T))
    assert torch.equal(x.T.reshape(-1), vec(x))
    assert torch.equal(commutation_matrix(3, 5) @ vec(x), vec(x.T))


def markdown(path):
    if path.suffix == ".md":
        return path.read_text()
    cells = json.loads(path.read_text())["cells"]
    return "\n\n".join(
        "".join(c["source"])
        for c in cells
        if c["cell_type"] == "markdown" and c.get("id") != "book-macros"
    )


def code(path):
    if path.suffix == ".md":
        return ""
    cells = json.loads(path.read_text())["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def math(text):
    """The TeX of every formula of a MyST text, display and inline."""
    display = re.findall(r"\$\$(.*?)\$\$", text, flags=re.S)
    inline = re.findall(
        r"(?<!\$)\$([^$\n]+)\$(?!\$)", re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    )
    return "\n".join(display + inline)


# (pattern in the TeX of a chapter, what the notation page says instead)
RULED_OUT_IN_MATH = [
    (r"(?<![\\\w])k\([^()]*,", "a kernel is κ(x, y); k and k_j are keys"),
    (
        r"(?<!\\mathcal\{)K_\{?[a-z],\s*[a-z]\}|K_\{(mn|nm|dn|nd)\}",
        "the commutation matrix is 𝒦_{m,n}",
    ),
    (r"\\R\^\{?D\b", "the feature count is m, not D"),
    (r"\bd_k\b", "the key dimension is d (a feature count is m)"),
    (
        r"\\rho_\{?[ijl]\b|\\rho\s*\\sim|\\rho\(\s*(\\alpha|m\b)",
        "ρ is a rate or the spectral radius",
    ),
    (r"\\phi\(k[^()]*\)\^\\T\s*v", "the state is a sum of φ(k_j) v_jᵀ (column vectors)"),
]
RULED_OUT_IN_PROSE = [
    (r"chunks? (?:size|of size|length) \$c\$|\$c\$-token chunk", "the chunk size is C"),
    (
        r"\b[Dd]oc(?:ument)?s?\.?\s*0{2}\d|\b[Dd]ocuments? 0",
        "the notes are never named as documents",
    ),
]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chapters_follow_the_notation_page(path):
    text = markdown(path)
    found = [
        f"{m.group(0)!r} ({rule})"
        for pattern, rule in RULED_OUT_IN_MATH
        for m in re.finditer(pattern, math(text))
    ]
    found += [
        f"{m.group(0)!r} ({rule})"
        for pattern, rule in RULED_OUT_IN_PROSE
        for m in re.finditer(pattern, text + "\n" + code(path))
    ]
    assert not found, f"{path.name}: " + "; ".join(found[:8])


def test_the_rules_find_what_they_rule_out():
    bad = "$k(x, y)$ $K_{m,n}$ $\\R^D$ $d_k$ $\\rho_i$ $\\phi(k)^\\T v$"
    hits = [p for p, _ in RULED_OUT_IN_MATH if re.search(p, math(bad))]
    assert len(hits) == len(RULED_OUT_IN_MATH)
    good = "$\\kappa(x, y)$ $\\mathcal{K}_{m,n}$ $K_{ij}$ $K_{[:l]}$ $\\rho(A)$"
    good += " $\\phi(k_j)^\\T\\phi(q)$"
    assert not [p for p, _ in RULED_OUT_IN_MATH if re.search(p, math(good))]


def prose_words(path):
    """Words of prose: markdown without formulas, directive options, labels or HTML."""
    text = re.sub(r"\$\$.*?\$\$|\$[^$\n]*\$", " ", markdown(path), flags=re.S)
    text = re.sub(r"^\s*(:\w[\w-]*:.*|\(.*\)=|```.*|<.*>)$", " ", text, flags=re.M)
    text = re.sub(r"\{[\w:-]+\}`[^`]*`", " x ", text)
    return len(re.findall(r"[A-Za-z][A-Za-z'’-]*", text))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_chapter_is_longer_than_a_reader_can_follow(path):
    assert prose_words(path) <= MAX_PROSE_WORDS, f"{path.name}: {prose_words(path)} words"


PARTS = ["What you will learn", "Exercises", "Summary", "References"]


@pytest.mark.parametrize("path", NUMBERED, ids=lambda p: p.name)
def test_every_chapter_has_the_parts_of_a_chapter(path):
    headings = re.findall(r"^#{2,3} (.*)$", markdown(path), flags=re.M)
    missing = [part for part in PARTS if not any(h.startswith(part) for h in headings)]
    assert not missing, f"{path.name} has no section {missing}"
    assert re.search(r"\{prf:proof\}", markdown(path)), f"{path.name} proves nothing"


CORRECTIONS = CHAPTERS / "corrections.md"
ITEM_FIELDS = ["The notes say", "What is true", "The check", "In the book"]


def correction_items():
    included = re.findall(r"\{include\} (\S+)", CORRECTIONS.read_text())
    items = []
    for name in included:
        text = (CHAPTERS / name).read_text()
        for block in re.split(r"\n(?=\(corr-)", text)[1:]:
            items.append((name, block))
    return included, items


def test_the_corrections_appendix_has_one_complete_item_per_error():
    included, items = correction_items()
    assert included and all((CHAPTERS / name).exists() for name in included)
    assert len(items) >= 25, f"only {len(items)} corrections"
    labels = [re.match(r"\((corr-[\w-]+)\)=\n### ", block) for _, block in items]
    assert all(labels), [block[:60] for (_, block), m in zip(items, labels, strict=True) if not m]
    assert len({m.group(1) for m in labels}) == len(labels), "duplicate correction labels"
    for name, block in items:
        missing = [f for f in ITEM_FIELDS if not re.search(rf"^{f}\n: \S", block, flags=re.M)]
        assert not missing, f"{name}: {block.splitlines()[0]} lacks {missing}"
        linked = re.search(r"\{(prf:ref|ref|doc)\}`", block.split("\nIn the book\n")[-1])
        assert linked, f"{name}: {block.splitlines()[0]} links to nowhere in the book"


def chapter_order():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    return [ROOT / f"{f}.ipynb" for f in files if (ROOT / f"{f}.ipynb") in NUMBERED]


def test_no_chapter_builds_on_a_theorem_of_a_later_chapter():
    """A {prf:ref} is a dependency: it may point into the same chapter, an earlier one or the
    toolkit appendix, never forward (a forward {ref} to a section, an aside, is allowed)."""
    chapters = chapter_order()
    assert len(chapters) == len(NUMBERED), "a numbered chapter is missing from _toc.yml"
    home = {
        label: position
        for position, path in enumerate(chapters)
        for label in re.findall(r"^:label: ([\w-]+)", markdown(path), flags=re.M)
    }
    forward = [
        f"{path.name} → {label}"
        for position, path in enumerate(chapters)
        for label in re.findall(r"\{prf:ref\}`(?:[^`<]*<)?([\w-]+)>?`", markdown(path))
        if home.get(label, position) > position
    ]
    assert not forward, "theorems used before the chapter that proves them: " + ", ".join(forward)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_correction_in_a_chapter_is_a_one_line_margin_note(path):
    notes = re.findall(r"```\{margin\}[^\n]*\n(.*?)```", markdown(path), flags=re.S)
    long = [note for note in notes if len(note.strip().splitlines()) > 2]
    assert not long, f"{path.name}: margin notes longer than a line: {long[:2]}"
    unlinked = [n for n in notes if "notes" in n and not re.search(r"\{ref\}`([^`]*<)?corr-", n)]
    assert not unlinked, f"{path.name}: margin notes on the notes without a link: {unlinked[:2]}"


def test_a_reference_to_a_heading_with_math_has_its_own_text():
    r"""{ref}`label` shows the heading as link text, where the book cannot typeset its math (a
    reader would see `$\phi(x) = x$`): such a reference names its text, {ref}`φ(x) = x <label>`."""
    pages = [*NOTEBOOKS, *CHAPTERS.glob("*.md"), *CHAPTERS.glob("corrections/*.md")]
    text = "\n".join(markdown(p) for p in pages)
    with_math = {
        label
        for label, title in re.findall(r"^\(([\w-]+)\)=\s*\n#+ (.+)$", text, flags=re.M)
        if "$" in title
    }
    bare = sorted(set(re.findall(r"\{ref\}`([\w-]+)`", text)) & with_math)
    assert not bare, f"references that would show a heading's TeX: {bare}"
