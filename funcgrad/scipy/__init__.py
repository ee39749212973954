"""funcgrad.scipy: jax.scipy-style functions (so far the triangular and Cholesky solves of
funcgrad.scipy.linalg)."""
from funcgrad.scipy import linalg  # noqa: F401
