"""Tests of `linattn_core.jacobians` and of the other formulas of chapter 8.

Every closed-form Jacobian is compared with autograd (`linattn_core.maths.calculus`) in float64 on
seeded inputs of odd sizes, with batch dimensions where the function takes them; bad inputs
must raise errors that name the argument. Chapter 8's other checkable claims that use
`linattn_core.maths.linalg` (the commutation matrix, the forms of RoPE) are here for now.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from linattn_core import jacobians, softmax_attention
from linattn_core.maths import linalg
from linattn_core.maths.calculus import check_gradient, jacobian
from linattn_core.maths.linalg import kron
from linattn_core.testing import assert_close, relative_error

f64 = torch.float64
RTOL = 1e-10


def batched_jacobian(f, x):
    """Autograd Jacobian of a vector function applied to every row of x `(..., d)`."""
    flat = x.reshape(-1, x.shape[-1])
    result = torch.stack([jacobian(f, (row,)) for row in flat])
    return result.reshape(*x.shape[:-1], *result.shape[-2:])


# ---------------------------------------------------------------------------- softmax


@pytest.mark.parametrize("n", [1, 2, 7])
def test_softmax_matches_autograd(n):
    check_gradient(lambda x: x.softmax(-1), jacobians.softmax, [(n,)], rtol=RTOL)


def test_softmax_batched_symmetric_rows_sum_to_zero():
    x = torch.randn(2, 3, 5, dtype=f64, generator=torch.Generator().manual_seed(0))
    J = jacobians.softmax(x)
    assert J.shape == (2, 3, 5, 5)
    assert_close(J, batched_jacobian(lambda v: v.softmax(-1), x), rtol=RTOL)
    assert torch.equal(J, J.mT)
    assert J.sum(-1).abs().max() < 1e-15


def test_softmax_jacobian_vanishes_when_saturated():
    x = torch.randn(6, dtype=f64, generator=torch.Generator().manual_seed(0))
    norms = [float(torch.linalg.matrix_norm(jacobians.softmax(t * x), ord=2)) for t in (1, 30)]
    assert norms[1] < 1e-6 * norms[0]


def test_softmax_cross_entropy_gradient_is_p_minus_y():
    y = F.one_hot(torch.tensor(3), 7).to(f64)
    check_gradient(
        lambda x: -(y * x.log_softmax(-1)).sum(), lambda x: x.softmax(-1) - y, [(7,)], rtol=RTOL
    )


# ---------------------------------------------------------------------------- normalizations


@pytest.mark.parametrize("eps", [1e-5, 0.3])
@pytest.mark.parametrize("d", [2, 7])
def test_layernorm_matches_torch_layer_norm(d, eps):
    check_gradient(
        lambda x, g, b: F.layer_norm(x, (d,), g, b, eps),
        lambda x, g, b: jacobians.layernorm(x, g, eps),
        [(d,), (d,), (d,)],
        rtol=RTOL,
    )


def test_layernorm_gain_and_bias_jacobians():
    def ln(x, g, b):
        return F.layer_norm(x, (7,), g, b, 0.1)

    shapes = [(7,), (7,), (7,)]
    check_gradient(ln, lambda x, g, b: jacobians.layernorm_gamma(x, 0.1), shapes, wrt=1)
    check_gradient(ln, lambda x, g, b: torch.eye(7, dtype=f64), shapes, wrt=2)


def test_layernorm_gain_jacobian_is_not_the_projection():
    # ∂LN/∂γ is Diag(x̂), not the diagonal of the projection I − yyᵀ/s² (a slip chapter 8 corrects)
    g = torch.Generator().manual_seed(0)
    x, gamma, eps = torch.randn(7, dtype=f64, generator=g), torch.randn(7, dtype=f64), 0.1
    y = x - x.mean()
    s2 = y @ y + 7 * eps
    projection = torch.diag(torch.diagonal(torch.eye(7, dtype=f64) - torch.outer(y, y) / s2))
    with pytest.raises(AssertionError):
        check_gradient(
            lambda g: F.layer_norm(x, (7,), g, None, eps), lambda g: projection, inputs=(gamma,)
        )


def test_layernorm_batched_and_the_form_with_eps_inside_the_norm():
    g = torch.Generator().manual_seed(0)
    x, gamma = torch.randn(3, 4, 5, dtype=f64, generator=g), torch.randn(5, dtype=f64, generator=g)
    J = jacobians.layernorm(x, gamma)
    expected = batched_jacobian(lambda v: F.layer_norm(v, (5,), gamma, None, 1e-5), x)
    assert_close(J, expected, rtol=RTOL)
    # LN(x) = γ ⊙ √d y/√(‖y‖² + ε), chapter 8's form, is torch's layer_norm with ε = d·eps
    y = x[0, 0] - x[0, 0].mean()
    with_eps_inside = gamma * math.sqrt(5) * y / torch.sqrt(y @ y + 5 * 1e-5)
    assert_close(with_eps_inside, F.layer_norm(x[0, 0], (5,), gamma, None, 1e-5), rtol=RTOL)


@pytest.mark.parametrize(("d", "eps"), [(1, 0.5), (6, 1e-6)])
def test_rmsnorm_matches_torch_rms_norm(d, eps):
    check_gradient(
        lambda x, g: F.rms_norm(x, (d,), g, eps),
        lambda x, g: jacobians.rmsnorm(x, g, eps),
        [(d,), (d,)],
        rtol=RTOL,
    )


def test_rmsnorm_batched_and_gain_on_the_left():
    g = torch.Generator().manual_seed(0)
    x, gamma = torch.randn(2, 3, 5, dtype=f64, generator=g), torch.randn(5, dtype=f64, generator=g)
    J = jacobians.rmsnorm(x, gamma, eps=0.2)
    assert_close(J, batched_jacobian(lambda v: F.rms_norm(v, (5,), gamma, 0.2), x), rtol=RTOL)
    # Diag(γ) on the right gives the transpose: wrong unless γ is constant
    assert relative_error(J[0, 0].mT, J[0, 0]) > 0.1


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.3])
def test_stablenorm_matches_its_definition(alpha):
    def stable(x, g):
        return g * x.shape[-1] ** alpha * x / torch.sqrt(x @ x + 0.01)

    check_gradient(
        stable, lambda x, g: jacobians.stablenorm(x, g, alpha, eps=0.01), [(5,), (5,)], rtol=RTOL
    )


def test_stablenorm_with_half_is_rmsnorm():
    g = torch.Generator().manual_seed(0)
    x, gamma = torch.randn(4, 6, dtype=f64, generator=g), torch.randn(6, dtype=f64, generator=g)
    assert_close(
        jacobians.stablenorm(x, gamma, 0.5, eps=6 * 1e-3),
        jacobians.rmsnorm(x, gamma, eps=1e-3),
        rtol=RTOL,
    )


def test_l2norm_matches_its_definition_batched():
    x = torch.randn(3, 5, dtype=f64, generator=torch.Generator().manual_seed(0))
    expected = batched_jacobian(lambda v: v / torch.sqrt(v @ v + 1e-6), x)
    assert_close(jacobians.l2norm(x), expected, rtol=RTOL)
    assert jacobians.l2norm(x).shape == (3, 5, 5)


# ---------------------------------------------------------------------------- feed-forward


@pytest.mark.parametrize("with_bias", [False, True])
def test_relu_ffn_matches_autograd(with_bias):
    g = torch.Generator().manual_seed(1)
    W1, W2, b1 = (torch.randn(*s, dtype=f64, generator=g) for s in [(11, 5), (3, 11), (11,)])
    bias = b1 if with_bias else None

    def relu_network(x):
        h = x @ W1.T + (b1 if with_bias else 0)
        return torch.relu(h) @ W2.T

    check_gradient(relu_network, lambda x: jacobians.relu_ffn(x, W1, W2, bias), [(5,)], rtol=RTOL)
    x = torch.randn(2, 4, 5, dtype=f64, generator=g)
    assert_close(jacobians.relu_ffn(x, W1, W2, bias), batched_jacobian(relu_network, x), rtol=RTOL)


def test_swiglu_matches_autograd_and_a_doubled_sigmoid_factor_fails():
    g = torch.Generator().manual_seed(1)
    W1, W2, W3 = (torch.randn(*s, dtype=f64, generator=g) for s in [(9, 5), (9, 5), (4, 9)])

    def swiglu_network(x):
        return (x @ W1.T * F.silu(x @ W2.T)) @ W3.T

    check_gradient(swiglu_network, lambda x: jacobians.swiglu(x, W1, W2, W3), [(5,)], rtol=RTOL)
    x = torch.randn(3, 5, dtype=f64, generator=g)
    assert_close(jacobians.swiglu(x, W1, W2, W3), batched_jacobian(swiglu_network, x), rtol=RTOL)

    def with_wrong_silu_slope(x):  # σ + v σ'(1 − σ) with σ' = σ(1 − σ): (1 − σ) once too often
        u, v = W1 @ x, W2 @ x
        s = torch.sigmoid(v)
        slope = s + v * s * (1 - s) * (1 - s)
        return W3 @ (torch.diag(F.silu(v)) @ W1 + torch.diag(u * slope) @ W2)

    with pytest.raises(AssertionError):
        check_gradient(swiglu_network, with_wrong_silu_slope, [(5,)])


def test_residual_adds_the_identity():
    W = torch.randn(5, 5, dtype=f64, generator=torch.Generator().manual_seed(1))
    check_gradient(
        lambda x: x + torch.tanh(W @ x),
        lambda x: torch.eye(5, dtype=f64) + torch.diag(1 - torch.tanh(W @ x) ** 2) @ W,
        [(5,)],
    )


# ---------------------------------------------------------------------------- self-attention


def test_column_softmax_matches_autograd():
    check_gradient(
        lambda P: P.softmax(0), jacobians.column_softmax, [(5, 3)], layout="vec", rtol=RTOL
    )
    P = torch.randn(2, 4, 3, dtype=f64, generator=torch.Generator().manual_seed(0))
    assert_close(jacobians.column_softmax(P)[1], jacobians.column_softmax(P[1]), rtol=RTOL)


ATTENTION_SHAPES = [(5, 7, 3, 4), (4, 1, 2, 4), (3, 6, 3, 2)]  # (d, n, d_q, d_v)


@pytest.mark.parametrize(("d", "n", "d_q", "d_v"), ATTENTION_SHAPES)
def test_attention_logits_and_the_other_vec_derivatives_of_p(d, n, d_q, d_v):
    shapes = [(d, n), (d_q, d), (d_q, d)]

    def scores(X, Wq, Wk):  # P = Xᵀ Wqᵀ Wk X
        return X.T @ Wq.T @ Wk @ X

    check_gradient(scores, jacobians.attention_logits, shapes, layout="vec", rtol=RTOL)
    check_gradient(
        lambda Wq, Wk, X: scores(X, Wq, Wk),
        lambda Wq, Wk, X: kron(X.T @ Wk.T, X.T) @ linalg.commutation_matrix(d_q, d),
        [(d_q, d), (d_q, d), (d, n)],
        layout="vec",
        rtol=RTOL,
    )
    check_gradient(
        lambda Wk, Wq, X: scores(X, Wq, Wk),
        lambda Wk, Wq, X: kron(X.T, (Wq @ X).T),
        [(d_q, d), (d_q, d), (d, n)],
        layout="vec",
        rtol=RTOL,
    )
    check_gradient(
        lambda M, X: X.T @ M @ X, lambda M, X: kron(X.T, X.T), [(d, d), (d, n)], layout="vec"
    )


def attention_columns(X, Wq, Wk, Wv):
    """Self-attention in the column layout: Y = Wv X A, A = softmax over the first index."""
    P = X.T @ Wq.T @ Wk @ X  # (n, n)
    return Wv @ X @ (P / math.sqrt(Wq.shape[0])).softmax(dim=0)


def column_layout_inputs(d, n, d_q, d_v, seed=0):
    """Seeded X `(d, n)`, Wq and Wk `(d_q, d)`, Wv `(d_v, d)` in float64."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(d, n), (d_q, d), (d_q, d), (d_v, d)]
    return tuple(torch.randn(*s, dtype=f64, generator=g) for s in shapes)


@pytest.mark.parametrize(("d", "n", "d_q", "d_v"), ATTENTION_SHAPES)
def test_self_attention_matches_autograd(d, n, d_q, d_v):
    check_gradient(
        attention_columns,
        jacobians.self_attention,
        [(d, n), (d_q, d), (d_q, d), (d_v, d)],
        layout="vec",
        rtol=RTOL,
    )


def test_self_attention_batched():
    _, Wq, Wk, Wv = column_layout_inputs(5, 4, 3, 2, seed=1)
    X = torch.randn(2, 3, 5, 4, dtype=f64, generator=torch.Generator().manual_seed(0))
    J = jacobians.self_attention(X, Wq, Wk, Wv)
    assert J.shape == (2, 3, 2 * 4, 5 * 4)
    for index in [(0, 0), (1, 2)]:
        expected = jacobian(lambda x: attention_columns(x, Wq, Wk, Wv), (X[index],), layout="vec")
        assert_close(J[index], expected, rtol=RTOL)


def test_column_form_is_row_attention_with_queries_from_wk():
    X, Wq, Wk, Wv = column_layout_inputs(5, 6, 3, 4)
    rows = softmax_attention((Wk @ X).T, (Wq @ X).T, (Wv @ X).T)  # (n, d_v)
    assert_close(attention_columns(X, Wq, Wk, Wv).T, rows, rtol=RTOL)


def test_self_attention_jacobian_vanishes_along_the_softmax_path_when_saturated():
    X, Wq, Wk, Wv = column_layout_inputs(4, 5, 4, 4)
    J = jacobians.self_attention(1e3 * X, Wq, Wk, Wv)
    A = ((1e6 * X.T @ Wq.T @ Wk @ X) / 2).softmax(dim=0)
    assert_close(J, kron(A.T, Wv), rtol=1e-12)  # only the value path survives


def test_self_attention_bound_holds_and_is_batched():
    g = torch.Generator().manual_seed(2)
    _, Wq, Wk, Wv = column_layout_inputs(5, 6, 3, 4, seed=3)
    X = torch.randn(20, 5, 6, dtype=f64, generator=g) * 3 * torch.rand(20, 1, 1, dtype=f64)
    bounds = jacobians.self_attention_bound(X, Wq, Wk, Wv)
    assert bounds.shape == (20,)
    norms = torch.linalg.matrix_norm(jacobians.self_attention(X, Wq, Wk, Wv), ord=2)
    assert (norms <= bounds).all()
    assert bounds[3] == jacobians.self_attention_bound(X[3], Wq, Wk, Wv)


def test_self_attention_bound_at_zero_tokens_is_the_value_term():
    # at X = 0 the logits vanish, A = 11ᵀ/n and the Jacobian is Aᵀ ⊗ Wv, of norm ‖Wv‖₂ ≤ √n ‖Wv‖₂
    _, Wq, Wk, Wv = column_layout_inputs(3, 4, 2, 3)
    X = torch.zeros(3, 4, dtype=f64)
    norm_v = torch.linalg.matrix_norm(Wv, ord=2)
    assert_close(jacobians.self_attention_bound(X, Wq, Wk, Wv), 2 * norm_v, rtol=1e-14)
    assert_close(
        torch.linalg.matrix_norm(jacobians.self_attention(X, Wq, Wk, Wv), ord=2), norm_v, rtol=1e-12
    )


# ---------------------------------------------------------------------------- attention blocks


def layernorm_columns(X, gamma, beta=None, eps=1e-5):
    """LayerNorm of every token (column) of X `(d, n)`, with torch's layer_norm."""
    return F.layer_norm(X.T, (X.shape[0],), gamma, beta, eps).T


BLOCKS = {  # f(X) for each placement of LayerNorm around self-attention
    "pre": lambda X, Wq, Wk, Wv, g, b: (
        X + attention_columns(layernorm_columns(X, g, b), Wq, Wk, Wv)
    ),
    "post": lambda X, Wq, Wk, Wv, g, b: layernorm_columns(
        X + attention_columns(X, Wq, Wk, Wv), g, b
    ),
    "branch": lambda X, Wq, Wk, Wv, g, b: (
        X + layernorm_columns(attention_columns(X, Wq, Wk, Wv), g, b)
    ),
}


@pytest.mark.parametrize(("d", "n"), [(5, 4), (3, 1), (6, 7)])
def test_layernorm_tokens_is_block_diagonal_and_matches_autograd(d, n):
    g = torch.Generator().manual_seed(d + n)
    X, gamma = torch.randn(d, n, dtype=f64, generator=g), torch.randn(d, dtype=f64, generator=g)
    J = jacobians.layernorm_tokens(X, gamma, eps=0.01)
    assert_close(
        J, jacobian(lambda X: layernorm_columns(X, gamma, eps=0.01), (X,), layout="vec"), rtol=RTOL
    )
    batched = jacobians.layernorm_tokens(torch.stack([X, 2 * X]), gamma, eps=0.01)
    assert batched.shape == (2, d * n, d * n)
    assert_close(batched[0], J, rtol=1e-14)


@pytest.mark.parametrize("d", [3, 8])
def test_layernorm_jacobian_norm_is_gain_over_standard_deviation(d):
    # ‖J_LN(x)‖₂ ≤ ‖γ‖∞/√(var(x) + eps), with equality for a constant gain when d ≥ 3
    g = torch.Generator().manual_seed(d)
    x, gamma = torch.randn(4, d, dtype=f64, generator=g), torch.randn(d, dtype=f64, generator=g)
    bound = gamma.abs().max() / (x.var(dim=-1, unbiased=False) + 1e-5).sqrt()
    assert (torch.linalg.matrix_norm(jacobians.layernorm(x, gamma), ord=2) <= bound).all()
    constant = torch.full((d,), -1.5, dtype=f64)
    assert_close(
        torch.linalg.matrix_norm(jacobians.layernorm(x, constant), ord=2),
        1.5 / (x.var(dim=-1, unbiased=False) + 1e-5).sqrt(),
        rtol=1e-12,
    )


@pytest.mark.parametrize("placement", ["pre", "post", "branch"])
@pytest.mark.parametrize(("d", "n", "d_q"), [(5, 4, 3), (4, 1, 2), (6, 5, 6)])
def test_attention_block_matches_autograd(placement, d, n, d_q):
    g = torch.Generator().manual_seed(d * n + d_q)
    shapes = [(d, n), (d_q, d), (d_q, d), (d, d), (d,), (d,)]
    X, Wq, Wk, Wv, gamma, beta = (torch.randn(*s, dtype=f64, generator=g) for s in shapes)
    expected = jacobian(lambda X: BLOCKS[placement](X, Wq, Wk, Wv, gamma, beta), (X,), layout="vec")
    J = jacobians.attention_block(X, Wq, Wk, Wv, gamma, placement, beta)
    assert_close(J, expected, rtol=RTOL)


@pytest.mark.parametrize("placement", ["pre", "post", "branch"])
def test_attention_block_batched_and_its_bound_holds(placement):
    g = torch.Generator().manual_seed(4)
    _, Wq, Wk, Wv = column_layout_inputs(5, 6, 3, 5, seed=5)
    gamma = torch.randn(5, dtype=f64, generator=g)
    X = torch.randn(12, 5, 6, dtype=f64, generator=g) * 4 * torch.rand(12, 1, 1, dtype=f64)
    J = jacobians.attention_block(X, Wq, Wk, Wv, gamma, placement)
    assert J.shape == (12, 30, 30)
    assert_close(J[7], jacobians.attention_block(X[7], Wq, Wk, Wv, gamma, placement), rtol=1e-12)
    bounds = jacobians.attention_block_bound(X, Wq, Wk, Wv, gamma, placement)
    assert bounds.shape == (12,)
    assert (torch.linalg.matrix_norm(J, ord=2) <= bounds).all()


def test_pre_ln_branch_falls_like_one_over_the_token_norm():
    # LN(tX) = LN(X) up to eps and J_LN(tX) = J_LN(X)/t: the branch of x + SA(LN(x)) shrinks
    X, Wq, Wk, Wv = column_layout_inputs(4, 5, 4, 4, seed=6)
    gamma, eye = torch.ones(4, dtype=f64), torch.eye(20, dtype=f64)
    branch = [
        jacobians.attention_block(t * X, Wq, Wk, Wv, gamma, "pre", eps=0.0) - eye for t in (1, 10)
    ]
    assert_close(10 * branch[1], branch[0], rtol=1e-12)


# ---------------------------------------------------------------------------- QK-norm


def normalized_logit(xi, xj, Wq, Wk, gq, gk, eps=1e-6):
    """P_ij = RMSN(Wq xi)·RMSN(Wk xj)/√d₁, with torch's rms_norm."""
    d1 = Wq.shape[0]
    q, k = F.rms_norm(Wq @ xi, (d1,), gq, eps), F.rms_norm(Wk @ xj, (d1,), gk, eps)
    return q @ k / math.sqrt(d1)


@pytest.mark.parametrize("d1", [1, 4])
def test_qknorm_logit_matches_autograd_batched(d1):
    shapes = [(3, d1), (3, d1), (d1,), (d1,)]

    def summed_logits(q, k, gq, gk):  # one logit per row; the rows are independent: sum them
        q, k = F.rms_norm(q, (d1,), gq, 0.1), F.rms_norm(k, (d1,), gk, 0.1)
        return (q * k).sum(-1).div(math.sqrt(d1)).sum()

    check_gradient(
        summed_logits, lambda q, k, gq, gk: jacobians.qknorm_logit(q, k, gq, gk, 0.1), shapes
    )


@pytest.mark.parametrize("d1", [3, 6, 8])  # head width d₁ below, equal to and above d = 6
def test_qknorm_logit_gradients_by_tokens_and_weights(d1):
    shapes = [(6,), (6,), (d1, 6), (d1, 6), (d1,), (d1,)]
    by_q = jacobians.qknorm_logit
    cases = [  # (wrt, closed form): the chain rule through q = Wq xi and k = Wk xj
        (0, lambda xi, xj, Wq, Wk, gq, gk: Wq.T @ by_q(Wq @ xi, Wk @ xj, gq, gk)),
        (1, lambda xi, xj, Wq, Wk, gq, gk: Wk.T @ by_q(Wk @ xj, Wq @ xi, gk, gq)),
        (2, lambda xi, xj, Wq, Wk, gq, gk: torch.outer(by_q(Wq @ xi, Wk @ xj, gq, gk), xi)),
        (3, lambda xi, xj, Wq, Wk, gq, gk: torch.outer(by_q(Wk @ xj, Wq @ xi, gk, gq), xj)),
    ]
    for wrt, closed_form in cases:
        check_gradient(normalized_logit, closed_form, shapes, wrt=wrt, rtol=RTOL)


def test_qknorm_prefactor_is_the_head_width_not_the_model_width():
    shapes = [(6,), (6,), (3, 6), (3, 6), (3,), (3,)]
    with pytest.raises(AssertionError):  # √d = √6 in place of √d₁ = √3
        check_gradient(
            normalized_logit,
            lambda xi, xj, Wq, Wk, gq, gk: (
                math.sqrt(6 / 3) * Wq.T @ jacobians.qknorm_logit(Wq @ xi, Wk @ xj, gq, gk)
            ),
            shapes,
        )


def test_qknorm_diagonal_logit_gradient_has_both_terms():
    g = torch.Generator().manual_seed(0)
    shapes = [(5,), (4, 5), (4, 5), (4,), (4,)]
    xi, Wq, Wk, gq, gk = (torch.randn(*s, dtype=f64, generator=g) for s in shapes)
    by_q = jacobians.qknorm_logit
    both = Wq.T @ by_q(Wq @ xi, Wk @ xi, gq, gk) + Wk.T @ by_q(Wk @ xi, Wq @ xi, gk, gq)
    check_gradient(lambda x: normalized_logit(x, x, Wq, Wk, gq, gk), lambda x: both, inputs=(xi,))


def test_qknorm_logits_are_bounded_whatever_the_weight_scale():
    g = torch.Generator().manual_seed(0)
    xi, xj, Wq, Wk = (torch.randn(*s, dtype=f64, generator=g) for s in [(6,), (6,), (4, 6), (4, 6)])
    ones = torch.ones(4, dtype=f64)
    for scale in (1.0, 1e3, 1e6):
        assert abs(normalized_logit(xi, xj, scale * Wq, scale * Wk, ones, ones)) <= math.sqrt(4)


# ---------------------------------------------------------------------------- bad inputs


def test_bad_inputs_name_the_argument():
    J, x, g = jacobians, torch.ones(4, dtype=f64), torch.ones(4, dtype=f64)
    W, X = torch.ones(3, 4, dtype=f64), torch.ones(4, 2, dtype=f64)
    cases = [
        (TypeError, "softmax: x must be a torch.Tensor", lambda: J.softmax([1.0])),
        (TypeError, "softmax: x must be a floating", lambda: J.softmax(torch.ones(3, 2).long())),
        (ValueError, "layernorm: gamma must have shape", lambda: J.layernorm(x, g[:3])),
        (
            TypeError,
            "layernorm: gamma must have the same dtype as x",
            lambda: J.layernorm(x, g.float()),
        ),
        (ValueError, "layernorm: eps", lambda: J.layernorm(x, g, eps=-1.0)),
        (ValueError, "rmsnorm: x must have at least 1", lambda: J.rmsnorm(x[0], g)),
        (ValueError, "stablenorm: alpha", lambda: J.stablenorm(x, g, True)),
        (ValueError, "l2norm: eps", lambda: J.l2norm(x, eps=float("nan"))),
        (ValueError, "relu_ffn: W1 must have shape", lambda: J.relu_ffn(x, W.T, W)),
        (ValueError, "relu_ffn: b1 must have shape", lambda: J.relu_ffn(x, W, W.T, x)),
        (ValueError, "swiglu: W2 must have shape", lambda: J.swiglu(x, W, W[:2], W.T)),
        (ValueError, "commutation_matrix: m", lambda: linalg.commutation_matrix(0, 3)),
        (ValueError, "column_softmax: P must have at least 2", lambda: J.column_softmax(x)),
        (ValueError, "self_attention: X must have at", lambda: J.self_attention(x, W, W, W)),
        (ValueError, "self_attention: Wk must have", lambda: J.self_attention(X, W, W[:2], W)),
        (ValueError, "self_attention: Wv must have shape", lambda: J.self_attention(X, W, W, W.T)),
        (TypeError, "attention_logits: Wk must", lambda: J.attention_logits(X, W, W.float())),
        (ValueError, "self_attention_bound: Wv must", lambda: J.self_attention_bound(X, W, W, W.T)),
        (ValueError, "qknorm_logit: k must have the shape", lambda: J.qknorm_logit(x, x[:3], g, g)),
        (
            ValueError,
            "qknorm_logit: gamma_k must have shape",
            lambda: J.qknorm_logit(x, x, g, g[:2]),
        ),
        (
            TypeError,
            "qknorm_logit: gamma_q must have the same dtype as q",
            lambda: J.qknorm_logit(x, x, g.float(), g),
        ),
        (ValueError, "qknorm_logit: eps", lambda: J.qknorm_logit(x, x, g, g, eps=-1.0)),
        (
            ValueError,
            "layernorm_tokens: gamma must have shape",
            lambda: J.layernorm_tokens(X, g[:2]),
        ),
        (
            ValueError,
            "attention_block: Wv must have shape",
            lambda: J.attention_block(X, W, W, W, g, "pre"),
        ),
        (
            ValueError,
            "attention_block: placement must be",
            lambda: J.attention_block(X, W, W, torch.eye(4, dtype=f64), g, "doc"),
        ),
        (
            ValueError,
            "attention_block_bound: beta must have shape",
            lambda: J.attention_block_bound(X, W, W, torch.eye(4, dtype=f64), g, "pre", g[:3]),
        ),
    ]
    for error, message, call in cases:
        with pytest.raises(error, match=message):
            call()
