"""linattn_core.chunked: causal chunked linear attention walked in segments, with its own
backward pass, against the parallel form in float64."""

import functools

import pytest
import torch

from linattn_core import chunked, linear_attention
from linattn_core.testing import assert_close, random_qkv, values_and_gradients


def causal_values_and_gradients(method, q, k, v, **options):
    grad = torch.randn(v.shape, generator=torch.Generator().manual_seed(1), dtype=v.dtype)
    attention = functools.partial(linear_attention, causal=True, method=method, **options)
    return values_and_gradients(attention, (q, k, v), grad)


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize(
    ("n", "chunk_size", "segment"),
    [(200, 64, None), (1000, 16, 4096), (37, 64, None), (130, 8, 600), (5, 1, 8), (64, 64, 64)],
)
def test_values_and_gradients_match_the_parallel_form(
    monkeypatch, n, chunk_size, segment, normalize
):
    if segment:  # small segments: many of them, each carrying the state to the next
        monkeypatch.setattr(chunked, "SEGMENT_ELEMENTS", segment)
    q, k, v = random_qkv(2, 3, n=n, d=8, d_v=5, positive=True, seed=n)
    options = {"normalize": normalize, "eps": 1e-6}
    got = causal_values_and_gradients("chunked", q, k, v, chunk_size=chunk_size, **options)
    want = causal_values_and_gradients("parallel", q, k, v, **options)
    for name, a, b in zip(("output", "dq", "dk", "dv"), got, want, strict=True):
        assert_close(a, b, rtol=1e-12, name=name)


@pytest.mark.slow
def test_gradcheck():
    q, k, v = (x.requires_grad_() for x in random_qkv(2, n=11, d=3, d_v=2, positive=True))
    for normalize in (True, False):
        assert torch.autograd.gradcheck(
            lambda a, b, c, normalize=normalize: linear_attention(
                a, b, c, causal=True, normalize=normalize, method="chunked", chunk_size=4
            ),
            (q, k, v),
        )


def test_segments_are_whole_chunks_then_one_short_chunk():
    assert chunked.segments(8, 200, 64) == [(0, 192, 64), (192, 200, 8)]
    assert chunked.segments(1, 5, 64) == [(0, 5, 5)]
    assert chunked.segments(1, 0, 64) == []
    many = chunked.segments(32, 4096, 64)  # 32 heads: 2 chunks a segment
    assert many[:2] == [(0, 128, 64), (128, 256, 64)] and many[-1][1] == 4096


def test_float32_agrees_with_float64():
    q, k, v = random_qkv(1, 4, n=3000, d=16, d_v=16, positive=True)
    out = linear_attention(q.float(), k.float(), v.float(), causal=True, method="chunked")
    assert_close(out, linear_attention(q, k, v, causal=True, method="parallel"), rtol=1e-5)


@pytest.mark.slow
def test_peak_memory_is_the_output_and_a_segment():
    """The forward pass adds its output, ρ and one segment's temporaries, not N-row ones: under
    1.5× the output at N = 16384 with 8 heads of 64 (a fresh process measures it)."""
    from linattn_core.bench.peers import HEADS, D, fresh_process

    n = 16384
    peak = fresh_process("ours", n, backward=False, threads=1, measure="memory")["peak_bytes"]
    output = HEADS * n * D * 4
    assert output <= peak < 1.5 * output
