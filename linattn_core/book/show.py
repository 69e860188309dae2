"""Show a package function's source in a notebook and in the HTML book.

A chapter that teaches a function imports it from the package and calls `show_source`, so the
reader sees exactly the code that the tests test (one home per definition).
"""

import html
import inspect

__all__ = ["Source", "show_source"]


class Source:
    """Highlighted source of one or more objects: HTML in Jupyter and the book, text elsewhere."""

    def __init__(self, code: str, origin: str):
        self.code, self.origin = code, origin

    def __str__(self) -> str:
        return self.code

    def __repr__(self) -> str:
        return f"# {self.origin}\n{self.code}"

    def _repr_html_(self) -> str:
        from pygments import highlight  # Jupyter's own dependency, needed only here
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer

        # Inline colours: the same highlighting in JupyterLab and in the book, without a stylesheet.
        body = highlight(self.code, PythonLexer(), HtmlFormatter(nowrap=True, noclasses=True))
        return (
            '<div class="linattn-source">'
            f'<div style="font-size: 0.8em; color: #555">from {html.escape(self.origin)}</div>'
            '<pre style="background: #f8f8f8; padding: 0.6em; overflow-x: auto; line-height: 1.3">'
            f"{body}</pre></div>"
        )


def show_source(*objects) -> Source:
    """The source of functions, classes or Triton kernels of the package, as defined there.

    >>> from linattn_core.maths.linalg import vec
    >>> print(show_source(vec).origin)
    linattn_core.maths.linalg.vec
    >>> show_source(vec).code.splitlines()[0]
    'def vec(x: torch.Tensor) -> torch.Tensor:'
    """
    if not objects:
        raise ValueError("show_source: give at least one function or class")
    objects = [_python_function(obj) for obj in objects]
    code = "\n\n".join(inspect.getsource(obj).rstrip() for obj in objects)
    origin = ", ".join(f"{obj.__module__}.{obj.__qualname__}" for obj in objects)
    return Source(code, origin)


def _python_function(obj):
    """The function or class itself; for a Triton kernel (`@triton.jit`), the function it wraps,
    whose source starts at the decorator."""
    wrapped = getattr(obj, "fn", None)
    if inspect.isfunction(wrapped):
        return wrapped
    if inspect.isfunction(obj) or inspect.isclass(obj):
        return obj
    raise TypeError(f"show_source: expected a function, class or Triton kernel; got {obj!r}")
