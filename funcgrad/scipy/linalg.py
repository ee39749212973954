"""funcgrad.scipy.linalg: jax.scipy.linalg's triangular and Cholesky solves.

solve_triangular binds the triangular_solve primitive directly; cholesky / cho_factor /
cho_solve use the cholesky primitive (scipy's convention: the upper factor by default).
"""
from __future__ import annotations

from funcgrad.core.dtypes import dtype_kind
from funcgrad.prims import linalg as LP
from funcgrad.core import bind, type_error
from funcgrad.numpy._base import asarray, broadcast_shapes, broadcast_to, reshape, result_type

_TRANS = {0: False, "N": False, 1: True, "T": True, 2: True, "C": True}


def _inexact(*xs):
    dt = result_type(*xs)
    return [asarray(x, dt if dtype_kind(dt) == "f" else "float32") for x in xs]


def _rhs(name, a, b):
    """b as (..., n, k) with a's batch axes broadcast; and whether it was a vector."""
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise type_error(name, f"a must be (..., n, n), got shape {tuple(a.shape)}",
                         (a.aval, b.aval))
    vec = b.ndim == a.ndim - 1
    if vec:
        b = reshape(b, tuple(b.shape) + (1,))
    if b.ndim < 2 or b.shape[-2] != a.shape[-1]:
        raise type_error(name, f"b must be (..., {a.shape[-1]}) or (..., {a.shape[-1]}, k) "
                         f"for a of shape {tuple(a.shape)}", (a.aval, b.aval))
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2], op=name)
    return (broadcast_to(a, batch + tuple(a.shape[-2:])),
            broadcast_to(b, batch + tuple(b.shape[-2:])), vec)


def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                     debug=None, check_finite=True):
    """Solve op(a) x = b for triangular a (only its lower/upper triangle is read).

    Args:
        a: (..., n, n) triangular matrices.
        b: (..., n) when b.ndim == a.ndim - 1 (vectors), else (..., n, k).
        trans: 0/'N' (a x = b), 1/'T' or 2/'C' (a^T x = b).
        lower: read the lower triangle (default: the upper one).
        unit_diagonal: take the diagonal to be ones.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> from funcgrad.scipy.linalg import solve_triangular
        >>> solve_triangular(fnp.array([[2.0, 0.0], [1.0, 1.0]]), fnp.array([2.0, 3.0]),
        ...                  lower=True).tolist()
        [1.0, 2.0]
    """
    if trans not in _TRANS:
        raise ValueError(f"solve_triangular: trans must be 0, 1, 2, 'N', 'T' or 'C', got "
                         f"{trans!r}")
    a, b = _inexact(a, b)
    a, b2, vec = _rhs("solve_triangular", a, b)
    x = LP.triangular_solve(a, b2, lower=lower, transpose_a=_TRANS[trans],
                            unit_diagonal=unit_diagonal)
    return reshape(x, tuple(x.shape[:-1])) if vec else x


def cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    """The Cholesky factor of symmetric positive-definite matrices: upper (a = U^T U) by
    default, lower (a = L L^T) with lower=True; NaNs where a is not positive definite."""
    (a,) = _inexact(a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise type_error("cholesky", f"a must be (..., n, n), got shape {tuple(a.shape)}",
                         (a.aval,))
    low = bind(LP.cholesky_p, a)
    return low if lower else LP.mT(low)


def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """(c, lower) for cho_solve: c the Cholesky factor (zeros in the other triangle)."""
    return cholesky(a, lower=lower), lower


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """Solve a x = b given (c, lower) = cho_factor(a).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> from funcgrad.scipy.linalg import cho_factor, cho_solve
        >>> a = fnp.array([[4.0, 2.0], [2.0, 5.0]])
        >>> cho_solve(cho_factor(a), fnp.array([6.0, 7.0])).tolist()
        [1.0, 1.0]
    """
    c, lower = c_and_lower
    c, b = _inexact(c, b)
    c, b2, vec = _rhs("cho_solve", c, b)
    # a = L L^T: solve L y = b, then L^T x = y (for an upper factor U = L^T the transposes swap)
    y = LP.triangular_solve(c, b2, lower=lower, transpose_a=not lower)
    x = LP.triangular_solve(c, y, lower=lower, transpose_a=lower)
    return reshape(x, tuple(x.shape[:-1])) if vec else x
