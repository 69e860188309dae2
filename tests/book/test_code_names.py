"""Words and code do not drift apart: every name of the package, every file of the repository and
every command that the README, CONTRIBUTING, the pages of the book or the package's own
docstrings write exists under that name."""

import importlib
import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOTTED = re.compile(r"\blinattn_core(?:\.[A-Za-z_]\w*)+")
COMMAND = re.compile(r"python3? -m (linattn_core[\w.]*)")
PATH = re.compile(r"(?<![\w./-])((?:[\w-]+/)+[\w-]+\.(?:py|md|json|ipynb|cfg|yml|toml|txt))\b")
# A file named alone, in backticks: `trace.py`
NAMED_FILE = re.compile(r"`([\w-]+\.(?:py|md|json|ipynb|cfg|yml|toml))`")
# Files of other projects that the words name (flash-linear-attention's, Triton's, torch's, the
# peers'), and paths that a command writes rather than one that is committed.
ELSEWHERE = re.compile(r"^(fla|triton|torch|fast_transformers|performer_pytorch|site-packages)/")
WRITTEN = re.compile(r"^(_build|\.venv|\.fla|\.peers|gpu-check|_assets)/")
# Paths with a placeholder for a name: chapters/NN_topic.ipynb, DIR/gpu_check.json, chapters/x.ipynb
PLACEHOLDER = re.compile(r"(^|/)(DIR|NN_\w+|x)(/|\.)")


def texts():
    """(where, text) of everything read for names: the front documents, the pages, the notebooks
    (every cell) and the package's modules."""
    for path in [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "intro.md"]:
        yield path.name, path.read_text()
    for path in sorted((ROOT / "chapters").rglob("*.md")):
        yield str(path.relative_to(ROOT)), path.read_text()
    for path in sorted((ROOT / "chapters").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        yield str(path.relative_to(ROOT)), "\n".join("".join(c["source"]) for c in cells)
    for path in sorted((ROOT / "linattn_core").rglob("*.py")):
        yield str(path.relative_to(ROOT)), path.read_text()


def dotted_names(text):
    """The package's dotted names in `text`, but templates such as `check_<name>`."""
    return [m[0] for m in DOTTED.finditer(text) if not text.startswith("<", m.end())]


def resolves(name):
    """Whether `name` (a.b.c) is a module, or an attribute reached from the longest module
    prefix of it."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for part in parts[cut:]:
                found = getattr(found, part)
        except AttributeError:
            return False
        return True
    return False


def runnable(module):
    """Whether `python -m module` runs something: a package with `__main__`, or a module that
    checks `__name__ == "__main__"`."""
    spec = importlib.util.find_spec(module)
    if spec is None:
        return False
    if spec.submodule_search_locations:
        return importlib.util.find_spec(f"{module}.__main__") is not None
    return '__name__ == "__main__"' in Path(spec.origin).read_text()


def committed_files():
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [f"/{path}" for path in listed]


@pytest.fixture(scope="module")
def written():
    return list(texts())


def test_every_dotted_name_of_the_package_resolves(written):
    broken = {
        f"{where}: {name}"
        for where, text in written
        for name in dotted_names(text)
        if not resolves(name)
    }
    assert not broken, "names of the package that do not exist:\n" + "\n".join(sorted(broken))


def test_every_python_m_command_names_a_runnable_module(written):
    broken = {
        f"{where}: python -m {module}"
        for where, text in written
        for module in COMMAND.findall(text)
        if not runnable(module)
    }
    assert not broken, "commands that run nothing:\n" + "\n".join(sorted(broken))


def test_every_file_path_written_is_a_file_of_the_repository(written):
    files = committed_files()
    broken = {
        f"{where}: {path}"
        for where, text in written
        for path in PATH.findall(text)
        if not ELSEWHERE.match(path)
        and not WRITTEN.match(path)
        and not PLACEHOLDER.search(path)
        and not any(f.endswith(f"/{path}") for f in files)
    }
    assert not broken, "paths that name no committed file:\n" + "\n".join(sorted(broken))


def test_every_file_named_alone_is_a_file_of_the_repository(written):
    names = {f.rsplit("/", 1)[-1] for f in committed_files()}
    broken = {
        f"{where}: {name}"
        for where, text in written
        for name in NAMED_FILE.findall(text)
        if name not in names
    }
    assert not broken, "file names that no committed file has:\n" + "\n".join(sorted(broken))


def test_the_checks_find_what_they_look_for():
    assert resolves("linattn_core.attention.linear_attention")
    assert not resolves("linattn_core.kernels.trace.record")
    assert runnable("linattn_core.kernels.compile") and runnable("linattn_core.bench")
    assert not runnable("linattn_core.kernels.tools.trace")
    assert dotted_names(
        "`linattn_core.exercises.check_<name>(kernel)` and linattn_core.bench."
    ) == ["linattn_core.bench"]
    assert PATH.findall("see `kernels/tools/sweep.py` and bench/tile_sweep.py.") == [
        "kernels/tools/sweep.py",
        "bench/tile_sweep.py",
    ]
