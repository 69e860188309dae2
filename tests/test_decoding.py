"""One decoding step at a time against the attention functions over the whole sequence, the
FLOPs a step costs, and bad inputs."""

import re

import pytest
import torch

from linattn_core import linear_attention, softmax_attention
from linattn_core.attention import LinearAttentionState
from linattn_core.costs import matmul_flops
from linattn_core.decoding import linear_decode_step, softmax_decode_step
from linattn_core.testing import assert_close, random_qkv


def decode_linear(phi_q, phi_k, v, state=None, **options):
    """Every position of `(..., N, ·)` inputs through `linear_decode_step`, and the final state."""
    steps = []
    for t in range(v.shape[-2]):
        out, state = linear_decode_step(
            phi_q[..., t, :], phi_k[..., t, :], v[..., t, :], initial_state=state, **options
        )
        steps.append(out)
    return torch.stack(steps, dim=-2), state


def decode_softmax(q, k, v, **options):
    steps = [
        softmax_decode_step(q[..., t, :], k[..., : t + 1, :], v[..., : t + 1, :], **options)
        for t in range(v.shape[-2])
    ]
    return torch.stack(steps, dim=-2)


@pytest.mark.parametrize(
    ("batch", "n", "d", "d_v"), [((), 1, 4, 4), ((), 37, 5, 3), ((2, 3), 9, 3, 6)]
)
def test_linear_decode_steps_are_causal_linear_attention(batch, n, d, d_v):
    phi_q, phi_k, v = random_qkv(*batch, n=n, d=d, d_v=d_v, seed=n + d, positive=True)
    out, state = decode_linear(phi_q, phi_k, v)
    expected = linear_attention(phi_q, phi_k, v, causal=True, method="recurrent")
    assert_close(out, expected, rtol=1e-12, name="linear decode steps")
    assert_close(state.S, v.mT @ phi_k, rtol=1e-12, name="final state S")
    assert_close(state.z, phi_k.sum(dim=-2), rtol=1e-12, name="final normalizer z")


@pytest.mark.parametrize("normalize", [True, False])
def test_decoding_continues_a_prompt_from_its_state(normalize):
    """A prompt through `linear_attention`, its final state into the decode steps: the steps
    give the rows of one call over prompt and continuation, and its final state."""
    phi_q, phi_k, v = random_qkv(2, n=30, d=5, d_v=3, positive=True)
    options = {"causal": True, "normalize": normalize, "eps": 1e-3}
    whole, final = linear_attention(phi_q, phi_k, v, output_final_state=True, **options)
    _, prompt_state = linear_attention(
        phi_q[..., :20, :], phi_k[..., :20, :], v[..., :20, :], output_final_state=True, **options
    )
    steps, state = decode_linear(
        phi_q[..., 20:, :], phi_k[..., 20:, :], v[..., 20:, :], prompt_state,
        normalize=normalize, eps=1e-3,
    )  # fmt: skip
    assert_close(steps, whole[..., 20:, :], rtol=1e-12, name="decode steps")
    assert_close(state.S, final.S, rtol=1e-12, name="S")
    assert (state.z is None) == (not normalize)


@pytest.mark.parametrize("scale", [None, 0.3])
@pytest.mark.parametrize(
    ("batch", "n", "d", "d_v"), [((), 1, 4, 4), ((), 37, 5, 3), ((2, 3), 9, 3, 6)]
)
def test_softmax_decode_steps_are_causal_softmax_attention(batch, n, d, d_v, scale):
    q, k, v = random_qkv(*batch, n=n, d=d, d_v=d_v, seed=n + d)
    expected = softmax_attention(q, k, v, causal=True, scale=scale)
    assert_close(decode_softmax(q, k, v, scale=scale), expected, rtol=1e-12)


@pytest.mark.parametrize("t", [1, 10, 1000])
def test_flops_per_step(t):
    d, d_v = 6, 4
    q, k, v = random_qkv(n=t, d=d, d_v=d_v, positive=True)
    assert matmul_flops(softmax_decode_step, q[-1], k, v) == 2 * t * (d + d_v)
    state = LinearAttentionState(v.new_zeros(d_v, d), v.new_zeros(d))
    flops = matmul_flops(linear_decode_step, q[-1], k[-1], v[-1], initial_state=state)
    assert flops == 4 * d * (d_v + 1)


def test_linear_decode_step_is_differentiable_and_leaves_its_state_alone():
    phi_q, phi_k, v = (x.requires_grad_() for x in random_qkv(n=1, d=3, d_v=2, positive=True))
    S, z = torch.ones(2, 3, dtype=v.dtype), torch.ones(3, dtype=v.dtype)
    out, state = linear_decode_step(phi_q[0], phi_k[0], v[0], initial_state=(S, z))
    assert_close(state.S, 1 + torch.outer(v[0], phi_k[0]).detach(), rtol=1e-15, name="S'")
    assert torch.equal(S, torch.ones(2, 3, dtype=v.dtype))  # a new state, not an update in place
    out.sum().backward()
    assert all(x.grad is not None for x in (phi_q, phi_k, v))


Q, K, V = random_qkv(n=5, d=4, d_v=3)
STATE = LinearAttentionState(torch.zeros(3, 4, dtype=torch.float64), torch.zeros(4))

BAD_SOFTMAX_INPUTS = [
    ((Q[0].long(), K, V), {}, TypeError, "q must be a floating-point tensor"),
    ((Q[0], K[0], V), {}, ValueError, "k_cache must have at least 2 dimensions"),
    ((Q[0, :3], K, V), {}, ValueError, "k_cache must have the shape (..., t, d) with t ≥ 1"),
    ((Q[0], K[:0], V[:0]), {}, ValueError, "got q.shape=(4,), k_cache.shape=(0, 4)"),
    ((Q[:2], K, V), {}, ValueError, "k_cache must have the shape (..., t, d)"),
    ((Q[0], K, V[:4]), {}, ValueError, "v_cache must have the shape (..., t, d_v)"),
    ((Q[0], K.float(), V), {}, TypeError, "k_cache must have the same dtype as q"),
    ((Q[0], K, V), {"scale": 0.0}, ValueError, "scale must be a positive finite number"),
]


@pytest.mark.parametrize(("args", "options", "error", "message"), BAD_SOFTMAX_INPUTS)
def test_bad_softmax_decode_inputs(args, options, error, message):
    with pytest.raises(error, match="^softmax_decode_step: .*" + re.escape(message)):
        softmax_decode_step(*args, **options)


BAD_LINEAR_INPUTS = [
    ((Q[0].long(), K[0], V[0]), {}, TypeError, "phi_q must be a floating"),
    ((Q[0], K[0, :3], V[0]), {}, ValueError, "phi_q and phi_k must have the same shape"),
    ((Q[0], K[0], V[:2]), {}, ValueError, "v.shape=(2, 3)"),
    ((Q[0], K[0], V[0].float()), {}, TypeError, "v must have the same dtype"),
    ((Q[0], K[0], V[0]), {"initial_state": (STATE.S[:, :2], STATE.z)}, ValueError, "S must have"),
    ((Q[0], K[0], V[0]), {"initial_state": (STATE.S, STATE.z[:2])}, ValueError, "z must have"),
    (
        (Q[0], K[0], V[0]),
        {"initial_state": (STATE.S.float(), STATE.z)},
        TypeError,
        "initial_state.S must have the same dtype",
    ),
    ((Q[0], K[0], V[0]), {"initial_state": STATE.S}, TypeError, "LinearAttentionState (S, z)"),
    ((Q[0], K[0], V[0]), {"eps": -1.0}, ValueError, "eps must be"),
    ((Q[0], K[0], V[0]), {"normalize": 1}, TypeError, "normalize must be a bool"),
]


@pytest.mark.parametrize(("args", "options", "error", "message"), BAD_LINEAR_INPUTS)
def test_bad_linear_decode_inputs(args, options, error, message):
    with pytest.raises(error, match="^linear_decode_step: .*" + re.escape(message)):
        linear_decode_step(*args, **options)
