"""decode_memory_bytes against the tensors that small decoders of each kind actually keep, and
bad inputs. The decoders here generate token by token and cache what each kind caches; their
outputs are checked against attention over the whole sequence, so the count is of real caches."""

import re

import pytest
import torch

from linattn_core import linear_attention, softmax_attention
from linattn_core.attention import LinearAttentionState
from linattn_core.decoding import linear_decode_step, softmax_decode_step
from linattn_core.kv_cache import decode_cache_shapes, decode_memory_bytes
from linattn_core.testing import assert_close

F64 = torch.float64


def cached_bytes(caches):
    return sum(t.numel() * t.element_size() for layer in caches for t in layer.values())


def grouped_decoder(n, layers, heads, kv_heads, head_dim, dtype):
    """Softmax decoding with `kv_heads` key/value heads (MHA when equal to heads, MQA at 1):
    each layer appends one key and one value per key/value head and token."""
    generator = torch.Generator().manual_seed(n + heads + kv_heads)
    caches, per_query_head = [], heads // kv_heads
    for _ in range(layers):
        q = torch.randn(heads, n, head_dim, generator=generator, dtype=F64)
        k, v = (torch.randn(kv_heads, n, head_dim, generator=generator, dtype=F64) for _ in "kv")
        cache = {"keys": k[:, :0].to(dtype), "values": v[:, :0].to(dtype)}
        steps = []
        for t in range(n):
            cache["keys"] = torch.cat([cache["keys"], k[:, t : t + 1].to(dtype)], dim=1)
            cache["values"] = torch.cat([cache["values"], v[:, t : t + 1].to(dtype)], dim=1)
            group = torch.arange(heads) // per_query_head  # the key/value head of each query head
            keys, values = cache["keys"][group].to(F64), cache["values"][group].to(F64)
            steps.append(softmax_decode_step(q[:, t], keys, values))
        if dtype == F64 and n:
            expected = softmax_attention(
                q,
                k.repeat_interleave(per_query_head, 0),
                v.repeat_interleave(per_query_head, 0),
                causal=True,
            )
            assert_close(torch.stack(steps, dim=1), expected, rtol=1e-12, name="grouped decode")
        caches.append(cache)
    return caches


def latent_decoder(n, layers, heads, head_dim, latent_dim, rope_dim, dtype):
    """Multi-head latent attention: each layer caches the latent c_t (d_c) and one rotary key
    k_t^R (d_R) per token; every head's keys [W_uk c_t; k_t^R] and values W_uv c_t are rebuilt
    from the cache at each step."""
    generator = torch.Generator().manual_seed(n + latent_dim)
    caches = []
    for _ in range(layers):
        latent = torch.randn(n, latent_dim, generator=generator, dtype=F64)
        rope_keys = torch.randn(n, rope_dim, generator=generator, dtype=F64)
        w_uk, w_uv = (
            torch.randn(heads, latent_dim, head_dim, generator=generator, dtype=F64) for _ in "kv"
        )
        q = torch.randn(heads, n, head_dim + rope_dim, generator=generator, dtype=F64)
        cache = {"latent": latent[:0].to(dtype), "rope_keys": rope_keys[:0].to(dtype)}
        steps = []
        for t in range(n):
            cache["latent"] = torch.cat([cache["latent"], latent[t : t + 1].to(dtype)])
            cache["rope_keys"] = torch.cat([cache["rope_keys"], rope_keys[t : t + 1].to(dtype)])
            c, k_rope = cache["latent"].to(F64), cache["rope_keys"].to(F64)
            keys = torch.cat([c @ w_uk, k_rope.expand(heads, -1, -1)], dim=-1)  # (H, t, d_h + d_R)
            steps.append(softmax_decode_step(q[:, t], keys, c @ w_uv))
        if dtype == F64 and n:
            keys = torch.cat([latent @ w_uk, rope_keys.expand(heads, -1, -1)], dim=-1)
            expected = softmax_attention(q, keys, latent @ w_uv, causal=True)
            assert_close(torch.stack(steps, dim=1), expected, rtol=1e-12, name="latent decode")
        caches.append(cache)
    return caches


def linear_decoder(n, layers, heads, head_dim, feature_dim, dtype):
    """Linear attention: each layer keeps its `LinearAttentionState`, S (H, d_h, m) and z (H, m)."""
    generator = torch.Generator().manual_seed(n + feature_dim)
    caches = []
    for _ in range(layers):
        phi_q, phi_k = (
            torch.rand(heads, n, feature_dim, generator=generator, dtype=F64) for _ in "qk"
        )
        v = torch.randn(heads, n, head_dim, generator=generator, dtype=F64)
        state = LinearAttentionState(
            torch.zeros(heads, head_dim, feature_dim, dtype=dtype),
            torch.zeros(heads, feature_dim, dtype=dtype),
        )
        steps = []
        for t in range(n):
            out, state = linear_decode_step(
                *(x[:, t].to(dtype) for x in (phi_q, phi_k, v)), initial_state=state
            )
            steps.append(out)
        if dtype == F64 and n:
            expected = linear_attention(phi_q, phi_k, v, causal=True)
            assert_close(torch.stack(steps, dim=1), expected, rtol=1e-12, name="linear decode")
        caches.append(state._asdict())
    return caches


@pytest.mark.parametrize("dtype", [F64, torch.bfloat16])
@pytest.mark.parametrize("n", [0, 1, 7])
@pytest.mark.parametrize(("kind", "kv_heads"), [("mha", 4), ("mqa", 1), ("gqa", 2)])
def test_grouped_caches(kind, kv_heads, n, dtype):
    caches = grouped_decoder(n, layers=3, heads=4, kv_heads=kv_heads, head_dim=5, dtype=dtype)
    sizes = {"kv_heads": kv_heads} if kind == "gqa" else {}
    counted = decode_memory_bytes(
        kind, n, layers=3, heads=4, head_dim=5, bytes_per_value=dtype.itemsize, **sizes
    )
    assert counted == cached_bytes(caches)
    shapes = decode_cache_shapes(kind, n, heads=4, head_dim=5, **sizes)
    assert shapes == {name: tuple(t.shape) for name, t in caches[0].items()}


@pytest.mark.parametrize("dtype", [F64, torch.bfloat16])
@pytest.mark.parametrize("n", [0, 1, 7])
def test_latent_cache(n, dtype):
    caches = latent_decoder(n, layers=2, heads=3, head_dim=4, latent_dim=6, rope_dim=2, dtype=dtype)
    counted = decode_memory_bytes(
        "mla",
        n,
        layers=2,
        heads=3,
        head_dim=4,
        latent_dim=6,
        rope_dim=2,
        bytes_per_value=dtype.itemsize,
    )
    assert counted == cached_bytes(caches)


@pytest.mark.parametrize("dtype", [F64, torch.float32])
@pytest.mark.parametrize("n", [1, 7, 20])
def test_linear_state_does_not_grow(n, dtype):
    caches = linear_decoder(n, layers=2, heads=3, head_dim=4, feature_dim=5, dtype=dtype)
    counted = decode_memory_bytes(
        "linear", n, layers=2, heads=3, head_dim=4, feature_dim=5, bytes_per_value=dtype.itemsize
    )
    assert counted == cached_bytes(caches) == 2 * 3 * 5 * (4 + 1) * dtype.itemsize


def test_formulas_for_a_7b_like_model():
    size = dict(layers=32, heads=32, head_dim=128)
    per_token = decode_memory_bytes("mha", 1, **size)
    assert per_token == 2 * 32 * 32 * 128 * 2 == 2**19  # 0.5 MiB a token in bfloat16
    assert decode_memory_bytes("gqa", 1, **size, kv_heads=8) == per_token // 4
    assert decode_memory_bytes("gqa", 1, **size, kv_heads=32) == per_token
    assert decode_memory_bytes("mqa", 1, **size) == per_token // 32
    # DeepSeek-V2's choice d_c = 4 d_h, d_R = d_h / 2: the cache of GQA with 2.25 groups
    latent = decode_memory_bytes("mla", 1, **size, latent_dim=512, rope_dim=64)
    assert latent == 2.25 * decode_memory_bytes("mqa", 1, **size)
    state = decode_memory_bytes("linear", 10**6, **size, feature_dim=128)
    assert state == decode_memory_bytes("linear", 0, **size, feature_dim=128)
    # the state is smaller than the cache from N = ⌊state / per token⌋ + 1 = 65 on
    assert decode_memory_bytes("mha", 64, **size) < state < decode_memory_bytes("mha", 65, **size)


SIZE = dict(layers=2, heads=4, head_dim=8)
BAD_INPUTS = [
    (("gpa", 3), SIZE, ValueError, "kind must be one of 'mha', 'mqa', 'gqa', 'mla', 'linear'"),
    (("mha", -1), SIZE, ValueError, "n_tokens must be a non-negative int; got n_tokens=-1"),
    (("mha", 2.5), SIZE, TypeError, "n_tokens must be a non-negative int"),
    (("mha", 3), {**SIZE, "layers": 0}, ValueError, "layers must be a positive int"),
    (("mha", 3), {**SIZE, "heads": True}, TypeError, "heads must be a positive int"),
    (("mha", 3), {**SIZE, "bytes_per_value": 0.5}, TypeError, "bytes_per_value must be a positive"),
    (("gqa", 3), SIZE, ValueError, "kind='gqa' needs kv_heads; got kv_heads=None"),
    (("gqa", 3), {**SIZE, "kv_heads": 3}, ValueError, "kv_heads must divide heads"),
    (("gqa", 3), {**SIZE, "kv_heads": 0}, ValueError, "kv_heads must be a positive int"),
    (("mla", 3), {**SIZE, "latent_dim": 16}, ValueError, "kind='mla' needs rope_dim"),
    (("mha", 3), {**SIZE, "latent_dim": 16}, ValueError, "latent_dim applies to kind='mla' only"),
    (("linear", 3), SIZE, ValueError, "kind='linear' needs feature_dim"),
    (("mqa", 3), {**SIZE, "kv_heads": 1}, ValueError, "kv_heads applies to kind='gqa' only"),
]


@pytest.mark.parametrize(("args", "options", "error", "message"), BAD_INPUTS)
def test_bad_inputs(args, options, error, message):
    with pytest.raises(error, match="^decode_memory_bytes: " + re.escape(message)):
        decode_memory_bytes(*args, **options)
    options = {k: v for k, v in options.items() if k not in ("layers", "bytes_per_value")}
    if "layers" not in message and "bytes_per_value" not in message:
        with pytest.raises(error, match="^decode_cache_shapes: " + re.escape(message)):
            decode_cache_shapes(*args, **options)
