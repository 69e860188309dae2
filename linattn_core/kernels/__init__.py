"""Triton kernels for causal linear attention and the delta rule, forward and backward.

Laid out like flash-linear-attention's `ops/`: one folder per operation,

    linear_attention/   forward.py, backward.py (`@triton.jit` kernels and their launchers),
                        function.py (the autograd Function and `triton_linear_attention`)
    delta_rule/         the same for the delta rule (`triton_delta_rule`)

and `ops.py`, which registers both operations' passes as torch.library operators
(`linattn::linear_attention_forward`, …) for `torch.compile`, beside what they share:
`common.py` (the matrix product `dot`, `INTERPRETED`, the device, and the one rule for the
inputs the kernels accept, `check_inputs`), `layout.py` (the inputs as the kernels take them:
any leading dimensions as `(B, H, ·)`, contiguous, empty inputs, and back) and `tiles.py`
(the rule that makes each kernel's `@tile_rule` its tiles, warps and stages per GPU).
`compile.py` is the compile check (`python -m linattn_core.kernels.compile`); `tools/` holds the
rest of what studies the kernels rather than running them: the launch recorder the check uses,
the memory tracer of the interpreter and the cost model.

`linattn_core.linear_attention(..., method="triton")` and `linattn_core.delta_rule(...,
method="triton")` call these kernels. Importing this package imports triton; the rest of
`linattn_core` does not, so the package works where triton is absent.

The kernels run on CUDA tensors, and on CPU tensors in the Triton interpreter when the
environment variable TRITON_INTERPRET=1 is set before triton is first imported in the process
(triton reads it then; modules such as torch.utils.flop_counter import triton too), for example
at the top of a script or notebook, or as `TRITON_INTERPRET=1 python ...`.
"""

from linattn_core.kernels import ops  # registers the operators linattn::… for torch.compile
from linattn_core.kernels.common import (
    INTERPRETED,
    SUPPORTED_CHUNK_SIZES,
    SUPPORTED_DIMS,
    SUPPORTED_DTYPES,
)
from linattn_core.kernels.delta_rule.function import DeltaRule, triton_delta_rule
from linattn_core.kernels.linear_attention.function import (
    CausalLinearAttention,
    triton_linear_attention,
)

__all__ = [
    "INTERPRETED",
    "SUPPORTED_CHUNK_SIZES",
    "SUPPORTED_DIMS",
    "SUPPORTED_DTYPES",
    "CausalLinearAttention",
    "DeltaRule",
    "ops",
    "triton_delta_rule",
    "triton_linear_attention",
]
