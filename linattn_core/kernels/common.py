"""What the Triton kernels of both operations share: the matrix product they all use (`dot`) and
its form for a float32 tile times a 16-bit one (`split_dot`), whether they run in the interpreter
(`INTERPRETED`), the GPU they launch on (`device_arch`, `multiprocessors`) and the one rule for
the inputs they accept (`check_inputs`).

The rule: q and k `(..., N, d)`, v `(..., N, d_v)` with d and d_v in `SUPPORTED_DIMS` (whole
tensor-core tiles, so no masking along the features), float32, bfloat16 or float16, one of
`SUPPORTED_CHUNK_SIZES` tokens a chunk, on a CUDA device — or on the CPU when the kernels are
interpreted (TRITON_INTERPRET=1 set before triton's first import). Any other input is refused
with the reason and the method that takes it instead.
"""

import functools

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from linattn_core.validation import check_attention_inputs, shape_of

SUPPORTED_DIMS = (16, 32, 64, 128)
SUPPORTED_CHUNK_SIZES = (64,)
SUPPORTED_DTYPES = ("float32", "bfloat16", "float16")


@triton.jit
def dot(a, b, acc):
    """a @ b (+ acc), accumulated in float32. 16-bit operands multiply on their own tensor cores;
    float32 operands in float32 on the CUDA cores ("ieee"): one TF32 product (the GPU default)
    would round both operands to 10 stored bits, and three of them (tf32x3) hold the hi and lo
    halves of whole operand tiles in registers, which the kernels' C × d tiles cannot afford."""
    if a.dtype == tl.float32:
        return tl.dot(a, b, acc, input_precision="tf32x3")
    return tl.dot(a, b, acc)


@triton.jit
def split_dot(a, b):
    """a @ b for a float32 tile `a` and a tile `b` of the inputs' dtype, in float32. With 16-bit
    `b`, `a` enters as two 16-bit terms, its rounding and the rounding's error: two products on
    the 16-bit tensor cores keep about 16 of a's 24 bits (b is exact in its own type), at a third
    of the cost of tf32x3's three TF32 products, each at half the 16-bit rate; for float16, whose
    largest number is 65504, `a` is divided by its largest magnitude first, which multiplies the
    product back. With float32 `b`, `dot`."""
    if b.dtype == tl.float32:
        product = dot(a, b, None)
    else:
        scale = 1.0
        if b.dtype == tl.float16:
            scale = tl.maximum(tl.max(tl.abs(a)), 1e-30)
        a_hi = (a / scale).to(b.dtype)
        a_lo = (a / scale - a_hi.to(tl.float32)).to(b.dtype)
        product = tl.dot(a_lo, b, tl.dot(a_hi, b)) * scale
    return product


# The kernels run in the interpreter when TRITON_INTERPRET=1 was set before triton's first import:
# triton defines its own library (tl.sum, tl.cdiv, ...) for the interpreter or not at that moment,
# and our kernels when their module is imported; set in between, kernels and library do not match.
INTERPRETED = isinstance(dot, InterpretedFunction) and isinstance(
    tl.standard.cdiv, InterpretedFunction
)


@functools.cache
def device_arch(device):
    """The compute capability of a CUDA device as 80, 90, …; 90 for the CPU interpreter."""
    if device.type != "cuda":
        return 90
    major, minor = torch.cuda.get_device_capability(device)
    return 10 * major + minor


@functools.cache
def multiprocessors(device):
    """Streaming multiprocessors of a CUDA device (H100: 132); 4 for the CPU interpreter, which
    runs one program at a time and gains nothing from more."""
    if device.type != "cuda":
        return 4
    return torch.cuda.get_device_properties(device).multi_processor_count


def check_inputs(fn, names, q, k, v, *, chunk_size):
    """Refuse, with the reason, inputs the kernels cannot run on (the rule in the module's
    docstring); `names` are the three inputs' names in the caller's signature."""
    check_attention_inputs(fn, names, q, k, v)
    check_kernel_inputs(fn, names, q, v, chunk_size=chunk_size)


# the launchers' decisions (tiles, grids, segments) for a shape, dtype and GPU: made once, kept
per_shape = functools.lru_cache(maxsize=256)

KERNEL_DTYPES = frozenset(getattr(torch, name) for name in SUPPORTED_DTYPES)


def check_kernel_inputs(fn, names, q, v, *, chunk_size):
    """What the kernels add to `check_attention_inputs`, which q, k, v passed: their feature
    dimensions, dtypes, chunk sizes and devices. Accepted inputs cost a few comparisons; the
    others get `check_inputs`' error."""
    device = q.device.type
    if (
        type(chunk_size) is int
        and chunk_size in SUPPORTED_CHUNK_SIZES
        and q.shape[-1] in SUPPORTED_DIMS
        and v.shape[-1] in SUPPORTED_DIMS
        and q.dtype in KERNEL_DTYPES
        and (device == "cuda" or (device == "cpu" and INTERPRETED))
    ):
        return
    q_name, _, v_name = names
    for name, x, dim in ((q_name, q, "d"), (v_name, v, "d_v")):
        if x.shape[-1] not in SUPPORTED_DIMS:
            raise ValueError(
                f"{fn}: the feature dimension {dim} = {name}.shape[-1] must be one of "
                f"{', '.join(map(str, SUPPORTED_DIMS))} for the Triton kernels; "
                f"got {name}.shape={shape_of(x)} (pad the features with zeros, or use "
                f"method='chunked')"
            )
    if str(q.dtype).removeprefix("torch.") not in SUPPORTED_DTYPES:
        raise TypeError(
            f"{fn}: the Triton kernels take float32, bfloat16 or float16 tensors; "
            f"got {q_name}.dtype={q.dtype} (float64 references: use method='chunked')"
        )
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
        raise TypeError(
            f"{fn}: chunk_size must be an int; got {type(chunk_size).__name__} {chunk_size!r}"
        )
    if chunk_size not in SUPPORTED_CHUNK_SIZES:
        raise ValueError(
            f"{fn}: chunk_size must be one of {', '.join(map(str, SUPPORTED_CHUNK_SIZES))} "
            f"for the Triton kernels, whose tiles are compiled and checked for it; "
            f"got chunk_size={chunk_size!r} (other chunk sizes: method='chunked')"
        )
    check_device(fn, q_name, q)


def check_device(fn, name, x):
    """A CUDA tensor, or a CPU tensor when the kernels are interpreted."""
    if x.device.type == "cuda":
        return
    if x.device.type != "cpu":
        raise ValueError(
            f"{fn}: the Triton kernels run on CUDA devices (or on the CPU under the Triton "
            f"interpreter); got {name}.device={x.device}"
        )
    if INTERPRETED:
        return
    if triton.knobs.runtime.interpret:
        hint = (
            "TRITON_INTERPRET=1 was set after triton was imported; set it before triton's "
            "first import (restart the Python process or notebook kernel)"
        )
    else:
        hint = (
            "set the environment variable TRITON_INTERPRET=1 before triton is first imported "
            "(`TRITON_INTERPRET=1 python ...`, or os.environ['TRITON_INTERPRET'] = '1' at the "
            "top of the script, before linattn_core.kernels or torch.utils.flop_counter)"
        )
    raise ValueError(
        f"{fn}: {name} is on the CPU, where the Triton kernels run only in the Triton "
        f"interpreter: {hint}; or move the tensors to a CUDA device. Got {name}.device={x.device}"
    )
