"""The self-attention layers of linattn_core.modules against quadratic references and against
torch.nn.MultiheadAttention, in float64; their validation."""

import functools

import pytest
import torch

from linattn_core import kernel_attention, linear_attention
from linattn_core.feature_maps import elu_plus_one, identity, relu, taylor
from linattn_core.modules import LinearSelfAttention, SoftmaxSelfAttention
from linattn_core.testing import assert_close

RTOL = 1e-10
F64 = torch.float64
METHODS = ["auto", "parallel", "recurrent", "chunked"]


# --- the layers ------------------------------------------------------------------------------


def split_heads(x, num_heads):
    """(B, N, d_model) -> (B, H, N, d), written with reshape/permute rather than the layer's
    unflatten/transpose."""
    b, n, d_model = x.shape
    return x.reshape(b, n, num_heads, d_model // num_heads).permute(0, 2, 1, 3)


def quadratic_reference(layer, x):
    """The layer's function with the N×N similarity matrix of `kernel_attention`."""
    projections = [x @ p.weight.T for p in (layer.q_proj, layer.k_proj, layer.v_proj)]
    if layer.q_proj.bias is not None:
        biases = (layer.q_proj.bias, layer.k_proj.bias, layer.v_proj.bias)
        projections = [p + b for p, b in zip(projections, biases, strict=True)]
    q, k, v = (split_heads(p, layer.num_heads) for p in projections)  # (B, H, N, d)
    phi_q, phi_k = layer.feature_map(q), layer.feature_map(k)
    heads = kernel_attention(phi_q, phi_k, v, causal=layer.causal, eps=layer.eps)
    merged = heads.permute(0, 2, 1, 3).reshape(x.shape)  # (B, N, d_model)
    return layer.out_proj(merged)


FEATURE_MAPS = {
    "elu_plus_one": elu_plus_one,
    "relu": relu,
    "taylor2": functools.partial(taylor, order=2),  # m ≠ d features
}


@pytest.mark.parametrize("feature_map", list(FEATURE_MAPS))
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("causal", [False, True])
# (d_model, H, N): one head, odd N, N = 1, one feature per head
@pytest.mark.parametrize(
    ("d_model", "num_heads", "n"), [(6, 1, 7), (6, 2, 13), (6, 3, 1), (5, 5, 9)]
)
def test_linear_self_attention_equals_quadratic_kernel_attention(
    d_model, num_heads, n, causal, method, feature_map
):
    torch.manual_seed(d_model + num_heads + n)
    layer = LinearSelfAttention(
        d_model,
        num_heads,
        feature_map=FEATURE_MAPS[feature_map],
        causal=causal,
        method=method,
        chunk_size=4,
        bias=num_heads == 2,
        dtype=F64,
    )
    x = torch.randn(2, n, d_model, dtype=F64)
    out = layer(x)
    assert out.shape == x.shape
    assert_close(out, quadratic_reference(layer, x), rtol=RTOL, name=method)


@pytest.mark.parametrize("causal", [False, True])
def test_linear_self_attention_accepts_unbatched_and_extra_batch_dims(causal):
    torch.manual_seed(1)
    layer = LinearSelfAttention(8, 4, causal=causal, dtype=F64)
    x = torch.randn(2, 3, 11, 8, dtype=F64)  # two batch dimensions
    out = layer(x)
    assert_close(out[1, 2], layer(x[1, 2]), rtol=1e-12, name="unbatched")
    assert_close(out.flatten(0, 1), layer(x.flatten(0, 1)), rtol=1e-12, name="flattened")


@pytest.mark.slow
def test_linear_self_attention_gradcheck():
    torch.manual_seed(2)
    layer = LinearSelfAttention(4, 2, causal=True, method="chunked", chunk_size=2, dtype=F64)
    names = [name for name, _ in layer.named_parameters()]
    parameters = [p.detach().clone().requires_grad_() for p in layer.parameters()]
    x = torch.randn(2, 5, 4, dtype=F64).requires_grad_()

    def forward(x, *parameters):
        return torch.func.functional_call(layer, dict(zip(names, parameters, strict=True)), (x,))

    assert torch.autograd.gradcheck(forward, (x, *parameters))


def test_causal_layer_ignores_the_future():
    torch.manual_seed(3)
    x = torch.randn(1, 9, 6, dtype=F64)
    changed = x.clone()
    changed[:, 5:] += 1.0
    for causal in (True, False):
        layer = LinearSelfAttention(6, 2, causal=causal, dtype=F64)
        before, after = layer(x), layer(changed)
        assert torch.equal(before[:, :5], after[:, :5]) is causal


@pytest.mark.parametrize("causal", [False, True])
def test_softmax_self_attention_matches_torch_multihead_attention(causal):
    torch.manual_seed(4)
    layer = SoftmaxSelfAttention(6, 3, causal=causal, bias=True, dtype=F64)
    torch_layer = torch.nn.MultiheadAttention(6, 3, bias=True, batch_first=True, dtype=F64)
    with torch.no_grad():
        torch_layer.in_proj_weight.copy_(
            torch.cat([layer.q_proj.weight, layer.k_proj.weight, layer.v_proj.weight])
        )
        torch_layer.in_proj_bias.copy_(
            torch.cat([layer.q_proj.bias, layer.k_proj.bias, layer.v_proj.bias])
        )
        torch_layer.out_proj.weight.copy_(layer.out_proj.weight)
        torch_layer.out_proj.bias.copy_(layer.out_proj.bias)
    x = torch.randn(2, 7, 6, dtype=F64)
    mask = torch.ones(7, 7, dtype=torch.bool).triu(1) if causal else None
    expected, _ = torch_layer(x, x, x, attn_mask=mask, need_weights=False)
    assert_close(layer(x), expected, rtol=1e-12)


def test_float32_layer_matches_its_float64_copy():
    torch.manual_seed(5)
    layer = LinearSelfAttention(16, 4, causal=True)
    layer64 = LinearSelfAttention(16, 4, causal=True, dtype=F64)
    layer64.load_state_dict({k: v.double() for k, v in layer.state_dict().items()})
    x = torch.randn(2, 50, 16, dtype=F64)
    out = layer(x.float())
    assert out.dtype == torch.float32
    assert_close(out, layer64(x), rtol=1e-5)


BAD_CONFIGURATIONS = [
    ({"d_model": 0}, ValueError, "d_model must be a positive int; got d_model=0"),
    ({"d_model": 6.0}, TypeError, "d_model must be a positive int"),
    ({"num_heads": 0}, ValueError, "num_heads must be a positive int; got num_heads=0"),
    ({"num_heads": 4}, ValueError, "num_heads must divide d_model; got d_model=6, num_heads=4"),
    ({"causal": "yes"}, TypeError, "causal must be a bool; got causal='yes'"),
    ({"feature_map": "elu"}, TypeError, "feature_map must be callable; got str"),
    ({"method": "fast"}, ValueError, "method must be one of 'auto', 'parallel', 'recurrent'"),
    ({"chunk_size": 0}, ValueError, "chunk_size must be a positive int; got chunk_size=0"),
    ({"eps": -1.0}, ValueError, "eps must be a non-negative finite number; got eps=-1.0"),
]


@pytest.mark.parametrize(("change", "error", "message"), BAD_CONFIGURATIONS)
def test_bad_configurations_raise_and_name_the_argument(change, error, message):
    """Wrong types raise TypeError, wrong values ValueError (`linattn_core.validation`)."""
    arguments = {"d_model": 6, "num_heads": 2} | change
    with pytest.raises(error, match="^LinearSelfAttention: " + _escaped(message)):
        LinearSelfAttention(**arguments)


def test_softmax_layer_validates_its_configuration():
    with pytest.raises(ValueError, match=r"^SoftmaxSelfAttention: num_heads must divide d_model"):
        SoftmaxSelfAttention(6, 4)


def test_bad_inputs_name_x():
    torch.manual_seed(6)
    layer = LinearSelfAttention(6, 2, dtype=F64)
    with pytest.raises(ValueError, match=_escaped("x must have d_model=6 features")):
        layer(torch.randn(2, 5, 4, dtype=F64))
    with pytest.raises(ValueError, match=_escaped("x must have at least 2 dimensions")):
        layer(torch.randn(6, dtype=F64))
    with pytest.raises(TypeError, match=_escaped("x must be a floating-point tensor")):
        layer(torch.ones(2, 5, 6, dtype=torch.long))


def _escaped(message):
    return message.replace("(", r"\(").replace(")", r"\)")


def test_identity_features_do_not_make_the_layer_linear():
    """With φ(x) = x the numerator (xW_q)(xW_k)ᵀ(xW_v) is cubic in x, and the normalized layer is
    homogeneous of degree one; neither is additive, so stacked layers do not collapse into one."""
    torch.manual_seed(7)
    layer = LinearSelfAttention(5, feature_map=identity, eps=0.0, dtype=F64)
    x, y = torch.randn(2, 8, 5, dtype=F64)

    def numerator(x):
        q, k, v = (proj(x) for proj in (layer.q_proj, layer.k_proj, layer.v_proj))
        return linear_attention(q, k, v, normalize=False)

    for block, degree in ((numerator, 3), (layer, 1)):
        assert_close(block(2 * x), 2**degree * block(x), rtol=1e-10, name=f"degree {degree}")
        additivity_gap = (block(x + y) - block(x) - block(y)).norm() / block(x + y).norm()
        assert additivity_gap > 0.1
