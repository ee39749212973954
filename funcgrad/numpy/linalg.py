"""funcgrad.numpy.linalg: jax.numpy.linalg's names (real dtypes; no eig/eigvals, which need
complex numbers).

Decompositions and solves are in _linalg_ext.py (over the primitives of funcgrad/linalg_prims.py
and funcgrad/linalg_spectral.py), norms and products in _linalg_norms.py.
"""
from __future__ import annotations

from ._linalg import matmul as _matmul
from ._linalg import tensordot as _tensordot
from ._linalg_ext import (  # noqa: F401
    EighResult,
    QRResult,
    SlogdetResult,
    SVDResult,
    cholesky,
    det,
    eigh,
    eigvalsh,
    inv,
    lstsq,
    matrix_power,
    matrix_rank,
    pinv,
    qr,
    slogdet,
    solve,
    svd,
    svdvals,
    tensorinv,
    tensorsolve,
)
from ._linalg_norms import (  # noqa: F401
    cond,
    cross,
    diagonal,
    matrix_norm,
    matrix_transpose,
    multi_dot,
    norm,
    outer,
    trace,
    vecdot,
    vector_norm,
)


def matmul(x1, x2, /, *, precision=None, preferred_element_type=None):
    """The matrix product (jnp.linalg.matmul: the array API's form of jnp.matmul).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.linalg.matmul(fnp.ones((2, 3)), fnp.ones(3)).tolist()
        [3.0, 3.0]
    """
    out = _matmul(x1, x2) if precision is None else _matmul(x1, x2, precision=precision)
    return out if preferred_element_type is None else out.astype(preferred_element_type)


def tensordot(x1, x2, /, *, axes=2, precision=None, preferred_element_type=None):
    """Tensor contraction over `axes` (jnp.linalg.tensordot)."""
    out = _tensordot(x1, x2, axes) if precision is None else _tensordot(
        x1, x2, axes, precision=precision)
    return out if preferred_element_type is None else out.astype(preferred_element_type)
