"""Packed sequences on linear attention's Triton kernels: `linear_attention(..., cu_seqlens=...,
method="triton")` against each sequence called on its own through the kernels and against the
float64 reference (each sequence alone, in float64) — empty sequences, sequences shorter than a
chunk, ragged lengths whose chunks start off the multiples of C, one sequence, no token at all,
initial states, normalized and not: outputs, final states and every gradient. Bad cu_seqlens get
the package's errors; a packed pass reads nothing on the host; opcheck on the operators with
cu_seqlens. In the Triton interpreter, chunks of 64 tokens, small sizes."""

import itertools

import pytest
import torch

pytest.importorskip("triton")

from linattn_core import linear_attention
from linattn_core.attention import LinearAttentionState
from linattn_core.kernels import ops
from linattn_core.kernels.linear_attention import function
from linattn_core.kernels.tools.launches import host_work
from linattn_core.testing import (
    KERNEL_RTOL,
    assert_close,
    compiled_gradients,
    values_and_gradients,
)

H, D, D_V, CHUNK = 2, 16, 32, 64
# empty sequences (first, inside, last), shorter than a chunk, one crossing the multiples of C
# from an odd start, one chunk exactly from an odd start; one sequence of two chunks; short ones
# (the ragged case with and without normalization and states, the others in two of the four)
LENGTHS = {"ragged": [0, 5, 0, 70, 1, 64, 0], "single": [77], "short": [3, 0, 9]}


def boundaries(lengths):
    return torch.tensor([0, *itertools.accumulate(lengths)])


def packed_inputs(lengths, *, normalize, with_state, dtype=torch.float32, d=D, d_v=D_V, seed=0):
    """Fresh random inputs `(1, H, N, ·)` (positive features, as φ = elu + 1 gives) and, when
    `with_state`, initial states `(S, H, ·)` (z only when normalized), as one list."""
    generator = torch.Generator().manual_seed(seed)
    n, s = sum(lengths), len(lengths)

    def draw(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    tokens = [draw(1, H, n, d).abs(), draw(1, H, n, d).abs(), draw(1, H, n, d_v)]
    states = [draw(s, H, d_v, d).abs(), *([draw(s, H, d).abs()] if normalize else [])]
    return [x.to(dtype) for x in tokens + (states if with_state else [])]


def packed(cu_seqlens, method, normalize):
    """linear_attention on packed inputs, returning (o, S_N[, z_N])."""

    def call(q, k, v, *state):
        initial = None
        if state:
            initial = LinearAttentionState(state[0], state[1] if normalize else None)
        o, final = linear_attention(
            q, k, v, causal=True, normalize=normalize, method=method, chunk_size=CHUNK,
            initial_state=initial, output_final_state=True, cu_seqlens=cu_seqlens,
        )  # fmt: skip
        return (o, final.S, final.z) if normalize else (o, final.S)

    return call


def one_by_one(lengths, method, normalize):
    """Each sequence called on its own (its slice of the tokens, its row of the states), the
    outputs concatenated and the final states stacked: (o, S_N[, z_N])."""

    def call(q, k, v, *state):
        outputs, finals = [], []
        for s, (start, end) in enumerate(itertools.pairwise(boundaries(lengths).tolist())):
            tokens = (x[:, :, start:end] for x in (q, k, v))
            rows = [x[s : s + 1] for x in state]
            one = packed(None, method, normalize)(*tokens, *rows)
            outputs.append(one[0])
            finals.append(one[1:])
        return torch.cat(outputs, dim=2), *(torch.cat(f) for f in zip(*finals, strict=True))

    return call


def results(call, inputs, normalize, sequences):
    """(o, S_N[, z_N], then ∂/∂ each input) of `call` for fixed random output gradients."""
    generator = torch.Generator().manual_seed(1)
    d, v = inputs[0].shape[-1], inputs[2]
    state = (sequences, H, v.shape[-1], d)
    shapes = [v.shape, state, *([(sequences, H, d)] if normalize else [])]
    grads = [torch.randn(shape, generator=generator, dtype=torch.float64).to(v) for shape in shapes]
    return values_and_gradients(call, inputs, grads)


def names(normalize, with_state):
    outputs = ["o", "S_N", *(["z_N"] if normalize else [])]
    grads = [
        "dq",
        "dk",
        "dv",
        *((["dS_0", *(["dz_0"] if normalize else [])]) if with_state else []),
    ]
    return outputs + grads


@pytest.mark.interpreter
@pytest.mark.slow
@pytest.mark.usefixtures("poisoned_empty")
@pytest.mark.parametrize(
    ("lengths", "normalize", "with_state"),
    [
        pytest.param(LENGTHS[name], normalize, state, id=f"{name}-{normalize=}-{state=}")
        for name, normalize, state in [
            *(
                ("ragged", normalize, state)
                for normalize in (True, False)
                for state in (True, False)
            ),
            ("single", True, True),
            ("single", False, False),
            ("short", True, False),
            ("short", False, True),
        ]
    ],
)
def test_packed_kernels_match_each_sequence_alone_and_float64(lengths, normalize, with_state):
    """Outputs, final states and every gradient of one packed pass against the float64
    reference (each sequence alone, "chunked" in float64) within float32's kernel tolerance,
    and against the kernels called on each sequence alone."""
    inputs = packed_inputs(lengths, normalize=normalize, with_state=with_state)
    cu_seqlens = boundaries(lengths)
    actual = results(packed(cu_seqlens, "triton", normalize), inputs, normalize, len(lengths))
    expected = results(
        one_by_one(lengths, "chunked", normalize), [x.double() for x in inputs], normalize,
        len(lengths),
    )  # fmt: skip
    alone = results(one_by_one(lengths, "triton", normalize), inputs, normalize, len(lengths))
    for name, a, e, b in zip(names(normalize, with_state), actual, expected, alone, strict=True):
        assert a.dtype == torch.float32 and a.shape == e.shape
        assert_close(a, e, rtol=KERNEL_RTOL[torch.float32], name=name)
        assert_close(a, b, rtol=1e-6, name=f"{name} (each sequence alone)")


@pytest.mark.interpreter
@pytest.mark.slow
@pytest.mark.usefixtures("poisoned_empty")
def test_feature_and_value_tiles_of_each_architecture(arch):
    """d = d_v = 32 in float32, two tiles of each (16 wide): the output kernel's feature tiles
    write shares of the numerator and denominator, the walk's value and feature tiles shares of
    each gradient, with each architecture's tiles (`arch`)."""
    lengths = [3, 0, 70]
    inputs = packed_inputs(lengths, normalize=True, with_state=True, d=32, d_v=32)
    actual = results(packed(boundaries(lengths), "triton", True), inputs, True, len(lengths))
    expected = results(
        one_by_one(lengths, "chunked", True), [x.double() for x in inputs], True, len(lengths)
    )
    for name, a, e in zip(names(True, True), actual, expected, strict=True):
        assert_close(a, e, rtol=KERNEL_RTOL[torch.float32], name=name)


@pytest.mark.interpreter
@pytest.mark.parametrize("normalize", [True, False])
def test_no_token_at_all_passes_each_initial_state_through(normalize):
    """N = 0 (two empty sequences): an empty output, the final states equal to the initial
    ones (new tensors), and the initial states' gradients the final states'."""
    q, k, v, *state = packed_inputs([0, 0], normalize=normalize, with_state=True)
    state = [x.requires_grad_() for x in state]
    o, *finals = packed(boundaries([0, 0]), "triton", normalize)(q, k, v, *state)
    assert o.shape == (1, H, 0, D_V)
    grads = [torch.randn_like(x) for x in finals]
    for final, initial in zip(finals, state, strict=True):
        assert torch.equal(final, initial) and final.data_ptr() != initial.data_ptr()
    received = torch.autograd.grad(finals, state, grads)
    assert all(torch.equal(a, e) for a, e in zip(received, grads, strict=True))


@pytest.mark.interpreter
@pytest.mark.slow
@pytest.mark.usefixtures("interpreter_bfloat16_dot")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_packed_inputs(dtype):
    """16-bit operands, float32 accumulation: the ragged case within the dtype's tolerance."""
    lengths = LENGTHS["ragged"]
    inputs = packed_inputs(lengths, normalize=True, with_state=True, dtype=dtype)
    actual = results(packed(boundaries(lengths), "triton", True), inputs, True, len(lengths))
    expected = results(
        one_by_one(lengths, "chunked", True), [x.double() for x in inputs], True, len(lengths)
    )
    for name, a, e in zip(names(True, True), actual, expected, strict=True):
        assert a.dtype == dtype
        assert_close(a, e, rtol=KERNEL_RTOL[dtype], name=name)


@pytest.mark.interpreter
@pytest.mark.slow
def test_heads_in_several_dimensions():
    """Inputs `(1, H1, H2, N, ·)`: states `(S, H1, H2, ·)`, as the heads of one dimension."""
    lengths = [5, 0, 9]
    q, k, v, s0, z0 = packed_inputs(lengths, normalize=True, with_state=True)
    state = LinearAttentionState(s0, z0)
    options = {"causal": True, "output_final_state": True, "cu_seqlens": boundaries(lengths)}
    o, final = linear_attention(q, k, v, method="triton", initial_state=state, **options)
    split = [x.reshape(x.shape[0], 1, H, *x.shape[2:]) for x in (q, k, v, s0, z0)]
    o2, final2 = linear_attention(
        *split[:3], method="triton", initial_state=LinearAttentionState(*split[3:]), **options
    )
    assert o2.shape == (1, 1, H, sum(lengths), D_V) and final2.S.shape == (3, 1, H, D_V, D)
    assert final2.z.shape == (3, 1, H, D)
    for a, e in ((o2, o), (final2.S, final.S), (final2.z, final.z)):
        assert torch.equal(a.reshape(e.shape), e)


@pytest.mark.interpreter
def test_strided_cu_seqlens():
    """Boundaries that are a strided view (every other element) give the contiguous ones'
    results."""
    lengths = [5, 0, 9]
    q, k, v = packed_inputs(lengths, normalize=True, with_state=False)
    contiguous = boundaries(lengths)
    strided = torch.stack([contiguous, -contiguous], dim=1)[:, 0]
    assert not strided.is_contiguous()
    options = {"causal": True, "method": "triton"}
    expected = linear_attention(q, k, v, cu_seqlens=contiguous, **options)
    assert torch.equal(linear_attention(q, k, v, cu_seqlens=strided, **options), expected)


BAD = [
    (torch.tensor([0, 3, 2, 9]), ValueError, "non-decreasing"),
    (torch.tensor([1, 3, 9]), ValueError, "start at 0 and end"),
    (torch.tensor([0, 3, 8]), ValueError, "start at 0 and end"),
    (torch.tensor([0, 3, 9], dtype=torch.int32), TypeError, "torch.int64"),
    (torch.tensor([9]), ValueError, "1-D tensor"),
]


@pytest.mark.interpreter
@pytest.mark.parametrize(("cu_seqlens", "error", "match"), BAD)
def test_bad_cu_seqlens(cu_seqlens, error, match):
    """Boundaries that are not 0, …, N non-decreasing int64 get the package's errors (their
    values are checked on a CPU, where reading them costs no synchronization)."""
    q, k, v = packed_inputs([3, 6], normalize=True, with_state=False)
    with pytest.raises(error, match=match):
        linear_attention(q, k, v, causal=True, method="triton", cu_seqlens=cu_seqlens)


@pytest.mark.interpreter
def test_bad_packed_layouts_and_states():
    """A batch of two, non-causal attention, states of the wrong number of sequences."""
    q, k, v, s0, z0 = packed_inputs([3, 6], normalize=True, with_state=True)
    cu_seqlens = boundaries([3, 6])
    options = {"method": "triton", "cu_seqlens": cu_seqlens}
    with pytest.raises(ValueError, match="leading batch of 1"):
        linear_attention(*(x.expand(2, -1, -1, -1) for x in (q, k, v)), causal=True, **options)
    with pytest.raises(ValueError, match="causal=True"):
        linear_attention(q, k, v, causal=False, **options)
    with pytest.raises(ValueError, match="one per sequence"):
        state = LinearAttentionState(s0[:1], z0[:1])
        linear_attention(q, k, v, causal=True, initial_state=state, **options)


@pytest.mark.parametrize("normalize", [True, False])
def test_a_packed_pass_reads_nothing_on_the_host(monkeypatch, normalize):
    """Forward and backward with states: no synchronizing torch operation, no value read
    (`tolist`, `item`), one launch a pass, grids from shapes. The values of cu_seqlens are read
    on a CPU only (`function.check_values_on_cpu`), which a GPU skips: so skipped here."""
    monkeypatch.setattr(function, "check_values_on_cpu", lambda fn, cu_seqlens, n: None)

    def refuse(*args, **kwargs):
        raise AssertionError("a packed pass read a value on the host")

    lengths = [0, 70, 3, 200]
    inputs = packed_inputs(lengths, normalize=normalize, with_state=True)
    inputs = [x.requires_grad_() for x in inputs]
    cu_seqlens = boundaries(lengths)

    def step():
        o, s_n, *z_n = packed(cu_seqlens, "triton", normalize)(*inputs)
        torch.autograd.grad(o.sum() + s_n.sum() + sum(z.sum() for z in z_n), inputs)

    monkeypatch.setattr(torch.Tensor, "tolist", refuse)
    monkeypatch.setattr(torch.Tensor, "item", refuse)
    work = host_work(step)
    assert work.launches == ["segment_output_kernel", "walk_bwd_kernel"]
    assert work.of_kind("synchronizing") == {}


@pytest.mark.interpreter
@pytest.mark.slow
def test_opcheck_passes_on_the_operators_with_cu_seqlens():
    """Schema, fake tensors (states `(S, H, ·)` from cu_seqlens's shape), autograd registration
    and AOTAutograd, for the forward operator and the backward one, on packed inputs (normalized:
    every argument the operators have; tests/kernels/test_training.py checks them unnormalized)."""
    lengths = [5, 0, 30]
    inputs = [x.requires_grad_() for x in packed_inputs(lengths, normalize=True, with_state=True)]
    cu_seqlens = boundaries(lengths)
    args = (*inputs, True, 1e-6, CHUNK, True, cu_seqlens)
    torch.library.opcheck(ops.linear_attention_forward, args)
    q, k, v, s0, z0 = (x.detach() for x in inputs)
    saved = ops.linear_attention_forward(q, k, v, s0, z0, *args[5:])
    finals = (torch.randn_like(s0), torch.randn_like(z0))
    backward_args = (q, k, v, saved[0], saved[2], torch.randn_like(v), s0, z0, *finals, True, CHUNK)
    backward_args += (cu_seqlens,)
    torch.library.opcheck(ops.linear_attention_backward, backward_args)


@pytest.mark.interpreter
@pytest.mark.slow
def test_torch_compile_traces_a_packed_pass_without_graph_breaks():
    """torch.compile(fullgraph=True) (AOTAutograd, which raises at a graph break) of a packed
    step from initial states to final states: the gradients eager mode computes."""
    lengths = [5, 0, 30]
    leaves = [x.requires_grad_() for x in packed_inputs(lengths, normalize=True, with_state=True)]
    cu_seqlens = boundaries(lengths)

    def step(*inputs):
        o, s_n, z_n = packed(cu_seqlens, "triton", True)(*inputs)
        return o.sum() + s_n.sum() + z_n.sum()

    eager, traced = compiled_gradients(step, leaves)
    for e, c in zip(eager, traced, strict=True):
        torch.testing.assert_close(c, e, rtol=1e-5, atol=1e-6)
