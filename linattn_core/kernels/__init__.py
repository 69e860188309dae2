"""Triton kernels for causal linear attention, forward and backward.

Layered as in flash-linear-attention: `@triton.jit` kernels and their launchers (`forward.py`,
`backward.py`), the tiles each launcher picks per GPU architecture and what the kernels accept
(`tiles.py`; the input checks are in `linattn_core.validation`), the autograd Function and the
documented public function (`linear_attention.py`). `linattn_core.linear_attention(...,
method="triton")` calls `triton_linear_attention`. `python -m linattn_core.kernels.compile` compiles
every kernel for A100 and H100 without a GPU and reports registers, spills, shared memory and
tensor-core use. Importing this package imports triton; the rest of `linattn_core` does not, so the
package works where triton is absent.

The kernels run on CUDA tensors, and on CPU tensors in the Triton interpreter when the
environment variable TRITON_INTERPRET=1 is set before triton is first imported in the process
(triton reads it then; modules such as torch.utils.flop_counter import triton too), for example
at the top of a script or notebook, or as `TRITON_INTERPRET=1 python ...`.
"""

from linattn_core.kernels.forward import INTERPRETED
from linattn_core.kernels.linear_attention import CausalLinearAttention, triton_linear_attention
from linattn_core.kernels.tiles import SUPPORTED_CHUNK_SIZES, SUPPORTED_DIMS, SUPPORTED_DTYPES

__all__ = [
    "INTERPRETED",
    "SUPPORTED_CHUNK_SIZES",
    "SUPPORTED_DIMS",
    "SUPPORTED_DTYPES",
    "CausalLinearAttention",
    "triton_linear_attention",
]
