"""Efficient attention (Shen et al. 2021) against its definitions: the exact equivalence of the
scaling form, the row-sum theorem and the rank bound of the softmax form, gradients, batches and
bad inputs."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from linattn_core import linear_attention, softmax_attention
from linattn_core.eam import efficient_attention, implied_attention
from linattn_core.testing import assert_close, random_qkv, relative_error

RTOL = 1e-12

# (batch, N, d, d_v): no batch, batch dims, N = 1, N < d, d_v ≠ d, odd sizes
SHAPES = [
    ((), 37, 4, 3),
    ((3,), 16, 5, 5),
    ((2, 3), 10, 3, 6),
    ((), 1, 3, 2),
    ((2,), 3, 7, 1),
    ((2,), 129, 1, 4),
]


def implied_by_loops(q, k):
    """M_ij = Σ_f σ_row(q)_if σ_col(k)_jf, entry by entry from exponentials, for one (N, d) pair."""
    n, d = q.shape
    exp_q, exp_k = q.exp(), k.exp()
    q_row = [[exp_q[i, f] / sum(exp_q[i, g] for g in range(d)) for f in range(d)] for i in range(n)]
    k_col = [[exp_k[j, f] / sum(exp_k[m, f] for m in range(n)) for f in range(d)] for j in range(n)]
    return torch.tensor(
        [[sum(q_row[i][f] * k_col[j][f] for f in range(d)) for j in range(n)] for i in range(n)]
    )


@pytest.mark.parametrize(("batch", "n", "d", "d_v"), SHAPES)
def test_scaling_equals_dot_product_attention_with_1_over_n(batch, n, d, d_v):
    q, k, v = random_qkv(*batch, n=n, d=d, d_v=d_v, seed=n)
    out = efficient_attention(q, k, v, normalization="scaling")
    assert out.shape == (*batch, n, d_v)
    assert_close(out, (q @ k.mT / n) @ v, rtol=RTOL, name="scaling")
    assert_close(implied_attention(q, k, normalization="scaling"), q @ k.mT / n, rtol=RTOL)


@pytest.mark.parametrize(("batch", "n", "d", "d_v"), SHAPES)
def test_softmax_equals_implied_matrix_times_values(batch, n, d, d_v):
    q, k, v = random_qkv(*batch, n=n, d=d, d_v=d_v, seed=n + 1)
    attention = implied_attention(q, k)
    assert attention.shape == (*batch, n, n)
    assert_close(efficient_attention(q, k, v), attention @ v, rtol=RTOL, name="softmax")


def test_implied_matrix_matches_the_definition_entry_by_entry():
    q, k, _ = random_qkv(n=7, d=3, seed=3)
    assert_close(implied_attention(q, k), implied_by_loops(q, k), rtol=RTOL)


@pytest.mark.parametrize(("batch", "n", "d", "d_v"), SHAPES)
@pytest.mark.parametrize("magnitude", [1.0, 30.0])
def test_rows_of_the_implied_matrix_are_probability_vectors(batch, n, d, d_v, magnitude):
    q, k, _ = random_qkv(*batch, n=n, d=d, seed=n + 2)
    attention = implied_attention(magnitude * q, magnitude * k)  # large scores: no overflow
    assert bool((attention >= 0).all())
    assert_close(attention.sum(dim=-1), torch.ones(*batch, n), rtol=RTOL, name="row sums")


@pytest.mark.slow
@given(n=st.integers(1, 30), d=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_row_sums_are_one_on_random_shapes(n, d, seed):
    q, k, _ = random_qkv(n=n, d=d, seed=seed)
    assert_close(implied_attention(q, k).sum(dim=-1), torch.ones(n), rtol=RTOL)


def test_column_sums_are_not_one_but_total_n():
    q, k, _ = random_qkv(n=20, d=4, seed=4)
    column_sums = implied_attention(q, k).sum(dim=-2)  # (N,)
    assert relative_error(column_sums, torch.ones(20)) > 0.1
    assert column_sums.sum().item() == pytest.approx(20, rel=RTOL)


@pytest.mark.parametrize(("n", "d"), [(40, 1), (40, 3), (64, 8), (9, 9), (5, 12)])
def test_rank_of_the_implied_matrix_is_at_most_d(n, d):
    q, k, _ = random_qkv(n=n, d=d, seed=n + d)
    rank = torch.linalg.matrix_rank(implied_attention(q, k)).item()
    assert rank == min(n, d)  # ≤ d always; equal for generic inputs
    rank_softmax = torch.linalg.matrix_rank((q @ k.mT).softmax(dim=-1)).item()
    if n > d:
        assert rank_softmax > d  # softmax attention is not limited by d


def test_softmax_form_is_kernel_attention_with_exponential_features():
    # σ_row(q)σ_col(k)ᵀ = exp(q) exp(k)ᵀ/s normalized by rows, s = Σ_j exp(k_j) per feature
    q, k, v = random_qkv(2, n=25, d=4, d_v=3, seed=5)
    phi_q, phi_k = q.exp(), k.exp() / k.exp().sum(dim=-2, keepdim=True)
    expected = linear_attention(phi_q, phi_k, v, eps=0.0)
    assert_close(efficient_attention(q, k, v), expected, rtol=RTOL)


def test_softmax_form_is_not_softmax_attention():
    q, k, v = random_qkv(n=30, d=4, seed=6)
    out = efficient_attention(q, k, v)
    assert relative_error(out, softmax_attention(q, k, v, scale=1.0)) > 0.1


def test_softmax_form_ignores_shifts_of_query_rows_and_key_columns():
    q, k, v = random_qkv(n=12, d=3, seed=7)
    gen = torch.Generator().manual_seed(8)
    row_shift = torch.randn(12, 1, generator=gen, dtype=torch.float64)  # one constant per query
    column_shift = torch.randn(1, 3, generator=gen, dtype=torch.float64)  # one per key feature
    out = efficient_attention(q + row_shift, k + column_shift, v)
    assert_close(out, efficient_attention(q, k, v), rtol=RTOL)


@pytest.mark.parametrize("normalization", ["softmax", "scaling"])
def test_batch_dims_are_independent_problems(normalization):
    q, k, v = random_qkv(2, 3, n=9, d=4, d_v=5, seed=9)
    out = efficient_attention(q, k, v, normalization=normalization)
    for b in range(2):
        for h in range(3):
            single = efficient_attention(q[b, h], k[b, h], v[b, h], normalization=normalization)
            assert_close(out[b, h], single, rtol=RTOL)


@pytest.mark.parametrize("normalization", ["softmax", "scaling"])
def test_float32_matches_the_float64_reference(normalization):
    q, k, v = random_qkv(2, n=300, d=16, d_v=8, seed=10)
    out = efficient_attention(q.float(), k.float(), v.float(), normalization=normalization)
    assert out.dtype == torch.float32
    assert_close(out, efficient_attention(q, k, v, normalization=normalization), rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("normalization", ["softmax", "scaling"])
def test_gradients(normalization):
    q, k, v = (x.requires_grad_() for x in random_qkv(2, n=6, d=3, d_v=2, seed=11))
    assert torch.autograd.gradcheck(
        lambda q, k, v: efficient_attention(q, k, v, normalization=normalization), (q, k, v)
    )
    assert torch.autograd.gradcheck(
        lambda q, k: implied_attention(q, k, normalization=normalization), (q, k)
    )


@pytest.mark.parametrize("normalization", ["softmax", "scaling"])
def test_empty_sequence_gives_empty_output(normalization):
    q, k, v = random_qkv(2, n=0, d=3, d_v=4)
    assert efficient_attention(q, k, v, normalization=normalization).shape == (2, 0, 4)
    assert implied_attention(q, k, normalization=normalization).shape == (2, 0, 0)


def test_scaling_divides_by_the_square_root_of_n_on_each_side():
    q, k, v = random_qkv(n=16, d=2, seed=12)
    k_scaled = k / math.sqrt(16)
    expected = (q / math.sqrt(16)) @ (k_scaled.mT @ v)
    assert_close(efficient_attention(q, k, v, normalization="scaling"), expected, rtol=RTOL)


def _inputs(n_q=5, n_k=5, d_q=3, d_k=3, n_v=5, d_v=2, batch_v=(), dtype=torch.float64):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(n_q, d_q, generator=gen, dtype=torch.float64).to(dtype)
    k = torch.randn(n_k, d_k, generator=gen, dtype=torch.float64).to(dtype)
    v = torch.randn(*batch_v, n_v, d_v, generator=gen, dtype=torch.float64).to(dtype)
    return q, k, v


@pytest.mark.parametrize(
    ("q", "k", "v", "kwargs", "error", "match"),
    [
        (*_inputs(d_k=4), {}, ValueError, r"k must have the same feature dimension d as q"),
        (*_inputs(n_k=4), {}, ValueError, r"k must have the same sequence length N as v"),
        (*_inputs(n_v=6), {}, ValueError, r"q must have the same sequence length N as v"),
        (*_inputs(batch_v=(2,)), {}, ValueError, r"v must have the same batch dimensions as q"),
        (*_inputs(), {"normalization": "row"}, ValueError, r"normalization must be one of"),
        (*_inputs(), {"normalization": None}, ValueError, r"normalization .*; got .*=None"),
        (torch.ones(3), *_inputs()[1:], {}, ValueError, r"q must have at least 2 dimensions"),
        ([[1.0]], *_inputs()[1:], {}, TypeError, r"q must be a torch.Tensor; got list"),
        (*_inputs(dtype=torch.int64), {}, TypeError, r"q must be a floating-point tensor"),
        (*_inputs()[:2], _inputs()[2].float(), {}, TypeError, r"v must have the same dtype as q"),
    ],
)
def test_efficient_attention_rejects_bad_inputs(q, k, v, kwargs, error, match):
    with pytest.raises(error, match=r"^efficient_attention: " + match):
        efficient_attention(q, k, v, **kwargs)


@pytest.mark.parametrize(
    ("q", "k", "kwargs", "error", "match"),
    [
        (*_inputs(d_k=4)[:2], {}, ValueError, r"k must have the same feature dimension d as q"),
        (*_inputs(n_k=4)[:2], {}, ValueError, r"q must have the same sequence length N as k"),
        (*_inputs()[:2], {"normalization": "col"}, ValueError, r"normalization must be one of"),
        (_inputs()[0].float(), _inputs()[1], {}, TypeError, r"k must have the same dtype as q"),
        (_inputs()[0], "k", {}, TypeError, r"k must be a torch.Tensor; got str"),
    ],
)
def test_implied_attention_rejects_bad_inputs(q, k, kwargs, error, match):
    with pytest.raises(error, match=r"^implied_attention: " + match):
        implied_attention(q, k, **kwargs)
