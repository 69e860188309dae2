"""Context parallelism (`linattn_core.parallel`): real gloo processes against one process."""

import json

import pytest
import torch

from linattn_core.attention import linear_attention
from linattn_core.delta import delta_rule, deltanet_inputs
from linattn_core.gated import gated_delta_rule, gated_deltanet_inputs
from linattn_core.parallel import (
    bytes_per_rank,
    context_parallel_delta_rule,
    context_parallel_linear_attention,
    count_bytes,
    demo,
    launch,
)
from linattn_core.parallel.__main__ import main
from linattn_core.parallel.exchange import compose, summary_dtype
from linattn_core.testing import random_qkv, relative_error

BASE = {"batch": (2,), "d": 3, "d_v": 2, "dtype": torch.float64, "seed": 0}
LINEAR = dict(BASE, kind="linear", reference="parallel")
DELTA = dict(BASE, kind="delta", reference="recurrent")
GATED = dict(BASE, kind="gated", reference="recurrent")
CASES = {
    "normalized, empty shard": dict(LINEAR, lengths=[5, 0, 7], normalize=True, method="chunked"),
    "unnormalized": dict(LINEAR, lengths=[4, 3, 1], normalize=False, method="recurrent"),
    "normalized, two batch dims": dict(
        LINEAR, batch=(1, 2), lengths=[0, 6, 3], normalize=True, method="auto"
    ),
    "delta, empty shard": dict(DELTA, lengths=[5, 0, 7], method="chunked"),
    "delta, one token": dict(DELTA, lengths=[1, 6, 2], method="recurrent"),
    "delta, 10 times longer": dict(DELTA, lengths=[50, 0, 70], method="chunked"),
    "gated, empty shard": dict(GATED, lengths=[5, 0, 7], method="chunked"),
    "gated, one token": dict(GATED, lengths=[1, 6, 2], method="recurrent"),
}


@pytest.fixture(scope="module")
def three_ranks():
    """Every case on three gloo processes, started once: {case: [rank 0's result, …]}."""
    results = launch.run(demo.compare, 3, list(CASES.values()), timeout=30)
    return {name: [ranks[i] for ranks in results] for i, name in enumerate(CASES)}


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_every_rank_matches_one_process(three_ranks, name):
    for rank, result in enumerate(three_ranks[name]):
        for quantity, error in result["errors"].items():
            assert error < 1e-10, f"{name}, rank {rank}, {quantity}: {error:.1e}"
        expected = {"output", "grad_q", "grad_k", "grad_v"}
        if CASES[name]["kind"] != "linear":
            expected |= {"state", "grad_beta"}
        if CASES[name]["kind"] == "gated":
            expected |= {"grad_g"}
        assert set(result["errors"]) == expected


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_counted_bytes_are_the_predicted_ones(three_ranks, name):
    for result in three_ranks[name]:
        assert result["bytes"] == result["predicted"]


@pytest.mark.slow
def test_bytes_do_not_depend_on_n(three_ranks):
    short, long = three_ranks["delta, empty shard"], three_ranks["delta, 10 times longer"]
    assert [r["bytes"] for r in short] == [r["bytes"] for r in long]


def test_bytes_per_rank_are_the_summaries():
    float32 = bytes_per_rank(batch=(3, 2), d_k=8, d_v=4, dtype=torch.bfloat16, delta=False)
    assert float32["forward"] == float32["backward"] == 6 * (4 + 1) * 8 * 4
    unnormalized = bytes_per_rank(
        batch=(), d_k=8, d_v=4, dtype=torch.float64, delta=False, normalize=False
    )
    assert unnormalized["forward"] == 4 * 8 * 8
    delta = bytes_per_rank(batch=(2,), d_k=8, d_v=4, dtype=torch.float32, delta=True)
    assert delta["forward"] == 2 * (4 * 8 + 8 * 8) * 4
    assert delta["backward"] == 2 * 2 * 4 * 8 * 4
    assert delta["metadata"] == float32["metadata"] > 0


def test_summaries_are_kept_in_float32_or_float64():
    assert summary_dtype(torch.float64) == torch.float64
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        assert summary_dtype(dtype) == torch.float32


def test_composing_shard_maps_gives_the_final_state():
    """S ↦ S M_r + U_r per shard (from the widened delta rule), composed in order, is the
    delta rule's state after the whole sequence."""
    q, k, v, beta, start = deltanet_inputs(2, n=13, d_k=4, d_v=3, seed=3)
    state = start
    for piece in (slice(0, 5), slice(5, 5), slice(5, 13)):
        keys, values = k[..., piece, :], v[..., piece, :]
        widened = torch.cat([values, torch.zeros(*values.shape[:-1], 4, dtype=v.dtype)], dim=-1)
        identity = torch.cat([torch.zeros(3, 4), torch.eye(4)]).to(v.dtype).expand(2, 7, 4)
        _, after = delta_rule(keys, keys, widened, beta[..., piece], initial_state=identity)
        state = compose(state, after[..., 3:, :], after[..., :3, :])
    _, expected = delta_rule(q, k, v, beta, initial_state=start)
    assert relative_error(state, expected) < 1e-12


def test_linear_shards_add():
    _, k, v = random_qkv(2, n=9, d=3, d_v=2, positive=True)
    state = torch.zeros(2, 2, 3, dtype=torch.float64)
    for piece in (slice(0, 4), slice(4, 9)):
        state = compose(state, None, v[..., piece, :].mT @ k[..., piece, :])
    assert relative_error(state, v.mT @ k) < 1e-12


def test_a_gate_scales_the_shard_map_by_its_total():
    """With gates, the widened rule's transition is exp(g_1 + … + g_n) times the ungated one:
    a scalar per token commutes with every factor I − β k kᵀ."""
    _, k, _, beta, g, _ = gated_deltanet_inputs(2, n=9, d_k=4, d_v=3, gate=(-1.5, 0.0))
    identity = torch.eye(4, dtype=k.dtype).expand(2, 4, 4)
    zeros = torch.zeros(2, 9, 4, dtype=k.dtype)
    _, gated = gated_delta_rule(k, k, zeros, beta, g, initial_state=identity)
    _, plain = delta_rule(k, k, zeros, beta, initial_state=identity)
    assert relative_error(gated, g.sum(-1).exp()[..., None, None] * plain) < 1e-12


def test_without_a_process_group_the_error_says_so():
    q, k, v = random_qkv(n=4, d=2, positive=True)
    with pytest.raises(ValueError, match="init_process_group"):
        context_parallel_linear_attention(q, k, v)


MISMATCHES = {
    "same d": dict(LINEAR, normalize=True, per_rank=[{}, {"d": 4}]),
    "same batch dimension 0": dict(LINEAR, normalize=True, per_rank=[{"batch": (3,)}, {}]),
    "same number of batch dimensions": dict(DELTA, per_rank=[{"batch": (2, 1)}, {"batch": (2,)}]),
    "same dtype": dict(DELTA, per_rank=[{}, {"dtype": torch.float32}]),
    "same d_v": dict(DELTA, per_rank=[{"d_v": 5}, {}]),
    "same gated": dict(DELTA, per_rank=[{"kind": "gated"}, {}]),
    "same normalize": dict(LINEAR, normalize=True, per_rank=[{}, {"normalize": False}]),
    "same need for gradients": dict(LINEAR, normalize=True, per_rank=[{"grad": True}, {}]),
    "failed their checks": dict(LINEAR, normalize=True, per_rank=[{}, {"method": "fast"}]),
}


@pytest.mark.slow
def test_ranks_that_disagree_raise_on_every_rank():
    """Each disagreement raises a ValueError on both ranks (none hangs: the group's timeout
    would fail the test), after which the group still works."""
    cases = [*MISMATCHES.values(), dict(LINEAR, normalize=True, per_rank=[{}, {}])]
    messages = launch.run(demo.mismatch, 2, cases, timeout=30)
    for i, expected in enumerate(MISMATCHES):
        for rank in (0, 1):
            message = messages[rank][i]
            assert message is not None, f"{expected}: rank {rank} raised nothing"
            if expected == "failed their checks" and rank == 1:
                assert "method must be one of" in message
            else:
                assert expected in message, message
    assert [messages[0][-1], messages[1][-1]] == [None, None]


@pytest.mark.slow
def test_the_demo_reports_errors_bytes_and_times(tmp_path, capsys):
    path = tmp_path / "demo.json"
    threads = torch.get_num_threads()
    try:
        main(["--world-size", "2", "--n", "40", "--d", "4", "--d-v", "3", "--repeats", "1",
              "--json", str(path)])  # fmt: skip
    finally:
        torch.set_num_threads(threads)  # the demo times one process with --threads
    assert "delta rule, N = 40: max relative error" in capsys.readouterr().out
    report = json.loads(path.read_text())
    assert [run["n"] for run in report["runs"]] == [40, 40]
    for numbers in report["runs"]:
        assert numbers["max_relative_error"] < 1e-10
        assert numbers["bytes_per_rank"] == numbers["predicted_bytes_per_rank"]
        assert numbers["same_bytes_on_every_rank"]
        assert numbers["seconds_one_process"] > 0 and numbers["seconds_slowest_rank"] > 0


@pytest.fixture
def one_rank(tmp_path):
    """A process group of this process alone (gloo), for what needs no other rank."""
    torch.distributed.init_process_group(
        "gloo", init_method=(tmp_path / "rendezvous").as_uri(), rank=0, world_size=1
    )
    yield
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_16_bit_inputs_exchange_float32_states(one_rank):
    q, k, v = random_qkv(2, n=37, d=4, d_v=3, positive=True)
    reference = linear_attention(q, k, v, causal=True)
    with count_bytes() as sent:
        out = context_parallel_linear_attention(*(x.bfloat16() for x in (q, k, v)))
    assert out.dtype == torch.bfloat16
    assert relative_error(out, reference) < 2e-2
    assert sent["forward"] == 2 * (3 + 1) * 4 * 4  # float32 numbers

    q, k, v, beta, _ = deltanet_inputs(2, n=23, d_k=4, d_v=3)
    low = [x.bfloat16() for x in (q, k, v, beta)]
    o, state = context_parallel_delta_rule(*low, method="recurrent")  # no bfloat16 solve on CPUs
    o_ref, state_ref = delta_rule(q, k, v, beta)
    assert (o.dtype, state.dtype) == (torch.bfloat16, torch.bfloat16)
    assert relative_error(o, o_ref) < 2e-2 and relative_error(state, state_ref) < 2e-2


@pytest.mark.slow
def test_one_rank_passes_gradcheck(one_rank):
    q, k, v, beta, _ = deltanet_inputs(n=6, d_k=3, d_v=2, seed=4)
    inputs = [x.requires_grad_() for x in (q, k, v, beta)]
    assert torch.autograd.gradcheck(
        lambda *x: context_parallel_delta_rule(*x, method="recurrent"), inputs
    )
    q, k, v = random_qkv(n=5, d=3, d_v=2, positive=True)
    inputs = [x.requires_grad_() for x in (q, k, v)]
    assert torch.autograd.gradcheck(context_parallel_linear_attention, inputs)
