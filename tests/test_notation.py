"""The translation rules stated on the page "Notation and conventions"."""

import torch

from linattn_core import softmax_attention
from linattn_core.linalg import kron, vec
from linattn_core.testing import assert_close


def commutation_matrix(m, n):
    """K with K vec(X) = vec(Xᵀ) for X of shape (m, n)."""
    index = torch.arange(m * n).reshape(n, m).mT.reshape(-1)  # where vec(Xᵀ) reads vec(X)
    return torch.eye(m * n, dtype=torch.float64)[index]


def test_reshape_stacks_rows_and_vec_stacks_columns():
    x = torch.arange(6.0).reshape(2, 3)
    assert x.reshape(-1).tolist() == [0, 1, 2, 3, 4, 5]  # rows: vec(Xᵀ)
    assert vec(x).tolist() == [0, 3, 1, 4, 2, 5]  # columns: vec(X)
    assert torch.equal(x.reshape(-1), vec(x.mT))


def test_vec_of_product_is_kronecker():
    g = torch.Generator().manual_seed(0)
    a, x, b = (torch.randn(s, generator=g, dtype=torch.float64) for s in [(4, 3), (3, 5), (5, 2)])
    assert_close(vec(a @ x @ b), kron(b.mT, a) @ vec(x), rtol=1e-12)


def test_commutation_matrix_transposes():
    x = torch.randn(3, 5, dtype=torch.float64)
    assert torch.equal(commutation_matrix(3, 5) @ vec(x), vec(x.mT))


def test_row_and_column_layouts_are_transposes():
    g = torch.Generator().manual_seed(1)
    d, n, d_q, d_v = 6, 7, 4, 5
    x_col = torch.randn(d, n, generator=g, dtype=torch.float64)
    w_q, w_k = (torch.randn(d_q, d, generator=g, dtype=torch.float64) for _ in range(2))
    w_v = torch.randn(d_v, d, generator=g, dtype=torch.float64)

    q, k, v = w_q @ x_col, w_k @ x_col, w_v @ x_col  # columns are tokens
    a_col = torch.softmax(k.mT @ q / d_q**0.5, dim=0)  # each column sums to one
    y_col = v @ a_col  # (d_v, n)

    x_row = x_col.mT  # rows are tokens
    y_row = softmax_attention(x_row @ w_q.mT, x_row @ w_k.mT, x_row @ w_v.mT)  # (n, d_v)
    a_row = torch.softmax(x_row @ w_q.mT @ (x_row @ w_k.mT).mT / d_q**0.5, dim=-1)

    assert_close(a_col.sum(dim=0), torch.ones(n, dtype=torch.float64), rtol=1e-14)
    assert_close(a_row, a_col.mT, rtol=1e-12)
    assert_close(y_row, y_col.mT, rtol=1e-12)
