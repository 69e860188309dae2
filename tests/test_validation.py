"""Bad inputs raise ValueError or TypeError with a message naming the argument, the expectation
and what was received."""

import math
import re

import pytest
import torch

from linattn_core import kernel_attention, linear_attention, softmax_attention
from linattn_core.feature_maps import elu_plus_one, identity, relu, taylor, taylor_dim
from linattn_core.testing import assert_close, random_qkv
from linattn_core.validation import (
    check_matrix,
    check_same_dtype_and_device,
    check_square,
    softmax_scale,
)

Q, K, V = random_qkv(2, n=5, d=4, d_v=3)  # (2, 5, 4), (2, 5, 4), (2, 5, 3)

ATTENTION = [
    pytest.param(softmax_attention, ("q", "k", "v"), id="softmax"),
    pytest.param(kernel_attention, ("phi_q", "phi_k", "v"), id="kernel"),
    pytest.param(linear_attention, ("phi_q", "phi_k", "v"), id="linear"),
]

FLOAT = "must be a floating-point tensor; got dtype=torch."

# case: ({position: bad tensor}, error, message after the name of the first bad argument)
BAD_TENSORS = {
    "list": ({0: [[1.0]]}, TypeError, "must be a torch.Tensor; got list"),
    "int": ({1: K.long()}, TypeError, FLOAT + "int64"),
    "bool": ({2: V.bool()}, TypeError, FLOAT + "bool"),
    "complex": ({0: Q.to(torch.complex128)}, TypeError, FLOAT + "complex128"),
    "rank": ({0: Q[0, 0]}, ValueError, "must have at least 2 dimensions; got {name}.shape=(4,)"),
    "batch-broadcast": ({1: K[:1]}, ValueError, "must have the same batch dimensions as {q}"),
    "batch-missing": ({2: V[0]}, ValueError, "must have the same batch dimensions as {q}"),
    "N-k": ({1: K[:, :4]}, ValueError, "must have the same sequence length N as v"),
    "N-q": ({0: Q[:, 1:]}, ValueError, "must have the same sequence length N as v"),
    "d": ({1: K[..., :3]}, ValueError, "must have the same feature dimension d as {q}"),
    "d=0": ({0: Q[..., :0], 1: K[..., :0]}, ValueError, "and {k} must have at least one feature"),
    "dtype": ({1: K.float()}, TypeError, "must have the same dtype as {q}; got {q}.dtype="),
    "device": ({2: V.to("meta")}, ValueError, "must be on the same device as {q}; got {q}.dev"),
}


@pytest.mark.parametrize("case", list(BAD_TENSORS.values()), ids=list(BAD_TENSORS))
@pytest.mark.parametrize(("attention", "names"), ATTENTION)
def test_bad_tensors(attention, names, case):
    replacements, error, message = case
    inputs = [Q, K, V]
    for position, bad in replacements.items():
        inputs[position] = bad
    name = names[min(replacements)]
    message = message.format(name=name, q=names[0], k=names[1])
    with pytest.raises(error, match=re.escape(f"{attention.__name__}: {name} {message}")):
        attention(*inputs)


def test_message_shows_both_shapes():
    phi_q, phi_k, v = Q.new_ones(2, 6, 4), Q.new_ones(2, 5, 4), Q.new_ones(2, 6, 3)
    expected = (
        "linear_attention: phi_k must have the same sequence length N as v; "
        "got phi_k.shape=(2, 5, 4), v.shape=(2, 6, 3)"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        linear_attention(phi_q, phi_k, v)


@pytest.mark.parametrize(
    ("chunk_size", "error"),
    [(0, ValueError), (-1, ValueError), (True, TypeError), (2.0, TypeError), ("64", TypeError),
     (None, TypeError)],
)  # fmt: skip
def test_bad_chunk_size(chunk_size, error):
    """A value of the wrong type raises TypeError, one out of range ValueError (the policy of
    `linattn_core.validation`), with the same message."""
    expected = f"linear_attention: chunk_size must be a positive int; got chunk_size={chunk_size!r}"
    with pytest.raises(error, match=re.escape(expected)):
        linear_attention(Q, K, V, chunk_size=chunk_size)


@pytest.mark.parametrize("method", ["fast", "Chunked", None])
def test_unknown_method(method):
    expected = (
        "linear_attention: method must be one of "
        "'auto', 'parallel', 'recurrent', 'chunked', 'triton'; "
        f"got method={method!r}"
    )
    with pytest.raises(ValueError, match=re.escape(expected)):
        linear_attention(Q, K, V, method=method)


def test_triton_rejects_unsupported_feature_dimension():
    with pytest.raises(
        ValueError, match=r"feature dimension d = phi_q.shape\[-1\] must be one of 16, 32, 64, 128"
    ):
        linear_attention(Q, K, V, method="triton")


@pytest.mark.parametrize(
    ("eps", "error"),
    [(-1e-3, ValueError), (math.nan, ValueError), (math.inf, ValueError), ("small", TypeError),
     (True, TypeError)],
)  # fmt: skip
@pytest.mark.parametrize("attention", [kernel_attention, linear_attention])
def test_bad_eps(attention, eps, error):
    expected = f"{attention.__name__}: eps must be a non-negative finite number; got eps={eps!r}"
    with pytest.raises(error, match=re.escape(expected)):
        attention(Q, K, V, eps=eps)


@pytest.mark.parametrize(
    ("scale", "error"),
    [(0, ValueError), (-0.5, ValueError), (math.inf, ValueError), (math.nan, ValueError),
     (True, TypeError), ("1", TypeError)],
)  # fmt: skip
def test_bad_scale(scale, error):
    expected = f"softmax_attention: scale must be a positive finite number; got scale={scale!r}"
    with pytest.raises(error, match=re.escape(expected)):
        softmax_attention(Q, K, V, scale=scale)


@pytest.mark.parametrize("feature_map", [elu_plus_one, relu, identity, taylor])
def test_bad_feature_map_inputs(feature_map):
    fn = feature_map.__name__
    with pytest.raises(TypeError, match=re.escape(f"{fn}: x must be a torch.Tensor; got list")):
        feature_map([1.0])
    with pytest.raises(TypeError, match=re.escape(f"{fn}: x must be a floating-point tensor")):
        feature_map(torch.arange(3))
    with pytest.raises(
        ValueError, match=re.escape(f"{fn}: x must have at least 1 dimension; got x.shape=()")
    ):
        feature_map(torch.tensor(1.0))


@pytest.mark.parametrize(
    ("order", "error"), [(-1, ValueError), (1.5, TypeError), (True, TypeError), ("2", TypeError)]
)
def test_bad_taylor_order(order, error):
    expected = f"order must be a non-negative int; got order={order!r}"
    with pytest.raises(error, match=re.escape(f"taylor: {expected}")):
        taylor(Q, order=order)
    with pytest.raises(error, match=re.escape(f"taylor_dim: {expected}")):
        taylor_dim(3, order)


def test_bad_taylor_dim():
    with pytest.raises(ValueError, match=re.escape("taylor_dim: d must be a non-negative int")):
        taylor_dim(-1, 2)


def test_bad_testing_arguments():
    with pytest.raises(ValueError, match=re.escape("assert_close: rtol must be a positive")):
        assert_close(Q, Q, rtol=0)
    with pytest.raises(ValueError, match=re.escape("random_qkv: n must be a non-negative int")):
        random_qkv(n=-1, d=3)
    with pytest.raises(TypeError, match=re.escape("random_qkv: batch[1] must be a non-negative")):
        random_qkv(2, 1.5, n=3, d=3)


# ------------------------------------------------------------- the helpers themselves


def test_softmax_scale_defaults_to_one_over_root_d_and_checks_the_rest():
    assert softmax_scale("f", None, 16) == 0.25
    assert softmax_scale("f", 0.5, 16) == 0.5
    for bad, error in ((0.0, ValueError), (-1.0, ValueError), (math.inf, ValueError),
                       (math.nan, ValueError), (True, TypeError), ("1", TypeError)):  # fmt: skip
        with pytest.raises(error, match=r"^f: scale must be a positive finite number"):
            softmax_scale("f", bad, 16)


def test_matrix_and_square_checks():
    check_square("f", "A", torch.eye(3))
    with pytest.raises(
        ValueError, match=r"^f: A must be a matrix \(m, n\); got A.shape=\(2, 2, 2\)"
    ):
        check_matrix("f", "A", torch.ones(2, 2, 2))
    with pytest.raises(ValueError, match=r"^f: A must be a square matrix \(n, n\); got A.shape"):
        check_square("f", "A", torch.ones(2, 3))
    with pytest.raises(TypeError, match=r"^f: A must be a floating-point tensor"):
        check_matrix("f", "A", torch.ones(2, 3, dtype=torch.int64))


def test_same_dtype_and_device_names_both_tensors():
    x = torch.ones(2, dtype=torch.float64)
    check_same_dtype_and_device("f", "x", x, y=x.clone(), z=x.clone())
    with pytest.raises(TypeError, match=r"^f: y must have the same dtype as x; got x.dtype=torch"):
        check_same_dtype_and_device("f", "x", x, y=x.float())
    with pytest.raises(ValueError, match=r"^f: z must be on the same device as x; got x.device"):
        check_same_dtype_and_device("f", "x", x, z=x.to("meta"))


def test_a_wrong_type_is_a_type_error_that_value_error_also_catches():
    """The package's policy (TypeError) and its API contract (ValueError for sizes and options)
    agree on one exception."""
    with pytest.raises(TypeError):
        linear_attention(Q, K, V, chunk_size="64")
    with pytest.raises(ValueError):
        linear_attention(Q, K, V, chunk_size="64")
    with pytest.raises(ValueError) as raised:
        linear_attention(Q, K, V, chunk_size=0)
    assert not isinstance(raised.value, TypeError)
