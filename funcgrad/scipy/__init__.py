"""funcgrad.scipy: jax.scipy's linalg (triangular and Cholesky solves), special, stats and
signal."""
from funcgrad.scipy import linalg, signal, special, stats  # noqa: F401
