"""Problem sizes shared by the tests of the chunked algorithms, odd ones included."""

from hypothesis import strategies as st

# (batch, N, d, d_v, chunk_size): no batch, one or two batch dimensions; chunks that divide N and
# that do not, chunk = 1, chunk > N, N = 1, d = d_v = 1, d_v ≠ d.
CHUNKED_SHAPES = [
    ((), 32, 4, 3, 8),
    ((), 37, 4, 3, 8),
    ((3,), 16, 5, 5, 4),
    ((2, 3), 10, 3, 6, 4),
    ((), 1, 3, 2, 64),
    ((2,), 5, 4, 3, 64),
    ((2,), 7, 3, 2, 1),
    ((), 50, 1, 1, 7),
]

# The same quantities drawn by hypothesis: leading batch dimensions, sequence length, feature and
# value widths, chunk size (from 1, through sizes that do not divide N, to larger than N), seed.
RANDOM_SHAPES = {
    "batch": st.lists(st.integers(1, 3), max_size=2),
    "n": st.integers(1, 48),
    "d": st.integers(1, 6),
    "d_v": st.integers(1, 5),
    "chunk_size": st.integers(1, 64),
    "seed": st.integers(0, 2**16),
}
