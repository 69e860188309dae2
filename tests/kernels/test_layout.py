"""The plumbing that both operations share on their way to the kernels (`kernels/layout.py`):
any leading dimensions, empty inputs and initial states through method="triton", outputs, final
states and every gradient against the float64 chunked form. On the CPU the kernels run in the
Triton interpreter."""

import pytest
import torch

pytest.importorskip("triton")

from linattn_core import LinearAttentionState, delta_rule, linear_attention
from linattn_core.delta import deltanet_inputs
from linattn_core.testing import assert_close, random_qkv

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# no leading dimension, one, three (an odd one), and a batch without heads
BATCHES = [(), (2,), (1, 2, 1), (0, 3)]
# no token, and five (the kernels' work, slow in the interpreter)
LENGTHS = [0, pytest.param(5, marks=pytest.mark.slow)]


def outputs_and_gradients(fn, inputs, seed=1):
    """The outputs of `fn(*inputs)` and the gradients of every input for random output
    gradients (zeros for an input no output depends on: an empty reference output has no
    graph)."""
    leaves = [x.detach().clone().requires_grad_() for x in inputs]
    outputs = fn(*leaves)
    generator = torch.Generator().manual_seed(seed)
    grads = [torch.randn(o.shape, generator=generator, dtype=torch.float64).to(o) for o in outputs]
    pairs = [(o, g) for o, g in zip(outputs, grads, strict=True) if o.requires_grad]
    found = torch.autograd.grad(
        [o for o, _ in pairs], leaves, [g for _, g in pairs], allow_unused=True,
        materialize_grads=True,
    )  # fmt: skip
    return (*(o.detach() for o in outputs), *found)


def check_against_chunked(operation, inputs, rtol):
    """method="triton" on float32 inputs against method="chunked" on their float64 copies."""
    actual = outputs_and_gradients(lambda *x: operation(*x, "triton"), inputs)
    expected = outputs_and_gradients(
        lambda *x: operation(*x, "chunked"), [x.double().cpu() for x in inputs]
    )
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        assert a.shape == e.shape and a.dtype == torch.float32, i
        assert_close(a.cpu(), e, rtol=rtol, name=f"result {i}")


@pytest.mark.interpreter
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("batch", BATCHES)
def test_linear_attention_through_the_kernels(batch, n):
    phi_q, phi_k, v = random_qkv(*batch, n=n, d=16, d_v=32, positive=True)
    generator = torch.Generator().manual_seed(2)
    s0 = torch.rand(*batch, 32, 16, generator=generator, dtype=torch.float64)
    z0 = torch.rand(*batch, 16, generator=generator, dtype=torch.float64) + 1

    def attention(phi_q, phi_k, v, s0, z0, method):
        out, (s_n, z_n) = linear_attention(
            phi_q, phi_k, v, causal=True, method=method,
            initial_state=LinearAttentionState(s0, z0), output_final_state=True,
        )  # fmt: skip
        return out, s_n, z_n

    inputs = [x.float().to(DEVICE) for x in (phi_q, phi_k, v, s0, z0)]
    check_against_chunked(attention, inputs, rtol=1e-5)


@pytest.mark.interpreter
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("batch", BATCHES)
def test_delta_rule_through_the_kernels(batch, n):
    q, k, v, beta, s0 = deltanet_inputs(*batch, n=n, d_k=16, d_v=32)

    def rule(q, k, v, beta, s0, method):
        return delta_rule(q, k, v, beta, method=method, initial_state=s0)

    inputs = [x.float().to(DEVICE) for x in (q, k, v, beta, s0)]
    check_against_chunked(rule, inputs, rtol=1e-5)
