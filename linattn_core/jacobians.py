"""Closed-form Jacobians of the transformer's building blocks (the book's chapter "Attention
Jacobians and training stability").

Vectors are columns and Jacobians are in numerator layout: ``J[i, j] = ∂f_i/∂x_j``, shape
``(out, in)``. Functions of a vector accept leading batch dimensions ``(..., d)`` and return
``(..., out, in)``. For self-attention the token matrix is ``X ∈ R^{d×n}`` (one token per
column, the column layout of that chapter) and matrices are flattened with the column-stacking
`vec` of `linattn_core.maths.linalg`, so a Jacobian is ``∂vec(Y)/∂vec(X)`` and products of matrices
differentiate by the Kronecker identities of Magnus and Neudecker (*Matrix Differential
Calculus*). The blocks: LayerNorm (Ba et al. 2016), RMSNorm (Zhang and Sennrich 2019), SwiGLU
(Shazeer 2020), QK-norm (Henry et al. 2020); the Jacobian view of training stability follows
Qi et al. (2023). `self_attention_bound` grows with the tokens: Kim et al. (2021) show that
dot-product self-attention has no global Lipschitz constant.

Every function is built from its formula, never from autograd; the tests compare each one with
autograd in float64.
"""

import math

import torch

from linattn_core.maths.linalg import commutation_matrix, kron
from linattn_core.validation import check_eps, check_same_dtype_and_device, check_tensor

__all__ = [
    "attention_block",
    "attention_block_bound",
    "attention_logits",
    "column_softmax",
    "l2norm",
    "layernorm",
    "layernorm_gamma",
    "layernorm_tokens",
    "qknorm_logit",
    "relu_ffn",
    "rmsnorm",
    "self_attention",
    "self_attention_bound",
    "softmax",
    "stablenorm",
    "swiglu",
]


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Jacobian of a = softmax(x) over the last axis: Diag(a) − a aᵀ, `(..., n)` → `(..., n, n)`.

    Symmetric, rows sum to zero (adding a constant to x changes nothing), and it tends to 0 as
    a approaches a one-hot vector (saturation).

    >>> softmax(torch.zeros(2))
    tensor([[ 0.2500, -0.2500],
            [-0.2500,  0.2500]])
    """
    check_tensor("softmax", "x", x, min_rank=1)
    a = x.softmax(dim=-1)  # (..., n)
    return torch.diag_embed(a) - a[..., :, None] * a[..., None, :]  # (..., n, n)


def layernorm(x: torch.Tensor, gamma: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Jacobian of LN(x) = γ ⊙ (x − mean(x))/√(var(x) + eps) + β by x, `(..., d)` → `(..., d, d)`.

    The variance is the biased one, as in `torch.nn.functional.layer_norm`. With the centred
    y = (I − 11ᵀ/d) x and s² = ‖y‖² + d·eps (LN = γ ⊙ √d y/√(‖y‖² + ε) + β with ε = d·eps):

        ∂LN/∂x = √d/s · Diag(γ) (I − y yᵀ/s²) (I − 11ᵀ/d).

    β does not enter; ∂LN/∂β = I, and ∂LN/∂γ is `layernorm_gamma`.

    >>> J = layernorm(torch.tensor([1.0, 2.0, 4.0]), torch.ones(3))
    >>> bool(torch.allclose(J @ torch.ones(3), torch.zeros(3), atol=1e-6))  # shifts do nothing
    True
    """
    _check_vector_and_gain("layernorm", x, gamma)
    check_eps("layernorm", eps)
    d = x.shape[-1]
    eye = torch.eye(d, dtype=x.dtype, device=x.device)
    centring = eye - 1.0 / d  # (d, d): I − 11ᵀ/d
    y = x - x.mean(dim=-1, keepdim=True)  # (..., d)
    s2 = (y * y).sum(dim=-1)[..., None, None] + d * eps  # (..., 1, 1)
    projection = eye - y[..., :, None] * y[..., None, :] / s2  # (..., d, d)
    return math.sqrt(d) / s2.sqrt() * gamma[:, None] * (projection @ centring)


def layernorm_gamma(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Jacobian of LN(x) by its gain γ: Diag(x̂), x̂ = (x − mean)/√(var + eps), `(..., d, d)`.

    With y and s of `layernorm`, x̂ = √d·y/s: the output is linear in γ with coefficient x̂.

    >>> layernorm_gamma(torch.tensor([0.0, 2.0]), eps=0.0)
    tensor([[-1.,  0.],
            [ 0.,  1.]])
    """
    check_tensor("layernorm_gamma", "x", x, min_rank=1)
    check_eps("layernorm_gamma", eps)
    y = x - x.mean(dim=-1, keepdim=True)  # (..., d)
    x_hat = y / ((y * y).mean(dim=-1, keepdim=True) + eps).sqrt()  # (..., d)
    return torch.diag_embed(x_hat)


def rmsnorm(x: torch.Tensor, gamma: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Jacobian of RMSN(x) = γ ⊙ x/√(mean(x²) + eps) by x, `(..., d)` → `(..., d, d)`.

    With s² = ‖x‖² + d·eps: ∂RMSN/∂x = √d/s · Diag(γ) (I − x xᵀ/s²), as in
    `torch.nn.functional.rms_norm`. The gain stands on the left.

    >>> x = torch.tensor([3.0, 4.0])
    >>> bool(torch.allclose(rmsnorm(x, torch.ones(2), eps=0.0) @ x, torch.zeros(2)))
    True
    """
    _check_vector_and_gain("rmsnorm", x, gamma)
    check_eps("rmsnorm", eps)
    d = x.shape[-1]
    return _scaled_projection(x, gamma, math.sqrt(d), d * eps)


def stablenorm(
    x: torch.Tensor, gamma: torch.Tensor, alpha: float, eps: float = 1e-6
) -> torch.Tensor:
    """Jacobian of StableNorm(x) = γ ⊙ d^α x/√(‖x‖² + eps) by x, `(..., d)` → `(..., d, d)`.

    With s² = ‖x‖² + eps: d^α/s · Diag(γ) (I − x xᵀ/s²). α = 1/2 and eps = d·ε is RMSNorm
    with its ε.

    >>> x, gamma = torch.tensor([1.0, 2.0, 2.0]), torch.ones(3)
    >>> bool(torch.allclose(stablenorm(x, gamma, 0.5, eps=3e-6), rmsnorm(x, gamma, eps=1e-6)))
    True
    """
    _check_vector_and_gain("stablenorm", x, gamma)
    check_eps("stablenorm", eps)
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not math.isfinite(alpha):
        raise ValueError(f"stablenorm: alpha must be a finite number; got alpha={alpha!r}")
    return _scaled_projection(x, gamma, x.shape[-1] ** alpha, eps)


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Jacobian of L2Norm(x) = x/√(‖x‖² + eps) by x, `(..., d)` → `(..., d, d)`.

    With s² = ‖x‖² + eps: (I − x xᵀ/s²)/s, the projection away from x, divided by s.

    >>> l2norm(torch.tensor([2.0, 0.0]), eps=0.0)
    tensor([[0.0000, 0.0000],
            [0.0000, 0.5000]])
    """
    check_tensor("l2norm", "x", x, min_rank=1)
    check_eps("l2norm", eps)
    ones = torch.ones(x.shape[-1], dtype=x.dtype, device=x.device)  # (d,): no gain
    return _scaled_projection(x, ones, 1.0, eps)


def relu_ffn(x: torch.Tensor, W1: torch.Tensor, W2: torch.Tensor, b1=None) -> torch.Tensor:
    """Jacobian of FFN(x) = W2 relu(W1 x + b1) by x: W2 Diag(1[W1 x + b1 > 0]) W1.

    x `(..., d)`, W1 `(d_ff, d)`, W2 `(d_out, d_ff)`, b1 `(d_ff,)` or None; returns
    `(..., d_out, d)`. At a kink (W1 x + b1 = 0) it takes relu'(0) = 0, as PyTorch does.

    >>> W1, W2 = torch.eye(2), torch.ones(1, 2)
    >>> relu_ffn(torch.tensor([1.0, -1.0]), W1, W2)
    tensor([[1., 0.]])
    """
    check_tensor("relu_ffn", "x", x, min_rank=1)
    d_ff = _check_weight("relu_ffn", "W1", W1, x, in_features=x.shape[-1])
    _check_weight("relu_ffn", "W2", W2, x, in_features=d_ff)
    pre_activation = x @ W1.T  # (..., d_ff)
    if b1 is not None:
        _check_bias("relu_ffn", "b1", b1, x, d_ff)
        pre_activation = pre_activation + b1
    active = (pre_activation > 0).to(x.dtype)  # (..., d_ff)
    return W2 @ (active[..., :, None] * W1)  # (..., d_out, d)


def swiglu(x: torch.Tensor, W1: torch.Tensor, W2: torch.Tensor, W3: torch.Tensor) -> torch.Tensor:
    """Jacobian of y = W3 (u ⊙ SiLU(v)), u = W1 x, v = W2 x, by x.

        ∂y/∂x = W3 [Diag(SiLU(v)) W1 + Diag(u) Diag(SiLU'(v)) W2],
        SiLU(v) = v σ(v),  SiLU'(v) = σ(v) + v σ(v)(1 − σ(v)).

    x `(..., d)`, W1 and W2 `(d_ff, d)`, W3 `(d_out, d_ff)`; returns `(..., d_out, d)`.

    >>> J = swiglu(torch.zeros(2), torch.eye(2), torch.eye(2), torch.eye(2))
    >>> bool((J == 0).all())  # u = 0 and SiLU(0) = 0
    True
    """
    check_tensor("swiglu", "x", x, min_rank=1)
    d_ff = _check_weight("swiglu", "W1", W1, x, in_features=x.shape[-1])
    _check_weight("swiglu", "W2", W2, x, in_features=x.shape[-1], out_features=d_ff)
    _check_weight("swiglu", "W3", W3, x, in_features=d_ff)
    u, v = x @ W1.T, x @ W2.T  # (..., d_ff)
    sigma = torch.sigmoid(v)
    silu_slope = sigma + v * sigma * (1 - sigma)
    gate = (v * sigma)[..., :, None] * W1 + (u * silu_slope)[..., :, None] * W2  # (..., d_ff, d)
    return W3 @ gate  # (..., d_out, d)


def column_softmax(P: torch.Tensor) -> torch.Tensor:
    """∂vec(A)/∂vec(P) for A = softmax of each column of P, `(..., r, c)` → `(..., r·c, r·c)`.

    Column j of A depends only on column j of P, so the Jacobian is block diagonal:
    blockdiag(Diag(a_1) − a_1 a_1ᵀ, …, Diag(a_c) − a_c a_cᵀ), a_j = A[:, j].

    >>> column_softmax(torch.zeros(2, 3)).shape
    torch.Size([6, 6])
    """
    check_tensor("column_softmax", "P", P, min_rank=2)
    r, c = P.shape[-2:]
    blocks = softmax(P.mT)  # (..., c, r, r): one Jacobian per column
    eye = torch.eye(c, dtype=P.dtype, device=P.device)
    block_diagonal = torch.einsum("jk,...jab->...jakb", eye, blocks)  # (..., c, r, c, r)
    return block_diagonal.reshape(*P.shape[:-2], r * c, r * c)


def attention_logits(X: torch.Tensor, Wq: torch.Tensor, Wk: torch.Tensor) -> torch.Tensor:
    """∂vec(P)/∂vec(X) for P = Xᵀ Wqᵀ Wk X, X `(..., d, n)`, Wq and Wk `(d_q, d)`.

    With the commutation matrix 𝒦 = 𝒦_{d,n} (vec(Xᵀ) = 𝒦 vec(X)):

        ∂vec(P)/∂vec(X) = (Xᵀ Wkᵀ Wq ⊗ I_n) 𝒦 + (I_n ⊗ Xᵀ Wqᵀ Wk),   shape (n², d·n).

    >>> attention_logits(torch.ones(3, 4), torch.ones(2, 3), torch.ones(2, 3)).shape
    torch.Size([16, 12])
    """
    _check_attention("attention_logits", X, Wq, Wk)
    return _batched(_attention_logits, X, Wq, Wk)


def self_attention(
    X: torch.Tensor, Wq: torch.Tensor, Wk: torch.Tensor, Wv: torch.Tensor
) -> torch.Tensor:
    """∂vec(Y)/∂vec(X) for Y = Wv X A, A = softmax over the first index of P/√d_q, P = XᵀWqᵀWkX.

    The column layout: X `(..., d, n)` holds one token per column, Wq and Wk
    `(d_q, d)`, Wv `(d_v, d)`; each column of A sums to 1. Built from the Kronecker formula

        ∂vec(Y)/∂vec(X) = (Aᵀ ⊗ Wv) + (I_n ⊗ Wv X) · J/√d_q · ∂vec(P)/∂vec(X),

    with J = `column_softmax`(P/√d_q) and ∂vec(P)/∂vec(X) from `attention_logits`; shape
    `(..., d_v·n, d·n)`. In the row layout of `linattn_core.softmax_attention`, Yᵀ is attention
    with queries XᵀWkᵀ, keys XᵀWqᵀ and values XᵀWvᵀ: in this form Wk makes the queries.

    >>> X, W = torch.randn(4, 3, dtype=torch.float64), torch.eye(4, dtype=torch.float64)
    >>> self_attention(X, W[:2], W[:2], W).shape  # (d_v·n, d·n)
    torch.Size([12, 12])
    """
    _check_attention("self_attention", X, Wq, Wk)
    _check_weight("self_attention", "Wv", Wv, X, in_features=X.shape[-2], x_name="X")
    return _batched(_self_attention, X, Wq, Wk, Wv)


def self_attention_bound(
    X: torch.Tensor, Wq: torch.Tensor, Wk: torch.Tensor, Wv: torch.Tensor
) -> torch.Tensor:
    """Upper bound on ‖∂vec(Y)/∂vec(X)‖₂ of `self_attention`: √n ‖Wv‖₂ + ‖Wv‖₂ ‖X‖₂² ‖WqᵀWk‖₂/√d_q.

    The value path Aᵀ ⊗ Wv has norm ‖A‖₂ ‖Wv‖₂ ≤ √n ‖Wv‖₂ (each column of A is a probability
    vector); the softmax path is at most ‖Wv‖₂ ‖X‖₂ · ½ · 2 ‖X‖₂ ‖WqᵀWk‖₂ / √d_q (the softmax
    Jacobian has norm ≤ ½). Same shapes as `self_attention`; returns the bound `X.shape[:-2]`.
    It grows like ‖X‖₂² without limit (there is no global Lipschitz constant, Kim et al. 2021);
    it allows a large Jacobian, it does not say the Jacobian is large.

    >>> X, W = torch.ones(2, 4, dtype=torch.float64), torch.eye(2, dtype=torch.float64)
    >>> round(float(self_attention_bound(X, W, W, W)), 6)  # √n + ‖X‖₂²/√d_q = 2 + 8/√2
    7.656854
    """
    _check_attention("self_attention_bound", X, Wq, Wk)
    _check_weight("self_attention_bound", "Wv", Wv, X, in_features=X.shape[-2], x_name="X")
    n, d_q = X.shape[-1], Wq.shape[0]
    norm_v = torch.linalg.matrix_norm(Wv, ord=2)
    norm_x = torch.linalg.matrix_norm(X, ord=2)  # X.shape[:-2]
    norm_qk = torch.linalg.matrix_norm(Wq.T @ Wk, ord=2)
    return math.sqrt(n) * norm_v + norm_v * norm_x**2 * norm_qk / math.sqrt(d_q)


def layernorm_tokens(X: torch.Tensor, gamma: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """∂vec(LN(X))/∂vec(X) for LayerNorm of every token (column) of X `(..., d, n)`.

    vec stacks columns, and column j of LN(X) depends on column j of X only, so the Jacobian is
    block diagonal: blockdiag(J_LN(x_1), …, J_LN(x_n)) with J_LN of `layernorm`; shape
    `(..., d·n, d·n)`. Its spectral norm is the largest of the blocks', at most
    max_j ‖γ‖∞/√(var(x_j) + eps), with equality for a constant gain and d ≥ 3.

    >>> J = layernorm_tokens(torch.tensor([[1.0, 0.0], [2.0, 0.0], [4.0, 3.0]]), torch.ones(3))
    >>> J.shape, bool((J[:3, 3:] == 0).all())  # token 2 does not move LN(token 1)
    (torch.Size([6, 6]), True)
    """
    check_tensor("layernorm_tokens", "X", X, min_rank=2)
    _check_gain("layernorm_tokens", "gamma", gamma, X.mT, "X")
    check_eps("layernorm_tokens", eps)
    d, n = X.shape[-2:]
    blocks = layernorm(X.mT, gamma, eps)  # (..., n, d, d): one Jacobian per token
    eye = torch.eye(n, dtype=X.dtype, device=X.device)
    block_diagonal = torch.einsum("jk,...jab->...jakb", eye, blocks)  # (..., n, d, n, d)
    return block_diagonal.reshape(*X.shape[:-2], d * n, d * n)


def attention_block(
    X: torch.Tensor,
    Wq: torch.Tensor,
    Wk: torch.Tensor,
    Wv: torch.Tensor,
    gamma: torch.Tensor,
    placement: str,
    beta: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """J_f = ∂vec f(X)/∂vec(X) for self-attention with LayerNorm in one of three placements.

    SA(X) = Wv X A is the single-head self-attention of `self_attention` (column layout,
    X `(..., d, n)`, Wq and Wk `(d_q, d)`, Wv `(d, d)`: the residual sum needs d_v = d), and LN
    normalizes every token with gain γ and bias β (`(d,)`, β = 0 when None). With J_SA of
    `self_attention` and J_LN of `layernorm_tokens`:

        "pre"     f(X) = X + SA(LN(X))    J_f = I + J_SA(LN(X)) J_LN(X)
        "post"    f(X) = LN(X + SA(X))    J_f = J_LN(X + SA(X)) (I + J_SA(X))
        "branch"  f(X) = X + LN(SA(X))    J_f = I + J_LN(SA(X)) J_SA(X)

    Returns `(..., d·n, d·n)`. β enters only "pre", through the point LN(X) where J_SA is taken.

    >>> X, W = torch.randn(4, 3, dtype=torch.float64), torch.eye(4, dtype=torch.float64)
    >>> attention_block(X, W, W, W, torch.ones(4, dtype=torch.float64), "branch").shape
    torch.Size([12, 12])
    """
    fn = "attention_block"
    _check_block(fn, X, Wq, Wk, Wv, gamma, placement, beta, eps)
    d, n = X.shape[-2:]
    eye = torch.eye(d * n, dtype=X.dtype, device=X.device)
    if placement == "pre":
        X_normalized = _layernorm_columns(X, gamma, beta, eps)
        return eye + self_attention(X_normalized, Wq, Wk, Wv) @ layernorm_tokens(X, gamma, eps)
    Y = _attention_columns(X, Wq, Wk, Wv)  # (..., d, n): SA(X)
    J_sa = self_attention(X, Wq, Wk, Wv)  # (..., d·n, d·n)
    if placement == "post":
        return layernorm_tokens(X + Y, gamma, eps) @ (eye + J_sa)
    return eye + layernorm_tokens(Y, gamma, eps) @ J_sa


def attention_block_bound(
    X: torch.Tensor,
    Wq: torch.Tensor,
    Wk: torch.Tensor,
    Wv: torch.Tensor,
    gamma: torch.Tensor,
    placement: str,
    beta: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """Upper bound on ‖J_f‖₂ of `attention_block`, from the norms of its two factors.

    Each token's LayerNorm Jacobian has ‖J_LN(z)‖₂ ≤ ‖γ‖∞/√(var(z) + eps); write λ(Z) for the
    largest over the tokens (columns) of Z, and b(X) for `self_attention_bound`:

        "pre"     1 + λ(X) · b(LN(X))
        "post"    λ(X + SA(X)) · (1 + b(X))
        "branch"  1 + λ(SA(X)) · b(X)

    Same arguments as `attention_block`; returns the bound `X.shape[:-2]`. The tokens enter
    "pre" only through λ(X), which falls like 1/‖x‖ as the tokens grow; b(X) grows like ‖X‖₂².

    >>> X, W = torch.ones(2, 4, dtype=torch.float64), torch.eye(2, dtype=torch.float64)
    >>> X[0] = -1.0  # every token is (−1, 1): variance 1
    >>> round(float(attention_block_bound(X, W, W, W, torch.ones(2, dtype=X.dtype), "branch")), 4)
    8.6568
    """
    fn = "attention_block_bound"
    _check_block(fn, X, Wq, Wk, Wv, gamma, placement, beta, eps)

    def largest_gain(Z):  # λ(Z): the largest LayerNorm Jacobian norm bound over the tokens
        variance = Z.var(dim=-2, unbiased=False)  # (..., n)
        return (gamma.abs().max() / (variance + eps).sqrt()).amax(dim=-1)

    if placement == "pre":
        X_normalized = _layernorm_columns(X, gamma, beta, eps)
        return 1 + largest_gain(X) * self_attention_bound(X_normalized, Wq, Wk, Wv)
    Y = _attention_columns(X, Wq, Wk, Wv)
    b_sa = self_attention_bound(X, Wq, Wk, Wv)
    if placement == "post":
        return largest_gain(X + Y) * (1 + b_sa)
    return 1 + largest_gain(Y) * b_sa


def qknorm_logit(
    q: torch.Tensor, k: torch.Tensor, gamma_q: torch.Tensor, gamma_k: torch.Tensor, eps=1e-6
) -> torch.Tensor:
    """∂P/∂q for the QK-normalized logit P = RMSN(q)·RMSN(k)/√d₁ of a query q and a key k.

    RMSN is `torch.nn.functional.rms_norm` with gains γ_q, γ_k (Henry et al. 2020 normalize
    queries and keys; here with RMSNorm). With s² = ‖·‖² + d₁·eps:

        ∂P/∂q = √d₁/(s_q s_k) · (I − q qᵀ/s_q²) Diag(γ_q ⊙ γ_k) k,

    prefactor √d₁, the width of q and k (the head width), not the model width. q and k
    `(..., d₁)`, gains `(d₁,)`; returns `(..., d₁)`. ∂P/∂k is `qknorm_logit(k, q, γ_k, γ_q)`,
    and the chain rule through q = W_q x gives W_qᵀ ∂P/∂q for x and (∂P/∂q) xᵀ for W_q.

    >>> q, ones = torch.tensor([1.0, 0.0]), torch.ones(2)
    >>> qknorm_logit(q, q, ones, ones, eps=0.0)  # q·q/‖q‖² is constant along q
    tensor([0., 0.])
    """
    fn = "qknorm_logit"
    check_tensor(fn, "q", q, min_rank=1)
    check_tensor(fn, "k", k, min_rank=1)
    if k.shape != q.shape:
        raise ValueError(
            f"{fn}: k must have the shape of q {tuple(q.shape)}; got k.shape={tuple(k.shape)}"
        )
    check_same_dtype_and_device(fn, "q", q, k=k)
    _check_gain(fn, "gamma_q", gamma_q, q, "q")
    _check_gain(fn, "gamma_k", gamma_k, q, "q")
    check_eps(fn, eps)
    d1 = q.shape[-1]
    s2_q = (q * q).sum(dim=-1, keepdim=True) + d1 * eps  # (..., 1)
    s_k = ((k * k).sum(dim=-1, keepdim=True) + d1 * eps).sqrt()  # (..., 1)
    u = gamma_q * gamma_k * k  # (..., d1): Diag(γ_q ⊙ γ_k) k
    projected = u - q * (q * u).sum(dim=-1, keepdim=True) / s2_q  # (I − q qᵀ/s_q²) u
    return math.sqrt(d1) / (s2_q.sqrt() * s_k) * projected


def _self_attention(X, Wq, Wk, Wv):
    n, d_q = X.shape[1], Wq.shape[0]
    eye_n = torch.eye(n, dtype=X.dtype, device=X.device)
    P = X.T @ Wq.T @ Wk @ X  # (n, n)
    A = (P / math.sqrt(d_q)).softmax(dim=0)  # (n, n), columns sum to 1
    J = column_softmax(P / math.sqrt(d_q)) / math.sqrt(d_q)  # (n², n²)
    softmax_path = kron(eye_n, Wv @ X) @ J @ _attention_logits(X, Wq, Wk)  # (d_v·n, d·n)
    return kron(A.T, Wv) + softmax_path


def _attention_logits(X, Wq, Wk):
    d, n = X.shape
    eye_n = torch.eye(n, dtype=X.dtype, device=X.device)
    K = commutation_matrix(d, n, dtype=X.dtype, device=X.device)  # (d·n, d·n)
    return kron(X.T @ Wk.T @ Wq, eye_n) @ K + kron(eye_n, X.T @ Wq.T @ Wk)  # (n², d·n)


def _attention_columns(X, Wq, Wk, Wv):
    """SA(X) = Wv X A, A = softmax over the first index of XᵀWqᵀWkX/√d_q; X `(..., d, n)`."""
    P = X.mT @ Wq.T @ Wk @ X / math.sqrt(Wq.shape[0])  # (..., n, n)
    return Wv @ X @ P.softmax(dim=-2)


def _layernorm_columns(X, gamma, beta, eps):
    """LayerNorm of every token (column) of X `(..., d, n)`."""
    return torch.nn.functional.layer_norm(X.mT, X.shape[-2:-1], gamma, beta, eps).mT


def _check_block(fn, X, Wq, Wk, Wv, gamma, placement, beta, eps):
    _check_attention(fn, X, Wq, Wk)
    d = X.shape[-2]
    _check_weight(fn, "Wv", Wv, X, in_features=d, out_features=d, x_name="X")
    _check_gain(fn, "gamma", gamma, X.mT, "X")
    if beta is not None:
        _check_gain(fn, "beta", beta, X.mT, "X")
    check_eps(fn, eps)
    if placement not in ("pre", "post", "branch"):
        raise ValueError(
            f"{fn}: placement must be 'pre', 'post' or 'branch'; got placement={placement!r}"
        )


def _batched(fn, X, *weights):
    """Apply a 2-D formula to every `(d, n)` matrix of X `(..., d, n)`."""
    if X.dim() == 2:
        return fn(X, *weights)
    flat = X.reshape(-1, *X.shape[-2:])  # (B, d, n)
    result = torch.vmap(lambda x: fn(x, *weights))(flat)
    return result.reshape(*X.shape[:-2], *result.shape[-2:])


def _scaled_projection(x, gamma, scale, eps):
    """scale/s · Diag(γ) (I − x xᵀ/s²) with s² = ‖x‖² + eps: the Jacobian of every x/‖x‖ norm."""
    d = x.shape[-1]
    s2 = (x * x).sum(dim=-1)[..., None, None] + eps  # (..., 1, 1)
    eye = torch.eye(d, dtype=x.dtype, device=x.device)
    projection = eye - x[..., :, None] * x[..., None, :] / s2  # (..., d, d)
    return scale / s2.sqrt() * gamma[:, None] * projection


def _check_vector_and_gain(fn, x, gamma):
    check_tensor(fn, "x", x, min_rank=1)
    _check_gain(fn, "gamma", gamma, x)


def _check_gain(fn, name, gamma, x, x_name="x"):
    """A gain `(d,)` for the input x `(..., d)`, with x's dtype and device."""
    check_tensor(fn, name, gamma, min_rank=1)
    if gamma.shape != x.shape[-1:]:
        raise ValueError(
            f"{fn}: {name} must have shape (d,) = {tuple(x.shape[-1:])} to match the input; "
            f"got {name}.shape={tuple(gamma.shape)}"
        )
    check_same_dtype_and_device(fn, x_name, x, **{name: gamma})


def _check_attention(fn, X, Wq, Wk):
    check_tensor(fn, "X", X, min_rank=2)
    d_q = _check_weight(fn, "Wq", Wq, X, in_features=X.shape[-2], x_name="X")
    _check_weight(fn, "Wk", Wk, X, in_features=X.shape[-2], out_features=d_q, x_name="X")


def _check_weight(fn, name, W, x, *, in_features, out_features=None, x_name="x") -> int:
    """A matrix `(out_features, in_features)` with x's dtype and device; returns its rows."""
    check_tensor(fn, name, W, min_rank=2)
    expected = f"({'out' if out_features is None else out_features}, {in_features})"
    if W.dim() != 2 or W.shape[1] != in_features or out_features not in (None, W.shape[0]):
        raise ValueError(f"{fn}: {name} must have shape {expected}; got {tuple(W.shape)}")
    check_same_dtype_and_device(fn, x_name, x, **{name: W})
    return W.shape[0]


def _check_bias(fn, name, b, x, size, x_name="x"):
    check_tensor(fn, name, b, min_rank=1)
    if b.shape != (size,):
        raise ValueError(f"{fn}: {name} must have shape ({size},); got {tuple(b.shape)}")
    check_same_dtype_and_device(fn, x_name, x, **{name: b})
