"""The gate's bytes against the kernels: traced bytes with log-gates minus traced bytes without,
per kernel, in the interpreter (N a multiple of the chunk, so that no load is masked); and the
prediction built on them from the H200 report of the ungated rule."""

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from linattn_core.kernels.delta_rule.backward import delta_rule_bwd
from linattn_core.kernels.delta_rule.forward import delta_rule_fwd
from linattn_core.kernels.tiles import kernel_chunk
from linattn_core.kernels.tools.gate_cost import gate_costs, gated_prediction
from linattn_core.kernels.tools.trace import record

REPORT = Path(__file__).parents[2] / "figures/gpu/h200-2026-11-27-505baa4/gpu_check.json"


def traced_bytes(inputs, dtype, arch, g):
    """{kernel: bytes} of the forward pass and of the backward pass, with log-gates g or none."""
    q, k, v, beta, do, ds = inputs
    options = {"chunk_size": kernel_chunk(64, dtype), "arch": arch, "g": g}
    with record() as forward:
        delta_rule_fwd(q, k, v, beta, None, **options)
    with record() as backward:
        delta_rule_bwd(q, k, v, beta, None, do, ds, **options)
    return [{kernel: t.bytes(kernel) for kernel in t.kernels()} for t in (forward, backward)]


@pytest.mark.slow
@pytest.mark.interpreter
@pytest.mark.parametrize(
    ("dtype", "d_k", "d_v", "arch"),
    [(torch.float32, 32, 16, 90), (torch.float16, 16, 32, 80)],
)
def test_gate_bytes_are_what_the_gates_add_to_the_kernels(dtype, d_k, d_v, arch):
    """Two heads of 128 tokens (two chunks in float16, four in float32); float32's dqk tiles
    split d_k = 32 in two, so two parts of dg."""
    generator = torch.Generator().manual_seed(43)
    b, h, n = 1, 2, 128

    def draw(*shape):
        return torch.randn(*shape, generator=generator).to(dtype)

    k = torch.nn.functional.normalize(torch.randn(b, h, n, d_k, generator=generator), dim=-1)
    inputs = (draw(b, h, n, d_k), k.to(dtype), draw(b, h, n, d_v))
    inputs += (torch.rand(b, h, n, generator=generator).to(dtype), draw(b, h, n, d_v))
    inputs += (draw(b, h, d_v, d_k),)
    g = (-0.5 * torch.rand(b, h, n, generator=generator)).to(dtype)
    gated = traced_bytes(inputs, dtype, arch, g)
    plain = traced_bytes(inputs, dtype, arch, None)
    for mode, with_g, without in zip(("fwd", "bwd"), gated, plain, strict=True):
        model = {}
        for cost in gate_costs(b * h, n, d_k, d_v, mode=mode, dtype=dtype, arch=arch):
            model[cost.kernel] = model.get(cost.kernel, 0) + cost.bytes
        assert list(with_g) == list(without) == list(model)
        assert {kernel: with_g[kernel] - without[kernel] for kernel in with_g} == model


def test_gate_bytes_scale_with_tokens_and_gate_itemsize():
    one, two = (gate_costs(16, n, 64, 64, mode="fwd+bwd") for n in (4096, 8192))
    assert [2 * c.bytes for c in one] == [c.bytes for c in two]
    assert all(c.flops == 0 for c in one)
    wide = gate_costs(16, 4096, 64, 64, gate_dtype="float32")
    assert [c.bytes for c in wide] == [2 * c.bytes for c in gate_costs(16, 4096, 64, 64)]


def test_prediction_adds_the_gate_to_ours_and_bounds_the_speedup():
    """Every d = 64 row of the report's ungated rule gets a prediction; ours only gets slower,
    so the bound on the speedup lies below the ungated rule's measured speedup."""
    report = json.loads(REPORT.read_text())
    predicted = gated_prediction(report)
    assert {(r["d"], r["mode"]) for r in predicted} == {(64, "fwd"), (64, "fwd+bwd")}
    assert len(predicted) == 14
    bandwidth = report["roofline"]["copy_gbps"] * 1e9
    for r in predicted:
        assert r["ours_gated_ms"] == pytest.approx(
            r["ours_delta_ms"] + 1e3 * r["gate_bytes"] / bandwidth
        )
        assert r["speedup_at_least"] < r["fla_delta_ms"] / r["ours_delta_ms"]
        assert r["speedup_at_least"] == pytest.approx(r["fla_delta_ms"] / r["ours_gated_ms"])
