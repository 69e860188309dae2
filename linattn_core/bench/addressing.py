"""`make gpu-check`'s addressing rows: each operation, forward and backward, past 2³¹ elements.

flash-linear-attention's kernels returned wrong results without an error once B·H·N·d passed
2³¹ elements (its issue #1080): an offset in int32 wraps. Here each operation (normalized
linear attention with its final state, the delta rule, the gated delta rule) runs once in
bfloat16 on B·H = 16 heads of d = 128 and N = 2²⁰ + 64 tokens, 2³¹ + 2¹⁷ elements a tensor
(4 GiB), and the last head — whose last 1024 tokens lie past element 2³¹ — is run again alone,
(1, 1, N, d), far below 2³¹. A row compares the two on those tokens (and on the final state):
`{"op", "B", "H", "N", "d", "elements", "max_relative_error", "passed", "seconds", "error"}`,
the largest relative error (Frobenius) over the outputs and every gradient, passed when it is
within `KERNEL_RTOL` of bfloat16 (the two runs add the same numbers, in another order where
the segments of linear attention differ), the seconds of the row, and error None or why the
row failed. The CPU test of the same property is tests/kernels/test_addressing.py.
"""

import time

import torch

from linattn_core.attention import linear_attention
from linattn_core.bench.gpu import make_inputs
from linattn_core.delta import delta_rule
from linattn_core.gated import gated_delta_rule
from linattn_core.testing import KERNEL_RTOL, relative_error

OPS = ("linear", "delta", "gated")
LIMIT = 2**31  # elements: an int32 offset wraps past it
TAIL = 64  # tokens compared at least, at the end of the last head


def addressing_shape(dry):
    """B·H·N·d just past 2³¹ (dry: one head of one toy chunk, for the interpreter: the code
    runs, the comparison is with itself)."""
    if dry:
        return {"B": 1, "H": 1, "N": 16, "d": 16}
    return {"B": 1, "H": 16, "N": 2**20 + 64, "d": 128}


def outputs(op, inputs):
    """The operation's outputs by the Triton kernels: (o, S, z) for normalized linear attention,
    (o, final state) for the delta rules."""
    if op == "linear":
        o, (s, z) = linear_attention(
            *inputs, causal=True, normalize=True, method="triton", output_final_state=True
        )
        return o, s, z
    rule = gated_delta_rule if op == "gated" else delta_rule
    return tuple(rule(*inputs, method="triton"))


def outputs_and_gradients(op, inputs, grads):
    """The outputs and every input's gradient, for the output gradients `grads`."""
    leaves = [x.detach().requires_grad_() for x in inputs]
    out = outputs(op, leaves)
    return [x.detach() for x in out] + list(torch.autograd.grad(out, leaves, grads))


def compared_tokens(shape):
    """The last head's tokens past element 2³¹ of a `(B, H, N, d)` tensor, at least the last
    TAIL (all of them in a toy run, where none is past)."""
    n, d = shape["N"], shape["d"]
    first_past = -(-LIMIT // d) - (shape["B"] * shape["H"] - 1) * n
    return slice(max(0, min(first_past, n - TAIL)), n)


def output_shapes(op, shape):
    """The shapes of `outputs`: o `(B, H, N, d)`, S `(B, H, d, d)` (and z `(B, H, d)`)."""
    heads, n, d = (shape["B"], shape["H"]), shape["N"], shape["d"]
    return [(*heads, n, d), (*heads, d, d)] + ([(*heads, d)] if op == "linear" else [])


def addressing_row(op, shape, dtype, device):
    """One row of the module's docstring."""
    elements = shape["B"] * shape["H"] * shape["N"] * shape["d"]
    row = {"op": op, **{key: shape[key] for key in ("B", "H", "N", "d")}, "elements": elements}
    row |= {"max_relative_error": None, "passed": False, "seconds": None, "error": None}
    start = time.perf_counter()
    try:
        inputs = make_inputs(op, shape, dtype, device)
        generator = torch.Generator(device=device).manual_seed(1)
        grads = [
            torch.randn(size, generator=generator, device=device, dtype=dtype)
            for size in output_shapes(op, shape)
        ]
        full = [x[-1, -1].clone() for x in outputs_and_gradients(op, inputs, grads)]
        head = [x[-1:, -1:].contiguous() for x in inputs]
        head_grads = [g[-1:, -1:].contiguous() for g in grads]
        del inputs, grads
        alone = outputs_and_gradients(op, head, head_grads)
        tokens = compared_tokens(shape)
        errors = [
            relative_error(*(x[tokens] if x.shape[0] == shape["N"] else x for x in (a, e[0, 0])))
            for a, e in zip(full, alone, strict=True)
        ]
        row["max_relative_error"] = max(errors)
        row["passed"] = row["max_relative_error"] <= KERNEL_RTOL[dtype]
    except Exception as failure:  # out of memory, a failed launch: the row says why and fails
        row["error"] = f"{type(failure).__name__}: {str(failure).strip()[:300]}"
    finally:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.empty_cache()
    row["seconds"] = time.perf_counter() - start
    return row


def addressing(dtype, device, *, dry=False):
    """The rows of the three operations."""
    shape = addressing_shape(dry)
    return [addressing_row(op, shape, dtype, device) for op in OPS]


def addressing_line(row):
    """One line for the terminal."""
    verdict = "ok  " if row["passed"] else "FAIL"
    shape = f"B={row['B']} H={row['H']} N={row['N']} d={row['d']} ({row['elements']:,} elements)"
    error = row["error"] or f"max relative error {row['max_relative_error']:.1e}"
    return f"{verdict} addressing {row['op']:<7}{shape}: {error}, {row['seconds']:.1f} s"
