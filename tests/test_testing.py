"""The checking helpers themselves: a check that cannot fail checks nothing."""

import math

import pytest
import torch

from linattn_core.testing import (
    assert_close,
    check,
    in_float64,
    random_qkv,
    relative_error,
    run_python,
)


def test_relative_error_is_the_ratio_of_norms():
    expected = torch.tensor([3.0, 4.0], dtype=torch.float64)
    assert relative_error(expected, expected) == 0.0
    assert math.isclose(relative_error(torch.tensor([3.0, 4.5]), expected), 0.1)


def test_relative_error_is_computed_in_float64():
    # ‖x‖² = 4·300² overflows float16 (max 65504)
    x = torch.full((4,), 300.0, dtype=torch.float16)
    assert math.isclose(relative_error(x, 2 * x), 0.5)


@pytest.mark.parametrize("magnitude", [1e-300, 1e300])
def test_relative_error_does_not_underflow_or_overflow(magnitude):
    expected = torch.tensor([3.0, 4.0], dtype=torch.float64)
    actual = torch.tensor([3.0, 4.5], dtype=torch.float64)
    assert math.isclose(relative_error(magnitude * actual, magnitude * expected), 0.1)


@pytest.mark.parametrize(
    ("actual", "expected"),
    [([math.nan, 1.0], [1.0, 1.0]), ([1.0, 1.0], [1.0, math.nan]), ([math.inf], [math.inf])],
)
def test_relative_error_of_non_finite_values_is_inf(actual, expected):
    assert relative_error(torch.tensor(actual), torch.tensor(expected)) == math.inf


def test_relative_error_against_a_zero_reference():
    zero = torch.zeros(3)
    assert relative_error(zero, zero) == 0.0
    assert relative_error(torch.full((3,), 1e-300, dtype=torch.float64), zero) == math.inf
    assert relative_error(torch.empty(0, 4), torch.empty(0, 4)) == 0.0


def test_assert_close_reports_error_tolerance_and_shapes():
    expected = torch.ones(2, 3)
    assert_close(expected + 1e-9, expected, rtol=1e-6)
    with pytest.raises(
        AssertionError, match=r"^chunked: relative error 0\.1 ≥ rtol 1e-3 .*\(2, 3\)"
    ):
        assert_close(1.1 * expected, expected, rtol=1e-3, name="chunked")
    with pytest.raises(AssertionError, match="relative error inf"):
        assert_close(torch.full((2, 3), math.nan), expected, rtol=1.0)
    with pytest.raises(AssertionError, match=r"shapes differ .*\(3, 2\)"):
        assert_close(expected.mT, expected, rtol=1.0)


def test_check_prints_the_tolerance_not_the_error(capsys):
    expected = torch.ones(5, dtype=torch.float64)
    check("chunked vs parallel", expected + 1e-13, expected, rtol=1e-10)
    check("float32", expected.float(), expected, rtol=2.5e-3)
    assert capsys.readouterr().out == (
        "✓ chunked vs parallel: relative error < 1e-10\n✓ float32: relative error < 2.5e-3\n"
    )
    with pytest.raises(AssertionError, match="bad"):
        check("bad", 2 * expected, expected, rtol=1e-10)
    assert capsys.readouterr().out == ""


def test_random_qkv_is_seeded_and_leaves_the_global_rng_alone():
    state = torch.get_rng_state()
    q, k, v = random_qkv(2, 3, n=5, d=4)
    assert (q.shape, k.shape, v.shape) == ((2, 3, 5, 4),) * 3
    assert q.dtype == torch.float64
    assert torch.equal(torch.get_rng_state(), state)
    assert all(
        torch.equal(a, b) for a, b in zip(random_qkv(2, 3, n=5, d=4), (q, k, v), strict=True)
    )
    assert not torch.equal(random_qkv(2, 3, n=5, d=4, seed=1)[0], q)
    assert not torch.equal(q, k)


def test_random_qkv_options():
    q, k, v = random_qkv(n=6, d=3, d_v=2, dtype=torch.float32, positive=True)
    assert (q.shape, v.shape, v.dtype) == ((6, 3), (6, 2), torch.float32)
    assert bool((q >= 0).all() and (k >= 0).all() and (v < 0).any())
    assert torch.equal(q, random_qkv(n=6, d=3, d_v=2, positive=True)[0].float())


def test_in_float64_runs_in_float64_and_casts_back():
    x = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
    seen = []

    def square_plus(a, b, *, offset):
        seen.append((a.dtype, b))
        return a * a + offset, a

    out, same = in_float64(square_plus, x, 7, offset=1.0)
    assert seen == [(torch.float64, 7)]
    assert out.dtype == same.dtype == torch.bfloat16
    assert torch.equal(out, torch.tensor([2.0, 5.0], dtype=torch.bfloat16))


def test_in_float64_needs_a_floating_tensor():
    with pytest.raises(TypeError, match="in_float64: tensors must include a floating-point tensor"):
        in_float64(torch.neg, torch.arange(3))


def test_relative_error_does_not_broadcast():
    with pytest.raises(ValueError, match=r"got actual\.shape=\(3,\), expected\.shape=\(1, 3\)"):
        relative_error(torch.ones(3), torch.ones(1, 3))


def test_run_python_sets_or_unsets_the_interpreter_and_reports_failures():
    code = "import os; print(os.environ.get('TRITON_INTERPRET'))"
    assert run_python(code, interpret=True) == "1\n"
    assert run_python(code) == "None\n"
    with pytest.raises(AssertionError, match="exited with 3"):
        run_python("import sys; sys.exit(3)")
