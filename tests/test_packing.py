"""linattn_core.packing: packed sequences (cu_seqlens) in linear_attention, delta_rule and
gated_delta_rule against each sequence called on its own, in float64 — every method, with and
without initial states, outputs, final states and the gradients of every input (gradcheck on a
small case); against independent references (the block-diagonal causal mask of kernel attention,
the delta rule's token loop); "auto" never picks the kernels; bad cu_seqlens and states raise
the package's errors; the device-side chunk indices against a plain Python construction, built
without reading cu_seqlens (meta tensors, fake-tensor tracing)."""

import itertools

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from linattn_core import methods, packing
from linattn_core.attention import LinearAttentionState, kernel_attention, linear_attention
from linattn_core.delta import delta_rule, delta_rule_loop
from linattn_core.gated import gated_delta_rule
from linattn_core.packing import chunk_indices
from linattn_core.testing import assert_close, values_and_gradients

H, D, D_V, CHUNK = 2, 4, 3, 8
# empty sequences (first, inside, last), shorter than a chunk, exactly one chunk, several chunks
# with a ragged end; a single sequence; only empty sequences (N = 0)
LENGTHS = {"ragged": [0, 5, 0, 17, 1, 8, 0], "single": [23], "empty": [0, 0]}
TOKENS = {"linear_attention": 3, "delta_rule": 4, "gated_delta_rule": 5}  # inputs per token
OPERATIONS = {
    "linear_attention": ("parallel", "recurrent", "chunked", "auto"),
    "delta_rule": ("recurrent", "chunked", "auto"),
    "gated_delta_rule": ("recurrent", "chunked", "auto"),
}
CASES = [(op, method) for op, names in OPERATIONS.items() for method in names]


def boundaries(lengths):
    return torch.tensor([0, *itertools.accumulate(lengths)])


def packed_inputs(op, lengths, *, with_state, normalize=True, seed=0):
    """Random float64 inputs of `op` with one row per token, `(1, H, N, ·)`, then its initial
    states `(S, H, ·, ·)` (none unless `with_state`), as one flat list of tensors."""
    generator = torch.Generator().manual_seed(seed)
    n, s = sum(lengths), len(lengths)

    def draw(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    q, k, v = draw(1, H, n, D), draw(1, H, n, D), draw(1, H, n, D_V)
    if op == "linear_attention":  # positive features, as φ = elu + 1 gives
        states = [draw(s, H, D_V, D).abs(), *([draw(s, H, D).abs()] if normalize else [])]
        return [q.abs(), k.abs(), v, *(states if with_state else [])]
    k = k / k.norm(dim=-1, keepdim=True)
    rates = [torch.rand(1, H, n, generator=generator, dtype=torch.float64)]  # β
    if op == "gated_delta_rule":
        rates.append(-torch.rand(1, H, n, generator=generator, dtype=torch.float64))  # g
    return [q, k, v, *rates, *([draw(s, H, D_V, D)] if with_state else [])]


def run(op, inputs, method, cu_seqlens=None, normalize=True):
    """`op` on the flat inputs of `packed_inputs`: (output, *final state tensors)."""
    tokens, state = inputs[: TOKENS[op]], inputs[TOKENS[op] :]
    options = {"method": method, "chunk_size": CHUNK, "cu_seqlens": cu_seqlens}
    if op == "linear_attention":
        initial = LinearAttentionState(state[0], state[1] if normalize else None) if state else None
        options |= {"causal": True, "normalize": normalize, "output_final_state": True}
        output, final = linear_attention(*tokens, initial_state=initial, **options)
        return output, *(x for x in final if x is not None)
    operation = delta_rule if op == "delta_rule" else gated_delta_rule
    return operation(*tokens, initial_state=state[0] if state else None, **options)


def one_by_one(op, inputs, method, lengths, normalize=True):
    """Each sequence called on its own: outputs concatenated, final states stacked."""
    tokens, states = inputs[: TOKENS[op]], inputs[TOKENS[op] :]
    results = []
    for s, (start, end) in enumerate(itertools.pairwise(boundaries(lengths).tolist())):
        sequence = [x[:, :, start:end] for x in tokens] + [x[s : s + 1] for x in states]
        results.append(run(op, sequence, method, normalize=normalize))
    output, *finals = zip(*results, strict=True)
    return torch.cat(output, dim=2), *(torch.cat(final) for final in finals)


@pytest.mark.parametrize("lengths", LENGTHS.values(), ids=LENGTHS.keys())
@pytest.mark.parametrize("with_state", [False, True], ids=["zero_state", "initial_state"])
@pytest.mark.parametrize(("op", "method"), CASES)
def test_packed_is_each_sequence_on_its_own(op, method, with_state, lengths):
    inputs = packed_inputs(op, lengths, with_state=with_state)
    packed = run(op, inputs, method, cu_seqlens=boundaries(lengths))
    expected = one_by_one(op, inputs, method, lengths)
    assert len(packed) == len(expected)
    assert packed[1].shape[0] == len(lengths)  # one final state per sequence
    for name, actual, wanted in zip(("output", "S", "z"), packed, expected, strict=False):
        assert_close(actual, wanted, rtol=1e-12, name=name)


@pytest.mark.parametrize("with_state", [False, True], ids=["zero_state", "initial_state"])
@pytest.mark.parametrize(("op", "method"), CASES)
def test_gradients_are_each_sequence_on_its_own(op, method, with_state):
    lengths = LENGTHS["ragged"]
    inputs = packed_inputs(op, lengths, with_state=with_state, seed=1)
    outputs = run(op, inputs, method, cu_seqlens=boundaries(lengths))
    generator = torch.Generator().manual_seed(2)
    grads = [torch.randn(x.shape, generator=generator, dtype=x.dtype) for x in outputs]
    cu_seqlens = boundaries(lengths)
    packed = values_and_gradients(lambda *x: run(op, x, method, cu_seqlens), inputs, grads)
    alone = values_and_gradients(lambda *x: one_by_one(op, x, method, lengths), inputs, grads)
    for i, (actual, expected) in enumerate(zip(packed, alone, strict=True)):
        assert_close(actual, expected, rtol=1e-12, name=f"value or gradient {i}")


@pytest.mark.parametrize("method", ["recurrent", "chunked", "parallel"])
def test_unnormalized_linear_attention(method):
    lengths = LENGTHS["ragged"]
    inputs = packed_inputs("linear_attention", lengths, with_state=True, normalize=False)
    packed = run("linear_attention", inputs, method, boundaries(lengths), normalize=False)
    expected = one_by_one("linear_attention", inputs, method, lengths, normalize=False)
    assert len(packed) == 2  # output and S: z is None
    for actual, wanted in zip(packed, expected, strict=True):
        assert_close(actual, wanted, rtol=1e-12)


def test_output_alone_without_final_states():
    lengths = LENGTHS["ragged"]
    cu_seqlens = boundaries(lengths)
    q, k, v, beta = packed_inputs("delta_rule", lengths, with_state=False)
    output = delta_rule(q, k, v, beta, output_final_state=False, cu_seqlens=cu_seqlens)
    assert torch.equal(output, delta_rule(q, k, v, beta, cu_seqlens=cu_seqlens)[0])
    phi_q, phi_k, v = packed_inputs("linear_attention", lengths, with_state=False)
    output = linear_attention(phi_q, phi_k, v, causal=True, cu_seqlens=cu_seqlens)
    with_states = run("linear_attention", [phi_q, phi_k, v], "auto", cu_seqlens)
    assert isinstance(output, torch.Tensor)
    assert torch.equal(output, with_states[0])


@pytest.mark.parametrize("op", TOKENS)
def test_gradcheck(op):
    lengths = [2, 0, 3]
    inputs = packed_inputs(op, lengths, with_state=True, seed=3)
    one_head = [x[:, :1].detach().requires_grad_() for x in inputs]
    cu_seqlens = boundaries(lengths)
    check = torch.autograd.gradcheck
    assert check(lambda *x: run(op, x, "chunked", cu_seqlens), one_head, fast_mode=True)


def test_linear_attention_is_kernel_attention_with_a_block_diagonal_mask():
    """An independent reference: token i attends to j ≤ i of its own sequence only."""
    lengths = LENGTHS["ragged"]
    phi_q, phi_k, v = packed_inputs("linear_attention", lengths, with_state=False)
    sequence = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    same = sequence[:, None] == sequence[None, :]  # (N, N)
    similarities = (phi_q @ phi_k.mT).tril() * same
    expected = similarities @ v / (similarities.sum(dim=-1, keepdim=True) + 1e-6)
    output = linear_attention(phi_q, phi_k, v, causal=True, cu_seqlens=boundaries(lengths))
    assert_close(output, expected, rtol=1e-12)
    one = [0, sum(lengths)]  # a single sequence is plain causal linear attention
    alone = kernel_attention(phi_q, phi_k, v, causal=True)
    assert_close(
        linear_attention(phi_q, phi_k, v, causal=True, cu_seqlens=torch.tensor(one)),
        alone,
        rtol=1e-12,
    )


def test_delta_rule_is_the_token_loop_of_each_sequence():
    lengths = LENGTHS["ragged"]
    q, k, v, beta, state = packed_inputs("delta_rule", lengths, with_state=True)
    output, final = delta_rule(q, k, v, beta, initial_state=state, cu_seqlens=boundaries(lengths))
    for s, (start, end) in enumerate(itertools.pairwise(boundaries(lengths).tolist())):
        for h in range(H):
            tokens = (x[0, h, start:end] for x in (q, k, v, beta))
            expected_output, expected_state = delta_rule_loop(*tokens, initial_state=state[s, h])
            assert_close(output[0, h, start:end], expected_output, rtol=1e-12)
            assert_close(final[s, h], expected_state, rtol=1e-12, name="state")


def test_gated_rule_is_a_reset_gate_at_each_boundary():
    """Another independent reference: g = −inf at each sequence's first token zeroes the state
    there, so one unpacked call computes every sequence from a zero state."""
    lengths = [3, 0, 9, 1, 12]
    q, k, v, beta, g = packed_inputs("gated_delta_rule", lengths, with_state=False)
    starts = boundaries(lengths)[:-1]
    reset = g.clone()
    reset[..., starts[starts < sum(lengths)]] = -torch.inf
    expected, _ = gated_delta_rule(q, k, v, beta, reset, method="recurrent")
    output, _ = gated_delta_rule(q, k, v, beta, g, cu_seqlens=boundaries(lengths))
    assert_close(output, expected, rtol=1e-12)


def test_other_head_dimensions():
    """(1, N, ·) without heads and (1, H, 1, N, ·) with two head dimensions."""
    lengths = [4, 0, 7]
    q, k, v, beta, state = packed_inputs("delta_rule", lengths, with_state=True)
    cu_seqlens = boundaries(lengths)
    output, final = delta_rule(q, k, v, beta, initial_state=state, cu_seqlens=cu_seqlens)
    first_head = [x[:, 0] for x in (q, k, v, beta, state)]
    no_heads = delta_rule(*first_head[:4], initial_state=first_head[4], cu_seqlens=cu_seqlens)
    assert_close(no_heads[0], output[:, 0], rtol=1e-12)
    assert_close(no_heads[1], final[:, 0], rtol=1e-12)
    two = [x.unsqueeze(2) for x in (q, k, v, beta, state)]
    two_heads = delta_rule(*two[:4], initial_state=two[4], cu_seqlens=cu_seqlens)
    assert_close(two_heads[0], output.unsqueeze(2), rtol=1e-12)
    assert_close(two_heads[1], final.unsqueeze(2), rtol=1e-12)


@pytest.mark.parametrize("op", TOKENS)
def test_auto_runs_each_sequence_where_the_kernels_do_not_apply(op):
    """On the CPU "auto" picks a PyTorch method for each sequence (here the chunked form)."""
    lengths = LENGTHS["ragged"]
    inputs = packed_inputs(op, lengths, with_state=True)
    packed = run(op, inputs, "auto", boundaries(lengths))
    for actual, expected in zip(packed, one_by_one(op, inputs, "chunked", lengths), strict=True):
        assert_close(actual, expected, rtol=1e-12)


def test_auto_runs_the_kernels_once_where_they_apply(monkeypatch):
    """Where the Triton kernels apply, "auto" hands all sequences to them in one call, the
    boundaries unread."""
    monkeypatch.setattr(packing, "triton_applies", lambda *args: True)
    calls = []

    def operation(*tokens, **options):
        calls.append((tokens, options))
        return "out"

    tokens = packed_inputs("delta_rule", [2, 4], with_state=False)[:4]
    cu_seqlens = torch.tensor([0, 2, 6])
    out = packing.run_packed(
        "delta_rule", operation, cu_seqlens, tokens, None,
        methods=methods.DELTA_RULE_METHODS, method="auto", returns_state=False, chunk_size=64,
    )  # fmt: skip
    assert out == "out" and len(calls) == 1
    (called, options), *_ = calls
    assert all(a is b for a, b in zip(called, tokens, strict=True))
    assert options.pop("cu_seqlens") is cu_seqlens
    assert options == {"initial_state": None, "method": "triton", "chunk_size": 64}


def _inputs(op, n=6):
    return packed_inputs(op, [n], with_state=False)


BAD_CU_SEQLENS = [
    (
        torch.tensor([0, 6], dtype=torch.int32),
        TypeError,
        r"cu_seqlens must have dtype torch.int64 \(convert it with cu_seqlens.long\(\)\); "
        "got dtype=torch.int32",
    ),
    (
        torch.tensor([0.0, 6.0]),
        TypeError,
        "cu_seqlens must have dtype torch.int64; got dtype=torch.float32",
    ),
    ([0, 6], TypeError, "cu_seqlens must be a torch.Tensor of dtype torch.int64 or None; got list"),
    (
        torch.tensor([[0, 6]]),
        ValueError,
        r"cu_seqlens must be a 1-D tensor \(S \+ 1,\).*got cu_seqlens.shape=\(1, 2\)",
    ),
    (
        torch.tensor([0]),
        ValueError,
        r"cu_seqlens must be a 1-D tensor \(S \+ 1,\) of S ≥ 1 sequences' boundaries; "
        r"got cu_seqlens.shape=\(1,\)",
    ),
    (
        torch.tensor([1, 6]),
        ValueError,
        r"cu_seqlens must start at 0 and end at the sequence length N = 6; got cu_seqlens=\[1, 6\]",
    ),
    (
        torch.tensor([0, 5]),
        ValueError,
        r"cu_seqlens must start at 0 and end at the sequence length N = 6; got cu_seqlens=\[0, 5\]",
    ),
    (
        torch.tensor([0, 4, 2, 6]),
        ValueError,
        r"cu_seqlens must be non-decreasing .*cu_seqlens\[2\] = 2 < cu_seqlens\[1\] = 4",
    ),
    (torch.tensor([0, 6], device="meta"), ValueError, "cu_seqlens must be on the same device as"),
]


@pytest.mark.parametrize(("cu_seqlens", "error", "match"), BAD_CU_SEQLENS)
@pytest.mark.parametrize("op", TOKENS)
def test_bad_cu_seqlens(op, cu_seqlens, error, match):
    with pytest.raises(error, match=f"^{op}: {match}"):
        run(op, _inputs(op), "chunked", cu_seqlens)


@pytest.mark.parametrize("op", TOKENS)
def test_inputs_must_be_one_batch_row(op):
    inputs = _inputs(op)
    two_rows = [torch.cat([x, x]) for x in inputs]
    with pytest.raises(
        ValueError,
        match=rf"^{op}: with cu_seqlens, .* leading batch of 1, \(1, H, N, d\); "
        r"got .*shape=\(2, 2, 6, 4\)",
    ):
        run(op, two_rows, "chunked", torch.tensor([0, 6]))


@pytest.mark.parametrize("op", TOKENS)
def test_one_initial_state_per_sequence(op):
    inputs = packed_inputs(op, [2, 4], with_state=True)  # two states
    name = "initial_state.S" if op == "linear_attention" else "initial_state"
    with pytest.raises(
        ValueError,
        match=rf"^{op}: {name} must have (the )?shape .*\(3, 2, 3, 4\).*"
        rf"one per sequence of cu_seqlens \(S = 3\); got {name}.shape=\(2, 2, 3, 4\)",
    ):
        run(op, inputs, "chunked", torch.tensor([0, 2, 2, 6]))


def test_linear_attention_state_z_one_per_sequence():
    phi_q, phi_k, v, S, z = packed_inputs("linear_attention", [2, 4], with_state=True)
    state = LinearAttentionState(S, z[:1])
    with pytest.raises(
        ValueError,
        match=r"initial_state.z must have the shape .*\(2, 2, 4\).*S = 2\); "
        r"got initial_state.z.shape=\(1, 2, 4\)",
    ):
        linear_attention(
            phi_q, phi_k, v, causal=True, initial_state=state, cu_seqlens=torch.tensor([0, 2, 6])
        )


def test_linear_attention_packed_is_causal_only():
    phi_q, phi_k, v = _inputs("linear_attention")
    with pytest.raises(ValueError, match=r"^linear_attention: cu_seqlens needs causal=True"):
        linear_attention(phi_q, phi_k, v, cu_seqlens=torch.tensor([0, 6]))


def chunks_by_hand(lengths, chunk_size):
    """The chunk list written out: (sequence, start, end) for every chunk, in order, then the
    idle programs (−1, N, N) up to N // C + S rows."""
    n, rows, start = sum(lengths), [], 0
    for s, length in enumerate(lengths):
        for offset in range(0, length, chunk_size):
            rows.append([s, start + offset, start + min(offset + chunk_size, length)])
        start += length
    programs = n // chunk_size + len(lengths)
    return torch.tensor(rows + [[-1, n, n]] * (programs - len(rows)), dtype=torch.int64).reshape(
        programs, 3
    )


@pytest.mark.parametrize(
    ("lengths", "chunk_size"),
    [
        ([0, 5, 0, 17, 1, 8, 0], 8),
        ([0, 5, 0, 17, 1, 8, 0], 1),
        ([64], 64),
        ([65, 63], 64),
        ([0], 4),
        ([0, 0, 0], 16),
        ([3, 3, 3], 16),
        ([31, 1, 32, 33, 100], 16),
    ],
)
def test_chunk_indices(lengths, chunk_size):
    expected = chunks_by_hand(lengths, chunk_size)
    actual = chunk_indices(boundaries(lengths), sum(lengths), chunk_size)
    assert actual.dtype == torch.int64
    assert torch.equal(actual, expected)


@pytest.mark.slow  # the meta kernels' first use of a process takes seconds
def test_chunk_indices_run_on_meta_tensors():
    """Meta tensors have no data: a read of cu_seqlens on the host (.tolist(), .item(), int(),
    a bool of a tensor) or a shape that depends on its values (nonzero) would raise."""
    lengths = [0, 5, 0, 17, 1, 8, 0]
    on_meta = chunk_indices(boundaries(lengths).to("meta"), 31, 8)
    assert on_meta.shape == (31 // 8 + 7, 3)
    assert on_meta.device.type == "meta"


# the operators that return a value or a shape that the host must wait for: on a GPU each one
# synchronizes (`.item()`, `.tolist()`, `int()` and `bool()` of a tensor are _local_scalar_dense)
SYNCHRONIZING = {
    "_local_scalar_dense",
    "nonzero",
    "masked_select",
    "_unique2",
    "unique_consecutive",
    "unique_dim",
    "repeat_interleave",
    "equal",
    "is_nonzero",
}


def operators(fn, *args):
    """The ATen operators of `fn(*args)`, traced with fake tensors (no data, no device)."""
    graph = make_fx(fn, tracing_mode="fake")(*args).graph
    targets = (node.target for node in graph.nodes if node.op == "call_function")
    return {t._schema.name.removeprefix("aten::") for t in targets if hasattr(t, "_schema")}


@pytest.mark.slow  # fake tensors' first use of a process takes seconds
def test_chunk_indices_trace_counts_no_synchronizing_operator():
    """The CPU's stand-in for counting synchronizations on a GPU: the traced operators.
    (torch.compile(fullgraph=True) would prove no more, in about 6 s of compiling.)"""
    lengths = [0, 5, 0, 17, 1, 8, 0]
    cu_seqlens = boundaries(lengths)
    traced = operators(lambda x: chunk_indices(x, 31, 8), cu_seqlens)
    assert {"cumsum", "searchsorted"} <= traced
    assert not traced & SYNCHRONIZING
    # the count sees a read on the host: what .tolist() would add
    assert "_local_scalar_dense" in operators(lambda x: x.tolist() and x, cu_seqlens)
    graph = make_fx(lambda x: chunk_indices(x, 31, 8), tracing_mode="fake")(cu_seqlens)
    assert torch.equal(graph(cu_seqlens), chunks_by_hand(lengths, 8))


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (
            (torch.tensor([0, 4], dtype=torch.int32), 4, 2),
            TypeError,
            "cu_seqlens must have dtype torch.int64",
        ),
        ((torch.tensor([0, 4]), 4, 0), ValueError, "chunk_size must be a positive int"),
        ((torch.tensor([0, 4]), -1, 2), ValueError, "n must be a non-negative int"),
    ],
)
def test_chunk_indices_bad_inputs(args, error, match):
    with pytest.raises(error, match=f"^chunk_indices: {match}"):
        chunk_indices(*args)
