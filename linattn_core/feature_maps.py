"""Feature maps φ for kernelized attention, applied to the last (feature) axis.

`linear_attention` takes φ(q) and φ(k) already mapped, so a feature map is any function of the
features: the ones here are positive maps from the literature (`elu_plus_one`, `relu`), the
linear kernel (`identity`), and `taylor`, an exact finite map of the truncated exponential.
None of them scales its input.

With `taylor` come the pieces of its theory: the truncated exponential `truncated_exp` (its
kernel), `multi_indices` (its features), `exp_remainder_bound` (how far T_p is from exp),
`truncated_exp_roots` (where T_p changes sign), `exp_gram` (the exact kernel's Gram matrix, which
no finite map reproduces), `outer_product_features` (the redundant second-order layout of Based)
and `taylor_attention` (Taylor-p linear attention as an approximation of softmax attention).
"""

import functools
import itertools
import math
from collections import Counter

import torch
import torch.nn.functional as F

from linattn_core.attention import linear_attention
from linattn_core.validation import (
    check_attention_inputs,
    check_non_negative_int,
    check_tensor,
    softmax_scale,
)

__all__ = [
    "elu_plus_one",
    "exp_gram",
    "exp_remainder_bound",
    "identity",
    "multi_indices",
    "outer_product_features",
    "relu",
    "taylor",
    "taylor_attention",
    "taylor_dim",
    "truncated_exp",
    "truncated_exp_roots",
]


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
    indices, weights = _monomials(x.shape[-1], order)  # (m, order), (m,)
    padded = torch.cat([x, x.new_ones(*x.shape[:-1], 1)], dim=-1)  # (..., d + 1)
    # one flat gather is several times faster than advanced indexing with a (m, order) index
    factors = padded.index_select(-1, indices.flatten().to(x.device))  # (..., m * order)
    return factors.unflatten(-1, indices.shape).prod(dim=-1) * weights.to(x)  # (..., m)


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


def truncated_exp(t, order):
    """T_p(t) = Σ_{n=0..p} tⁿ / n!, the exponential series truncated after order p, elementwise.

    The kernel of the Taylor map: `taylor(q, p) @ taylor(k, p)` equals T_p(q·k).

    Args:
        t: any shape.
        order: p, a non-negative int.

    Returns:
        the shape of t.

    >>> truncated_exp(torch.tensor([-2.0, -1.0, 0.0, 1.0]), 2)
    tensor([1.0000, 0.5000, 1.0000, 2.5000])
    """
    check_tensor("truncated_exp", "t", t, min_rank=0)
    check_non_negative_int("truncated_exp", "order", order)
    # float(n!): torch cannot take n! > 2⁶³ (n ≥ 21) as an integer scalar
    return sum(t**n / float(math.factorial(n)) for n in range(order + 1))


def multi_indices(d, order):
    """Every multi-index α ∈ ℕ^d with |α| ≤ order, in the order of the features of `taylor`.

    Feature number i of `taylor(x, order)` is x^α / √α! for the i-th α of this list, where
    x^α = Π_j x_j^α_j and α! = Π_j α_j!; there are `taylor_dim(d, order)` of them.

    Returns:
        a list of d-tuples of ints.

    >>> multi_indices(2, 2)
    [(0, 0), (1, 0), (0, 1), (2, 0), (1, 1), (0, 2)]
    """
    check_non_negative_int("multi_indices", "d", d)
    check_non_negative_int("multi_indices", "order", order)
    alphas = []
    for degree in range(order + 1):
        for variables in itertools.combinations_with_replacement(range(d), degree):
            alphas.append(tuple(variables.count(i) for i in range(d)))
    return alphas


def exp_remainder_bound(t, order):
    """Lagrange bound |eᵗ − T_p(t)| ≤ |t|^(p+1) e^max(t, 0) / (p+1)!, elementwise.

    The error of `truncated_exp`: eᵗ − T_p(t) = e^ξ t^(p+1)/(p+1)! for some ξ between 0 and t.

    Args:
        t: any shape.
        order: p, a non-negative int.

    Returns:
        the shape of t.

    >>> t = torch.tensor([-3.0, -1.0, 0.5, 2.0], dtype=torch.float64)
    >>> bool(((t.exp() - truncated_exp(t, 2)).abs() <= exp_remainder_bound(t, 2)).all())
    True
    """
    check_tensor("exp_remainder_bound", "t", t, min_rank=0)
    check_non_negative_int("exp_remainder_bound", "order", order)
    return t.abs() ** (order + 1) * t.clamp(min=0).exp() / float(math.factorial(order + 1))


def truncated_exp_roots(order):
    """The real roots of T_p, in increasing order, as a float64 tensor.

    Even orders have none (T_{2ℓ} > 0); odd orders have exactly one, t*_p < 0, so odd-order
    Taylor similarities are negative for scores below t*_p. Computed as the real eigenvalues of
    the companion matrix of T_p (imaginary part below 1e-9).

    Args:
        order: p, a non-negative int.

    Returns:
        `(number of real roots,)`.

    >>> truncated_exp_roots(1), truncated_exp_roots(2)
    (tensor([-1.], dtype=torch.float64), tensor([], dtype=torch.float64))
    >>> round(float(truncated_exp_roots(3)[0]), 4)
    -1.5961
    """
    check_non_negative_int("truncated_exp_roots", "order", order)
    if order == 0:
        return torch.empty(0, dtype=torch.float64)
    coefficients = torch.tensor(
        [1 / math.factorial(n) for n in range(order + 1)], dtype=torch.float64
    )
    companion = torch.diag(torch.ones(order - 1, dtype=torch.float64), -1)  # (p, p)
    companion[:, -1] = -coefficients[:-1] / coefficients[-1]  # of the monic T_p · p!
    roots = torch.linalg.eigvals(companion)  # (p,) complex
    return roots.real[roots.imag.abs() < 1e-9].sort().values


def exp_gram(x):
    """Gram matrix of the exponential kernel, G_ij = exp(x_i·x_j).

    Positive definite for distinct points, so its rank is the number of points and no finite
    feature map reproduces it (Micchelli, 1986).

    Args:
        x: points `(..., n, d)`.

    Returns:
        `(..., n, n)`.

    >>> exp_gram(torch.tensor([[1.0, 0.0], [0.0, 2.0]]))
    tensor([[ 2.7183,  1.0000],
            [ 1.0000, 54.5981]])
    """
    check_tensor("exp_gram", "x", x, min_rank=2)
    return torch.exp(x @ x.mT)  # (..., n, n)


def outer_product_features(x):
    """φ(x) = (1, x, vec(x xᵀ)/√2): the second-order map in the redundant layout of Based.

    Based (Arora et al., 2024) keeps both x_i x_j and x_j x_i; the kernel is the same as that of
    `taylor(x, order=2)`, φ(q)·φ(k) = T_2(q·k), with 1 + d + d² features instead of
    taylor_dim(d, 2) = 1 + d + d(d+1)/2. Shape `(..., d)` -> `(..., 1 + d + d²)`.

    >>> q, k = torch.tensor([0.5, -1.0]), torch.tensor([2.0, 0.25])
    >>> outer_product_features(q).shape
    torch.Size([7])
    >>> outer = outer_product_features(q) @ outer_product_features(k)
    >>> bool(torch.isclose(outer, taylor(q) @ taylor(k)))
    True
    """
    check_tensor("outer_product_features", "x", x, min_rank=1)
    quadratic = (x[..., :, None] * x[..., None, :]).flatten(-2) / math.sqrt(2)  # (..., d²)
    return torch.cat([torch.ones_like(x[..., :1]), x, quadratic], dim=-1)


def taylor_attention(q, k, v, order=2, *, causal=False, scale=None):
    """Taylor-p linear attention: the approximation of `softmax_attention` by the `taylor` map.

    exp(scale q_i·k_j) is replaced by T_p(scale q_i·k_j) = taylor(q_i', p)·taylor(k_j', p) with
    q' = √scale q, k' = √scale k (`scale=None` means 1/√d: q and k are multiplied by d^(-1/4)),
    and the output o_i = Σ_j s_ij v_j / Σ_j s_ij (over j ≤ i when causal) is computed by
    `linear_attention` with eps = 0, so the normalization is exact. Odd orders can give zero or
    negative denominators (see `truncated_exp_roots`); even orders cannot.

    Args:
        q, k: queries and keys `(..., N, d)`.
        v: values `(..., N, d_v)`.
        order: p, a non-negative int.
        causal: let position i attend to positions j ≤ i only.
        scale: positive multiplier of q·k, or None for 1/√d.

    Returns:
        `(..., N, d_v)`.

    >>> from linattn_core import softmax_attention
    >>> from linattn_core.testing import random_qkv, relative_error
    >>> q, k, v = random_qkv(n=32, d=8)
    >>> q, k = q / 2, k / 2  # scores q·k/√d of standard deviation 1/4
    >>> relative_error(taylor_attention(q, k, v, 2), softmax_attention(q, k, v)) < 0.01
    True
    """
    fn = "taylor_attention"
    check_attention_inputs(fn, ("q", "k", "v"), q, k, v)
    check_non_negative_int(fn, "order", order)
    scale = softmax_scale(fn, scale, q.shape[-1])
    root = math.sqrt(scale)  # q'·k' = scale q·k
    phi_q, phi_k = taylor(root * q, order=order), taylor(root * k, order=order)  # (..., N, m)
    return linear_attention(phi_q, phi_k, v, causal=causal, eps=0.0)


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
