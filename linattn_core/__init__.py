"""linattn_core: tested reference implementations of linear attention.

The package behind the book *Linear Attention, from Kernels to GPUs*. Every function takes
PyTorch tensors with any leading batch dimensions, queries and keys `(..., N, d)` and values
`(..., N, d_v)`, validates its inputs, and is tested against a float64 reference.

Its code is of three kinds, one place each.

**Attention, at the top level** (imported here, or on demand):

- `softmax_attention`, `kernel_attention`, `linear_attention` (`attention`; `chunked` is the causal
  chunked form): the attention functions, `method="triton"` running the GPU kernels; the state
  that causal linear attention carries, `LinearAttentionState`, in and out of every method;
- `LinearSelfAttention`, `SoftmaxSelfAttention` (`modules`): multi-head attention layers;
- `feature_maps`: the maps φ that turn queries and keys into features for kernel attention;
- `favor`, `eam`, `delta`: FAVOR+ random features, Efficient Attention, the delta rule
  (`delta_rule`, also imported here);
- `decoding`, `kv_cache`, `transformer`: one generated token, what a decoder keeps, a small GPT
  block; `jacobians`: the Jacobians of attention blocks; `costs`: their FLOP, byte and memory
  models and crossover lengths;
- `methods`: every operation's method names and the one rule of `method="auto"`;
- `validation`: the input checks of every public function; `testing`: relative errors and seeded
  inputs, shared by the tests and the book; `provenance`: the device, versions, date and
  command stored with every measurement;
- `kernels/`: the Triton kernels behind `method="triton"` (importing it imports triton).
- `parallel/`: one sequence split over the processes of a `torch.distributed` group (context
  parallelism; `import linattn_core.parallel`).

**The mathematical toolkit**, `maths/` (the book's linear algebra, matrix calculus and
probability): `linalg`, `linear_systems`, `matrix_norms`, `probability`, `random_matrices`,
`descent`, `calculus` (`linattn_core.calculus` is `linattn_core.maths.calculus`).

**Measurement and the book's machinery**: `bench/`, the benchmark harness and the one
measurement layer (`bench.timing`, the interleaved median timer; `bench.memory`, the memory
probe); `book/`, what the chapters show with (ipywidgets, matplotlib): `explorable` (interactive
figures), `explorers` (the scaling chapter's explorers), `plotting`, `show` (`show_source`); and
`exercises/`, the self-checking kernel puzzles.
"""

from linattn_core import (
    delta,
    eam,
    favor,
    feature_maps,
    jacobians,
    testing,
    validation,
)
from linattn_core.attention import (
    LinearAttentionState,
    kernel_attention,
    linear_attention,
    softmax_attention,
)
from linattn_core.delta import delta_rule
from linattn_core.gated import gated_delta_rule
from linattn_core.maths import calculus
from linattn_core.modules import LinearSelfAttention, SoftmaxSelfAttention

__version__ = "0.1.0"

__all__ = [
    "LinearAttentionState",
    "LinearSelfAttention",
    "SoftmaxSelfAttention",
    "__version__",
    "calculus",
    "delta",
    "delta_rule",
    "eam",
    "favor",
    "feature_maps",
    "gated_delta_rule",
    "jacobians",
    "kernel_attention",
    "linear_attention",
    "softmax_attention",
    "testing",
    "validation",
]
