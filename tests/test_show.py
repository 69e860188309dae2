"""show_source: the package's own code, as the chapters display it."""

import inspect

import pytest

from linattn_core.book.show import show_source
from linattn_core.maths.linalg import kron, vec
from linattn_core.modules import LinearSelfAttention


def test_source_is_the_package_code_and_names_its_home():
    shown = show_source(vec, kron)
    assert shown.code == inspect.getsource(vec).rstrip() + "\n\n" + inspect.getsource(kron).rstrip()
    assert shown.origin == "linattn_core.maths.linalg.vec, linattn_core.maths.linalg.kron"
    assert str(shown) == shown.code
    assert repr(shown).startswith("# linattn_core.maths.linalg.vec")


def test_html_is_highlighted_inline_and_escaped():
    html = show_source(LinearSelfAttention)._repr_html_()
    assert html.startswith('<div class="linattn-source">')
    assert "from linattn_core.modules.LinearSelfAttention" in html
    assert 'style="color:' in html  # inline colours: no stylesheet needed in JupyterLab or the book
    assert "<pre" in html and "->" not in html.split("<pre", 1)[1]  # "->" arrives as "-&gt;"


def test_a_triton_kernel_is_shown_from_its_decorator():
    pytest.importorskip("triton")
    from linattn_core.exercises.solutions import feature_map

    shown = show_source(feature_map)
    assert shown.code.startswith("@triton.jit\ndef feature_map(")
    assert shown.origin == "linattn_core.exercises.solutions.feature_map"


@pytest.mark.parametrize("bad", [1, "vec", len])
def test_only_python_functions_and_classes(bad):
    with pytest.raises(TypeError, match="show_source: expected a function, class or Triton"):
        show_source(bad)


def test_needs_something_to_show():
    with pytest.raises(ValueError, match="show_source: give at least one"):
        show_source()
