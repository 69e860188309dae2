"""The gated delta rule on the delta rule's Triton kernels (`gated_delta_rule(...,
method="triton")`) against the float64 chunked form: outputs, final state and every gradient
(q, k, v, β, g, initial state), ragged N, d_v ≠ d_k, log-gates of −20 per token, g = 0 as the
delta rule's kernels, 16-bit operands, bad inputs. On the CPU they run in the Triton
interpreter (see conftest.py)."""

import itertools

import pytest
import torch

pytest.importorskip("triton")

from linattn_core.delta import delta_rule
from linattn_core.gated import gated_delta_rule, gated_deltanet_inputs
from linattn_core.kernels.tiles import ARCHITECTURES
from linattn_core.testing import KERNEL_RTOL, assert_close, values_and_gradients

NAMES = ["output", "final state", "dq", "dk", "dv", "dbeta", "dg", "dS_0"]


def rounded_inputs(*batch, dtype, **sizes):
    """`gated_deltanet_inputs` rounded to `dtype` and held in float64: what the kernels see."""
    return [x.double() for x in gated_deltanet_inputs(*batch, dtype=dtype, **sizes)]


def gradients_of_both_outputs(v, state, dtype):
    """Seeded random gradients of the outputs and of the final state, rounded to `dtype`."""
    generator = torch.Generator().manual_seed(1)
    return tuple(
        torch.randn(x.shape, generator=generator, dtype=torch.float64).to(dtype).double()
        for x in (v, state)
    )


def run(method, inputs, grads, *, with_state):
    """Outputs, final state and the gradients of q, k, v, β, g (and S_0) of one method."""

    def rule(q, k, v, beta, g, initial=None):
        return gated_delta_rule(q, k, v, beta, g, method=method, initial_state=initial)

    return values_and_gradients(rule, inputs if with_state else inputs[:-1], grads)


def check_against_chunked(inputs, *, dtype, rtol, with_state=True):
    """method="triton" in `dtype` against the float64 chunked form."""
    grads = gradients_of_both_outputs(inputs[2], inputs[-1], dtype)
    expected = run("chunked", inputs, grads, with_state=with_state)
    actual = run(
        "triton",
        [x.to(dtype) for x in inputs],
        tuple(x.to(dtype) for x in grads),
        with_state=with_state,
    )
    for name, a, e in zip(NAMES, actual, expected, strict=False):
        assert a.dtype == dtype and a.shape == e.shape, name
        assert a.isfinite().all(), name
        assert_close(a, e, rtol=rtol, name=name)


# (batch, N, d_k, d_v, initial state) (float32 runs chunks of 32 tokens, `kernel_chunk`): a
# token, two chunks and three with a ragged tail, d_v ≠ d_k both ways, 64 wide (four column
# tiles, whose parts of dg add up), two heads where two column tiles index dg's parts, and 0, 1
# and 2 leading dimensions
CPU_CASES = [
    ((1, 1), 1, 16, 16, True),
    ((2,), 37, 32, 16, False),
    ((1, 1), 70, 16, 32, True),
    ((), 33, 64, 64, True),
]


@pytest.mark.slow
@pytest.mark.interpreter
@pytest.mark.usefixtures("poisoned_empty")
@pytest.mark.parametrize(("batch", "n", "d_k", "d_v", "with_state"), CPU_CASES)
def test_float32_matches_the_float64_chunked_form(batch, n, d_k, d_v, with_state):
    inputs = rounded_inputs(*batch, n=n, d_k=d_k, d_v=d_v, dtype=torch.float32, gate=(-1, 0))
    check_against_chunked(inputs, dtype=torch.float32, rtol=1e-5, with_state=with_state)


@pytest.mark.slow
@pytest.mark.interpreter
@pytest.mark.usefixtures("poisoned_empty")
def test_log_gates_of_minus_20_per_token_are_finite_and_right():
    """Γ_ij = e^{−20(i−j)}, and exp(G_i) reaches e^{−1280}, far below float32's range: every
    exponent is a sum of gates of one chunk, and dg is summed term by term with its decay."""
    inputs = rounded_inputs(1, n=70, d_k=16, d_v=32, dtype=torch.float32, gate=(-20, -20))
    check_against_chunked(inputs, dtype=torch.float32, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.interpreter
@pytest.mark.usefixtures("poisoned_empty")
def test_zero_gates_are_the_delta_rule_kernels():
    q, k, v, beta, _, state = rounded_inputs(1, n=70, d_k=16, d_v=16, dtype=torch.float32)
    inputs = [x.float() for x in (q, k, v, beta, state)]
    grads = tuple(x.float() for x in gradients_of_both_outputs(v, state, torch.float32))

    def ungated(q, k, v, beta, initial):
        return delta_rule(q, k, v, beta, method="triton", initial_state=initial)

    def gated(q, k, v, beta, initial):
        zero = torch.zeros_like(beta)
        return gated_delta_rule(q, k, v, beta, zero, method="triton", initial_state=initial)

    expected = values_and_gradients(ungated, inputs, grads)
    actual = values_and_gradients(gated, inputs, grads)
    for name, a, e in zip(NAMES[:6] + NAMES[7:], actual, expected, strict=True):
        assert_close(a, e, rtol=1e-6, name=name)


@pytest.mark.slow
@pytest.mark.interpreter
@pytest.mark.usefixtures("poisoned_empty", "interpreter_bfloat16_dot")
@pytest.mark.parametrize(
    ("arch", "dtype"),
    list(zip(ARCHITECTURES, itertools.cycle([torch.bfloat16, torch.float16]))),
    indirect=["arch"],
)
def test_16_bit_operands(arch, dtype):
    """Two chunks of 64, the second ragged, with each architecture's tiles (the same for both
    16-bit dtypes, `kernels.tiles`) and each 16-bit dtype (the interpreter converts them apart):
    g and dg in that dtype."""
    inputs = rounded_inputs(1, n=77, d_k=32, d_v=16, dtype=dtype, seed=5)
    check_against_chunked(inputs, dtype=dtype, rtol=KERNEL_RTOL[dtype])


@pytest.mark.interpreter
@pytest.mark.parametrize(("batch", "n"), [((2, 3), 0), ((0, 3), 5)])
def test_empty_inputs(batch, n):
    q, k, v, beta, g, _ = gated_deltanet_inputs(*batch, n=n, d_k=16, d_v=32, dtype=torch.float32)
    g = g.requires_grad_()
    o, final = gated_delta_rule(q, k, v, beta, g, method="triton")
    assert o.shape == (*batch, n, 32) and final.shape == (*batch, 32, 16)
    (o.sum() + final.sum()).backward()
    assert g.grad.shape == g.shape


@pytest.mark.parametrize(
    ("d_k", "dtype", "error", "match"),
    [
        (24, torch.float32, ValueError, r"the feature dimension d = q.shape\[-1\]"),
        (16, torch.float64, TypeError, "the Triton kernels take float32"),
    ],
)
def test_bad_inputs(d_k, dtype, error, match):
    q, k, v, beta, g, _ = gated_deltanet_inputs(n=8, d_k=d_k, d_v=16, dtype=dtype)
    with pytest.raises(error, match=f"^gated_delta_rule: {match}"):
        gated_delta_rule(q, k, v, beta, g, method="triton")


@pytest.mark.slow
@pytest.mark.interpreter
@pytest.mark.usefixtures("poisoned_empty")
def test_a_reset_and_a_huge_gate_are_finite_and_right():
    """g = −inf (a gate of 0: the state restarts) and g = −10⁴ inside chunks: no −inf − (−inf)."""
    inputs = rounded_inputs(1, n=80, d_k=16, d_v=16, dtype=torch.float32, gate=(-1, 0))
    inputs[4][..., 20] = -torch.inf
    inputs[4][..., 70] = -1e4
    check_against_chunked(inputs, dtype=torch.float32, rtol=1e-5)


def chunk_backward(q, k, v, beta, g, state, grad_o, grad_state):
    """The formulas of the gated kernels for one chunk in float64: (O, S', dq, dk, dv, dβ, dg,
    dS_0) for the gradients of O and S' — as `delta_du_local`, `delta_states_bwd`, `delta_dqk`
    (with `gate_grads`) and `delta_wy` compute them."""
    c = len(g)
    causal = torch.ones(c, c, dtype=torch.bool).tril()
    before = causal.tril(-1)
    cumulative = g.cumsum(0)  # G
    e, f = cumulative.exp(), (cumulative[-1] - cumulative).exp()  # exp(G), exp(G_C − G)
    decay = torch.where(causal, cumulative[:, None] - cumulative[None, :], -torch.inf).exp()
    inverse = torch.linalg.inv(  # A
        torch.eye(c, dtype=g.dtype) + beta[:, None] * torch.where(before, k @ k.T * decay, 0.0)
    )
    w, u_free = inverse @ ((beta * e)[:, None] * k), inverse @ (beta[:, None] * v)
    u = u_free - w @ state.T
    scores = torch.where(causal, q @ k.T * decay, 0.0)
    o = e[:, None] * (q @ state.T) + scores @ u
    final = e[-1] * state + (f[:, None] * u).T @ k
    p = torch.where(causal, grad_o @ u.T * decay, 0.0)
    du = scores.T @ grad_o + f[:, None] * (k @ grad_state.T)
    ds0 = e[-1] * grad_state + (e[:, None] * grad_o).T @ q - du.T @ w
    dq = e[:, None] * (grad_o @ state) + p @ k
    dr_w, dr_u = inverse.T @ (-du @ state), inverse.T @ du
    dn = torch.where(before, -(dr_w @ w.T) - dr_u @ u_free.T, 0.0) * decay  # dN ⊙ Γ
    dl_t_k = (beta[:, None] * dn).T @ k
    dk_s = f[:, None] * (u @ grad_state)
    dk = p.T @ q + dk_s + (beta * e)[:, None] * dr_w + beta[:, None] * (dn @ k) + dl_t_k
    dv = beta[:, None] * dr_u
    dbeta = e * (dr_w * k).sum(1) + (dr_u * v).sum(1) + ((dn @ k) * k).sum(1)
    z = torch.where(before, p * (q @ k.T), 0.0)
    d_cumulative = e * ((grad_o @ state) * q).sum(1) + z.sum(1) - z.sum(0)
    d_cumulative += beta * e * (dr_w * k).sum(1) + ((beta[:, None] * (dn @ k) - dl_t_k) * k).sum(1)
    dg = d_cumulative.flip(0).cumsum(0).flip(0) + e[-1] * (state * grad_state).sum()
    dg += torch.where(before, (dk_s * k).sum(1)[None, :], 0.0).sum(1)
    return o, final, dq, dk, dv, dbeta, dg, ds0


@pytest.mark.slow
@pytest.mark.parametrize("gate", [(-1.0, 0.0), (-20.0, -20.0), (-0.2, 0.3)])
@pytest.mark.parametrize("method", ["chunked", "recurrent"])
def test_the_kernels_formulas_are_the_rules_gradients(gate, method):
    q, k, v, beta, g, state = gated_deltanet_inputs(n=20, d_k=5, d_v=4, gate=gate, seed=3)
    generator = torch.Generator().manual_seed(2)
    grads = tuple(torch.randn(x.shape, generator=generator, dtype=x.dtype) for x in (v, state))

    def rule(q, k, v, beta, g, initial):
        return gated_delta_rule(
            q, k, v, beta, g, method=method, chunk_size=20, initial_state=initial
        )

    expected = values_and_gradients(rule, [q, k, v, beta, g, state], grads)
    actual = chunk_backward(q, k, v, beta, g, state, *grads)
    for name, a, e in zip(NAMES, actual, expected, strict=True):
        assert_close(a, e, rtol=1e-13, name=name)
