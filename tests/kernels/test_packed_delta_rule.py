"""Packed sequences (cu_seqlens) on the delta rule's Triton kernels, ungated and gated: against
each sequence run alone on the same kernels (to the bit) and against the float64 chunked form
— empty sequences (first, inside, last), sequences shorter than a chunk, ragged lengths across
chunk boundaries, one sequence, only empty ones; with and without initial states; outputs,
final states and every gradient (dq, dk, dv, dβ, dg, ∂L/∂S_0). The kernels take no float64, so
float32 is compared with float64 by relative errors. Bad cu_seqlens get the package's errors;
a packed training step reads nothing back from the device; the operators with cu_seqlens pass
opcheck and `torch.compile(fullgraph=True)` traces a packed step."""

import itertools

import pytest
import torch

pytest.importorskip("triton")

from linattn_core.delta import delta_rule
from linattn_core.gated import gated_delta_rule
from linattn_core.kernels import ops
from linattn_core.kernels.delta_rule import function
from linattn_core.kernels.delta_rule.function import packed_work
from linattn_core.kernels.tools.launches import host_work
from linattn_core.testing import (
    KERNEL_RTOL,
    assert_close,
    compiled_gradients,
    values_and_gradients,
)

H, D_K, D_V = 2, 16, 16
# float32 inputs: the kernels' chunk is 32 tokens (`tiles.kernel_chunk`). Empty sequences
# first, inside and last; shorter than a chunk; a chunk and a bit (40 = 32 + 8), exactly one
# chunk plus one token (33): chunks that start at a sequence's start, not at a multiple of 32
RAGGED = [0, 5, 0, 40, 1, 33, 0]


def boundaries(lengths):
    return torch.tensor([0, *itertools.accumulate(lengths)])


def packed_inputs(lengths, *, gated, with_state, seed=0):
    """float64 inputs `(1, H, N, ·)` (unit keys, β in (0, 1), log-gates in (−1, 0) when
    `gated`), then the initial states `(S, H, d_v, d_k)` when `with_state`: a flat list."""
    generator = torch.Generator().manual_seed(seed)
    n, s = sum(lengths), len(lengths)

    def draw(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    q, k, v = draw(1, H, n, D_K), draw(1, H, n, D_K), draw(1, H, n, D_V)
    k = k / k.norm(dim=-1, keepdim=True)
    beta = torch.rand(1, H, n, generator=generator, dtype=torch.float64)
    gates = [-torch.rand(1, H, n, generator=generator, dtype=torch.float64)] if gated else []
    states = [0.5 * draw(s, H, D_V, D_K)] if with_state else []
    return [q, k, v, beta, *gates, *states]


def run(inputs, *, gated, with_state, method, cu_seqlens=None):
    """The rule on the flat inputs of `packed_inputs`: (o, the final states)."""
    tokens = inputs[: 5 if gated else 4]
    s0 = inputs[-1] if with_state else None
    options = {"method": method, "initial_state": s0, "cu_seqlens": cu_seqlens}
    if gated:
        return gated_delta_rule(*tokens, **options)
    return delta_rule(*tokens, **options)


def one_by_one(inputs, lengths, **options):
    """Each sequence run alone: outputs concatenated along N, final states stacked."""
    n_tokens = 5 if options["gated"] else 4
    results = []
    for s, (start, end) in enumerate(itertools.pairwise(boundaries(lengths).tolist())):
        sequence = [x[:, :, start:end] for x in inputs[:n_tokens]]
        sequence += [x[s : s + 1] for x in inputs[n_tokens:]]
        results.append(run(sequence, **options))
    outputs, finals = zip(*results, strict=True)
    return torch.cat(outputs, dim=2), torch.cat(finals)


def compared(lengths, *, gated, with_state, seed=0, dtype=torch.float32):
    """(packed kernels, each sequence alone on the kernels, the float64 chunked form, packed),
    the kernels on inputs in `dtype`, the float64 form on the same numbers: each a tuple (o,
    final states, then the gradient of every input), for random weights of the outputs and
    states."""
    rounded = packed_inputs(lengths, gated=gated, with_state=with_state, seed=seed)
    single = [x.to(dtype) for x in rounded]
    inputs = [x.double() for x in single]
    cu_seqlens = boundaries(lengths)
    options = {"gated": gated, "with_state": with_state}
    generator = torch.Generator().manual_seed(seed + 1)
    shapes = (inputs[2].shape, (len(lengths), H, D_V, D_K))
    weights = [torch.randn(shape, generator=generator, dtype=torch.float64) for shape in shapes]

    def packed(*x):
        return run(x, method="triton", cu_seqlens=cu_seqlens, **options)

    def alone(*x):
        return one_by_one(x, lengths, method="triton", **options)

    def reference(*x):
        return run(x, method="chunked", cu_seqlens=cu_seqlens, **options)

    return (
        values_and_gradients(packed, single, [w.to(dtype) for w in weights]),
        values_and_gradients(alone, single, [w.to(dtype) for w in weights]),
        values_and_gradients(reference, inputs, weights),
    )


def names(gated, with_state):
    grads = ["dq", "dk", "dv", "dbeta", *(["dg"] if gated else []), *(["dS0"] * with_state)]
    return ["o", "S", *grads]


@pytest.mark.slow
@pytest.mark.interpreter
@pytest.mark.usefixtures("poisoned_empty")
@pytest.mark.parametrize(("gated", "with_state"), [(False, False), (True, True)])
def test_ragged_packs_are_each_sequence_alone_and_the_float64_form(gated, with_state):
    packed, alone, reference = compared(RAGGED, gated=gated, with_state=with_state)
    assert packed[1].shape == (len(RAGGED), H, D_V, D_K)
    for name, actual, same, wanted in zip(
        names(gated, with_state), packed, alone, reference, strict=True
    ):
        assert torch.equal(actual, same), name
        assert_close(actual.double(), wanted, rtol=2e-5, name=name)


@pytest.mark.slow
@pytest.mark.interpreter
@pytest.mark.usefixtures("poisoned_empty")
def test_one_sequence():
    packed, alone, reference = compared([70], gated=True, with_state=True, seed=3)
    for name, actual, same, wanted in zip(names(True, True), packed, alone, reference, strict=True):
        assert torch.equal(actual, same), name
        assert_close(actual.double(), wanted, rtol=2e-5, name=name)


@pytest.mark.slow
@pytest.mark.interpreter
@pytest.mark.usefixtures("poisoned_empty", "interpreter_bfloat16_dot")
def test_16_bit_inputs_in_chunks_of_64():
    """16-bit inputs take chunks of 64 tokens and store A over the float32 scratch of its
    blocks: sequences across that chunk (70 = 64 + 6), shorter (3), exactly one chunk (64).
    bfloat16, training's dtype: float16 takes the same path (test_delta_rule.py runs both)."""
    dtype = torch.bfloat16
    lengths = [3, 0, 70, 64, 1]
    packed, alone, reference = compared(lengths, gated=True, with_state=True, dtype=dtype)
    for name, actual, same, wanted in zip(names(True, True), packed, alone, reference, strict=True):
        assert torch.equal(actual, same), name
        assert_close(actual.double(), wanted, rtol=KERNEL_RTOL[dtype], name=name)


@pytest.mark.slow
@pytest.mark.interpreter
@pytest.mark.usefixtures("poisoned_empty")
def test_leading_dimensions_other_than_one_and_heads():
    """Inputs `(1, 2, 1, N, ·)` and states `(S, 2, 1, d_v, d_k)`: the heads flattened for the
    kernels and given back, as without packing."""
    lengths = [0, 9, 40]
    q, k, v, beta, s0 = [x.float() for x in packed_inputs(lengths, gated=False, with_state=True)]
    cu_seqlens = boundaries(lengths)
    o, final = delta_rule(q, k, v, beta, method="triton", initial_state=s0, cu_seqlens=cu_seqlens)
    tokens = [x.unsqueeze(2) for x in (q, k, v, beta)]
    o_5d, final_5d = delta_rule(
        *tokens, method="triton", initial_state=s0.unsqueeze(2), cu_seqlens=cu_seqlens
    )
    assert o_5d.shape == (1, H, 1, sum(lengths), D_V)
    assert final_5d.shape == (len(lengths), H, 1, D_V, D_K)
    assert torch.equal(o_5d.squeeze(2), o) and torch.equal(final_5d.squeeze(2), final)


@pytest.mark.slow
@pytest.mark.interpreter
@pytest.mark.parametrize("gated", [False, True])
def test_only_empty_sequences_pass_their_states_through(gated):
    """N = 0: no launch; each final state is its initial state, and ∂L/∂S_0 is ∂L/∂S."""
    lengths = [0, 0, 0]
    inputs = [x.float() for x in packed_inputs(lengths, gated=gated, with_state=True)]
    cu_seqlens = boundaries(lengths)
    weights = [torch.randn(1, H, 0, D_V), torch.randn(len(lengths), H, D_V, D_K)]

    def packed(*x):
        return run(x, gated=gated, with_state=True, method="triton", cu_seqlens=cu_seqlens)

    o, final, *grads = values_and_gradients(packed, inputs, weights)
    assert o.shape == (1, H, 0, D_V)
    assert torch.equal(final, inputs[-1])
    assert torch.equal(grads[-1], weights[1])
    tokens = zip(grads[:-1], inputs[:-1], strict=True)
    assert all(x.shape == y.shape and not x.any() for x, y in tokens)


@pytest.mark.interpreter
def test_the_walks_work_list_points_at_each_sequences_first_chunk():
    """The sequences' rows (start, end, first chunk) against the chunk rows of
    `packing.chunk_indices`: sequence s's chunks are rows first, first + 1, … of the list."""
    cu_seqlens = boundaries(RAGGED)
    chunks, sequences = packed_work(cu_seqlens, int(cu_seqlens[-1]), 32)
    assert sequences.shape == (len(RAGGED), 3)
    for s, (start, end, first) in enumerate(sequences.tolist()):
        assert (start, end) == tuple(cu_seqlens[s : s + 2].tolist())
        count = -(-(end - start) // 32)
        rows = chunks[first : first + count].tolist()
        assert rows == [[s, start + 32 * j, min(start + 32 * (j + 1), end)] for j in range(count)]


@pytest.mark.parametrize(
    ("cu_seqlens", "error", "match"),
    [
        (torch.tensor([0, 5, 3, 12]), ValueError, "non-decreasing"),
        (torch.tensor([0, 5, 11]), ValueError, "end at the sequence length"),
        (torch.tensor([1, 5, 12]), ValueError, "start at 0"),
        (torch.tensor([0, 5, 12], dtype=torch.int32), TypeError, "int64"),
        (torch.tensor([12]), ValueError, "S ≥ 1"),
    ],
)
@pytest.mark.parametrize("gated", [False, True])
def test_bad_cu_seqlens_get_the_package_errors(cu_seqlens, error, match, gated):
    inputs = [x.float() for x in packed_inputs([5, 7], gated=gated, with_state=False)]
    with pytest.raises(error, match=match):
        run(inputs, gated=gated, with_state=False, method="triton", cu_seqlens=cu_seqlens)


def test_states_of_the_wrong_number_of_sequences_are_refused():
    inputs = [x.float() for x in packed_inputs([5, 7], gated=False, with_state=True)]
    with pytest.raises(ValueError, match="one per sequence"):
        run(inputs, gated=False, with_state=True, method="triton", cu_seqlens=boundaries([12]))


@pytest.mark.slow
@pytest.mark.parametrize("gated", [False, True])
def test_a_packed_training_step_never_synchronizes(monkeypatch, gated):
    """No value read on the host (`.item()`, `.tolist()`, `nonzero`, …), so that a CUDA graph
    can capture a packed step: the kernels' launches recorded, not run (`host_work`), every
    torch operation counted, on bfloat16 inputs of sequences up to 200 tokens. `.tolist()`
    bypasses the dispatcher: it raises here, once the value check that CPU tensors get (and
    GPU tensors do not) is set aside."""

    def read_back(self):
        raise AssertionError("a tensor read on the host")

    monkeypatch.setattr(function, "_check_packed", lambda fn, cu_seqlens, q: None)
    monkeypatch.setattr(torch.Tensor, "tolist", read_back)
    lengths = [0, 100, 3, 0, 200, 17]
    inputs = packed_inputs(lengths, gated=gated, with_state=True)
    leaves = [x.to(torch.bfloat16).requires_grad_() for x in inputs]
    cu_seqlens = boundaries(lengths)

    def step():
        o, s = run(leaves, gated=gated, with_state=True, method="triton", cu_seqlens=cu_seqlens)
        return torch.autograd.grad(o.float().sum() + s.float().sum(), leaves)

    work = host_work(step)
    assert len(work.launches) == 9  # 3 kernels forward, 6 backward
    assert work.of_kind("synchronizing") == {}


@pytest.mark.interpreter
@pytest.mark.slow
def test_opcheck_passes_on_the_packed_operators():
    """The gated rule with initial states: every input and output of both operators."""
    lengths = [0, 7, 33]
    q, k, v, beta, g, s0 = [x.float() for x in packed_inputs(lengths, gated=True, with_state=True)]
    cu_seqlens = boundaries(lengths)
    args = (q, k, v, beta, s0, 64, g, cu_seqlens)
    torch.library.opcheck(ops.delta_rule_forward, args)
    grads = (torch.randn_like(v), torch.randn(len(lengths), H, D_V, D_K))
    torch.library.opcheck(ops.delta_rule_backward, (q, k, v, beta, s0, *grads, 64, g, cu_seqlens))


@pytest.mark.interpreter
@pytest.mark.slow
def test_torch_compile_traces_a_packed_step_without_graph_breaks():
    lengths = [0, 7, 33]
    inputs = [x.float() for x in packed_inputs(lengths, gated=True, with_state=True)]
    leaves = [x.requires_grad_() for x in inputs]
    cu_seqlens = boundaries(lengths)

    def step(*x):
        o, s = run(x, gated=True, with_state=True, method="triton", cu_seqlens=cu_seqlens)
        return o.sum() + s.sum()

    eager, traced = compiled_gradients(step, leaves)
    for e, c in zip(eager, traced, strict=True):
        torch.testing.assert_close(c, e, rtol=1e-5, atol=1e-6)
