"""Feature maps φ for kernelized attention, applied to the last (feature) axis.

`linear_attention` takes φ(q) and φ(k) already mapped, so a feature map is any function of the
features: the ones here are positive maps from the literature (`elu_plus_one`, `relu`), the
linear kernel (`identity`), and `taylor`, an exact finite map of the truncated exponential.
None of them scales its input.
"""

import functools
import itertools
import math
from collections import Counter

import torch
import torch.nn.functional as F

from linattn_core.validation import check_non_negative_int, check_tensor


def elu_plus_one(x):
    """φ(x) = elu(x) + 1, elementwise: x + 1 for x > 0, exp(x) for x ≤ 0.

    Positive, so every similarity φ(q)·φ(k) and every denominator is positive
    (Katharopoulos et al., 2020). Shape `(..., d)` -> `(..., d)`.

    >>> elu_plus_one(torch.tensor([-1.0, 0.0, 2.0])).round(decimals=4)
    tensor([0.3679, 1.0000, 3.0000])
    """
    check_tensor("elu_plus_one", "x", x, min_rank=1)
    return F.elu(x) + 1


def relu(x):
    """φ(x) = max(x, 0), elementwise. Shape `(..., d)` -> `(..., d)`.

    Non-negative, so similarities are non-negative; a query whose features are all zero has a
    zero denominator, and its output is 0 / eps = 0.

    >>> relu(torch.tensor([-1.0, 0.0, 2.0]))
    tensor([0., 0., 2.])
    """
    check_tensor("relu", "x", x, min_rank=1)
    return F.relu(x)


def identity(x):
    """φ(x) = x: the linear kernel q·k. Returns `x` itself. Shape `(..., d)` -> `(..., d)`.

    Similarities can be negative, so normalized attention can divide by a denominator near zero.

    >>> x = torch.tensor([-1.0, 2.0])
    >>> identity(x) is x
    True
    """
    check_tensor("identity", "x", x, min_rank=1)
    return x


def taylor(x, order=2):
    """Exact finite feature map of the exponential truncated after `order` terms.

    φ(q)·φ(k) = Σ_{p=0..order} (q·k)^p / p!, exactly. By the multinomial theorem
    (q·k)^p / p! = Σ_{|α|=p} q^α k^α / α!, so φ lists every monomial x^α of degree |α| ≤ order
    once (multi-indices α, not the d^p redundant products of a tensor power), weighted by 1/√α!.
    Features are ordered by degree: 1, then x_1 … x_d, then x_1²/√2, x_1 x_2, ….
    To approximate `softmax_attention`'s exp(q·k/√d), map q and k scaled by d^(-1/4).

    Even orders give positive similarities (an even Taylor polynomial of exp has no real
    root); odd orders can give negative ones, e.g. 1 + t < 0 for t = q·k < -1. The features
    themselves can be negative for any order ≥ 1.

    Args:
        x: `(..., d)`.
        order: non-negative int; 0 gives the constant feature 1.

    Returns:
        `(..., taylor_dim(d, order))`.

    >>> q, k = torch.tensor([0.5, -1.0, 2.0]), torch.tensor([1.0, 0.25, -0.5])
    >>> taylor(q).shape
    torch.Size([10])
    >>> t = q @ k
    >>> bool(torch.isclose(taylor(q, order=3) @ taylor(k, order=3), 1 + t + t**2 / 2 + t**3 / 6))
    True
    """
    check_tensor("taylor", "x", x, min_rank=1)
    check_non_negative_int("taylor", "order", order)
    indices, weights = _monomials(x.shape[-1], order)  # (D, order), (D,)
    padded = torch.cat([x, x.new_ones(*x.shape[:-1], 1)], dim=-1)  # (..., d + 1)
    # one flat gather is several times faster than advanced indexing with a (D, order) index
    factors = padded.index_select(-1, indices.flatten().to(x.device))  # (..., D * order)
    return factors.unflatten(-1, indices.shape).prod(dim=-1) * weights.to(x)  # (..., D)


def taylor_dim(d, order):
    """Number of features of `taylor` on `(..., d)` inputs: C(d + order, order).

    That is Σ_{p=0..order} C(d + p - 1, p), the count of monomials of degree ≤ order in d
    variables, i.e. of degree exactly `order` in d + 1 variables (the last one set to 1).

    >>> taylor_dim(3, 2), taylor_dim(64, 2)
    (10, 2145)
    """
    check_non_negative_int("taylor_dim", "d", d)
    check_non_negative_int("taylor_dim", "order", order)
    return math.comb(d + order, order)


@functools.lru_cache(maxsize=64)
def _monomials(d: int, order: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Index tuples into [x, 1] and weights 1/√α! of the monomials of degree ≤ order.

    A monomial of degree p < order pads its tuple with index d (the appended constant 1), so
    all degrees are gathered and multiplied in one vectorized step.
    """
    indices, weights = [], []
    for degree in range(order + 1):
        for variables in itertools.combinations_with_replacement(range(d), degree):
            indices.append(variables + (d,) * (order - degree))
            alpha_factorial = math.prod(map(math.factorial, Counter(variables).values()))
            weights.append(alpha_factorial**-0.5)
    index_tensor = torch.tensor(indices, dtype=torch.long).reshape(len(indices), order)
    return index_tensor, torch.tensor(weights, dtype=torch.float64)
