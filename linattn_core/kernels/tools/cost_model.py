"""What each kernel of causal linear attention computes and moves, read off its loops, and the
time the roofline predicts for it from a GPU's peaks: a prediction, not a measurement.

For B·H heads, N tokens in NT = ⌈N/C⌉ chunks and NS segments of L chunks (`segment_length`),
the launcher's tiles BK × BV (nk = K/BK feature tiles and nv = V/BV value tiles, K = d,
V = d_v) and itemsize b, every program's loads and stores are counted (a tile that several
programs load counts once for each: traffic between the multiprocessors and the L2 cache or
memory, an upper bound on what reaches memory), and FLOPs are those of the matrix products,
2 per multiply-add, over whole chunks. Per head:

    segment sums     k and v once per tile program, the float32 sums out:
                     b·NT·C·(K·nv + V·nk) + 4·NS·K·V bytes, 2·NT·C·K·V FLOPs (the backward's
                     kernel reads q and g too, and writes two sums);
    output           the prefix sum before its segment (NS − 1 state tiles in all), q and k once
                     per value tile, v once per feature tile, o out:
                     4·(NS − 1)·K·V + b·NT·C·(2·K·nv + V·nk) + b·NT·C·V bytes (nk = 1),
                     2·NT·(2·C·K·V + C²·K·nv + C²·V·nk) FLOPs;
    dq, dk, dv       the same pattern over their own inputs; dk and dv read the prefix sum of
                     every segment and the one before theirs, 2·NS − 1 state tiles in all;

A sequence of one segment (NS = 1, at most `ONE_WALK_CHUNKS` chunks) skips the sums: the
forward pass is the output kernel alone, starting from the initial state, and the backward pass
one kernel (`walk_bwd_kernel`) whose programs walk as the dq, dk and dv kernels do, one after the
other, from the initial state and the final state's gradient instead of prefix sums.

Plus the float32 vectors of the normalizer (r, a, z, y: 4 bytes a number), the float32 shares
of a gradient whose sum runs over several tiles (nk > 1 or nv > 1), the second product of a
16-bit state where normalization makes two terms cancel (`dot_state`), and torch's prefix sums
and g·o = −a.
`tests/kernels/test_cost_model.py` checks every count against what the kernels do in the
Triton interpreter. The roofline time of a kernel is max(FLOPs / P, bytes / β), with P the peak
rate of its operands' tensor cores (float32 runs as three TF32 products: a third of the TF32
rate, which is half the 16-bit one) and β the memory bandwidth; a pass takes the sum over its
kernels. Real kernels reach a fraction of both peaks; occupancy, launch latency and the
sequential walk within a segment are not in the model.
"""

from dataclasses import dataclass

import torch
import triton

from linattn_core.costs import flop_count, traffic_bytes
from linattn_core.kernels.linear_attention.backward import (
    segment_dk_kernel,
    segment_dq_kernel,
    segment_dv_kernel,
    segment_sums_bwd_kernel,
    walk_bwd_kernel,
)
from linattn_core.kernels.linear_attention.forward import (
    segment_length,
    segment_output_kernel,
    segment_sums_kernel,
)
from linattn_core.kernels.tiles import kernel_chunk, tiles


@dataclass(frozen=True)
class Peaks:
    """A GPU's published peak rates (NVIDIA data sheets, dense, SXM parts)."""

    name: str
    arch: int  # compute capability, for the kernels' tiles
    multiprocessors: int  # for the segments' length
    tensor_flops: float  # bfloat16 / float16 tensor cores, dense, FLOP/s
    bandwidth: float  # HBM, bytes/s


PUBLISHED_PEAKS = {
    "A100": Peaks("A100 SXM4 80GB", 80, 108, 312e12, 2.039e12),
    "H100": Peaks("H100 SXM5 80GB", 90, 132, 989e12, 3.35e12),
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


@dataclass(frozen=True)
class _Shape:
    """One call's sizes: B·H, N, d, d_v, the kernels' chunk C, dtype, normalization, architecture,
    chunks per segment."""

    bh: int
    n: int
    d: int
    d_v: int
    c: int
    dtype: torch.dtype
    normalize: bool
    arch: int
    segment: int

    @property
    def b(self):
        return torch.empty((), dtype=self.dtype).element_size()

    @property
    def nt(self):
        return triton.cdiv(self.n, self.c)

    @property
    def ns(self):
        return triton.cdiv(self.nt, self.segment)

    def tiles(self, kernel):
        """(nk, nv): the feature and value tiles of `kernel`."""
        tile = tiles(kernel, self.arch, self.d, self.d_v, self.dtype)
        return self.d // tile.block_k, self.d_v // tile.block_v

    @property
    def two_terms(self):
        """Products of a state that take two operands (normalized, 16-bit: `dot_state`)."""
        return 2 if self.normalize and self.dtype != torch.float32 else 1


def _shape(batch_heads, n, d, d_v, chunk_size, dtype, normalize, arch, segment, multiprocessors):
    if segment is None:
        multiprocessors = multiprocessors or {80: 108, 90: 132}[90 if arch == 90 else 80]
        tile = tiles(segment_output_kernel, arch, d, d_v, dtype)
        programs = batch_heads * (d // tile.block_k) * (d_v // tile.block_v)
        segment = segment_length(triton.cdiv(n, chunk_size), programs, multiprocessors)
    return _Shape(batch_heads, n, d, d_v, chunk_size, dtype, normalize, arch, segment)


def forward_costs(
    batch_heads,
    n,
    d,
    d_v,
    *,
    chunk_size=64,
    dtype=torch.bfloat16,
    normalize=True,
    arch=90,
    segment=None,
    multiprocessors=None,
    keep_float32=False,
):
    """The kernels of the forward pass and what each does: [segment sums, their prefix sums
    (torch), output], or [output] for one segment. `chunk_size` is the kernels' C; `segment`
    chunks per segment, or None for `segment_length` on a GPU of `multiprocessors` (the
    architecture's: 108 on sm_80, 132 on sm_90); `keep_float32` the float32 output the backward
    pass of normalized attention reads."""
    s = _shape(batch_heads, n, d, d_v, chunk_size, dtype, normalize, arch, segment, multiprocessors)
    if s.ns == 1:
        return [_output(s, keep_float32)]
    return [_sums(s), _prefix_sums(s, 1), _output(s, keep_float32)]


def backward_costs(
    batch_heads,
    n,
    d,
    d_v,
    *,
    chunk_size=64,
    dtype=torch.bfloat16,
    normalize=True,
    arch=90,
    segment=None,
    multiprocessors=None,
):
    """The kernels of the backward pass: [g·o = −a in torch (when normalized), segment sums,
    their prefix sums (torch), dq, dk, dv], or [g·o, the walk there and back] for one segment."""
    s = _shape(batch_heads, n, d, d_v, chunk_size, dtype, normalize, arch, segment, multiprocessors)
    costs = []
    if normalize:  # reads g and the float32 o, writes g·o (the kernels negate it: a)
        moved = s.bh * s.n * (s.d_v * (s.b + 4) + 4)
        costs.append(KernelCost("g·o (torch)", 2 * s.bh * s.n * s.d_v, moved))
    if s.ns == 1:
        return [*costs, _walk_bwd(s)]
    return [*costs, _sums_bwd(s), _prefix_sums(s, 2), _dq(s), _dk(s), _dv(s)]


def predicted_seconds(costs, peaks, dtype):
    """Σ over the kernels of max(FLOPs / P, bytes / β): a pass's roofline time."""
    return sum(cost.seconds(peaks, dtype) for cost in costs)


def linear_attention_costs(batch_heads, n, d, *, mode="fwd", dtype=torch.bfloat16, peaks=None):
    """The kernels that `linear_attention(..., method="triton")` runs (d_v = d, normalized, the
    kernels' chunk for `dtype`) on `peaks` (default: the H100's): the forward pass, or with
    mode="fwd+bwd" the forward and the backward pass."""
    peaks = peaks or PUBLISHED_PEAKS["H100"]
    options = {
        "chunk_size": kernel_chunk(64, dtype),
        "dtype": dtype,
        "arch": peaks.arch,
        "multiprocessors": peaks.multiprocessors,
    }
    backward = mode == "fwd+bwd"
    costs = forward_costs(batch_heads, n, d, d, keep_float32=backward, **options)
    return costs + (backward_costs(batch_heads, n, d, d, **options) if backward else [])


def softmax_costs(batch_heads, n, d, *, mode="fwd", dtype=torch.bfloat16):
    """FlashAttention-style causal softmax attention at its minimum: the FLOPs and bytes of
    `linattn_core.costs.FORMULAS` (2·N²·d FLOPs forward, 3.5 times that with the backward
    pass; q, k, v read and o written once)."""

    shape = {"B": 1, "H": batch_heads, "N": n, "d": d}
    name = "FlashAttention-style softmax"
    return [KernelCost(name, flop_count(shape, mode, "softmax"), traffic_bytes(shape, mode, dtype))]


def kernel_roofline_crossover_length(
    peaks, d, *, batch_heads=16, mode="fwd", dtype=torch.bfloat16, longest=2**17
):
    """The roofline crossover of these kernels: the shortest N (a multiple of 64, up to `longest`)
    from which their roofline time, for the bytes they move, stays below that of
    FlashAttention-style softmax attention; None if they are not faster at `longest`. With minimum
    bytes for both, the closed form is `linattn_core.costs.roofline_crossover_length`."""
    crossover = None
    for n in range(longest, 0, -64):
        linear = predicted_seconds(
            linear_attention_costs(batch_heads, n, d, mode=mode, dtype=dtype, peaks=peaks),
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


def _per_head(kernel, s, flops, moved):
    """The cost of `kernel` (or of torch's work, named by a string) for all B·H heads."""
    name = kernel if isinstance(kernel, str) else kernel.fn.__name__
    return KernelCost(name, s.bh * flops, s.bh * moved)


def _out_bytes(s, shares):
    """Bytes a gradient or output element costs: its dtype, or float32 when it has shares."""
    return s.b if shares == 1 else 4


def _prefix_sums(s, states):
    """torch's cumsum over the segments of `states` state sums (and of their vectors), the
    initial state in row 0."""
    moved = 8 * states * (s.ns + 1) * (s.d * s.d_v + (s.d if s.normalize else 0))
    return _per_head("prefix sums (torch)", s, 0, moved)


def _starts(s, rows):
    """Rows of prefix sums that a walk reads before it starts: none for one segment, which
    starts from the initial state (zeros) or the final state's gradient (zeros)."""
    return 0 if s.ns == 1 else rows


def _sums(s):
    nk, nv = s.tiles(segment_sums_kernel)
    rows = s.ns + 1  # the initial state (zeros), then each segment's sums
    moved = s.b * s.nt * s.c * (s.d * nv + s.d_v * nk) + 4 * rows * s.d * s.d_v
    moved += 4 * rows * s.d if s.normalize else 0  # z, by the first value tile
    return _per_head(segment_sums_kernel, s, 2 * s.nt * s.c * s.d * s.d_v, moved)


def _output(s, keep_float32):
    nk, nv = s.tiles(segment_output_kernel)
    moved = 4 * _starts(s, s.ns) * (s.d * s.d_v + (s.d * nv if s.normalize else 0))
    moved += s.b * s.nt * s.c * (2 * s.d * nv + s.d_v * nk)
    moved += _out_bytes(s, nk) * s.nt * s.c * s.d_v * nk
    if keep_float32 and nk == 1 and s.dtype != torch.float32:
        moved += 4 * s.nt * s.c * s.d_v
    if s.normalize:  # r (or each feature tile's denominator), by the first value tile
        moved += 4 * s.nt * s.c * nk
    c = s.c
    flops = 2 * s.nt * (2 * c * s.d * s.d_v + c * c * s.d * nv + c * c * s.d_v * nk)
    return _per_head(segment_output_kernel, s, flops, moved)


def _sums_bwd(s):
    nk, nv = s.tiles(segment_sums_bwd_kernel)
    rows = s.ns + 1  # as in the forward pass: the initial state (zeros), then the segments
    moved = s.b * s.nt * s.c * (2 * s.d * nv + 2 * s.d_v * nk) + 8 * rows * s.d * s.d_v
    if s.normalize:  # r and a per program, z and y by the first value tile
        moved += 8 * s.nt * s.c * nk * nv + 8 * rows * s.d
    return _per_head(segment_sums_bwd_kernel, s, 4 * s.nt * s.c * s.d * s.d_v, moved)


def _dq(s, kernel=segment_dq_kernel):
    nk, nv = s.tiles(kernel)
    moved = 4 * _starts(s, s.ns) * (s.d * s.d_v + (s.d * nv if s.normalize else 0))
    moved += s.b * s.nt * s.c * (s.d * nv + 2 * s.d_v * nk)
    if s.normalize:  # r per program, a in the first value tile's
        moved += 4 * s.nt * s.c * (nk * nv + nk)
    moved += _out_bytes(s, nv) * s.nt * s.c * s.d * nv
    c, kv = s.c, s.d * s.d_v
    flops = 2 * s.nt * (c * c * s.d_v * nk + (s.two_terms + 1) * c * kv + c * c * s.d * nv)
    return _per_head(segment_dq_kernel, s, flops, moved)


def _dk(s, kernel=segment_dk_kernel):
    nk, nv = s.tiles(kernel)
    after = _starts(s, 2 * s.ns)  # prefix sums read before the walks: all, less those before
    moved = 4 * after * (s.d * s.d_v + (s.d if s.normalize else 0))
    moved += s.b * s.nt * s.c * (s.d * nv + 2 * s.d_v * nk)
    if s.normalize:
        moved += 4 * s.nt * s.c * (nk * nv + nk)
    moved += _out_bytes(s, nv) * s.nt * s.c * s.d * nv
    c, kv = s.c, s.d * s.d_v
    flops = 2 * s.nt * ((s.two_terms + 1) * c * kv + c * c * s.d_v * nk + c * c * s.d * nv)
    return _per_head(segment_dk_kernel, s, flops, moved)


def _dv(s, kernel=segment_dv_kernel):
    nk, nv = s.tiles(kernel)
    after = _starts(s, 2 * s.ns)
    moved = 4 * after * s.d * s.d_v + s.b * s.nt * s.c * (2 * s.d * nv + s.d_v * nk)
    if s.normalize:
        moved += 4 * s.nt * s.c * nk * nv
    moved += _out_bytes(s, nk) * s.nt * s.c * s.d_v * nk
    c, kv = s.c, s.d * s.d_v
    flops = 2 * s.nt * (c * c * s.d * nv + 2 * c * kv + c * c * s.d_v * nk)
    return _per_head(segment_dv_kernel, s, flops, moved)


def _walk_bwd(s):
    """The three walks of one program (dq, then dk and dv back): the segment kernels' counts for
    the tiles of `walk_bwd`, without the sums they start from."""
    walks = (_dq(s, walk_bwd_kernel), _dk(s, walk_bwd_kernel), _dv(s, walk_bwd_kernel))
    flops, moved = (sum(getattr(w, field) for w in walks) for field in ("flops", "bytes"))
    return KernelCost(walk_bwd_kernel.fn.__name__, flops, moved)
