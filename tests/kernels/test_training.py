"""Training through method="triton": the kernels as torch.library operators (`kernels/ops.py`)
that `torch.library.opcheck` accepts and `torch.compile(fullgraph=True)` traces without graph
breaks, a step that a CUDA graph can capture (no synchronizing operation, no size read back),
eager mode that stays off the dispatcher, and `make gpu-check`'s training_step rows."""

import pytest
import torch

pytest.importorskip("triton")

from linattn_core import linear_attention
from linattn_core.bench.training import (
    METHODS,
    MODES,
    OPS,
    forward_of,
    training_row,
    training_step,
)
from linattn_core.delta import delta_rule
from linattn_core.gated import gated_delta_rule, gated_deltanet_inputs
from linattn_core.kernels import ops
from linattn_core.kernels.linear_attention import backward, forward
from linattn_core.kernels.tools.launches import host_work
from linattn_core.testing import compiled_gradients, random_qkv

ROW_KEYS = {"op", "N", "B", "H", "d", "method", "mode", "ms", "error"}


def linear_args(dtype, *, normalize, state, final):
    q, k, v = random_qkv(1, 1, n=40, d=16, d_v=32, dtype=dtype, positive=True)
    s0 = torch.rand(1, 1, 32, 16, dtype=dtype) if state else None
    z0 = torch.rand(1, 1, 16, dtype=dtype) if state and normalize else None
    leaves = [x.requires_grad_() for x in (q, k, v, s0, z0) if x is not None]
    return leaves, (q, k, v, s0, z0, normalize, 1e-6, 64, final)


def delta_args(dtype, *, state, gated=False):
    """The delta rule operators' arguments, with the log-gates g last when `gated`."""
    inputs = gated_deltanet_inputs(1, 1, n=40, d_k=16, d_v=32, gate=(-1, 0))
    q, k, v, beta, g, s0 = (x.to(dtype) for x in inputs)
    args = (q, k, v, beta, s0 if state else None, 64, g if gated else None)
    leaves = [x.requires_grad_() for x in args if isinstance(x, torch.Tensor)]
    return leaves, args


@pytest.mark.interpreter
@pytest.mark.slow
@pytest.mark.parametrize(
    "dtype, normalize, state, final",
    [
        (torch.float32, True, True, True),
        (torch.float16, True, False, True),
        (torch.float32, False, False, False),
    ],
)
def test_opcheck_passes_on_the_linear_attention_operators(dtype, normalize, state, final):
    """Schema, fake tensors, autograd registration and AOTAutograd with dynamic shapes, for the
    forward operator and (through the autograd test) the backward one."""
    _, args = linear_args(dtype, normalize=normalize, state=state, final=final)
    torch.library.opcheck(ops.linear_attention_forward, args)
    q, k, v, s0, z0 = (None if x is None else x.detach() for x in args[:5])
    saved = ops.linear_attention_forward(q, k, v, s0, z0, *args[5:])
    o32 = saved[0] if dtype == torch.float32 else saved[1]
    grads = (q, k, v, o32 if normalize else None, saved[2] if normalize else None)
    finals = (torch.randn_like(s0), torch.randn_like(z0) if normalize else None) if state else ()
    backward_args = (*grads, torch.randn_like(v), s0, z0, *(finals or (None, None)), state, 64)
    torch.library.opcheck(ops.linear_attention_backward, backward_args)


@pytest.mark.interpreter
@pytest.mark.slow
@pytest.mark.parametrize("state, gated", [(False, False), (True, True)])
def test_opcheck_passes_on_the_delta_rule_operators(state, gated):
    """The ungated rule without S_0 (dg and ∂L/∂S_0 absent) and the gated one with S_0 (dg in
    g's dtype, and ∂L/∂S_0)."""
    _, args = delta_args(torch.float32, state=state, gated=gated)
    torch.library.opcheck(ops.delta_rule_forward, args)
    q, k, v, beta, s0, chunk, g = (x.detach() if isinstance(x, torch.Tensor) else x for x in args)
    grads = (torch.randn_like(v), torch.randn(1, 1, 32, 16))
    torch.library.opcheck(ops.delta_rule_backward, (q, k, v, beta, s0, *grads, chunk, g))


@pytest.mark.interpreter
@pytest.mark.slow
def test_torch_compile_traces_linear_attention_without_graph_breaks():
    """Normalized, from an initial state to the final state, with (B, H) flattened from three
    leading dimensions: what the compiled step computes is what eager mode does."""
    leaves, _ = linear_args(torch.float32, normalize=True, state=True, final=True)

    def step(q, k, v, s0, z0):
        q, k, v = (x.reshape(1, 1, 1, *x.shape[2:]) for x in (q, k, v))
        state = (s0.reshape(1, 1, 1, 32, 16), z0.reshape(1, 1, 1, 16))
        o, (s, z) = linear_attention(
            q, k, v, causal=True, method="triton", initial_state=state, output_final_state=True
        )
        return o.sum() + s.sum() + z.sum()

    eager, compiled = compiled_gradients(step, leaves)
    for e, c in zip(eager, compiled, strict=True):
        torch.testing.assert_close(c, e, rtol=1e-5, atol=1e-6)


@pytest.mark.interpreter
@pytest.mark.slow
@pytest.mark.parametrize("rule", [delta_rule, gated_delta_rule])
def test_torch_compile_traces_the_delta_rules_without_graph_breaks(rule):
    """The delta rule and the gated one, whose compiled backward pass gives dg too: both
    through the operators `linattn::delta_rule_*`."""
    leaves, _ = delta_args(torch.float32, state=True, gated=rule is gated_delta_rule)

    def step(q, k, v, beta, s0, *g):
        o, s = rule(q, k, v, beta, *g, method="triton", initial_state=s0)
        return o.sum() + s.sum()

    eager, compiled = compiled_gradients(step, leaves)
    for e, c in zip(eager, compiled, strict=True):
        torch.testing.assert_close(c, e, rtol=1e-5, atol=1e-6)


def _step_work(op, n, *, state):
    """host_work of a training step (forward, loss, backward) on (1, 16, n, 64) bfloat16."""
    if op == "linear":
        q, k, v = random_qkv(1, 16, n=n, d=64, dtype=torch.bfloat16, positive=True)
        s0 = torch.rand(1, 16, 64, 64, dtype=torch.bfloat16) if state else None
        z0 = torch.rand(1, 16, 64, dtype=torch.bfloat16) if state else None
        leaves = [x.requires_grad_() for x in (q, k, v, s0, z0) if x is not None]
        options = {"causal": True, "method": "triton"}
        if state:
            options |= {"initial_state": (s0, z0), "output_final_state": True}

        def loss():
            out = linear_attention(q, k, v, **options)
            return out[0].sum() + out[1].S.sum() if state else out.sum()

    else:
        inputs = gated_deltanet_inputs(1, 16, n=n, d_k=64, d_v=64)
        q, k, v, beta, g, s0 = (x.to(torch.bfloat16) for x in inputs)
        rule, gates = (gated_delta_rule, (g,)) if op == "gated" else (delta_rule, ())
        s0 = s0 if state else None
        leaves = [x.requires_grad_() for x in (q, k, v, beta, *gates, s0) if x is not None]

        def loss():
            o, s = rule(q, k, v, beta, *gates, method="triton", initial_state=s0)
            return o.sum() + s.sum()

    return host_work(lambda: torch.autograd.grad(loss(), leaves))


@pytest.mark.parametrize("op", ["linear", "delta", "gated"])
@pytest.mark.parametrize("n, state", [(1024, False), (4096, True)])
def test_a_training_step_never_synchronizes_so_a_cuda_graph_can_capture_it(
    monkeypatch, op, n, state
):
    """No value read on the host (`.item()`, `nonzero`, …: a CUDA graph cannot capture them),
    one walk at 1024 tokens and segments at 4096 (on an H100's 132 multiprocessors), every
    allocation through torch's allocator, and eager mode off the dispatcher: the step calls
    the autograd Functions, not the `linattn::` operators."""
    for module in (forward, backward):
        monkeypatch.setattr(module, "multiprocessors", lambda device: 132)
    work = _step_work(op, n, state=state)
    assert work.launches
    assert work.of_kind("synchronizing") == {}
    assert not [name for name in work.operations if name.startswith("linattn")]


def test_training_step_rows_have_the_schema_and_say_why_they_did_not_run():
    """Every op, method and mode has a row with the keys of the schema; with no time left,
    each says so."""
    shape = {"N": 64, "B": 1, "H": 2, "d": 16}
    rows = training_step([shape], torch.float16, torch.device("cpu"), seconds=0,
                         compiled_shapes=[shape])  # fmt: skip
    assert all(set(row) == ROW_KEYS for row in rows)
    expected = {(op, method, mode) for op in OPS for method in METHODS[op] for mode in MODES}
    assert {(row["op"], row["method"], row["mode"]) for row in rows} == expected
    assert all(
        row["ms"] is None and row["error"].startswith("skipped: time budget") for row in rows
    )


@pytest.mark.interpreter
@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_a_training_step_row_times_ours_on_the_cpu(mode):
    """Eager and compiled (AOTAutograd, no code generation) steps run in the interpreter; a
    CUDA graph needs a GPU, and the row says so."""
    shape = {"N": 64, "B": 1, "H": 1, "d": 16}
    row = training_row(
        "linear_attention", "ours", mode, shape, torch.float16, torch.device("cpu"), steps=1,
        rounds=1, backend="aot_eager",
    )  # fmt: skip
    assert set(row) == ROW_KEYS
    if mode == "graph":
        assert row["ms"] is None and row["error"].startswith("skipped: no CUDA")
    else:
        assert row["error"] is None and row["ms"] > 0


@pytest.mark.interpreter
@pytest.mark.slow
def test_a_gated_delta_rule_row_times_ours_on_the_cpu():
    """The gated delta rule's step through the kernels, the log-gates a leaf (dg computed too);
    FLA's row says why it did not run where fla is absent."""
    shape = {"N": 40, "B": 1, "H": 1, "d": 16}
    cpu = torch.device("cpu")
    options = {"steps": 1, "rounds": 1}
    row = training_row("gated_delta_rule", "ours", "eager", shape, torch.float16, cpu, **options)
    assert set(row) == ROW_KEYS and row["error"] is None and row["ms"] > 0
    fla = training_row("gated_delta_rule", "fla", "eager", shape, torch.float16, cpu, **options)
    assert fla["ms"] is None and fla["error"]


def test_flas_gated_delta_rule_gets_its_arguments_in_its_order(monkeypatch):
    """FLA's chunk_gated_delta_rule takes (q, k, v, g, β), ours (q, k, v, β, g): the row hands
    it our leaves in its order, q unscaled, and takes the output from what it returns."""
    import sys
    import types

    calls = []

    def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, head_first=False):
        calls.append(((q, k, v, g, beta), scale, head_first))
        return v * (g + beta)[..., None], None

    module = types.ModuleType("fla.ops.gated_delta_rule")
    module.chunk_gated_delta_rule = chunk_gated_delta_rule
    for name in ("fla", "fla.ops"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "fla.ops.gated_delta_rule", module)
    forward, layout = forward_of("gated_delta_rule", "fla")
    q, k, v, beta, g = (torch.rand(1, 5, 2, 4) for _ in range(5))
    beta, g = beta[..., 0], g[..., 0]
    out = forward(q, k, v, beta, g)
    assert layout == "fla" and torch.equal(out, v * (g + beta)[..., None])
    (args, scale, head_first), *_ = calls
    assert all(a is b for a, b in zip(args, (q, k, v, g, beta), strict=True))
    assert scale == 1.0 and head_first is False
