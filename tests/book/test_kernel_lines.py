"""A chapter's table that maps a formula to "the line" of a kernel quotes the package as it is:
every quoted line is in the source of the function named beside it (a kernel, or a function it
calls), so a change to a kernel that leaves the table behind fails here, not in a reader's eyes."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEADER = "| term | kernel | the line |"
ROW = re.compile(r"^\|.*\| `(?P<function>\w+)` \| `(?P<line>.+)` \|$")


def quoted_lines():
    """(chapter, function, line) for every row of every such table."""
    for path in sorted((ROOT / "chapters").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            text = "".join(cell["source"])
            if cell["cell_type"] != "markdown" or HEADER not in text:
                continue
            table = text[text.index(HEADER) :].split("\n\n")[0]
            for row in table.splitlines()[2:]:
                match = ROW.match(row)
                assert match, f"{path.name}: a row without a function and a line: {row}"
                yield path.name, match["function"], match["line"]


def function_source(name):
    """The source of the package's `def name(` (kernels included), up to the next definition."""
    for path in (ROOT / "linattn_core").rglob("*.py"):
        text = path.read_text()
        start = text.find(f"\ndef {name}(")
        if start >= 0:
            end = text.find("\ndef ", start + 1)
            return text[start : end if end >= 0 else len(text)]
    raise AssertionError(f"no function {name} in linattn_core")


LINES = list(quoted_lines())


def test_there_are_quoted_lines():
    assert len(LINES) >= 8


@pytest.mark.parametrize(("chapter", "function", "line"), LINES)
def test_a_quoted_line_is_in_its_function(chapter, function, line):
    assert line in function_source(function), f"{chapter}: `{line}` is not in {function}"
