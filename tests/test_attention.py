"""Attention functions against their definitions, every linear_attention form against
kernel_attention and online softmax attention against softmax_attention: outputs and gradients,
in float64, over odd shapes; the kernel facts and attention identities of chapter 1 behind them,
and the FLOPs each form performs."""

import math
import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from linattn_core import kernel_attention, linear_attention, softmax_attention
from linattn_core.attention import LinearAttentionState, online_softmax_attention
from linattn_core.costs import matmul_flops
from linattn_core.feature_maps import elu_plus_one, relu, taylor
from linattn_core.testing import assert_close, in_float64, random_qkv, run_python
from tests.shapes import CHUNKED_SHAPES, RANDOM_SHAPES

F64 = torch.float64
METHODS = ["auto", "parallel", "recurrent", "chunked"]
RTOL = 1e-10


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
@pytest.mark.parametrize(("batch", "n", "d", "d_v", "chunk_size"), CHUNKED_SHAPES)
def test_linear_attention_matches_kernel_attention(
    batch, n, d, d_v, chunk_size, method, causal, normalize
):
    phi_q, phi_k, v = random_qkv(*batch, n=n, d=d, d_v=d_v, positive=True)
    out = linear_attention(
        phi_q, phi_k, v, causal=causal, normalize=normalize, method=method, chunk_size=chunk_size
    )
    expected = reference(phi_q, phi_k, v, causal=causal, normalize=normalize)
    assert_close(out, expected, rtol=RTOL, name=method)


@pytest.mark.slow
@given(**RANDOM_SHAPES, causal=st.booleans(), normalize=st.booleans())
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


# --- online softmax attention ------------------------------------------------------------------


@pytest.mark.parametrize("scale", [None, 0.3, 4.0])
@pytest.mark.parametrize("chunk_size", [1, 4, 7, 23, 64])
@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_online_softmax_attention_equals_softmax_attention(batch, chunk_size, scale):
    q, k, v = random_qkv(*batch, n=23, d=5, d_v=3)
    q = 4 * q  # large scores: the running max must rescale, or exp would overflow in float32
    out = online_softmax_attention(q, k, v, chunk_size=chunk_size, scale=scale)
    assert_close(out, softmax_attention(q, k, v, scale=scale), rtol=1e-12)


def test_online_softmax_attention_is_stable_in_float32():
    q, k, v = random_qkv(2, n=100, d=8, d_v=4, dtype=torch.float32)
    out = online_softmax_attention(30 * q, k, v, chunk_size=16)  # scores up to ~100: exp overflows
    assert out.dtype == torch.float32
    assert_close(out, in_float64(softmax_attention, 30 * q, k, v), rtol=1e-5)


def test_online_softmax_attention_has_the_flops_of_softmax_attention():
    q, k, v = random_qkv(n=300, d=16, d_v=8)
    online = matmul_flops(online_softmax_attention, q, k, v, chunk_size=32)
    assert online == matmul_flops(softmax_attention, q, k, v) == 2 * 300**2 * (16 + 8)


def test_online_softmax_attention_gradcheck():
    inputs = [x.requires_grad_() for x in random_qkv(2, n=5, d=3, d_v=2)]
    assert torch.autograd.gradcheck(lambda *x: online_softmax_attention(*x, chunk_size=2), inputs)


@pytest.mark.parametrize("batch_and_n", [((2,), 0), ((0,), 5)])
def test_online_softmax_attention_of_empty_inputs(batch_and_n):
    batch, n = batch_and_n
    q, k, v = random_qkv(*batch, n=n, d=3, d_v=2)
    assert online_softmax_attention(q, k, v).shape == v.shape


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"chunk_size": 0}, ValueError, "chunk_size must be a positive int; got chunk_size=0"),
        ({"chunk_size": 2.0}, TypeError, "chunk_size must be a positive int; got chunk_size=2.0"),
        ({"scale": -1.0}, ValueError, "scale must be a positive finite number; got scale=-1.0"),
    ],
)
def test_online_softmax_attention_rejects_bad_options(options, error, message):
    q, k, v = random_qkv(n=4, d=3)
    with pytest.raises(error, match="^online_softmax_attention: " + re.escape(message)):
        online_softmax_attention(q, k, v, **options)


def test_online_softmax_attention_validates_its_tensors():
    q, k, v = random_qkv(n=4, d=3)
    with pytest.raises(ValueError, match=r"^online_softmax_attention: k must have the same"):
        online_softmax_attention(q, k[:, :2], v)


def test_reference_sanity():
    # the reference itself: uniform similarities average the visible values
    v = torch.arange(6.0, dtype=torch.float64).reshape(3, 2)
    ones = torch.ones(3, 1, dtype=torch.float64)
    out = kernel_attention(ones, ones, v, causal=True, eps=0.0)
    expected = torch.cumsum(v, dim=0) / torch.arange(1, 4, dtype=torch.float64)[:, None]
    assert_close(out, expected, rtol=1e-15)


# --- kernels: the similarities behind kernel_attention, and their Gram matrices ----------------


def min_eigenvalue(gram):
    return torch.linalg.eigvalsh(gram)[0].item()


def test_polynomial_kernel_feature_map():
    torch.manual_seed(1)
    x, y = torch.randn(50, 2, dtype=F64), torch.randn(50, 2, dtype=F64)

    def features(x):  # [x₁², x₂², √2 x₁x₂]
        return torch.stack([x[:, 0] ** 2, x[:, 1] ** 2, math.sqrt(2) * x[:, 0] * x[:, 1]], dim=1)

    assert_close(features(x) @ features(y).T, (x @ y.T) ** 2, rtol=1e-12)
    # any d: φ(x) = vec(x xᵀ), d² features
    x, y = torch.randn(30, 5, dtype=F64), torch.randn(30, 5, dtype=F64)
    outer = torch.einsum("ni,nj->nij", x, x).flatten(1), torch.einsum("ni,nj->nij", y, y).flatten(1)
    assert_close(outer[0] @ outer[1].T, (x @ y.T) ** 2, rtol=1e-12)


def test_polynomial_kernel_with_constant_feature_map():
    torch.manual_seed(5)
    c = 1.5
    x, y = torch.randn(40, 2, dtype=F64), torch.randn(40, 2, dtype=F64)

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
    torch.manual_seed(d)
    x = 2 * torch.randn(40, d, dtype=F64)
    features = elu_plus_one(x)  # (40, d)
    gram = features @ features.T  # k(x, y) = (elu(x) + 1)ᵀ(elu(y) + 1)
    scale = torch.linalg.eigvalsh(gram)[-1].item()
    assert min_eigenvalue(gram) > -1e-12 * scale
    assert bool((gram > 0).all())
    c = torch.randn(40, dtype=F64)
    assert math.isclose(c @ gram @ c, (features.T @ c).square().sum(), rel_tol=1e-10)


@pytest.mark.parametrize("kernel", ["exp", "gaussian", "linear, N > d"])
def test_feature_map_from_eigendecomposition_reproduces_the_gram_matrix(kernel):
    torch.manual_seed(7)
    x = torch.randn(12, 3, dtype=F64)
    grams = {
        "exp": torch.exp(x @ x.T),
        "gaussian": torch.exp(-(torch.cdist(x, x) ** 2) / 2),
        "linear, N > d": x @ x.T,  # rank 3: nine zero eigenvalues, up to roundoff
    }
    gram = grams[kernel]
    eigenvalues, eigenvectors = torch.linalg.eigh(gram)
    features = eigenvectors * eigenvalues.clamp(min=0).sqrt()  # Φ = U √Λ; roundoff λ < 0 → 0
    assert_close(features @ features.T, gram, rtol=1e-12)


def test_linear_kernel_gram_is_psd_and_singular_beyond_d_points():
    torch.manual_seed(8)
    x = torch.randn(10, 4, dtype=F64)
    eigenvalues = torch.linalg.eigvalsh(x @ x.T)
    scale = eigenvalues[-1].item()
    assert eigenvalues[0].item() > -1e-12 * scale
    assert int((eigenvalues > 1e-10 * scale).sum()) == 4 == torch.linalg.matrix_rank(x @ x.T)


def test_orthogonal_features_give_identity_gram():
    torch.manual_seed(9)
    features, _ = torch.linalg.qr(torch.randn(6, 4, dtype=F64))  # orthonormal columns
    gram = features.T @ features  # four orthonormal feature vectors
    assert_close(gram, torch.eye(4, dtype=F64), rtol=1e-12)
    assert min_eigenvalue(gram) > 0.99  # positive definite, not merely semi-definite


def test_identity_matrix_quadratic_form_and_eigenvalues():
    torch.manual_seed(10)
    c = torch.randn(7, dtype=F64)
    assert math.isclose(c @ torch.eye(7, dtype=F64) @ c, (c * c).sum(), rel_tol=1e-15)
    assert torch.equal(torch.linalg.eigvalsh(torch.eye(7, dtype=F64)), torch.ones(7, dtype=F64))


def test_composition_of_linear_maps_is_one_matrix():
    torch.manual_seed(11)
    a1, a2, a3, x = (
        torch.randn(5, 4, dtype=F64),
        torch.randn(3, 5, dtype=F64),
        torch.randn(2, 3, dtype=F64),
        torch.randn(4, dtype=F64),
    )
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


# --- FLOPs of each form, as FlopCounterMode counts them -----------------------------------------


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


# The notation page's translation rule: the column layout (tokens are columns) is the row layout
# transposed.
def test_row_and_column_layouts_are_transposes():
    g = torch.Generator().manual_seed(1)
    d, n, d_q, d_v = 6, 7, 4, 5
    x_col = torch.randn(d, n, generator=g, dtype=torch.float64)
    w_q, w_k = (torch.randn(d_q, d, generator=g, dtype=torch.float64) for _ in range(2))
    w_v = torch.randn(d_v, d, generator=g, dtype=torch.float64)

    q, k, v = w_q @ x_col, w_k @ x_col, w_v @ x_col  # columns are tokens
    a_col = torch.softmax(k.mT @ q / d_q**0.5, dim=0)  # each column sums to one
    y_col = v @ a_col  # (d_v, n)

    x_row = x_col.mT  # rows are tokens
    y_row = softmax_attention(x_row @ w_q.mT, x_row @ w_k.mT, x_row @ w_v.mT)  # (n, d_v)
    a_row = torch.softmax(x_row @ w_q.mT @ (x_row @ w_k.mT).mT / d_q**0.5, dim=-1)

    assert_close(a_col.sum(dim=0), torch.ones(n, dtype=torch.float64), rtol=1e-14)
    assert_close(a_row, a_col.mT, rtol=1e-12)
    assert_close(y_row, y_col.mT, rtol=1e-12)


# The O(N) forms stay O(N) in memory: a long sequence in a fresh process, whose peak resident
# memory (VmHWM: the child's own address space; ru_maxrss would carry over the big pytest process
# through fork and exec) is read from /proc. One N×N float64 matrix at N = 65536 would take 34 GB.
LONG_N, LONG_D = 65536, 32
PEAK_LIMIT_BYTES = 600 * 2**20


@pytest.mark.slow
@pytest.mark.parametrize("method", ["recurrent", "chunked"])
def test_long_causal_sequence_stays_in_linear_memory(method):
    out = run_python(
        f"""
        import re
        from linattn_core import linear_attention
        from linattn_core.testing import random_qkv, relative_error

        phi_q, phi_k, v = random_qkv(n={LONG_N}, d={LONG_D}, positive=True)
        out = linear_attention(phi_q, phi_k, v, causal=True, method="{method}")
        with open("/proc/self/status") as status:
            peak_kib = int(re.search(r"VmHWM:\\s*(\\d+) kB", status.read()).group(1))
        errors = []
        for i in (0, 4321, {LONG_N} - 1):  # rows against the definition, in O(N d)
            similarities = phi_k[: i + 1] @ phi_q[i]
            expected = similarities @ v[: i + 1] / (similarities.sum() + 1e-6)
            errors.append(relative_error(out[i], expected))
        print(peak_kib, max(errors))
        """,
        timeout=120,
    )
    peak_kib, error = out.split()
    assert int(peak_kib) * 1024 < PEAK_LIMIT_BYTES, f"{method}: peak RSS {int(peak_kib) >> 10} MiB"
    assert float(error) < 1e-10, f"{method}: relative error {error}"


def test_the_recurrent_form_trains_in_linear_time():
    """No whole-output copy per token in its backward pass: autograd records no CopySlices (the
    node of a write into a slice, which copies the whole tensor when differentiated)."""
    q, k, v = (x.requires_grad_() for x in random_qkv(2, n=50, d=4, d_v=3, positive=True))
    out = linear_attention(q, k, v, causal=True, method="recurrent")
    seen, stack = set(), [out.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        assert type(node).__name__ != "CopySlices"
        stack.extend(next_node for next_node, _ in node.next_functions)
    reference = linear_attention(q, k, v, causal=True, method="parallel")
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    for got, want in zip(grads, torch.autograd.grad(reference.sum(), (q, k, v)), strict=True):
        assert_close(got, want, rtol=1e-12)


# --- the state: initial_state in, the final state out -------------------------------------------


def state_reference(phi_q, phi_k, v, initial, *, causal, normalize):
    """(output, S_N, z_N) from the definition with tokens before these: o_i = S_i φ(q_i) /
    (φ(q_i)·z_i) with S_i = S_0 + Σ_j v_j φ(k_j)ᵀ, z_i = z_0 + Σ_j φ(k_j) (no eps)."""
    s0, z0 = initial
    similarities = phi_q @ phi_k.mT  # (..., N, N)
    if causal:
        similarities = similarities.tril()
    numerator = similarities @ v + phi_q @ s0.mT
    s_n = s0 + v.mT @ phi_k
    if not normalize:
        return numerator, s_n, None
    denominator = similarities.sum(dim=-1, keepdim=True) + phi_q @ z0[..., None]
    return numerator / denominator, s_n, z0 + phi_k.sum(dim=-2)


def random_state(*batch, d, d_v, normalize, seed=5):
    generator = torch.Generator().manual_seed(seed)
    s0 = torch.randn(*batch, d_v, d, generator=generator, dtype=F64)
    z0 = torch.rand(*batch, d, generator=generator, dtype=F64) if normalize else None
    return LinearAttentionState(s0, z0)


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(("batch", "n", "d", "d_v", "chunk_size"), CHUNKED_SHAPES[:4])
def test_initial_and_final_state_match_the_definition(
    batch, n, d, d_v, chunk_size, method, causal, normalize
):
    phi_q, phi_k, v = random_qkv(*batch, n=n, d=d, d_v=d_v, positive=True)
    initial = random_state(*batch, d=d, d_v=d_v, normalize=normalize)
    out, final = linear_attention(
        phi_q, phi_k, v, causal=causal, normalize=normalize, method=method,
        chunk_size=chunk_size, eps=0.0, initial_state=initial, output_final_state=True,
    )  # fmt: skip
    expected, s_n, z_n = state_reference(
        phi_q, phi_k, v, initial, causal=causal, normalize=normalize
    )
    assert isinstance(final, LinearAttentionState)
    assert_close(out, expected, rtol=RTOL)
    assert_close(final.S, s_n, rtol=RTOL, name="S")
    if normalize:
        assert_close(final.z, z_n, rtol=RTOL, name="z")
    else:
        assert final.z is None


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("method", METHODS)
def test_a_sequence_cut_in_pieces_continues_from_its_state(method, normalize):
    """Three calls, each starting from the state the one before returned, give the output and
    the final state of one call over the whole sequence."""
    phi_q, phi_k, v = random_qkv(2, 3, n=90, d=5, d_v=4, positive=True)
    whole, whole_state = linear_attention(
        phi_q, phi_k, v, causal=True, normalize=normalize, method=method, chunk_size=8,
        output_final_state=True,
    )  # fmt: skip
    pieces, state = [], None
    for part in (slice(0, 1), slice(1, 41), slice(41, 90)):
        out, state = linear_attention(
            phi_q[..., part, :], phi_k[..., part, :], v[..., part, :], causal=True,
            normalize=normalize, method=method, chunk_size=8, initial_state=state,
            output_final_state=True,
        )  # fmt: skip
        pieces.append(out)
    assert_close(torch.cat(pieces, dim=-2), whole, rtol=RTOL)
    assert_close(state.S, whole_state.S, rtol=RTOL, name="S")
    if normalize:
        assert_close(state.z, whole_state.z, rtol=RTOL, name="z")


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("method", METHODS)
def test_state_gradcheck(method, causal, normalize):
    """Gradients reach the initial state, and flow back from the final state."""
    phi_q, phi_k, v = random_qkv(2, n=5, d=3, d_v=2, positive=True)
    initial = random_state(2, d=3, d_v=2, normalize=normalize)
    inputs = [x.requires_grad_() for x in (phi_q, phi_k, v, *initial) if x is not None]

    def attention(phi_q, phi_k, v, s0, z0=None):
        out, final = linear_attention(
            phi_q, phi_k, v, causal=causal, normalize=normalize, method=method, chunk_size=2,
            initial_state=LinearAttentionState(s0, z0), output_final_state=True,
        )  # fmt: skip
        return (out, final.S) if z0 is None else (out, final.S, final.z)

    assert torch.autograd.gradcheck(attention, inputs)


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("batch_and_n", [((2,), 0), ((0,), 5)])
def test_empty_inputs_pass_the_state_through(batch_and_n, normalize):
    batch, n = batch_and_n
    phi_q, phi_k, v = random_qkv(*batch, n=n, d=3, d_v=2, positive=True)
    initial = random_state(*batch, d=3, d_v=2, normalize=normalize)
    for method in METHODS:
        out, final = linear_attention(
            phi_q, phi_k, v, causal=True, normalize=normalize, method=method,
            initial_state=initial, output_final_state=True,
        )  # fmt: skip
        assert out.shape == v.shape
        assert torch.equal(final.S, initial.S)


def state_case(s0_shape=(2, 4, 3), z0_shape=(2, 3), dtype=F64):
    return LinearAttentionState(
        torch.zeros(s0_shape, dtype=dtype), None if z0_shape is None else torch.zeros(z0_shape)
    )


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"initial_state": torch.zeros(2, 4, 3)}, TypeError, r"LinearAttentionState \(S, z\)"),
        ({"initial_state": state_case(s0_shape=(2, 3, 4))}, ValueError, r"initial_state.S must"),
        ({"initial_state": state_case(z0_shape=(2, 4))}, ValueError, r"initial_state.z must"),
        ({"initial_state": state_case(z0_shape=None)}, ValueError, r"z must be a tensor"),
        (
            {"initial_state": state_case(), "normalize": False},
            ValueError,
            r"z must be None when normalize=False",
        ),
        ({"initial_state": state_case(dtype=torch.float32)}, TypeError, r"same dtype"),
        ({"output_final_state": 1}, TypeError, r"output_final_state must be a bool"),
        ({"causal": "yes"}, TypeError, r"causal must be a bool"),
        ({"normalize": None}, TypeError, r"normalize must be a bool"),
    ],
)
def test_bad_states_and_flags_are_rejected(options, error, message):
    phi_q, phi_k, v = random_qkv(2, n=5, d=3, d_v=4, positive=True)
    with pytest.raises(error, match=message) as raised:
        linear_attention(phi_q, phi_k, v, **options)
    assert str(raised.value).startswith("linear_attention: ")
