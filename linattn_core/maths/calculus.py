"""Matrix calculus: check hand-derived derivatives against automatic differentiation
(`torch.func`), in float64, and the closed forms of the
matrix-calculus chapter that take more than one line.

Layouts (that chapter): ``"tensor"`` gives shape ``S_out + S_in`` (a gradient shaped like the input
for a scalar f, the numerator-layout Jacobian ``(m, n)`` for vectors, ``J[i, j, k, l] =
dF_ij/dX_kl`` for matrices); ``"vec"`` gives the matrix ``d vec(F) / d vec(X)`` of shape
``(F.numel(), X.numel())``, where `vec` stacks columns as in the Kronecker identities
(Magnus and Neudecker, *Matrix Differential Calculus*).

Closed forms: `trace_power_gradient` (∇ tr(A Xᵏ)) and `adjugate` (∇ det X = adj(X)ᵀ, Jacobi's
formula), each checked against autograd in the tests.
"""

from dataclasses import dataclass

import torch

from linattn_core.validation import (
    ArgumentTypeError,
    check_positive_int,
    check_positive_number,
    check_tensor,
)

__all__ = [
    "GradientCheck",
    "adjugate",
    "check_differential",
    "check_gradient",
    "jacobian",
    "trace_power_gradient",
]


@dataclass(frozen=True)
class GradientCheck:
    """A passed check; `error` is ‖closed − autograd‖_F / ‖autograd‖_F."""

    name: str
    error: float
    rtol: float

    def __str__(self) -> str:
        # The bound, not the error: its last digits vary between machines.
        return f"✓ {self.name}: relative error < {self.rtol:.0e}"


def jacobian(f, inputs, *, wrt=0, order=1, layout="tensor") -> torch.Tensor:
    """Derivative of ``f(*inputs)`` with respect to ``inputs[wrt]`` by reverse-mode autograd.

    ``inputs`` is a tuple of float64 tensors. ``order=2`` gives the Hessian of a scalar-valued
    ``f``: shape ``S_in + S_in``, or ``(n, n)`` with ``n = inputs[wrt].numel()`` in vec layout.

    >>> A, x, X = (torch.ones(s, dtype=torch.float64) for s in [(2, 3), (3,), (3, 4)])
    >>> jacobian(lambda x: A @ x, (x,)).shape  # numerator layout (m, n)
    torch.Size([2, 3])
    >>> jacobian(lambda X: A @ X, (X,)).shape  # (p, q, m, n)
    torch.Size([2, 4, 3, 4])
    >>> jacobian(lambda X: A @ X, (X,), layout="vec").shape  # (p·q, m·n)
    torch.Size([8, 12])
    """
    inputs = _check_inputs("jacobian", inputs)
    _check_options("jacobian", len(inputs), wrt, order, layout)
    output = f(*inputs)
    if not isinstance(output, torch.Tensor):
        raise TypeError(f"jacobian: f must return a torch.Tensor; got {type(output).__name__}")
    if order == 2 and output.dim() != 0:
        raise ValueError(f"jacobian: order=2 needs a scalar f; got shape {tuple(output.shape)}")
    derivative = torch.func.jacrev if order == 1 else torch.func.hessian
    result = derivative(f, argnums=wrt)(*inputs)  # S_out + S_in, or S_in + S_in
    if layout == "tensor":
        return result
    rows, x = (inputs[wrt] if order == 2 else output), inputs[wrt]
    # vec on both sides: reverse the row axes and the column axes, then flatten row-major
    axes = [*reversed(range(rows.dim())), *(rows.dim() + i for i in reversed(range(x.dim())))]
    return result.permute(*axes).reshape(rows.numel(), x.numel())


def check_gradient(
    f,
    closed_form,
    shapes=None,
    *,
    inputs=None,
    wrt=0,
    order=1,
    layout="tensor",
    seed=0,
    rtol=1e-10,
    name=None,
) -> GradientCheck:
    """Compare ``closed_form(*inputs)`` with autograd's derivative of ``f`` by ``inputs[wrt]``.

    Inputs are float64 N(0, 1) draws, one per entry of ``shapes`` (seeded by ``seed``), or the
    float64 tensors given as ``inputs`` (for restricted domains: log needs x > 0). Returns a
    `GradientCheck`; raises AssertionError, with the error or both shapes, on a mismatch.

    >>> A, B = torch.randn(3, 4, dtype=torch.float64), torch.randn(5, 3, dtype=torch.float64)
    >>> print(check_gradient(lambda X: torch.trace(A @ X @ B), lambda X: A.T @ B.T, [(4, 5)],
    ...                      name="d tr(AXB)/dX"))
    ✓ d tr(AXB)/dX: relative error < 1e-10
    >>> from linattn_core.maths.linalg import kron
    >>> print(check_gradient(lambda A, X: A @ X, lambda A, X: kron(X.T, torch.eye(3).double()),
    ...                      [(3, 4), (4, 2)], wrt=0, layout="vec", name="d vec(AX)/d vec(A)"))
    ✓ d vec(AX)/d vec(A): relative error < 1e-10
    """
    inputs = _draw("check_gradient", shapes, inputs, seed)
    _check_common("check_gradient", rtol, f=f, closed_form=closed_form)
    _check_options("check_gradient", len(inputs), wrt, order, layout)
    reference = jacobian(f, inputs, wrt=wrt, order=order, layout=layout)
    name = name or f"d {getattr(f, '__name__', 'f')}/d(input {wrt})"
    return _compare(name, closed_form(*inputs), reference, rtol, f"autograd ({layout} layout)")


def check_differential(
    f, differential, shapes=None, *, inputs=None, seed=0, rtol=1e-10, name=None
) -> GradientCheck:
    """Compare a differential rule with the forward-mode derivative of ``f`` in all inputs.

    ``differential(*inputs, *directions)`` returns dF, the part of F(X + dX) − F(X) linear in
    the directions dX (one per input, seeded N(0, 1) draws); the reference is `torch.func.jvp`.

    >>> inv = torch.linalg.inv
    >>> print(check_differential(inv, lambda X, dX: -inv(X) @ dX @ inv(X), [(3, 3)],
    ...                          name="d(X⁻¹) = −X⁻¹ dX X⁻¹"))
    ✓ d(X⁻¹) = −X⁻¹ dX X⁻¹: relative error < 1e-10
    """
    inputs = _draw("check_differential", shapes, inputs, seed)
    _check_common("check_differential", rtol, f=f, differential=differential)
    generator = torch.Generator().manual_seed(seed + 1)
    directions = tuple(torch.randn(x.shape, generator=generator, dtype=x.dtype) for x in inputs)
    _, reference = torch.func.jvp(f, inputs, directions)
    name = name or f"d {getattr(f, '__name__', 'f')}"
    return _compare(name, differential(*inputs, *directions), reference, rtol, "jvp")


def trace_power_gradient(X: torch.Tensor, A: torch.Tensor, k: int) -> torch.Tensor:
    """∇_X tr(A Xᵏ) = Σ_{r=0}^{k−1} (Xʳ A X^{k−1−r})ᵀ, X and A `(n, n)`, in the shape of X.

    One term per factor X of the product, with that factor replaced by dX (the product rule of
    differentials); A = I gives ∇ tr(Xᵏ) = k (X^{k−1})ᵀ.

    >>> X = torch.tensor([[1.0, 2.0], [0.0, 3.0]], dtype=torch.float64)
    >>> I = torch.eye(2, dtype=torch.float64)
    >>> bool(torch.allclose(trace_power_gradient(X, I, 3), 3 * (X @ X).T))
    True
    """
    check_tensor("trace_power_gradient", "X", X, min_rank=2)
    n = X.shape[-1]
    if X.shape != (n, n):
        raise ValueError(f"trace_power_gradient: X must be square (n, n); got {tuple(X.shape)}")
    check_tensor("trace_power_gradient", "A", A, min_rank=2)
    if A.shape != X.shape:
        raise ValueError(
            f"trace_power_gradient: A must have the shape of X {tuple(X.shape)}; "
            f"got {tuple(A.shape)}"
        )
    check_positive_int("trace_power_gradient", "k", k)
    power = torch.linalg.matrix_power
    return sum((power(X, r) @ A @ power(X, k - r - 1)).T for r in range(k))


def adjugate(X: torch.Tensor) -> torch.Tensor:
    """adj(X) for X `(..., n, n)`: the transposed matrix of cofactors, by minors.

    adj(X)_ji = (−1)^{i+j} det(X without row i and column j), so X adj(X) = det(X) I, and
    Jacobi's formula d det X = tr(adj(X) dX) makes adj(X)ᵀ the gradient of det. Built without
    an inverse, it is defined (and not zero) at a singular X of rank n − 1, where X⁻¹ does not
    exist. It takes n² determinants of size n − 1: meant for small matrices.

    >>> adjugate(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    tensor([[ 4., -2.],
            [-3.,  1.]])
    """
    check_tensor("adjugate", "X", X, min_rank=2)
    n = X.shape[-1]
    if X.shape[-2] != n or n == 0:
        raise ValueError(
            f"adjugate: X must be square (..., n, n) with n ≥ 1; got X.shape={tuple(X.shape)}"
        )
    keep = torch.tensor([[c for c in range(n) if c != j] for j in range(n)], dtype=torch.long)
    keep = keep.reshape(n, n - 1).to(X.device)  # (n, n − 1): row j lists every index but j
    minors = X[..., keep[:, None, :, None], keep[None, :, None, :]]  # (..., n, n, n−1, n−1)
    index = torch.arange(n, device=X.device)
    signs = 1 - 2 * ((index[:, None] + index[None, :]) % 2)  # (n, n): (−1)^{i+j}
    return (signs * torch.linalg.det(minors)).mT  # cofactors (..., n, n), transposed


def _compare(name, closed, reference, rtol, source) -> GradientCheck:
    if not isinstance(closed, torch.Tensor):
        raise TypeError(f"{name}: closed form must return a tensor; got {type(closed).__name__}")
    if closed.shape != reference.shape:
        shapes = f"closed form {tuple(closed.shape)}, {source} {tuple(reference.shape)}"
        raise AssertionError(f"✗ {name}: the shapes differ: {shapes}")
    scale = reference.norm().clamp_min(torch.finfo(reference.dtype).tiny)
    error = float((closed.to(reference.dtype) - reference).norm() / scale)
    if not error < rtol:  # this way round, NaN fails too
        raise AssertionError(f"✗ {name}: relative error {error:.3e} > rtol {rtol:.0e} ({source})")
    return GradientCheck(name, error, rtol)


def _draw(fn, shapes, inputs, seed) -> tuple[torch.Tensor, ...]:
    if (shapes is None) == (inputs is None):
        raise ValueError(f"{fn}: give exactly one of shapes (random inputs) or inputs (tensors)")
    if inputs is not None:
        return _check_inputs(fn, inputs)
    message = f"{fn}: shapes must be a non-empty list of shapes; got shapes={shapes!r}"
    if not isinstance(shapes, list | tuple):
        raise ArgumentTypeError(message)
    if not shapes:
        raise ValueError(message)
    for shape in shapes:
        message = f"{fn}: each shape must be a tuple of positive ints; got {shape!r}"
        if not (isinstance(shape, tuple | list) and all(type(s) is int for s in shape)):
            raise ArgumentTypeError(message)
        if not all(s > 0 for s in shape):
            raise ValueError(message)
    if type(seed) is not int:
        raise TypeError(f"{fn}: seed must be an int; got seed={seed!r}")
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(tuple(s), generator=generator, dtype=torch.float64) for s in shapes)


def _check_inputs(fn, inputs) -> tuple[torch.Tensor, ...]:
    message = f"{fn}: inputs must be a non-empty tuple of tensors; got {inputs!r}"
    if not isinstance(inputs, list | tuple):
        raise ArgumentTypeError(message)
    if not inputs:
        raise ValueError(message)
    for i, x in enumerate(inputs):
        if not (isinstance(x, torch.Tensor) and x.dtype == torch.float64):
            got = f"dtype={x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__
            raise TypeError(f"{fn}: inputs[{i}] must be a float64 tensor; got {got}")
    return tuple(inputs)


def _check_common(fn, rtol, **functions) -> None:
    check_positive_number(fn, "rtol", rtol)
    for argument, value in functions.items():
        if not callable(value):
            raise TypeError(f"{fn}: {argument} must be callable; got {type(value).__name__}")


def _check_options(fn, n_inputs, wrt, order, layout) -> None:
    if type(wrt) is not int or not 0 <= wrt < n_inputs:
        error = ValueError if type(wrt) is int else ArgumentTypeError
        raise error(f"{fn}: wrt must be an int in [0, {n_inputs}); got wrt={wrt!r}")
    if type(order) is not int or order not in (1, 2):
        error = ValueError if type(order) is int else ArgumentTypeError
        raise error(f"{fn}: order must be 1 (Jacobian) or 2 (Hessian); got order={order!r}")
    if layout not in ("tensor", "vec"):
        raise ValueError(f"{fn}: layout must be 'tensor' or 'vec'; got layout={layout!r}")
