"""The interpreter trace: where each program's loads and stores land, and the bounds check."""

import pytest
import torch

pytest.importorskip("triton")

from linattn_core.exercises import solutions
from linattn_core.kernels.trace import record

pytestmark = pytest.mark.interpreter


def test_each_program_touches_its_own_rows_and_nothing_past_n():
    n, d, block = 40, 16, 16
    x, y = torch.randn(n, d), torch.empty(n, d)
    with record(bounds={"x": x, "y": y}) as trace:
        solutions.feature_map[(3,)](x, y, n, d, block)
    assert not trace.out_of_bounds
    for access, name, flat in trace.locate({"x": x, "y": y}):
        (program,) = access.program
        rows = set((flat // d).tolist())
        assert name == ("x" if access.op == "load" else "y")
        assert rows == set(range(program * block, min(n, program * block + block)))
    assert trace.bytes(op="load") == trace.bytes(op="store") == x.numel() * 4
    assert trace.flops() == 0


def test_an_access_past_a_tensor_is_reported_and_never_made():
    n, d = 5, 16
    x, y = torch.randn(n, d), torch.full((n, d), float("nan"))
    guard = torch.zeros(64, d)  # memory that the kernel must not reach, beside x
    with record(bounds={"x": x, "y": y}) as trace:
        solutions.feature_map[(1,)](x, y, n + 3, d, 16)  # N too large: rows 5–7 lie outside
    (event,) = [e for e in trace.out_of_bounds if e.op == "load"]
    assert (event.kernel, event.program, event.count) == ("feature_map", (0,), 3 * d)
    assert (event.nearest, event.elements_past) == ("x", 0)
    torch.testing.assert_close(y, torch.nn.functional.elu(x) + 1)
    assert guard.eq(0).all()


def test_dot_flops_are_two_per_multiply_add():
    q, k = torch.randn(32, 16), torch.randn(32, 16)
    s = torch.empty(2, 16, 16)
    with record() as trace:
        solutions.chunk_scores[(2,)](q, k, s, 32, 16, 16)
    assert trace.flops("chunk_scores") == 2 * (2 * 16 * 16 * 16)
    assert trace.kernels() == ["chunk_scores"]


def test_touched_names_the_rows_and_boundaries_of_each_program():
    from linattn_core.kernels.forward import chunk_linear_attention_fwd

    n, d = 200, 16  # four chunks of 64, the last one ragged; one 16 × 16 tile
    q, k, v = (torch.randn(1, 1, n, d) for _ in range(3))
    with record() as trace:
        chunk_linear_attention_fwd(q, k, v, normalize=False, eps=0.0, chunk_size=64, arch=90)
    touched = trace.touched({"k": (k, -2), "q": (q, -2)})
    walk = touched["chunk_states_fwd_kernel", (0,)]
    assert walk == {("k", "load"): set(range(n))}  # one program walks every chunk
    for t in range(4):
        rows = set(range(64 * t, min(n, 64 * t + 64)))
        assert touched["chunk_output_fwd_kernel", (0, t)] == {
            ("q", "load"): rows,
            ("k", "load"): rows,
        }


def test_scratch_memory_is_indexed_in_blocks():
    from linattn_core.kernels.forward import chunk_linear_attention_fwd

    n, d = 200, 16
    q, k, v = (torch.randn(1, 1, n, d) for _ in range(3))
    with record() as trace:
        o, _ = chunk_linear_attention_fwd(q, k, v, normalize=False, eps=0.0, chunk_size=64, arch=90)
    tensors = {name: (x, -2) for name, x in zip("qkvo", (q, k, v, o), strict=True)}
    touched = trace.touched(tensors, scratch=("h", d * d * 4))
    assert touched["chunk_states_fwd_kernel", (0,)][("h", "store")] == {0, 1, 2, 3, 4}
    for t in range(4):
        assert touched["chunk_output_fwd_kernel", (0, t)][("h", "load")] == {t}
