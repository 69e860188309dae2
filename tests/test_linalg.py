"""Tests of `linattn_core.maths.linalg` and of the identities chapter 6 states about products,
factorizations, rotations, determinants, traces, ranks, inverses and Kronecker products.

Each identity is re-checked on fresh, seeded random inputs of several sizes, in float64, with
relative errors. Identities that involve no package function (the SVD, trace or inverse rules)
are checked with NumPy or sympy directly.
"""

import math

import numpy as np
import pytest
import sympy as sp
import torch

from linattn_core.maths.linalg import (
    commutation_matrix,
    det_cofactor,
    gram_schmidt,
    kron,
    polygon_area,
    power_iteration,
    product_columns,
    product_entries,
    product_outer,
    product_rows,
    rope_apply,
    rope_complex,
    rope_half_split,
    rope_matrix,
    rot_x,
    rot_y,
    rot_z,
    tan_angle,
    vec,
)
from linattn_core.testing import assert_close, relative_error

SEEDS = [0, 1, 2]
RTOL = 1e-11
f64 = torch.float64


# ---------------------------------------------------------------- four views of a product

VIEWS = [product_entries, product_columns, product_rows, product_outer]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("m", "k", "n"), [(4, 3, 5), (1, 7, 2), (6, 1, 3)])
def test_four_views_of_a_product(seed, m, k, n):
    rng = np.random.default_rng(seed)
    A, B = (torch.as_tensor(rng.standard_normal(s)) for s in ((m, k), (k, n)))
    for view in VIEWS:
        assert_close(view(A, B), A @ B, rtol=RTOL, name=view.__name__)
    assert torch.linalg.matrix_rank(A @ B) <= k


@pytest.mark.parametrize("view", VIEWS)
def test_product_views_validate(view):
    A = torch.ones(2, 3, dtype=f64)
    with pytest.raises(ValueError, match=rf"^{view.__name__}: A and B must be matrices"):
        view(A, torch.ones(2, 3, dtype=f64))
    with pytest.raises(TypeError, match=rf"^{view.__name__}: B must have the same dtype as A"):
        view(A, torch.ones(3, 2, dtype=torch.float32))
    with pytest.raises(TypeError, match=rf"^{view.__name__}: A must be a torch.Tensor"):
        view(np.ones((2, 3)), torch.ones(3, 2, dtype=f64))


def test_outer_product_has_rank_one():
    rng = np.random.default_rng(3)
    a, b = (torch.as_tensor(rng.standard_normal(n)) for n in (5, 7))
    assert torch.linalg.matrix_rank(torch.outer(a, b)) == 1


def test_linear_attention_state_is_a_sum_of_outer_products():
    gen = torch.Generator().manual_seed(4)
    Q, K, V = (torch.randn(37, s, generator=gen, dtype=f64) for s in (6, 6, 5))
    assert_close(product_outer(K.T, V), K.T @ V, rtol=RTOL)  # Σ_j k_j v_jᵀ
    assert_close((Q @ K.T) @ V, Q @ (K.T @ V), rtol=RTOL)
    assert torch.linalg.matrix_rank(Q @ K.T).item() <= 6


# ---------------------------------------------------------------- factorizations


def test_cr_factorization_exact():
    A = sp.Matrix([[1, 2, 3, 4], [2, 4, 7, 9], [3, 6, 10, 13]])
    R0, pivots = A.rref()
    C, R = A[:, list(pivots)], R0[: len(pivots), :]
    assert C * R == A
    assert A.rank() == A.T.rank() == len(pivots) == 2


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("m", "n"), [(8, 5), (5, 5), (30, 7)])
@pytest.mark.parametrize("modified", [False, True])
def test_gram_schmidt_qr_and_uniqueness(seed, m, n, modified):
    A = torch.as_tensor(np.random.default_rng(seed).standard_normal((m, n)))
    Q, R = gram_schmidt(A, modified=modified)
    assert_close(Q @ R, A, rtol=RTOL)
    assert_close(Q.T @ Q, torch.eye(n, dtype=f64), rtol=RTOL)
    assert torch.equal(R, R.triu()) and bool((R.diagonal() > 0).all())
    Qh, Rh = torch.linalg.qr(A)  # Householder: the same factors up to the signs of diag(R)
    signs = Rh.diagonal().sign()
    assert_close(Qh * signs, Q, rtol=1e-9)
    assert_close(signs[:, None] * Rh, R, rtol=1e-9)


def test_gram_schmidt_takes_batches():
    A = torch.as_tensor(np.random.default_rng(5).standard_normal((3, 2, 6, 4)))
    Q, R = gram_schmidt(A, modified=True)
    assert Q.shape == (3, 2, 6, 4) and R.shape == (3, 2, 4, 4)
    Q1, R1 = gram_schmidt(A[2, 1], modified=True)
    assert_close(Q[2, 1], Q1, rtol=1e-14)
    assert_close(R[2, 1], R1, rtol=1e-14)


def test_classical_gram_schmidt_loses_orthogonality():
    A = torch.as_tensor(np.vander(np.linspace(0, 1, 50), 12, increasing=True))  # κ ≈ 1e8
    loss = {
        "classical": gram_schmidt(A)[0],
        "modified": gram_schmidt(A, modified=True)[0],
        "householder": torch.linalg.qr(A)[0],
    }
    loss = {
        k: torch.linalg.matrix_norm(q.T @ q - torch.eye(12, dtype=f64)) for k, q in loss.items()
    }
    assert loss["classical"] > 0.1
    assert 1e-12 < loss["modified"] < 1e-6
    assert loss["householder"] < 1e-13


def test_gram_schmidt_validates():
    with pytest.raises(ValueError, match=r"^gram_schmidt: A must have at least as many rows"):
        gram_schmidt(torch.ones(2, 3, dtype=f64))
    with pytest.raises(TypeError, match=r"^gram_schmidt: A must be a floating-point tensor"):
        gram_schmidt(torch.ones(3, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"^gram_schmidt: A must have at least 2 dimensions"):
        gram_schmidt(torch.ones(3, dtype=f64))


@pytest.mark.parametrize("seed", SEEDS)
def test_det_and_trace_are_product_and_sum_of_eigenvalues(seed):
    G = np.random.default_rng(seed).standard_normal((7, 7))
    lam = np.linalg.eigvals(G)
    assert_close(np.prod(lam).real, np.linalg.det(G), rtol=RTOL)
    assert_close(np.sum(lam).real, np.trace(G), rtol=RTOL)
    J = np.array([[2.0, 1.0], [0.0, 2.0]])  # defective: the theorem needs no eigenbasis
    assert_close(np.prod(np.linalg.eigvals(J)).real, np.linalg.det(J), rtol=RTOL)


@pytest.mark.parametrize("seed", SEEDS)
def test_spectral_theorem_and_diagonalization(seed):
    rng = np.random.default_rng(seed)
    G = rng.standard_normal((6, 6))
    S = G + G.T
    lam, Q = np.linalg.eigh(S)
    assert_close(Q @ np.diag(lam) @ Q.T, S, rtol=RTOL)
    assert_close(Q.T @ Q, np.eye(6), rtol=RTOL)
    mu, P = np.linalg.eig(G)
    expected = np.linalg.matrix_power(G, 4)
    assert_close((P @ np.diag(mu**4) @ np.linalg.inv(P)).real, expected, rtol=RTOL)


def test_worked_eigen_example_and_defective_matrix():
    A = sp.Matrix([[3, 1], [1, 3]])
    assert A.eigenvals() == {4: 1, 2: 1}
    P, D = sp.Matrix([[1, -1], [1, 1]]), sp.diag(4, 2)
    assert P * D * P.inv() == A
    assert not sp.Matrix([[1, 1], [0, 1]]).is_diagonalizable()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("m", "n", "r"), [(6, 4, 4), (4, 6, 2), (5, 5, 3)])
def test_svd_properties(seed, m, n, r):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, r)) @ rng.standard_normal((r, n))
    U, s, Vt = np.linalg.svd(A)
    Sigma = np.zeros((m, n))
    Sigma[: len(s), : len(s)] = np.diag(s)
    assert_close(U @ Sigma @ Vt, A, rtol=RTOL)
    assert_close(U.T @ U, np.eye(m), rtol=RTOL)
    assert_close(Vt @ Vt.T, np.eye(n), rtol=RTOL)
    assert np.all(np.diff(s) <= 1e-12) and np.all(s >= 0)
    assert int(np.sum(s > 1e-10 * s[0])) == r == np.linalg.matrix_rank(A)
    assert_close(sum(s[i] * np.outer(U[:, i], Vt[i]) for i in range(r)), A, rtol=RTOL)
    assert_close(U[:, :r] @ np.diag(s[:r]) @ Vt[:r], A, rtol=RTOL)
    x = rng.standard_normal(n)
    assert_close(sum(s[i] * (Vt[i] @ x) * U[:, i] for i in range(r)), A @ x, rtol=RTOL)


def test_worked_svd_example():
    r5, r45 = sp.sqrt(sp.Rational(1, 5)), sp.sqrt(sp.Rational(4, 5))
    A = sp.Matrix([[1, 0, 0, 0, 2], [0, 0, 3, 0, 0], [0, 0, 0, 0, 0], [0, 2, 0, 0, 0]])
    U = sp.Matrix([[0, -1, 0, 0], [-1, 0, 0, 0], [0, 0, 0, -1], [0, 0, -1, 0]])
    Sigma = sp.Matrix(4, 5, lambda i, j: [3, sp.sqrt(5), 2, 0][i] if i == j else 0)
    Vt = sp.Matrix(
        [
            [0, 0, -1, 0, 0],
            [-r5, 0, 0, 0, -r45],
            [0, -1, 0, 0, 0],
            [0, 0, 0, 1, 0],
            [-r45, 0, 0, 0, r5],
        ]
    )
    assert U * Sigma * Vt == A
    assert U.T * U == sp.eye(4) and Vt * Vt.T == sp.eye(5)
    # the rank-one expansion Σ c_i u_i v_iᵀ, as a product
    assert U[:, :3] * sp.diag(3, sp.sqrt(5), 2) * Vt[:3, :] == A
    assert U[:, :3] * sp.diag(3, 3, 2) * Vt[:3, :] != A  # σ₂ = √5, not 3 (corrected in chapter 6)
    U2, Vt2 = U.copy(), Vt.copy()
    U2[:, 0], Vt2[0, :] = -U[:, 0], -Vt[0, :]
    assert U2 * Sigma * Vt2 == A
    t = sp.Symbol("t")
    Vt3 = Vt.copy()
    Vt3[3:, :] = sp.rot_ccw_axis3(t)[:2, :2] * Vt[3:, :]
    assert sp.simplify(U * Sigma * Vt3 - A) == sp.zeros(4, 5)
    x = sp.Matrix([-r5, 0, 2, 0, -r45])
    assert list(Vt * x) == [-2, 1, 0, 0, 0]
    assert A * x == sp.Matrix([-sp.sqrt(5), 6, 0, 0])


def test_torch_svd_conventions():
    X = torch.randn(5, 3, generator=torch.Generator().manual_seed(6), dtype=f64)
    U, S, Vh = torch.linalg.svd(X, full_matrices=False)
    assert_close(U @ torch.diag(S) @ Vh, X, rtol=RTOL)
    U2, S2, V2 = torch.svd(X)
    assert_close(U2 @ torch.diag(S2) @ V2.T, X, rtol=RTOL)


@pytest.mark.parametrize("seed", SEEDS)
def test_evd_svd_relation(seed):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((7, 4))
    U, s, Vt = np.linalg.svd(A)
    assert_close(Vt.T @ np.diag(s**2) @ Vt, A.T @ A, rtol=RTOL)
    assert_close(U[:, :4] @ np.diag(s**2) @ U[:, :4].T, A @ A.T, rtol=RTOL)
    assert_close(np.sqrt(np.linalg.eigvalsh(A.T @ A)[::-1].copy()), s, rtol=RTOL)
    G = rng.standard_normal((5, 5))
    S = G + G.T
    lam, Q = np.linalg.eigh(S)
    assert_close(np.sort(np.abs(lam))[::-1].copy(), np.linalg.svd(S, compute_uv=False), rtol=RTOL)
    order = np.argsort(-np.abs(lam))
    Uq, Vq = Q[:, order], Q[:, order] * np.sign(lam[order])
    assert_close(Uq @ np.diag(np.abs(lam[order])) @ Vq.T, S, rtol=RTOL)
    P = G @ G.T  # positive definite: SVD = EVD
    expected = np.linalg.eigvalsh(P)[::-1].copy()
    assert_close(np.linalg.svd(P, compute_uv=False), expected, rtol=RTOL)
    N = np.array([[1.0, 100.0], [0.0, 1.0]])
    assert np.allclose(np.linalg.eigvals(N), 1) and np.linalg.svd(N, compute_uv=False)[0] > 100


# ---------------------------------------------------------------- power iteration


def test_power_iteration_worked_example():
    A = torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=f64)
    x0 = torch.as_tensor(np.random.default_rng(24).standard_normal(2))
    xs, r = power_iteration(A, x0, 30)
    assert xs.shape == (30, 2) and r.shape == (30,)
    assert abs(r[-1].item() - (7 + math.sqrt(5)) / 2) < 1e-12
    assert_close(torch.linalg.vector_norm(xs, dim=-1), torch.ones(30, dtype=f64), rtol=1e-14)


@pytest.mark.parametrize("ratio", [0.5, 0.9, 0.97])
def test_power_iteration_bounds(ratio):
    rng = np.random.default_rng(int(ratio * 100))
    n = 30
    spectrum = np.concatenate([[1.0, ratio], np.linspace(-0.9 * ratio, 0.9 * ratio, n - 2)])
    Q = torch.as_tensor(np.linalg.qr(rng.standard_normal((n, n)))[0])
    A = Q @ torch.diag(torch.as_tensor(spectrum)) @ Q.T
    x0 = torch.as_tensor(rng.standard_normal(n))
    xs, r = power_iteration(A, x0, 400)
    tan0, tans = tan_angle(x0, Q[:, 0]), tan_angle(xs, Q[:, 0])
    k = torch.arange(1, 401)
    assert bool((tans <= ratio**k * tan0 * (1 + 1e-8) + 1e-13).all())
    sin2 = tans**2 / (1 + tans**2)
    assert bool(((r - 1).abs() <= (1 - spectrum.min()) * sin2 + 1e-13).all())


def test_rayleigh_quotient_rate_for_nonsymmetric_matrix():
    rng = np.random.default_rng(3)
    P = rng.standard_normal((6, 6))
    A = torch.as_tensor(P @ np.diag([1.0, 0.8, 0.5, 0.3, 0.2, 0.1]) @ np.linalg.inv(P))
    _, r = power_iteration(A, torch.as_tensor(rng.standard_normal(6)), 60)
    err = (r - 1.0).abs()
    assert torch.allclose(err[41:45] / err[40:44], torch.full((4,), 0.8, dtype=f64), atol=0.02)


def test_power_iteration_takes_batches():
    rng = np.random.default_rng(7)
    G = torch.as_tensor(rng.standard_normal((3, 5, 5)))
    A, x0 = G + G.mT, torch.as_tensor(rng.standard_normal((3, 5)))
    xs, r = power_iteration(A, x0, 12)
    assert xs.shape == (3, 12, 5) and r.shape == (3, 12)
    xs1, r1 = power_iteration(A[1], x0[1], 12)
    assert_close(xs[1], xs1, rtol=1e-13)
    assert_close(r[1], r1, rtol=1e-13)


def test_power_iteration_validates():
    A, x0 = torch.eye(3, dtype=f64), torch.ones(3, dtype=f64)
    with pytest.raises(ValueError, match=r"^power_iteration: A must be square"):
        power_iteration(torch.ones(3, 2, dtype=f64), x0, 5)
    with pytest.raises(ValueError, match=r"^power_iteration: x0 must have shape \(\.\.\., n\)"):
        power_iteration(A, torch.ones(4, dtype=f64), 5)
    with pytest.raises(ValueError, match=r"^power_iteration: steps must be a positive int"):
        power_iteration(A, x0, 0)
    with pytest.raises(TypeError, match=r"^power_iteration: x0 must have the same dtype as A"):
        power_iteration(A, x0.float(), 5)


def test_tan_angle():
    v = torch.tensor([3.0, 0.0], dtype=f64)  # need not be a unit vector
    x = torch.tensor([[1.0, 1.0], [2.0, 0.0], [1.0, -2.0]], dtype=f64)
    assert_close(tan_angle(x, v), torch.tensor([1.0, 0.0, 2.0], dtype=f64), rtol=1e-15)
    tiny = torch.tensor([1.0, 1e-12], dtype=f64)  # accurate far below √ε
    assert_close(tan_angle(tiny, v), torch.tensor(1e-12, dtype=f64), rtol=1e-12)
    with pytest.raises(ValueError, match=r"^tan_angle: v must be one vector \(n,\)"):
        tan_angle(x, torch.ones(3, dtype=f64))


# ---------------------------------------------------------------- rotations


@pytest.mark.slow  # sympy simplification, about 0.5 s
def test_plane_rotations_sympy():
    a, b = sp.symbols("a b", real=True)

    def rot(t):  # the 2×2 counter-clockwise rotation
        return sp.rot_ccw_axis3(t)[:2, :2]

    assert sp.simplify(rot(a) * rot(b) - rot(a + b)) == sp.zeros(2, 2)
    assert sp.simplify(rot(a).T * rot(a)) == sp.eye(2)
    assert sp.simplify(rot(a).det()) == 1
    lam = sp.Symbol("lam")
    charpoly = rot(a).charpoly(lam).as_expr()
    for sign in (1, -1):
        assert sp.simplify(sp.expand_complex(charpoly.subs(lam, sp.exp(sign * sp.I * a)))) == 0
    assert rot(sp.pi / 4) * sp.Matrix([1, 0]) == sp.Matrix([sp.sqrt(2) / 2, sp.sqrt(2) / 2])


@pytest.mark.parametrize("seed", SEEDS)
def test_space_rotations(seed):
    rng = np.random.default_rng(seed)
    a, b, c = rng.uniform(-np.pi, np.pi, 3)
    R = rot_z(c) @ rot_y(b) @ rot_x(a)
    assert_close(R.T @ R, torch.eye(3, dtype=f64), rtol=RTOL)
    assert abs(torch.linalg.det(R).item() - 1) < 1e-12
    lam, vecs = np.linalg.eig(R.numpy())
    assert np.allclose(np.abs(lam), 1)
    assert relative_error(rot_x(a) @ rot_y(b), rot_y(b) @ rot_x(a)) > 1e-3
    axis = vecs[:, np.argmin(np.abs(lam - 1))].real
    assert_close(R.numpy() @ axis, axis, rtol=RTOL)
    phi = np.arccos(np.clip((torch.trace(R).item() - 1) / 2, -1, 1))
    expected = np.array([1, np.exp(1j * phi), np.exp(-1j * phi)])
    assert np.allclose(np.sort_complex(lam), np.sort_complex(expected))
    x, y = (torch.as_tensor(rng.standard_normal(3)) for _ in range(2))
    assert math.isclose((R @ x) @ (R @ y), x @ y, rel_tol=1e-12, abs_tol=1e-12)


def test_rotations_about_each_axis():
    e = torch.eye(3, dtype=f64)
    for rot, (i, j, k) in ((rot_x, (0, 1, 2)), (rot_y, (1, 2, 0)), (rot_z, (2, 0, 1))):
        assert torch.equal(rot(0.3) @ e[i], e[i])  # the axis is fixed
        assert_close(rot(math.pi / 2) @ e[j], e[k], rtol=1e-15)  # counter-clockwise, seen from +i
        assert_close(rot(0.3) @ rot(0.5), rot(0.8), rtol=1e-15)
    angles = torch.tensor([0.1, -2.0, 3.0], dtype=f64)
    assert rot_x(angles).shape == (3, 3, 3)
    assert_close(rot_y(angles)[1], rot_y(-2.0), rtol=1e-15)
    assert rot_z(0.5, dtype=torch.float32).dtype == torch.float32
    with pytest.raises(TypeError, match=r"^rot_x: angle must be a real number"):
        rot_x("0.5")


def test_householder_reflection_is_orthogonal_with_det_minus_one():
    u = np.array([1.0, 2.0, 2.0]) / 3
    H = np.eye(3) - 2 * np.outer(u, u)
    assert_close(H.T @ H, np.eye(3), rtol=RTOL)
    assert abs(np.linalg.det(H) + 1) < 1e-12


@pytest.mark.parametrize(("m", "n", "d"), [(3, 10, 16), (0, 5, 2), (17, 4, 64)])
def test_rope_matrices_compose(m, n, d):
    """R_mᵀ R_n = R_{n−m}; the scores and the other forms are tested in test_jacobians."""
    assert_close(rope_matrix(m, d).T @ rope_matrix(n, d), rope_matrix(n - m, d), rtol=RTOL)


# ---------------------------------------------------------------- determinant, trace, rank, inverse


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", [1, 3, 5])
def test_determinant_properties(seed, n):
    rng = np.random.default_rng(seed)
    A, B = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    det = np.linalg.det
    assert_close(det_cofactor(torch.as_tensor(A)), det(A), rtol=RTOL)
    assert_close(det(A @ B), det(A) * det(B), rtol=RTOL)
    assert_close(det(A.T), det(A), rtol=RTOL)
    assert_close(det(np.linalg.inv(A)), 1 / det(A), rtol=RTOL)
    assert_close(det(-1.7 * A), (-1.7) ** n * det(A), rtol=RTOL)
    assert_close(det(np.triu(A)), np.prod(np.diag(A)), rtol=RTOL)
    assert_close(abs(det(A)), np.prod(np.abs(np.diag(np.linalg.qr(A)[1]))), rtol=RTOL)


def test_det_cofactor_validates():
    assert det_cofactor(torch.tensor([[2.0, 1.0], [1.0, 3.0]], dtype=f64)).item() == 5.0
    with pytest.raises(ValueError, match=r"^det_cofactor: A must be a non-empty square matrix"):
        det_cofactor(torch.ones(2, 3, dtype=f64))


def test_2x2_determinant_and_signed_area():
    a11, a12, a21, a22 = sp.symbols("a11 a12 a21 a22")
    assert sp.Matrix([[a11, a12], [a21, a22]]).det() == a11 * a22 - a12 * a21
    square = torch.tensor([[0.0, 1.0, 1.0, 0.0], [0.0, 0.0, 1.0, 1.0]], dtype=f64)
    M = torch.as_tensor(np.random.default_rng(5).standard_normal((5, 2, 2)))
    assert_close(polygon_area(M @ square), torch.linalg.det(M), rtol=1e-12)  # a batch of 5
    assert polygon_area(square.flip(-1)).item() == -1.0  # clockwise
    with pytest.raises(ValueError, match=r"^polygon_area: points must have shape \(\.\.\., 2, n\)"):
        polygon_area(torch.ones(3, 4, dtype=f64))


@pytest.mark.parametrize("seed", SEEDS)
def test_trace_properties(seed):
    rng = np.random.default_rng(seed)
    A, B, C = rng.standard_normal((3, 5)), rng.standard_normal((5, 4)), rng.standard_normal((4, 3))
    Bt, D = rng.standard_normal((5, 3)), rng.standard_normal((3, 5))
    tr = np.trace
    assert_close(tr(A @ Bt), tr(Bt @ A), rtol=RTOL)
    assert_close([tr(A @ B @ C), tr(B @ C @ A)], [tr(C @ A @ B)] * 2, rtol=RTOL)
    S1, S2, S3, P = (rng.standard_normal((4, 4)) for _ in range(4))
    assert abs(tr(S1 @ S2 @ S3) - tr(S1 @ S3 @ S2)) > 1e-6
    assert_close(tr(np.linalg.inv(P) @ S1 @ P), tr(S1), rtol=RTOL)
    x = rng.standard_normal(6)
    assert_close(tr(np.outer(x, x)), x @ x, rtol=RTOL)
    assert_close(np.linalg.norm(A, "fro") ** 2, tr(A.T @ A), rtol=RTOL)
    assert_close(tr(A.T @ D), np.sum(A * D), rtol=RTOL)
    assert_close(tr(2 * S1 - 3 * S2), 2 * tr(S1) - 3 * tr(S2), rtol=RTOL)
    assert_close(tr(S1.T), tr(S1), rtol=RTOL)
    M = rng.standard_normal((7, 7))
    assert_close(tr(M), tr(M[:3, :3]) + tr(M[3:, 3:]), rtol=RTOL)
    assert tr(np.array([[3, 1], [2, 4]])) == 7


@pytest.mark.parametrize("seed", SEEDS)
def test_rank_properties(seed):
    rng = np.random.default_rng(seed)
    rank = np.linalg.matrix_rank
    A = rng.standard_normal((7, 3)) @ rng.standard_normal((3, 6))
    B = rng.standard_normal((7, 2)) @ rng.standard_normal((2, 6))
    C = rng.standard_normal((6, 5))
    assert rank(A) == rank(A.T) == 3 <= min(A.shape)
    null = np.linalg.svd(A)[2][3:].T
    assert rank(A) + null.shape[1] == 6 and np.allclose(A @ null, 0)
    assert rank(A @ C) <= min(rank(A), rank(C))
    assert rank(A + B) <= rank(A) + rank(B)
    assert rank(A.T @ A) == rank(A @ A.T) == rank(A)
    assert int(np.sum(np.linalg.svd(A, compute_uv=False) > 1e-10)) == 3
    U, s, Vt = np.linalg.svd(A, full_matrices=False)
    F, G = U[:, :3] * s[:3], Vt[:3]
    assert_close(F @ G, A, rtol=RTOL)


def test_rank_of_gram_matrix_fails_over_complex_with_plain_transpose():
    Z = np.array([[1, 1j]])
    assert abs((Z @ Z.T)[0, 0]) == 0 and np.linalg.matrix_rank(Z) == 1
    assert np.linalg.matrix_rank(Z @ Z.conj().T) == 1


def test_numerical_rank_depends_on_tolerance():
    rng = np.random.default_rng(11)
    A = rng.standard_normal((7, 3)) @ rng.standard_normal((3, 6))
    noisy = A + 1e-10 * rng.standard_normal(A.shape)
    assert np.linalg.matrix_rank(noisy) == 6
    assert np.linalg.matrix_rank(noisy, tol=1e-8) == 3


def test_attention_ranks():
    gen = torch.Generator().manual_seed(12)
    Q, K = (torch.randn(64, 8, generator=gen, dtype=f64) for _ in range(2))
    assert torch.linalg.matrix_rank(Q @ K.T).item() == 8
    assert torch.linalg.matrix_rank(torch.softmax(Q @ K.T, dim=-1)).item() == 64
    phi_q = torch.nn.functional.elu(Q) + 1
    phi_k = torch.nn.functional.elu(K) + 1
    lin = phi_q @ phi_k.T
    lin = lin / lin.sum(-1, keepdim=True)
    assert torch.linalg.matrix_rank(lin).item() <= 8


@pytest.mark.parametrize("seed", SEEDS)
def test_inverse_identities(seed):
    rng = np.random.default_rng(seed)
    inv = np.linalg.inv
    A, B = rng.standard_normal((5, 5)), rng.standard_normal((5, 5))
    assert_close(inv(inv(A)), A, rtol=1e-9)
    assert_close(inv(A.T), inv(A).T, rtol=RTOL)
    assert_close(inv(-3.0 * A), inv(A) / -3.0, rtol=RTOL)
    assert_close(inv(A @ B), inv(B) @ inv(A), rtol=1e-9)
    assert_close(inv(A @ A @ A), inv(A) @ inv(A) @ inv(A), rtol=1e-9)
    assert_close(inv(inv(B) @ A @ B), inv(B) @ inv(A) @ B, rtol=1e-9)


@pytest.mark.parametrize("seed", SEEDS)
def test_inverse_of_structured_matrices(seed):
    rng = np.random.default_rng(seed)
    inv = np.linalg.inv
    A = rng.standard_normal((5, 5))
    Q = np.linalg.qr(A)[0]
    assert_close(inv(Q), Q.T, rtol=RTOL)
    d = rng.uniform(0.5, 2.0, 5)
    assert_close(inv(np.diag(d)), np.diag(1 / d), rtol=RTOL)
    L = np.tril(A) + 5 * np.eye(5)
    assert np.allclose(np.triu(inv(L), 1), 0)
    assert np.allclose(np.tril(inv(L.T), -1), 0)
    S = A + A.T
    assert_close(inv(S), inv(S).T, rtol=RTOL)
    B1, B2 = rng.standard_normal((2, 2)), rng.standard_normal((3, 3))
    Bd = np.block([[B1, np.zeros((2, 3))], [np.zeros((3, 2)), B2]])
    expected = np.block([[inv(B1), np.zeros((2, 3))], [np.zeros((3, 2)), inv(B2)]])
    assert_close(inv(Bd), expected, rtol=1e-9)


def test_inverse_formulas_sympy():
    a, b, c, d = sp.symbols("a b c d")
    M2 = sp.Matrix([[a, b], [c, d]])
    expected = sp.Matrix([[d, -b], [-c, a]]) / (a * d - b * c)
    assert sp.simplify(M2.inv() - expected) == sp.zeros(2, 2)
    M3 = sp.Matrix([[2, -1, 0], [1, 3, 1], [0, 2, 4]])
    assert M3.adjugate() / M3.det() == M3.inv()
    assert M3.row_join(sp.eye(3)).rref()[0][:, 3:] == M3.inv()


def test_invertibility_conditions_fail_together():
    A = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    assert abs(np.linalg.det(A)) < 1e-12
    assert np.linalg.matrix_rank(A) == 2
    assert np.abs(np.linalg.eigvals(A)).min() < 1e-12
    assert np.allclose(A @ np.array([1.0, -2.0, 1.0]), 0)
    b = np.array([1.0, 0.0, 0.0])  # not in the column space
    assert np.linalg.matrix_rank(np.column_stack([A, b])) == 3


# ---------------------------------------------------------------- Kronecker products and vec


@pytest.mark.parametrize("seed", SEEDS)
def test_kronecker_algebra(seed):
    rng = np.random.default_rng(seed)
    A, A2 = (torch.as_tensor(rng.standard_normal(s)) for s in ((2, 3), (2, 3)))
    B, B2 = (torch.as_tensor(rng.standard_normal(s)) for s in ((4, 2), (4, 2)))
    C, D = (torch.as_tensor(rng.standard_normal(s)) for s in ((3, 2), (2, 5)))
    assert_close(
        torch.stack([kron(2.5 * A, B), kron(A, 2.5 * B)]),
        torch.stack([2.5 * kron(A, B)] * 2),
        rtol=RTOL,
    )
    assert_close(kron(A + A2, B), kron(A, B) + kron(A2, B), rtol=RTOL)
    assert_close(kron(A, B + B2), kron(A, B) + kron(A, B2), rtol=RTOL)
    assert_close(kron(kron(A, B), C), kron(A, kron(B, C)), rtol=RTOL)
    assert relative_error(kron(A[:, :2], B[:2]), kron(B[:2], A[:, :2])) > 1e-3
    assert_close(kron(A, B).T, kron(A.T, B.T), rtol=RTOL)
    assert_close(kron(A, B) @ kron(C, D), kron(A @ C, B @ D), rtol=RTOL)
    assert torch.equal(kron(torch.eye(3, dtype=f64), torch.eye(4, dtype=f64)), torch.eye(12))
    S, T = (torch.as_tensor(rng.standard_normal((3, 3))) for _ in range(2))
    I2 = torch.eye(2, dtype=f64)
    assert_close(kron(I2, S) @ kron(I2, T), kron(I2, S @ T), rtol=RTOL)


def test_kronecker_example_sympy():
    a, b, c, d = sp.symbols("a b c d")
    K = sp.kronecker_product(sp.Matrix([[1, 2], [3, 4]]), sp.Matrix([[a, b], [c, d]]))
    expected = sp.Matrix(
        [
            [a, b, 2 * a, 2 * b],
            [c, d, 2 * c, 2 * d],
            [3 * a, 3 * b, 4 * a, 4 * b],
            [3 * c, 3 * d, 4 * c, 4 * d],
        ]
    )
    assert expected == K


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("m", "n"), [(3, 4), (2, 2), (1, 5)])
def test_kronecker_inverse_spectrum_det(seed, m, n):
    rng = np.random.default_rng(seed)
    A, B = (torch.as_tensor(rng.standard_normal(s)) for s in ((m, m), (n, n)))
    K = kron(A, B)
    inv, det = torch.linalg.inv, torch.linalg.det
    assert_close(inv(K), kron(inv(A), inv(B)), rtol=1e-9)
    assert_close(torch.trace(K), torch.trace(A) * torch.trace(B), rtol=RTOL)
    assert_close(det(K), det(A) ** n * det(B) ** m, rtol=RTOL)
    if m != n:
        assert relative_error(det(A) ** m * det(B) ** n, det(K)) > 1e-6
    lam_a, lam_b = (np.linalg.eigvals(M.numpy()) for M in (A, B))
    expected = np.sort_complex(np.outer(lam_a, lam_b).ravel())
    assert np.allclose(np.sort_complex(np.linalg.eigvals(K.numpy())), expected)


@pytest.mark.parametrize("seed", SEEDS)
def test_kronecker_singular_values_rank_norms(seed):
    rng = np.random.default_rng(seed)
    A, B = (torch.as_tensor(rng.standard_normal(s)) for s in ((2, 3), (4, 2)))
    sv = torch.linalg.svdvals
    expected = torch.outer(sv(A), sv(B)).reshape(-1).sort(descending=True).values
    assert_close(sv(kron(A, B))[:4], expected, rtol=RTOL)
    Ar = torch.as_tensor(rng.standard_normal((4, 2)) @ rng.standard_normal((2, 5)))  # rank 2
    Br = torch.as_tensor(rng.standard_normal((3, 1)) @ rng.standard_normal((1, 3)))  # rank 1
    rank = torch.linalg.matrix_rank
    assert rank(kron(Ar, Br)) == rank(Ar) * rank(Br) == 2
    norm = torch.linalg.matrix_norm
    assert_close(norm(kron(A, B), 2), norm(A, 2) * norm(B, 2), rtol=RTOL)
    assert_close(norm(kron(A, B)), norm(A) * norm(B), rtol=RTOL)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("m", "n", "p"), [(3, 4, 5), (1, 3, 2), (4, 4, 4)])
def test_vec_identities(seed, m, n, p):
    """vec(AX), vec(XB), Ax, vec(abᵀ), the trace inner product; vec(AXB) is in test_calculus."""
    rng = np.random.default_rng(seed)
    A, X, B = (torch.as_tensor(rng.standard_normal(s)) for s in ((m, n), (n, p), (p, 2)))
    I_m, I_n, I_p = (torch.eye(k, dtype=f64) for k in (m, n, p))
    assert_close(vec(A @ X), kron(I_p, A) @ vec(X), rtol=RTOL)
    assert_close(vec(X @ B), kron(B.T, I_n) @ vec(X), rtol=RTOL)
    x = torch.as_tensor(rng.standard_normal(n))
    assert_close(A @ x, kron(x[None, :], I_m) @ vec(A), rtol=RTOL)
    a, b = (torch.as_tensor(rng.standard_normal(size)) for size in (m, n))
    assert_close(vec(torch.outer(a, b)), kron(b[:, None], a[:, None])[:, 0], rtol=RTOL)
    Y = torch.as_tensor(rng.standard_normal((m, n)))
    assert_close(torch.trace(A.T @ Y), vec(A) @ vec(Y), rtol=RTOL)
    assert_close(vec(2 * A - 3 * Y), 2 * vec(A) - 3 * vec(Y), rtol=RTOL)


@pytest.mark.parametrize("seed", SEEDS)
def test_quadratic_form_identity(seed):
    rng = np.random.default_rng(seed)
    X, B = (torch.as_tensor(rng.standard_normal(s)) for s in ((3, 4), (4, 4)))
    a, c = (torch.as_tensor(rng.standard_normal(3)) for _ in range(2))
    lhs = a @ X @ B @ X.T @ c
    assert_close(vec(X) @ kron(B.T, torch.outer(c, a)) @ vec(X), lhs, rtol=RTOL)
    assert_close(vec(X) @ kron(B, torch.outer(a, c)) @ vec(X), lhs, rtol=RTOL)
    factors_in_the_wrong_order = vec(X) @ kron(B, torch.outer(c, a)) @ vec(X)  # chapter 6's erratum
    assert relative_error(factors_in_the_wrong_order, lhs) > 1e-6
    assert_close(factors_in_the_wrong_order, a @ X @ B.T @ X.T @ c, rtol=RTOL)
    S = B + B.T
    assert_close(vec(X) @ kron(S, torch.outer(c, a)) @ vec(X), a @ X @ S @ X.T @ c, rtol=RTOL)


def test_linear_layer_in_row_layout_is_block_diagonal():
    """vec_r(X Wᵀ) = (I_N ⊗ W) vec_r(X): each token (row) is multiplied by W on its own."""
    rng = np.random.default_rng(2)
    X, W = (torch.as_tensor(rng.standard_normal(s)) for s in ((5, 3), (4, 3)))
    assert_close((X @ W.T).reshape(-1), kron(torch.eye(5, dtype=f64), W) @ X.reshape(-1), rtol=RTOL)


def test_commutation_matrix_worked_example():
    A = torch.tensor([[1, 4], [2, 5], [3, 6]], dtype=f64)
    K = commutation_matrix(3, 2)
    assert vec(A).tolist() == [1, 2, 3, 4, 5, 6]
    assert (K @ vec(A)).tolist() == [1, 4, 2, 5, 3, 6] == vec(A.T).tolist()
    K_32 = torch.zeros(6, 6, dtype=f64)  # the matrix written out in chapter 6
    K_32[[0, 1, 2, 3, 4, 5], [0, 3, 1, 4, 2, 5]] = 1
    assert torch.equal(K, K_32)


def test_commutation_matrix_spectrum_and_trace():
    for n in (1, 2, 3, 4, 5):
        K = commutation_matrix(n, n)
        ev = torch.linalg.eigvalsh(K)
        assert torch.equal(K, K.T)
        assert int(torch.isclose(ev, torch.tensor(1.0, dtype=f64)).sum()) == n * (n + 1) // 2
        assert int(torch.isclose(ev, torch.tensor(-1.0, dtype=f64)).sum()) == n * (n - 1) // 2
    assert torch.equal(commutation_matrix(1, 6), torch.eye(6, dtype=f64))
    assert torch.equal(commutation_matrix(6, 1), torch.eye(6, dtype=f64))
    for m in range(1, 10):
        for n in range(1, 10):
            assert torch.trace(commutation_matrix(m, n)).item() == 1 + math.gcd(m - 1, n - 1)


def test_exercise_kron_det_via_commutation():
    rng = np.random.default_rng(0)
    A, B = (torch.as_tensor(rng.standard_normal(s)) for s in ((3, 3), (4, 4)))
    I3, I4 = torch.eye(3, dtype=f64), torch.eye(4, dtype=f64)
    K_nm, K_mn = commutation_matrix(4, 3), commutation_matrix(3, 4)
    assert_close(K_nm @ kron(A, I4) @ K_mn, kron(I4, A), rtol=RTOL)
    assert_close(kron(A, I4) @ kron(I3, B), kron(A, B), rtol=RTOL)


# ---------------------------------------------------------------- vec, Kronecker, commutation, RoPE


def test_vec_stacks_columns_and_reshape_stacks_rows():
    X = torch.arange(6.0).reshape(2, 3)
    assert X.reshape(-1).tolist() == [0, 1, 2, 3, 4, 5]  # rows: vec(Xᵀ)
    assert vec(X).tolist() == [0, 3, 1, 4, 2, 5]  # columns: vec(X)
    assert torch.equal(X.reshape(-1), vec(X.mT))


def test_kron_is_torch_kron_also_on_transposed_inputs():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(2, 3, generator=g, dtype=f64), torch.randn(4, 5, generator=g, dtype=f64)
    assert torch.equal(kron(a, b), torch.kron(a, b))
    assert torch.equal(kron(a.T, b.T), torch.kron(a.T.contiguous(), b.T.contiguous()))
    assert kron(a, b)[4:8, 10:15].equal(a[1, 2] * b)


@pytest.mark.parametrize("seed", SEEDS)
def test_vec_of_a_product_in_each_factor(seed):
    g = torch.Generator().manual_seed(seed)
    A, X, B = (torch.randn(s, generator=g, dtype=f64) for s in [(2, 3), (3, 4), (4, 5)])
    eye = lambda n: torch.eye(n, dtype=f64)  # noqa: E731
    assert_close(kron(B.T, A) @ vec(X), vec(A @ X @ B), rtol=RTOL)
    assert_close(kron(B.T @ X.T, eye(2)) @ vec(A), vec(A @ X @ B), rtol=RTOL)
    assert_close(kron(eye(5), A @ X) @ vec(B), vec(A @ X @ B), rtol=RTOL)
    # row-major flattening (PyTorch's reshape) swaps the factors
    assert_close(kron(A, B.T) @ X.reshape(-1), (A @ X @ B).reshape(-1), rtol=RTOL)


@pytest.mark.parametrize(("m", "n"), [(1, 1), (2, 3), (5, 4)])
def test_commutation_matrix_transposes_and_is_a_permutation(m, n):
    K = commutation_matrix(m, n)
    X = torch.randn(m, n, dtype=f64, generator=torch.Generator().manual_seed(0))
    assert torch.equal(K @ vec(X), vec(X.T))
    assert torch.equal(K.T, commutation_matrix(n, m))
    assert torch.equal(K @ K.T, torch.eye(m * n, dtype=f64))


def test_commutation_matrix_swaps_kronecker_factors():
    g = torch.Generator().manual_seed(0)
    A, B = torch.randn(2, 3, dtype=f64, generator=g), torch.randn(4, 5, dtype=f64, generator=g)
    K = commutation_matrix
    assert_close(K(4, 2) @ kron(A, B) @ K(3, 5), kron(B, A), rtol=RTOL)


@pytest.mark.parametrize("m", [0, 1, 17])
def test_rope_three_forms_agree(m):
    x = torch.randn(10, dtype=f64, generator=torch.Generator().manual_seed(0))
    assert_close(rope_complex(x, m), rope_matrix(m, 10) @ x, rtol=RTOL)
    assert_close(rope_apply(x, m), rope_matrix(m, 10) @ x, rtol=RTOL)
    batch = torch.randn(3, 2, 10, dtype=f64, generator=torch.Generator().manual_seed(1))
    assert_close(rope_apply(batch, m), batch @ rope_matrix(m, 10).T, rtol=RTOL)


def test_rope_scores_depend_on_the_offset_only():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(8, dtype=f64, generator=g), torch.randn(8, dtype=f64, generator=g)
    score = [rope_apply(q, m) @ rope_apply(k, m - 3) for m in (3, 10, 250)]
    assert_close(torch.stack(score), score[0].expand(3), rtol=1e-12)
    assert_close(score[0], q @ rope_matrix(-3, 8) @ k, rtol=1e-12)  # ⟨R_m q, R_n k⟩ = qᵀ R_{n−m} k
    assert not torch.isclose(score[0], rope_apply(q, 5) @ rope_apply(k, 1))


def test_rope_half_split_is_the_interleaved_form_permuted():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(12, dtype=f64, generator=g)
    interleave = torch.stack([torch.arange(6), torch.arange(6) + 6], dim=1).reshape(-1)  # Π
    assert_close(rope_half_split(q, 5)[interleave], rope_matrix(5, 12) @ q[interleave], rtol=1e-12)


def test_rope_validates():
    with pytest.raises(ValueError, match="rope_angles: d must be even"):
        rope_apply(torch.ones(5, dtype=f64), 1)
    with pytest.raises(ValueError, match="rope_angles: base"):
        rope_matrix(1, 4, base=0.0)
