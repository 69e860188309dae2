"""Tests of `linattn_core.jacobians` and of the other formulas of chapter 8.

Every closed-form Jacobian is compared with autograd (`linattn_core.calculus`) in float64 on
seeded inputs of odd sizes, with batch dimensions where the function takes them; bad inputs
must raise errors that name the argument. The chapter's other checkable claims live here too:
the commutation matrix, the three forms of RoPE, the parameter count of a GPT-2-style module,
and the gradients of QK-normalized attention logits.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from linattn_core import jacobians, linalg, softmax_attention
from linattn_core.calculus import check_gradient, jacobian
from linattn_core.linalg import kron, vec
from linattn_core.testing import assert_close

# torch.func emits this from inside torch on first use; it is not ours to fix
pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning"
)

f64 = torch.float64
RTOL = 1e-10


def randn(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=f64)


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
    x = randn(2, 3, 5)
    J = jacobians.softmax(x)
    assert J.shape == (2, 3, 5, 5)
    assert_close(J, batched_jacobian(lambda v: v.softmax(-1), x), rtol=RTOL)
    assert torch.equal(J, J.mT)
    assert J.sum(-1).abs().max() < 1e-15


def test_softmax_jacobian_vanishes_when_saturated():
    x = randn(6)
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


def test_layernorm_gain_jacobian_is_not_the_document_s_formula():
    x, eps = randn(7), 0.1
    y = x - x.mean()
    s2 = y @ y + 7 * eps
    printed = torch.diag(torch.diagonal(torch.eye(7, dtype=f64) - torch.outer(y, y) / s2))
    with pytest.raises(AssertionError):
        check_gradient(
            lambda g: F.layer_norm(x, (7,), g, None, eps), lambda g: printed, inputs=(randn(7),)
        )


def test_layernorm_batched_and_document_form():
    x, gamma = randn(3, 4, 5), randn(5, seed=1)
    J = jacobians.layernorm(x, gamma)
    expected = batched_jacobian(lambda v: F.layer_norm(v, (5,), gamma, None, 1e-5), x)
    assert_close(J, expected, rtol=RTOL)
    # document 004's LN(x) = γ ⊙ √d y/√(‖y‖² + ε) is torch's layer_norm with ε = d·eps
    y = x[0, 0] - x[0, 0].mean()
    document = gamma * math.sqrt(5) * y / torch.sqrt(y @ y + 5 * 1e-5)
    assert_close(document, F.layer_norm(x[0, 0], (5,), gamma, None, 1e-5), rtol=RTOL)


@pytest.mark.parametrize(("d", "eps"), [(1, 0.5), (6, 1e-6)])
def test_rmsnorm_matches_torch_rms_norm(d, eps):
    check_gradient(
        lambda x, g: F.rms_norm(x, (d,), g, eps),
        lambda x, g: jacobians.rmsnorm(x, g, eps),
        [(d,), (d,)],
        rtol=RTOL,
    )


def test_rmsnorm_batched_and_gain_on_the_left():
    x, gamma = randn(2, 3, 5), randn(5, seed=1)
    J = jacobians.rmsnorm(x, gamma, eps=0.2)
    assert_close(J, batched_jacobian(lambda v: F.rms_norm(v, (5,), gamma, 0.2), x), rtol=RTOL)
    # document 004 puts Diag(γ) on the right: the transpose, wrong unless γ is constant
    assert relative_gap(J[0, 0].mT, J[0, 0]) > 0.1


def relative_gap(a, b):
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.3])
def test_stablenorm_matches_its_definition(alpha):
    def stable(x, g):
        return g * x.shape[-1] ** alpha * x / torch.sqrt(x @ x + 0.01)

    check_gradient(
        stable, lambda x, g: jacobians.stablenorm(x, g, alpha, eps=0.01), [(5,), (5,)], rtol=RTOL
    )


def test_stablenorm_with_half_is_rmsnorm():
    x, gamma = randn(4, 6), randn(6, seed=1)
    assert_close(
        jacobians.stablenorm(x, gamma, 0.5, eps=6 * 1e-3),
        jacobians.rmsnorm(x, gamma, eps=1e-3),
        rtol=RTOL,
    )


def test_l2norm_matches_its_definition_batched():
    x = randn(3, 5)
    expected = batched_jacobian(lambda v: v / torch.sqrt(v @ v + 1e-6), x)
    assert_close(jacobians.l2norm(x), expected, rtol=RTOL)
    assert jacobians.l2norm(x).shape == (3, 5, 5)


# ---------------------------------------------------------------------------- feed-forward


@pytest.mark.parametrize("with_bias", [False, True])
def test_relu_ffn_matches_autograd(with_bias):
    W1, W2, b1 = randn(11, 5, seed=1), randn(3, 11, seed=2), randn(11, seed=3)
    bias = b1 if with_bias else None

    def ffn(x):
        h = x @ W1.T + (b1 if with_bias else 0)
        return torch.relu(h) @ W2.T

    check_gradient(ffn, lambda x: jacobians.relu_ffn(x, W1, W2, bias), [(5,)], rtol=RTOL)
    x = randn(2, 4, 5)
    assert_close(jacobians.relu_ffn(x, W1, W2, bias), batched_jacobian(ffn, x), rtol=RTOL)


def test_swiglu_matches_autograd_and_the_document_slope_fails():
    W1, W2, W3 = randn(9, 5, seed=1), randn(9, 5, seed=2), randn(4, 9, seed=3)

    def ffn(x):
        return (x @ W1.T * F.silu(x @ W2.T)) @ W3.T

    check_gradient(ffn, lambda x: jacobians.swiglu(x, W1, W2, W3), [(5,)], rtol=RTOL)
    x = randn(3, 5)
    assert_close(jacobians.swiglu(x, W1, W2, W3), batched_jacobian(ffn, x), rtol=RTOL)

    def printed_slope(x):  # document 004: σ + v σ'(1 − σ) with σ' = σ(1 − σ)
        u, v = W1 @ x, W2 @ x
        s = torch.sigmoid(v)
        slope = s + v * s * (1 - s) * (1 - s)
        return W3 @ (torch.diag(F.silu(v)) @ W1 + torch.diag(u * slope) @ W2)

    with pytest.raises(AssertionError):
        check_gradient(ffn, printed_slope, [(5,)])


def test_residual_adds_the_identity():
    W = randn(5, 5, seed=1)
    check_gradient(
        lambda x: x + torch.tanh(W @ x),
        lambda x: torch.eye(5, dtype=f64) + torch.diag(1 - torch.tanh(W @ x) ** 2) @ W,
        [(5,)],
    )


# ---------------------------------------------------------------------------- vec and Kronecker


@pytest.mark.parametrize(("m", "n"), [(1, 1), (2, 3), (5, 4)])
def test_commutation_matrix(m, n):
    K = linalg.commutation_matrix(m, n)
    X = randn(m, n)
    assert torch.equal(K @ vec(X), vec(X.T))
    assert torch.equal(K.T, linalg.commutation_matrix(n, m))
    assert torch.equal(K @ K.T, torch.eye(m * n, dtype=f64))


def test_commutation_matrix_swaps_kronecker_factors():
    A, B = randn(2, 3), randn(4, 5, seed=1)
    K = linalg.commutation_matrix
    assert_close(K(4, 2) @ kron(A, B) @ K(3, 5), kron(B, A), rtol=RTOL)


def test_column_softmax_matches_autograd():
    check_gradient(
        lambda P: P.softmax(0), jacobians.column_softmax, [(5, 3)], layout="vec", rtol=RTOL
    )
    P = randn(2, 4, 3)
    assert_close(jacobians.column_softmax(P)[1], jacobians.column_softmax(P[1]), rtol=RTOL)


ATTENTION_SHAPES = [(5, 7, 3, 4), (4, 1, 2, 4), (3, 6, 3, 2)]  # (d, n, d_q, d_v)


@pytest.mark.parametrize(("d", "n", "d_q", "d_v"), ATTENTION_SHAPES)
def test_attention_logits_and_the_other_vec_derivatives_of_p(d, n, d_q, d_v):
    shapes = [(d, n), (d_q, d), (d_q, d)]

    def logits(X, Wq, Wk):
        return X.T @ Wq.T @ Wk @ X

    check_gradient(logits, jacobians.attention_logits, shapes, layout="vec", rtol=RTOL)
    check_gradient(
        lambda Wq, Wk, X: logits(X, Wq, Wk),
        lambda Wq, Wk, X: kron(X.T @ Wk.T, X.T) @ linalg.commutation_matrix(d_q, d),
        [(d_q, d), (d_q, d), (d, n)],
        layout="vec",
        rtol=RTOL,
    )
    check_gradient(
        lambda Wk, Wq, X: logits(X, Wq, Wk),
        lambda Wk, Wq, X: kron(X.T, (Wq @ X).T),
        [(d_q, d), (d_q, d), (d, n)],
        layout="vec",
        rtol=RTOL,
    )
    check_gradient(
        lambda M, X: X.T @ M @ X, lambda M, X: kron(X.T, X.T), [(d, d), (d, n)], layout="vec"
    )


def attention_columns(X, Wq, Wk, Wv):
    """Document 004's column form: Y = Wv X A, A = softmax over the first index."""
    P = X.T @ Wq.T @ Wk @ X  # (n, n)
    return Wv @ X @ (P / math.sqrt(Wq.shape[0])).softmax(dim=0)


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
    X, Wq, Wk, Wv = randn(2, 3, 5, 4), randn(3, 5, seed=1), randn(3, 5, seed=2), randn(2, 5, seed=3)
    J = jacobians.self_attention(X, Wq, Wk, Wv)
    assert J.shape == (2, 3, 2 * 4, 5 * 4)
    for index in [(0, 0), (1, 2)]:
        expected = jacobian(lambda x: attention_columns(x, Wq, Wk, Wv), (X[index],), layout="vec")
        assert_close(J[index], expected, rtol=RTOL)


def test_column_form_is_row_attention_with_queries_from_wk():
    X, Wq, Wk, Wv = randn(5, 6), randn(3, 5, seed=1), randn(3, 5, seed=2), randn(4, 5, seed=3)
    rows = softmax_attention((Wk @ X).T, (Wq @ X).T, (Wv @ X).T)  # (n, d_v)
    assert_close(attention_columns(X, Wq, Wk, Wv).T, rows, rtol=RTOL)


def test_self_attention_jacobian_vanishes_along_the_softmax_path_when_saturated():
    X, Wq, Wk, Wv = randn(4, 5), randn(4, 4, seed=1), randn(4, 4, seed=2), randn(4, 4, seed=3)
    J = jacobians.self_attention(1e3 * X, Wq, Wk, Wv)
    A = ((1e6 * X.T @ Wq.T @ Wk @ X) / 2).softmax(dim=0)
    assert_close(J, kron(A.T, Wv), rtol=1e-12)  # only the value path survives


# ---------------------------------------------------------------------------- bad inputs


def test_bad_inputs_name_the_argument():
    J, x, g, W, X = jacobians, randn(4), randn(4), randn(3, 4), randn(4, 2)
    cases = [
        (TypeError, "softmax: x must be a torch.Tensor", lambda: J.softmax([1.0])),
        (TypeError, "softmax: x must be a floating", lambda: J.softmax(torch.ones(3, 2).long())),
        (ValueError, "layernorm: gamma must have shape", lambda: J.layernorm(x, randn(3))),
        (TypeError, "layernorm: gamma must have the dtype", lambda: J.layernorm(x, g.float())),
        (ValueError, "layernorm: eps", lambda: J.layernorm(x, g, eps=-1.0)),
        (ValueError, "rmsnorm: x must have at least 1", lambda: J.rmsnorm(randn(1)[0], g)),
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
    ]  # fmt: skip
    for error, message, call in cases:
        with pytest.raises(error, match=message):
            call()


# ---------------------------------------------------------------------------- RoPE


def rope_angles(m, d, base=10000.0):
    return m * base ** (-torch.arange(0, d, 2, dtype=f64) / d)  # (d/2,): m θ_i


def rope_complex(x, m):
    z = torch.view_as_complex(x.reshape(-1, 2).contiguous())  # (d/2,): x_{2i} + i x_{2i+1}
    return torch.view_as_real(z * torch.polar(torch.ones_like(z.real), rope_angles(m, len(x))))


def rope_blocks(x, m):
    c, s = rope_angles(m, len(x)).cos(), rope_angles(m, len(x)).sin()
    rotations = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)  # (d/2, 2, 2)
    return torch.block_diag(*rotations) @ x


def rope_elementwise(x, m):
    angles = rope_angles(m, len(x)).repeat_interleave(2)  # (d,)
    rotated = torch.stack([-x[1::2], x[::2]], dim=-1).reshape(-1)  # (−x2, x1, −x4, x3, …)
    return x * angles.cos() + rotated * angles.sin()


@pytest.mark.parametrize("m", [0, 1, 17])
def test_rope_three_forms_agree(m):
    x = randn(10)
    assert_close(rope_complex(x, m).reshape(-1), rope_blocks(x, m), rtol=RTOL)
    assert_close(rope_elementwise(x, m), rope_blocks(x, m), rtol=RTOL)


def test_rope_scores_depend_on_the_offset_only():
    q, k = randn(8), randn(8, seed=1)
    score = [rope_elementwise(q, m) @ rope_elementwise(k, m - 3) for m in (3, 10, 250)]
    assert_close(torch.stack(score), score[0].expand(3), rtol=1e-12)
    assert_close(score[0], q @ rope_blocks(k, -3), rtol=1e-12)  # ⟨R_m q, R_n k⟩ = qᵀ R_{n−m} k
    assert not torch.isclose(score[0], rope_elementwise(q, 5) @ rope_elementwise(k, 1))


# ---------------------------------------------------------------------------- parameter count


class Block(nn.Module):
    """GPT-2 block: pre-LN, biases everywhere, MLP width 4d."""

    def __init__(self, d):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)


class GPT(nn.Module):
    def __init__(self, vocab, n_ctx, d, layers):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(n_ctx, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied


def parameter_formula(vocab, n_ctx, d, layers):
    return layers * (12 * d * d + 13 * d) + vocab * d + n_ctx * d + 2 * d


@pytest.mark.parametrize(("vocab", "n_ctx", "d", "layers"), [(11, 7, 6, 3), (97, 16, 10, 1)])
def test_parameter_count_formula(vocab, n_ctx, d, layers):
    model = GPT(vocab, n_ctx, d, layers)
    assert sum(p.numel() for p in model.parameters()) == parameter_formula(vocab, n_ctx, d, layers)


def test_gpt2_small_has_124_439_808_parameters():
    with torch.device("meta"):  # shapes only: nothing is allocated
        model = GPT(50257, 1024, 768, 12)
    assert sum(p.numel() for p in model.parameters()) == 124_439_808
    assert parameter_formula(50257, 1024, 768, 12) == 124_439_808
    assert 12 * (12 * 768 * 768 + 13 * 768) + 50000 * 768 == 123_454_464  # document 004


# ---------------------------------------------------------------------------- QK-norm


def rms(x, gamma, eps):
    return gamma * x / torch.sqrt((x * x).mean() + eps)


def qknorm_logit(xi, xj, Wq, Wk, gq, gk, eps=1e-6):
    return rms(Wq @ xi, gq, eps) @ rms(Wk @ xj, gk, eps) / math.sqrt(Wq.shape[0])


def qknorm_gradient_q(q, k, gq, gk, eps=1e-6):
    """∂P/∂q = √d₁/(s_q s_k) (I − q qᵀ/s_q²) Diag(γ_q γ_k) k, with s² = ‖·‖² + d₁ eps."""
    d1 = q.shape[0]
    sq, sk = torch.sqrt(q @ q + d1 * eps), torch.sqrt(k @ k + d1 * eps)
    projection = torch.eye(d1, dtype=f64) - torch.outer(q, q) / sq**2
    return math.sqrt(d1) / (sq * sk) * projection @ (gq * gk * k)


def qknorm_gradient_xi(xi, xj, Wq, Wk, gq, gk):
    return Wq.T @ qknorm_gradient_q(Wq @ xi, Wk @ xj, gq, gk)


@pytest.mark.parametrize("d1", [3, 6, 8])  # head width d₁ below, equal to and above d = 6
def test_qknorm_logit_gradients(d1):
    shapes = [(6,), (6,), (d1, 6), (d1, 6), (d1,), (d1,)]
    check_gradient(qknorm_logit, qknorm_gradient_xi, shapes, wrt=0, rtol=RTOL)
    check_gradient(
        qknorm_logit,
        lambda xi, xj, Wq, Wk, gq, gk: qknorm_gradient_xi(xj, xi, Wk, Wq, gk, gq),
        shapes,
        wrt=1,
        rtol=RTOL,
    )
    check_gradient(
        qknorm_logit,
        lambda xi, xj, Wq, Wk, gq, gk: torch.outer(qknorm_gradient_q(Wq @ xi, Wk @ xj, gq, gk), xi),
        shapes,
        wrt=2,
        rtol=RTOL,
    )
    check_gradient(
        qknorm_logit,
        lambda xi, xj, Wq, Wk, gq, gk: torch.outer(qknorm_gradient_q(Wk @ xj, Wq @ xi, gk, gq), xj),
        shapes,
        wrt=3,
        rtol=RTOL,
    )


def test_qknorm_diagonal_logit_gradient_has_both_terms():
    xi, Wq, Wk, gq, gk = randn(5), randn(4, 5, seed=1), randn(4, 5, seed=2), randn(4), randn(4)
    both = qknorm_gradient_xi(xi, xi, Wq, Wk, gq, gk) + qknorm_gradient_xi(xi, xi, Wk, Wq, gk, gq)
    check_gradient(lambda x: qknorm_logit(x, x, Wq, Wk, gq, gk), lambda x: both, inputs=(xi,))


def test_qknorm_logits_are_bounded_whatever_the_weight_scale():
    xi, xj, Wq, Wk = randn(6), randn(6, seed=1), randn(4, 6, seed=2), randn(4, 6, seed=3)
    ones = torch.ones(4, dtype=f64)
    for scale in (1.0, 1e3, 1e6):
        assert abs(qknorm_logit(xi, xj, scale * Wq, scale * Wk, ones, ones)) <= math.sqrt(4)
