"""The interpreter trace: where each program's loads and stores land, by pointers, block pointers
or tensor descriptors; the bounds check; undefined lanes; roundings; the kernel's lines."""

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

import triton
import triton.language as tl

from linattn_core.exercises import solutions
from linattn_core.kernels.tools.trace import Runaway, kernel_site, record

pytestmark = [pytest.mark.interpreter, pytest.mark.filterwarnings("ignore:tl.make_block_ptr")]


@triton.jit
def copy_rows(x, y, N, D: tl.constexpr, BLOCK: tl.constexpr, MASKED: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offsets = rows[:, None] * D + tl.arange(0, D)[None, :]
    if MASKED:
        tile = tl.load(
            x + offsets,
            mask=rows[:, None] < N,
            cache_modifier=".cg",
            eviction_policy="evict_last",
        )
    else:
        tile = tl.load(x + offsets)
    tl.store(y + offsets, tile, mask=rows[:, None] < N)


@triton.jit
def copy_rows_by_block_pointer(x, y, N, D: tl.constexpr, BLOCK: tl.constexpr, CHECK: tl.constexpr):
    start = tl.program_id(0) * BLOCK
    p_x = tl.make_block_ptr(x, (N, D), (D, 1), (start, 0), (BLOCK, D), (1, 0))
    p_y = tl.make_block_ptr(y, (N, D), (D, 1), (start, 0), (BLOCK, D), (1, 0))
    if CHECK:
        tile = tl.load(p_x, boundary_check=(0,), padding_option="zero", cache_modifier=".cg")
        tl.store(p_y, tile, boundary_check=(0,))
    else:
        tl.store(p_y, tl.load(p_x))


@triton.jit
def copy_rows_by_descriptor(x, y, N, D: tl.constexpr, BLOCK: tl.constexpr):
    x_desc = tl.make_tensor_descriptor(x, [N, D], [D, 1], [BLOCK, D])
    y_desc = tl.make_tensor_descriptor(y, [N, D], [D, 1], [BLOCK, D])
    y_desc.store([tl.program_id(0) * BLOCK, 0], x_desc.load([tl.program_id(0) * BLOCK, 0]))


@triton.jit
def pad_rows(x, y, N, D: tl.constexpr, BLOCK: tl.constexpr):
    """y's rows past N get what a load masked without other= gives them."""
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offsets = rows[:, None] * D + tl.arange(0, D)[None, :]
    tl.store(y + offsets, tl.load(x + offsets, mask=rows[:, None] < N))


@triton.jit
def mismatched_product(x, D: tl.constexpr):
    tile = tl.load(x + tl.arange(0, D)[:, None] * 2 * D + tl.arange(0, 2 * D)[None, :])
    tl.store(x + tl.arange(0, D), tl.sum(tl.dot(tile, tile), axis=1))


@triton.jit
def add_rows(x, y, N, D: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offsets = rows[:, None] * D + tl.arange(0, D)[None, :]
    tl.atomic_add(y + offsets, tl.load(x + offsets, mask=rows[:, None] < N, other=0.0))


@triton.jit
def round_to_half(x, y, D: tl.constexpr):
    cols = tl.arange(0, D)
    tl.store(y + cols, tl.load(x + cols).to(tl.float16))


def rows_of(trace, name, tensor, op):
    """{program: rows of `tensor` (N, D) it touched with `op`}."""
    found = {}
    for access, _, flat in trace.locate({name: tensor}):
        if access.op == op:
            found.setdefault(access.program, set()).update((flat // tensor.shape[1]).tolist())
    return found


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


@pytest.mark.parametrize("copy", ["pointers", "block pointer", "tensor descriptor"])
def test_every_way_of_loading_is_traced_alike(copy):
    n, d, block = 40, 16, 16
    x, y = torch.randn(n, d), torch.full((n, d), float("nan"))
    with record(bounds={"x": x, "y": y}) as trace:
        if copy == "pointers":
            copy_rows[(3,)](x, y, n, d, block, True)
        elif copy == "block pointer":
            copy_rows_by_block_pointer[(3,)](x, y, n, d, block, True)
        else:
            copy_rows_by_descriptor[(3,)](x, y, n, d, block)
    torch.testing.assert_close(y, x)
    assert not trace.out_of_bounds
    assert {a.via for a in trace.accesses} == {copy}
    expected = {p: set(range(16 * p, min(n, 16 * p + 16))) for p in range(3)}
    assert rows_of(trace, "x", x, "load") == {(p,): rows for p, rows in expected.items()}
    assert rows_of(trace, "y", y, "store") == {(p,): rows for p, rows in expected.items()}
    assert trace.bytes(op="load") == x.numel() * 4


def test_an_access_past_a_tensor_is_reported_and_never_made():
    n, d = 5, 16
    x, y = torch.randn(n, d), torch.full((n, d), float("nan"))
    guard = torch.zeros(64, d)  # memory that the kernel must not reach, beside x
    with record(bounds={"x": x, "y": y}) as trace:
        solutions.feature_map[(1,)](x, y, n + 3, d, 16)  # N too large: rows 5–7 lie outside
    (event,) = [e for e in trace.out_of_bounds if e.op == "load"]
    assert (event.kernel, event.program, event.count) == ("feature_map", (0,), 3 * d)
    assert (event.nearest, event.elements_past, event.masked, event.via) == (
        "x",
        0,
        True,
        "pointers",
    )
    torch.testing.assert_close(y, torch.nn.functional.elu(x) + 1)
    assert guard.eq(0).all()


@pytest.mark.parametrize("kernel", [copy_rows, copy_rows_by_block_pointer])
def test_an_unchecked_tile_past_the_end_is_reported_with_its_line(kernel):
    n, d = 40, 16
    x, y = torch.randn(n, d), torch.full((n, d), float("nan"))
    with record(bounds={"x": x, "y": y}) as trace:
        kernel[(3,)](x, y, n, d, 16, False)
    (event,) = [e for e in trace.out_of_bounds if e.op == "load"]
    assert (event.program, event.count, event.nearest) == ((2,), 8 * d, "x")
    assert not event.masked and event.site.code.startswith("tl.load(")
    assert event.addresses.size == 8 * d and (event.addresses >= x.data_ptr() + x.nbytes).all()
    torch.testing.assert_close(y, x)  # the lanes outside were never read into y


def test_an_atomic_update_is_traced_and_bounded():
    n, d = 40, 16
    x, y = torch.randn(n, d), torch.zeros(n, d)
    guard = torch.zeros(64, d)
    with record(bounds={"x": x, "y": y}) as trace:
        add_rows[(3,)](x, y, n, d, 16)  # no mask on the update: rows 40–47 lie outside y
    (event,) = trace.out_of_bounds
    assert (event.op, event.program, event.count, event.nearest) == ("atomic", (2,), 8 * d, "y")
    torch.testing.assert_close(y, x)
    assert guard.eq(0).all() and trace.bytes(op="atomic") == x.nbytes


def test_a_masked_lane_without_a_value_reads_the_undefined_one():
    n, d = 40, 16
    x = torch.randn(n, d)
    for undefined, padding in ((None, 0.0), (float("nan"), float("nan"))):
        y = torch.empty(48, d)
        with record(undefined=undefined) as trace:
            pad_rows[(3,)](x, y, n, d, 16)
        torch.testing.assert_close(y[:n], x)
        torch.testing.assert_close(y[n:], torch.full((8, d), padding), equal_nan=True)
        counts = [a.undefined for a in trace.accesses if a.op == "load"]
        assert counts == ([0, 0, 0] if undefined is None else [0, 0, 8 * d])
    with record(undefined=float("nan")) as trace:  # other= or padding_option= given
        solutions.feature_map[(3,)](x, torch.empty(n, d), n, d, 16)
        copy_rows_by_block_pointer[(3,)](x, torch.empty(n, d), n, d, 16, True)
    assert not any(a.undefined for a in trace.accesses)


def test_roundings_are_listed_and_skipped_when_exact():
    d = 16
    x = torch.randn(d) + 1000.0  # float16 keeps 11 bits: steps of 0.5 here
    for exact in (False, True):
        y = torch.empty(d)
        with record(exact=exact) as trace:
            round_to_half[(1,)](x, y, d)
        assert torch.equal(y, x) == exact
        assert (y - x).abs().max() <= 0.25
        (rounding,) = trace.roundings
        assert (rounding.dtype, rounding.site.code) == ("fp16", "tl.load(x + cols).to(tl.float16)")


def test_an_error_is_traced_to_its_kernel_line():
    with pytest.raises(Exception) as raised:
        mismatched_product[(1,)](torch.randn(16, 32), 16)
    site = kernel_site(raised.value)
    assert site.path == __file__ and site.code == "tl.dot(tile, tile)"


def test_a_program_past_the_limit_is_stopped():
    x = torch.randn(40, 16)
    with record(limit=4) as trace:  # each program makes a load and a store
        copy_rows[(3,)](x, torch.empty(40, 16), 40, 16, 16, True)
    assert len(trace.accesses) == 6
    with pytest.raises(Exception) as raised, record(limit=1):
        copy_rows[(3,)](x, torch.empty(40, 16), 40, 16, 16, True)
    assert isinstance(raised.value.__cause__, Runaway)
    assert kernel_site(raised.value).code == "tl.store(y + offsets, tile, mask=rows[:, None] < N)"


def test_dot_flops_are_two_per_multiply_add():
    q, k = torch.randn(32, 16), torch.randn(32, 16)
    s = torch.empty(2, 16, 16)
    with record() as trace:
        solutions.chunk_scores[(2,)](q, k, s, 32, 16, 16)
    assert trace.flops("chunk_scores") == 2 * (2 * 16 * 16 * 16)
    assert trace.kernels() == ["chunk_scores"]


def test_touched_names_the_rows_of_each_program_and_indexes_scratch_in_blocks():
    n, d, d_v, c = 40, 16, 32, 16  # three chunks, the last one ragged
    k, v = torch.randn(1, n, d), torch.randn(1, n, d_v)
    h = torch.empty(1, 4, d, d_v)  # left out of the tensors: scratch, one state a block
    with record() as trace:
        solutions.chunk_states[(1,)](k, v, h, n, d, d_v, c)
    touched = trace.touched({"k": (k, -2), "v": (v, -2)}, scratch=("h", d * d_v * 4))
    walk = touched["chunk_states", (0,)]
    assert walk[("k", "load")] == walk[("v", "load")] == set(range(n))
    assert walk[("h", "store")] == {0, 1, 2, 3}
    q, o = torch.randn(2, n, d), torch.empty(2, n, d_v)
    v = torch.randn(2, n, d_v)
    with record() as trace:
        solutions.intra_chunk[(3, 2)](q, q, v, o, n, d, d_v, c)
    touched = trace.touched({"q": (q, -2), "o": (o, -2)})
    for t, head in np.ndindex(3, 2):
        rows = set(range(16 * t, min(n, 16 * t + 16)))
        assert touched["intra_chunk", (t, head)] == {("q", "load"): rows, ("o", "store"): rows}
