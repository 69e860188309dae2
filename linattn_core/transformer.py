"""A GPT-2-style decoder as `nn.Module`s, and what it costs: parameters, activation memory, FLOPs.

The model of the cost section of 09_attention_jacobians (Radford et al. 2019): pre-LN blocks, biases
in every linear map, an FFN of width 4d (ReLU here; GPT-2 uses GELU), learned position embeddings
and an output layer tied to the token embedding. Each cost formula counts exactly what PyTorch
allocates or multiplies for this model, and the tests compare it with the module: the
parameters, the bytes autograd saves for the backward pass (`saved_activation_bytes` measures
them), and the FLOPs of the matrix products (`torch.utils.flop_counter.FlopCounterMode`).
"""

import math

import torch
from torch import nn

from linattn_core.validation import check_positive_int, check_tensor

__all__ = [
    "GPT",
    "Block",
    "activation_bytes",
    "forward_flops",
    "parameter_count",
    "saved_activation_bytes",
]


class Block(nn.Module):
    """A GPT-2 block: pre-LN, biases everywhere, FFN of width 4d (ReLU; GPT-2 uses GELU).

    x `(b, n, d)` → `(b, n, d)`: x + attention(LN₁(x)), then x + ffn(LN₂(x)), with `heads`
    heads of width d/heads and no mask. Subclasses change `attention` or `ffn`.
    """

    def __init__(self, d, heads):
        super().__init__()
        check_positive_int("Block", "d", d)
        check_positive_int("Block", "heads", heads)
        if d % heads:
            raise ValueError(f"Block: heads must divide d; got d={d}, heads={heads}")
        self.d, self.heads = d, heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def attention(self, x):  # (b, n, d)
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = (q @ k.mT / math.sqrt(d // self.heads)).softmax(dim=-1)  # (b, h, n, n)
        return self.out((a @ v).transpose(1, 2).reshape(b, n, d))

    def ffn(self, x):  # (b, n, d)
        return self.proj(torch.relu(self.fc(x)))

    def forward(self, x):  # (b, n, d)
        check_tensor("Block", "x", x, min_rank=3)
        if x.dim() != 3 or x.shape[-1] != self.d:
            raise ValueError(f"Block: x must have shape (b, n, {self.d}); got {tuple(x.shape)}")
        x = x + self.attention(self.ln_1(x))
        return x + self.ffn(self.ln_2(x))


class GPT(nn.Module):
    """A GPT-2-style decoder: token and position embeddings, `layers` blocks, a final LayerNorm
    and an output layer that shares its weight with the token embedding (tied).

    tokens `(b, n)` of ints in [0, vocab), n ≤ n_ctx → logits `(b, n, vocab)`.
    """

    def __init__(self, vocab, n_ctx, d, layers, heads):
        super().__init__()
        for name, value in (("vocab", vocab), ("n_ctx", n_ctx), ("layers", layers)):
            check_positive_int("GPT", name, value)
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(n_ctx, d)
        self.blocks = nn.Sequential(*(Block(d, heads) for _ in range(layers)))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied: one tensor, counted once

    def forward(self, tokens):  # (b, n) → logits (b, n, vocab)
        if not isinstance(tokens, torch.Tensor) or tokens.dtype not in (torch.int64, torch.int32):
            got = tokens.dtype if isinstance(tokens, torch.Tensor) else type(tokens).__name__
            raise TypeError(f"GPT: tokens must be an int64 or int32 tensor; got {got}")
        if tokens.dim() != 2 or tokens.shape[1] > self.wpe.num_embeddings:
            raise ValueError(
                f"GPT: tokens must have shape (b, n) with n ≤ n_ctx = {self.wpe.num_embeddings}; "
                f"got {tuple(tokens.shape)}"
            )
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1]))
        return self.head(self.ln_f(self.blocks(x)))


def parameter_count(vocab, n_ctx, d, layers):
    """Parameters of `GPT(vocab, n_ctx, d, layers, heads)`: L(12d² + 13d) + Vd + n_ctx·d + 2d.

    Per layer: the query, key and value projections 3d² + 3d, the output projection d² + d, the
    FFN 8d² + 5d, two LayerNorms 4d; outside the layers the embeddings and the final LayerNorm.
    The number of heads does not enter, and the tied output layer adds nothing.

    >>> parameter_count(vocab=50257, n_ctx=1024, d=768, layers=12)  # GPT-2 small
    124439808
    """
    for name, value in (("vocab", vocab), ("n_ctx", n_ctx), ("d", d), ("layers", layers)):
        check_positive_int("parameter_count", name, value)
    return layers * (12 * d * d + 13 * d) + vocab * d + n_ctx * d + 2 * d


def activation_bytes(b, n, d, heads, layers, bytes_per_float=4):
    """Bytes autograd keeps for the backward pass of `layers` `Block`s: L·b·n·(12d + hn + 4) floats.

    Per token and layer: both LayerNorms' inputs, means and 1/std (2d + 4), the inputs of the
    projections and the FFN (3d), Q, K, V in the head layout (3d), the attention weights A (hn)
    and the FFN's hidden activation (4d). The scores before the softmax are not kept.

    >>> activation_bytes(b=2, n=16, d=32, heads=4, layers=1)
    57856
    """
    for name, value in (("b", b), ("n", n), ("d", d), ("heads", heads), ("layers", layers)):
        check_positive_int("activation_bytes", name, value)
    check_positive_int("activation_bytes", "bytes_per_float", bytes_per_float)
    return layers * b * n * (12 * d + heads * n + 4) * bytes_per_float


def forward_flops(b, n, d, layers, vocab):
    """FLOPs of the matrix products of one forward pass of `GPT`: L(24bnd² + 4bn²d) + 2bndV.

    An (m × k)(k × p) product costs 2mkp. Per layer: the four projections 8bnd², the FFN
    16bnd², QKᵀ and AV 4bn²d over all heads; then the output layer. Training (forward and
    backward) costs three times as much.

    >>> forward_flops(b=1, n=1, d=1, layers=1, vocab=1)
    30
    """
    for name, value in (("b", b), ("n", n), ("d", d), ("layers", layers), ("vocab", vocab)):
        check_positive_int("forward_flops", name, value)
    return layers * (24 * b * n * d * d + 4 * b * n * n * d) + 2 * b * n * d * vocab


def saved_activation_bytes(model, x):
    """Bytes of the tensors autograd saves for the backward pass while computing `model(x)`.

    Hooks into autograd with `torch.autograd.graph.saved_tensors_hooks` and records the storage
    of every saved tensor once (a view shares the storage of its base), leaving out the
    model's parameters. Under `torch.no_grad()` nothing is saved.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"saved_activation_bytes: model must be an nn.Module; got {type(model)}")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"saved_activation_bytes: x must be a torch.Tensor; got {type(x)}")
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(x)
    return sum(storages.values())
