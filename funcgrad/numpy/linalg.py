"""funcgrad.numpy.linalg: jax.numpy.linalg's names (eig/eigvals on concrete arrays only).

Decompositions and solves are in _linalg_decomp.py (over the primitives of funcgrad/prims/linalg.py
and funcgrad/prims/linalg_spectral.py), norms and products in _linalg_norms.py.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from funcgrad.core import ArrayBase, Tracer
from funcgrad.numpy._base import asarray, canonical_dtype
from funcgrad.numpy._linalg import matmul as _matmul
from funcgrad.numpy._linalg import tensordot as _tensordot
from funcgrad.numpy._linalg import widen_operands
from funcgrad.numpy._linalg_decomp import (
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
from funcgrad.numpy._linalg_norms import (
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
    x1, x2 = widen_operands(x1, x2, preferred_element_type)
    out = _matmul(x1, x2) if precision is None else _matmul(x1, x2, precision=precision)
    return out if preferred_element_type is None else out.astype(preferred_element_type)


def tensordot(x1, x2, /, *, axes=2, precision=None, preferred_element_type=None):
    """Tensor contraction over `axes` (jnp.linalg.tensordot)."""
    x1, x2 = widen_operands(x1, x2, preferred_element_type)
    out = _tensordot(x1, x2, axes) if precision is None else _tensordot(
        x1, x2, axes, precision=precision)
    return out if preferred_element_type is None else out.astype(preferred_element_type)


class EigResult(NamedTuple):
    """linalg.eig's result: eigenvalues (..., n) and unit eigenvectors (..., n, n), complex."""
    eigenvalues: ArrayBase
    eigenvectors: ArrayBase


def _eig(a, name, vectors):
    if isinstance(a, Tracer):
        raise NotImplementedError(
            f"linalg.{name} needs concrete values: a general (non-symmetric) eigensolver has no "
            "primitive here yet (no CUDA kernel, no rules for jit, grad or vmap); use "
            "linalg.eigh for symmetric or Hermitian matrices")
    x = np.asarray(a)
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"linalg.{name}: expected square matrices (..., n, n), got {x.shape}")
    dt = canonical_dtype(x.dtype)
    cdt = np.dtype(np.complex128 if dt in (np.float64, np.complex128) else np.complex64)
    xc = x.astype(cdt if dt.kind == "c" else np.float32 if cdt == np.complex64 else np.float64)
    if x.size == 0:
        w, v = np.zeros(x.shape[:-1], cdt), (np.zeros(x.shape, cdt) if vectors else None)
    elif vectors:
        w, v = np.linalg.eig(xc)
    else:
        w, v = np.linalg.eigvals(xc), None
    w = asarray(np.asarray(w, cdt))
    return w if v is None else EigResult(w, asarray(np.asarray(v, cdt)))


def eig(a, /) -> EigResult:
    """Eigenvalues and right eigenvectors of square matrices (jnp.linalg.eig), complex results.

    Computed by LAPACK's geev through numpy, on concrete arrays only (JAX's eig, too, runs on
    the CPU alone): under jit, grad or vmap it raises NotImplementedError. Eigenvectors are the
    columns of `eigenvectors`, each of unit norm; real inputs give complex64 / complex128.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> w, v = fnp.linalg.eig(fnp.array([[0.0, -1.0], [1.0, 0.0]]))
        >>> sorted(w.tolist(), key=lambda c: c.imag)
        [-1j, 1j]
    """
    return _eig(a, "eig", True)


def eigvals(a, /) -> ArrayBase:
    """Eigenvalues of square matrices (jnp.linalg.eigvals), complex; concrete arrays only.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.linalg.eigvals(fnp.array([[2.0, 0.0], [0.0, 3.0]])).tolist()
        [(2+0j), (3+0j)]
    """
    return _eig(a, "eigvals", False)
