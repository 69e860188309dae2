"""Attention functions against their definitions, and every linear_attention form against
kernel_attention: outputs and gradients, in float64, over odd shapes."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from linattn_core import kernel_attention, linear_attention, softmax_attention
from linattn_core.feature_maps import taylor
from linattn_core.testing import assert_close, in_float64, random_qkv

METHODS = ["auto", "parallel", "recurrent", "chunked"]
RTOL = 1e-10

# (batch, N, d, d_v, chunk_size): batch dims, N = 1, N not a multiple of the chunk, chunk > N,
# chunk = 1, d_v ≠ d
SHAPES = [
    ((), 37, 4, 3, 8),
    ((3,), 16, 5, 5, 4),
    ((2, 3), 10, 3, 6, 4),
    ((), 1, 3, 2, 64),
    ((2,), 5, 4, 3, 64),
    ((2,), 7, 3, 2, 1),
]


def numerator_reference(phi_q, phi_k, v, *, causal):
    """Σ_j s_ij v_j straight from the definition, s_ij = φ(q_i)·φ(k_j), j ≤ i when causal."""
    similarities = phi_q @ phi_k.mT  # (..., N, N)
    if causal:
        similarities = similarities.tril()
    return similarities @ v


def reference(phi_q, phi_k, v, *, causal, normalize):
    if normalize:
        return kernel_attention(phi_q, phi_k, v, causal=causal)
    return numerator_reference(phi_q, phi_k, v, causal=causal)


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(("batch", "n", "d", "d_v", "chunk_size"), SHAPES)
def test_linear_attention_matches_kernel_attention(
    batch, n, d, d_v, chunk_size, method, causal, normalize
):
    phi_q, phi_k, v = random_qkv(*batch, n=n, d=d, d_v=d_v, positive=True)
    out = linear_attention(
        phi_q, phi_k, v, causal=causal, normalize=normalize, method=method, chunk_size=chunk_size
    )
    expected = reference(phi_q, phi_k, v, causal=causal, normalize=normalize)
    assert_close(out, expected, rtol=RTOL, name=method)


@given(
    batch=st.lists(st.integers(1, 3), max_size=2),
    n=st.integers(1, 40),
    d=st.integers(1, 6),
    d_v=st.integers(1, 5),
    chunk_size=st.integers(1, 48),
    causal=st.booleans(),
    normalize=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_methods_agree_on_random_shapes(batch, n, d, d_v, chunk_size, causal, normalize, seed):
    # unnormalized attention is linear in the features, so they may have either sign there
    phi_q, phi_k, v = random_qkv(*batch, n=n, d=d, d_v=d_v, seed=seed, positive=normalize)
    expected = reference(phi_q, phi_k, v, causal=causal, normalize=normalize)
    for method in METHODS:
        out = linear_attention(
            phi_q,
            phi_k,
            v,
            causal=causal,
            normalize=normalize,
            method=method,
            chunk_size=chunk_size,
        )
        assert_close(out, expected, rtol=RTOL, name=method)


@pytest.mark.parametrize("method", METHODS)
def test_float32_matches_the_float64_reference(method):
    phi_q, phi_k, v = random_qkv(2, n=300, d=8, d_v=4, dtype=torch.float32, positive=True)
    out = linear_attention(phi_q, phi_k, v, causal=True, method=method, chunk_size=32)
    assert out.dtype == torch.float32
    assert_close(out, in_float64(kernel_attention, phi_q, phi_k, v, causal=True), rtol=1e-5)


@pytest.mark.parametrize("method", METHODS)
def test_vanishing_denominator_is_computed_as_written(method):
    # s_1j = (1, -1): the denominator is 0 + eps, the numerator 1·1 - 1·3 = -2
    phi_q = torch.tensor([[1.0], [1.0]], dtype=torch.float64)
    phi_k = torch.tensor([[1.0], [-1.0]], dtype=torch.float64)
    v = torch.tensor([[1.0], [3.0]], dtype=torch.float64)
    out = linear_attention(phi_q, phi_k, v, method=method, eps=1e-3)
    assert_close(out, torch.full_like(v, -2.0 / 1e-3), rtol=1e-12)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("batch_and_n", [((2,), 0), ((0,), 5), ((2, 0), 0)])
def test_empty_inputs_give_empty_outputs(batch_and_n, causal):
    batch, n = batch_and_n
    q, k, v = random_qkv(*batch, n=n, d=3, d_v=2, positive=True)
    assert softmax_attention(q, k, v, causal=causal).shape == v.shape
    assert kernel_attention(q, k, v, causal=causal).shape == v.shape
    for method in METHODS:
        for normalize in (True, False):
            out = linear_attention(q, k, v, causal=causal, normalize=normalize, method=method)
            assert out.shape == v.shape


@pytest.mark.parametrize("scale", [None, 0.3])
@pytest.mark.parametrize("causal", [True, False])
def test_softmax_attention_matches_sdpa(causal, scale):
    q, k, v = random_qkv(2, 3, n=9, d=5, d_v=4)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    assert_close(softmax_attention(q, k, v, causal=causal, scale=scale), expected, rtol=1e-12)


@pytest.mark.parametrize("scale", [None, 0.3])
@pytest.mark.parametrize("causal", [True, False])
def test_softmax_attention_is_kernel_attention_with_exp_similarity(causal, scale):
    q, k, v = random_qkv(3, n=8, d=4, d_v=2)
    similarities = torch.exp((scale or 4**-0.5) * q @ k.mT)  # (3, N, N)
    if causal:
        similarities = similarities.tril()
    expected = (similarities @ v) / similarities.sum(dim=-1, keepdim=True)
    assert_close(softmax_attention(q, k, v, causal=causal, scale=scale), expected, rtol=1e-12)


@pytest.mark.parametrize("causal", [True, False])
def test_kernel_attention_with_taylor_features_approaches_softmax_attention(causal):
    # exp(q·k/√d) = Σ_p (q'·k')^p / p! for q' = q d^(-1/4); the truncation after order 12 is
    # below 1e-11 for the small inputs here
    q, k, v = random_qkv(2, n=6, d=3, d_v=2)
    q, k = 0.5 * q, 0.5 * k
    phi_q, phi_k = (taylor(x * 3**-0.25, order=12) for x in (q, k))
    out = kernel_attention(phi_q, phi_k, v, causal=causal, eps=0.0)
    assert_close(out, softmax_attention(q, k, v, causal=causal), rtol=1e-10)


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("method", METHODS)
def test_linear_attention_gradcheck(method, causal, normalize):
    inputs = [x.requires_grad_() for x in random_qkv(2, n=5, d=3, d_v=2, positive=True)]

    def attention(phi_q, phi_k, v):
        return linear_attention(
            phi_q, phi_k, v, causal=causal, normalize=normalize, method=method, chunk_size=2
        )

    assert torch.autograd.gradcheck(attention, inputs)


@pytest.mark.parametrize("causal", [True, False])
def test_softmax_and_kernel_attention_gradcheck(causal):
    inputs = [x.requires_grad_() for x in random_qkv(2, n=4, d=3, d_v=2, positive=True)]
    assert torch.autograd.gradcheck(lambda *x: softmax_attention(*x, causal=causal), inputs)
    assert torch.autograd.gradcheck(lambda *x: kernel_attention(*x, causal=causal), inputs)


def input_gradients(method, inputs, upstream, *, causal, normalize):
    inputs = [x.detach().requires_grad_() for x in inputs]
    out = linear_attention(
        *inputs, causal=causal, normalize=normalize, method=method, chunk_size=3
    )  # (2, N, d_v)
    out.backward(upstream)
    return [x.grad for x in inputs]


@pytest.mark.parametrize("layout", ["non-contiguous", "expanded"])
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("causal", [True, False])
def test_gradients_with_strided_upstream_gradients(causal, normalize, layout):
    inputs = random_qkv(2, n=7, d=3, d_v=4, positive=True)
    generator = torch.Generator().manual_seed(1)
    if layout == "non-contiguous":
        upstream = torch.randn(2, 4, 7, generator=generator, dtype=torch.float64).mT  # (2, 7, 4)
    else:
        upstream = torch.randn(4, generator=generator, dtype=torch.float64).expand(2, 7, 4)
    assert not upstream.is_contiguous()
    expected = input_gradients("parallel", inputs, upstream, causal=causal, normalize=normalize)
    for method in ("auto", "recurrent", "chunked"):
        actual = input_gradients(method, inputs, upstream, causal=causal, normalize=normalize)
        for name, grad, grad_expected in zip(
            ("phi_q", "phi_k", "v"), actual, expected, strict=True
        ):
            assert_close(grad, grad_expected, rtol=RTOL, name=f"{method} grad {name}")


def test_causal_output_ignores_the_future():
    phi_q, phi_k, v = random_qkv(n=9, d=3, d_v=2, positive=True)
    changed = v.clone()
    changed[5:] += 1.0
    for method in METHODS:
        before = linear_attention(phi_q, phi_k, v, causal=True, method=method, chunk_size=4)
        after = linear_attention(phi_q, phi_k, changed, causal=True, method=method, chunk_size=4)
        assert torch.equal(before[:5], after[:5]), method
        assert not torch.equal(before[5:], after[5:]), method


def test_reference_sanity():
    # the reference itself: uniform similarities average the visible values
    v = torch.arange(6.0, dtype=torch.float64).reshape(3, 2)
    ones = torch.ones(3, 1, dtype=torch.float64)
    out = kernel_attention(ones, ones, v, causal=True, eps=0.0)
    expected = torch.cumsum(v, dim=0) / torch.arange(1, 4, dtype=torch.float64)[:, None]
    assert_close(out, expected, rtol=1e-15)
