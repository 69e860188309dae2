"""Tile sizes, warps and pipeline stages of every kernel per GPU architecture, by one rule.

A program holds float32 accumulators in registers (a state tile, a C × C block of similarities,
C × BK or C × BV output tiles) and stages its operand tiles in shared memory. Too large a tile
spills registers to local memory or asks for more shared memory than a multiprocessor has; too
small a tile wastes the tensor cores and re-reads the inputs once per tile. The rules were
chosen with `python -m linattn_core.kernels.compile`, which compiles every kernel for A100
(sm_80) and H100 (sm_90) on a CPU and reports registers, spills, shared memory and occupancy
(`figures/kernels_compiled.json`): every entry compiles without a spill and within its
architecture's shared memory, 50 configurations of them with a register budget for ptxas
(`REGISTER_BUDGETS`). The rules:

- a kernel's tile is its widest block or the head size if smaller: 64 columns for 16-bit inputs
  on sm_90 (the tensor cores' 64 × 64 operands), 32 on sm_80, whose products hold their
  operands in registers, and 16 for float32 inputs, whose products run as three TF32 products
  (`common.dot`) and need about three times the registers; float32 inputs also run in chunks
  of half the size (`kernel_chunk`);
- 4 warps and 2 pipeline stages, unless the kernel's rule says otherwise.

Each kernel carries its rule, written where the kernel is defined (`@tile_rule(...)` above its
`@triton.jit`, with the reason for any exception): its widest blocks, warps and stages. A
kernel added or renamed touches its own module only; `REGISTER_BUDGETS` is keyed by the kernel's
name without `_kernel`.

The sm_90 entries of the delta rule were measured on an H200 (`figures/gpu/*/tile_sweep.json`,
each variant against the table of the day, in one run): 8 warps in prepare took 1.6 times as long
as 4, and 2 warps 0.91 times; walks of 2 stages 1.18 times as long as 3; walks of BV = 16, 0.95
times BV = 32 (forward, N = 16384, B·H = 16, d = 64). Once prepare and wy multiplied in 16 bits
(`common.split_dot`), wider tiles for them (BK = 32) and 4 warps in prepare were within 7 % of
the table, either way, at N = 16384 and 65536 (2026-11-27).

No autotuning: the Triton interpreter, which tests these kernels on CPUs, runs the same entries,
and the compile check can prove each one. GPUs other than sm_90 get the sm_80 entries, whose
shared memory fits every NVIDIA GPU since Volta.
"""

import dataclasses

import torch

ARCHITECTURES = (80, 90)  # compute capabilities with entries: A100 (sm_80), H100 (sm_90)


@dataclasses.dataclass(frozen=True)
class Architecture:
    """Per-multiprocessor limits from NVIDIA's CUDA C++ Programming Guide (compute capabilities)."""

    name: str
    shared_per_block: int  # bytes a program may opt in to
    shared_per_sm: int  # bytes per multiprocessor; each program also reserves 1 KiB
    warps_per_sm: int
    programs_per_sm: int  # resident blocks
    registers_per_sm: int = 65536


GPU_LIMITS = {
    80: Architecture("A100 (sm_80)", 166_912, 167_936, warps_per_sm=64, programs_per_sm=32),
    89: Architecture("L4, RTX 4090 (sm_89)", 101_376, 102_400, warps_per_sm=48, programs_per_sm=24),
    90: Architecture("H100 (sm_90)", 232_448, 233_472, warps_per_sm=64, programs_per_sm=32),
}

# Register budgets (ptxas' `maxnreg`, per thread) for the configurations in which ptxas, left to
# itself, squeezes a kernel into the registers of one more program per multiprocessor and spills a
# few bytes to local memory: the smallest budget, in steps of 8, under which none of the
# configuration's launches spills, found by `python -m linattn_core.kernels.compile
# --fit-registers`. (kernel, arch, dtype, d_k, d_v) → registers.
REGISTER_BUDGETS = {
    ("delta_dqk", 90, "float32", 16, 32): 144,
    ("delta_dqk", 90, "float32", 32, 32): 144,
    ("delta_dqk", 90, "float32", 64, 32): 144,
    ("delta_dqk", 90, "float32", 128, 32): 144,
    ("delta_prepare", 80, "bfloat16", 16, 32): 208,
    ("delta_prepare", 80, "bfloat16", 16, 64): 200,
    ("delta_prepare", 80, "bfloat16", 16, 128): 200,
    ("delta_prepare", 89, "bfloat16", 16, 64): 208,
    ("delta_prepare", 89, "bfloat16", 16, 128): 208,
    ("delta_prepare", 89, "bfloat16", 64, 32): 176,
    ("delta_prepare", 89, "bfloat16", 128, 32): 176,
    ("delta_prepare", 89, "float32", 128, 16): 104,
    ("delta_prepare", 90, "bfloat16", 16, 32): 240,
    ("delta_prepare", 90, "bfloat16", 32, 32): 176,
    ("delta_prepare", 90, "bfloat16", 128, 128): 176,
    ("delta_prepare", 90, "float32", 16, 32): 104,
    ("delta_prepare", 90, "float32", 16, 64): 120,
    ("delta_prepare", 90, "float32", 16, 128): 120,
    ("delta_states", 89, "bfloat16", 64, 64): 104,
    ("delta_states", 89, "float16", 64, 64): 96,
    ("delta_states", 89, "float32", 64, 16): 144,
    ("delta_states", 89, "float32", 64, 128): 144,
    ("delta_states_bwd", 89, "bfloat16", 64, 32): 112,
    ("delta_states_bwd", 89, "bfloat16", 64, 64): 112,
    ("delta_states_bwd", 89, "bfloat16", 64, 128): 112,
    ("delta_states_bwd", 89, "float16", 64, 32): 104,
    ("delta_states_bwd", 89, "float16", 64, 64): 104,
    ("delta_states_bwd", 89, "float16", 64, 128): 104,
    ("delta_wy", 80, "bfloat16", 32, 64): 136,
    ("delta_wy", 80, "bfloat16", 32, 128): 136,
    ("delta_wy", 89, "bfloat16", 32, 32): 136,
    ("delta_wy", 89, "bfloat16", 64, 32): 136,
    ("delta_wy", 89, "bfloat16", 64, 128): 136,
    ("delta_wy", 89, "bfloat16", 128, 32): 136,
    ("delta_wy", 89, "bfloat16", 128, 64): 136,
    ("delta_wy", 89, "float16", 64, 16): 136,
    ("delta_wy", 89, "float16", 64, 32): 136,
    ("delta_wy", 89, "float16", 64, 128): 136,
    ("delta_wy", 89, "float16", 128, 16): 136,
    ("delta_wy", 89, "float16", 128, 32): 136,
    ("delta_wy", 89, "float16", 128, 64): 136,
    ("delta_wy", 89, "float32", 32, 32): 136,
    ("delta_wy", 89, "float32", 64, 16): 144,
    ("delta_wy", 89, "float32", 128, 16): 144,
    ("delta_wy", 90, "float32", 32, 16): 136,
    ("delta_wy", 90, "float32", 64, 16): 136,
    ("delta_wy", 90, "float32", 128, 16): 136,
    ("segment_sums", 89, "float16", 32, 128): 72,
    ("segment_sums", 89, "float16", 64, 64): 104,
    ("segment_sums", 89, "float16", 128, 64): 104,
    ("segment_sums", 89, "float32", 32, 32): 136,
    ("segment_sums", 89, "float32", 64, 32): 136,
    ("segment_sums", 89, "float32", 128, 32): 136,
    ("segment_sums_bwd", 80, "bfloat16", 64, 16): 160,
    ("segment_sums_bwd", 80, "bfloat16", 128, 16): 160,
    ("segment_sums_bwd", 80, "float16", 64, 16): 176,
    ("segment_sums_bwd", 80, "float16", 128, 16): 176,
    ("segment_sums_bwd", 80, "float16", 128, 128): 224,
}

# The gated delta rule's launches leave ptxas its own register count (the budgets above, fitted to
# the kernels without gates, made 19 of the 39 budgeted gated configurations spill), but for the
# configurations below, which spill without (`compile --arch 80 89 90` found 14, each with an
# initial state, 4 to 20 bytes): budgets, the smallest in steps of 8 under which none spills
# (wy at d_v = 16 on sm_80 and sm_89: 176, 3 programs a multiprocessor become 2); the backward
# walk on sm_89 in float32 at d_k = 128 in one stage (255 registers and 4 spilled bytes in two;
# its shared memory from 68 to 16 KiB); the prepare kernel in bfloat16 at d_k = 128 on sm_90 (and
# d_v = 64 on sm_89) at 4 warps (at 2: 255 registers and 4 to 20 spilled bytes).
# (kernel, arch, dtype, d_k, d_v) → launch options that replace the tile's.
GATED_OPTIONS = {
    **{
        ("delta_wy", 90, "float32", d_k, d_v): {"maxnreg": 136}
        for d_k in (64, 128)
        for d_v in (32, 64, 128)
    },
    **{("delta_wy", 89, "float32", 32, d_v): {"maxnreg": 136} for d_v in (64, 128)},
    **{("delta_wy", 80, "float32", d_k, 16): {"maxnreg": 176} for d_k in (32, 64, 128)},
    **{("delta_wy", arch, "float16", 16, 16): {"maxnreg": 176} for arch in (80, 89)},
    **{("delta_output", 80, dtype, 16, 32): {"maxnreg": 104} for dtype in ("bfloat16", "float16")},
    **{("delta_prepare", 80, "bfloat16", 32, d_v): {"maxnreg": 184} for d_v in (64, 128)},
    **{("delta_prepare", arch, "bfloat16", 64, 64): {"maxnreg": 184} for arch in (80, 89)},
    **{
        ("delta_states_bwd", 89, "float32", 128, d_v): {"num_stages": 1}
        for d_v in (16, 32, 64, 128)
    },
    ("delta_prepare", 89, "bfloat16", 128, 64): {"num_warps": 4},
    **{("delta_prepare", 90, "bfloat16", 128, d_v): {"num_warps": 4} for d_v in (16, 64)},
    # budgets for configurations whose packed passes spill 4 to 8 bytes without (bfloat16)
    **{("delta_du_local", 80, "bfloat16", 16, d_v): {"maxnreg": 104} for d_v in (32, 64, 128)},
    ("delta_du_local", 80, "bfloat16", 128, 16): {"maxnreg": 80},
    ("delta_prepare", 80, "bfloat16", 64, 32): {"maxnreg": 184},
    ("delta_prepare", 89, "bfloat16", 64, 32): {"maxnreg": 176},
    **{("delta_prepare", 90, "bfloat16", 32, d_v): {"maxnreg": 176} for d_v in (64, 128)},
}


@dataclasses.dataclass(frozen=True)
class Tile:
    block_k: int  # BK: feature columns of q and k per program (or per loop step)
    block_v: int  # BV: value columns per program (or per loop step)
    num_warps: int
    num_stages: int
    max_registers: int | None = None  # a budget for ptxas (`REGISTER_BUDGETS`), or its own choice

    @property
    def run_options(self):
        """The launch's options for the compiler: warps, stages and a register budget if any."""
        options = {"num_warps": self.num_warps, "num_stages": self.num_stages}
        return options | ({"maxnreg": self.max_registers} if self.max_registers else {})

    @property
    def launch_options(self):
        """The keyword arguments of a launch: BK and BV constexprs and `run_options`."""
        return {"BK": self.block_k, "BV": self.block_v} | self.run_options


def kernel_chunk(chunk_size, dtype):
    """The tokens C that a program takes at once: the chunk for 16-bit inputs, half of it for
    float32 inputs, whose products (three TF32 products each, `common.dot`) hold about three
    times the registers. The same chunked form, cut finer; the result is the same function.

    >>> kernel_chunk(64, torch.float32), kernel_chunk(64, torch.bfloat16)
    (32, 64)
    """
    return chunk_size // 2 if dtype == torch.float32 else chunk_size


@dataclasses.dataclass(frozen=True)
class TileRule:
    """How a kernel picks its tile: its widest block for (16-bit inputs on sm_90, 16-bit inputs
    on sm_80 and others, float32 inputs) — BK for the kernels that tile the features, BV for
    those that tile the values, both for those that hold a BK × BV tile of a state — its warps,
    and its pipeline stages (on sm_90, on the others)."""

    widest: tuple[int, int, int]
    num_warps: int = 4
    num_stages: tuple[int, int] = (2, 2)


def tile_rule(*, widest, num_warps=4, num_stages=(2, 2)):
    """Give the `@triton.jit` kernel below its `TileRule` (`kernel.tile_rule`), written beside
    the kernel; its source, and so its binaries, stay as they are."""
    rule = TileRule(widest, num_warps, num_stages)

    def attach(kernel):
        kernel.tile_rule = rule
        return kernel

    return attach


def kernel_name(kernel):
    """A kernel's name without `_kernel`, as `REGISTER_BUDGETS` and the tile sweep name it."""
    return kernel.fn.__name__.removesuffix("_kernel")


def tiles(kernel, arch, d_k, d_v, dtype):
    """The tile of `kernel` (a `@triton.jit` kernel with a `tile_rule`) on compute capability
    `arch`, for head dims d_k and d_v and the inputs' dtype.

    >>> from linattn_core.kernels.delta_rule.backward import delta_wy_kernel
    >>> from linattn_core.kernels.linear_attention.backward import segment_dq_kernel
    >>> tiles(segment_dq_kernel, 90, 128, 128, torch.bfloat16)
    Tile(block_k=64, block_v=64, num_warps=4, num_stages=2, max_registers=None)
    >>> tiles(delta_wy_kernel, 90, 32, 16, torch.float32).launch_options
    {'BK': 16, 'BV': 16, 'num_warps': 4, 'num_stages': 2, 'maxnreg': 136}
    """
    rule = kernel.tile_rule
    widest = rule.widest[2 if dtype == torch.float32 else 0 if arch == 90 else 1]
    block_k, block_v = min(d_k, widest), min(d_v, widest)
    stages = rule.num_stages[0 if arch == 90 else 1]
    key = (kernel_name(kernel), arch, str(dtype).removeprefix("torch."), d_k, d_v)
    return Tile(block_k, block_v, rule.num_warps, stages, max_registers=REGISTER_BUDGETS.get(key))
