"""FAVOR+: random features whose dot products estimate the softmax kernel exp(q·k).

The Performer (Choromanski et al., 2021) replaces exp(q·k) by φ(q)·φ(k) with a random feature
map φ built from a matrix w `(m, d)` of random frequencies. For ω ~ N(0, I_d),

    E[exp(ω·q − |q|²/2) exp(ω·k − |k|²/2)] = exp(q·k)         (positive features)
    E[exp(|q|²/2 + |k|²/2) cos(ω·(q − k))]   = exp(q·k)         (trigonometric features)

so averaging over the m rows of w gives unbiased estimates, and attention with these features
runs through `linear_attention` in O(N m d) time. This module holds

- the frequency matrices: `iid_gaussian` (independent rows) and `orthogonal_gaussian` (rows
  orthogonal within blocks of d, each marginally N(0, I_d), which lowers the variance);
- the feature maps `positive_features` and `trig_features`, computed as the formulas read, and
  `fourier_features`, the random Fourier features of the Gaussian kernel that `trig_features`
  rescales;
- `favor_attention`, the Performer approximation of `softmax_attention`, numerically stabilized;
  `unstabilized_favor_attention`, the same function computed as the formulas read, which
  overflows and underflows where `favor_attention` does not.

Redrawing the features is the caller's choice: `w` is an argument, so a new draw is a new `w`.
"""

import math

import torch

from linattn_core.attention import linear_attention
from linattn_core.validation import (
    check_attention_inputs,
    check_choice,
    check_matrix,
    check_positive_int,
    check_same_dtype_and_device,
    check_tensor,
    softmax_scale,
)

__all__ = [
    "favor_attention",
    "fourier_features",
    "iid_gaussian",
    "orthogonal_gaussian",
    "positive_features",
    "trig_features",
    "unstabilized_favor_attention",
]

FEATURE_KINDS = ("positive", "trigonometric")
ROW_SCALINGS = ("chi", "sqrt_d")
HALF_PRECISION = (torch.float16, torch.bfloat16)


def iid_gaussian(m, d, *, generator=None, dtype=torch.float64, device=None):
    """An `(m, d)` matrix with independent N(0, 1) entries: m independent rows ω ~ N(0, I_d).

    Entries are drawn in float64 on the generator's device (the CPU for `generator=None`, from
    the global RNG) and then cast, so one seed gives the same matrix in every dtype and device.

    Args:
        m: number of random features (rows), positive int.
        d: dimension of queries and keys (columns), positive int.
        generator: a `torch.Generator`, or None for the global RNG.
        dtype: floating-point dtype of the result.
        device: device of the result (None: the CPU).

    Returns:
        `(m, d)`.

    >>> w = iid_gaussian(3, 5, generator=torch.Generator().manual_seed(0))
    >>> w.shape, w.dtype
    (torch.Size([3, 5]), torch.float64)
    """
    _check_draw("iid_gaussian", m, d, generator, dtype)
    w = torch.randn(m, d, generator=generator, dtype=torch.float64, device=_draw_device(generator))
    return w.to(device=device, dtype=dtype)  # (m, d)


def orthogonal_gaussian(m, d, *, scaling="chi", generator=None, dtype=torch.float64, device=None):
    """An `(m, d)` matrix whose rows are orthogonal within each block of d consecutive rows.

    Each block is Qᵀ for the Q of a QR decomposition of a d×d Gaussian matrix, with the signs of
    Q's columns fixed so that R has a positive diagonal (the Gram–Schmidt convention
    r_ii = ‖y_i‖); only then is Q uniformly (Haar) distributed, and each row a uniform direction.
    Blocks are independent; when d does not divide m, the last block is the first m mod d rows of
    one more full block. Row norms:

    - `scaling="chi"`: the norm of an independent N(0, I_d) draw (chi-distributed with d degrees
      of freedom), so every row is marginally N(0, I_d) and the feature estimates stay unbiased;
    - `scaling="sqrt_d"`: exactly √d, the mean squared norm of an N(0, I_d) vector.

    Draws are made in float64 on the generator's device, then cast (as in `iid_gaussian`).

    Args:
        m: number of random features (rows), positive int.
        d: dimension of queries and keys (columns), positive int.
        scaling: "chi" or "sqrt_d".
        generator: a `torch.Generator`, or None for the global RNG.
        dtype: floating-point dtype of the result.
        device: device of the result (None: the CPU).

    Returns:
        `(m, d)`.

    >>> w = orthogonal_gaussian(6, 4, scaling="sqrt_d", generator=torch.Generator().manual_seed(0))
    >>> w.shape
    torch.Size([6, 4])
    >>> bool(torch.allclose(w[:4] @ w[:4].T, 4 * torch.eye(4, dtype=torch.float64)))
    True
    >>> bool(torch.allclose(w[4:] @ w[4:].T, 4 * torch.eye(2, dtype=torch.float64)))
    True
    """
    fn = "orthogonal_gaussian"
    _check_draw(fn, m, d, generator, dtype)
    check_choice(fn, "scaling", scaling, ROW_SCALINGS)
    draw_device = _draw_device(generator)
    n_blocks = -(-m // d)
    gaussian = torch.randn(
        n_blocks, d, d, generator=generator, dtype=torch.float64, device=draw_device
    )  # (n_blocks, d, d)
    q, r = torch.linalg.qr(gaussian)  # (n_blocks, d, d) each
    q = q * torch.sign(r.diagonal(dim1=-2, dim2=-1)).unsqueeze(-2)  # r_ii > 0: Haar-distributed Q
    directions = q.mT.reshape(n_blocks * d, d)[:m]  # (m, d) unit rows
    if scaling == "chi":
        norms = torch.linalg.vector_norm(
            torch.randn(m, d, generator=generator, dtype=torch.float64, device=draw_device), dim=-1
        )  # (m,)
    else:
        norms = torch.full((m,), math.sqrt(d), dtype=torch.float64, device=draw_device)
    return (directions * norms[:, None]).to(device=device, dtype=dtype)  # (m, d)


def positive_features(x, w):
    """Positive random features φ(x) = exp(w x − |x|²/2) / √m, so E_w[φ(q)·φ(k)] = exp(q·k).

    Computed as the formula reads, in the dtype of x: no scaling of x and no stabilization
    (`favor_attention` stabilizes). The projection w x is `torch.einsum("...d,md->...m", x, w)`.

    Args:
        x: queries or keys `(..., d)`.
        w: random frequencies `(m, d)`, rows ~ N(0, I_d); same dtype and device as x.

    Returns:
        `(..., m)`, every entry positive.

    >>> w = iid_gaussian(100_000, 2, generator=torch.Generator().manual_seed(0))
    >>> q, k = torch.tensor([[0.3, -0.2], [0.5, 0.4]], dtype=torch.float64)
    >>> estimate = positive_features(q, w) @ positive_features(k, w)
    >>> round(float(estimate), 2), round(float(torch.exp(q @ k)), 2)
    (1.07, 1.07)
    """
    _check_features("positive_features", x, w)
    projections = torch.einsum("...d,md->...m", x, w)  # (..., m)
    half_squared_norm = x.square().sum(dim=-1, keepdim=True) / 2  # (..., 1)
    return torch.exp(projections - half_squared_norm) / math.sqrt(w.shape[0])


def trig_features(x, w):
    """Trigonometric random features φ(x) = exp(|x|²/2) / √m · [sin(w x), cos(w x)].

    φ(q)·φ(k) = exp(|q|²/2 + |k|²/2) · mean_l cos(ω_l·(q − k)), whose expectation over
    ω_l ~ N(0, I_d) is exp(|q|²/2 + |k|²/2 − |q − k|²/2) = exp(q·k). Computed as the formula
    reads, in the dtype of x; the m sines come first, then the m cosines.

    Args:
        x: queries or keys `(..., d)`.
        w: random frequencies `(m, d)`, rows ~ N(0, I_d); same dtype and device as x.

    Returns:
        `(..., 2m)`.

    >>> w = iid_gaussian(100_000, 2, generator=torch.Generator().manual_seed(0))
    >>> q, k = torch.tensor([[0.3, -0.2], [0.5, 0.4]], dtype=torch.float64)
    >>> trig_features(q, w).shape
    torch.Size([200000])
    >>> estimate = trig_features(q, w) @ trig_features(k, w)
    >>> round(float(estimate), 2), round(float(torch.exp(q @ k)), 2)
    (1.07, 1.07)
    """
    _check_features("trig_features", x, w)
    projections = torch.einsum("...d,md->...m", x, w)  # (..., m)
    h = torch.exp(x.square().sum(dim=-1, keepdim=True) / 2) / math.sqrt(w.shape[0])  # (..., 1)
    return h * torch.cat([torch.sin(projections), torch.cos(projections)], dim=-1)  # (..., 2m)


def fourier_features(x, w):
    """Random Fourier features φ(x) = [sin(w x), cos(w x)] / √m of the Gaussian kernel.

    φ(x)·φ(y) = mean_l cos(ω_l·(x − y)), whose expectation over ω_l ~ N(0, I_d) is the Gaussian
    kernel κ(x, y) = exp(−|x − y|²/2) (Bochner's theorem: N(0, I_d) is the kernel's spectral
    measure). One sample cos(ω·(x − y)) has variance (1 − exp(−|x − y|²))²/2, so the error of
    the m-feature estimate is at most 1/√(2m) in standard deviation, whatever x and y.
    `trig_features(x, w)` is exp(|x|²/2) times this map. Computed in the dtype of x; the m
    sines come first, then the m cosines.

    Args:
        x: points `(..., d)`.
        w: random frequencies `(m, d)`, rows ~ N(0, I_d); same dtype and device as x.

    Returns:
        `(..., 2m)`, every entry in [−1/√m, 1/√m].

    >>> w = iid_gaussian(100_000, 2, generator=torch.Generator().manual_seed(0))
    >>> x, y = torch.tensor([[0.3, -0.2], [0.5, 0.4]], dtype=torch.float64)
    >>> estimate = fourier_features(x, w) @ fourier_features(y, w)
    >>> round(float(estimate), 2), round(float(torch.exp(-(x - y).square().sum() / 2)), 2)
    (0.82, 0.82)
    """
    _check_features("fourier_features", x, w)
    projections = torch.einsum("...d,md->...m", x, w)  # (..., m)
    phases = torch.cat([torch.sin(projections), torch.cos(projections)], dim=-1)  # (..., 2m)
    return phases / math.sqrt(w.shape[0])


def favor_attention(q, k, v, w, *, kind="positive", causal=False, scale=None):
    """The Performer's approximation of `softmax_attention(q, k, v, causal=causal, scale=scale)`.

    exp(scale q_i·k_j) is replaced by φ(q_i')·φ(k_j') with q' = √scale q, k' = √scale k (so
    q'·k' = scale q·k; `scale=None` means 1/√d, i.e. q and k are multiplied by d^(-1/4)) and φ
    the features of `kind` built from w:

    - `kind="positive"`: `positive_features`, FAVOR+;
    - `kind="trigonometric"`: `trig_features`, the classical random Fourier features.

    The normalized attention o_i = Σ_j s_ij v_j / Σ_j s_ij, s_ij = φ(q_i')·φ(k_j'), over j ≤ i
    when causal, is computed by `linear_attention` in O(N m (d + d_v)) time, never forming N×N.

    Numerical stabilization (the result is the same function; only overflow is avoided):

    - A factor shared by all terms of one query's sums cancels between the numerator and the
      denominator, and a factor of feature l may move from the keys to the queries
      (φ(q)_l c_l · φ(k)_l / c_l), so the exponents are shifted without changing the function.
      Positive features: with a_il = ω_l·q_i' and b_jl = ω_l·k_j' − |k_j'|²/2, the key
      features are exp(b_jl − B_l)/√m with B_l = max_j b_jl (per feature, over all keys), the
      query features exp(a_il + B_l − c_i)/√m with c_i = max_l (a_il + B_l) (per query; the
      factor exp(−|q_i'|²/2) cancels and is dropped). Every feature is then at most 1/√m, and
      for non-causal attention the best key of every query has similarity at least 1/m, so
      neither the exponentials nor the denominators overflow or underflow, whatever the size
      of the inputs. Trigonometric features: h(q_i') cancels and is dropped; the keys are
      weighted by exp(|k_j'|²/2 − max_j |k_j'|²/2) ≤ 1. The maxima are detached from autograd:
      the function does not depend on them.
    - float16 and bfloat16 inputs are computed in float32 (projections, exponentials and
      `linear_attention`) and the output is cast back to the input dtype; float32 and float64
      are computed in their own dtype.
    - The denominator gets eps = the smallest normal number of that compute dtype instead of
      `linear_attention`'s 1e-6, which would not be negligible after the rescaling. It matters
      only when every similarity of a query underflows, which the shifts above rule out except
      in causal attention with extreme inputs (a query whose best key lies in its future); the
      output is then 0, not NaN.

    Trigonometric similarities can be negative, so their denominators can come close to zero
    and the output blow up; that is the estimator's variance, not an overflow.

    Args:
        q, k: queries and keys `(..., N, d)`.
        v: values `(..., N, d_v)`.
        w: random frequencies `(m, d)` (`iid_gaussian` or `orthogonal_gaussian`); same dtype and
            device as q. Draw a new w to redraw the features.
        kind: "positive" or "trigonometric".
        causal: let position i attend to positions j ≤ i only.
        scale: positive multiplier of q·k, or None for 1/√d.

    Returns:
        `(..., N, d_v)` in the dtype of q.

    >>> from linattn_core import softmax_attention
    >>> from linattn_core.testing import random_qkv, relative_error
    >>> q, k, v = random_qkv(2, n=64, d=16)
    >>> q, k = q / 2, k / 2  # logits q·k/√d of standard deviation 1/4
    >>> w = orthogonal_gaussian(4096, 16, generator=torch.Generator().manual_seed(0))
    >>> out = favor_attention(q, k, v, w, causal=True)
    >>> out.shape
    torch.Size([2, 64, 16])
    >>> relative_error(out, softmax_attention(q, k, v, causal=True)) < 0.05
    True
    """
    scale = _check_attention("favor_attention", q, k, v, w, kind, scale)
    if q.shape[-2] == 0:
        return v.new_empty(v.shape)  # (..., 0, d_v)

    dtype = q.dtype
    compute_dtype = torch.float32 if dtype in HALF_PRECISION else dtype
    q, k, v, w = (x.to(compute_dtype) for x in (q, k, v, w))
    q, k = q * math.sqrt(scale), k * math.sqrt(scale)  # q'·k' = scale q·k
    q_projections = torch.einsum("...d,md->...m", q, w)  # (..., N, m)
    k_projections = torch.einsum("...d,md->...m", k, w)  # (..., N, m)
    rsqrt_m = w.shape[0] ** -0.5
    if kind == "positive":
        k_exponents = k_projections - k.square().sum(dim=-1, keepdim=True) / 2  # (..., N, m)
        k_largest = k_exponents.amax(dim=-2, keepdim=True).detach()  # (..., 1, m): per feature
        q_exponents = q_projections + k_largest  # (..., N, m)
        q_exponents = q_exponents - q_exponents.amax(dim=-1, keepdim=True).detach()
        phi_q = torch.exp(q_exponents) * rsqrt_m  # (..., N, m), in (0, 1/√m]
        phi_k = torch.exp(k_exponents - k_largest) * rsqrt_m  # (..., N, m), in (0, 1/√m]
    else:
        half_squared_norms = k.square().sum(dim=-1, keepdim=True) / 2  # (..., N, 1)
        largest = half_squared_norms.amax(dim=-2, keepdim=True).detach()  # (..., 1, 1)
        key_weights = torch.exp(half_squared_norms - largest) * rsqrt_m  # (..., N, 1)
        phi_q = torch.cat([torch.sin(q_projections), torch.cos(q_projections)], dim=-1)
        phi_k = key_weights * torch.cat([torch.sin(k_projections), torch.cos(k_projections)], -1)
    eps = torch.finfo(compute_dtype).tiny
    out = linear_attention(phi_q, phi_k, v, causal=causal, eps=eps)  # (..., N, d_v)
    return out.to(dtype)


def unstabilized_favor_attention(q, k, v, w, *, kind="positive", causal=False, scale=None):
    """`favor_attention` computed as the formulas read: no shifts, in the dtype of the inputs.

    The features `positive_features` or `trig_features` of q' = √scale q and k' = √scale k
    (`scale=None`: 1/√d) go to `linear_attention` with its default eps = 1e-6. In exact
    arithmetic this is `favor_attention` (up to that eps); in floating point the exponentials
    overflow to inf or underflow to 0 for large inputs, above all in float16 and bfloat16. It
    exists to show what the stabilization of `favor_attention` prevents.

    Args:
        q, k: queries and keys `(..., N, d)`.
        v: values `(..., N, d_v)`.
        w: random frequencies `(m, d)`; same dtype and device as q.
        kind: "positive" or "trigonometric".
        causal: let position i attend to positions j ≤ i only.
        scale: positive multiplier of q·k, or None for 1/√d.

    Returns:
        `(..., N, d_v)` in the dtype of q.

    >>> from linattn_core.testing import random_qkv
    >>> q, k, v = random_qkv(n=8, d=16, dtype=torch.float16)
    >>> w = iid_gaussian(32, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float16)
    >>> q, k = 4 * q, 4 * k  # scores q·k/√d of standard deviation 4
    >>> bool(unstabilized_favor_attention(q, k, v, w, kind="trigonometric").isfinite().all())
    False
    >>> bool(favor_attention(q, k, v, w, kind="trigonometric").isfinite().all())
    True
    """
    scale = _check_attention("unstabilized_favor_attention", q, k, v, w, kind, scale)
    root = math.sqrt(scale)  # q'·k' = scale q·k
    features = positive_features if kind == "positive" else trig_features
    return linear_attention(features(root * q, w), features(root * k, w), v, causal=causal)


def _check_draw(fn, m, d, generator, dtype) -> None:
    check_positive_int(fn, "m", m)
    check_positive_int(fn, "d", d)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"{fn}: generator must be a torch.Generator or None; got {type(generator).__name__}"
        )
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"{fn}: dtype must be a floating-point torch.dtype; got dtype={dtype!r}")


def _draw_device(generator) -> torch.device:
    # torch.randn needs the generator's own device; the global RNG draws on the CPU
    return torch.device("cpu") if generator is None else generator.device


def _check_attention(fn, q, k, v, w, kind, scale) -> float:
    """The checks of the attention functions; returns the scale, 1/√d for None."""
    check_attention_inputs(fn, ("q", "k", "v"), q, k, v)
    _check_frequencies(fn, w, "q", q)
    check_choice(fn, "kind", kind, FEATURE_KINDS)
    return softmax_scale(fn, scale, q.shape[-1])


def _check_features(fn, x, w) -> None:
    check_tensor(fn, "x", x, min_rank=1)
    _check_frequencies(fn, w, "x", x)


def _check_frequencies(fn, w, x_name, x) -> None:
    """w `(m, d)` with m ≥ 1, d matching x's last axis, and x's dtype and device."""
    check_matrix(fn, "w", w)
    if w.shape[0] == 0:
        raise ValueError(
            f"{fn}: w must have at least one row (m ≥ 1); got w.shape={tuple(w.shape)}"
        )
    if w.shape[1] != x.shape[-1]:
        raise ValueError(
            f"{fn}: w must have as many columns as {x_name} has features; "
            f"got w.shape={tuple(w.shape)}, {x_name}.shape={tuple(x.shape)}"
        )
    check_same_dtype_and_device(fn, x_name, x, w=w)
