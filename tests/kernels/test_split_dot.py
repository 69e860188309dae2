"""`common.split_dot`, a float32 tile times a 16-bit one as two 16-bit products: 16 (bfloat16)
or 22 (float16) of the float32 operand's 24 bits survive, where one rounding keeps 8 or 11;
float16's range is not exceeded; float32 operands take `dot`. In the Triton interpreter (see
conftest.py)."""

import pytest
import torch

pytest.importorskip("triton")

import triton
import triton.language as tl

from linattn_core.kernels.common import split_dot
from linattn_core.testing import relative_error


@triton.jit
def product_kernel(a, b, out, M: tl.constexpr, K: tl.constexpr, N: tl.constexpr):
    o_m, o_k, o_n = tl.arange(0, M), tl.arange(0, K), tl.arange(0, N)
    b_a = tl.load(a + o_m[:, None] * K + o_k[None, :])
    b_b = tl.load(b + o_k[:, None] * N + o_n[None, :])
    tl.store(out + o_m[:, None] * N + o_n[None, :], split_dot(b_a, b_b))


def split_product(a, b):
    out = torch.empty(a.shape[0], b.shape[1], dtype=torch.float32)
    product_kernel[(1,)](a, b, out, *a.shape, b.shape[1])
    return out


@pytest.mark.interpreter
@pytest.mark.usefixtures("interpreter_bfloat16_dot")
@pytest.mark.parametrize(
    ("dtype", "scale", "rtol"),
    [(torch.bfloat16, 1.0, 3e-5), (torch.float16, 1.0, 3e-6), (torch.float16, 1e7, 3e-6)],
)
def test_two_terms_keep_about_sixteen_bits(dtype, scale, rtol):
    generator = torch.Generator().manual_seed(0)
    a = scale * torch.randn(32, 64, generator=generator)
    b = torch.randn(64, 16, generator=generator).to(dtype)
    exact = a.double() @ b.double()
    one_term = relative_error(a.to(dtype).double() @ b.double(), exact)
    error = relative_error(split_product(a, b), exact)
    assert error < rtol < one_term / 30


@pytest.mark.interpreter
def test_float32_operands_take_dot():
    generator = torch.Generator().manual_seed(1)
    a, b = torch.randn(16, 32, generator=generator), torch.randn(32, 16, generator=generator)
    assert relative_error(split_product(a, b), a.double() @ b.double()) < 1e-6
