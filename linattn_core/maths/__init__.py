"""The mathematical toolkit of the book's linear-algebra, matrix-calculus and attention-Jacobian
chapters (and the toolkit page), one module per concept, in float64 torch unless the inputs say
otherwise:

- `linalg`: vec, Kronecker products, the commutation matrix, rotations, RoPE, Gram–Schmidt,
  power iteration, determinants by cofactors;
- `linear_systems`: LU with and without pivoting, triangular solves, solvability, least mean
  squares;
- `matrix_norms`: the six matrix norms and the table of inequalities between them;
- `probability`: random vectors, the Gaussian density, Monte Carlo estimates and checks;
- `random_matrices`: singular values of Gaussian matrices, the Xavier bound;
- `descent`: gradient descent on a quadratic and its step sizes;
- `calculus`: hand-derived derivatives checked against autograd, and closed forms.

They depend on `linattn_core.validation` alone; the attention code uses them
(`linattn_core.jacobians`), never the other way round.
"""
