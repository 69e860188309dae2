"""Author–year labels in the bibliography, as the citations in the text already are.

The text cites "Katharopoulos et al. (2020)" (sphinxcontrib-bibtex's author_year reference
style), but pybtex's "plain" style numbers the bibliography [1]–[n], so the reader who follows a
citation finds a number. This registers a pybtex style, "author_year": plain's formatting with
labels "Katharopoulos et al., 2020" (one or two surnames, "et al." beyond; a, b, … when two
works would share a label), and _config.yml selects it. A label reads as the reader sees the
name, not as references.bib spells it: "Schölkopf", not Sch{\\"o}lkopf.
"""

import pybtex.plugin
from pybtex.richtext import Text
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.style.labels import BaseLabelStyle


def _plain(latex):
    """LaTeX as text: braces dropped, accents on their letters ({\\"o} is ö)."""
    return Text.from_latex(latex).render_as("text")


def _surname(person):
    return _plain(" ".join(person.last_names) or " ".join(person.first_names))


class AuthorYearLabels(BaseLabelStyle):
    def format_labels(self, sorted_entries):
        labels = [self.format_label(entry) for entry in sorted_entries]
        counts, used = {label: labels.count(label) for label in labels}, {}
        for label in labels:
            if counts[label] == 1:
                yield label
            else:  # Smith, 2020a, Smith, 2020b, …
                used[label] = used.get(label, 0) + 1
                yield label + "abcdefghijklmnopqrstuvwxyz"[used[label] - 1]

    def format_label(self, entry):
        people = entry.persons.get("author") or entry.persons.get("editor") or []
        names = [_surname(person) for person in people]
        if not names:
            who = _plain(entry.fields.get("title", entry.key).split(":")[0])
        elif len(names) <= 2:
            who = " and ".join(names)
        else:
            who = f"{names[0]} et al."
        return f"{who}, {entry.fields.get('year', 'n.d.')}"


class AuthorYearStyle(PlainStyle):
    default_label_style = AuthorYearLabels


def setup(app):
    pybtex.plugin.register_plugin("pybtex.style.formatting", "author_year", AuthorYearStyle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
