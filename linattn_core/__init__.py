"""linattn_core: tested reference implementations of linear attention.

The package behind the book *Linear Attention, from Kernels to GPUs*. Every function takes
PyTorch tensors with any leading batch dimensions, queries and keys `(..., N, d)` and values
`(..., N, d_v)`, validates its inputs, and is tested against a float64 reference.

- `softmax_attention`, `kernel_attention`, `linear_attention`: the attention functions;
- `feature_maps`: the maps φ that turn queries and keys into features for kernel attention;
- `testing`: relative errors and seeded inputs, shared by the tests and the book's checks.
"""

from linattn_core import feature_maps, testing
from linattn_core.attention import kernel_attention, linear_attention, softmax_attention

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "feature_maps",
    "kernel_attention",
    "linear_attention",
    "softmax_attention",
    "testing",
]
