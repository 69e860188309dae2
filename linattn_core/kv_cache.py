"""Decode-time memory: what a decoder keeps per sequence while it generates, by kind of attention.

Softmax attention caches the keys and values of every earlier token (the KV cache), so its
memory grows with the number of tokens N; the variants shrink the cache per token. Multi-query
and grouped-query attention (Shazeer, 2019; Ainslie et al., 2023) let G ≤ H key/value heads
serve the H query heads; multi-head latent attention (DeepSeek-AI, 2024) caches one compressed
latent of d_c numbers per token, from which every head's keys and values are recomputed, plus
one small key of d_R numbers that carries the rotary position. Linear attention keeps a state
of fixed size instead, whatever N (Katharopoulos et al., 2020).
"""

import math

from linattn_core.validation import check_choice, check_non_negative_int, check_positive_int

__all__ = ["DECODE_KINDS", "decode_cache_shapes", "decode_memory_bytes"]

DECODE_KINDS = ("mha", "mqa", "gqa", "mla", "linear")

# The size arguments each kind needs, beyond layers, heads and head_dim.
_NEEDS = {
    "mha": (),
    "mqa": (),
    "gqa": ("kv_heads",),
    "mla": ("latent_dim", "rope_dim"),
    "linear": ("feature_dim",),
}


def decode_cache_shapes(
    kind,
    n_tokens,
    *,
    heads,
    head_dim,
    kv_heads=None,
    latent_dim=None,
    rope_dim=None,
    feature_dim=None,
):
    """The tensors one layer keeps for one sequence after `n_tokens` tokens, name -> shape.

    kind        tensors per layer (H heads of head_dim d_h, N tokens)
    "mha"       keys, values `(H, N, d_h)` each
    "mqa"       keys, values `(1, N, d_h)`: one key/value head for all query heads
    "gqa"       keys, values `(G, N, d_h)`: G = `kv_heads` key/value heads, H/G queries each
    "mla"       latent `(N, d_c)`, rope_keys `(N, d_R)`: d_c = `latent_dim`, d_R = `rope_dim`
    "linear"    S `(H, d_h, m)`, z `(H, m)`: S = Σ v_j φ(k_j)ᵀ and z = Σ φ(k_j) (the
                `LinearAttentionState`), m = `feature_dim`; no N anywhere

    Arguments as in `decode_memory_bytes`.

    >>> decode_cache_shapes("gqa", 10, heads=8, head_dim=64, kv_heads=2)
    {'keys': (2, 10, 64), 'values': (2, 10, 64)}
    >>> decode_cache_shapes("linear", 10, heads=8, head_dim=64, feature_dim=32)
    {'S': (8, 64, 32), 'z': (8, 32)}
    """
    sizes = {
        "kv_heads": kv_heads,
        "latent_dim": latent_dim,
        "rope_dim": rope_dim,
        "feature_dim": feature_dim,
    }
    _check("decode_cache_shapes", kind, n_tokens, heads, head_dim, sizes)
    n, h, d = n_tokens, heads, head_dim
    if kind == "mla":
        return {"latent": (n, latent_dim), "rope_keys": (n, rope_dim)}
    if kind == "linear":
        return {"S": (h, d, feature_dim), "z": (h, feature_dim)}
    groups = {"mha": h, "mqa": 1, "gqa": kv_heads}[kind]
    return {"keys": (groups, n, d), "values": (groups, n, d)}


def decode_memory_bytes(
    kind,
    n_tokens,
    *,
    layers,
    heads,
    head_dim,
    kv_heads=None,
    latent_dim=None,
    rope_dim=None,
    feature_dim=None,
    bytes_per_value=2,
):
    """Bytes a decoder keeps for one sequence after `n_tokens` tokens: L layers of the tensors of
    `decode_cache_shapes`, b = `bytes_per_value` bytes a number (2 for bfloat16):

        "mha"      2 L N H d_h b       keys and values of every head
        "mqa"      2 L N d_h b         one key/value head (Shazeer, 2019)
        "gqa"      2 L N G d_h b       G key/value heads (Ainslie et al., 2023)
        "mla"      L N (d_c + d_R) b   latent and rotary key (DeepSeek-V2, 2024)
        "linear"   L H m (d_h + 1) b   state and normalizer, the same for every N

    A batch of B sequences keeps B times as much. Every argument must be a positive int
    (n_tokens may be 0); each kind takes exactly the size arguments it uses (kv_heads for
    "gqa", latent_dim and rope_dim for "mla", feature_dim for "linear") and refuses the others.

    Args:
        kind: one of "mha", "mqa", "gqa", "mla", "linear".
        n_tokens: N, the tokens so far (prompt and generated).
        layers, heads, head_dim: L, H query heads, d_h (the key and the value width of a head).
        kv_heads: G, the key/value heads of "gqa"; it must divide H.
        latent_dim, rope_dim: d_c and d_R of "mla".
        feature_dim: m, the features of linear attention's map φ.
        bytes_per_value: b.

    Returns:
        int.

    >>> llama = dict(layers=32, heads=32, head_dim=128)  # a 7B-like model, bfloat16
    >>> decode_memory_bytes("mha", 4096, **llama) / 2**30  # GiB
    2.0
    >>> decode_memory_bytes("linear", 4096, **llama, feature_dim=128) / 2**20  # MiB, any N
    32.25
    """
    sizes = {
        "kv_heads": kv_heads,
        "latent_dim": latent_dim,
        "rope_dim": rope_dim,
        "feature_dim": feature_dim,
    }
    fn = "decode_memory_bytes"
    check_positive_int(fn, "layers", layers)
    check_positive_int(fn, "bytes_per_value", bytes_per_value)
    _check(fn, kind, n_tokens, heads, head_dim, sizes)
    shapes = decode_cache_shapes(kind, n_tokens, heads=heads, head_dim=head_dim, **sizes)
    return layers * sum(math.prod(shape) for shape in shapes.values()) * bytes_per_value


def _check(fn, kind, n_tokens, heads, head_dim, sizes):
    """kind known, N ≥ 0, positive sizes, exactly the sizes the kind uses, G dividing H."""
    check_choice(fn, "kind", kind, DECODE_KINDS)
    check_non_negative_int(fn, "n_tokens", n_tokens)
    check_positive_int(fn, "heads", heads)
    check_positive_int(fn, "head_dim", head_dim)
    for name, value in sizes.items():
        if name in _NEEDS[kind]:
            if value is None:
                raise ValueError(f"{fn}: kind={kind!r} needs {name}; got {name}=None")
            check_positive_int(fn, name, value)
        elif value is not None:
            users = [k for k, needs in _NEEDS.items() if name in needs]
            raise ValueError(
                f"{fn}: {name} applies to kind={users[0]!r} only; got {name}={value!r} with "
                f"kind={kind!r}"
            )
    kv_heads = sizes["kv_heads"]
    if kind == "gqa" and heads % kv_heads:
        raise ValueError(
            f"{fn}: kv_heads must divide heads (each key/value head serves heads / kv_heads "
            f"query heads); got heads={heads}, kv_heads={kv_heads}"
        )
