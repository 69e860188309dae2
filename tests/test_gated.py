"""linattn_core.gated: both methods of the gated delta rule against a token loop written here from
the definition, in float64 (ragged N, odd d and d_v, batch dimensions, initial state); g = 0 is
the delta rule to the last bit; extreme log-gates (−20, −50 per token, resets of −inf, mixes of
0 and −30) stay finite and exact where the factorization exp(G_i)·exp(−G_j) overflows; float32;
gradients of every input, g and the initial state included; bad inputs."""

import math

import pytest
import torch

import linattn_core
from linattn_core.delta import delta_rule
from linattn_core.gated import gated_delta_rule, gated_deltanet_inputs, segment_sums
from linattn_core.testing import assert_close, relative_error

METHODS = ("recurrent", "chunked")


def reference(q, k, v, beta, g, state):
    """S_t = exp(g_t) S_{t-1} (I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ, o_t = S_t q_t, one sequence."""
    identity = torch.eye(q.shape[-1], dtype=q.dtype)
    outputs = []
    for q_t, k_t, v_t, beta_t, g_t in zip(q, k, v, beta, g, strict=True):
        correction = identity - beta_t * torch.outer(k_t, k_t)
        state = math.exp(g_t) * state @ correction + beta_t * torch.outer(v_t, k_t)
        outputs.append(state @ q_t)
    return (torch.stack(outputs) if outputs else v.clone()), state


def batched_reference(q, k, v, beta, g, state):
    """`reference` for every sequence of the leading batch dimensions."""
    flat = [x.reshape(-1, *x.shape[len(q.shape) - 2 :]) for x in (q, k, v)]
    flat += [beta.reshape(-1, beta.shape[-1]), g.reshape(-1, g.shape[-1])]
    flat.append(state.reshape(-1, *state.shape[-2:]))
    pairs = [reference(*row) for row in zip(*flat, strict=True)]
    o = torch.stack([o for o, _ in pairs]).reshape(v.shape)
    return o, torch.stack([s for _, s in pairs]).reshape(state.shape)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    ("batch", "n", "d_k", "d_v", "chunk_size"),
    [
        ((), 1, 3, 5, 64),
        ((), 63, 5, 7, 64),
        ((), 64, 7, 3, 64),
        ((2,), 65, 3, 3, 64),
        pytest.param((2, 3), 200, 5, 7, 64, marks=pytest.mark.slow),
        ((), 200, 7, 5, 13),
    ],
)
def test_both_methods_match_the_definition(method, batch, n, d_k, d_v, chunk_size):
    q, k, v, beta, g, state = gated_deltanet_inputs(*batch, n=n, d_k=d_k, d_v=d_v, seed=n)
    expected_o, expected_state = batched_reference(q, k, v, beta, g, state)
    o, final_state = gated_delta_rule(
        q, k, v, beta, g, method=method, chunk_size=chunk_size, initial_state=state
    )
    assert_close(o, expected_o, rtol=1e-12)
    assert_close(final_state, expected_state, rtol=1e-12, name="state")


@pytest.mark.parametrize("method", METHODS)
def test_no_initial_state_is_zero_and_auto_is_chunked(method):
    q, k, v, beta, g, state = gated_deltanet_inputs(2, n=40, d_k=4, d_v=3, seed=1)
    o, final_state = gated_delta_rule(q, k, v, beta, g, method=method, chunk_size=16)
    expected = gated_delta_rule(q, k, v, beta, g, method=method, initial_state=0 * state)
    assert_close(o, expected[0], rtol=1e-12)
    assert_close(final_state, expected[1], rtol=1e-12, name="state")
    auto = gated_delta_rule(q, k, v, beta, g, chunk_size=16)
    chunked = gated_delta_rule(q, k, v, beta, g, method="chunked", chunk_size=16)
    assert all(torch.equal(a, c) for a, c in zip(auto, chunked, strict=True))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("n", [1, 64, pytest.param(130, marks=pytest.mark.slow)])
def test_a_gate_of_one_is_the_delta_rule_to_the_last_bit(method, n):
    q, k, v, beta, _, state = gated_deltanet_inputs(2, n=n, d_k=5, d_v=3, seed=2)
    zero = torch.zeros_like(beta)
    for initial_state in (None, state):
        gated = gated_delta_rule(q, k, v, beta, zero, method=method, initial_state=initial_state)
        plain = delta_rule(q, k, v, beta, method=method, initial_state=initial_state)
        assert torch.equal(gated[0], plain[0]) and torch.equal(gated[1], plain[1])


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    "gates", ["-20", "-50", "0 and -30", "-inf resets", "-1e30 in float32"], ids=str
)
def test_extreme_gates_are_finite_and_exact(method, gates):
    q, k, v, beta, g, state = gated_deltanet_inputs(n=90, d_k=5, d_v=4, seed=3)
    tokens, dtype = torch.arange(90), torch.float64
    if gates == "0 and -30":
        g = torch.where(tokens % 3 == 0, -30.0, 0.0).double()
    elif gates == "-inf resets":
        g = torch.where(tokens % 40 == 7, -math.inf, g)
    elif gates == "-1e30 in float32":
        g, dtype = torch.where(tokens % 2 == 0, -1e30, g), torch.float32
    else:
        g = torch.full_like(g, float(gates))
    expected_o, expected_state = reference(q, k, v, beta, g, state)
    inputs = (x.to(dtype) for x in (q, k, v, beta, g))
    o, final_state = gated_delta_rule(*inputs, method=method, initial_state=state.to(dtype))
    assert o.isfinite().all() and final_state.isfinite().all()
    rtol = 1e-12 if dtype == torch.float64 else 1e-5
    assert_close(o, expected_o, rtol=rtol)
    assert_close(final_state, expected_state, rtol=rtol, name="state")


def test_the_factorized_decays_overflow_in_float32_where_the_chunked_form_does_not():
    g = torch.full((64,), -2.0)  # G_64 = −128: exp(128) is past float32's 3.4e38
    cumulative = g.cumsum(0)
    factorized = torch.exp(cumulative)[:, None] * torch.exp(-cumulative)[None, :]
    stable = torch.exp(segment_sums(g))
    assert torch.isnan(factorized).any() and torch.isinf(torch.exp(-cumulative)).any()
    assert stable.isfinite().all() and stable.max() == 1
    assert_close(stable, torch.exp(segment_sums(g.double())), rtol=1e-6, name="decays")
    q, k, v, beta, _, state = gated_deltanet_inputs(n=64, d_k=4, d_v=4, seed=4)
    expected_o, _ = reference(q, k, v, beta, g.double(), state)
    args32 = (x.float() for x in (q, k, v, beta))
    o, _ = gated_delta_rule(*args32, g, method="chunked", initial_state=state.float())
    assert_close(o, expected_o, rtol=1e-5)


def test_segment_sums_are_the_differences_of_the_cumulative_sums():
    g = torch.randn(3, 9, dtype=torch.float64)
    cumulative = g.cumsum(-1)
    differences = (cumulative[..., :, None] - cumulative[..., None, :]).tril()
    sums = segment_sums(g)
    assert_close(sums.tril(), differences, rtol=1e-14)
    assert torch.isneginf(sums.triu(1)[..., ~torch.ones(9, 9, dtype=torch.bool).tril()]).all()
    assert segment_sums(g[..., :0]).shape == (3, 0, 0)


@pytest.mark.parametrize("method", METHODS)
def test_float32_is_close_to_the_float64_definition(method):
    q, k, v, beta, g, state = gated_deltanet_inputs(2, n=100, d_k=8, d_v=4, seed=5)
    expected_o, expected_state = batched_reference(q, k, v, beta, g, state)
    args32 = (x.float() for x in (q, k, v, beta, g))
    o, final_state = gated_delta_rule(
        *args32, method=method, chunk_size=16, initial_state=state.float()
    )
    assert o.dtype == final_state.dtype == torch.float32
    assert_close(o, expected_o, rtol=1e-5)
    assert_close(final_state, expected_state, rtol=1e-5, name="state")


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(("dtype", "rtol"), [(torch.bfloat16, 3e-2), (torch.float16, 3e-3)])
def test_16_bit_inputs(method, dtype, rtol):
    q, k, v, beta, g, state = gated_deltanet_inputs(n=100, d_k=16, d_v=8, seed=8)
    expected_o, _ = reference(q, k, v, beta, g, state)
    args16 = (x.to(dtype) for x in (q, k, v, beta, g))
    o, final_state = gated_delta_rule(*args16, method=method, initial_state=state.to(dtype))
    assert o.dtype == final_state.dtype == dtype
    assert_close(o, expected_o, rtol=rtol)


@pytest.mark.parametrize("method", METHODS)
def test_an_empty_sequence_returns_the_initial_state(method):
    q, k, v, beta, g, state = gated_deltanet_inputs(2, n=0, d_k=3, d_v=4)
    o, final_state = gated_delta_rule(q, k, v, beta, g, method=method, initial_state=state)
    assert o.shape == (2, 0, 4) and torch.equal(final_state, state)
    _, zero_state = gated_delta_rule(q, k, v, beta, g, method=method)
    assert torch.equal(zero_state, torch.zeros(2, 4, 3, dtype=torch.float64))


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
def test_gradients_of_every_input(method):
    inputs = gated_deltanet_inputs(n=5, d_k=3, d_v=2, gate=(-3.0, 0.0), seed=6)
    inputs = tuple(x.clone().requires_grad_() for x in inputs)

    def run(q, k, v, beta, g, state):  # chunks of 2: two full chunks and a padded one
        return gated_delta_rule(q, k, v, beta, g, method=method, chunk_size=2, initial_state=state)

    assert torch.autograd.gradcheck(run, inputs)


@pytest.mark.slow
def test_gradients_of_both_methods_agree_at_extreme_gates():
    inputs = gated_deltanet_inputs(n=70, d_k=4, d_v=3, gate=(-40.0, 0.0), seed=7)
    weights = torch.randn(70, 3, dtype=torch.float64)
    grads = []
    for method in METHODS:
        leaves = [x.clone().requires_grad_() for x in inputs]
        o, final_state = gated_delta_rule(*leaves[:5], method=method, initial_state=leaves[5])
        ((o * weights).sum() + final_state.sum()).backward()
        grads.append([x.grad for x in leaves])
    for name, recurrent, chunked in zip("q k v beta g state".split(), *grads, strict=True):
        assert chunked.isfinite().all()
        assert relative_error(chunked, recurrent) < 1e-10, name


def test_the_package_exports_it():
    assert linattn_core.gated_delta_rule is gated_delta_rule


def good_inputs():
    return gated_deltanet_inputs(2, n=6, d_k=4, d_v=3)


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (lambda a: {**a, "g": a["g"][..., :3]}, ValueError, r"g must have shape q.shape\[:-1\]"),
        (lambda a: {**a, "g": a["g"][None]}, ValueError, r"g must have shape"),
        (lambda a: {**a, "g": a["g"].float()}, TypeError, "g must have the same dtype as q"),
        (lambda a: {**a, "g": a["g"].long()}, TypeError, "g must be a floating-point tensor"),
        (lambda a: {**a, "g": 0.0}, TypeError, "g must be a torch.Tensor; got float"),
        (lambda a: {**a, "beta": a["beta"][..., :3]}, ValueError, "beta must have shape"),
        (lambda a: {**a, "k": a["k"][..., :2]}, ValueError, "k must have the same feature"),
        (lambda a: {**a, "initial_state": a["initial_state"].mT}, ValueError, "initial_state"),
        (lambda a: {**a, "method": "parallel"}, ValueError, "method must be one of"),
        (lambda a: {**a, "chunk_size": 0}, ValueError, "chunk_size must be a positive int"),
        (lambda a: {**a, "chunk_size": 2.0}, TypeError, "chunk_size must be a positive int"),
    ],
)
def test_bad_inputs_are_errors(change, error, match):
    q, k, v, beta, g, state = good_inputs()
    arguments = {"q": q, "k": k, "v": v, "beta": beta, "g": g, "initial_state": state}
    with pytest.raises(error, match=f"^gated_delta_rule: {match}"):
        gated_delta_rule(**change(arguments))


@pytest.mark.parametrize("gate", [(0.0, -1.0), (-math.inf, 0.0), ("a", 0.0)])
def test_gated_deltanet_inputs_rejects_a_bad_gate_range(gate):
    with pytest.raises(ValueError, match=r"^gated_deltanet_inputs: gate must be"):
        gated_deltanet_inputs(n=3, d_k=2, d_v=2, gate=gate)
