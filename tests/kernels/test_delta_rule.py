"""The delta rule's Triton kernels against the float64 recurrence: outputs, final state and every
gradient (q, k, v, β, initial state), ragged N, d_v ≠ d_k, poisoned buffers, 16-bit inputs, both
architectures' tiles, the triangular inverse itself, bad inputs. On the CPU they run in the
Triton interpreter (see conftest.py, `interpreter_bfloat16_dot`, for the fix of its bfloat16
tl.dot)."""

import pytest
import torch

pytest.importorskip("triton")

from linattn_core.delta import delta_rule, deltanet_inputs
from linattn_core.kernels.delta_rule.forward import delta_prepare
from linattn_core.testing import KERNEL_RTOL, assert_close, values_and_gradients

gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def rounded_inputs(*batch, dtype, **sizes):
    """`deltanet_inputs` rounded to `dtype` and held in float64: what the kernels see, exactly."""
    return [x.double() for x in deltanet_inputs(*batch, dtype=dtype, **sizes)]


def check_against_recurrence(inputs, *, dtype, rtol, with_state=True, device=DEVICE):
    """Outputs, final state and the gradients of q, k, v, β (and S_0) of method="triton" against
    the float64 recurrence, for random gradients of both outputs."""
    q, k, v, beta, state = inputs
    generator = torch.Generator().manual_seed(1)
    grad_o = torch.randn(v.shape, generator=generator, dtype=torch.float64).to(dtype).double()
    grad_s = torch.randn(state.shape, generator=generator, dtype=torch.float64).to(dtype).double()
    leaves = [q, k, v, beta] + ([state] if with_state else [])
    names = ["output", "final state", "dq", "dk", "dv", "dbeta", "dS_0"][: len(leaves) + 2]

    def run(method, tensors, grads):
        def rule(q, k, v, beta, initial=None):
            return delta_rule(q, k, v, beta, method=method, initial_state=initial)

        return values_and_gradients(rule, tensors, grads)

    expected = run("recurrent", leaves, (grad_o, grad_s))
    actual = run(
        "triton",
        [x.to(device, dtype) for x in leaves],
        (grad_o.to(device, dtype), grad_s.to(device, dtype)),
    )
    for name, a, e in zip(names, actual, expected, strict=True):
        assert a.dtype == dtype and a.shape == e.shape, name
        assert_close(a, e, rtol=rtol, name=name)


# (batch, N, d_k, d_v): a short sequence, one chunk and a token, d_v ≠ d_k both ways, 128 wide
CPU_SHAPES = [((1, 2), 100, 16, 32), ((2, 1), 65, 32, 16), ((), 37, 128, 128), ((2,), 128, 64, 64)]


@pytest.mark.interpreter
@pytest.mark.usefixtures("poisoned_empty")
@pytest.mark.parametrize("with_state", [True, False])
@pytest.mark.parametrize(("batch", "n", "d_k", "d_v"), CPU_SHAPES)
def test_float32_matches_the_recurrence(batch, n, d_k, d_v, with_state):
    inputs = rounded_inputs(*batch, n=n, d_k=d_k, d_v=d_v, dtype=torch.float32)
    check_against_recurrence(inputs, dtype=torch.float32, rtol=1e-5, with_state=with_state)


@pytest.mark.interpreter
@pytest.mark.usefixtures("poisoned_empty", "interpreter_bfloat16_dot")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("n", "d_k", "d_v"), [(200, 64, 32), (77, 16, 128)])
def test_16_bit_operands(arch, n, d_k, d_v, dtype):
    inputs = rounded_inputs(1, 1, n=n, d_k=d_k, d_v=d_v, dtype=dtype, seed=5)
    check_against_recurrence(inputs, dtype=dtype, rtol=KERNEL_RTOL[dtype])


@pytest.mark.interpreter
def test_prepare_computes_each_chunks_triangular_inverse():
    """A = (I + diag(β)(K Kᵀ ⊙ M⁻))⁻¹ of every chunk, W = A diag(β) K, Ũ = A diag(β) V."""
    _, k, v, beta, _ = rounded_inputs(1, 1, n=100, d_k=32, d_v=16, dtype=torch.float32)
    a, w, u = delta_prepare(
        *(x.float() for x in (k, v, beta)), chunk_size=64, arch=90, store_a=True
    )
    for t in range(2):
        rows = slice(64 * t, min(64 * t + 64, 100))
        k_c, v_c, b_c = k[0, 0, rows], v[0, 0, rows], beta[0, 0, rows, None]
        n_c = (b_c * k_c @ k_c.T).tril(-1)
        inverse = torch.linalg.inv(torch.eye(len(k_c), dtype=torch.float64) + n_c)
        size = len(k_c)
        assert_close(a[0, 0, 64 * t : 64 * t + size, :size], inverse, rtol=1e-6, name="A")
        assert_close(w[0, 0, rows], inverse @ (b_c * k_c), rtol=1e-6, name="W")
        assert_close(u[0, 0, rows], inverse @ (b_c * v_c), rtol=1e-6, name="Ũ")


@pytest.mark.interpreter
def test_a_repeated_key_keeps_the_inverse_bounded():
    """One unit key for every token and β = 1, the chapter's hard case for the Neumann series:
    forward substitution keeps A bounded (‖A‖_∞ ≤ 2) and the results as accurate as ever."""
    q, k, v, beta, state = rounded_inputs(1, 1, n=128, d_k=16, d_v=16, dtype=torch.float32)
    k = k[:, :, :1].expand_as(k).contiguous()
    beta = torch.ones_like(beta)
    a, _, _ = delta_prepare(
        k.float(), v.float(), beta.float(), chunk_size=64, arch=90, store_a=True
    )
    assert a.abs().sum(dim=-1).max() <= 2 + 1e-5
    check_against_recurrence([q, k, v, beta, state], dtype=torch.float32, rtol=1e-5)


@pytest.mark.interpreter
@pytest.mark.usefixtures("poisoned_empty")
def test_expanded_output_gradient_and_an_unused_state():
    # out.sum(): a stride-0 gradient; the final state does not enter the loss
    q, k, v, beta, _ = rounded_inputs(2, n=70, d_k=16, d_v=16, dtype=torch.float32)
    leaves = [x.float().requires_grad_() for x in (q, k, v, beta)]
    delta_rule(*leaves, method="triton")[0].sum().backward()
    references = [x.detach().requires_grad_() for x in (q, k, v, beta)]
    delta_rule(*references)[0].sum().backward()
    for leaf, reference in zip(leaves, references, strict=True):
        assert_close(leaf.grad, reference.grad, rtol=1e-5)


@pytest.mark.interpreter
@pytest.mark.parametrize(("batch", "n"), [((2, 3), 0), ((0, 3), 5)])
def test_empty_inputs(batch, n):
    q, k, v, beta, _ = rounded_inputs(*batch, n=n, d_k=16, d_v=32, dtype=torch.float32)
    q = q.float().requires_grad_()
    o, final = delta_rule(q, k.float(), v.float(), beta.float(), method="triton")
    assert o.shape == (*batch, n, 32) and final.shape == (*batch, 32, 16)
    (o.sum() + final.sum()).backward()
    assert q.grad.shape == q.shape


def ones(*shape, dtype=torch.float32):
    return torch.ones(*shape, dtype=dtype, device=DEVICE)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((ones(1, 1, 8, 24),) * 3 + (ones(1, 1, 8),), {}, ValueError, r"d = q.shape\[-1\]"),
        ((ones(1, 1, 8, 16),) * 2 + (ones(1, 1, 8, 48), ones(1, 1, 8)), {}, ValueError, "d_v"),
        ((ones(1, 1, 8, 16, dtype=torch.float64),) * 3 + (ones(1, 1, 8, dtype=torch.float64),),
         {}, TypeError, "float64"),
        ((ones(1, 1, 8, 16),) * 3 + (ones(1, 1, 8),), {"chunk_size": 32}, ValueError, "chunk_size"),
        ((ones(1, 1, 8, 16),) * 3 + (ones(1, 8),), {}, ValueError, "beta must have shape"),
    ],
)  # fmt: skip
def test_bad_inputs(args, kwargs, error, match):
    with pytest.raises(error, match=match) as raised:
        delta_rule(*args, method="triton", **kwargs)
    assert str(raised.value).startswith("delta_rule: ")


@gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize(
    ("batch", "n", "d_k", "d_v"),
    [((2, 4), 1, 16, 16), ((2, 4), 1000, 64, 64), ((1, 8), 4099, 128, 128), ((3, 2), 777, 32, 128)],
)
def test_gpu_matches_the_recurrence(batch, n, d_k, d_v, dtype):
    inputs = rounded_inputs(*batch, n=n, d_k=d_k, d_v=d_v, dtype=dtype)
    check_against_recurrence(inputs, dtype=dtype, rtol=KERNEL_RTOL[dtype], device="cuda")
