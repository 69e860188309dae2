"""FAVOR+: the random matrices' structure and distribution, the feature maps' identities and
unbiasedness, the variance reduction of orthogonal rows, favor_attention against its definition
and against softmax attention, low precision, gradients and input validation.

Monte Carlo checks are seeded (deterministic) and compare a mean with its own standard error:
a correct estimator lands within a few standard errors, a biased one many standard errors away.
"""

import itertools
import math

import pytest
import torch

from linattn_core import kernel_attention, softmax_attention
from linattn_core.favor import (
    favor_attention,
    fourier_features,
    iid_gaussian,
    orthogonal_gaussian,
    positive_features,
    trig_features,
    unstabilized_favor_attention,
)
from linattn_core.testing import assert_close, random_qkv, relative_error

F64 = torch.float64
DRAWS = {"iid": iid_gaussian, "orthogonal": orthogonal_gaussian}
FEATURES = {"positive": positive_features, "trigonometric": trig_features}
HALF = [(torch.float16, 2e-3), (torch.bfloat16, 1e-2)]  # with the rtol of their outputs


def generator(seed):
    return torch.Generator().manual_seed(seed)


def pair(d, norm, seed):
    """A fixed query and key of the given norm, in random directions."""
    q, k = torch.randn(2, d, dtype=F64, generator=generator(seed))
    return norm * q / q.norm(), norm * k / k.norm()


def estimates(features, q, k, w):
    """One estimate of exp(q·k) per draw: w `(R, m, d)` → `(R,)`.

    The R draws are flattened into one (R·m, d) matrix so the features are computed in one
    call; they then carry 1/√(R·m) instead of 1/√m, which the factor R undoes exactly.
    """
    n_draws, m, d = w.shape
    flat = w.reshape(n_draws * m, d)
    phi_q, phi_k = features(q, flat), features(k, flat)  # (R·m,) or (2·R·m,)
    products = (phi_q * phi_k).reshape(-1, n_draws, m)  # (1 or 2, R, m): [sin; cos] parts
    return n_draws * products.sum(dim=(0, 2))


def draws(kind, n_draws, m, d, seed):
    """R independent draws `(R, m, d)` of `kind`. When d divides m, consecutive blocks of one
    long orthogonal matrix are independent, so one call gives all draws at once."""
    if kind == "iid" or m % d == 0:
        return DRAWS[kind](n_draws * m, d, generator=generator(seed)).reshape(n_draws, m, d)
    g = generator(seed)
    return torch.stack([orthogonal_gaussian(m, d, generator=g) for _ in range(n_draws)])


def standard_errors_from(samples, target):
    return ((samples.mean() - target) / (samples.std() / math.sqrt(len(samples)))).item()


# --- the random matrices --------------------------------------------------------------------


@pytest.mark.parametrize(("m", "d"), [(1, 1), (5, 3), (8, 8), (13, 4), (2, 7)])
@pytest.mark.parametrize("kind", ["iid", "orthogonal"])
def test_shape_dtype_and_seeding(kind, m, d):
    w = DRAWS[kind](m, d, generator=generator(3))
    assert w.shape == (m, d) and w.dtype == F64
    assert torch.equal(w, DRAWS[kind](m, d, generator=generator(3)))
    assert not torch.equal(w, DRAWS[kind](m, d, generator=generator(4)))
    w32 = DRAWS[kind](m, d, generator=generator(3), dtype=torch.float32)
    assert w32.dtype == torch.float32 and torch.equal(w32, w.float())


@pytest.mark.parametrize("scaling", ["chi", "sqrt_d"])
@pytest.mark.parametrize(("m", "d"), [(7, 7), (24, 8), (29, 8), (5, 8), (3, 1)])
def test_rows_are_orthogonal_within_blocks(m, d, scaling):
    w = orthogonal_gaussian(m, d, scaling=scaling, generator=generator(m))
    for start in range(0, m, d):  # the full blocks and the remainder block
        block = w[start : start + d]  # (≤ d, d)
        gram = block @ block.T
        assert_close(gram, torch.diag(gram.diagonal()), rtol=1e-12, name=f"block at row {start}")
    if m > d > 1:  # different blocks are independent draws, not orthogonal to each other
        assert (w[:d] @ w[d:].T).abs().max() > 0.1


def test_sqrt_d_rows_have_norm_sqrt_d():
    w = orthogonal_gaussian(50, 6, scaling="sqrt_d", generator=generator(0))
    assert_close(w.norm(dim=1), torch.full((50,), math.sqrt(6), dtype=F64), rtol=1e-13)


def chi_squared_cdf(x, d):
    return torch.special.gammainc(torch.tensor(d / 2, dtype=F64), x / 2)


def ks_statistic(samples, cdf):
    """max |empirical CDF − cdf| (Kolmogorov–Smirnov)."""
    x = samples.sort().values
    n = len(x)
    fitted = cdf(x)
    above = torch.arange(1, n + 1, dtype=F64) / n - fitted
    below = fitted - torch.arange(n, dtype=F64) / n
    return max(above.max().item(), below.max().item())


KS_CRITICAL = 1.95  # / √n: the 0.1% level of the Kolmogorov distribution


@pytest.mark.parametrize("kind", ["iid", "orthogonal"])
@pytest.mark.parametrize("d", [3, 16])
def test_rows_are_marginally_standard_gaussian(kind, d):
    n = 20_000 // d * d
    w = DRAWS[kind](n, d, generator=generator(d))
    squared_norms = w.square().sum(dim=1)  # chi² with d degrees of freedom
    assert abs(standard_errors_from(squared_norms, d)) < 4
    assert abs(squared_norms.var().item() / (2 * d) - 1) < 0.1  # Var chi²_d = 2d
    assert ks_statistic(squared_norms, lambda x: chi_squared_cdf(x, d)) < KS_CRITICAL / math.sqrt(n)
    for column in (0, d - 1):  # each coordinate N(0, 1)
        assert ks_statistic(w[:, column], torch.special.ndtr) < KS_CRITICAL / math.sqrt(n)


def test_first_row_of_each_block_has_no_sign_bias():
    # Householder QR returns Q[0, 0] < 0 always; without the sign fix of the R diagonal the
    # first row of every block would point into the half-space x_0 < 0.
    d = 4
    w = orthogonal_gaussian(4000 * d, d, scaling="sqrt_d", generator=generator(1))
    first_rows = w[::d] / math.sqrt(d)  # (4000, d) unit vectors, uniform on the sphere
    assert abs(standard_errors_from(first_rows[:, 0], 0.0)) < 4
    unfixed = torch.linalg.qr(torch.randn(4000, d, d, dtype=F64, generator=generator(1)))[0]
    assert bool((unfixed[:, 0, 0] < 0).all())  # what the fix removes


# --- the feature maps -----------------------------------------------------------------------


def test_feature_identities_hold_exactly_for_any_w():
    q, k, _ = random_qkv(2, 3, n=5, d=4)
    w = iid_gaussian(11, 4, generator=generator(0))
    positive = positive_features(q, w) @ positive_features(k, w).mT  # (2, 3, 5, 5)
    half_norms = q.square().sum(-1)[..., :, None] / 2 + k.square().sum(-1)[..., None, :] / 2
    sums = q[..., :, None, :] + k[..., None, :, :]  # (2, 3, 5, 5, d)
    mean_exp = torch.exp(sums @ w.T).mean(dim=-1)
    assert_close(positive, torch.exp(-half_norms) * mean_exp, rtol=1e-12)
    trig = trig_features(q, w) @ trig_features(k, w).mT
    differences = q[..., :, None, :] - k[..., None, :, :]
    assert_close(trig, torch.exp(half_norms) * torch.cos(differences @ w.T).mean(-1), rtol=1e-12)
    antithetic = torch.cat([w, -w])  # averaging ω and −ω gives the cosh form
    cosh_form = torch.exp(-half_norms) * torch.cosh(sums @ w.T).mean(dim=-1)
    both = positive_features(q, antithetic) @ positive_features(k, antithetic).mT
    assert_close(both, cosh_form, rtol=1e-12)


def test_feature_shapes_and_signs():
    x, _, _ = random_qkv(2, 3, n=4, d=5)
    w = iid_gaussian(7, 5, generator=generator(0))
    assert positive_features(x, w).shape == (2, 3, 4, 7)
    assert bool((positive_features(x, w) > 0).all())
    assert trig_features(x, w).shape == (2, 3, 4, 14)
    assert positive_features(x[0, 0, 0], w).shape == (7,)
    assert positive_features(x.float(), w.float()).dtype == torch.float32


def test_fourier_features_are_trig_features_without_the_norm_factor():
    x, y, _ = random_qkv(2, n=5, d=4)
    w = iid_gaussian(9, 4, generator=generator(1))
    phi_x, phi_y = fourier_features(x, w), fourier_features(y, w)  # (2, 5, 18)
    assert phi_x.shape == (2, 5, 18) and bool((phi_x.abs() <= 9**-0.5 + 1e-15).all())
    h = torch.exp(x.square().sum(-1, keepdim=True) / 2)  # (2, 5, 1)
    assert_close(trig_features(x, w), h * phi_x, rtol=1e-13)
    differences = x[..., :, None, :] - y[..., None, :, :]  # (2, 5, 5, d)
    mean_cos = torch.cos(differences @ w.T).mean(-1)
    assert_close(phi_x @ phi_y.mT, mean_cos, rtol=1e-12)


@pytest.mark.parametrize("m", [4, 64])
def test_fourier_features_estimate_the_gaussian_kernel_with_the_predicted_variance(m):
    d, n_draws = 5, 4000
    x, y = pair(d, 0.6, seed=2)
    gaussian = torch.exp(-(x - y).square().sum() / 2).item()
    samples = estimates(fourier_features, x, y, draws("iid", n_draws, m, d, seed=11))
    assert abs(standard_errors_from(samples, gaussian)) < 4
    predicted_std = (1 - gaussian**2) / math.sqrt(2 * m)  # (1 − e^{−|x−y|²})/√(2m)
    assert abs(samples.std().item() / predicted_std - 1) < 0.1


@pytest.mark.parametrize(
    ("kind", "m"),
    [("iid", 8), ("orthogonal", 16), pytest.param("orthogonal", 11, marks=pytest.mark.slow)],
)
def test_estimators_are_unbiased(kind, m):
    d, n_draws = 8, (5000 if m % 8 == 0 else 1000)
    w = draws(kind, n_draws, m, d, seed=10)  # m = 11: a full block and a remainder block of 3
    for norm, angle_seed in [(0.5, 0), (0.8, 1)]:
        q, k = pair(d, norm, seed=angle_seed)
        for name, features in FEATURES.items():
            samples = estimates(features, q, k, w)
            z = standard_errors_from(samples, torch.exp(q @ k).item())
            assert abs(z) < 4, (name, norm, z)


def orthonormal_rows(n_draws, d, g):
    """R draws `(R, d, d)` of d orthonormal rows: directions without the chi-distributed norms."""
    return torch.linalg.qr(torch.randn(n_draws, d, d, dtype=F64, generator=g))[0].mT


def test_the_tests_detect_rows_of_the_wrong_norm():
    # unit rows instead of rows of norm ~ √d: the estimates shrink towards exp(−(|q|²+|k|²)/2)
    d, n_draws = 16, 2000
    q, k = pair(d, 0.8, seed=0)
    samples = estimates(positive_features, q, k, orthonormal_rows(n_draws, d, generator(5)))
    assert standard_errors_from(samples, torch.exp(q @ k).item()) < -50  # far too small


@pytest.mark.slow
@pytest.mark.parametrize("features", ["positive", "trigonometric"])
@pytest.mark.parametrize("m", [16, 32])
def test_orthogonal_rows_lower_the_mean_squared_error(features, m):
    d, n_draws = 16, 20_000
    q, k = pair(d, 0.7, seed=2)
    exact = torch.exp(q @ k)
    mse = {
        kind: (estimates(FEATURES[features], q, k, draws(kind, n_draws, m, d, seed=7)) - exact)
        .square()
        .mean()
        .item()
        for kind in DRAWS
    }
    assert mse["orthogonal"] < 0.9 * mse["iid"], mse


def test_iid_variance_matches_the_formulas():
    # Var of one feature: positive exp(2q·k)(exp|q+k|² − 1), trig exp(2q·k)(cosh|q−k|² − 1)
    d, m, n_draws = 6, 6, 20_000
    q, k = pair(d, 0.6, seed=3)
    w = draws("iid", n_draws, m, d, seed=4)
    kernel_squared = torch.exp(2 * q @ k)
    expected = {
        "positive": kernel_squared * torch.expm1((q + k).square().sum()) / m,
        "trigonometric": kernel_squared * (torch.cosh((q - k).square().sum()) - 1) / m,
    }
    for name, features in FEATURES.items():
        measured = estimates(features, q, k, w).var()
        assert abs(measured / expected[name] - 1) < 0.1, (name, measured, expected[name])


# --- favor_attention ------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kind", ["positive", "trigonometric"])
@pytest.mark.parametrize(
    ("batch", "n", "d", "d_v", "m"), [((), 9, 4, 3, 5), ((2, 3), 70, 5, 2, 12)]
)
def test_favor_attention_is_kernel_attention_with_the_features(batch, n, d, d_v, m, kind, causal):
    q, k, v = random_qkv(*batch, n=n, d=d, d_v=d_v, seed=m)
    w = orthogonal_gaussian(m, d, generator=generator(0))
    root = d**-0.25  # scale=None: q·k/√d
    features = FEATURES[kind]
    expected = kernel_attention(
        features(root * q, w), features(root * k, w), v, causal=causal, eps=0
    )
    assert_close(favor_attention(q, k, v, w, kind=kind, causal=causal), expected, rtol=1e-10)
    root = 0.3**0.5
    expected = kernel_attention(
        features(root * q, w), features(root * k, w), v, causal=causal, eps=0
    )
    out = favor_attention(q, k, v, w, kind=kind, causal=causal, scale=0.3)
    assert_close(out, expected, rtol=1e-10)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_error_decreases_with_m(causal):
    q, k, v = random_qkv(2, n=48, d=16, seed=1)
    q, k = q / 2, k / 2
    reference = softmax_attention(q, k, v, causal=causal)
    errors = []
    for m in (16, 64, 256, 1024):
        runs = [
            relative_error(
                favor_attention(
                    q, k, v, orthogonal_gaussian(m, 16, generator=generator(s)), causal=causal
                ),
                reference,
            )
            for s in range(6)
        ]
        errors.append(sum(runs) / len(runs))
    assert all(later < earlier for earlier, later in itertools.pairwise(errors)), errors
    assert errors[-1] < errors[0] / 4, errors  # 1/√m would give a factor 8


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kind", ["positive", "trigonometric"])
def test_unstabilized_is_favor_attention_in_float64(kind, causal):
    q, k, v = random_qkv(2, n=30, d=8, d_v=3, seed=5)
    w = orthogonal_gaussian(24, 8, generator=generator(3))
    for scale in (None, 0.2):
        naive = unstabilized_favor_attention(q, k, v, w, kind=kind, causal=causal, scale=scale)
        stable = favor_attention(q, k, v, w, kind=kind, causal=causal, scale=scale)
        assert_close(naive, stable, rtol=1e-5)  # up to linear_attention's eps = 1e-6


# (dtype, inputs × this, causal, rtol): half precision with logits of standard deviation 9, and
# float32 with 400 (non-causal only: a causal query whose best key lies in its future can
# still underflow there, as favor_attention's docstring says)
LARGE_INPUTS = [
    *((dtype, 3.0, causal, rtol) for dtype, rtol in HALF for causal in (False, True)),
    (torch.float32, 20.0, False, 1e-2),
]


@pytest.mark.parametrize("kind", ["positive", "trigonometric"])
@pytest.mark.parametrize(("dtype", "inflate", "causal", "rtol"), LARGE_INPUTS)
def test_large_inputs_in_low_precision_do_not_overflow(dtype, inflate, causal, rtol, kind):
    q, k, v = random_qkv(2, n=40, d=16, seed=2)
    q, k, v = (x.to(dtype) for x in (inflate * q, inflate * k, v))
    w = orthogonal_gaussian(64, 16, generator=generator(0), dtype=dtype)
    reference = favor_attention(*(x.to(F64) for x in (q, k, v, w)), kind=kind, causal=causal)
    naive = unstabilized_favor_attention(q, k, v, w, kind=kind, causal=causal)
    naive_error = relative_error(naive, reference)
    assert naive_error > 0.1  # overflow (inf), underflow (0/eps) or lost digits
    out = favor_attention(q, k, v, w, kind=kind, causal=causal)
    assert out.dtype == dtype and bool(torch.isfinite(out).all())
    assert_close(out, reference, rtol=rtol)  # the float64 function of the same (rounded) inputs


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_stays_close_to_softmax_attention(dtype):
    q, k, v = random_qkv(2, n=64, d=16, seed=3)
    q, k = q / 2, k / 2
    w = orthogonal_gaussian(1024, 16, generator=generator(1))
    exact = softmax_attention(q, k, v, causal=True)
    error64 = relative_error(favor_attention(q, k, v, w, causal=True), exact)
    low = favor_attention(*(x.to(dtype) for x in (q, k, v, w)), causal=True)
    assert relative_error(low, exact) < error64 + 2e-2


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kind", ["positive", "trigonometric"])
def test_gradients(kind, causal):
    q, k, v = random_qkv(n=5, d=3, d_v=2, seed=4)
    w = iid_gaussian(7, 3, generator=generator(2))
    inputs = [x.clone().requires_grad_() for x in (q, k, v)]
    assert torch.autograd.gradcheck(
        lambda q, k, v: favor_attention(q, k, v, w, kind=kind, causal=causal), inputs
    )


def test_empty_sequence():
    q, k, v = random_qkv(2, n=0, d=3, d_v=4)
    out = favor_attention(q, k, v, iid_gaussian(5, 3))
    assert out.shape == (2, 0, 4)


# --- validation -----------------------------------------------------------------------------

Q, K, V = random_qkv(n=4, d=3)
W = iid_gaussian(5, 3)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: iid_gaussian(0, 3), ValueError, "iid_gaussian: m must be a positive int; got m=0"),
        (lambda: iid_gaussian(2, 2.0), TypeError, "d must be a positive int; got d=2.0"),
        (lambda: orthogonal_gaussian(4, -1), ValueError, "d must be a positive int"),
        (lambda: orthogonal_gaussian(4, 2, scaling="unit"), ValueError, "scaling must be one of"),
        (lambda: iid_gaussian(4, 2, dtype=torch.int64), TypeError, "dtype must be a floating"),
        (lambda: orthogonal_gaussian(4, 2, generator=0), TypeError, "generator must be a torch"),
        (lambda: positive_features(Q, W[:, :2]), ValueError, "w must have as many columns as x"),
        (lambda: trig_features(Q, W[0]), ValueError, "w must have at least 2 dimensions"),
        (lambda: trig_features(Q, W[None]), ValueError, "w must be a matrix"),
        (lambda: positive_features(Q, W[:0]), ValueError, "at least one row"),
        (lambda: positive_features(Q, W.float()), TypeError, "w must have the same dtype as x"),
        (lambda: positive_features(Q.long(), W), TypeError, "x must be a floating-point"),
        (lambda: fourier_features(Q, W[:, :2]), ValueError, "fourier_features: w must have as"),
        (lambda: favor_attention(Q, K, V, W, kind="relu"), ValueError, "kind must be one of"),
        (lambda: favor_attention(Q, K, V, W, scale=0.0), ValueError, "scale must be a positive"),
        (lambda: favor_attention(Q, K, V, W.float()), TypeError, "w must have the same dtype as q"),
        (lambda: favor_attention(Q, K[:3], V, W), ValueError, "sequence length"),
        (lambda: favor_attention(Q, K, V, W.T), ValueError, "w must have as many columns as q"),
        (
            lambda: unstabilized_favor_attention(Q, K, V, W, kind="relu"),
            ValueError,
            "unstabilized_favor_attention: kind must be one of",
        ),
        (
            lambda: unstabilized_favor_attention(Q, K, V, W[:, :2]),
            ValueError,
            "unstabilized_favor_attention: w must have as many columns as q",
        ),
        (
            lambda: unstabilized_favor_attention(Q, K, V, W, scale=-1.0),
            ValueError,
            "scale must be a positive",
        ),
    ],
)
def test_validation(call, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        call()
