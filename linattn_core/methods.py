"""How every operation chooses its method: the names each takes, and the one rule of "auto".

Each operation computes one function in several equivalent forms, named alike everywhere:
"parallel" (the masked N×N matrix, for teaching), "recurrent" (one token at a time),
"chunked" (the chunk-parallel form in matrix products), "triton" (the GPU kernels of
`linattn_core.kernels`), and "auto", the default, which picks the fastest exact one for the
inputs (`auto_method`):

- "triton" for causal inputs on a CUDA device that the kernels take (`triton_applies`), packed
  sequences (`cu_seqlens`, `linattn_core.packing`) included;
- on any other device, "parallel" for causal inputs up to N = `parallel_up_to(d)`, where the
  operation has that form (linear attention; measured by `python -m linattn_core.bench auto`);
- "chunked" otherwise.
"""

LINEAR_ATTENTION_METHODS = ("auto", "parallel", "recurrent", "chunked", "triton")
DELTA_RULE_METHODS = ("auto", "recurrent", "chunked", "triton")
GATED_DELTA_RULE_METHODS = ("auto", "recurrent", "chunked", "triton")


def auto_method(methods, q, v, *, chunk_size, causal=True) -> str:
    """The method that `method="auto"` runs, among `methods` (an operation's names), for queries
    `(..., N, d)` and values `(..., N, d_v)`: the one place where that choice is made.

    On a CPU, causal attention runs the parallel form up to N = `parallel_up_to(d)` and the
    chunked form beyond (figures/auto_cpu.json: one masked N × N product is faster for short
    sequences, the chunked walk from there on, forward and backward); non-causal attention is
    two matrix products, the chunked form. On a CUDA device causal inputs run the Triton kernels
    when triton is installed and they take these shapes, dtype and chunk size.

    >>> import torch
    >>> q = torch.empty(1, 100, 64)
    >>> auto_method(LINEAR_ATTENTION_METHODS, q, q, chunk_size=64)
    'parallel'
    >>> auto_method(DELTA_RULE_METHODS, q, q, chunk_size=64)
    'chunked'
    """
    if causal and triton_applies(q, v, chunk_size):
        return "triton"
    on_gpu = q.device.type == "cuda"
    if (
        "parallel" in methods
        and causal
        and not on_gpu
        and q.shape[-2] <= parallel_up_to(q.shape[-1])
    ):
        return "parallel"
    return "chunked"


def triton_applies(q, v, chunk_size) -> bool:
    """Whether the Triton kernels take these inputs (`(..., N, d)` queries or keys, values):
    triton installed, a CUDA device, d, d_v, dtype and chunk size among the compiled tiles'."""
    if q.device.type != "cuda":
        return False
    try:
        from linattn_core.kernels import SUPPORTED_CHUNK_SIZES, SUPPORTED_DIMS, SUPPORTED_DTYPES
    except ImportError:
        return False
    return (
        q.shape[-1] in SUPPORTED_DIMS
        and v.shape[-1] in SUPPORTED_DIMS
        and str(q.dtype).removeprefix("torch.") in SUPPORTED_DTYPES
        and chunk_size in SUPPORTED_CHUNK_SIZES
    )


def parallel_up_to(d):
    """The longest N for which `method="auto"` runs the parallel form of causal attention on a
    CPU: max(128, 2d) (measured by `linattn_core.bench.auto`, committed in figures/auto_cpu.json).

    >>> parallel_up_to(16), parallel_up_to(64), parallel_up_to(128)
    (128, 128, 256)
    """
    return max(128, 2 * d)
