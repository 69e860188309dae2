"""Tile sizes, warps and pipeline stages of every kernel, per GPU architecture: one small table.

A program holds float32 accumulators in registers (a BK × BV state tile, or a C × C block of
similarities beside C × BK or C × BV output tiles) and stages its operand tiles in shared
memory. Too large a tile spills registers to local memory or asks for more shared memory than
a multiprocessor has; too small a tile wastes the tensor cores and re-reads the inputs once per
tile. The entries below were chosen with `python -m linattn_core.kernels.compile`, which
compiles every kernel for A100 (sm_80) and H100 (sm_90) on a CPU and reports registers, spills,
shared memory and occupancy (`figures/kernels_compiled.json`): every entry compiles without a
spill, within its architecture's shared memory, and fits at least two programs per
multiprocessor. The rules:

- 16-bit inputs: tiles of 64 features (16 for heads of 16 or 32 features, which 64 does not
  divide), 64 × 64 operands for the tensor cores' fragments; on sm_80 the dq/dk kernel walks the
  values in steps of 16, as 64 spills there;
- float32 inputs: 16 × 16 tiles, 4 warps, because each product runs as three TF32 products
  (`forward.dot`), which needs about three times the registers;
- warps: 8 where the registers allow two programs of 8 warps per multiprocessor (more warps in
  flight hide memory latency), else 4; 2 pipeline stages (3 for H100's forward state walk).

No autotuning: the Triton interpreter, which tests these kernels on CPUs, runs the same entries,
and the compile check can prove each one. GPUs other than sm_90 get the sm_80 entries, whose
shared memory (≤ 64 KiB) fits every NVIDIA GPU since Volta.
"""

import dataclasses

import torch

KERNELS = ("states_fwd", "output", "states_bwd", "dv", "dqk")  # and the delta rule's: DELTA_KERNELS
DELTA_KERNELS = (
    "delta_prepare",
    "delta_states",
    "delta_output",
    "delta_states_bwd",
    "delta_dqk",
    "delta_wy",
)
ARCHITECTURES = (80, 90)  # compute capabilities with entries: A100 (sm_80), H100 (sm_90)

# What the kernels accept: head sizes that fill tensor-core tiles without masking along the
# features, the dtypes with tensor-core products, and the tile height every entry is checked for.
SUPPORTED_DIMS = (16, 32, 64, 128)
SUPPORTED_CHUNK_SIZES = (64,)
SUPPORTED_DTYPES = ("float32", "bfloat16", "float16")


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

# (arch, kernel) → (num_warps, num_stages) for 16-bit inputs; float32 inputs take (4, 2) but
# where FLOAT32_STAGES says otherwise
FLOAT32_STAGES = {(90, "states_bwd"): 3}  # 2 stages spill 8 bytes there
WARPS_AND_STAGES = {
    (80, "states_fwd"): (4, 2),
    (80, "output"): (4, 2),
    (80, "states_bwd"): (4, 2),
    (80, "dv"): (4, 2),
    (80, "dqk"): (4, 2),
    (90, "states_fwd"): (4, 3),
    (90, "output"): (8, 2),
    (90, "states_bwd"): (8, 2),
    (90, "dv"): (8, 2),
    (90, "dqk"): (8, 2),
}


@dataclasses.dataclass(frozen=True)
class Tile:
    block_k: int  # BK: feature columns of q and k per program (or per loop step)
    block_v: int  # BV: value columns per program (or per loop step)
    num_warps: int
    num_stages: int

    @property
    def launch_options(self):
        """The keyword arguments of a launch: BK and BV constexprs, warps, stages."""
        return {
            "BK": self.block_k,
            "BV": self.block_v,
            "num_warps": self.num_warps,
            "num_stages": self.num_stages,
        }


def tiles(kernel, arch, d_k, d_v, dtype):
    """The tile of `kernel` (one of KERNELS) on compute capability `arch`, for head dims d_k and
    d_v and the inputs' dtype.

    >>> tiles("dqk", 80, 128, 128, torch.bfloat16)
    Tile(block_k=64, block_v=16, num_warps=4, num_stages=2)
    """
    arch = 90 if arch == 90 else 80
    if kernel.startswith("delta_"):
        return _delta_tile(kernel, arch, d_k, d_v, dtype)
    if dtype == torch.float32:
        return Tile(16, 16, num_warps=4, num_stages=FLOAT32_STAGES.get((arch, kernel), 2))
    block_k, block_v = (64 if dim >= 64 else 16 for dim in (d_k, d_v))
    if (arch, kernel) == (80, "dqk"):
        block_v = 16
    return Tile(block_k, block_v, *WARPS_AND_STAGES[arch, kernel])


def _delta_tile(kernel, arch, d_k, d_v, dtype):
    """The delta rule's kernels (`delta_forward.py`, `delta_backward.py`): tiles of 32 columns
    for 16-bit inputs, 16 for float32; 16 in the two kernels that hold 64 × 64 float32 matrices
    (A, and A with dN), where 32 spills; one pipeline stage in the substitution kernel and in
    H100's float32 backward walk, where two spill."""
    block = 16 if dtype == torch.float32 or kernel in ("delta_prepare", "delta_wy") else 32
    one_stage = kernel == "delta_prepare" or (arch, kernel, dtype) == (
        90,
        "delta_states_bwd",
        torch.float32,
    )
    return Tile(min(d_k, block), min(d_v, block), num_warps=4, num_stages=1 if one_stage else 2)


def device_arch(device):
    """The compute capability of a CUDA device as 80, 90, …; 90 for the CPU interpreter."""
    if device.type != "cuda":
        return 90
    major, minor = torch.cuda.get_device_capability(device)
    return 10 * major + minor
