"""linattn_core: tested reference implementations of linear attention.

The package behind the book *Linear Attention, from Kernels to GPUs*. Every function takes
PyTorch tensors with any leading batch dimensions, queries and keys `(..., N, d)` and values
`(..., N, d_v)`, validates its inputs, and is tested against a float64 reference.

- `softmax_attention`, `kernel_attention`, `linear_attention`: the attention functions
  (`method="triton"` runs the GPU kernels of `linattn_core.kernels`);
- `LinearSelfAttention`, `SoftmaxSelfAttention`: multi-head attention layers built on them;
- `feature_maps`: the maps φ that turn queries and keys into features for kernel attention;
- `favor`, `eam`, `delta`: FAVOR+ random features, Efficient Attention, the delta rule;
- `calculus`, `jacobians`: matrix-calculus checks and the Jacobians of attention blocks;
- `testing`, `timing`: relative errors, seeded inputs and timings, shared by tests and book;
- `validation`: the input checks of every public function.

Imported on demand, one module per concept of the book: `linalg` (vec, Kronecker products,
rotations, RoPE, Gram–Schmidt, power iteration), `linear_systems` (LU, triangular solves, least
mean squares), `norms`, `probability`, `random_matrices`, `descent` (gradient descent and step
sizes), `transformer` (a small GPT block, its parameters, FLOPs and activation memory),
`decoding` (one generated token), `costs` (FLOP and memory models), `show` (`show_source`, the
package's code in the book); and, with heavier dependencies, `linattn_core.kernels` (triton),
`linattn_core.bench` (the benchmark harness), `linattn_core.widgets` (ipywidgets).
"""

from linattn_core import (
    calculus,
    delta,
    eam,
    favor,
    feature_maps,
    jacobians,
    testing,
    timing,
    validation,
)
from linattn_core.attention import kernel_attention, linear_attention, softmax_attention
from linattn_core.modules import LinearSelfAttention, SoftmaxSelfAttention

__version__ = "0.1.0"

__all__ = [
    "LinearSelfAttention",
    "SoftmaxSelfAttention",
    "__version__",
    "calculus",
    "delta",
    "eam",
    "favor",
    "feature_maps",
    "jacobians",
    "kernel_attention",
    "linear_attention",
    "softmax_attention",
    "testing",
    "timing",
    "validation",
]
