"""The shared way tests and book chapters check results: relative errors against float64 references.

A check compares ‖actual − expected‖ / ‖expected‖ with a tolerance (typical values: about 1e-12 for
float64 algebra, `KERNEL_RTOL` for the GPU kernels' precisions). Notebooks call `check`, which
prints one line that names the tolerance rather than the measured error, so stored outputs are the
same on every machine.
"""

import math
import os
import subprocess
import sys
import textwrap

import torch

from linattn_core.validation import check_non_negative_int, check_positive_number

# Relative errors the Triton kernels stay under, against float64 references. Float32 runs as
# exact products (three TF32 products on a GPU): chained sums over the sequence. 16-bit operands
# round the similarity blocks and the states to the inputs' precision (unit roundoff 2^-11 in
# float16, 2^-9 in bfloat16); measured in the Triton interpreter: float16 ≤ 8e-4, bfloat16 ≤ 9e-3
# except ∂φ(q) of linear attention ≤ 1.3e-2, a sum of φ(k_j) g_i·(v_j − o_i) whose terms cancel.
KERNEL_RTOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


def relative_error(actual, expected) -> float:
    """‖actual − expected‖ / ‖expected‖ (Frobenius norms), computed in float64 on the CPU.

    The norms are scaled so that values near the float64 limits (1e-300, 1e300) are measured
    correctly too.

    NaN anywhere gives inf, so a NaN never passes a tolerance. A zero reference has no relative
    error: the result is 0.0 if `actual` equals it and inf otherwise.

    >>> relative_error(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0]))
    0.0
    >>> round(relative_error(torch.tensor([3.0, 4.1]), torch.tensor([3.0, 4.0])), 6)
    0.02
    >>> relative_error(torch.tensor([float("nan")]), torch.tensor([1.0]))
    inf
    >>> relative_error(math.sqrt(2), 1.4142135623730951)  # Python floats: float64, not float32
    0.0
    """
    actual, expected = (_as_float64(x) for x in (actual, expected))
    if actual.shape != expected.shape:
        raise ValueError(
            "relative_error: actual must have the same shape as expected; "
            f"got actual.shape={tuple(actual.shape)}, expected.shape={tuple(expected.shape)}"
        )
    error = _norm(actual - expected)
    if error == 0:
        return 0.0
    reference = _norm(expected)
    ratio = error / reference if reference > 0 else math.inf
    return math.inf if math.isnan(ratio) else ratio


def assert_close(actual, expected, *, rtol, name="output") -> None:
    """Raise AssertionError unless `relative_error(actual, expected) < rtol`.

    The message gives the relative error, the tolerance and the shapes.

    >>> assert_close(torch.ones(3), torch.ones(3) + 1e-9, rtol=1e-6)
    >>> assert_close(torch.ones(3), torch.zeros(3), rtol=1e-6, name="chunked")
    Traceback (most recent call last):
    ...
    AssertionError: chunked: relative error inf ≥ rtol 1e-6 (actual.shape=(3,), expected.shape=(3,))
    """
    check_positive_number("assert_close", "rtol", rtol)
    actual, expected = torch.as_tensor(actual), torch.as_tensor(expected)
    shapes = f"actual.shape={tuple(actual.shape)}, expected.shape={tuple(expected.shape)}"
    if actual.shape != expected.shape:
        raise AssertionError(f"{name}: shapes differ ({shapes})")
    error = relative_error(actual, expected)
    if not error < rtol:
        raise AssertionError(
            f"{name}: relative error {error:.3g} ≥ rtol {_format_tolerance(rtol)} ({shapes})"
        )


def check(name, actual, expected, *, rtol) -> None:
    """`assert_close`, then print one line that is the same on every machine.

    The line shows the tolerance, not the measured error, which varies with hardware and
    library versions; a failure raises AssertionError with the measured error.

    >>> check("sum of squares", torch.tensor(385.0), torch.arange(11.0).square().sum(), rtol=1e-12)
    ✓ sum of squares: relative error < 1e-12
    """
    assert_close(actual, expected, rtol=rtol, name=name)
    print(f"✓ {name}: relative error < {_format_tolerance(rtol)}")


def random_qkv(*batch, n, d, d_v=None, dtype=torch.float64, seed=0, positive=False):
    """Fresh seeded queries, keys and values `(*batch, n, d)`, `(*batch, n, d)`, `(*batch, n, d_v)`.

    Entries are standard normal (q and k in absolute value when `positive`, to stand in for
    non-negative features), drawn in float64 from a private generator and then cast to
    `dtype`: the global RNG is untouched, and one seed gives the same values in every dtype.
    `d_v=None` means d.

    >>> q, k, v = random_qkv(2, 3, n=5, d=4, d_v=6, positive=True)
    >>> q.shape, v.shape, bool((k >= 0).all())
    (torch.Size([2, 3, 5, 4]), torch.Size([2, 3, 5, 6]), True)
    >>> q32, _, _ = random_qkv(n=5, d=4, dtype=torch.float32)
    >>> bool(torch.equal(q32, random_qkv(n=5, d=4)[0].float()))
    True
    """
    d_v = d if d_v is None else d_v
    for i, size in enumerate(batch):
        check_non_negative_int("random_qkv", f"batch[{i}]", size)
    for name, size in (("n", n), ("d", d), ("d_v", d_v)):
        check_non_negative_int("random_qkv", name, size)
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, n, d, generator=generator, dtype=torch.float64)  # (*batch, n, d)
    k = torch.randn(*batch, n, d, generator=generator, dtype=torch.float64)  # (*batch, n, d)
    v = torch.randn(*batch, n, d_v, generator=generator, dtype=torch.float64)  # (*batch, n, d_v)
    if positive:
        q, k = q.abs(), k.abs()
    return q.to(dtype), k.to(dtype), v.to(dtype)


def run_python(code, *, interpret=False, cwd=None, timeout=600):
    """Run `code` (dedented) in a fresh Python process and return what it printed.

    Triton decides once per process whether kernels run in its CPU interpreter, when it is first
    imported: a test of that decision, or of compiling for a GPU (which the interpreter cannot
    do), needs a process of its own. `interpret` sets TRITON_INTERPRET=1 there; otherwise it is
    unset. A non-zero exit raises AssertionError with the child's stderr.

    >>> run_python("print(6 * 7)")
    '42\\n'
    """
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if child.returncode != 0:
        raise AssertionError(
            f"run_python: the child exited with {child.returncode}:\n{child.stderr}"
        )
    return child.stdout


def values_and_gradients(fn, inputs, grad_outputs):
    """`fn(*inputs)` on fresh leaf copies of `inputs` and the gradients of its output (or tuple of
    outputs) for `grad_outputs`: (the outputs, detached, then ∂/∂ each input) — how every test
    compares an implementation's outputs and gradients with a reference's.

    >>> x = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> values_and_gradients(lambda t: t.square(), [x], torch.ones(2, dtype=torch.float64))
    (tensor([1., 4.], dtype=torch.float64), tensor([2., 4.], dtype=torch.float64))
    """
    leaves = [x.detach().clone().requires_grad_() for x in inputs]
    out = fn(*leaves)
    outputs = out if isinstance(out, tuple) else (out,)
    grads = torch.autograd.grad(outputs, leaves, grad_outputs)
    return (*(o.detach() for o in outputs), *grads)


def compiled_gradients(step, leaves):
    """The gradients of the scalar `step(*leaves)`, eagerly and through
    `torch.compile(fullgraph=True)` with the AOTAutograd backend, which traces the whole step (a
    graph break raises): a pair of tuples, for the tests that a compiled training step computes
    what eager mode does."""
    eager = torch.autograd.grad(step(*leaves), leaves)
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    try:
        return eager, torch.autograd.grad(compiled(*leaves), leaves)
    finally:
        torch._dynamo.reset()


def in_float64(fn, *tensors, **kwargs):
    """Run `fn` on float64 CPU copies of the floating-point tensors, cast the result back.

    The result (a tensor, or a tuple whose tensors are cast) takes the dtype and device of the
    first floating-point argument; other arguments and `kwargs` are passed unchanged. This is
    how a float32, bfloat16 or GPU result gets its reference.

    >>> x = torch.tensor([1.0, 2.0], dtype=torch.float16)
    >>> in_float64(torch.square, x)
    tensor([1., 4.], dtype=torch.float16)
    """
    floating = [t for t in tensors if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not floating:
        raise TypeError("in_float64: tensors must include a floating-point tensor; got none")
    target = floating[0]
    result = fn(*(_to_reference(t) for t in tensors), **kwargs)
    if isinstance(result, tuple):
        return tuple(_cast_like(r, target) for r in result)
    return _cast_like(result, target)


def _as_float64(x) -> torch.Tensor:
    """A tensor, array, list or number in float64 on the CPU (Python floats stay exact: they are
    float64 already, and torch's default dtype would round them to float32)."""
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64)
    return torch.as_tensor(x, dtype=torch.float64)


def _to_reference(x):
    is_floating_tensor = isinstance(x, torch.Tensor) and x.is_floating_point()
    return x.to("cpu", torch.float64) if is_floating_tensor else x


def _cast_like(x, target):
    return x.to(target.device, target.dtype) if isinstance(x, torch.Tensor) else x


def _norm(x: torch.Tensor) -> float:
    """‖x‖ scaled by max |x| first, so the squares neither underflow nor overflow; NaN stays NaN."""
    largest = x.abs().max().item() if x.numel() else 0.0
    if largest == 0 or not math.isfinite(largest):
        return largest
    return largest * torch.linalg.vector_norm(x / largest).item()


def _format_tolerance(rtol: float) -> str:
    """Shortest scientific form: 1e-10, 3e-4, 2.5e-3."""
    mantissa, exponent = f"{rtol:.2e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
