"""linattn_core.delta: the triangular inverse and solve against dense float64 references built
from T, both delta-rule methods against the token-by-token reference `delta_rule_loop` (itself
checked against the definition), the generators of DeltaNet inputs and of general systems:
outputs, final states, gradients, odd shapes, bad inputs, what a zero on the diagonal does, and
the O(n) memory of `triangular_solve`."""

from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from linattn_core.attention import linear_attention
from linattn_core.bench.fresh import run_fresh
from linattn_core.bench.memory import resident_peak_growth
from linattn_core.delta import (
    delta_rule,
    delta_rule_loop,
    deltanet_inputs,
    triangular_inverse,
    triangular_matrix,
    triangular_solve,
    triangular_system_inputs,
)
from linattn_core.testing import assert_close, random_qkv, relative_error
from tests.shapes import CHUNKED_SHAPES, RANDOM_SHAPES

RTOL = 1e-10
SCALE = 0.25  # q of the general systems: q·k of size ~1/(4√d), T well conditioned at every n


def delta_rule_reference(q, k, v, beta, state):
    """The package's reference `delta_rule_loop` over every leading batch index."""
    batch = q.shape[:-2]
    flat = [x.reshape(-1, *x.shape[len(batch) :]) for x in (q, k, v, beta, state)]
    results = [
        delta_rule_loop(*args[:4], initial_state=args[4]) for args in zip(*flat, strict=True)
    ]
    outputs = torch.stack([o for o, _ in results]).reshape(*batch, *v.shape[-2:])
    states = torch.stack([s for _, s in results]).reshape(state.shape)
    return outputs, states


# --- triangular_inverse and triangular_solve ------------------------------------------------


def test_triangular_matrix_matches_the_definition_entry_by_entry():
    q, k, diag, _ = triangular_system_inputs(2, n=6, d=3, seed=12, scale=SCALE)
    T = triangular_matrix(q, k, diag)
    for b in range(2):
        for i in range(6):
            for j in range(6):
                expected = diag[b, i] if i == j else (q[b, i] @ k[b, j] if i > j else 0.0)
                assert T[b, i, j].item() == pytest.approx(float(expected), rel=1e-15)


@pytest.mark.parametrize(("batch", "n", "d", "d_v", "chunk_size"), CHUNKED_SHAPES)
def test_triangular_inverse_matches_dense_inverse(batch, n, d, d_v, chunk_size):
    q, k, diag, _ = triangular_system_inputs(*batch, n=n, d=d, scale=SCALE)
    T = triangular_matrix(q, k, diag)
    inverse = triangular_inverse(q, k, diag, chunk_size=chunk_size)
    identity = torch.eye(n, dtype=torch.float64).expand_as(T)
    assert_close(inverse, torch.linalg.inv(T), rtol=RTOL, name="vs inv")
    expected = torch.linalg.solve_triangular(T, identity, upper=False)
    assert_close(inverse, expected, rtol=RTOL, name="vs solve_triangular")
    assert bool((inverse.triu(1) == 0).all()), "T⁻¹ must be lower triangular"


@pytest.mark.parametrize(("batch", "n", "d", "d_v", "chunk_size"), CHUNKED_SHAPES)
def test_triangular_solve_matches_dense_solve(batch, n, d, d_v, chunk_size):
    q, k, diag, v = triangular_system_inputs(*batch, n=n, d=d, d_v=d_v, scale=SCALE)
    x = triangular_solve(q, k, diag, v, chunk_size=chunk_size)
    expected = torch.linalg.solve_triangular(triangular_matrix(q, k, diag), v, upper=False)
    assert_close(x, expected, rtol=RTOL)


@pytest.mark.slow
@given(**RANDOM_SHAPES, negative_diag=st.booleans())
def test_inverse_and_solve_on_random_shapes(batch, n, d, d_v, chunk_size, negative_diag, seed):
    q, k, diag, v = triangular_system_inputs(*batch, n=n, d=d, d_v=d_v, seed=seed, scale=SCALE)
    diag = diag if negative_diag else diag.abs()
    T = triangular_matrix(q, k, diag)
    expected = torch.linalg.solve_triangular(T, v, upper=False)
    assert_close(triangular_solve(q, k, diag, v, chunk_size=chunk_size), expected, rtol=RTOL)
    inverse = triangular_inverse(q, k, diag, chunk_size=chunk_size)
    assert_close(inverse @ v, expected, rtol=RTOL)


def test_every_chunk_size_gives_the_same_answer():
    q, k, diag, v = triangular_system_inputs(2, n=29, d=3, d_v=4, seed=3, scale=SCALE)
    inverse = triangular_inverse(q, k, diag, chunk_size=29)
    solution = triangular_solve(q, k, diag, v, chunk_size=29)
    for chunk_size in (1, 2, 5, 28, 100):
        assert_close(triangular_inverse(q, k, diag, chunk_size=chunk_size), inverse, rtol=1e-12)
        assert_close(triangular_solve(q, k, diag, v, chunk_size=chunk_size), solution, rtol=1e-12)


def test_inverse_diagonal_is_reciprocal_of_diag():
    q, k, diag, _ = triangular_system_inputs(n=20, d=3, seed=4, scale=SCALE)
    inverse = triangular_inverse(q, k, diag, chunk_size=6)
    assert_close(torch.diagonal(inverse, dim1=-2, dim2=-1), 1 / diag, rtol=1e-14)


def test_general_diagonal_with_zero_factors_is_diagonal_inverse():
    _, _, diag, v = triangular_system_inputs(3, n=9, d=2, seed=5, scale=SCALE)
    zeros = torch.zeros(3, 9, 2, dtype=torch.float64)
    assert_close(triangular_inverse(zeros, zeros, diag), torch.diag_embed(1 / diag), rtol=1e-15)
    assert_close(triangular_solve(zeros, zeros, diag, v), v / diag[..., None], rtol=1e-15)


@pytest.mark.slow
def test_float32_inputs_stay_float32_and_accurate():
    q, k, diag, v = triangular_system_inputs(n=200, d=8, d_v=4, seed=6, scale=SCALE)
    expected = triangular_solve(q, k, diag, v)
    x32 = triangular_solve(q.float(), k.float(), diag.float(), v.float(), chunk_size=32)
    assert x32.dtype == torch.float32
    assert_close(x32, expected, rtol=1e-5)
    inverse32 = triangular_inverse(q.float(), k.float(), diag.float(), chunk_size=32)
    assert inverse32.dtype == torch.float32
    assert_close(inverse32, triangular_inverse(q, k, diag), rtol=1e-5)


def test_empty_sequence():
    q, k, diag, v = triangular_system_inputs(2, n=0, d=3, d_v=4, scale=SCALE)
    assert triangular_inverse(q, k, diag).shape == (2, 0, 0)
    assert triangular_solve(q, k, diag, v).shape == (2, 0, 4)


@pytest.mark.slow
def test_inverse_and_solve_gradients():
    q, k, diag, v = triangular_system_inputs(n=7, d=2, d_v=2, seed=7, scale=SCALE)
    inputs = tuple(x.clone().requires_grad_() for x in (q, k, diag, v))
    assert torch.autograd.gradcheck(
        lambda q, k, diag, v: triangular_solve(q, k, diag, v, chunk_size=3), inputs
    )
    assert torch.autograd.gradcheck(
        lambda q, k, diag: triangular_inverse(q, k, diag, chunk_size=3), inputs[:3], fast_mode=True
    )


def test_zero_on_the_diagonal_is_not_checked_and_gives_non_finite_rows():
    # values are not checked (validation's policy): T is singular, row 4 of batch 1 and the rows
    # after it are not finite, and everything before, and batch 0, is still exact
    q, k, diag, v = triangular_system_inputs(2, n=6, d=2, scale=SCALE)
    singular = diag.clone()
    singular[1, 4] = 0.0
    inverse = triangular_inverse(q, k, singular, chunk_size=2)
    x = triangular_solve(q, k, singular, v, chunk_size=2)
    for result in (inverse, x):
        assert bool((~result[1, 4:].isfinite()).any(dim=-1).all()), "rows 4, 5 must hold inf/nan"
    assert_close(inverse[0], triangular_inverse(q, k, diag)[0], rtol=1e-14)
    assert_close(x[1, :4], triangular_solve(q, k, diag, v)[1, :4], rtol=1e-14)


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (lambda q, k, diag, v: (q, k[..., :2], diag, v), ValueError, "k must have the same feat"),
        (lambda q, k, diag, v: (q, k, diag[..., :4], v), ValueError, r"diag must have shape"),
        (lambda q, k, diag, v: (q, k, diag, v[..., :4, :]), ValueError, "q must have the same seq"),
        (lambda q, k, diag, v: (q, k.float(), diag, v), TypeError, "k must have the same dtype"),
        (lambda q, k, diag, v: (q, k, diag.float(), v), TypeError, "diag must have the same"),
        (lambda q, k, diag, v: (q, k, diag, v.float()), TypeError, "v must have the same dtype"),
        (lambda q, k, diag, v: (q.long(), k, diag, v), TypeError, "q must be a floating-point"),
        (lambda q, k, diag, v: (q[0, 0], k, diag, v), ValueError, "q must have at least 2"),
        (lambda q, k, diag, v: (q, k, diag, v.tolist()), TypeError, "v must be a torch.Tensor"),
    ],
)
def test_triangular_solve_rejects_bad_inputs(change, error, match):
    args = change(*triangular_system_inputs(2, n=5, d=3, d_v=2, scale=SCALE))
    with pytest.raises(error, match=f"triangular_solve: {match}"):
        triangular_solve(*args)


@pytest.mark.parametrize(
    ("chunk_size", "error"),
    [(0, ValueError), (-1, ValueError), (2.5, TypeError), (True, TypeError), (None, TypeError)],
)
def test_bad_chunk_size_is_an_error(chunk_size, error):
    q, k, diag, v = triangular_system_inputs(n=5, d=3, scale=SCALE)
    with pytest.raises(error, match="triangular_inverse: chunk_size must be a positive int"):
        triangular_inverse(q, k, diag, chunk_size=chunk_size)
    with pytest.raises(error, match="triangular_solve: chunk_size must be a positive int"):
        triangular_solve(q, k, diag, v, chunk_size=chunk_size)


# --- delta_rule ------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["auto", "recurrent", "chunked"])
@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize(("batch", "n", "d_k", "d_v", "chunk_size"), CHUNKED_SHAPES)
def test_delta_rule_matches_token_loop(batch, n, d_k, d_v, chunk_size, with_state, method):
    q, k, v, beta, state = deltanet_inputs(*batch, n=n, d_k=d_k, d_v=d_v)
    if not with_state:
        state = torch.zeros_like(state)
    expected_o, expected_state = delta_rule_reference(q, k, v, beta, state)
    o, final_state = delta_rule(
        q,
        k,
        v,
        beta,
        method=method,
        chunk_size=chunk_size,
        initial_state=state if with_state else None,
    )
    assert_close(o, expected_o, rtol=RTOL, name=f"{method} outputs")
    assert_close(final_state, expected_state, rtol=RTOL, name=f"{method} state")


@pytest.mark.slow
@given(**RANDOM_SHAPES)
def test_delta_rule_methods_agree_on_random_shapes(batch, n, d, d_v, chunk_size, seed):
    q, k, v, beta, state = deltanet_inputs(*batch, n=n, d_k=d, d_v=d_v, seed=seed)
    o, final_state = delta_rule(q, k, v, beta, initial_state=state)
    o_chunked, state_chunked = delta_rule(
        q, k, v, beta, method="chunked", chunk_size=chunk_size, initial_state=state
    )
    assert_close(o_chunked, o, rtol=RTOL)
    assert_close(state_chunked, final_state, rtol=RTOL)


def test_delta_rule_unnormalized_keys_and_large_beta():
    # the recurrence is defined for any keys and rates; the chunked form must still agree
    q, k, v, _, state = deltanet_inputs(2, n=24, d_k=3, d_v=2, seed=8)
    k = 0.7 * k * torch.arange(1, 25, dtype=torch.float64)[:, None] ** 0.25
    beta = torch.linspace(-0.5, 1.9, 24, dtype=torch.float64).expand(2, 24)
    expected_o, expected_state = delta_rule_reference(q, k, v, beta, state)
    o, final_state = delta_rule(q, k, v, beta, method="chunked", chunk_size=5, initial_state=state)
    assert_close(o, expected_o, rtol=1e-9)
    assert_close(final_state, expected_state, rtol=1e-9)


def test_delta_rule_chunks_continue_from_the_state():
    # running two halves with the state handed over equals one run
    q, k, v, beta, state = deltanet_inputs(n=30, d_k=4, d_v=3, seed=9)
    o, final_state = delta_rule(q, k, v, beta, method="chunked", chunk_size=8, initial_state=state)
    o_1, state_1 = delta_rule(q[:13], k[:13], v[:13], beta[:13], initial_state=state)
    o_2, state_2 = delta_rule(
        q[13:], k[13:], v[13:], beta[13:], method="chunked", initial_state=state_1
    )
    assert_close(torch.cat([o_1, o_2]), o, rtol=RTOL)
    assert_close(state_2, final_state, rtol=RTOL)


def test_delta_rule_with_beta_one_and_unit_key_writes_the_value():
    q, k, v, _, state = deltanet_inputs(n=1, d_k=4, d_v=3, seed=10)
    _, final_state = delta_rule(q, k, v, torch.ones(1, dtype=torch.float64), initial_state=state)
    assert_close(final_state @ k[0], v[0], rtol=1e-14)


def test_delta_rule_empty_sequence_returns_the_initial_state():
    q, k, v, beta, state = deltanet_inputs(2, n=0, d_k=3, d_v=4)
    for method in ("recurrent", "chunked"):
        o, final_state = delta_rule(q, k, v, beta, method=method, initial_state=state)
        assert o.shape == (2, 0, 4)
        assert torch.equal(final_state, state)
        _, zero_state = delta_rule(q, k, v, beta, method=method)
        assert torch.equal(zero_state, torch.zeros(2, 4, 3, dtype=torch.float64))


@pytest.mark.parametrize("method", ["recurrent", pytest.param("chunked", marks=pytest.mark.slow)])
def test_delta_rule_gradients(method):
    inputs = tuple(x.clone().requires_grad_() for x in deltanet_inputs(n=5, d_k=2, d_v=2, seed=11))

    def run(q, k, v, beta, state):  # chunks of 2: two full chunks and a padded one
        return delta_rule(q, k, v, beta, method=method, chunk_size=2, initial_state=state)

    assert torch.autograd.gradcheck(run, inputs)


def test_delta_rule_float32():
    q, k, v, beta, state = deltanet_inputs(2, n=100, d_k=8, d_v=4, seed=12)
    expected_o, _ = delta_rule(q, k, v, beta, initial_state=state)
    args32 = (x.float() for x in (q, k, v, beta))
    o, final_state = delta_rule(
        *args32, method="chunked", chunk_size=16, initial_state=state.float()
    )
    assert o.dtype == final_state.dtype == torch.float32
    assert_close(o, expected_o, rtol=1e-5)


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (lambda q, k, v, b, s: ((q, k, v, b[..., :3]), {}), ValueError, "beta must have shape"),
        (lambda q, k, v, b, s: ((q, k, v, b.float()), {}), TypeError, "beta must have the same"),
        (
            lambda q, k, v, b, s: ((q, k[..., :2], v, b), {}),
            ValueError,
            "k must have the same feature",
        ),
        (
            lambda q, k, v, b, s: ((q, k, v[:, :3], b), {}),
            ValueError,
            "q must have the same sequence",
        ),
        (
            lambda q, k, v, b, s: ((q, k, v, b), {"initial_state": s.mT}),
            ValueError,
            r"initial_state must have shape \(\.\.\., d_v, d_k\) = \(2, 3, 4\)",
        ),
        (
            lambda q, k, v, b, s: ((q, k, v, b), {"initial_state": s.float()}),
            TypeError,
            "initial_state must have the same dtype",
        ),
        (lambda q, k, v, b, s: ((q, k, v, b), {"method": "parallel"}), ValueError, "method"),
        (lambda q, k, v, b, s: ((q, k, v, b), {"chunk_size": 0}), ValueError, "chunk_size"),
    ],
)
def test_delta_rule_rejects_bad_inputs(change, error, match):
    args, kwargs = change(*deltanet_inputs(2, n=5, d_k=4, d_v=3))
    with pytest.raises(error, match=f"delta_rule: {match}"):
        delta_rule(*args, **kwargs)


# --- the reference and the inputs ------------------------------------------------------------


def test_delta_rule_loop_steps_are_gradient_steps():
    # S_t = S_{t-1} − β_t ∇_S ½‖S k_t − v_t‖², the LMS step (Widrow and Hoff 1960), by autograd
    q, k, v, beta, state = deltanet_inputs(n=6, d_k=4, d_v=3, seed=13)
    _, final_state = delta_rule_loop(q, k, v, beta, initial_state=state)
    for k_t, v_t, beta_t in zip(k, v, beta, strict=True):
        leaf = state.clone().requires_grad_()
        (grad,) = torch.autograd.grad(0.5 * (leaf @ k_t - v_t).square().sum(), leaf)
        state = state - beta_t * grad
    assert_close(final_state, state, rtol=1e-14)


def test_delta_rule_loop_matches_the_unrolled_triangular_system():
    # (I + diag(β) tril(K Kᵀ, −1)) U = diag(β)(V − K S_0ᵀ), O = Q S_0ᵀ + tril(Q Kᵀ) U, dense
    q, k, v, beta, state = deltanet_inputs(n=20, d_k=5, d_v=3, seed=14)
    system = torch.eye(20, dtype=torch.float64) + beta[:, None] * (k @ k.mT).tril(-1)
    rhs = beta[:, None] * (v - k @ state.mT)
    corrections = torch.linalg.solve_triangular(system, rhs, upper=False)  # (N, d_v)
    o, final_state = delta_rule_loop(q, k, v, beta, initial_state=state)
    assert_close(o, q @ state.mT + (q @ k.mT).tril() @ corrections, rtol=1e-12)
    assert_close(final_state, state + corrections.mT @ k, rtol=1e-12)


def test_delta_rule_loop_starts_from_zero_and_handles_no_tokens():
    q, k, v, beta, _ = deltanet_inputs(n=4, d_k=3, d_v=2, seed=15)
    o, _ = delta_rule_loop(q, k, v, beta)
    zeros = torch.zeros(2, 3, dtype=torch.float64)
    assert torch.equal(o, delta_rule_loop(q, k, v, beta, initial_state=zeros)[0])
    o, final_state = delta_rule_loop(q[:0], k[:0], v[:0], beta[:0])
    assert o.shape == (0, 2) and torch.equal(final_state, torch.zeros(2, 3, dtype=torch.float64))


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (
            lambda q, k, v, b, s: (q[None], k[None], v[None], b[None], s),
            ValueError,
            "q must be a matrix",
        ),
        (lambda q, k, v, b, s: (q, k, v, b[:3], s), ValueError, "beta must have shape"),
        (lambda q, k, v, b, s: (q, k, v, b.float(), s), TypeError, "beta must have the same"),
        (lambda q, k, v, b, s: (q, k, v, b, s.mT), ValueError, "initial_state must have shape"),
        (lambda q, k, v, b, s: (q, k[:, :2], v, b, s), ValueError, "k must have the same feat"),
    ],
)
def test_delta_rule_loop_rejects_bad_inputs(change, error, match):
    args = change(*deltanet_inputs(n=5, d_k=4, d_v=3))
    with pytest.raises(error, match=f"^delta_rule_loop: {match}"):
        delta_rule_loop(*args[:4], initial_state=args[4])


def test_deltanet_inputs_shapes_unit_keys_rates_and_seeds():
    q, k, v, beta, state = deltanet_inputs(2, 3, n=7, d_k=5, d_v=4, seed=16)
    assert [tuple(x.shape) for x in (q, k, v, beta, state)] == [
        (2, 3, 7, 5),
        (2, 3, 7, 5),
        (2, 3, 7, 4),
        (2, 3, 7),
        (2, 3, 4, 5),
    ]
    assert_close(k.norm(dim=-1), torch.ones(2, 3, 7, dtype=torch.float64), rtol=1e-14)
    assert bool(((beta >= 0) & (beta < 1)).all())
    again = deltanet_inputs(2, 3, n=7, d_k=5, d_v=4, seed=16, dtype=torch.float32)
    for x, x32 in zip((q, k, v, beta, state), again, strict=True):
        assert x32.dtype == torch.float32 and torch.equal(x32, x.float())


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((-1,), {}, ValueError, r"batch\[0\]"),
        ((), {"n": 2.5}, TypeError, "n must be"),
        ((), {"d_k": -1}, ValueError, "d_k must"),
    ],
)
def test_deltanet_inputs_rejects_bad_sizes(args, kwargs, error, match):
    sizes = {"n": 3, "d_k": 2, "d_v": 2} | kwargs
    with pytest.raises(error, match=f"^deltanet_inputs: {match}"):
        deltanet_inputs(*args, **sizes)


def test_triangular_system_inputs_shapes_diagonal_scale_and_seeds():
    q, k, diag, v = triangular_system_inputs(2, 3, n=50, d=4, d_v=5, seed=17)
    assert [tuple(x.shape) for x in (q, k, diag, v)] == [
        (2, 3, 50, 4),
        (2, 3, 50, 4),
        (2, 3, 50),
        (2, 3, 50, 5),
    ]
    assert bool(((diag.abs() >= 0.5) & (diag.abs() <= 2)).all())
    assert bool((diag < 0).any()) and bool((diag > 0).any())
    scaled = triangular_system_inputs(2, 3, n=50, d=4, d_v=5, seed=17, scale=0.5)
    assert_close(scaled[0], 0.5 * q, rtol=1e-15)
    for x, y in zip((k, diag, v), scaled[1:], strict=True):
        assert torch.equal(x, y)
    again = triangular_system_inputs(2, 3, n=50, d=4, d_v=5, seed=17, dtype=torch.float32)
    for x, x32 in zip((q, k, diag, v), again, strict=True):
        assert x32.dtype == torch.float32 and torch.equal(x32, x.float())


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((-1,), {}, ValueError, r"batch\[0\]"),
        ((), {"n": 2.5}, TypeError, "n must be"),
        ((), {"d_v": -1}, ValueError, "d_v must"),
        ((), {"scale": 0.0}, ValueError, "scale must be a positive finite number"),
    ],
)
def test_triangular_system_inputs_rejects_bad_sizes(args, kwargs, error, match):
    sizes = {"n": 3, "d": 2} | kwargs
    with pytest.raises(error, match=f"^triangular_system_inputs: {match}"):
        triangular_system_inputs(*args, **sizes)


# --- O(n) memory -----------------------------------------------------------------------------

N, D = 2**16, 16
PEAK_INCREASE_LIMIT_BYTES = 512 * 2**20  # one n×n float64 matrix would take 32 GiB


def solve_long_system():
    """Solves a DeltaNet-type system (unit keys, β ∈ (0, 1), λ = 1) of length 2^16, in a fresh
    process (`run_fresh`): how much the peak resident memory grew during the solve
    (`resident_peak_growth`) and the relative residual ‖T x − v‖/‖v‖, computed without T through
    causal linear attention: (T x)_i = x_i + Σ_{j<i} (q_i·k_j) x_j."""
    _, k, v = random_qkv(n=N, d=D)
    k = k / k.norm(dim=-1, keepdim=True)
    q = torch.rand(N, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * k
    diag = torch.ones(N, dtype=torch.float64)
    increase, _, x = resident_peak_growth(lambda: triangular_solve(q, k, diag, v))
    inclusive = linear_attention(q, k, x, causal=True, normalize=False, method="chunked")
    tx = x + inclusive - (q * k).sum(-1, keepdim=True) * x
    return {"increase": increase, "residual": relative_error(tx, v)}


@pytest.mark.slow
def test_triangular_solve_stays_in_linear_memory():
    root = Path(__file__).resolve().parents[1]
    child = run_fresh(solve_long_system, cwd=root, timeout=120)
    increase, residual = child["increase"], child["residual"]
    assert increase < PEAK_INCREASE_LIMIT_BYTES, f"peak RSS grew by {increase >> 20} MiB"
    assert float(residual) < 1e-12, f"relative residual {residual}"
