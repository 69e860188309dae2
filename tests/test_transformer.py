"""Tests of `linattn_core.transformer`: the GPT-2-style modules and their cost formulas.

Each formula is compared with what PyTorch does for the module: the parameters it holds, the
bytes autograd saves for the backward pass and the FLOPs `FlopCounterMode` counts.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from linattn_core.transformer import (
    GPT,
    Block,
    activation_bytes,
    forward_flops,
    parameter_count,
    saved_activation_bytes,
)


def total_parameters(model):
    return sum(p.numel() for p in model.parameters())  # a shared tensor appears once


@pytest.mark.parametrize(
    ("vocab", "n_ctx", "d", "layers", "heads"), [(11, 7, 6, 3, 2), (97, 16, 10, 1, 5)]
)
def test_parameter_count_formula(vocab, n_ctx, d, layers, heads):
    torch.manual_seed(0)
    model = GPT(vocab, n_ctx, d, layers, heads)
    assert total_parameters(model) == parameter_count(vocab, n_ctx, d, layers)


@pytest.mark.slow  # the first use of the meta device costs about a second
def test_gpt2_small_has_124_439_808_parameters():
    with torch.device("meta"):  # shapes only: nothing is allocated
        model = GPT(50257, 1024, 768, 12, 12)
    assert total_parameters(model) == parameter_count(50257, 1024, 768, 12) == 124_439_808
    # without the position embedding and the final LayerNorm, and with V = 50,000, one gets
    # the "nanoGPT-small" figure that chapter 8 corrects
    assert 12 * (12 * 768 * 768 + 13 * 768) + 50000 * 768 == 123_454_464


def test_output_layer_is_tied_to_the_token_embedding():
    model = GPT(13, 8, 6, 1, 2)
    assert model.head.weight is model.wte.weight
    logits = model(torch.randint(13, (2, 5), generator=torch.Generator().manual_seed(0)))
    assert logits.shape == (2, 5, 13)


@pytest.mark.parametrize(
    ("b", "n", "d", "heads", "layers"), [(2, 16, 32, 4, 1), (3, 9, 24, 2, 3), (1, 33, 20, 5, 2)]
)
def test_activation_bytes_match_what_autograd_saves(b, n, d, heads, layers):
    torch.manual_seed(0)
    stack = nn.Sequential(*(Block(d, heads) for _ in range(layers)))
    x = torch.randn(b, n, d, requires_grad=True)
    assert saved_activation_bytes(stack, x) == activation_bytes(b, n, d, heads, layers)


def test_gelu_keeps_a_second_hidden_activation():
    class GeluBlock(Block):
        def ffn(self, x):
            return self.proj(F.gelu(self.fc(x)))

    b, n, d, heads, layers = 2, 8, 16, 2, 2
    torch.manual_seed(0)
    stack = nn.Sequential(*(GeluBlock(d, heads) for _ in range(layers)))
    measured = saved_activation_bytes(stack, torch.randn(b, n, d, requires_grad=True))
    assert measured == activation_bytes(b, n, d, heads, layers) + layers * b * n * 4 * d * 4


def test_saved_activation_bytes_leave_out_the_parameters():
    layer = nn.Linear(5, 3)
    x = torch.randn(4, 5, requires_grad=True)
    assert saved_activation_bytes(layer, x) == 4 * 5 * 4  # the input only, not the weight
    with torch.no_grad():  # nothing is saved without a backward pass to come
        assert saved_activation_bytes(layer, x) == 0


@pytest.mark.slow  # FlopCounterMode takes about half a second per configuration
@pytest.mark.parametrize(
    ("b", "n", "d", "heads", "layers", "vocab"), [(2, 16, 32, 4, 2, 50), (3, 7, 12, 3, 3, 29)]
)
def test_forward_flops_and_training_is_three_forward_passes(b, n, d, heads, layers, vocab):
    torch.manual_seed(0)
    model = GPT(vocab, n, d, layers, heads)
    tokens = torch.randint(vocab, (b, n))
    with FlopCounterMode(display=False) as forward_only:
        model(tokens)
    with FlopCounterMode(display=False) as training:
        model(tokens).sum().backward()
    assert forward_only.get_total_flops() == forward_flops(b, n, d, layers, vocab)
    assert training.get_total_flops() == 3 * forward_flops(b, n, d, layers, vocab)


def test_block_is_pre_ln_with_a_residual_around_each_sublayer():
    torch.manual_seed(0)
    block = Block(8, 2)
    x = torch.randn(2, 5, 8)
    h = x + block.attention(block.ln_1(x))
    assert torch.allclose(block(x), h + block.proj(torch.relu(block.fc(block.ln_2(h)))))


def test_bad_arguments_name_the_argument():
    cases = [
        (ValueError, "Block: heads must divide d", lambda: Block(10, 3)),
        (ValueError, "Block: d must be a positive int", lambda: Block(0, 1)),
        (
            ValueError,
            r"Block: x must have shape \(b, n, 4\)",
            lambda: Block(4, 2)(torch.ones(1, 2, 3)),
        ),
        (ValueError, "GPT: vocab must be a positive int", lambda: GPT(0, 4, 4, 1, 1)),
        (TypeError, "GPT: tokens must be an int64", lambda: GPT(5, 4, 4, 1, 1)(torch.ones(1, 2))),
        (ValueError, "n ≤ n_ctx = 4", lambda: GPT(5, 4, 4, 1, 1)(torch.zeros(1, 6).long())),
        (ValueError, "parameter_count: layers", lambda: parameter_count(5, 4, 4, 0)),
        (
            ValueError,
            "activation_bytes: bytes_per_float",
            lambda: activation_bytes(1, 1, 1, 1, 1, 0),
        ),
        (TypeError, "forward_flops: vocab", lambda: forward_flops(1, 1, 1, 1, 2.5)),
        (
            TypeError,
            "saved_activation_bytes: model",
            lambda: saved_activation_bytes(len, torch.ones(1)),
        ),
    ]
    for error, message, call in cases:
        with pytest.raises(error, match=message):
            call()
