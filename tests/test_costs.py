"""Cost models against what they model: FLOP formulas against PyTorch's FlopCounterMode."""

import inspect
import math

import pytest
import torch

from linattn_core import linear_attention, softmax_attention
from linattn_core.costs import (
    CHUNK_SIZE,
    flop_crossover_length,
    linear_flops,
    matmul_flops,
    softmax_flops,
)
from linattn_core.feature_maps import taylor, taylor_dim
from linattn_core.testing import random_qkv


@pytest.mark.parametrize(("n", "d", "d_v"), [(100, 16, 16), (257, 8, 5), (64, 32, 64), (1, 4, 3)])
def test_attention_flops_match_the_counted_matrix_products(n, d, d_v):
    q, k, v = random_qkv(2, n=n, d=d, d_v=d_v, seed=n)  # a batch of 2: twice the FLOPs
    phi_q, phi_k = taylor(q / d**0.25), taylor(k / d**0.25)
    assert matmul_flops(softmax_attention, q, k, v) == 2 * softmax_flops(n, d, d_v)
    assert matmul_flops(linear_attention, phi_q, phi_k, v) == 2 * linear_flops(
        n, taylor_dim(d, 2), d_v
    )


def test_the_models_chunk_size_is_linear_attentions_default():
    assert inspect.signature(linear_attention).parameters["chunk_size"].default == CHUNK_SIZE


def test_matmul_flops_passes_keyword_arguments():
    a, b = torch.ones(4, 3), torch.ones(3, 5)
    assert matmul_flops(torch.matmul, a, b) == 2 * 4 * 3 * 5
    assert matmul_flops(torch.matmul, input=a, other=b) == 2 * 4 * 3 * 5


def test_flop_crossover_length():
    for d, d_v in [(16, 16), (64, 64), (16, 64), (128, 32)]:
        features = taylor_dim(d, 2)
        n_star = flop_crossover_length(d, d_v, features)
        assert math.isclose(softmax_flops(n_star, d, d_v), linear_flops(n_star, features, d_v))
    assert flop_crossover_length(64, 64, taylor_dim(64, 2)) == pytest.approx(2178.515625)
    assert flop_crossover_length(64, 64, taylor_dim(64, 2)) == pytest.approx((65**2) * 66 / 128)


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize(("n", "chunk_size"), [(1024, 64), (37, 8), (64, 16), (5, 64), (50, 1)])
def test_chunked_flops_count_the_chunked_form(n, chunk_size, normalize):
    from linattn_core.costs import chunked_flops

    q, k, v = random_qkv(2, n=n, d=4, d_v=3, positive=True)
    counted = matmul_flops(
        linear_attention,
        q,
        k,
        v,
        causal=True,
        normalize=normalize,
        method="chunked",
        chunk_size=chunk_size,
    )
    assert counted == 2 * chunked_flops(n, 4, 3, chunk_size, normalize=normalize)


@pytest.mark.parametrize(("peak", "bandwidth"), [(989e12, 3.35e12), (100e9, 10e9)])
def test_roofline_crossover_is_where_the_times_cross(peak, bandwidth):
    from linattn_core.costs import roofline_crossover_length, roofline_times

    n = torch.arange(1, 8193, dtype=torch.float64)
    softmax, linear = roofline_times(n, peak, bandwidth, d=64, dtype=torch.float32)
    roofline = {"matmul_tflops": peak / 1e12, "copy_gbps": bandwidth / 1e9}
    n_star = roofline_crossover_length(roofline, d=64, dtype="float32")
    assert torch.equal(linear < softmax, n > n_star)
