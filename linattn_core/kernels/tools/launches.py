"""The launches that the compile check compiles: the package's own, and flash-linear-attention's.

A launch is recorded, not run: `intercepted_launches` replaces Triton's `JITFunction.run`, so a
launcher called on small CPU tensors hands over each kernel with the exact arguments and options
it would launch it with on a GPU (the outputs stay unwritten). `linear_attention_launches` and
`delta_rule_launches` do this for the package's forward and backward passes, `fla_launches` for
the peer's; `cases` lists every configuration. `host_work` records what a whole call asks of
the host besides: its launches and its torch operations.
"""

import collections
import contextlib
import dataclasses
import importlib
import itertools
from unittest import mock

import torch
import triton
from torch.utils._python_dispatch import TorchDispatchMode
from triton.runtime.autotuner import Autotuner
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

from linattn_core.kernels.common import SUPPORTED_CHUNK_SIZES, SUPPORTED_DIMS
from linattn_core.kernels.delta_rule.backward import delta_rule_bwd
from linattn_core.kernels.delta_rule.forward import delta_rule_fwd
from linattn_core.kernels.delta_rule.function import packed_work
from linattn_core.kernels.linear_attention.backward import chunk_linear_attention_bwd
from linattn_core.kernels.linear_attention.forward import chunk_linear_attention_fwd
from linattn_core.kernels.tiles import GPU_LIMITS, kernel_chunk

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
PACKED_DTYPES = ("bfloat16",)  # the packed passes' binaries in the report: training's dtype


@dataclasses.dataclass
class Launch:
    """One intercepted kernel launch: the JIT function and the arguments it was called with."""

    kernel: JITFunction
    args: tuple
    kwargs: dict

    @property
    def name(self):
        return self.kernel.fn.__name__

    def __reduce__(self):  # a JIT function travels to a worker process by its import path
        args = tuple(_detached(a) for a in self.args)
        kwargs = {name: _detached(a) for name, a in self.kwargs.items()}
        return _launch_from_path, (self.kernel.fn.__module__, self.name, args, kwargs)


def _detached(x):
    return x.detach() if isinstance(x, torch.Tensor) else x


def _launch_from_path(module, name, args, kwargs):
    kernel = getattr(importlib.import_module(module), name)
    while not isinstance(kernel, JITFunction):  # inside decorators such as autotune
        kernel = kernel.fn
    return Launch(kernel, args, kwargs)


@contextlib.contextmanager
def intercepted_launches():
    """Record `kernel[grid](...)` launches instead of running them (no GPU needed; interpreted
    kernels too)."""
    launches = []

    def record(kernel, *args, grid, warmup, **kwargs):
        launches.append(Launch(kernel, args, kwargs))

    with (
        mock.patch.object(JITFunction, "run", record),
        mock.patch.object(InterpretedFunction, "run", record),
    ):
        yield launches


# torch operations that copy a tensor's value to the host, so that the host waits for the GPU
SYNCHRONIZING = {"_local_scalar_dense", "is_nonzero", "nonzero", "equal", "masked_select", "item"}
ALLOCATING = {"empty", "empty_like", "new_empty", "empty_strided"}


@dataclasses.dataclass
class HostWork:
    """What a call asks of the host: the Triton kernels it launches, in order, and the torch
    operations it dispatches ({"aten.sum.dim_IntList": calls, …}), autograd's included, each of
    one kind: "view" (no kernel, no memory: a reshape, autograd's detach), "allocation" (an
    uninitialized tensor from the caching allocator), "synchronizing" (a value read on the host,
    which waits for the GPU) or "computing" (a torch kernel of its own: on a GPU, a launch)."""

    launches: list
    operations: collections.Counter
    kinds: dict  # operation → kind

    def of_kind(self, kind):
        """{operation: calls} of one kind."""
        return {op: n for op, n in self.operations.items() if self.kinds[op] == kind}


def _operation_kind(operation):
    name = operation.overloadpacket.__name__
    if name in SYNCHRONIZING:
        return "synchronizing"
    if name in ALLOCATING:
        return "allocation"
    return "view" if operation.is_view else "computing"


class _CountedOperations(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.operations = collections.Counter()
        self.kinds = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.operations[str(func)] += 1
        self.kinds[str(func)] = _operation_kind(func)
        return func(*args, **(kwargs or {}))


def host_work(step):
    """Run `step()` (a forward and backward pass, say) with its kernel launches recorded instead
    of run and its torch operations counted: a `HostWork`. On CPU tensors, with the kernels of
    the Triton interpreter or none: the host's work does not depend on the device (the numbers
    the launches would write are not computed)."""
    with intercepted_launches() as launches, _CountedOperations() as counted:
        step()
    return HostWork([launch.name for launch in launches], counted.operations, counted.kinds)


def linear_attention_launches(arch, dtype, d_k, d_v, chunk_size, normalize, packed=False):
    """(pass, Launch) for every kernel that causal linear attention launches, forward and
    backward, on `arch` for these inputs: the passes of a sequence in segments ("forward",
    "backward"), then those of a sequence walked in one segment ("forward, one walk",
    "backward, one walk"; `forward.ONE_WALK_CHUNKS`), and when `packed` those of two packed
    sequences ("forward, packed", "backward, packed"; the second starts off a multiple of C)."""
    options = {"chunk_size": kernel_chunk(chunk_size, dtype), "arch": arch}
    q, k, v, do = (
        torch.zeros(1, 1, 2 * options["chunk_size"], width, dtype=dtype)
        for width in (d_k, d_k, d_v, d_v)
    )
    cu_seqlens = torch.tensor([0, options["chunk_size"] - 1, 2 * options["chunk_size"]])
    found = []
    passes = [(1, "", None), (2, ", one walk", None)]  # two chunks: two segments, or one
    passes += [(None, ", packed", cu_seqlens)] if packed else []
    for segment, path, cu in passes:
        with intercepted_launches() as forward:
            _, rden, o, _ = chunk_linear_attention_fwd(
                q, k, v, normalize=normalize, eps=1e-6, keep_float32=normalize, segment=segment,
                cu_seqlens=cu, **options,
            )  # fmt: skip
        with intercepted_launches() as backward:
            chunk_linear_attention_bwd(
                q, k, v, o, rden, do, segment=segment, cu_seqlens=cu, **options
            )
        found += [(f"forward{path}", launch) for launch in forward]
        found += [(f"backward{path}", launch) for launch in backward]
    return found


def delta_rule_launches(
    arch, dtype, d_k, d_v, chunk_size, initial_state, gated=False, packed=False
):
    """(pass, Launch) for every kernel that the delta rule launches, forward and backward, on
    `arch` for these inputs, with or without an initial state; the gated delta rule's when
    `gated` (the same kernels, given the log-gates); and when `packed` those of two packed
    sequences too ("forward, packed", "backward, packed"; the second starts off a multiple of
    C)."""
    n = 2 * chunk_size
    q, k, do = (torch.zeros(1, 1, n, width, dtype=dtype) for width in (d_k, d_k, d_v))
    v, beta = torch.zeros(1, 1, n, d_v, dtype=dtype), torch.zeros(1, 1, n, dtype=dtype)
    g = torch.zeros(1, 1, n, dtype=dtype) if gated else None
    options = {"chunk_size": kernel_chunk(chunk_size, dtype), "arch": arch, "g": g}
    cu_seqlens = torch.tensor([0, options["chunk_size"] - 1, n])
    found = []
    for path, packing in [("", None)] + ([(", packed", cu_seqlens)] if packed else []):
        states = 1 if packing is None else 2
        s0 = torch.zeros(states, 1, d_v, d_k, dtype=dtype) if initial_state else None
        work = None if packing is None else packed_work(packing, n, options["chunk_size"])
        with intercepted_launches() as forward:
            delta_rule_fwd(q, k, v, beta, s0, packing=work, **options)
        ds = torch.zeros(states, 1, d_v, d_k, dtype=dtype)
        with intercepted_launches() as backward:
            delta_rule_bwd(q, k, v, beta, s0, do, ds, packing=work, **options)
        found += [(f"forward{path}", launch) for launch in forward]
        found += [(f"backward{path}", launch) for launch in backward]
    return found


def cases(arch, dtypes=tuple(DTYPES), *, peer=None):
    """(fields, launches) for every input configuration the launchers accept on `arch` — the
    linear attention's (dtype, d, d_v, chunk size, normalization), the delta rule's and the
    gated delta rule's (dtype, d_k, d_v, initial state or not), each with its packed passes in
    `PACKED_DTYPES` — or with `peer="fla"` FLA's at d = d_v ∈ FLA_DIMS."""
    if peer == "fla":
        for dtype, d in itertools.product(dtypes, FLA_DIMS):
            fields = {"op": "linear_attention", "dtype": dtype, "d": d, "d_v": d, "chunk": 64}
            yield fields | {"normalize": False}, fla_launches(arch, DTYPES[dtype], d)
        return
    dims = itertools.product(dtypes, SUPPORTED_DIMS, SUPPORTED_DIMS)
    for (dtype, d_k, d_v), chunk, normalize in itertools.product(
        dims, SUPPORTED_CHUNK_SIZES, (True, False)
    ):
        fields = {"op": "linear_attention", "dtype": dtype, "d": d_k, "d_v": d_v, "chunk": chunk}
        packed = dtype in PACKED_DTYPES
        launches = linear_attention_launches(
            arch, DTYPES[dtype], d_k, d_v, chunk, normalize, packed
        )
        yield fields | {"normalize": normalize}, launches
    for op in ("delta_rule", "gated_delta_rule"):
        dims = itertools.product(dtypes, SUPPORTED_DIMS, SUPPORTED_DIMS)
        for (dtype, d_k, d_v), chunk, initial in itertools.product(
            dims, SUPPORTED_CHUNK_SIZES, (True, False)
        ):
            fields = {"op": op, "dtype": dtype, "d": d_k, "d_v": d_v, "chunk": chunk}
            gated = op == "gated_delta_rule"
            packed = dtype in PACKED_DTYPES
            launches = delta_rule_launches(
                arch, DTYPES[dtype], d_k, d_v, chunk, initial, gated, packed
            )
            yield fields | {"initial_state": initial}, launches


# One explicit config for each of FLA's autotuned kernels, from the kernel's own config list
# (fla-core 0.6.0): the 64 × 64 tiles and 4 warps that ours use too, and for dq/dk on sm_80,
# where 4 warps spill, the 8 of its list for non-Hopper GPUs.
FLA_CONFIGS = {
    "chunk_fwd_kernel_h": triton.Config({"BK": 64, "BV": 64}, num_warps=4, num_stages=2),
    "chunk_fwd_kernel_o": triton.Config({"BK": 64, "BV": 64}, num_warps=4, num_stages=3),
    "chunk_bwd_kernel_dh": triton.Config({"BK": 64, "BV": 64}, num_warps=4, num_stages=2),
    "chunk_bwd_kernel_dqkwg": triton.Config({}, num_warps=4, num_stages=2),
    "chunk_bwd_kernel_dv": triton.Config({}, num_warps=4, num_stages=2),
}
FLA_CONFIGS_SM80 = FLA_CONFIGS | {
    "chunk_bwd_kernel_dqkwg": triton.Config({}, num_warps=8, num_stages=2),
}
FLA_DIMS = (64, 128)


def fla_launches(arch, dtype, d, chunk_size=64):
    """(pass, Launch) for flash-linear-attention's `chunk_linear_attn` (unnormalized, forward and
    backward; fla-core 0.6.0, an optional peer that is never a dependency), launched as on `arch`:
    its launchers read the shared memory of the GPU to pick tiles, so they are told the target's,
    and each autotuned kernel runs the one config of `FLA_CONFIGS` (`FLA_CONFIGS_SM80` below
    sm_90)."""
    import fla.utils.hardware
    from fla.ops.common import chunk_h, chunk_o
    from fla.ops.linear_attn import chunk_linear_attn

    shared = collections.defaultdict(lambda: GPU_LIMITS[arch].shared_per_block)
    q, k, v = (
        torch.zeros(1, 2 * chunk_size, 1, d, dtype=dtype, requires_grad=True) for _ in range(3)
    )  # FLA's layout [B, N, H, d]
    with contextlib.ExitStack() as stack:
        stack.enter_context(
            mock.patch.object(fla.utils.hardware, "get_all_max_shared_mem", lambda: shared)
        )
        configs = FLA_CONFIGS if arch == 90 else FLA_CONFIGS_SM80
        for module in (chunk_h, chunk_o):
            for name, config in configs.items():
                if hasattr(module, name):
                    stack.enter_context(
                        mock.patch.object(_autotuner(getattr(module, name)), "configs", [config])
                    )
        with intercepted_launches() as forward:
            o, _ = chunk_linear_attn(q, k, v, normalize=False)
        with intercepted_launches() as backward:
            torch.autograd.grad(o, (q, k, v), torch.zeros_like(o))
    return [("forward", launch) for launch in forward] + [
        ("backward", launch) for launch in backward
    ]


def _autotuner(kernel):
    """The Autotuner inside a kernel's decorators (heuristics, autotune, jit)."""
    while not isinstance(kernel, Autotuner):
        kernel = kernel.fn
    return kernel
