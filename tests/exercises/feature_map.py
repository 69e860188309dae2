"""Puzzle 1, y = elu(x) + 1 over x (N, D), BLOCK rows a program: the bank."""

import triton
import triton.language as tl

from tests.exercises import Mutant


@triton.jit
def where_with_offsets(x, y, N, D: tl.constexpr, BLOCK: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_n = tl.arange(0, D)
    mask = (offs_m < N)[:, None]
    ptrs = offs_m[:, None] * D + offs_n[None, :]
    a = tl.load(x + ptrs, mask=mask, other=0.0)
    out = tl.where(a > 0, a + 1, tl.exp(a))
    tl.store(y + ptrs, out, mask=mask)


@triton.jit
def min_max_without_other(x, y, N, D: tl.constexpr, BLOCK: tl.constexpr):
    # masked lanes are never stored, so they need no value (no other=)
    row = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)[:, None]
    col = tl.arange(0, D)[None, :]
    valid = row < N
    a = tl.load(x + row * D + col, mask=valid)
    tl.store(y + row * D + col, tl.maximum(a, 0.0) + tl.exp(tl.minimum(a, 0.0)), mask=valid)


@triton.jit
def block_pointers(x, y, N, D: tl.constexpr, BLOCK: tl.constexpr):
    start = tl.program_id(0) * BLOCK
    p_x = tl.make_block_ptr(x, (N, D), (D, 1), (start, 0), (BLOCK, D), (1, 0))
    p_y = tl.make_block_ptr(y, (N, D), (D, 1), (start, 0), (BLOCK, D), (1, 0))
    b_x = tl.load(p_x, boundary_check=(0,), padding_option="zero")
    tl.store(p_y, tl.where(b_x > 0, b_x + 1.0, tl.exp(b_x)), boundary_check=(0,))


@triton.jit
def tensor_descriptors(x, y, N, D: tl.constexpr, BLOCK: tl.constexpr):
    x_desc = tl.make_tensor_descriptor(x, [N, D], [D, 1], [BLOCK, D])
    y_desc = tl.make_tensor_descriptor(y, [N, D], [D, 1], [BLOCK, D])
    row = tl.program_id(0) * BLOCK
    tile = x_desc.load([row, 0])
    y_desc.store([row, 0], tl.where(tile > 0, tile + 1.0, tl.exp(tile)))


@triton.jit
def row_by_row_in_float64(x, y, N, D: tl.constexpr, BLOCK: tl.constexpr):
    cols = tl.arange(0, D)
    for r in range(BLOCK):
        row = tl.program_id(0) * BLOCK + r
        value = tl.load(x + row * D + cols, mask=row < N, other=0.0).to(tl.float64)
        phi = tl.where(value > 0, value + 1.0, tl.exp(value))
        tl.store(y + row * D + cols, phi, mask=row < N)


CORRECT = (
    where_with_offsets,
    min_max_without_other,
    block_pointers,
    tensor_descriptors,
    row_by_row_in_float64,
)

MISTAKES = (
    Mutant(
        where_with_offsets,
        (("x + ptrs, mask=mask, other=0.0", "x + ptrs"),),
        "program 1 loads rows 21–31 of x, past N = 21 (line 15, `tl.load(x + ptrs)`): "
        "mask the load with rows < N (other=0.0)",
    ),
    Mutant(
        where_with_offsets,
        (("out, mask=mask)", "out)"),),
        "program 1 stores rows 21–31 of y, past N = 21 (line 17, `tl.store(y + ptrs, out)`)",
    ),
    Mutant(
        where_with_offsets,
        (("offs_m < N", "offs_m <= N"),),
        "program 1 loads row 21 of x, past N = 21 (line 15, `tl.load(x + ptrs, mask=mask, "
        "other=0.0)`): its mask (line 13, `mask = (offs_m <= N)[:, None]`) lets it through",
    ),
    Mutant(
        min_max_without_other,
        (("valid = row < N", "valid = col < N"),),
        "program 1 loads rows 21–31 of x, past N = 21 (line 26, `tl.load(x + row * D + col, "
        "mask=valid)`): its mask (line 25, `valid = col < N`) lets them through",
    ),
    Mutant(where_with_offsets, (("a + 1, tl.exp(a)", "a, tl.exp(a) - 1"),), "y is elu(x): add 1"),
    Mutant(block_pointers, (("b_x + 1.0, tl.exp", "b_x, tl.exp"),), "y is x where x > 0"),
    Mutant(where_with_offsets, (("a + 1, tl.exp(a)", "tl.exp(a), tl.exp(a)"),), "y is exp(x)"),
    Mutant(where_with_offsets, (("a + 1, tl.exp(a)", "a + 1, a + 1"),), "y is x + 1 everywhere"),
    Mutant(
        where_with_offsets,
        (("a + 1, tl.exp(a)", "tl.exp(a), a + 1"),),
        "the two branches are swapped",
    ),
    Mutant(
        min_max_without_other,
        (("tl.exp(tl.minimum(a, 0.0))", "1.0"),),
        "y is max(x, 0) + 1: where x ≤ 0",
    ),
    Mutant(
        where_with_offsets,
        (("offs_m[:, None] * D", "offs_m[:, None] * BLOCK"),),
        "the rows of x and y are addressed BLOCK elements apart (line 14, `ptrs = offs_m[:, "
        "None] * BLOCK + offs_n[None, :]`), but a row holds D",
    ),
    Mutant(
        where_with_offsets,
        (("tl.program_id(0) * BLOCK", "tl.program_id(0) * D"),),
        "program p starts x and y at row p·D",
    ),
    Mutant(
        min_max_without_other,
        (("tl.program_id(0) * BLOCK + ", ""),),
        "every program starts x and y at row 0 (lines 26 and 27)",
    ),
    Mutant(
        block_pointers,
        ((', boundary_check=(0,), padding_option="zero"', ""),),
        "program 1 loads rows 21–31 of x, past N = 21 (line 35, `tl.load(p_x)`): add the row "
        'dimension to its boundary_check (and padding_option="zero")',
    ),
    Mutant(
        block_pointers,
        (("(N, D), (D, 1)", "(N, D), (BLOCK, 1)"),),
        "the rows of x and y are addressed BLOCK elements apart",
    ),
    Mutant(
        tensor_descriptors,
        (("row = tl.program_id(0) * BLOCK", "row = tl.program_id(0) * D"),),
        "program p starts x and y at row p·D (line 43, `row = tl.program_id(0) * D`)",
    ),
    Mutant(
        where_with_offsets,
        (("tl.store(y + ptrs", "tl.store(x + ptrs"),),
        "program 0 stores into x, an input (line 17",
    ),
    Mutant(
        where_with_offsets,
        (
            (
                "out = tl.where(a > 0, a + 1, tl.exp(a))",
                "out = tl.where(a > 0, a + 1, tl.exp(a)).to(tl.float16)",
            ),
        ),
        "y is off by",
    ),
    Mutant(
        where_with_offsets,
        (
            (
                "    mask = (offs_m < N)[:, None]\n"
                "    ptrs = offs_m[:, None] * D + offs_n[None, :]\n",
                "    ptrs = offs_m[:, None] * D + offs_n[None, :]\n    mask = ptrs < N\n",
            ),
        ),
        "the mask of the load of x keeps the first N elements, not the first N rows",
        "line 14, `mask = ptrs < N`",
    ),
)
