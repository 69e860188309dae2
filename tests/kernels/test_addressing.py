"""64-bit addressing: the kernels stay right when B·H·N·d passes 2³¹ elements, proven in the
Triton interpreter without allocating a gigabyte.

flash-linear-attention's kernels corrupted results silently there (its issue #1080): an offset
`i_bh * N * K` computed in int32 wraps. Ours cast the head's program id `i_bh` to int64 first.
The proof: run a small problem with every head's program id moved up by FAR (about 2³¹) and
every tensor's base pointer moved down by FAR heads' worth of bytes (`far_heads`). The
interpreter computes each offset with numpy integers of the types Triton's front end gives
them, the types the compiled kernel computes in (int32 · int64 is int64 in both), so an offset
in int64 is FAR·(the tensor's elements a head) + the true offset, and its address lands on the
true element; an offset in int32 passes 2³¹ (FAR·s ≥ 2³¹ for a stride s ≥ 2 elements a head)
and wraps, and its address misses the buffer by a multiple of 2³² elements. The far run must
equal the plain run bit for bit, outputs, final states and every gradient (and the poisoned
allocations would show a missed store as NaN). FAR is beyond what a GPU launches on the heads'
axis (65535 programs on y and z): it need only make int32 arithmetic overflow. Offsets within a
head (chunk index × C × K, the per-chunk states, A) are each added to an int64 head offset
before they are scaled, so they are int64 too; their int32 parts are indices of tokens (below
N + C), features, chunks and shares (a share's rows: tile index × B·H).
`test_an_int32_head_offset_is_caught` checks that the test fails on a copy of the delta rule's
forward kernels without the casts.

Packed sequences (cu_seqlens, B = 1) run the same way: their token offsets start from the
boundaries and work lists, int64 tensors (the API's contract), which index sequences and chunks,
not heads, so they are not moved; a sequence's states `(S, H, ·)` sit at i_s·H + i_bh, moved
by FAR heads as the inputs `(1, H, ·)` are.
"""

import contextlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from linattn_core import LinearAttentionState, linear_attention
from linattn_core.gated import gated_delta_rule, gated_deltanet_inputs
from linattn_core.kernels import triton_linear_attention
from linattn_core.kernels.linear_attention import backward, forward
from linattn_core.testing import random_qkv, values_and_gradients
from tests.kernels.test_compile import DELTA_KERNELS

ROOT = Path(__file__).resolve().parents[2]
FAR = 2**31 - 2**10  # the first head's program id in a far run: FAR + i_bh stays an int32
BATCH, HEADS = 1, 2  # the heads `(B, H)` of the runs: every tensor the kernels take has them


def head_stride(x, batches, heads):
    """Elements between two heads of `x`: the stride of its H dimension, the one after B (or,
    packed, after S: `batches` holds both) in the kernels' layouts `(B, H, …)` and `(shares, B,
    H, …)`; 0 for the int64 boundaries and work lists of packed sequences."""
    if x.dtype == torch.int64:
        return 0
    for dim in range(1, x.dim()):
        if x.shape[dim - 1] in batches and x.shape[dim] == heads:
            return x.stride(dim)
    raise AssertionError(f"head_stride: no (B, H), H = {heads}, in shape {tuple(x.shape)}")


@contextlib.contextmanager
def far_heads(batch=BATCH, heads=HEADS, far=FAR, sequences=None):
    """Run every kernel launched inside with the heads' program id (the grid's last axis of B·H
    programs; packed, the delta rule's walks put the S sequences after it) moved up by `far`, and
    each tensor argument's base pointer moved down by `far` times its head stride, in bytes: a
    kernel whose offsets are exact reads and writes the same elements as without (the
    interpreter's pointers are uint64 and wrap). `sequences`: S of packed inputs (not B·H). It
    yields the set of the kernels' names launched inside."""
    batches = {batch} if sequences is None else {batch, sequences}
    from triton.runtime import interpreter

    launch, launched = {"axis": None}, set()
    program_id = interpreter.InterpreterBuilder.create_get_program_id
    convert = interpreter._implicit_cvt
    call = interpreter.GridExecutor.__call__

    def far_program_id(self, axis):
        handle = program_id(self, axis)
        if axis == launch["axis"]:
            return interpreter.TensorHandle(handle.data + np.int32(far), handle.dtype)
        return handle

    def moved_pointer(arg):
        converted = convert(arg)
        if isinstance(arg, torch.Tensor):
            shift = far * head_stride(arg, batches, heads) * arg.element_size()
            address = (int(converted.handle.data[0]) - shift) % 2**64
            converted.handle.data = np.array([address], dtype=np.uint64)
        return converted

    def far_launch(self, *args, **kwargs):
        assert isinstance(self.grid, tuple) and batch * heads in self.grid, self.grid
        launch["axis"] = max(i for i, size in enumerate(self.grid) if size == batch * heads)
        launched.add(self.fn.__name__)
        try:
            return call(self, *args, **kwargs)
        finally:
            launch["axis"] = None

    patches = [
        (interpreter.InterpreterBuilder, "create_get_program_id", far_program_id),
        (interpreter, "_implicit_cvt", moved_pointer),
        (interpreter.GridExecutor, "__call__", far_launch),
    ]
    with contextlib.ExitStack() as stack:
        for owner, name, patched in patches:
            stack.enter_context(mock.patch.object(owner, name, patched))
        yield launched


def near_and_far(fn, inputs, sequences=None):
    """`fn`'s outputs and every input's gradient (seeded output gradients), in a plain run and a
    far run (`far_heads`; `sequences`: S when packed), and the kernels the far run launched."""
    out = fn(*inputs)
    generator = torch.Generator().manual_seed(3)
    flat = out if isinstance(out, tuple) else (out,)
    grads = tuple(torch.randn(x.shape, generator=generator).to(x) for x in flat)
    near = values_and_gradients(fn, inputs, grads)
    with far_heads(sequences=sequences) as launched:
        far = values_and_gradients(fn, inputs, grads)
    return near, far, launched


def assert_same_bits(near, far, launched, kernels):
    """Every far tensor equals its plain twin bit for bit (and is finite: no unwritten NaN), and
    the far run launched `kernels`."""
    for i, (a, b) in enumerate(zip(near, far, strict=True)):
        assert a.isfinite().all(), f"plain run, tensor {i}"
        assert torch.equal(a, b), f"tensor {i} differs in the far run"
    assert launched == kernels


# the kernels each run launches: together, every kernel of the package
WALKS = {
    "one walk": {"segment_output_kernel", "walk_bwd_kernel"},
    "segments": {
        "segment_sums_kernel",
        "segment_output_kernel",
        "segment_sums_bwd_kernel",
        "segment_dq_kernel",
        "segment_dk_kernel",
        "segment_dv_kernel",
    },
}


def test_the_far_runs_cover_every_kernel():
    """The runs below launch every kernel (a `@triton.jit` function with a `tile_rule`) of the
    four kernel modules."""
    from linattn_core.kernels.delta_rule import backward as delta_backward
    from linattn_core.kernels.delta_rule import forward as delta_forward

    modules = (forward, backward, delta_forward, delta_backward)
    kernels = {
        name for module in modules for name, x in vars(module).items() if hasattr(x, "tile_rule")
    }
    assert kernels == set().union(*WALKS.values(), DELTA_KERNELS)


@pytest.fixture(params=["one walk", "segments"])
def walk(request, monkeypatch, fresh_plans):
    """Both ways through linear attention's kernels: one walk (a short sequence), and segments
    of one chunk, each with plans of its own (`fresh_plans`)."""
    if request.param == "segments":
        for module in (forward, backward):
            monkeypatch.setattr(module, "segment_length", lambda *args: 1)
    return request.param


def linear_attention_inputs(d):
    """φ(q), φ(k), v `(1, 2, 40, d)` float32 (two chunks of 32, the second ragged) and an
    initial state (S_0, z_0)."""
    q, k, v = random_qkv(BATCH, HEADS, n=40, d=d, dtype=torch.float32, positive=True, seed=7)
    generator = torch.Generator().manual_seed(8)
    s0 = torch.rand(BATCH, HEADS, d, d, generator=generator)
    z0 = torch.rand(BATCH, HEADS, d, generator=generator)
    return q, k, v, s0, z0


@pytest.mark.slow
@pytest.mark.interpreter
@pytest.mark.usefixtures("poisoned_empty")
def test_linear_attention_addresses_are_64_bit(walk):
    """Both walks (one segment; segments of one chunk, with their sums and prefix sums),
    normalized (every buffer of the unnormalized pass, and r, z and the denominators' shares
    besides), d = 32 in float32: two feature tiles, whose shares `(2, B, H, N, V)` the kernels
    write."""

    def attention(q, k, v, s0, z0):
        options = {"causal": True, "normalize": True, "output_final_state": True}
        o, (s_n, z_n) = triton_linear_attention(q, k, v, initial_state=(s0, z0), **options)
        return o, s_n, z_n

    inputs = linear_attention_inputs(32)
    assert_same_bits(*near_and_far(attention, inputs), WALKS[walk])


@pytest.mark.slow
@pytest.mark.interpreter
@pytest.mark.usefixtures("poisoned_empty")
def test_delta_rule_addresses_are_64_bit():
    """The gated delta rule from an initial state, forward and backward: the delta rule's seven
    kernels with every buffer of the ungated rule's and the log-gates and dg's shares besides
    (A, the per-chunk states `(B, H, NT, K, V)`), d_k = 32, d_v = 16 in float32, two chunks of
    32 tokens, the second ragged."""
    inputs = gated_deltanet_inputs(
        BATCH, HEADS, n=40, d_k=32, d_v=16, gate=(-1, 0), dtype=torch.float32
    )

    def rule(q, k, v, beta, g, s0):
        return gated_delta_rule(q, k, v, beta, g, method="triton", initial_state=s0)

    assert_same_bits(*near_and_far(rule, inputs), DELTA_KERNELS)


# packed: S = 3 sequences (not B·H = 2 programs), an empty one, one shorter than a chunk of 32
# and one across a chunk's end from an odd start (float32: chunks of 32 tokens)
PACKED = torch.tensor([0, 5, 5, 40])


@pytest.mark.slow
@pytest.mark.interpreter
@pytest.mark.usefixtures("poisoned_empty")
def test_packed_addresses_are_64_bit():
    """Packed sequences from initial states, forward and backward: linear attention normalized
    (one walk a sequence: `segment_output_kernel`, `walk_bwd_kernel`) and the gated delta rule
    (its seven kernels on the work lists), each far run equal to its plain run bit for bit."""
    sequences = len(PACKED) - 1
    q, k, v, _, _ = linear_attention_inputs(32)
    generator = torch.Generator().manual_seed(9)
    s0, z0 = (
        torch.rand(sequences, HEADS, 32, 32, generator=generator),
        torch.rand(sequences, HEADS, 32, generator=generator),
    )

    def attention(q, k, v, s0, z0):
        o, final = linear_attention(
            q, k, v, causal=True, normalize=True, method="triton", cu_seqlens=PACKED,
            initial_state=LinearAttentionState(s0, z0), output_final_state=True,
        )  # fmt: skip
        return o, final.S, final.z

    packed = near_and_far(attention, (q, k, v, s0, z0), sequences)
    assert_same_bits(*packed, {"segment_output_kernel", "walk_bwd_kernel"})

    *tokens, _ = gated_deltanet_inputs(
        BATCH, HEADS, n=40, d_k=32, d_v=16, gate=(-1, 0), dtype=torch.float32
    )
    states = torch.rand(sequences, HEADS, 16, 32, generator=generator)

    def rule(q, k, v, beta, g, s0):
        options = {"method": "triton", "initial_state": s0, "cu_seqlens": PACKED}
        return gated_delta_rule(q, k, v, beta, g, **options)

    assert_same_bits(*near_and_far(rule, (*tokens, states), sequences), DELTA_KERNELS)


INT32_CHILD = """
    import importlib.util, sys
    import torch
    from linattn_core.delta import deltanet_inputs, delta_rule
    from linattn_core.kernels.delta_rule import forward
    from tests.kernels.test_addressing import far_heads

    source = open(forward.__file__).read()
    assert source.count(".to(tl.int64)") >= 3
    path = sys.argv[1]
    open(path, "w").write(source.replace(".to(tl.int64)", ""))
    spec = importlib.util.spec_from_file_location("int32_forward", path)
    int32 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(int32)
    for name in ("delta_prepare_kernel", "delta_states_kernel", "delta_output_kernel"):
        setattr(forward, name, getattr(int32, name))
    q, k, v, beta, s0 = deltanet_inputs(1, 2, n=40, d_k=32, d_v=16, dtype=torch.float32)
    near = delta_rule(q, k, v, beta, method="triton", initial_state=s0)
    print("plain run done", flush=True)
    with far_heads():
        far = delta_rule(q, k, v, beta, method="triton", initial_state=s0)
    print("same" if all(torch.equal(a, b) for a, b in zip(near, far)) else "differs")
"""


@pytest.mark.slow
@pytest.mark.interpreter
def test_an_int32_head_offset_is_caught(tmp_path):
    """The forward kernels of the delta rule with `i_bh` left int32: the far run reads and writes
    2³²·k elements off its buffers, and crashes (an unmapped address) or differs. In a process of
    its own, which may die of it; the plain run first shows that the copy itself runs."""
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(INT32_CHILD), str(tmp_path / "int32_forward.py")],
        cwd=ROOT,
        env=os.environ | {"TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "plain run done" in child.stdout, child.stderr
    assert child.returncode != 0 or "differs" in child.stdout, (child.stdout, child.stderr)
    assert "same" not in child.stdout
