"""The self-attention layers against quadratic references, and the identities of chapter 1
(kernels, PSD Gram matrices, the cubic φ(x) = x block, FLOP counts, the memory-saving
gradients) that tests/test_attention.py and tests/test_feature_maps.py do not cover."""

import functools
import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from linattn_core import kernel_attention, linear_attention, softmax_attention
from linattn_core.feature_maps import elu_plus_one, identity, relu, taylor
from linattn_core.modules import LinearSelfAttention, SoftmaxSelfAttention
from linattn_core.testing import assert_close, random_qkv

RTOL = 1e-10
F64 = torch.float64
METHODS = ["auto", "parallel", "recurrent", "chunked"]


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def min_eigenvalue(gram):
    return torch.linalg.eigvalsh(gram)[0].item()


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
    x = randn(2, n, d_model, seed=n)
    out = layer(x)
    assert out.shape == x.shape
    assert_close(out, quadratic_reference(layer, x), rtol=RTOL, name=method)


@pytest.mark.parametrize("causal", [False, True])
def test_linear_self_attention_accepts_unbatched_and_extra_batch_dims(causal):
    torch.manual_seed(1)
    layer = LinearSelfAttention(8, 4, causal=causal, dtype=F64)
    x = randn(2, 3, 11, 8)  # two batch dimensions
    out = layer(x)
    assert_close(out[1, 2], layer(x[1, 2]), rtol=1e-12, name="unbatched")
    assert_close(out.flatten(0, 1), layer(x.flatten(0, 1)), rtol=1e-12, name="flattened")


def test_linear_self_attention_gradcheck():
    torch.manual_seed(2)
    layer = LinearSelfAttention(4, 2, causal=True, method="chunked", chunk_size=2, dtype=F64)
    names = [name for name, _ in layer.named_parameters()]
    parameters = [p.detach().clone().requires_grad_() for p in layer.parameters()]
    x = randn(2, 5, 4).requires_grad_()

    def forward(x, *parameters):
        return torch.func.functional_call(layer, dict(zip(names, parameters, strict=True)), (x,))

    assert torch.autograd.gradcheck(forward, (x, *parameters))


def test_causal_layer_ignores_the_future():
    torch.manual_seed(3)
    x = randn(1, 9, 6)
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
    x = randn(2, 7, 6)
    mask = torch.ones(7, 7, dtype=torch.bool).triu(1) if causal else None
    expected, _ = torch_layer(x, x, x, attn_mask=mask, need_weights=False)
    assert_close(layer(x), expected, rtol=1e-12)


def test_float32_layer_matches_its_float64_copy():
    torch.manual_seed(5)
    layer = LinearSelfAttention(16, 4, causal=True)
    layer64 = LinearSelfAttention(16, 4, causal=True, dtype=F64)
    layer64.load_state_dict({k: v.double() for k, v in layer.state_dict().items()})
    x = randn(2, 50, 16)
    out = layer(x.float())
    assert out.dtype == torch.float32
    assert_close(out, layer64(x), rtol=1e-5)


BAD_CONFIGURATIONS = [
    ({"d_model": 0}, "d_model must be a positive int; got d_model=0"),
    ({"d_model": 6.0}, "d_model must be a positive int"),
    ({"num_heads": 0}, "num_heads must be a positive int; got num_heads=0"),
    ({"num_heads": 4}, "num_heads must divide d_model; got d_model=6, num_heads=4"),
    ({"causal": "yes"}, "causal must be a bool; got causal='yes'"),
    ({"feature_map": "elu"}, "feature_map must be callable; got str"),
    ({"method": "fast"}, "method must be one of 'auto', 'parallel', 'recurrent', 'chunked'"),
    ({"chunk_size": 0}, "chunk_size must be a positive int; got chunk_size=0"),
    ({"eps": -1.0}, "eps must be a non-negative finite number; got eps=-1.0"),
]


@pytest.mark.parametrize(("change", "message"), BAD_CONFIGURATIONS)
def test_bad_configurations_raise_value_error_naming_the_argument(change, message):
    arguments = {"d_model": 6, "num_heads": 2} | change
    with pytest.raises(ValueError, match="^LinearSelfAttention: " + _escaped(message)):
        LinearSelfAttention(**arguments)


def test_softmax_layer_validates_its_configuration():
    with pytest.raises(ValueError, match=r"^SoftmaxSelfAttention: num_heads must divide d_model"):
        SoftmaxSelfAttention(6, 4)


def test_bad_inputs_name_x():
    layer = LinearSelfAttention(6, 2, dtype=F64)
    with pytest.raises(ValueError, match=_escaped("x must have d_model=6 features")):
        layer(randn(2, 5, 4))
    with pytest.raises(ValueError, match=_escaped("x must have at least 2 dimensions")):
        layer(randn(6))
    with pytest.raises(TypeError, match=_escaped("x must be a floating-point tensor")):
        layer(torch.ones(2, 5, 6, dtype=torch.long))


def _escaped(message):
    return message.replace("(", r"\(").replace(")", r"\)")


# --- kernels and Gram matrices ----------------------------------------------------------------


def test_polynomial_kernel_feature_map():
    x, y = randn(50, 2, seed=1), randn(50, 2, seed=2)

    def features(x):  # [x₁², x₂², √2 x₁x₂]
        return torch.stack([x[:, 0] ** 2, x[:, 1] ** 2, math.sqrt(2) * x[:, 0] * x[:, 1]], dim=1)

    assert_close(features(x) @ features(y).T, (x @ y.T) ** 2, rtol=1e-12)
    # any d: φ(x) = vec(x xᵀ), d² features
    x, y = randn(30, 5, seed=3), randn(30, 5, seed=4)
    outer = torch.einsum("ni,nj->nij", x, x).flatten(1), torch.einsum("ni,nj->nij", y, y).flatten(1)
    assert_close(outer[0] @ outer[1].T, (x @ y.T) ** 2, rtol=1e-12)


def test_polynomial_kernel_with_constant_feature_map():
    c = 1.5
    x, y = randn(40, 2, seed=5), randn(40, 2, seed=6)

    def features(x):  # (x·y + c)² in 2-D: six features
        x1, x2 = x[:, 0], x[:, 1]
        root = math.sqrt(2 * c)
        columns = [torch.full_like(x1, c), root * x1, root * x2, x1**2, x2**2]
        return torch.stack([*columns, math.sqrt(2) * x1 * x2], dim=1)

    assert_close(features(x) @ features(y).T, (x @ y.T + c) ** 2, rtol=1e-12)


def test_elu_of_dot_product_plus_one_is_not_psd():
    x = torch.tensor([-2.0, -1.0, 1.0, 2.0], dtype=F64)
    gram = F.elu(torch.outer(x, x)) + 1  # k(x, y) = elu(xy) + 1
    assert torch.equal(gram, gram.T)
    assert min_eigenvalue(gram) < -0.01
    c = torch.tensor([-4.0, 7.0, -7.0, 4.0], dtype=F64)
    exact = 20 + 112 * math.exp(-2) - 98 * math.exp(-1) - 32 * math.exp(-4)
    assert math.isclose((c @ gram @ c).item(), exact, rel_tol=1e-12)
    assert exact < -1.4


@pytest.mark.parametrize("d", [1, 3, 8])
def test_elu_plus_one_feature_kernel_is_psd(d):
    x = 2 * randn(40, d, seed=d)
    features = elu_plus_one(x)  # (40, d)
    gram = features @ features.T  # k(x, y) = (elu(x) + 1)ᵀ(elu(y) + 1)
    scale = torch.linalg.eigvalsh(gram)[-1].item()
    assert min_eigenvalue(gram) > -1e-12 * scale
    assert bool((gram > 0).all())
    c = randn(40, seed=10 + d)
    assert math.isclose(c @ gram @ c, (features.T @ c).square().sum(), rel_tol=1e-10)


def feature_map_from_eigendecomposition(gram):
    """Φ = U √Λ, rows φ(x_i), for a PSD Gram matrix; roundoff eigenvalues below 0 are set to 0."""
    eigenvalues, eigenvectors = torch.linalg.eigh(gram)
    return eigenvectors * eigenvalues.clamp(min=0).sqrt()


@pytest.mark.parametrize("kernel", ["exp", "gaussian", "linear, N > d"])
def test_feature_map_from_eigendecomposition_reproduces_the_gram_matrix(kernel):
    x = randn(12, 3, seed=7)
    grams = {
        "exp": torch.exp(x @ x.T),
        "gaussian": torch.exp(-(torch.cdist(x, x) ** 2) / 2),
        "linear, N > d": x @ x.T,  # rank 3: nine zero eigenvalues, up to roundoff
    }
    gram = grams[kernel]
    features = feature_map_from_eigendecomposition(gram)
    assert_close(features @ features.T, gram, rtol=1e-12)


def test_linear_kernel_gram_is_psd_and_singular_beyond_d_points():
    x = randn(10, 4, seed=8)
    eigenvalues = torch.linalg.eigvalsh(x @ x.T)
    scale = eigenvalues[-1].item()
    assert eigenvalues[0].item() > -1e-12 * scale
    assert int((eigenvalues > 1e-10 * scale).sum()) == 4 == torch.linalg.matrix_rank(x @ x.T)


def test_orthogonal_features_give_identity_gram():
    features, _ = torch.linalg.qr(randn(6, 4, seed=9))  # orthonormal columns
    gram = features.T @ features  # four orthonormal feature vectors
    assert_close(gram, torch.eye(4, dtype=F64), rtol=1e-12)
    assert min_eigenvalue(gram) > 0.99  # positive definite, not merely semi-definite


def test_identity_matrix_quadratic_form_and_eigenvalues():
    c = randn(7, seed=10)
    assert math.isclose(c @ torch.eye(7, dtype=F64) @ c, (c * c).sum(), rel_tol=1e-15)
    assert torch.equal(torch.linalg.eigvalsh(torch.eye(7, dtype=F64)), torch.ones(7, dtype=F64))


def test_composition_of_linear_maps_is_one_matrix():
    a1, a2, a3, x = randn(5, 4, seed=11), randn(3, 5, seed=12), randn(2, 3, seed=13), randn(4)
    assert_close(a3 @ (a2 @ (a1 @ x)), (a3 @ a2 @ a1) @ x, rtol=1e-12)


def test_elu_plus_one_is_not_linear():
    phi = elu_plus_one
    one, minus_one = torch.tensor([1.0], dtype=F64), torch.tensor([-1.0], dtype=F64)
    lhs, rhs = phi(2 * one + minus_one), 2 * phi(one) + phi(minus_one)
    assert lhs.item() == 2.0
    assert math.isclose(rhs.item(), 4 + math.exp(-1), rel_tol=1e-15)


# --- attention identities -----------------------------------------------------------------------


def test_misprinted_denominator_collapses_to_the_mean_of_v():
    # Σ_j exp(q_i·k_j) v_j / Σ_k exp(q_i·k_j): the denominator does not depend on k
    q, k, v = random_qkv(n=9, d=4, d_v=3)
    scores = torch.exp(q @ k.T / 2)  # (N, N), e_ij with scale 1/√d = 1/2
    misprinted_denominator = sum(scores for _k in range(9))  # the summand has no k in it
    misprinted = (scores / misprinted_denominator) @ v
    assert_close(misprinted, v.mean(dim=0).expand_as(v), rtol=1e-14)
    corrected = (scores @ v) / scores.sum(dim=1, keepdim=True)  # Σ_j e_ij v_j / Σ_k e_ik
    assert_close(corrected, softmax_attention(q, k, v), rtol=1e-12)


def identity_feature_block(x, w_q, w_k, w_v, *, normalize):
    """Attention with φ(x) = x on projections of x: numerator (XW_q)(XW_k)ᵀ(XW_v)."""
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return linear_attention(identity(q), identity(k), v, normalize=normalize, eps=0.0)


def test_identity_feature_block_is_cubic_not_linear():
    w_q, w_k, w_v = (randn(5, 5, seed=s) for s in (14, 15, 16))
    x, y = randn(8, 5, seed=17), randn(8, 5, seed=18)
    block = functools.partial(identity_feature_block, w_q=w_q, w_k=w_k, w_v=w_v, normalize=False)
    assert_close(block(2 * x), 8 * block(x), rtol=1e-12)
    assert_close(block(-x), -block(x), rtol=1e-12)
    additivity_gap = (block(x + y) - block(x) - block(y)).norm() / block(x + y).norm()
    assert additivity_gap > 0.1
    normalized = functools.partial(
        identity_feature_block, w_q=w_q, w_k=w_k, w_v=w_v, normalize=True
    )
    # numerator cubic over denominator quadratic: homogeneous of degree 1, still not additive
    assert_close(normalized(3 * x), 3 * normalized(x), rtol=1e-10)
    gap = (normalized(x + y) - normalized(x) - normalized(y)).norm() / normalized(x + y).norm()
    assert gap > 0.1


def test_similarity_matrix_rank_is_bounded_by_the_feature_dimension():
    q, k, _ = random_qkv(n=32, d=4)
    similarities = elu_plus_one(q) @ elu_plus_one(k).T  # (32, 32), rank ≤ 4
    assert torch.linalg.matrix_rank(similarities) == 4
    assert torch.linalg.matrix_rank(torch.exp(q @ k.T / 2)) == 32


def test_softmax_rows_sharpen_elu_plus_one_rows_do_not():
    q, k, _ = random_qkv(n=12, d=6, seed=3)
    query = q[0]

    def max_weights(sharpness):
        softmax_row = torch.softmax(sharpness * k @ query / math.sqrt(6), dim=0)
        elu_row = elu_plus_one(k) @ elu_plus_one(sharpness * query)
        return softmax_row.max().item(), (elu_row / elu_row.sum()).max().item()

    soft_1, elu_1 = max_weights(1.0)
    soft_100, elu_100 = max_weights(100.0)
    assert soft_100 > 0.999 > soft_1
    assert elu_100 < 0.5  # the elu+1 row tends to a fixed, spread-out limit
    elu_limit = elu_plus_one(k) @ relu(query)  # φ(βq)/β → relu(q) as β → ∞
    assert math.isclose(elu_100, (elu_limit / elu_limit.sum()).max().item(), rel_tol=1e-2)
    assert elu_1 < 0.5


def online_softmax_attention(q, k, v, block):
    """FlashAttention's recurrence: keys in blocks, a running max, row sum and output."""
    running_max = q.new_full((q.shape[0], 1), -math.inf)  # (N, 1)
    total = q.new_zeros(q.shape[0], 1)  # (N, 1)
    out = q.new_zeros(q.shape[0], v.shape[1])  # (N, d_v)
    for start in range(0, k.shape[0], block):
        scores = q @ k[start : start + block].T / math.sqrt(q.shape[1])  # (N, block)
        new_max = torch.maximum(running_max, scores.max(dim=1, keepdim=True).values)
        weights = torch.exp(scores - new_max)  # (N, block)
        rescale = torch.exp(running_max - new_max)  # (N, 1)
        total = rescale * total + weights.sum(dim=1, keepdim=True)
        out = rescale * out + weights @ v[start : start + block]
        running_max = new_max
    return out / total


@pytest.mark.parametrize("block", [1, 4, 7, 64])
def test_online_softmax_equals_softmax_attention(block):
    q, k, v = random_qkv(n=23, d=5, d_v=3)
    expected = softmax_attention(4 * q, k, v)
    assert_close(online_softmax_attention(4 * q, k, v, block), expected, rtol=1e-12)


def causal_numerator_gradients(phi_q, phi_k, v, grad_out):
    """Gradients of o_i = φ(q_i)·Σ_{j≤i} φ(k_j) v_jᵀ with O(d d_v) extra memory: a forward
    running sum for φ(q), a backward one for φ(k) and v (Katharopoulos et al., eq. 13–15)."""
    n, d, d_v = phi_q.shape[0], phi_q.shape[1], v.shape[1]
    grad_q, grad_k, grad_v = torch.empty_like(phi_q), torch.empty_like(phi_k), torch.empty_like(v)
    state = phi_q.new_zeros(d, d_v)  # Σ_{j≤i} φ(k_j) v_jᵀ
    for i in range(n):
        state = state + torch.outer(phi_k[i], v[i])
        grad_q[i] = state @ grad_out[i]
    state = phi_q.new_zeros(d, d_v)  # Σ_{j≥i} φ(q_j) g_jᵀ
    for i in reversed(range(n)):
        state = state + torch.outer(phi_q[i], grad_out[i])
        grad_k[i], grad_v[i] = state @ v[i], state.T @ phi_k[i]
    return grad_q, grad_k, grad_v


def test_constant_memory_gradients_match_autograd():
    inputs = [x.requires_grad_() for x in random_qkv(n=11, d=4, d_v=3, positive=True)]
    grad_out = randn(11, 3, seed=19)
    out = linear_attention(*inputs, causal=True, normalize=False, method="parallel")
    expected = torch.autograd.grad(out, inputs, grad_out)
    actual = causal_numerator_gradients(*(x.detach() for x in inputs), grad_out)
    for name, a, e in zip(("phi_q", "phi_k", "v"), actual, expected, strict=True):
        assert_close(a, e, rtol=1e-12, name=name)


# --- FLOP counts of the chapter ------------------------------------------------------------------


def matmul_flops(fn, *args, **kwargs):
    with FlopCounterMode(display=False) as counter:
        fn(*args, **kwargs)
    return counter.get_total_flops()


@pytest.mark.parametrize(("n", "d", "d_v"), [(37, 5, 3), (64, 8, 8), (1, 2, 7)])
def test_flop_formulas(n, d, d_v):
    q, k, v = random_qkv(2, n=n, d=d, d_v=d_v, positive=True)
    b = 2
    softmax = b * (2 * n * n * d + 2 * n * n * d_v)  # QKᵀ, then AV
    assert matmul_flops(softmax_attention, q, k, v) == softmax
    assert matmul_flops(softmax_attention, q, k, v, causal=True) == softmax
    assert matmul_flops(kernel_attention, q, k, v) == softmax
    assert matmul_flops(F.scaled_dot_product_attention, q, k, v) == softmax
    # φ(K)ᵀ[V 1] and φ(Q)S: the denominator is one more value column
    linear = b * (2 * n * d * (d_v + 1) + 2 * n * d * (d_v + 1))
    assert matmul_flops(linear_attention, q, k, v, method="chunked") == linear
    parallel = b * (2 * n * n * d + 2 * n * n * (d_v + 1))
    assert matmul_flops(linear_attention, q, k, v, method="parallel") == parallel


@pytest.mark.parametrize(("n", "chunk_size"), [(37, 8), (64, 16), (5, 64), (50, 1)])
def test_causal_chunked_flop_formula(n, chunk_size):
    d, d_v = 4, 3
    q, k, v = random_qkv(n=n, d=d, d_v=d_v, positive=True)
    c = min(chunk_size, n)
    padded = c * math.ceil(n / c)
    # within chunks: (C×d)(d×C) and (C×C)(C×(d_v+1)); across chunks: chunk states and queries
    intra = 2 * padded * c * d + 2 * padded * c * (d_v + 1)
    inter = 2 * padded * d * (d_v + 1) + 2 * padded * d * (d_v + 1)
    flops = matmul_flops(
        linear_attention, q, k, v, causal=True, method="chunked", chunk_size=chunk_size
    )
    assert flops == intra + inter
