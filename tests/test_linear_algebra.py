"""Checks for every identity stated in chapter 6 (`chapters/06_linear_algebra.ipynb`).

The chapter derives each statement and checks it once in a notebook cell; these tests re-check
them on fresh, seeded random inputs of several sizes, in float64, with relative errors. Monte
Carlo statements are tested with a z-score against the standard error of the estimate. The
small helpers below (vec, commutation matrix, LU, Gram–Schmidt, ...) mirror the chapter's
inline code, which cannot be imported from a notebook.
"""

import math

import numpy as np
import pytest
import sympy as sp
import torch

SEEDS = [0, 1, 2]


def rel_err(x, ref):
    """‖x − ref‖_F / ‖ref‖_F."""
    x, ref = np.asarray(x, dtype=float), np.asarray(ref, dtype=float)
    return float(np.linalg.norm(x - ref) / np.linalg.norm(ref))


def assert_close(x, ref, tol=1e-11):
    err = rel_err(x, ref)
    assert err < tol, f"relative error {err:.2e} >= {tol:.0e}"


def assert_within_se(samples, exact, z_max=5.0):
    """Monte Carlo mean of `samples` (axis 0) within z_max standard errors of `exact`, entrywise."""
    mean = samples.mean(axis=0)
    se = samples.std(axis=0, ddof=1) / math.sqrt(samples.shape[0])
    z = np.abs(mean - exact) / np.maximum(se, 1e-300)
    assert np.all(z < z_max), f"max |z| = {np.max(z):.2f}"


def vec(X):
    """Column-stacking vec."""
    return X.reshape(-1, order="F")


def commutation_matrix(m, n):
    """K with K vec(A) = vec(Aᵀ) for A of shape (m, n)."""
    K = np.zeros((m * n, m * n))
    for i in range(m):
        for j in range(n):
            K[j + i * n, i + j * m] = 1.0
    return K


def lu_partial_pivoting(A):
    """PA = LU with partial pivoting."""
    n = A.shape[0]
    U, L, perm = A.astype(float).copy(), np.eye(n), np.arange(n)
    for k in range(n - 1):
        p = k + int(np.argmax(np.abs(U[k:, k])))
        U[[k, p]], perm[[k, p]] = U[[p, k]], perm[[p, k]]
        L[[k, p], :k] = L[[p, k], :k]
        if U[k, k] != 0:
            L[k + 1 :, k] = U[k + 1 :, k] / U[k, k]
            U[k + 1 :, k + 1 :] -= np.outer(L[k + 1 :, k], U[k, k + 1 :])
            U[k + 1 :, k] = 0.0
    return np.eye(n)[perm], L, U


def lu_no_pivoting(A):
    n = A.shape[0]
    U, L = A.astype(float).copy(), np.eye(n)
    for k in range(n - 1):
        L[k + 1 :, k] = U[k + 1 :, k] / U[k, k]
        U[k + 1 :, k + 1 :] -= np.outer(L[k + 1 :, k], U[k, k + 1 :])
        U[k + 1 :, k] = 0.0
    return L, U


def gram_schmidt(A, modified=False):
    m, n = A.shape
    Q, R = np.zeros((m, n)), np.zeros((n, n))
    for j in range(n):
        w = A[:, j].copy()
        for i in range(j):
            R[i, j] = Q[:, i] @ (w if modified else A[:, j])
            w -= R[i, j] * Q[:, i]
        R[j, j] = np.linalg.norm(w)
        Q[:, j] = w / R[j, j]
    return Q, R


def forward_substitution(L, b):
    y = np.zeros(len(b))
    for i in range(len(b)):
        y[i] = (b[i] - L[i, :i] @ y[:i]) / L[i, i]
    return y


def back_substitution(U, y):
    x = np.zeros(len(y))
    for i in reversed(range(len(y))):
        x[i] = (y[i] - U[i, i + 1 :] @ x[i + 1 :]) / U[i, i]
    return x


def unit_sphere(count, n, rng):
    g = rng.standard_normal((count, n))
    return g / np.linalg.norm(g, axis=1, keepdims=True)


# ---------------------------------------------------------------- four views


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("m", "k", "n"), [(4, 3, 5), (1, 7, 2), (6, 1, 3)])
def test_four_views_of_a_product(seed, m, k, n):
    rng = np.random.default_rng(seed)
    A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    C = A @ B
    entries = np.array([[A[i] @ B[:, j] for j in range(n)] for i in range(m)])
    columns = np.stack([A @ B[:, j] for j in range(n)], axis=1)
    rows = np.stack([sum(A[i, t] * B[t] for t in range(k)) for i in range(m)])
    outer = sum(np.outer(A[:, t], B[t]) for t in range(k))
    for view in (entries, columns, rows, outer):
        assert_close(view, C)
    assert np.linalg.matrix_rank(C) <= k


def test_outer_product_has_rank_one():
    rng = np.random.default_rng(3)
    assert np.linalg.matrix_rank(np.outer(rng.standard_normal(5), rng.standard_normal(7))) == 1


def test_linear_attention_state_is_a_sum_of_outer_products():
    gen = torch.Generator().manual_seed(4)
    Q, K, V = (torch.randn(37, s, generator=gen, dtype=torch.float64) for s in (6, 6, 5))
    state = torch.zeros(6, 5, dtype=torch.float64)
    for k_j, v_j in zip(K, V, strict=True):
        state += torch.outer(k_j, v_j)
    assert_close(state, K.T @ V)
    assert_close((Q @ K.T) @ V, Q @ (K.T @ V))
    assert torch.linalg.matrix_rank(Q @ K.T).item() <= 6


# ---------------------------------------------------------------- factorizations


def test_cr_factorization_exact():
    A = sp.Matrix([[1, 2, 3, 4], [2, 4, 7, 9], [3, 6, 10, 13]])
    R0, pivots = A.rref()
    C, R = A[:, list(pivots)], R0[: len(pivots), :]
    assert C * R == A
    assert A.rank() == A.T.rank() == len(pivots) == 2


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", [1, 2, 5, 9])
def test_lu_partial_pivoting(seed, n):
    A = np.random.default_rng(seed).standard_normal((n, n))
    P, L, U = lu_partial_pivoting(A)
    assert_close(P @ A, L @ U)
    assert np.allclose(np.triu(L, 1), 0) and np.allclose(np.diag(L), 1)
    assert np.allclose(np.tril(U, -1), 0)
    assert np.abs(L).max() <= 1.0
    assert np.array_equal(P @ P.T, np.eye(n))


def test_lu_pivoting_handles_singular_matrix():
    A = np.array([[0.0, 1.0, 2.0], [0.0, 3.0, 4.0], [0.0, 5.0, 7.0]])  # zero first column
    P, L, U = lu_partial_pivoting(A)
    assert_close(P @ A, L @ U)


def test_permutation_has_no_lu_without_row_exchange():
    l21, u11, u12, u22 = sp.symbols("l21 u11 u12 u22")
    LU = sp.Matrix([[1, 0], [l21, 1]]) * sp.Matrix([[u11, u12], [0, u22]])
    assert sp.solve(list(LU - sp.Matrix([[0, 1], [1, 0]])), [l21, u11, u12, u22]) == []


def test_tiny_pivot_needs_pivoting():
    A = np.array([[1e-20, 1.0], [1.0, 1.0]])
    L0, U0 = lu_no_pivoting(A)
    assert rel_err(L0 @ U0, A) > 0.1
    P, L, U = lu_partial_pivoting(A)
    assert rel_err(L @ U, P @ A) < 1e-15


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("m", "n"), [(8, 5), (5, 5), (30, 7)])
def test_gram_schmidt_qr_and_uniqueness(seed, m, n):
    A = np.random.default_rng(seed).standard_normal((m, n))
    for modified in (False, True):
        Q, R = gram_schmidt(A, modified)
        assert_close(Q @ R, A)
        assert_close(Q.T @ Q, np.eye(n))
        assert np.allclose(np.tril(R, -1), 0) and np.all(np.diag(R) > 0)
        Qn, Rn = np.linalg.qr(A)
        signs = np.sign(np.diag(Rn))
        assert_close(Qn * signs, Q, tol=1e-9)
        assert_close(signs[:, None] * Rn, R, tol=1e-9)


def test_classical_gram_schmidt_loses_orthogonality():
    A = np.vander(np.linspace(0, 1, 50), 12, increasing=True)
    loss = {
        "classical": gram_schmidt(A)[0],
        "modified": gram_schmidt(A, modified=True)[0],
        "householder": np.linalg.qr(A)[0],
    }
    loss = {k: np.linalg.norm(q.T @ q - np.eye(12)) for k, q in loss.items()}
    assert loss["classical"] > 0.1
    assert 1e-12 < loss["modified"] < 1e-6
    assert loss["householder"] < 1e-13


@pytest.mark.parametrize("seed", SEEDS)
def test_det_and_trace_are_product_and_sum_of_eigenvalues(seed):
    G = np.random.default_rng(seed).standard_normal((7, 7))
    lam = np.linalg.eigvals(G)
    assert_close(np.prod(lam).real, np.linalg.det(G))
    assert_close(np.sum(lam).real, np.trace(G))
    J = np.array([[2.0, 1.0], [0.0, 2.0]])  # defective: the theorem needs no eigenbasis
    assert_close(np.prod(np.linalg.eigvals(J)).real, np.linalg.det(J))


@pytest.mark.parametrize("seed", SEEDS)
def test_spectral_theorem_and_diagonalization(seed):
    rng = np.random.default_rng(seed)
    G = rng.standard_normal((6, 6))
    S = G + G.T
    lam, Q = np.linalg.eigh(S)
    assert_close(Q @ np.diag(lam) @ Q.T, S)
    assert_close(Q.T @ Q, np.eye(6))
    mu, P = np.linalg.eig(G)
    assert_close((P @ np.diag(mu**4) @ np.linalg.inv(P)).real, np.linalg.matrix_power(G, 4))


def test_document_eigen_example_and_defective_matrix():
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
    assert_close(U @ Sigma @ Vt, A)
    assert_close(U.T @ U, np.eye(m))
    assert_close(Vt @ Vt.T, np.eye(n))
    assert np.all(np.diff(s) <= 1e-12) and np.all(s >= 0)
    assert int(np.sum(s > 1e-10 * s[0])) == r == np.linalg.matrix_rank(A)
    assert_close(sum(s[i] * np.outer(U[:, i], Vt[i]) for i in range(r)), A)
    assert_close(U[:, :r] @ np.diag(s[:r]) @ Vt[:r], A)
    x = rng.standard_normal(n)
    assert_close(sum(s[i] * (Vt[i] @ x) * U[:, i] for i in range(r)), A @ x)


def test_document_svd_example():
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

    def rank_one_sum(coeffs):
        return sum((c * U[:, i] * Vt[i, :] for i, c in enumerate(coeffs)), sp.zeros(4, 5))

    assert rank_one_sum([3, sp.sqrt(5), 2]) == A
    assert rank_one_sum([3, 3, 2]) != A  # the coefficient printed in document 004
    assert U[:, :3] * sp.diag(3, sp.sqrt(5), 2) * Vt[:3, :] == A
    U2, Vt2 = U.copy(), Vt.copy()
    U2[:, 0], Vt2[0, :] = -U[:, 0], -Vt[0, :]
    assert U2 * Sigma * Vt2 == A
    t = sp.Symbol("t")
    Vt3 = Vt.copy()
    Vt3[3:, :] = sp.Matrix([[sp.cos(t), -sp.sin(t)], [sp.sin(t), sp.cos(t)]]) * Vt[3:, :]
    assert sp.simplify(U * Sigma * Vt3 - A) == sp.zeros(4, 5)
    x = sp.Matrix([-r5, 0, 2, 0, -r45])
    assert list(Vt * x) == [-2, 1, 0, 0, 0]
    assert A * x == sp.Matrix([-sp.sqrt(5), 6, 0, 0])


def test_torch_svd_conventions():
    X = torch.randn(5, 3, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    U, S, Vh = torch.linalg.svd(X, full_matrices=False)
    assert_close(U @ torch.diag(S) @ Vh, X)
    U2, S2, V2 = torch.svd(X)
    assert_close(U2 @ torch.diag(S2) @ V2.T, X)


@pytest.mark.parametrize("seed", SEEDS)
def test_evd_svd_relation(seed):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((7, 4))
    U, s, Vt = np.linalg.svd(A)
    assert_close(Vt.T @ np.diag(s**2) @ Vt, A.T @ A)
    assert_close(U[:, :4] @ np.diag(s**2) @ U[:, :4].T, A @ A.T)
    assert_close(np.sqrt(np.linalg.eigvalsh(A.T @ A)[::-1]), s)
    G = rng.standard_normal((5, 5))
    S = G + G.T
    lam, Q = np.linalg.eigh(S)
    assert_close(np.sort(np.abs(lam))[::-1], np.linalg.svd(S, compute_uv=False))
    order = np.argsort(-np.abs(lam))
    Uq, Vq = Q[:, order], Q[:, order] * np.sign(lam[order])
    assert_close(Uq @ np.diag(np.abs(lam[order])) @ Vq.T, S)
    P = G @ G.T  # positive definite: SVD = EVD
    assert_close(np.linalg.svd(P, compute_uv=False), np.linalg.eigvalsh(P)[::-1])
    N = np.array([[1.0, 100.0], [0.0, 1.0]])
    assert np.allclose(np.linalg.eigvals(N), 1) and np.linalg.svd(N, compute_uv=False)[0] > 100


# ---------------------------------------------------------------- rotations


def rot_x(t):
    c, s = np.cos(t), np.sin(t)
    return np.array([[1, 0, 0], [0, c, -s], [0, s, c]])


def rot_y(t):
    c, s = np.cos(t), np.sin(t)
    return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])


def rot_z(t):
    c, s = np.cos(t), np.sin(t)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])


def test_plane_rotations_sympy():
    a, b = sp.symbols("a b", real=True)

    def rot(t):
        return sp.Matrix([[sp.cos(t), -sp.sin(t)], [sp.sin(t), sp.cos(t)]])

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
    assert_close(R.T @ R, np.eye(3))
    assert abs(np.linalg.det(R) - 1) < 1e-12
    assert np.allclose(np.abs(np.linalg.eigvals(R)), 1)
    assert rel_err(rot_x(a) @ rot_y(b), rot_y(b) @ rot_x(a)) > 1e-3
    lam, vecs = np.linalg.eig(R)
    axis = vecs[:, np.argmin(np.abs(lam - 1))].real
    assert_close(R @ axis, axis)
    phi = np.arccos(np.clip((np.trace(R) - 1) / 2, -1, 1))
    expected = np.array([1, np.exp(1j * phi), np.exp(-1j * phi)])
    assert np.allclose(np.sort_complex(lam), np.sort_complex(expected))
    x, y = rng.standard_normal(3), rng.standard_normal(3)
    assert math.isclose((R @ x) @ (R @ y), x @ y, rel_tol=1e-12, abs_tol=1e-12)


def test_householder_reflection_is_orthogonal_with_det_minus_one():
    u = np.array([1.0, 2.0, 2.0]) / 3
    H = np.eye(3) - 2 * np.outer(u, u)
    assert_close(H.T @ H, np.eye(3))
    assert abs(np.linalg.det(H) + 1) < 1e-12


def rope_matrix(m, d, base=10000.0):
    R = np.zeros((d, d))
    for i, theta in enumerate(base ** (-np.arange(0, d, 2) / d)):
        c, s = np.cos(m * theta), np.sin(m * theta)
        R[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, -s], [s, c]]
    return R


def rope_apply(x, m, base=10000.0):
    angles = np.repeat(m * base ** (-np.arange(0, x.shape[-1], 2) / x.shape[-1]), 2)
    rotated = np.stack([-x[..., 1::2], x[..., ::2]], axis=-1).reshape(x.shape)
    return x * np.cos(angles) + rotated * np.sin(angles)


@pytest.mark.parametrize(("m", "n", "d"), [(3, 10, 16), (0, 5, 2), (17, 4, 64)])
def test_rope_depends_on_offset_only(m, n, d):
    rng = np.random.default_rng(m + n + d)
    q, k = rng.standard_normal(d), rng.standard_normal(d)
    assert_close(rope_matrix(m, d).T @ rope_matrix(n, d), rope_matrix(n - m, d))
    assert_close(
        (rope_matrix(m, d) @ q) @ (rope_matrix(n, d) @ k), q @ rope_matrix(n - m, d) @ k, tol=1e-10
    )
    assert_close(rope_apply(q, m if m else 1), rope_matrix(m if m else 1, d) @ q)


# ---------------------------------------------------------------- determinant, trace, rank, inverse


def det_cofactor(A):
    if A.shape[0] == 1:
        return A[0, 0]
    return sum(
        (-1) ** j * A[0, j] * det_cofactor(np.delete(A[1:], j, axis=1)) for j in range(A.shape[0])
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", [1, 3, 5])
def test_determinant_properties(seed, n):
    rng = np.random.default_rng(seed)
    A, B = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    det = np.linalg.det
    assert_close(det_cofactor(A), det(A))
    assert_close(det(A @ B), det(A) * det(B))
    assert_close(det(A.T), det(A))
    assert_close(det(np.linalg.inv(A)), 1 / det(A))
    assert_close(det(-1.7 * A), (-1.7) ** n * det(A))
    assert_close(det(np.triu(A)), np.prod(np.diag(A)))
    P, _, U = lu_partial_pivoting(A)
    assert_close(det(P) * np.prod(np.diag(U)), det(A))
    assert_close(abs(det(A)), np.prod(np.abs(np.diag(np.linalg.qr(A)[1]))))


def test_2x2_determinant_and_signed_area():
    a11, a12, a21, a22 = sp.symbols("a11 a12 a21 a22")
    assert sp.Matrix([[a11, a12], [a21, a22]]).det() == a11 * a22 - a12 * a21

    def polygon_area(points):
        x, y = points
        return 0.5 * np.sum(x * np.roll(y, -1) - np.roll(x, -1) * y)

    square = np.array([[0, 1, 1, 0], [0, 0, 1, 1]], dtype=float)
    rng = np.random.default_rng(5)
    for _ in range(5):
        M = rng.standard_normal((2, 2))
        assert math.isclose(polygon_area(M @ square), np.linalg.det(M), rel_tol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_trace_properties(seed):
    rng = np.random.default_rng(seed)
    A, B, C = rng.standard_normal((3, 5)), rng.standard_normal((5, 4)), rng.standard_normal((4, 3))
    Bt, D = rng.standard_normal((5, 3)), rng.standard_normal((3, 5))
    tr = np.trace
    assert_close(tr(A @ Bt), tr(Bt @ A))
    assert_close([tr(A @ B @ C), tr(B @ C @ A)], [tr(C @ A @ B)] * 2)
    S1, S2, S3, P = (rng.standard_normal((4, 4)) for _ in range(4))
    assert abs(tr(S1 @ S2 @ S3) - tr(S1 @ S3 @ S2)) > 1e-6
    assert_close(tr(np.linalg.inv(P) @ S1 @ P), tr(S1))
    x = rng.standard_normal(6)
    assert_close(tr(np.outer(x, x)), x @ x)
    assert_close(np.linalg.norm(A, "fro") ** 2, tr(A.T @ A))
    assert_close(tr(A.T @ D), np.sum(A * D))
    assert_close(tr(2 * S1 - 3 * S2), 2 * tr(S1) - 3 * tr(S2))
    assert_close(tr(S1.T), tr(S1))
    M = rng.standard_normal((7, 7))
    assert_close(tr(M), tr(M[:3, :3]) + tr(M[3:, 3:]))
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
    assert_close(F @ G, A)


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
    Q, K = (torch.randn(64, 8, generator=gen, dtype=torch.float64) for _ in range(2))
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
    assert_close(inv(inv(A)), A, tol=1e-9)
    assert_close(inv(A.T), inv(A).T)
    assert_close(inv(-3.0 * A), inv(A) / -3.0)
    assert_close(inv(A @ B), inv(B) @ inv(A), tol=1e-9)
    assert_close(inv(A @ A @ A), inv(A) @ inv(A) @ inv(A), tol=1e-9)
    assert_close(inv(inv(B) @ A @ B), inv(B) @ inv(A) @ B, tol=1e-9)


@pytest.mark.parametrize("seed", SEEDS)
def test_inverse_of_structured_matrices(seed):
    rng = np.random.default_rng(seed)
    inv = np.linalg.inv
    A = rng.standard_normal((5, 5))
    Q = np.linalg.qr(A)[0]
    assert_close(inv(Q), Q.T)
    d = rng.uniform(0.5, 2.0, 5)
    assert_close(inv(np.diag(d)), np.diag(1 / d))
    L = np.tril(A) + 5 * np.eye(5)
    assert np.allclose(np.triu(inv(L), 1), 0)
    assert np.allclose(np.tril(inv(L.T), -1), 0)
    S = A + A.T
    assert_close(inv(S), inv(S).T)
    B1, B2 = rng.standard_normal((2, 2)), rng.standard_normal((3, 3))
    Bd = np.block([[B1, np.zeros((2, 3))], [np.zeros((3, 2)), B2]])
    expected = np.block([[inv(B1), np.zeros((2, 3))], [np.zeros((3, 2)), inv(B2)]])
    assert_close(inv(Bd), expected, tol=1e-9)


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


# ---------------------------------------------------------------- linear systems


def classify(A, b):
    rank = np.linalg.matrix_rank
    r, r_aug, n = rank(A), rank(np.column_stack([A, b])), A.shape[1]
    if r < r_aug:
        return "none"
    return "unique" if r == n else "infinite"


def test_rouche_capelli_cases():
    A = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    assert classify(A, np.array([1.0, 1.0, 2.0])) == "unique"
    # rank A = n = 2, yet no solution: "unique iff rank A = n" (document 004) is false
    assert np.linalg.matrix_rank(A) == 2
    assert classify(A, np.array([1.0, 1.0, 0.0])) == "none"
    A2 = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0]])
    b2 = np.array([1.0, 2.0])
    assert classify(A2, b2) == "infinite"
    x0 = np.linalg.lstsq(A2, b2, rcond=None)[0]
    null = np.linalg.svd(A2)[2][1:].T  # dimension n − rank = 2
    assert null.shape[1] == 2
    assert_close(A2 @ (x0 + null @ np.array([0.3, -1.2])), b2)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", [1, 4, 11])
def test_lu_solve_with_substitution(seed, n):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n, n))
    P, L, U = lu_partial_pivoting(A)
    for _ in range(3):
        b = rng.standard_normal(n)
        x = back_substitution(U, forward_substitution(L, P @ b))
        assert_close(x, np.linalg.solve(A, b), tol=1e-9)


# ---------------------------------------------------------------- Kronecker and vec


@pytest.mark.parametrize("seed", SEEDS)
def test_kronecker_algebra(seed):
    rng = np.random.default_rng(seed)
    kron = np.kron
    A, A2 = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    B, B2 = rng.standard_normal((4, 2)), rng.standard_normal((4, 2))
    C, D = rng.standard_normal((3, 2)), rng.standard_normal((2, 5))
    assert_close([kron(2.5 * A, B), kron(A, 2.5 * B)], [2.5 * kron(A, B)] * 2)
    assert_close(kron(A + A2, B), kron(A, B) + kron(A2, B))
    assert_close(kron(A, B + B2), kron(A, B) + kron(A, B2))
    assert_close(kron(kron(A, B), C), kron(A, kron(B, C)))
    assert rel_err(kron(A[:, :2], B[:2]), kron(B[:2], A[:, :2])) > 1e-3
    assert_close(kron(A, B).T, kron(A.T, B.T))
    assert_close(kron(A, B) @ kron(C, D), kron(A @ C, B @ D))
    assert_close(kron(np.eye(3), np.eye(4)), np.eye(12))
    S, T = rng.standard_normal((3, 3)), rng.standard_normal((3, 3))
    assert_close(kron(np.eye(2), S) @ kron(np.eye(2), T), kron(np.eye(2), S @ T))


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
    A, B = rng.standard_normal((m, m)), rng.standard_normal((n, n))
    K = np.kron(A, B)
    assert_close(np.linalg.inv(K), np.kron(np.linalg.inv(A), np.linalg.inv(B)), tol=1e-9)
    assert_close(np.trace(K), np.trace(A) * np.trace(B))
    det = np.linalg.det
    assert_close(det(K), det(A) ** n * det(B) ** m)
    if m != n:
        assert rel_err(det(A) ** m * det(B) ** n, det(K)) > 1e-6
    lam = np.sort_complex(np.outer(np.linalg.eigvals(A), np.linalg.eigvals(B)).ravel())
    assert np.allclose(np.sort_complex(np.linalg.eigvals(K)), lam)


@pytest.mark.parametrize("seed", SEEDS)
def test_kronecker_singular_values_rank_norms(seed):
    rng = np.random.default_rng(seed)
    A, B = rng.standard_normal((2, 3)), rng.standard_normal((4, 2))
    sv = np.linalg.svd(np.kron(A, B), compute_uv=False)[:4]
    sa, sb = np.linalg.svd(A, compute_uv=False), np.linalg.svd(B, compute_uv=False)
    assert_close(sv, np.sort(np.outer(sa, sb).ravel())[::-1])
    Ar = rng.standard_normal((4, 2)) @ rng.standard_normal((2, 5))
    Br = rng.standard_normal((3, 1)) @ rng.standard_normal((1, 3))
    rank = np.linalg.matrix_rank
    assert rank(np.kron(Ar, Br)) == rank(Ar) * rank(Br) == 2
    assert_close(np.linalg.norm(np.kron(A, B), 2), np.linalg.norm(A, 2) * np.linalg.norm(B, 2))
    assert_close(np.linalg.norm(np.kron(A, B)), np.linalg.norm(A) * np.linalg.norm(B))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("m", "n", "p", "q"), [(3, 4, 5, 2), (1, 3, 2, 1), (4, 4, 4, 4)])
def test_vec_identities(seed, m, n, p, q):
    rng = np.random.default_rng(seed)
    kron = np.kron
    A, X, B = rng.standard_normal((m, n)), rng.standard_normal((n, p)), rng.standard_normal((p, q))
    assert_close(vec(A @ X @ B), kron(B.T, A) @ vec(X))
    assert_close(vec(A @ X), kron(np.eye(p), A) @ vec(X))
    assert_close(vec(X @ B), kron(B.T, np.eye(n)) @ vec(X))
    x = rng.standard_normal(n)
    assert_close(A @ x, kron(x[None, :], np.eye(m)) @ vec(A))
    a, b = rng.standard_normal(m), rng.standard_normal(n)
    assert_close(vec(np.outer(a, b)), kron(b, a))
    Y = rng.standard_normal((m, n))
    assert_close(np.trace(A.T @ Y), vec(A) @ vec(Y))
    assert_close(vec(2 * A - 3 * Y), 2 * vec(A) - 3 * vec(Y))


@pytest.mark.parametrize("seed", SEEDS)
def test_vec_of_triple_product_three_ways(seed):
    rng = np.random.default_rng(seed)
    kron = np.kron
    m, n, k, p = 2, 3, 4, 5
    A, B, C = rng.standard_normal((m, n)), rng.standard_normal((n, k)), rng.standard_normal((k, p))
    P = vec(A @ B @ C)
    assert_close(kron(C.T @ B.T, np.eye(m)) @ vec(A), P)
    assert_close(kron(C.T, A) @ vec(B), P)
    assert_close(kron(np.eye(p), A @ B) @ vec(C), P)


@pytest.mark.parametrize("seed", SEEDS)
def test_quadratic_form_identity(seed):
    rng = np.random.default_rng(seed)
    m, n = 3, 4
    X, B = rng.standard_normal((m, n)), rng.standard_normal((n, n))
    a, c = rng.standard_normal(m), rng.standard_normal(m)
    lhs = a @ X @ B @ X.T @ c
    assert_close(vec(X) @ np.kron(B.T, np.outer(c, a)) @ vec(X), lhs)
    assert_close(vec(X) @ np.kron(B, np.outer(a, c)) @ vec(X), lhs)
    document_version = vec(X) @ np.kron(B, np.outer(c, a)) @ vec(X)
    assert rel_err(document_version, lhs) > 1e-6
    assert_close(document_version, a @ X @ B.T @ X.T @ c)
    S = B + B.T
    assert_close(vec(X) @ np.kron(S, np.outer(c, a)) @ vec(X), a @ X @ S @ X.T @ c)


@pytest.mark.parametrize("seed", SEEDS)
def test_row_major_vec(seed):
    rng = np.random.default_rng(seed)
    A, X, B = rng.standard_normal((3, 4)), rng.standard_normal((4, 5)), rng.standard_normal((5, 2))
    assert_close((A @ X @ B).reshape(-1), np.kron(A, B.T) @ X.reshape(-1))
    Xt = torch.from_numpy(X)
    assert torch.equal(Xt.reshape(-1), torch.from_numpy(vec(X.T)))
    assert torch.equal(Xt.T.reshape(-1), torch.from_numpy(vec(X)))
    Xr, W = rng.standard_normal((5, 3)), rng.standard_normal((4, 3))  # linear layer, row layout
    assert_close((Xr @ W.T).reshape(-1), np.kron(np.eye(5), W) @ Xr.reshape(-1))


def test_commutation_matrix_document_example():
    A = np.array([[1, 4], [2, 5], [3, 6]], dtype=float)
    K = commutation_matrix(3, 2)
    assert vec(A).tolist() == [1, 2, 3, 4, 5, 6]
    assert (K @ vec(A)).tolist() == [1, 4, 2, 5, 3, 6] == vec(A.T).tolist()
    doc_K = np.zeros((6, 6))
    doc_K[[0, 1, 2, 3, 4, 5], [0, 3, 1, 4, 2, 5]] = 1
    assert np.array_equal(K, doc_K)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("m", "n", "p", "q"), [(3, 4, 2, 5), (1, 3, 3, 1), (2, 2, 2, 2)])
def test_commutation_matrix_properties(seed, m, n, p, q):
    rng = np.random.default_rng(seed)
    A, B = rng.standard_normal((m, n)), rng.standard_normal((p, q))
    K = commutation_matrix(m, n)
    assert np.array_equal(K @ vec(A), vec(A.T))
    assert np.array_equal(K.T, commutation_matrix(n, m))
    assert np.array_equal(K.T @ K, np.eye(m * n))
    assert np.array_equal(K.sum(0), np.ones(m * n)) and np.array_equal(K.sum(1), np.ones(m * n))
    assert_close(commutation_matrix(p, m) @ np.kron(A, B) @ commutation_matrix(n, q), np.kron(B, A))


def test_commutation_matrix_spectrum_and_trace():
    for n in (1, 2, 3, 4, 5):
        K = commutation_matrix(n, n)
        ev = np.linalg.eigvalsh(K)
        assert np.array_equal(K, K.T)
        assert np.sum(np.isclose(ev, 1)) == n * (n + 1) // 2
        assert np.sum(np.isclose(ev, -1)) == n * (n - 1) // 2
    assert np.array_equal(commutation_matrix(1, 6), np.eye(6))
    assert np.array_equal(commutation_matrix(6, 1), np.eye(6))
    for m in range(1, 10):
        for n in range(1, 10):
            assert np.trace(commutation_matrix(m, n)) == 1 + math.gcd(m - 1, n - 1)


def test_exercise_kron_det_via_commutation():
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((3, 3)), rng.standard_normal((4, 4))
    K_nm, K_mn = commutation_matrix(4, 3), commutation_matrix(3, 4)
    assert_close(K_nm @ np.kron(A, np.eye(4)) @ K_mn, np.kron(np.eye(4), A))
    assert_close(np.kron(A, np.eye(4)) @ np.kron(np.eye(3), B), np.kron(A, B))


# ---------------------------------------------------------------- expectation and covariance


def test_moment_identities_monte_carlo():
    rng = np.random.default_rng(18)
    S, n = 100_000, 3
    m = np.array([1.0, -2.0, 0.5])
    L = np.array([[1.0, 0.0, 0.0], [0.6, 0.8, 0.0], [-0.3, 0.4, 0.7]])
    M = L @ L.T
    x = m + (rng.exponential(size=(S, n)) - 1.0) @ L.T  # skewed, mean m, covariance M
    A, B = rng.standard_normal((2, n)), rng.standard_normal((4, n))
    a, b = rng.standard_normal(2), rng.standard_normal(4)
    Am, Bm = A @ m + a, B @ m + b
    assert_within_se(x @ A.T + a, Am)
    Ax_c = (x - m) @ A.T
    assert_within_se(Ax_c[:, :, None] * Ax_c[:, None, :], A @ M @ A.T)
    F = rng.standard_normal((3, n))
    y = x @ F.T + rng.standard_normal((S, 3))
    By_c = (y - m @ F.T) @ B[:, :3].T
    assert_within_se(Ax_c[:, :, None] * By_c[:, None, :], A @ M @ F.T @ B[:, :3].T)
    outer = (x @ A.T + a)[:, :, None] * (x @ B.T + b)[:, None, :]
    assert_within_se(outer, A @ M @ B.T + np.outer(Am, Bm))
    assert_within_se(x[:, :, None] * x[:, None, :], M + np.outer(m, m))
    c = rng.standard_normal(n)
    assert_within_se(x * (x @ c)[:, None], (M + np.outer(m, m)) @ c)
    assert_within_se((x @ c)[:, None] * x, c @ (M + np.outer(m, m)))
    assert_within_se((x @ A.T)[:, :, None] * (x @ A.T)[:, None, :], A @ (M + np.outer(m, m)) @ A.T)
    assert_within_se((x + c)[:, :, None] * (x + c)[:, None, :], M + np.outer(m + c, m + c))
    A2, B2 = rng.standard_normal((4, n)), rng.standard_normal((4, n))
    a2, b2 = rng.standard_normal(4), rng.standard_normal(4)
    assert_within_se(
        np.sum((x @ A2.T + a2) * (x @ B2.T + b2), axis=1),
        np.trace(A2 @ M @ B2.T) + (A2 @ m + a2) @ (B2 @ m + b2),
    )
    assert_within_se(np.sum(x * x, axis=1), np.trace(M) + m @ m)
    Cq = rng.standard_normal((n, n))
    assert_within_se(np.einsum("si,ij,sj->s", x, Cq, x), np.trace(Cq @ M) + m @ Cq @ m)
    assert_within_se(
        np.sum((x @ A2.T) ** 2, axis=1), np.trace(A2 @ M @ A2.T) + np.sum((A2 @ m) ** 2)
    )
    assert_within_se(np.sum((x + c) ** 2, axis=1), np.trace(M) + np.sum((m + c) ** 2))


def test_expectation_of_random_matrix_expression():
    rng = np.random.default_rng(19)
    S = 50_000
    EX = np.array([[1.0, -1.0, 0.5], [2.0, 0.0, -0.5]])
    X = EX + rng.standard_normal((S, 2, 3))
    A, B, C = rng.standard_normal((4, 2)), rng.standard_normal((3, 2)), rng.standard_normal((4, 2))
    assert_within_se(A @ X @ B + C, A @ EX @ B + C)


def gaussian_density(x, mean, cov):
    diff = x - mean
    quad = np.einsum("si,ij,sj->s", diff, np.linalg.inv(cov), diff)
    return np.exp(-0.5 * quad) / np.sqrt(np.linalg.det(2 * np.pi * cov))


def test_gaussian_density_normalization_and_moments():
    mean = np.array([0.5, -1.0])
    cov = np.array([[2.0, 0.8], [0.8, 1.0]])
    assert_close(np.linalg.det(2 * np.pi * cov), (2 * np.pi) ** 2 * np.linalg.det(cov))
    h = 0.02
    g1, g2 = np.meshgrid(np.arange(-12, 13, h), np.arange(-12, 11, h), indexing="ij")
    grid = np.column_stack([g1.ravel(), g2.ravel()])
    w = gaussian_density(grid, mean, cov) * h * h
    assert_close(w.sum(), 1.0, tol=1e-10)
    assert_close(w @ grid, mean, tol=1e-10)
    assert_close((grid * w[:, None]).T @ grid, cov + np.outer(mean, mean), tol=1e-10)


@pytest.mark.parametrize("d", [1, 2, 5])
def test_gaussian_density_matches_torch(d):
    rng = np.random.default_rng(d)
    G = rng.standard_normal((d, d))
    cov, mean = G @ G.T + 0.5 * np.eye(d), rng.standard_normal(d)
    mvn = torch.distributions.MultivariateNormal(
        torch.from_numpy(mean), covariance_matrix=torch.from_numpy(cov)
    )
    pts = rng.standard_normal((7, d))
    assert_close(
        np.log(gaussian_density(pts, mean, cov)), mvn.log_prob(torch.from_numpy(pts)).numpy()
    )


def test_gaussian_linear_map_moments():
    rng = np.random.default_rng(20)
    mean, cov = np.array([0.5, -1.0]), np.array([[2.0, 0.8], [0.8, 1.0]])
    x = mean + rng.standard_normal((100_000, 2)) @ np.linalg.cholesky(cov).T
    assert_within_se(x, mean)
    assert_within_se((x - mean)[:, :, None] * (x - mean)[:, None, :], cov)
    A, b = rng.standard_normal((3, 2)), rng.standard_normal(3)
    y = x @ A.T + b
    assert_within_se(y, A @ mean + b)
    yc = y - (A @ mean + b)
    assert_within_se(yc[:, :, None] * yc[:, None, :], A @ cov @ A.T)


# ---------------------------------------------------------------- least squares and LMS


@pytest.mark.parametrize("seed", SEEDS)
def test_normal_equations(seed):
    rng = np.random.default_rng(seed)
    A, b = rng.standard_normal((50, 6)), rng.standard_normal(50)
    x = np.linalg.solve(A.T @ A, A.T @ b)
    ref = np.linalg.lstsq(A, b, rcond=None)[0]
    assert_close(x, ref, tol=1e-10)
    Q, R = np.linalg.qr(A)
    assert_close(back_substitution(R, Q.T @ b), ref, tol=1e-10)
    r = b - A @ x
    assert np.abs(A.T @ r).max() < 1e-10 * np.linalg.norm(A) * np.linalg.norm(b)
    J = r @ r
    for h in 1e-3 * rng.standard_normal((5, 6)):
        assert np.sum((A @ (x + h) - b) ** 2) > J
        assert math.isclose(np.sum((A @ (x + h) - b) ** 2), J + np.sum((A @ h) ** 2), rel_tol=1e-9)


def test_normal_equations_square_the_condition_number():
    rng = np.random.default_rng(21)
    U, _, Vt = np.linalg.svd(rng.standard_normal((50, 6)), full_matrices=False)
    A = U @ np.diag(np.logspace(0, -7, 6)) @ Vt
    assert abs(np.log10(np.linalg.cond(A.T @ A)) - 2 * np.log10(np.linalg.cond(A))) < 0.5
    x_true = rng.standard_normal(6)
    b = A @ x_true
    Q, R = np.linalg.qr(A)
    assert rel_err(np.linalg.solve(A.T @ A, A.T @ b), x_true) > 1e-4
    assert rel_err(back_substitution(R, Q.T @ b), x_true) < 1e-6


@pytest.mark.parametrize("seed", SEEDS)
def test_batch_lms_rate(seed):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((200, 10)) * np.linspace(1.0, 0.3, 10)
    b = A @ rng.standard_normal(10) + 0.1 * rng.standard_normal(200)
    x_star = np.linalg.lstsq(A, b, rcond=None)[0]
    lam = np.linalg.eigvalsh(A.T @ A)
    mu_opt = 1 / (lam[-1] + lam[0])
    kappa2 = lam[-1] / lam[0]
    assert math.isclose(np.max(np.abs(1 - 2 * mu_opt * lam)), (kappa2 - 1) / (kappa2 + 1))
    for mu in (0.25 / lam[-1], 0.5 / lam[-1], mu_opt, 0.99 / lam[-1], 1.02 / lam[-1]):
        rho = np.max(np.abs(1 - 2 * mu * lam))
        x = np.zeros(10)
        e0 = np.linalg.norm(x - x_star)
        for k in range(1, 101):
            x = x - 2 * mu * A.T @ (A @ x - b)
            assert np.linalg.norm(x - x_star) <= rho**k * e0 * (1 + 1e-8) + 1e-12
        assert (np.linalg.norm(x - x_star) < e0) == (mu < 1 / lam[-1])


def test_online_lms_mean_square_recursion():
    rng = np.random.default_rng(22)
    n, runs, steps, sigma = 8, 4000, 120, 0.5
    x_star = rng.standard_normal(n)
    for mu in (0.05, 0.02):
        x = np.zeros((runs, n))
        p = float(x_star @ x_star)
        for _ in range(steps):
            a = rng.standard_normal((runs, n))
            b = a @ x_star + sigma * rng.standard_normal(runs)
            x += mu * (b - np.sum(a * x, axis=1))[:, None] * a
            p = (1 - 2 * mu + (n + 2) * mu**2) * p + n * mu**2 * sigma**2
        mean_err = (1 - mu) ** steps * (0 - x_star)
        assert_within_se(np.sum((x - x_star) ** 2, axis=1), p)
        assert_within_se(x - x_star, mean_err)
        p_inf = n * mu * sigma**2 / (2 - (n + 2) * mu)
        c = 1 - 2 * mu + (n + 2) * mu**2
        assert math.isclose(c * p_inf + n * mu**2 * sigma**2, p_inf)


def test_delta_rule_is_online_lms():
    rng = np.random.default_rng(23)
    d_k, d_v, T = 6, 4, 50
    keys = rng.standard_normal((T, d_k))
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    values, beta = rng.standard_normal((T, d_v)), rng.uniform(0.1, 1.0, T)
    S, rows = np.zeros((d_v, d_k)), np.zeros((d_v, d_k))
    for k_t, v_t, b_t in zip(keys, values, beta, strict=True):
        S = S + b_t * np.outer(v_t - S @ k_t, k_t)
        for r in range(d_v):
            rows[r] += b_t * (v_t[r] - rows[r] @ k_t) * k_t
    assert_close(S, rows)
    S1 = S + np.outer(values[0] - S @ keys[0], keys[0])
    assert_close(S1 @ keys[0], values[0])


# ---------------------------------------------------------------- power iteration


def power_iteration(A, x0, steps):
    xs, x = [], x0 / np.linalg.norm(x0)
    for _ in range(steps):
        x = A @ x
        x = x / np.linalg.norm(x)
        xs.append(x)
    xs = np.array(xs)
    return xs, np.einsum("ki,ij,kj->k", xs, A, xs)


def test_power_iteration_document_example():
    A = np.array([[4.0, 1.0], [1.0, 3.0]])
    _, r = power_iteration(A, np.random.default_rng(24).standard_normal(2), 30)
    assert abs(r[-1] - (7 + math.sqrt(5)) / 2) < 1e-12
    assert math.isclose(np.linalg.eigvalsh(A)[0], (7 - math.sqrt(5)) / 2)


@pytest.mark.parametrize("ratio", [0.5, 0.9, 0.97])
def test_power_iteration_bounds(ratio):
    rng = np.random.default_rng(int(ratio * 100))
    n = 30
    spectrum = np.concatenate([[1.0, ratio], np.linspace(-0.9 * ratio, 0.9 * ratio, n - 2)])
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    A = Q @ np.diag(spectrum) @ Q.T
    x0 = rng.standard_normal(n)
    xs, r = power_iteration(A, x0, 400)
    v1 = Q[:, 0]

    def tan_angle(x):
        along = x @ v1
        return np.linalg.norm(x - np.outer(along, v1), axis=-1) / np.abs(along)

    tan0 = tan_angle(x0[None, :] / np.linalg.norm(x0))[0]
    tans = tan_angle(xs)
    k = np.arange(1, 401)
    assert np.all(tans <= ratio**k * tan0 * (1 + 1e-8) + 1e-13)
    sin2 = tans**2 / (1 + tans**2)
    assert np.all(np.abs(r - 1) <= (1 - spectrum.min()) * sin2 + 1e-13)


def test_rayleigh_quotient_rate_for_nonsymmetric_matrix():
    rng = np.random.default_rng(3)
    P = rng.standard_normal((6, 6))
    A = P @ np.diag([1.0, 0.8, 0.5, 0.3, 0.2, 0.1]) @ np.linalg.inv(P)
    _, r = power_iteration(A, rng.standard_normal(6), 60)
    err = np.abs(r - 1.0)
    assert np.allclose(err[41:45] / err[40:44], 0.8, atol=0.02)


# ---------------------------------------------------------------- norms


def test_vector_norm_inequalities():
    rng = np.random.default_rng(27)
    n = 8
    ps = [1, 1.5, 2, 3, 7, np.inf]
    for x in rng.standard_normal((200, n)):
        for i, p in enumerate(ps):
            for q in ps[i:]:
                nq, np_ = np.linalg.norm(x, q), np.linalg.norm(x, p)
                assert nq <= np_ * (1 + 1e-12)
                assert np_ <= n ** (1 / p - 1 / q) * nq * (1 + 1e-12)
    e1, ones = np.eye(n)[0], np.ones(n)
    assert np.linalg.norm(e1, 1) == np.linalg.norm(e1, np.inf) == np.linalg.norm(e1, 2)
    assert math.isclose(np.linalg.norm(ones, 1), math.sqrt(n) * np.linalg.norm(ones, 2))
    assert math.isclose(np.linalg.norm(ones, 1), n * np.linalg.norm(ones, np.inf))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("m", "n"), [(5, 6), (6, 3), (1, 4)])
def test_induced_norm_formulas(seed, m, n):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, n))
    col_sum, row_sum = np.abs(A).sum(0).max(), np.abs(A).sum(1).max()
    s = np.linalg.svd(A, compute_uv=False)
    vertices = np.array(np.meshgrid(*[[-1.0, 1.0]] * n)).reshape(n, -1).T
    assert_close(np.abs(vertices @ A.T).max(), row_sum)
    assert_close(np.abs(A).sum(0).max(), np.abs(A @ np.eye(n)).sum(0).max())
    assert_close(math.sqrt(np.linalg.eigvalsh(A.T @ A)[-1]), s[0])
    x = rng.standard_normal((500, n))
    assert np.all(np.abs(x @ A.T).sum(1) <= col_sum * np.abs(x).sum(1) * (1 + 1e-12))
    assert np.all(np.abs(x @ A.T).max(1) <= row_sum * np.abs(x).max(1) * (1 + 1e-12))
    assert np.all(np.linalg.norm(x @ A.T, axis=1) <= s[0] * np.linalg.norm(x, axis=1) * (1 + 1e-12))
    At = torch.from_numpy(A)
    got = [torch.linalg.matrix_norm(At, o).item() for o in (1, float("inf"), 2, "fro", "nuc")]
    assert_close(got, [col_sum, row_sum, s[0], math.sqrt(np.sum(s**2)), s.sum()])


@pytest.mark.parametrize("seed", SEEDS)
def test_submultiplicativity_and_spectral_radius(seed):
    rng = np.random.default_rng(seed)
    A, B, S = rng.standard_normal((5, 6)), rng.standard_normal((6, 4)), rng.standard_normal((5, 5))
    for o in (1, 2, np.inf, "fro"):
        assert np.linalg.norm(A @ B, o) <= np.linalg.norm(A, o) * np.linalg.norm(B, o) * (1 + 1e-12)
        assert np.abs(np.linalg.eigvals(S)).max() <= np.linalg.norm(S, o) * (1 + 1e-12)
    J = np.ones((2, 2))
    assert np.abs(J @ J).max() > np.abs(J).max() ** 2


def all_norms(A):
    s = np.linalg.svd(A, compute_uv=False)
    return np.array(
        [
            np.abs(A).max(),
            np.abs(A).sum(0).max(),
            np.abs(A).sum(1).max(),
            s[0],
            math.sqrt(np.sum(s**2)),
            s.sum(),
        ]
    )


def norm_table(m, n, d):
    r = math.sqrt
    return np.array(
        [
            [1, 1, 1, 1, 1, 1],
            [m, 1, m, r(m), r(m), r(m)],
            [n, n, 1, r(n), r(n), r(n)],
            [r(m * n), r(n), r(m), 1, 1, 1],
            [r(m * n), r(n), r(m), r(d), 1, 1],
            [r(m * n * d), r(n * d), r(m * d), d, r(d), 1],
        ]
    )


def table_ratio(A):
    v = all_norms(A)
    return (v[:, None] / v[None, :]) / norm_table(*A.shape, np.linalg.matrix_rank(A))


def test_norm_inequality_table_holds():
    rng = np.random.default_rng(28)
    for _ in range(1500):
        m, n = rng.integers(1, 9, size=2)
        k = rng.integers(1, min(m, n) + 1)
        A = rng.standard_normal((m, k)) @ rng.standard_normal((k, n))
        A = A * (rng.random((m, n)) < rng.uniform(0.2, 1.0))
        if np.abs(A).max() > 0:
            assert np.all(table_ratio(A) <= 1 + 1e-12)


@pytest.mark.parametrize(("m", "n"), [(5, 7), (7, 5), (4, 4), (1, 6), (6, 1), (3, 8)])
def test_norm_inequality_table_is_sharp(m, n):
    row, col, e11 = np.zeros((m, n)), np.zeros((m, n)), np.zeros((m, n))
    row[0], col[:, 0], e11[0, 0] = 1.0, 1.0, 1.0
    best = np.max([table_ratio(S) for S in (np.ones((m, n)), row, col, e11)], axis=0)
    assert np.allclose(best, 1.0, atol=1e-12)


# ---------------------------------------------------------------- random matrices


def singular_values_batch(A):
    return np.sqrt(np.maximum(np.linalg.eigvalsh(np.swapaxes(A, -1, -2) @ A), 0.0))[..., ::-1]


def test_singular_values_via_gram_matrix():
    stack = np.random.default_rng(29).standard_normal((3, 40, 12))
    assert_close(singular_values_batch(stack), np.linalg.svd(stack, compute_uv=False), tol=1e-10)


@pytest.mark.parametrize("m", [16, 64, 256])
def test_gordon_bounds(m):
    rng = np.random.default_rng(m)
    n, draws = 16, 200
    s = singular_values_batch(rng.standard_normal((draws, m, n)))
    smax, smin = s[:, 0], s[:, -1]
    se_max, se_min = smax.std(ddof=1) / math.sqrt(draws), smin.std(ddof=1) / math.sqrt(draws)
    assert smax.mean() - 3 * se_max <= math.sqrt(m) + math.sqrt(n)
    assert smin.mean() + 3 * se_min >= math.sqrt(m) - math.sqrt(n)
    assert np.mean(smax > math.sqrt(m) + math.sqrt(n) + 1) <= math.exp(-0.5)
    assert np.mean(smin < math.sqrt(m) - math.sqrt(n) - 1) <= math.exp(-0.5)


def test_expected_gaussian_norm_gap_is_decreasing():
    """c_k = √k − E‖g_k‖ > 0 decreases, which gives E‖g_m‖ − E‖g_n‖ >= √m − √n in Gordon's bound."""
    mean_chi = np.array(
        [
            math.sqrt(2) * math.exp(math.lgamma((k + 1) / 2) - math.lgamma(k / 2))
            for k in range(1, 2001)
        ]
    )
    gaps = np.sqrt(np.arange(1, 2001)) - mean_chi
    assert np.all(gaps > 0) and np.all(np.diff(gaps) < 0)
    rng = np.random.default_rng(38)
    for k in (1, 4, 30):
        assert_within_se(np.linalg.norm(rng.standard_normal((50_000, k)), axis=1), mean_chi[k - 1])


def test_xavier_spectral_bound():
    def bound(a, b):
        return math.sqrt(2) * (math.sqrt(a) + math.sqrt(b)) / math.sqrt(a + b)

    for a, b in [(16, 1008), (128, 896), (512, 512), (768, 3072), (100, 100)]:
        assert bound(a, b) <= 2 + 1e-12
        assert (abs(bound(a, b) - 2) < 1e-12) == (a == b)
    assert math.isclose(bound(768, 3072), math.sqrt(2) * 3 / math.sqrt(5))
    rng = np.random.default_rng(31)
    for a, b in [(32, 96), (128, 128), (200, 40)]:
        W = rng.standard_normal((20, max(a, b), min(a, b))) * math.sqrt(2 / (a + b))
        smax = singular_values_batch(W)[:, 0]
        assert smax.mean() - 3 * smax.std(ddof=1) / math.sqrt(20) <= bound(a, b)
        W1 = rng.standard_normal((20, max(a, b), min(a, b))) / (math.sqrt(a) + math.sqrt(b))
        smax1 = singular_values_batch(W1)[:, 0]
        assert smax1.mean() - 3 * smax1.std(ddof=1) / math.sqrt(20) <= 1


def test_torch_xavier_normal_variance():
    gen = torch.Generator().manual_seed(30)
    W = torch.nn.init.xavier_normal_(torch.empty(512, 128, dtype=torch.float64), generator=gen)
    target = math.sqrt(2 / (512 + 128))
    assert abs(W.std().item() / target - 1) < 5 / math.sqrt(2 * W.numel())


def test_xavier_typical_versus_worst_case_gain():
    rng = np.random.default_rng(5)
    n = 128
    W = rng.standard_normal((n, n)) / math.sqrt(n)
    x = unit_sphere(4000, n, rng)
    assert_within_se(np.sum((x @ W.T) ** 2, axis=1), np.sum(W**2) / n)
    assert np.linalg.svd(W, compute_uv=False)[0] > 1.8


# ---------------------------------------------------------------- expected norms


def mean_norm_of_sum(d):
    a = (d - 1) / 2
    return 2 * math.exp(
        math.lgamma(a + 0.5) + math.lgamma(2 * a) - math.lgamma(a) - math.lgamma(2 * a + 0.5)
    )


def test_sum_of_unit_vectors_closed_forms():
    alpha, t = sp.symbols("alpha t", positive=True)
    half = sp.Rational(1, 2)
    expr = (
        2
        * sp.gamma(alpha + half)
        * sp.gamma(2 * alpha)
        / (sp.gamma(alpha) * sp.gamma(2 * alpha + half))
    )
    assert sp.simplify(expr.subs(alpha, half) - 4 / sp.pi) == 0
    assert sp.simplify(expr.subs(alpha, 1)) == sp.Rational(4, 3)
    assert sp.integrate(sp.sqrt(2 + 2 * t) / 2, (t, -1, 1)) == sp.Rational(4, 3)
    assert math.isclose(mean_norm_of_sum(2), 4 / math.pi, rel_tol=1e-12)
    for d in (100, 1000, 10000):
        assert abs(8 * d * (1 - mean_norm_of_sum(d) / math.sqrt(2)) - 1) < 2 / d
    assert all(mean_norm_of_sum(d) < math.sqrt(2) for d in range(2, 300))


@pytest.mark.parametrize("d", [2, 3, 10, 64])
def test_sum_of_unit_vectors_monte_carlo(d):
    rng = np.random.default_rng(d)
    z = np.linalg.norm(unit_sphere(20_000, d, rng) + unit_sphere(20_000, d, rng), axis=1)
    assert_within_se(z, mean_norm_of_sum(d))
    assert_within_se(z**2, 2.0)


def test_sum_of_non_centred_unit_vectors_is_not_sqrt2():
    rng = np.random.default_rng(33)
    u1, u2 = rng.random((500, 1024)), rng.random((500, 1024))
    u1 /= np.linalg.norm(u1, axis=1, keepdims=True)
    u2 /= np.linalg.norm(u2, axis=1, keepdims=True)
    assert abs(np.linalg.norm(u1 + u2, axis=1).mean() - math.sqrt(3.5)) < 0.01


@pytest.mark.parametrize("k", [2, 5])
def test_sum_of_k_unit_vectors_mean_square(k):
    rng = np.random.default_rng(k)
    s = unit_sphere(10_000 * k, 7, rng).reshape(10_000, k, 7).sum(axis=1)
    assert_within_se(np.sum(s**2, axis=1), float(k))


def sphere_norm_moments(A):
    n = A.shape[1]
    M = A.T @ A
    tr, fro2 = np.trace(M), np.sum(M * M)
    return tr / n, 2 * (n * fro2 - tr**2) / (n**2 * (n + 2))


def expected_norm_cases(rng):
    def unit_rows(G):
        return G / np.linalg.norm(G, axis=1, keepdims=True)

    G = rng.standard_normal((60, 60))
    return {
        "orthogonal": np.linalg.qr(rng.standard_normal((60, 60)))[0],
        "unit columns": G / np.linalg.norm(G, axis=0, keepdims=True),
        "unit rows square": unit_rows(rng.standard_normal((60, 60))),
        "unit rows under": unit_rows(rng.standard_normal((12, 60))),
        "unit rows over": unit_rows(rng.standard_normal((60, 12))),
    }


def test_isotropic_mean_square_norm_is_exact():
    rng = np.random.default_rng(34)
    for name, A in expected_norm_cases(rng).items():
        m, n = A.shape
        mu, v = sphere_norm_moments(A)
        expected = {"unit rows under": m / n, "unit rows over": m / n}.get(name, 1.0)
        assert math.isclose(mu, expected, rel_tol=1e-12)
        assert math.isclose(mu, np.sum(A**2) / n, rel_tol=1e-12)
        y2 = np.sum((unit_sphere(20_000, n, rng) @ A.T) ** 2, axis=1)
        if name == "orthogonal":
            assert np.allclose(y2, 1.0) and abs(v) < 1e-12
        else:
            assert_within_se(y2, mu)
            assert_within_se((y2 - mu) ** 2, v)


def test_mean_norm_bracket_and_second_order_value():
    rng = np.random.default_rng(35)
    for A in expected_norm_cases(rng).values():
        mu, v = sphere_norm_moments(A)
        y = np.linalg.norm(unit_sphere(30_000, A.shape[1], rng) @ A.T, axis=1)
        se = y.std(ddof=1) / math.sqrt(len(y)) + 1e-12
        lower, upper = math.sqrt(mu) - v / (2 * mu**1.5), math.sqrt(mu)
        assert lower - 5 * se <= y.mean() <= upper + 5 * se
        assert abs(y.mean() - (math.sqrt(mu) - v / (8 * mu**1.5))) < 5 * se


def test_bracket_inequality_pointwise():
    s = np.linspace(0, 5, 10_001)
    assert np.all(s >= 1 + (s**2 - 1) / 2 - (s**2 - 1) ** 2 / 2 - 1e-12)


def test_sphere_fourth_moment():
    rng = np.random.default_rng(36)
    n = 9
    G = rng.standard_normal((n, n))
    M = G + G.T
    x = unit_sphere(100_000, n, rng)
    q2 = np.einsum("si,ij,sj->s", x, M, x) ** 2
    assert_within_se(q2, (np.trace(M) ** 2 + 2 * np.sum(M * M)) / (n * (n + 2)))
    assert_within_se(x[:20_000, :, None] * x[:20_000, None, :], np.eye(n) / n)


def test_document_expected_norm_formula_fails_when_underdetermined():
    rng = np.random.default_rng(37)
    for m, n in [(20, 100), (100, 100), (100, 20)]:
        A = rng.standard_normal((m, n))
        A /= np.linalg.norm(A, axis=1, keepdims=True)
        notes = math.sqrt(np.mean(np.linalg.svd(A, compute_uv=False) ** 2))
        correct = math.sqrt(np.sum(A**2) / n)
        assert math.isclose(correct, math.sqrt(m / n), rel_tol=1e-12)
        assert math.isclose(notes, math.sqrt(m / min(m, n)), rel_tol=1e-12)
        assert math.isclose(notes, correct, rel_tol=1e-12) == (m >= n)
