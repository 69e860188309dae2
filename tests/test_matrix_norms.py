"""Tests of `linattn_core.maths.matrix_norms` and of the vector- and matrix-norm facts chapter 6
states: the inequalities between vector p-norms, the induced-norm formulas, submultiplicativity,
and the table of constants between six matrix norms, which holds and is sharp."""

import math

import numpy as np
import pytest
import torch

from linattn_core.maths.linalg import kron
from linattn_core.maths.matrix_norms import (
    NORM_NAMES,
    equal_singular_values,
    matrix_norms,
    norm_table,
    norm_table_ratios,
    rank_one_extremes,
)
from linattn_core.testing import assert_close

SEEDS = [0, 1, 2]
f64 = torch.float64


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
    assert_close(np.abs(vertices @ A.T).max(), row_sum, rtol=1e-12)
    assert_close(np.sqrt(np.linalg.eigvalsh(A.T @ A)[-1]), s[0], rtol=1e-12)
    x = rng.standard_normal((500, n))
    assert np.all(np.abs(x @ A.T).sum(1) <= col_sum * np.abs(x).sum(1) * (1 + 1e-12))
    assert np.all(np.abs(x @ A.T).max(1) <= row_sum * np.abs(x).max(1) * (1 + 1e-12))
    assert np.all(np.linalg.norm(x @ A.T, axis=1) <= s[0] * np.linalg.norm(x, axis=1) * (1 + 1e-12))
    At = torch.from_numpy(A)
    orders = (1, float("inf"), 2, "fro", "nuc")
    torch_norms = torch.stack([torch.linalg.matrix_norm(At, o) for o in orders])
    expected = np.array([col_sum, row_sum, s[0], np.sqrt(np.sum(s**2)), s.sum()])
    assert_close(torch_norms, expected, rtol=1e-12)
    assert_close(matrix_norms(At), np.array([np.abs(A).max(), *expected]), rtol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_submultiplicativity_and_spectral_radius(seed):
    rng = np.random.default_rng(seed)
    A, B, S = rng.standard_normal((5, 6)), rng.standard_normal((6, 4)), rng.standard_normal((5, 5))
    for o in (1, 2, np.inf, "fro"):
        assert np.linalg.norm(A @ B, o) <= np.linalg.norm(A, o) * np.linalg.norm(B, o) * (1 + 1e-12)
        assert np.abs(np.linalg.eigvals(S)).max() <= np.linalg.norm(S, o) * (1 + 1e-12)
    J = np.ones((2, 2))
    assert np.abs(J @ J).max() > np.abs(J).max() ** 2  # the max norm is not submultiplicative


def test_matrix_norms_of_a_diagonal_matrix():
    assert len(NORM_NAMES) == 6
    A = torch.diag(torch.tensor([3.0, -4.0], dtype=f64))
    assert matrix_norms(A).tolist() == [4.0, 4.0, 4.0, 4.0, 5.0, 7.0]
    assert matrix_norms(A.T).dtype == f64


@pytest.mark.slow  # 1500 random matrices: about 0.5 s
def test_norm_inequality_table_holds():
    rng = np.random.default_rng(28)
    for _ in range(1500):
        m, n = rng.integers(1, 9, size=2)
        k = rng.integers(1, min(m, n) + 1)
        A = rng.standard_normal((m, k)) @ rng.standard_normal((k, n))
        A = A * (rng.random((m, n)) < rng.uniform(0.2, 1.0))
        if np.abs(A).max() > 0:
            assert bool((norm_table_ratios(torch.as_tensor(A)) <= 1 + 1e-12).all())


def test_norm_inequality_table_holds_on_a_few_matrices():
    rng = np.random.default_rng(29)
    for m, n, k in [(3, 5, 2), (6, 2, 2), (4, 4, 1), (1, 7, 1)]:
        A = torch.as_tensor(rng.standard_normal((m, k)) @ rng.standard_normal((k, n)))
        assert bool((norm_table_ratios(A) <= 1 + 1e-12).all())


@pytest.mark.parametrize(("m", "n"), [(5, 7), (7, 5), (4, 4), (1, 6), (6, 1), (3, 8)])
def test_norm_inequality_table_is_sharp_for_rank_one(m, n):
    extremes = rank_one_extremes(m, n)
    assert all(torch.linalg.matrix_rank(S) == 1 for S in extremes)
    best = torch.stack([norm_table_ratios(S) for S in extremes]).amax(dim=0)
    assert_close(best, torch.ones(6, 6, dtype=f64), rtol=1e-12)


@pytest.mark.parametrize(("m", "n"), [(5, 7), (7, 5), (5, 5)])
@pytest.mark.parametrize("d", range(1, 6))
def test_rank_constants_are_attained(m, n, d):
    A = equal_singular_values(m, n, d)
    assert torch.linalg.matrix_rank(A) == d
    ratios = norm_table_ratios(A)
    for entry in [(4, 3), (5, 3), (5, 4)]:  # F ≤ √d·2, KF ≤ d·2, KF ≤ √d·F
        assert abs(ratios[entry].item() - 1) < 1e-12


def test_identity_and_hadamard_attain_the_largest_constants():
    for n in range(1, 7):
        ratios = norm_table_ratios(torch.eye(n, dtype=f64))
        assert abs(ratios[5, 1].item() - 1) < 1e-12 and abs(ratios[5, 2].item() - 1) < 1e-12
    hadamard_2 = torch.tensor([[1.0, 1.0], [1.0, -1.0]], dtype=f64)
    for H in (hadamard_2, kron(hadamard_2, hadamard_2)):
        assert abs(norm_table_ratios(H)[5, 0].item() - 1) < 1e-12  # √(mnd)


def test_norm_table_validates():
    assert norm_table(2, 3, 2).shape == (6, 6)
    with pytest.raises(ValueError, match=r"^norm_table: the rank d must be at most min\(m, n\)"):
        norm_table(2, 3, 3)
    with pytest.raises(ValueError, match=r"^norm_table: m must be a positive int"):
        norm_table(0, 3, 1)
    with pytest.raises(ValueError, match=r"^matrix_norms: A must be a matrix \(m, n\)"):
        matrix_norms(torch.ones(2, 2, 2, dtype=f64))
    with pytest.raises(ValueError, match=r"^equal_singular_values: d must be at most min"):
        equal_singular_values(2, 3, 3)
