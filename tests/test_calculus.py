"""Tests of `linattn_core.maths.calculus` and of every derivative derived in chapter 7.

Each closed form is compared with autograd (or forward mode for differentials) in float64 on
seeded random inputs; the checker itself must pass correct forms and fail wrong ones loudly.
The closed forms of the package, `trace_power_gradient` and `adjugate`, are tested here too;
the Lipschitz constants and step sizes of chapter 7 are in `test_descent.py`.
"""

import math

import pytest
import sympy as sp
import torch

from linattn_core import jacobians
from linattn_core.maths.calculus import (
    GradientCheck,
    adjugate,
    check_differential,
    check_gradient,
    jacobian,
    trace_power_gradient,
)
from linattn_core.maths.linalg import kron, vec
from linattn_core.testing import assert_close

f64 = torch.float64
inv, det, mp = torch.linalg.inv, torch.linalg.det, torch.linalg.matrix_power
tr, norm = torch.trace, torch.linalg.vector_norm
I2, I3, I4, I5 = (torch.eye(n, dtype=f64) for n in (2, 3, 4, 5))  # identity matrices


def positive_entries(*shape, seed=0):
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed), dtype=f64) + 0.5


# ---------------------------------------------------------------------------- the checker


def test_passes_a_correct_gradient_and_prints_one_stable_line():
    result = check_gradient(lambda x: (x**3).sum(), lambda x: 3 * x**2, [(5,)], name="d Σx³/dx")
    assert isinstance(result, GradientCheck)
    assert result.error < 1e-12
    assert str(result) == "✓ d Σx³/dx: relative error < 1e-10"


def test_default_name_mentions_function_and_argument():
    def cube_sum(x):
        return (x**3).sum()

    assert str(check_gradient(cube_sum, lambda x: 3 * x**2, [(2,)])).startswith(
        "✓ d cube_sum/d(input 0)"
    )


def test_fails_loudly_on_a_wrong_closed_form():
    with pytest.raises(AssertionError, match=r"✗ wrong: relative error .* > rtol 1e-10 \(auto"):
        check_gradient(lambda x: (x**3).sum(), lambda x: 2 * x**2, [(5,)], name="wrong")


def test_fails_on_a_transposed_closed_form():
    # The classic layout mistake: d tr(AX)/dX is Aᵀ, not A.
    with pytest.raises(AssertionError, match="relative error"):
        check_gradient(lambda X, A: tr(A @ X), lambda X, A: A, [(3, 3), (3, 3)])


def test_fails_on_a_shape_mismatch_and_names_both_shapes():
    with pytest.raises(AssertionError, match=r"closed form \(4, 3\), autograd \(tensor layout\)"):
        check_gradient(lambda X: (X**2).sum(), lambda X: 2 * X.T, [(3, 4)])


def test_nan_in_the_closed_form_fails():
    with pytest.raises(AssertionError, match="nan"):
        check_gradient(lambda x: x.sum(), lambda x: x * math.nan, [(3,)])


def test_rtol_is_respected():
    nearly = lambda x: 2 * x * (1 + 1e-6)  # noqa: E731
    check_gradient(lambda x: (x**2).sum(), nearly, [(4,)], rtol=1e-5)
    with pytest.raises(AssertionError):
        check_gradient(lambda x: (x**2).sum(), nearly, [(4,)], rtol=1e-8)


def test_seed_makes_the_inputs_reproducible():
    seen = []
    check_gradient(lambda x: x.sum(), lambda x: seen.append(x.clone()) or torch.ones(3), [(3,)])
    check_gradient(lambda x: x.sum(), lambda x: seen.append(x.clone()) or torch.ones(3), [(3,)])
    check_gradient(
        lambda x: x.sum(), lambda x: seen.append(x.clone()) or torch.ones(3), [(3,)], seed=1
    )
    assert torch.equal(seen[0], seen[1]) and not torch.equal(seen[0], seen[2])


def test_wrt_selects_the_argument():
    f = lambda a, b: (a * b).sum()  # noqa: E731
    check_gradient(f, lambda a, b: b, [(3,), (3,)], wrt=0)
    check_gradient(f, lambda a, b: a, [(3,), (3,)], wrt=1)


def test_explicit_inputs_are_used_as_given():
    x = positive_entries(4)
    check_gradient(lambda x: torch.log(x).sum(), lambda x: 1 / x, inputs=(x,))


def test_hessian_of_a_scalar_function():
    check_gradient(lambda x: (x**3).sum(), lambda x: torch.diag(6 * x), [(4,)], order=2)


def test_tensor_layout_of_a_matrix_function_is_fourth_order():
    A, X = torch.randn(2, 3, dtype=f64), torch.randn(3, 4, dtype=f64)
    J = jacobian(lambda X: A @ X, (X,))
    assert J.shape == (2, 4, 3, 4)
    assert_close(J, torch.einsum("ik,jl->ijkl", A, I4), rtol=1e-10)


def test_vec_layout_is_column_stacking():
    A, X = torch.randn(2, 3, dtype=f64), torch.randn(3, 4, dtype=f64)
    J = jacobian(lambda X: A @ X, (X,), layout="vec")
    assert_close(J @ vec(X), vec(A @ X), rtol=1e-10)
    assert_close(J, kron(I4, A), rtol=1e-10)


def test_vec_layout_hessian():
    A = torch.randn(3, 3, dtype=f64)
    X = torch.randn(3, 2, dtype=f64)
    H = jacobian(lambda X: tr(X.T @ A @ X), (X,), order=2, layout="vec")
    assert_close(H, kron(I2, A + A.T), rtol=1e-10)


def test_check_differential_passes_and_fails():
    print(check_differential(lambda X: X @ X, lambda X, dX: dX @ X + X @ dX, [(3, 3)]))
    with pytest.raises(AssertionError, match=r"> rtol 1e-10 \(jvp\)"):
        check_differential(lambda X: X @ X, lambda X, dX: 2 * X @ dX, [(3, 3)])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"f": 3}, TypeError, "f must be callable"),
        ({"closed_form": None}, TypeError, "closed_form must be callable"),
        ({"shapes": None}, ValueError, "exactly one of shapes"),
        ({"inputs": (torch.ones(2, dtype=f64),)}, ValueError, "exactly one of shapes"),
        ({"shapes": []}, ValueError, "non-empty list"),
        ({"shapes": "3"}, TypeError, "non-empty list"),
        ({"shapes": [(2, 0)]}, ValueError, "positive ints"),
        ({"shapes": [(2.0,)]}, TypeError, "positive ints"),
        ({"shapes": None, "inputs": (torch.ones(2),)}, TypeError, r"inputs\[0\] must be a float64"),
        ({"shapes": None, "inputs": ([1.0, 2.0],)}, TypeError, "float64 tensor; got list"),
        ({"wrt": 1}, ValueError, r"wrt must be an int in \[0, 1\)"),
        ({"wrt": "x"}, TypeError, "wrt must be an int"),
        ({"order": 3}, ValueError, "order must be 1"),
        ({"layout": "numerator"}, ValueError, "layout must be 'tensor' or 'vec'"),
        ({"rtol": 0}, ValueError, "rtol must be a positive finite number"),
        ({"rtol": "1e-8"}, TypeError, "rtol must be a positive finite number"),
        ({"seed": 1.5}, TypeError, "seed must be an int"),
    ],
)
def test_bad_arguments_raise_and_name_the_argument(kwargs, error, match):
    arguments = {"f": lambda x: (x**2).sum(), "closed_form": lambda x: 2 * x, "shapes": [(2,)]}
    arguments.update(kwargs)
    f, closed_form = arguments.pop("f"), arguments.pop("closed_form")
    with pytest.raises(error, match=match):
        check_gradient(f, closed_form, **arguments)


def test_bad_outputs_raise():
    with pytest.raises(TypeError, match=r"f must return a torch\.Tensor"):
        check_gradient(lambda x: 1.0, lambda x: x, [(2,)])
    with pytest.raises(TypeError, match="closed form must return a tensor"):
        check_gradient(lambda x: x.sum(), lambda x: [1.0, 1.0], [(2,)])
    with pytest.raises(ValueError, match="order=2 needs a scalar f"):
        check_gradient(lambda x: 2 * x, lambda x: x, [(2,)], order=2)
    with pytest.raises(TypeError, match="differential must be callable"):
        check_differential(lambda x: x, "dx", [(2,)])
    with pytest.raises(ValueError, match="kron: b must be a matrix"):
        kron(torch.ones(2, 2), torch.ones(3))


# ------------------------------------------------------------- layouts and the chain rule


def test_chain_rule_in_both_layouts():
    W1, W2 = torch.randn(5, 4, dtype=f64), torch.randn(3, 5, dtype=f64)
    x = torch.randn(4, dtype=f64)
    inner, outer = (lambda x: torch.tanh(W1 @ x)), (lambda y: torch.sin(W2 @ y))
    J_inner = jacobian(inner, (x,))  # numerator layout (5, 4)
    J_outer = jacobian(outer, (inner(x),))  # (3, 5)
    J = jacobian(lambda x: outer(inner(x)), (x,))
    assert_close(J, J_outer @ J_inner, rtol=1e-10)  # numerator: outer factor on the left
    assert_close(J.T, J_inner.T @ J_outer.T, rtol=1e-10)  # denominator: outer factor on the right


def test_vector_jacobian_product_is_the_transposed_jacobian():
    W = torch.randn(3, 4, dtype=f64)
    x = torch.randn(4, dtype=f64, requires_grad=True)
    g = torch.randn(3, dtype=f64)
    (grad,) = torch.autograd.grad(torch.tanh(W @ x), x, grad_outputs=g)
    assert_close(grad, jacobian(lambda x: torch.tanh(W @ x), (x.detach(),)).T @ g, rtol=1e-10)


# ------------------------------------------------------------------- the derivatives

sigmoid = torch.sigmoid

# (name, f, closed form, shapes, options): every derivative of chapter 7
DERIVATIVES = [
    # gradient and Hessian of quadratic forms
    ("xᵀAx+bᵀx grad", lambda x, A, b: x @ A @ x + b @ x,
     lambda x, A, b: (A + A.T) @ x + b, [(4,), (4, 4), (4,)], {}),
    ("xᵀAx+bᵀx Hessian", lambda x, A, b: x @ A @ x + b @ x,
     lambda x, A, b: A + A.T, [(4,), (4, 4), (4,)], {"order": 2}),
    ("(Ax+b)ᵀ(Cx+d) grad", lambda x, A, b, C, d: (A @ x + b) @ (C @ x + d),
     lambda x, A, b, C, d: (A.T @ C + C.T @ A) @ x + A.T @ d + C.T @ b,
     [(4,), (3, 4), (3,), (3, 4), (3,)], {}),
    ("(Ax+b)ᵀ(Cx+d) Hessian", lambda x, A, b, C, d: (A @ x + b) @ (C @ x + d),
     lambda x, A, b, C, d: A.T @ C + C.T @ A, [(4,), (3, 4), (3,), (3, 4), (3,)], {"order": 2}),
    # norms and normalization
    ("‖x−a‖", lambda x, a: norm(x - a), lambda x, a: (x - a) / norm(x - a), [(4,), (4,)], {}),
    ("x/‖x‖", lambda x: x / norm(x),
     lambda x: (I4 - torch.outer(x, x) / (x @ x)) / norm(x), [(4,)], {}),
    # least squares f = ‖Ax − y‖²
    ("lsq wrt x", lambda x, A, y: norm(A @ x - y) ** 2,
     lambda x, A, y: 2 * A.T @ (A @ x - y), [(3,), (5, 3), (5,)], {"wrt": 0}),
    ("lsq wrt A", lambda x, A, y: norm(A @ x - y) ** 2,
     lambda x, A, y: 2 * torch.outer(A @ x - y, x), [(3,), (5, 3), (5,)], {"wrt": 1}),
    ("lsq wrt y", lambda x, A, y: norm(A @ x - y) ** 2,
     lambda x, A, y: -2 * (A @ x - y), [(3,), (5, 3), (5,)], {"wrt": 2}),
    # the table of common gradients
    ("xᵀx", lambda x: x @ x, lambda x: 2 * x, [(4,)], {}),
    ("‖x‖", lambda x: norm(x), lambda x: x / norm(x), [(4,)], {}),
    ("‖x‖²", lambda x: norm(x) ** 2, lambda x: 2 * x, [(4,)], {}),
    ("xᵀAx", lambda x, A: x @ A @ x, lambda x, A: (A + A.T) @ x, [(4,), (4, 4)], {}),
    ("‖Ax‖", lambda x, A: norm(A @ x), lambda x, A: A.T @ A @ x / norm(A @ x),
     [(3,), (5, 3)], {}),
    ("log(1+exp(aᵀx))", lambda x, a: torch.nn.functional.softplus(a @ x),
     lambda x, a: sigmoid(a @ x) * a, [(4,), (4,)], {}),
    ("−Σ yᵢ log xᵢ", lambda x, y: -(y * torch.log(x)).sum(), lambda x, y: -y / x,
     None, {"inputs": (positive_entries(4), positive_entries(4, seed=1))}),
    # vec / Kronecker derivatives of products
    ("∂vec(AB)/∂vec(A)", lambda A, B: A @ B, lambda A, B: kron(B.T, I3),
     [(3, 4), (4, 2)], {"wrt": 0, "layout": "vec"}),
    ("∂vec(AB)/∂vec(B)", lambda A, B: A @ B, lambda A, B: kron(I2, A),
     [(3, 4), (4, 2)], {"wrt": 1, "layout": "vec"}),
    ("∂vec(ABC)/∂vec(A)", lambda A, B, C: A @ B @ C, lambda A, B, C: kron(C.T @ B.T, I3),
     [(3, 4), (4, 2), (2, 5)], {"wrt": 0, "layout": "vec"}),
    ("∂vec(ABC)/∂vec(B)", lambda A, B, C: A @ B @ C, lambda A, B, C: kron(C.T, A),
     [(3, 4), (4, 2), (2, 5)], {"wrt": 1, "layout": "vec"}),
    ("∂vec(ABC)/∂vec(C)", lambda A, B, C: A @ B @ C, lambda A, B, C: kron(I5, A @ B),
     [(3, 4), (4, 2), (2, 5)], {"wrt": 2, "layout": "vec"}),
    # first-order trace derivatives (gradient layout: the shape of X)
    ("tr(X)", lambda X: tr(X), lambda X: I4, [(4, 4)], {}),
    ("tr(XA)", lambda X, A: tr(X @ A), lambda X, A: A.T, [(3, 4), (4, 3)], {}),
    ("tr(XᵀA)", lambda X, A: tr(X.T @ A), lambda X, A: A, [(3, 4), (3, 4)], {}),
    ("tr(AXᵀ)", lambda X, A: tr(A @ X.T), lambda X, A: A, [(3, 4), (3, 4)], {}),
    ("tr(AXB)", lambda X, A, B: tr(A @ X @ B), lambda X, A, B: A.T @ B.T,
     [(3, 4), (2, 3), (4, 2)], {}),
    ("tr(AXᵀB)", lambda X, A, B: tr(A @ X.T @ B), lambda X, A, B: B @ A,
     [(3, 4), (2, 4), (3, 2)], {}),
    ("tr(A⊗X)", lambda X, A: tr(kron(A, X)), lambda X, A: tr(A) * I3, [(3, 3), (2, 2)], {}),
    # second-order trace derivatives
    ("tr(X²)", lambda X: tr(X @ X), lambda X: 2 * X.T, [(4, 4)], {}),
    ("tr(X²B)", lambda X, B: tr(X @ X @ B), lambda X, B: (X @ B + B @ X).T, [(4, 4), (4, 4)], {}),
    ("tr(XᵀX)", lambda X: tr(X.T @ X), lambda X: 2 * X, [(3, 4)], {}),
    ("tr(XXᵀ)", lambda X: tr(X @ X.T), lambda X: 2 * X, [(3, 4)], {}),
    ("tr(XᵀBX)", lambda X, B: tr(X.T @ B @ X), lambda X, B: B @ X + B.T @ X,
     [(3, 4), (3, 3)], {}),
    ("tr(BXXᵀ)", lambda X, B: tr(B @ X @ X.T), lambda X, B: B @ X + B.T @ X,
     [(3, 4), (3, 3)], {}),
    ("tr(XXᵀB)", lambda X, B: tr(X @ X.T @ B), lambda X, B: B @ X + B.T @ X,
     [(3, 4), (3, 3)], {}),
    ("tr(XBXᵀ)", lambda X, B: tr(X @ B @ X.T), lambda X, B: X @ B.T + X @ B,
     [(3, 4), (4, 4)], {}),
    ("tr(BXᵀX)", lambda X, B: tr(B @ X.T @ X), lambda X, B: X @ B.T + X @ B,
     [(3, 4), (4, 4)], {}),
    ("tr(AXBX)", lambda X, A, B: tr(A @ X @ B @ X),
     lambda X, A, B: A.T @ X.T @ B.T + B.T @ X.T @ A.T, [(3, 4), (4, 3), (4, 3)], {}),
    # the four-term example
    ("tr(BᵀXᵀCXXᵀCXB)", lambda X, B, C: tr(B.T @ X.T @ C @ X @ X.T @ C @ X @ B),
     lambda X, B, C: C @ X @ X.T @ C @ X @ B @ B.T + C.T @ X @ B @ B.T @ X.T @ C.T @ X
     + C @ X @ B @ B.T @ X.T @ C @ X + C.T @ X @ X.T @ C.T @ X @ B @ B.T,
     [(3, 4), (4, 2), (3, 3)], {}),
    # gradients that follow from the determinant differentials
    ("∇det X", lambda X: det(X), lambda X: det(X) * inv(X).T, [(4, 4)], {}),
    ("∇log|det X|", lambda X: torch.linalg.slogdet(X)[1], lambda X: inv(X).T, [(4, 4)], {}),
    ("∇logdet X (SPD)", lambda X: torch.logdet(X), lambda X: inv(X).T,
     None, {"inputs": (I4 + 0.1 * torch.ones(4, 4, dtype=f64),)}),
    # tensors of order 3 and 4, as index formulas (the vector w is the second input)
    ("∂(Xw)/∂X", lambda X, w: X @ w, lambda X, w: torch.einsum("ik,l->ikl", I3, w),
     [(3, 4), (4,)], {}),
    ("∂(xwᵀ)/∂x", lambda x, w: torch.outer(x, w), lambda x, w: torch.einsum("ik,j->ijk", I3, w),
     [(3,), (2,)], {}),
    ("∂(AX)/∂X", lambda X, A: A @ X, lambda X, A: torch.einsum("ik,jl->ijkl", A, I4),
     [(3, 4), (2, 3)], {}),
    # the compact form of the four-term gradient
    ("CX(MD + DM) + CᵀX(DMᵀ + MᵀD)", lambda X, B, C: tr(B.T @ X.T @ C @ X @ X.T @ C @ X @ B),
     lambda X, B, C: C @ X @ (X.T @ C @ X @ B @ B.T + B @ B.T @ X.T @ C @ X)
     + C.T @ X @ (B @ B.T @ X.T @ C.T @ X + X.T @ C.T @ X @ B @ B.T),
     [(3, 4), (4, 2), (3, 3)], {}),
    # the exercises
    ("‖AX − B‖²_F", lambda X, A, B: torch.linalg.matrix_norm(A @ X - B) ** 2,
     lambda X, A, B: 2 * A.T @ (A @ X - B), [(3, 4), (5, 3), (5, 4)], {}),
    ("∇² log(1 + exp(aᵀx))", lambda x, a: torch.nn.functional.softplus(a @ x),
     lambda x, a: sigmoid(a @ x) * (1 - sigmoid(a @ x)) * torch.outer(a, a),
     [(4,), (4,)], {"order": 2}),
    ("tr(AX⁻¹B)", lambda X, A, B: tr(A @ inv(X) @ B), lambda X, A, B: -(inv(X) @ B @ A @ inv(X)).T,
     [(4, 4), (3, 4), (4, 3)], {}),
    ("softmax", lambda z: torch.softmax(z, 0), jacobians.softmax, [(6,)], {}),
    # the worked example
    ("tr(AXBXᵀC)", lambda X, A, B, C: tr(A @ X @ B @ X.T @ C),
     lambda X, A, B, C: C @ A @ X @ B + A.T @ C.T @ X @ B.T,
     [(3, 4), (2, 3), (4, 4), (3, 2)], {}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("f", "closed_form", "shapes", "options"),
    [case[1:] for case in DERIVATIVES],
    ids=[case[0] for case in DERIVATIVES],
)
def test_derivative(f, closed_form, shapes, options):
    check_gradient(f, closed_form, shapes, **options)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_trace_of_a_power(k):
    check_gradient(lambda X: tr(mp(X, k)), lambda X: k * mp(X, k - 1).T, [(4, 4)])
    check_gradient(
        lambda X, A: tr(A @ mp(X, k)), lambda X, A: trace_power_gradient(X, A, k), [(4, 4), (4, 4)]
    )


def test_trace_of_a_power_is_the_special_case_a_equals_identity():
    X = torch.randn(4, 4, dtype=f64)
    assert_close(trace_power_gradient(X, I4, 3), 3 * mp(X, 2).T, rtol=1e-10)


# (name, F, dF, shapes): the differential rules, checked in all inputs at once
DIFFERENTIALS = [
    ("product", lambda X, Y: X @ Y, lambda X, Y, dX, dY: dX @ Y + X @ dY, [(3, 4), (4, 2)]),
    ("Hadamard", lambda X, Y: X * Y, lambda X, Y, dX, dY: dX * Y + X * dY, [(3, 4), (3, 4)]),
    ("Kronecker", kron, lambda X, Y, dX, dY: kron(dX, Y) + kron(X, dY), [(2, 3), (3, 2)]),
    ("transpose", lambda X: X.T, lambda X, dX: dX.T, [(3, 4)]),
    ("trace", lambda X: tr(X), lambda X, dX: tr(dX), [(4, 4)]),
    ("inverse", inv, lambda X, dX: -inv(X) @ dX @ inv(X), [(4, 4)]),
    ("det (adjugate)", det, lambda X, dX: tr(adjugate(X) @ dX), [(4, 4)]),
    ("det (inverse)", det, lambda X, dX: det(X) * tr(inv(X) @ dX), [(4, 4)]),
    ("log|det|", lambda X: torch.linalg.slogdet(X)[1], lambda X, dX: tr(inv(X) @ dX), [(4, 4)]),
    ("‖x‖", norm, lambda x, dx: x @ dx / norm(x), [(4,)]),
    ("xᵀy", lambda x, y: x @ y, lambda x, y, dx, dy: dx @ y + x @ dy, [(4,), (4,)]),
    ("quotient", lambda x, y: x.sum() / (y @ y),
     lambda x, y, dx, dy: (dx.sum() * (y @ y) - x.sum() * 2 * (y @ dy)) / (y @ y) ** 2,
     [(4,), (4,)]),
    ("tr(AXBXᵀC)", lambda X, A, B, C: tr(A @ X @ B @ X.T @ C),
     lambda X, A, B, C, dX, dA, dB, dC: tr(A @ dX @ B @ X.T @ C + A @ X @ B @ dX.T @ C
                                          + dA @ X @ B @ X.T @ C + A @ X @ dB @ X.T @ C
                                          + A @ X @ B @ X.T @ dC),
     [(3, 4), (2, 3), (4, 4), (3, 2)]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("F", "dF", "shapes"), [case[1:] for case in DIFFERENTIALS], ids=[c[0] for c in DIFFERENTIALS]
)
def test_differential(F, dF, shapes):
    check_differential(F, dF, shapes)


def test_det_differential_holds_at_a_singular_matrix():
    # tr(adj(X) dX) needs no inverse: at a rank-(n−1) matrix det = 0 but its derivative is not.
    # (Seeded: where LU finds an exactly zero pivot, torch's own jvp of det returns 0.)
    g = torch.Generator().manual_seed(0)
    X = torch.randn(4, 3, dtype=f64, generator=g) @ torch.randn(3, 4, dtype=f64, generator=g)
    check_differential(det, lambda X, dX: tr(adjugate(X) @ dX), inputs=(X,), rtol=1e-8)
    assert adjugate(X).norm() > 1e-3


def test_adjugate_times_matrix_is_det_times_identity_batched():
    X = torch.randn(2, 3, 5, 5, dtype=f64, generator=torch.Generator().manual_seed(1))
    adj = adjugate(X)
    assert adj.shape == (2, 3, 5, 5)
    assert torch.allclose(X @ adj, det(X)[..., None, None] * I5, atol=1e-12)
    assert torch.allclose(adj, det(X)[..., None, None] * inv(X), atol=1e-12)
    assert torch.equal(adjugate(torch.tensor([[7.0]])), torch.tensor([[1.0]]))  # n = 1


def test_adjugate_of_a_rank_deficient_matrix():
    g = torch.Generator().manual_seed(2)
    X = torch.randn(4, 2, dtype=f64, generator=g) @ torch.randn(2, 4, dtype=f64, generator=g)
    assert torch.linalg.matrix_rank(X) == 2  # rank n − 2: every minor is singular, adj(X) = 0
    assert adjugate(X).abs().max() < 1e-12
    check_gradient(det, lambda X: adjugate(X).T, [(4, 4)])  # Jacobi: ∇ det X = adj(X)ᵀ


def test_bad_arguments_of_the_closed_forms():
    X = torch.ones(3, 3, dtype=f64)
    cases = [
        (ValueError, "adjugate: X must be square", lambda: adjugate(X[:2])),
        (ValueError, "adjugate: X must have at least 2", lambda: adjugate(X[0])),
        (TypeError, "adjugate: X must be a floating", lambda: adjugate(X.long())),
        (
            ValueError,
            "trace_power_gradient: X must be square",
            lambda: trace_power_gradient(X[:2], X, 2),
        ),
        (
            ValueError,
            "trace_power_gradient: A must have the shape",
            lambda: trace_power_gradient(X, X[:2], 2),
        ),
        (
            ValueError,
            "trace_power_gradient: k must be a positive int",
            lambda: trace_power_gradient(X, X, 0),
        ),
    ]
    for error, message, call in cases:
        with pytest.raises(error, match=message):
            call()


def test_log_det_rule_with_negative_determinant():
    X = torch.randn(4, 4, dtype=f64, generator=torch.Generator().manual_seed(4))
    X = X if det(X) < 0 else X[[1, 0, 2, 3]]
    assert det(X) < 0
    check_differential(
        lambda X: torch.linalg.slogdet(X).logabsdet, lambda X, dX: tr(inv(X) @ dX), inputs=(X,)
    )


def test_differential_is_the_linear_part_of_the_increment():
    g = torch.Generator().manual_seed(5)
    X = torch.randn(4, 4, dtype=f64, generator=g) + 4 * I4
    E = torch.randn(4, 4, dtype=f64, generator=g)
    steps = torch.logspace(-2, -4, 3, dtype=f64)
    gaps = torch.stack(
        [(inv(X + s * E) - inv(X) + inv(X) @ (s * E) @ inv(X)).norm() for s in steps]
    )
    slopes = torch.diff(gaps.log()) / torch.diff(steps.log())
    assert torch.allclose(slopes, torch.full_like(slopes, 2.0), atol=0.02)


def test_row_major_jacobian_swaps_the_kronecker_factors():
    A, X, B = (torch.randn(s, dtype=f64) for s in [(2, 3), (3, 4), (4, 5)])
    J_rows = jacobian(lambda X: A @ X @ B, (X,)).reshape(10, 12)
    assert_close(J_rows, kron(A, B.T), rtol=1e-10)


def test_normal_equations_square_the_condition_number():
    g = torch.Generator().manual_seed(6)
    U, _ = torch.linalg.qr(torch.randn(30, 6, dtype=f64, generator=g))
    V, _ = torch.linalg.qr(torch.randn(6, 6, dtype=f64, generator=g))
    A = U @ torch.diag(torch.logspace(0, -6, 6, dtype=f64)) @ V.T
    assert math.isclose(torch.linalg.cond(A.T @ A), torch.linalg.cond(A) ** 2, rel_tol=1e-3)
    x = torch.randn(6, dtype=f64, generator=g)
    y = A @ x
    x_normal = torch.linalg.solve(A.T @ A, A.T @ y)
    x_qr = torch.linalg.lstsq(A, y.unsqueeze(1)).solution.squeeze(1)
    assert norm(x_normal - x) / norm(x) > 1e-8 > norm(x_qr - x) / norm(x)


def test_sympy_jacobi_formula_and_quadratic_form():
    X = sp.Matrix(3, 3, lambda i, j: sp.Symbol(f"x{i}{j}"))
    gradient = sp.Matrix(3, 3, lambda i, j: sp.diff(X.det(), X[i, j]))
    assert sp.simplify(gradient - X.adjugate().T) == sp.zeros(3, 3)
    A = sp.Matrix(3, 3, lambda i, j: sp.Symbol(f"a{i}{j}"))
    b = sp.Matrix(3, 1, lambda i, _: sp.Symbol(f"b{i}"))
    x = sp.Matrix(3, 1, lambda i, _: sp.Symbol(f"v{i}"))
    f = (x.T * A * x + b.T * x)[0]
    assert sp.expand(sp.Matrix([f]).jacobian(x).T - ((A + A.T) * x + b)) == sp.zeros(3, 1)
    assert sp.expand(sp.hessian(f, x) - (A + A.T)) == sp.zeros(3, 3)


def test_sympy_scalar_rules():
    x, a = sp.symbols("x a", positive=True)
    f, g = sp.Function("f")(x), sp.Function("g")(x)
    rules = [
        (sp.diff(f * g, x), sp.diff(f, x) * g + f * sp.diff(g, x)),
        (sp.diff(f / g, x), (sp.diff(f, x) * g - f * sp.diff(g, x)) / g**2),
        (sp.diff(sp.sec(x), x), sp.sec(x) * sp.tan(x)),
        (sp.diff(sp.csc(x), x), -sp.csc(x) * sp.cot(x)),
        (sp.diff(sp.cot(x), x), -(sp.csc(x) ** 2)),
        (sp.diff(sp.acos(x), x), -1 / sp.sqrt(1 - x**2)),
        (sp.diff(a**x, x), a**x * sp.log(a)),
        (sp.diff(sp.log(x, a), x), 1 / (x * sp.log(a))),
        (sp.diff(sp.atan(f), x), sp.diff(f, x) / (1 + f**2)),
    ]
    assert all(sp.simplify(lhs - rhs) == 0 for lhs, rhs in rules)
