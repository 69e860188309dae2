"""The one home of method choice (`linattn_core.methods`): every operation's "auto" follows the
same rule, and on a CPU the measured faster form."""

import json
from pathlib import Path

import pytest
import torch

from linattn_core import delta_rule, linear_attention
from linattn_core.delta import deltanet_inputs
from linattn_core.methods import (
    DELTA_RULE_METHODS,
    LINEAR_ATTENTION_METHODS,
    auto_method,
    parallel_up_to,
    triton_applies,
)
from linattn_core.testing import random_qkv


def test_auto_on_a_cpu_runs_the_measured_faster_form():
    """figures/auto_cpu.json (python -m linattn_core.bench auto) times the parallel against the
    chunked form over N and d; "auto" must pick the faster wherever they differ by 20%."""
    committed = json.loads((Path(__file__).parent.parent / "figures" / "auto_cpu.json").read_text())
    for r in committed["records"]:
        q = torch.empty(1, r["n"], r["d"])
        chosen = auto_method(LINEAR_ATTENTION_METHODS, q, q, causal=True, chunk_size=64)
        if r["ratio"] > 1.2:
            assert chosen == "chunked", r
        elif r["ratio"] < 1 / 1.2:
            assert chosen == "parallel", r
    long = torch.empty(1, 1000, 64)
    assert auto_method(LINEAR_ATTENTION_METHODS, long, long, causal=False, chunk_size=64) == (
        "chunked"
    )


@pytest.mark.parametrize("n", [1, 100, 1000])
def test_an_operation_without_a_parallel_form_runs_the_chunked_one(n):
    q = torch.empty(2, n, 64)
    assert auto_method(DELTA_RULE_METHODS, q, q, chunk_size=64) == "chunked"
    assert n > parallel_up_to(64) or auto_method(LINEAR_ATTENTION_METHODS, q, q, chunk_size=64) == (
        "parallel"
    )


def test_the_kernels_never_apply_on_a_cpu():
    q = torch.empty(1, 128, 64, dtype=torch.bfloat16)
    assert not triton_applies(q, q, 64)


def test_both_operations_default_to_auto_and_return_alike():
    """One face: method="auto" by default, the output alone or (output, final state) by
    `output_final_state`, the state `(..., d_v, d)` in one orientation."""
    q, k, v, beta, _ = deltanet_inputs(2, n=40, d_k=4, d_v=3)
    o, state = delta_rule(q, k, v, beta)
    o_chunked, state_chunked = delta_rule(q, k, v, beta, method="chunked")
    assert torch.equal(o, o_chunked) and torch.equal(state, state_chunked)
    assert torch.equal(delta_rule(q, k, v, beta, output_final_state=False), o)
    phi_q, phi_k, v = random_qkv(2, n=40, d=4, d_v=3, positive=True)
    out, linear_state = linear_attention(phi_q, phi_k, v, causal=True, output_final_state=True)
    assert torch.equal(linear_attention(phi_q, phi_k, v, causal=True), out)
    assert linear_state.S.shape == state.shape == (2, 3, 4)


def test_delta_rule_refuses_a_non_bool_output_final_state():
    q, k, v, beta, _ = deltanet_inputs(n=4, d_k=2, d_v=2)
    with pytest.raises(TypeError, match="output_final_state"):
        delta_rule(q, k, v, beta, output_final_state=1)
