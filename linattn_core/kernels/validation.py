"""What the Triton kernels accept, checked before a launch, with messages that say what to fix."""

import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from linattn_core.kernels.forward import chunk_states_fwd_kernel
from linattn_core.validation import _shape, check_attention_inputs

SUPPORTED_DIMS = (16, 32, 64, 128)
SUPPORTED_CHUNK_SIZES = (64,)  # the kernels' tile height, compiled and checked for every GPU
SUPPORTED_DTYPES = ("float32", "bfloat16", "float16")

# The kernels run in the interpreter when TRITON_INTERPRET=1 was set before triton's first import:
# triton defines its own library (tl.sum, tl.cdiv, ...) for the interpreter or not at that moment,
# and our kernels when their module is imported; set in between, kernels and library do not match.
INTERPRETED = isinstance(chunk_states_fwd_kernel, InterpretedFunction) and isinstance(
    tl.standard.cdiv, InterpretedFunction
)


def check_kernel_inputs(fn, names, q, k, v, *, chunk_size):
    """q, k `(..., N, d)` and v `(..., N, d_v)` that the kernels can run on.

    d and d_v must be in SUPPORTED_DIMS (tensor-core tiles, and no masking along features), the
    dtype one of SUPPORTED_DTYPES, the chunk size one of SUPPORTED_CHUNK_SIZES, the device a
    CUDA GPU, or the CPU under the Triton interpreter.
    """
    check_attention_inputs(fn, names, q, k, v)
    q_name, _, v_name = names
    for name, x, dim in ((q_name, q, "d"), (v_name, v, "d_v")):
        if x.shape[-1] not in SUPPORTED_DIMS:
            raise ValueError(
                f"{fn}: the feature dimension {dim} = {name}.shape[-1] must be one of "
                f"{', '.join(map(str, SUPPORTED_DIMS))} for the Triton kernels; "
                f"got {name}.shape={_shape(x)} (pad the features with zeros, or use "
                f"method='chunked')"
            )
    if str(q.dtype).removeprefix("torch.") not in SUPPORTED_DTYPES:
        raise TypeError(
            f"{fn}: the Triton kernels take float32, bfloat16 or float16 tensors; "
            f"got {q_name}.dtype={q.dtype} (float64 references: use method='chunked')"
        )
    if chunk_size not in SUPPORTED_CHUNK_SIZES or isinstance(chunk_size, bool):
        raise ValueError(
            f"{fn}: chunk_size must be one of {', '.join(map(str, SUPPORTED_CHUNK_SIZES))} "
            f"for the Triton kernels, whose tiles are compiled and checked for it; "
            f"got chunk_size={chunk_size!r} (other chunk sizes: method='chunked')"
        )
    check_kernel_device(fn, q_name, q)


def check_kernel_device(fn, name, x):
    """A CUDA tensor, or a CPU tensor with the kernels defined under TRITON_INTERPRET=1."""
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
