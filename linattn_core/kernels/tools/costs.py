"""What each Triton kernel computes and moves, read off its loops, and the time the roofline
predicts for it from a GPU's published peaks: a prediction, not a measurement.

For B·H heads, N tokens in NT = ⌈N/C⌉ chunks, the launcher's tiles BK × BV (so K/BK feature
tiles and V/BV value tiles, K = d, V = d_v) and itemsize b, every program's loads and stores
are counted (a tile that several programs load counts once for each: traffic between the
multiprocessors and the L2 cache or memory, an upper bound on what reaches memory), and FLOPs
are those of the matrix products, 2 per multiply-add, over whole chunks (a GPU computes the
padded rows of the last chunk too). Per head:

    state walks    read each chunk's C × BK and C × BV tiles once per program and write the
                   NT + 1 states: b·(NT·C·(K·V/BV + V·K/BK) + (NT + 1)·K·V) bytes, 2·NT·C·K·V FLOPs;
    output, dv     per chunk and value tile: two C × K tiles, the state's K × BV slice, and the
                   C × BV tiles in and out: b·NT·(2·C·K·V/BV + K·V + 2·C·V) bytes,
                   2·NT·(C·K·V + C²·K·V/BV + C²·V) FLOPs;
    dq and dk      per chunk and feature tile: v and do, both states' slices, q, k, dq, dk:
                   b·NT·(2·C·V·K/BK + 2·K·V + 4·C·K) bytes,
                   2·NT·(C²·V·K/BK + 2·C·K·V + 2·C²·K) FLOPs;

plus the float32 vectors of the normalizer (r, a, z, y, W: 4 bytes a number), and in the backward
pass the recomputed forward states and torch's a = −g·o. `tests/kernels/test_costs.py` checks
every count against what the kernels do in the Triton interpreter. The roofline time of a kernel
is max(FLOPs / P, bytes / β), with P the peak rate of its operands' tensor cores (float32 runs as
three TF32 products: a third of the TF32 rate, which is half the 16-bit one) and β the memory
bandwidth; a pass takes the sum over its kernels. Real kernels reach a fraction of both peaks;
occupancy, launch latency and the sequential walk of the state kernels are not in the model.
"""

from dataclasses import dataclass

import torch
import triton

from linattn_core.costs import flop_count, traffic_bytes
from linattn_core.kernels.tiles import tiles


@dataclass(frozen=True)
class Peaks:
    """A GPU's published peak rates (NVIDIA data sheets, dense, SXM parts)."""

    name: str
    arch: int  # compute capability, for the kernels' tiles
    tensor_flops: float  # bfloat16 / float16 tensor cores, dense, FLOP/s
    bandwidth: float  # HBM, bytes/s


PUBLISHED_PEAKS = {
    "A100": Peaks("A100 SXM4 80GB", 80, 312e12, 2.039e12),
    "H100": Peaks("H100 SXM5 80GB", 90, 989e12, 3.35e12),
}


@dataclass(frozen=True)
class KernelCost:
    kernel: str
    flops: float
    bytes: float

    def seconds(self, peaks, dtype):
        """The roofline time of this kernel on `peaks`."""
        rate = peaks.tensor_flops / 6 if dtype == torch.float32 else peaks.tensor_flops
        return max(self.flops / rate, self.bytes / peaks.bandwidth)


def forward_costs(
    batch_heads, n, d, d_v, *, chunk_size=64, dtype=torch.bfloat16, normalize=True, arch=90
):
    """The kernels of the forward pass and what each does: [states, output]."""
    shape = _Shape(batch_heads, n, d, d_v, chunk_size, dtype, normalize, arch)
    return [_state_walk("states_fwd", shape), _per_value_tile("output", shape)]


def backward_costs(
    batch_heads, n, d, d_v, *, chunk_size=64, dtype=torch.bfloat16, normalize=True, arch=90
):
    """The kernels of the backward pass: [recomputed forward states, a = −g·o in torch (when
    normalized), backward states, dv, dq and dk]."""
    shape = _Shape(batch_heads, n, d, d_v, chunk_size, dtype, normalize, arch)
    costs = [_state_walk("states_fwd", shape)]
    if normalize:  # reads g and o, writes a
        moved = batch_heads * n * (2 * d_v * shape.itemsize + 4)
        costs.append(KernelCost("a = −g·o (torch)", 2 * batch_heads * n * d_v, moved))
    return [*costs, _state_walk("states_bwd", shape), _per_value_tile("dv", shape), _dqk(shape)]


def predicted_seconds(costs, peaks, dtype):
    """Σ over the kernels of max(FLOPs / P, bytes / β): a pass's roofline time."""
    return sum(cost.seconds(peaks, dtype) for cost in costs)


def linear_attention_costs(batch_heads, n, d, *, mode="fwd", dtype=torch.bfloat16, arch=90):
    """The kernels of causal linear attention (d_v = d, normalized, C = 64): the forward pass, or
    with mode="fwd+bwd" the forward and the backward pass."""
    options = {"dtype": dtype, "arch": arch}
    costs = forward_costs(batch_heads, n, d, d, **options)
    return costs + (backward_costs(batch_heads, n, d, d, **options) if mode == "fwd+bwd" else [])


def softmax_costs(batch_heads, n, d, *, mode="fwd", dtype=torch.bfloat16):
    """FlashAttention-style causal softmax attention at its minimum: the FLOPs and bytes of
    `linattn_core.costs.FORMULAS` (2·N²·d FLOPs forward, 3.5 times that with the backward
    pass; q, k, v read and o written once)."""

    shape = {"B": 1, "H": batch_heads, "N": n, "d": d}
    name = "FlashAttention-style softmax"
    return [KernelCost(name, flop_count(shape, mode, "softmax"), traffic_bytes(shape, mode, dtype))]


def roofline_crossover_length(
    peaks, d, *, batch_heads=16, mode="fwd", dtype=torch.bfloat16, longest=2**17
):
    """The predicted crossover: the shortest N (a multiple of 64, up to `longest`) from which the
    roofline time of these kernels stays below that of FlashAttention-style softmax attention;
    None if they are not faster at `longest`."""
    crossover = None
    for n in range(longest, 0, -64):
        linear = predicted_seconds(
            linear_attention_costs(batch_heads, n, d, mode=mode, dtype=dtype, arch=peaks.arch),
            peaks,
            dtype,
        )
        softmax = predicted_seconds(
            softmax_costs(batch_heads, n, d, mode=mode, dtype=dtype), peaks, dtype
        )
        if linear >= softmax:
            return crossover
        crossover = n
    return crossover


@dataclass(frozen=True)
class _Shape:
    """One launch's sizes: B·H, N, d, d_v, C, dtype, normalization, architecture."""

    bh: int
    n: int
    d: int
    d_v: int
    c: int
    dtype: torch.dtype
    normalize: bool
    arch: int

    @property
    def itemsize(self):
        return torch.empty((), dtype=self.dtype).element_size()

    @property
    def nt(self):
        return triton.cdiv(self.n, self.c)

    def tiles(self, kernel):
        """(feature tiles K/BK, value tiles V/BV) of `kernel`."""
        tile = tiles(kernel, self.arch, self.d, self.d_v, self.dtype)
        return self.d // tile.block_k, self.d_v // tile.block_v


def _state_walk(kernel, s):
    """states_fwd or states_bwd: a program per state tile walks all chunks."""
    feature_tiles, value_tiles = s.tiles(kernel)
    reads = s.nt * s.c * (s.d * value_tiles + s.d_v * feature_tiles) * s.itemsize
    writes = (s.nt + 1) * s.d * s.d_v * s.itemsize
    vectors = (s.nt + 1) * s.d * 4 if s.normalize else 0  # z or y
    if kernel == "states_bwd":  # every program loads W at each boundary, and r, a per token
        per_program = (s.nt + 1) + (2 * s.nt * s.c if s.normalize else 0)
        vectors += per_program * 4 * feature_tiles * value_tiles
    flops = 2 * s.nt * s.c * s.d * s.d_v
    return KernelCost(f"chunk_{kernel}_kernel", s.bh * flops, s.bh * (reads + writes + vectors))


def _per_value_tile(kernel, s):
    """output or dv: a program per chunk and value tile reads two C × K tiles, a K × BV slice of a
    state and a C × BV tile, and writes one."""
    _, value_tiles = s.tiles(kernel)
    moved = s.nt * (2 * s.c * s.d * value_tiles + s.d * s.d_v + 2 * s.c * s.d_v) * s.itemsize
    if kernel == "output" and s.normalize:
        moved += s.nt * (s.d * value_tiles + s.c) * 4  # z per value tile; r stored once
    if kernel == "dv":
        moved += s.nt * value_tiles * 4 * (1 + (s.c if s.normalize else 0))  # W, and r
    flops = 2 * s.nt * (s.c * s.d * s.d_v + s.c * s.c * s.d * value_tiles + s.c * s.c * s.d_v)
    name = "chunk_output_fwd_kernel" if kernel == "output" else "chunk_dv_bwd_kernel"
    return KernelCost(name, s.bh * flops, s.bh * moved)


def _dqk(s):
    """dq and dk: a program per chunk and feature tile walks the values."""
    feature_tiles, _ = s.tiles("dqk")
    moved = s.nt * (2 * s.c * s.d_v * feature_tiles + 2 * s.d * s.d_v + 4 * s.c * s.d) * s.itemsize
    moved += s.nt * feature_tiles * 4  # W
    if s.normalize:
        moved += s.nt * (2 * s.c * feature_tiles + 2 * s.d) * 4  # r, a per feature tile; z, y
    flops = (
        2 * s.nt * (s.c * s.c * s.d_v * feature_tiles + 2 * s.c * s.d * s.d_v + 2 * s.c * s.c * s.d)
    )
    return KernelCost("chunk_dqk_bwd_kernel", s.bh * flops, s.bh * moved)
