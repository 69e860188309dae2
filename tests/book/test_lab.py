"""A chapter in JupyterLab reads as it does in the book: the notation macros typeset, theorems
and proofs are boxes, citations and {doc} links are rendered, not shown as MyST source.

JupyterLab renders Markdown cells with jupyterlab-myst (KaTeX), which takes the book's macros
from the front matter of a notebook's first Markdown cell (`make macros`,
scripts/sync_macros.py). The test syncs a copy of a chapter from `_config.yml` itself, so that
it checks the mechanism whether or not the committed notebooks are synced
(tests/book/test_notebook_macros.py checks that). To the copy it adds a cell that uses every
macro of `_config.yml` and one with an undefined macro: the error found must be exactly that one,
which shows that the check still sees what an error looks like.

JupyterLab runs on 127.0.0.1 (a free port, a token, settings and workspaces in a temporary
folder, no news or update checks, every cell attached) and Chromium opens the notebook;
like the book's checks, a request leaving 127.0.0.1 or a JavaScript error fails.
"""

import importlib.util
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from .conftest import keep_offline

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "sync_macros.py"
# Theorems, proofs, citations, a {doc} link and the macros \T, \R, \E, \norm{…} and \bigO{…}.
CHAPTER = ROOT / "chapters" / "05_favor.ipynb"
UNDEFINED = r"\notABookMacro"
SETTINGS = {
    # every cell in the DOM, so that every Markdown cell renders without scrolling
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": '{"windowingMode": "none"}',
    # no requests to jupyter.org
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": (
        '{"fetchNews": "false", "checkForUpdates": false}'
    ),
}

# one JupyterLab for the module: its tests stay on one worker of `make browser` (loadgroup)
pytestmark = [pytest.mark.book, pytest.mark.xdist_group("lab")]


def sync_macros():
    spec = importlib.util.spec_from_file_location("sync_macros", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def every_macro(macros):
    """Inline math using each macro once, with an argument `{x}` per `#n` of its body."""
    uses = []
    for name, body in macros.items():
        count = max((int(n) for n in re.findall(r"#([1-9])", body)), default=0)
        uses.append(name + "{x}" * count + " ")
    return "Every macro of `_config.yml`: $" + "".join(uses).strip() + "$"


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab serving a synced copy of CHAPTER: `(url of the notebook, its Markdown)`."""
    tmp = tmp_path_factory.mktemp("lab")
    notebooks, settings = tmp / "notebooks", tmp / "settings"
    notebooks.mkdir()
    for name, text in SETTINGS.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(text)
    sync = sync_macros()
    macros = sync.config_macros()
    notebook = nbformat.reads(
        sync.sync_text(CHAPTER.read_text(encoding="utf-8"), macros), as_version=4
    )
    notebook.cells += [
        nbformat.v4.new_markdown_cell(every_macro(macros), id="every-macro"),
        nbformat.v4.new_markdown_cell(f"An undefined macro: ${UNDEFINED}$.", id="undefined"),
    ]
    nbformat.write(notebook, notebooks / CHAPTER.name)

    port, token = free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp / "config"), JUPYTER_RUNTIME_DIR=str(tmp))
    command = [
        str(Path(sys.executable).parent / "jupyter"),
        "lab",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={notebooks}",
        f"--LabApp.user_settings_dir={settings}",
        f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
    ]
    if os.getuid() == 0:
        command.append("--allow-root")
    log = open(tmp / "server.log", "w")
    server = subprocess.Popen(
        command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start:\n{(tmp / 'server.log').read_text()}")
                time.sleep(0.2)
        markdown = [c.source for c in notebook.cells if c.cell_type == "markdown"]
        # a fresh workspace: no other documents restored
        yield f"{base}/lab/workspaces/test/tree/{CHAPTER.name}?reset&token={token}", markdown
    finally:
        server.send_signal(signal.SIGTERM)  # shuts its kernels down too
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


# What the notebook shows once every Markdown cell is rendered by MyST and three looks, 250 ms
# apart, agree (jupyterlab-myst re-renders the whole notebook as each cell renders).
# Undefined macros and other KaTeX errors: display math becomes <pre title=message> with a
# red message, inline math a yellow <span title=message> (myst-to-react's InlineError, which
# also marks what jupyterlab-myst cannot resolve: citations, as it reads no bibliography, and
# references to other notebooks; those are not math errors).
INSPECT = """async (expected) => {
  const NOT_MATH = ['Citation Not Found', 'Cross Reference Not Found'];
  const look = () => {
    const cells = [...document.querySelectorAll('.jp-MarkdownCell')];
    const myst = cells.map((cell) => cell.querySelector('.myst')).filter(Boolean);
    const text = cells.map((cell) => cell.querySelector('.myst, .jp-RenderedMarkdown'))
      .filter(Boolean).map((el) => el.innerText).join('\\n');
    return {
      cells: cells.length,
      rendered: myst.length,
      katex: document.querySelectorAll('.jp-MarkdownCell .katex').length,
      errors: [...document.querySelectorAll(
        '.myst .text-red-500, .myst .text-yellow-600, .myst .katex-error, .myst merror, '
        + '.myst mjx-merror')]
        .map((el) => (el.closest('[title]') || el).getAttribute('title') || el.textContent)
        .filter((title) => !NOT_MATH.includes(title)),
      undefinedShown: (text.match(/Undefined control sequence[^\\n]*/g) || []),
      theorems: [...document.querySelectorAll('aside.myst-proof .myst-proof-title')]
        .map((el) => el.textContent.trim()).filter((title) => title.startsWith('Theorem')),
      proofs: [...document.querySelectorAll('aside.myst-proof .myst-proof-title')]
        .map((el) => el.textContent.trim()).filter((title) => title.startsWith('Proof')),
      citations: [...document.querySelectorAll('.myst .cite-group, .myst cite, '
        + '.myst [title="Citation Not Found"]')].map((el) => el.textContent.trim()),
      links: [...document.querySelectorAll('.myst a.link')].map((el) => el.textContent),
      rawRoles: (text.match(/\\{(cite(:[a-z]+)?|doc|ref|eq|numref|prf:[a-z]+)\\}/g) || []),
    };
  };
  const deadline = Date.now() + 45000;
  let previous = null, same = 0;
  while (Date.now() < deadline) {
    const now = look();
    const done = now.cells === expected && now.rendered === expected && now.katex > 0;
    same = done && JSON.stringify(now) === JSON.stringify(previous) ? same + 1 : 0;
    if (same === 2) return now;
    previous = now;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return look();
}"""


@pytest.fixture(scope="module")
def shown(lab, browser):
    """What Chromium shows of the chapter in JupyterLab, and the problems it met."""
    url, markdown = lab
    problems = []
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    keep_offline(page, problems)
    try:
        page.goto(url, wait_until="load")
        page.wait_for_selector(".jp-MarkdownCell", timeout=120_000)  # a loaded machine
        yield page.evaluate(INSPECT, len(markdown)), markdown, problems
    finally:
        page.close()


def test_every_markdown_cell_is_rendered_by_myst(shown):
    facts, markdown, problems = shown
    assert facts["cells"] == len(markdown), f"{facts['cells']} of {len(markdown)} Markdown cells"
    assert facts["rendered"] == len(markdown), (
        f"jupyterlab-myst rendered {facts['rendered']} of {len(markdown)} Markdown cells: "
        "is it installed and enabled (jupyter labextension list)?"
    )
    assert not problems, "\n".join(problems)


def test_the_book_macros_typeset(shown):
    facts, _, _ = shown
    assert facts["katex"] > 0, "no math was typeset"
    # the planted undefined macro is found, and it is the only error
    planted = [e for e in facts["errors"] if UNDEFINED in e]
    assert planted, f"the planted {UNDEFINED} was not seen as an error: {facts['errors']}"
    others = [e for e in facts["errors"] if UNDEFINED not in e]
    assert not others, f"math errors in {CHAPTER.name} in JupyterLab: {others}"
    assert all(UNDEFINED in e for e in facts["undefinedShown"]), facts["undefinedShown"]


def test_theorems_and_proofs_are_boxes(shown):
    facts, markdown, _ = shown
    source = "\n".join(markdown)
    theorems = len(re.findall(r"^(```+|:::+)\{prf:theorem\}", source, re.M))
    proofs = len(re.findall(r"^(```+|:::+)\{prf:proof\}", source, re.M))
    assert theorems and proofs, f"{CHAPTER.name} should have a theorem and a proof to check"
    assert len(facts["theorems"]) == theorems, facts["theorems"]
    assert len(facts["proofs"]) == proofs, facts["proofs"]


def test_roles_are_rendered_not_shown_as_source(shown):
    facts, markdown, _ = shown
    source = "\n".join(markdown)
    assert "{cite" in source and "{doc}" in source
    assert not facts["rawRoles"], f"MyST roles shown as text: {facts['rawRoles'][:5]}"
    assert facts["citations"], "no citation rendered"
    assert facts["links"], "no {doc} link rendered"
