"""What one forward and backward pass of the Triton kernels asks of the host (`host_work`):
launches, torch operations, no synchronization. At short lengths the host's work is the pass's
time (each launch costs the host ~29 µs on the H200 machines: `figures/gpu/*/host.json`), so
it is counted here, where no GPU is needed."""

import pytest
import torch

pytest.importorskip("triton")

from linattn_core import linear_attention
from linattn_core.delta import delta_rule
from linattn_core.gated import gated_delta_rule, gated_deltanet_inputs
from linattn_core.kernels.linear_attention import backward, forward
from linattn_core.kernels.tools.launches import host_work
from linattn_core.testing import random_qkv

SEGMENTED = [
    "segment_sums_kernel",
    "segment_output_kernel",
    "segment_sums_bwd_kernel",
    "segment_dq_kernel",
    "segment_dk_kernel",
    "segment_dv_kernel",
]


def one_pass(n, *, normalize, states=False):
    """The host work of linear_attention(method="triton") forward and backward on (1, 16, n, 64)
    bfloat16 inputs, from an initial state to the final state when `states`."""
    q, k, v = random_qkv(1, 16, n=n, d=64, dtype=torch.bfloat16, positive=True)
    leaves = [x.requires_grad_() for x in (q, k, v)]
    options = {"causal": True, "normalize": normalize, "method": "triton"}
    if states:
        s0 = torch.zeros(1, 16, 64, 64, dtype=torch.bfloat16, requires_grad=True)
        z0 = torch.ones(1, 16, 64, dtype=torch.bfloat16, requires_grad=True) if normalize else None
        options |= {"initial_state": (s0, z0), "output_final_state": True}
        leaves += [x for x in (s0, z0) if x is not None]

    grads = [torch.randn_like(v)] + ([torch.randn_like(s0)] if states else [])

    def step():
        out = linear_attention(q, k, v, **options)
        torch.autograd.grad([out[0], out[1].S] if states else [out], leaves, grads)

    return host_work(step)


@pytest.mark.parametrize("normalize", [True, False])
def test_a_pass_over_1024_tokens_is_two_launches_and_no_torch_kernel(normalize):
    """One walk forward, one backward (`forward.ONE_WALK_CHUNKS`); besides, the outputs'
    allocations and, normalized, a = −g·o: a product and a sum (g in bfloat16 times o in
    float32 computes in float32, with no copy)."""
    work = one_pass(1024, normalize=normalize)
    assert work.launches == ["segment_output_kernel", "walk_bwd_kernel"]
    assert work.of_kind("synchronizing") == {}
    expected = {"aten.mul.Tensor": 1, "aten.sum.dim_IntList": 1} if normalize else {}
    assert work.of_kind("computing") == expected
    assert sum(work.of_kind("allocation").values()) == (6 if normalize else 4)


@pytest.mark.parametrize("states", [True, False])
def test_a_long_pass_launches_six_kernels_and_never_synchronizes(monkeypatch, states):
    """Past ONE_WALK_CHUNKS chunks on 132 multiprocessors the sequence is cut into segments: two
    kernels forward, four backward, and torch's prefix sums between them."""
    for module in (forward, backward):
        monkeypatch.setattr(module, "multiprocessors", lambda device: 132)
    work = one_pass(4096, normalize=True, states=states)
    assert work.launches == SEGMENTED
    assert work.of_kind("synchronizing") == {}
    assert work.of_kind("computing")["aten.cumsum_.default"] == 6


def test_states_add_no_launch_to_a_short_pass():
    work = one_pass(1024, normalize=True, states=True)
    assert work.launches == ["segment_output_kernel", "walk_bwd_kernel"]
    assert work.of_kind("synchronizing") == {}


@pytest.mark.parametrize("rule", [delta_rule, gated_delta_rule])
def test_a_delta_rule_pass_is_nine_launches_and_one_torch_kernel(rule):
    """Three kernels forward, six backward (the backward pass recomputes A, W, U and the
    states); besides, the zeros of the unused final state's gradient, which autograd makes and
    the backward kernel of the states reads. No synchronization. The gated rule's pass is the
    same kernels given the log-gates."""
    q, k, v, beta, g, _ = gated_deltanet_inputs(1, 16, n=1024, d_k=64, d_v=64)
    gates = (g,) if rule is gated_delta_rule else ()
    leaves = [x.to(torch.bfloat16).requires_grad_() for x in (q, k, v, beta, *gates)]
    grad = torch.randn_like(leaves[2])
    work = host_work(lambda: torch.autograd.grad(rule(*leaves, method="triton")[0], leaves, grad))
    forward_kernels = ["delta_prepare_kernel", "delta_states_kernel"]
    assert work.launches == [
        *forward_kernels, "delta_output_kernel", *forward_kernels, "delta_du_local_kernel",
        "delta_states_bwd_kernel", "delta_dqk_kernel", "delta_wy_kernel",
    ]  # fmt: skip
    assert work.of_kind("synchronizing") == {}
    assert work.of_kind("computing") == {"aten.zeros.default": 1}
