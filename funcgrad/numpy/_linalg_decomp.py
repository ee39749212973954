"""jnp.linalg's decompositions and solves over the linalg primitives, with JAX's semantics.

Every function works on the last two axes and broadcasts over leading ones; integer operands
become float32 (JAX's promote_dtypes_inexact); float16 is rejected by the primitives. solve,
inv, det and slogdet go through one pivoted LU (`lu_p`) and triangular solves, so their
derivatives are the LU's; eigh, svd and qr have JAX's derivative rules (linalg_spectral.py).
"""
from __future__ import annotations

import builtins
import operator
from collections import namedtuple

import numpy as np

from funcgrad.prims import linalg as LP
from funcgrad.prims import linalg_spectral as LS
from funcgrad.core import bind, type_error
from funcgrad.core.dtypes import dtype_kind, finfo
from funcgrad.numpy._base import asarray, broadcast_shapes, broadcast_to, reshape, result_type
from funcgrad.numpy._shape import concatenate, flip, moveaxis, take_along_axis
from funcgrad.numpy._sorting import argsort
from funcgrad.numpy._ufuncs import abs as _abs
from funcgrad.numpy._ufuncs import (
    equal,
    exp,
    log,
    multiply,
    not_equal,
    prod,
    remainder,
    sign,
    sum,
    where,
)

EighResult = namedtuple("EighResult", ["eigenvalues", "eigenvectors"])
QRResult = namedtuple("QRResult", ["Q", "R"])
SlogdetResult = namedtuple("SlogdetResult", ["sign", "logabsdet"])
SVDResult = namedtuple("SVDResult", ["U", "S", "Vh"])


def _inexact(*xs):
    """Operands as arrays of one inexact dtype (integers and bools become float32; complex
    stays complex)."""
    dt = result_type(*xs)
    dt = dt if dtype_kind(dt) in "fc" else np.dtype(np.float32)
    return [asarray(x, dt) for x in xs]


# complex versions of the decompositions, registered by funcgrad.lax.linalg_complex (which
# sits above funcgrad.numpy: it differentiates host LAPACK calls with custom_jvp rules)
COMPLEX_IMPLS: dict = {}


def _complex(name):
    fn = COMPLEX_IMPLS.get(name)
    if fn is None:
        raise NotImplementedError(f"linalg.{name}: complex inputs are not supported")
    return fn


def _is_complex(*xs) -> bool:
    return builtins.any(dtype_kind(x.dtype) == "c" for x in xs)


def _mH(x):
    """The conjugate transpose of the last two axes (the transpose for real x)."""
    from funcgrad.prims import complex as PC
    return PC.conj(_mT(x)) if dtype_kind(x.dtype) == "c" else _mT(x)


def _matrix(name, x, square=False):
    (x,) = _inexact(x)
    if x.ndim < 2:
        raise type_error(name, f"needs an array of at least two axes, got shape {x.shape}",
                         (x.aval,))
    if square and x.shape[-1] != x.shape[-2]:
        raise type_error(name, f"the last two axes must be square, got shape {x.shape}",
                         (x.aval,))
    return x


def _mT(x):
    return LP.mT(x)


# ---------------------------------------------------------------------------------------------
# Cholesky, LU-based solves, determinants
# ---------------------------------------------------------------------------------------------

def cholesky(a, *, upper=False, symmetrize_input=True):
    """The Cholesky factor of a symmetric positive-definite matrix (batched).

    symmetrize_input=True (JAX's default) factors (a + a^T) / 2; False reads only the lower
    triangle (as LAPACK does). Matrices that are not positive definite give NaNs, as in JAX.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.linalg.cholesky(fnp.array([[4.0, 2.0], [2.0, 5.0]])).tolist()
        [[2.0, 0.0], [1.0, 2.0]]
    """
    a = _matrix("cholesky", a, square=True)
    if _is_complex(a):
        low = _complex("cholesky")(a, symmetrize_input)
        return _mH(low) if upper else low
    if not symmetrize_input:   # the lower triangle mirrored: the primitive's (a + a^T) / 2 = a
        a = LP.tril(a) + _mT(LP.tril(a, -1))
    low = bind(LP.cholesky_p, a)
    return _mT(low) if upper else low


def _lu(a):
    return bind(LP.lu_p, a)


def _lu_solve(packed, b):
    """x with a x = b from a's packed LU (b: (..., n, k), equal batch axes)."""
    ell, u, pm = LP.lu_parts(packed)
    y = LP.triangular_solve(ell, LP.mm(pm, b), lower=True, unit_diagonal=True)
    return LP.triangular_solve(u, y, lower=False)


def solve(a, b):
    """Solve a x = b: b is one vector when b.ndim == 1, else a batch of (n, k) matrices;
    leading axes broadcast (numpy 2's and JAX's rule).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.linalg.solve(fnp.array([[2.0, 0.0], [0.0, 4.0]]), fnp.array([2.0, 2.0])).tolist()
        [1.0, 0.5]
    """
    a, b = _inexact(a, b)
    a = _matrix("solve", a, square=True)
    n = a.shape[-1]
    vec = b.ndim == 1
    if vec:
        b = reshape(b, (n if b.shape[0] == n else b.shape[0], 1))
    if b.ndim < 2 or b.shape[-2] != n:
        raise type_error("solve", f"b must be (..., {n}, k) or ({n},) for a of shape {a.shape}"
                         f", got {tuple(b.shape) if not vec else (b.shape[0],)}",
                         (a.aval, b.aval))
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2], op="solve")
    a = broadcast_to(a, batch + (n, n))
    b = broadcast_to(b, batch + tuple(b.shape[-2:]))
    x = _complex("solve")(a, b) if _is_complex(a) else _lu_solve(_lu(a), b)
    return reshape(x, batch + (n,)) if vec else x


def inv(a):
    """The inverse of square matrices (batched), via LU with partial pivoting.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.linalg.inv(fnp.array([[2.0, 0.0], [0.0, 4.0]])).tolist()
        [[0.5, 0.0], [0.0, 0.25]]
    """
    a = _matrix("inv", a, square=True)
    n = a.shape[-1]
    eye = broadcast_to(asarray(np.eye(n, dtype=a.dtype)), a.shape)
    return _complex("solve")(a, eye) if _is_complex(a) else _lu_solve(_lu(a), eye)


def slogdet(a, *, method=None):
    """(sign, log|det|) of square matrices from their LU factors.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> s, l = fnp.linalg.slogdet(fnp.array([[0.0, 2.0], [3.0, 0.0]]))
        >>> float(s), round(float(l), 4)
        (-1.0, 1.7918)
    """
    if method not in (None, "lu"):
        raise NotImplementedError(f"slogdet: method={method!r} (funcgrad has 'lu')")
    a = _matrix("slogdet", a, square=True)
    if _is_complex(a):
        return SlogdetResult(*_complex("slogdet")(a))
    n = a.shape[-1]
    packed = _lu(a)
    d = LP.diag_part(LP.block(packed, 0, n, 0, n))
    piv = LP.row(packed, n)
    swaps = sum(not_equal(piv, asarray(np.arange(n, dtype=a.dtype))), axis=-1)
    parity = where(equal(remainder(swaps, 2), 1), asarray(-1.0, a.dtype),
                   asarray(1.0, a.dtype))
    return SlogdetResult(parity * prod(sign(d), axis=-1), sum(log(_abs(d)), axis=-1))


def det(a):
    """Determinants of square matrices: sign * exp(logabsdet) from slogdet (as JAX does).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> round(float(fnp.linalg.det(fnp.array([[1.0, 2.0], [3.0, 4.0]]))), 4)
        -2.0
    """
    s, logdet = slogdet(a)
    return s * exp(logdet)


# ---------------------------------------------------------------------------------------------
# eigh, svd, qr
# ---------------------------------------------------------------------------------------------

def eigh(a, UPLO=None, symmetrize_input=True):
    """Eigenvalues (ascending) and eigenvectors (columns) of symmetric matrices.

    symmetrize_input=True (JAX's default) uses (a + a^T) / 2; otherwise only the triangle
    UPLO ('L', the default, or 'U') is read. Each eigenvector is signed so that its entry of
    largest magnitude is positive. Repeated eigenvalues make the eigenvector derivative
    infinite/NaN, as in JAX.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.linalg.eigh(fnp.array([[2.0, 0.0], [0.0, 1.0]])).eigenvalues.tolist()
        [1.0, 2.0]
    """
    uplo = "L" if UPLO is None else UPLO
    if uplo not in ("L", "U"):
        raise ValueError(f"eigh: UPLO must be 'L' or 'U', got {UPLO!r}")
    a = _matrix("eigh", a, square=True)
    if _is_complex(a):
        return EighResult(*_complex("eigh")(a, uplo, symmetrize_input))
    if symmetrize_input:
        a = LP.sym(a)
    n = a.shape[-1]
    out = bind(LS.eigh_p, a, lower=uplo == "L")
    return EighResult(LP.row(out, n), LP.block(out, 0, n, 0, n))


def eigvalsh(a, UPLO="L", *, symmetrize_input=True):
    """Eigenvalues (ascending) of symmetric matrices."""
    return eigh(a, UPLO, symmetrize_input).eigenvalues


def s_dtype(a):
    """The (real) dtype of a's singular values and eigenvalues."""
    return np.dtype(f"f{a.dtype.itemsize // 2}") if dtype_kind(a.dtype) == "c" else a.dtype


def _complement(q, k):
    """An orthonormal basis of the complement of q's k orthonormal columns (Householder)."""
    m = q.shape[-2]
    full = bind(LS.qr_p, q, full_matrices=True)
    return LP.block(full, 0, m, k, m)


def svd(a, full_matrices=True, compute_uv=True, hermitian=False, subset_by_index=None):
    """Singular value decomposition a = U diag(S) Vh (S descending), batched.

    Each left singular vector is signed so that its entry of largest magnitude is positive.
    full_matrices=True completes U (or Vh) with an orthonormal basis of the complement; as in
    JAX, derivatives are defined for the reduced factors (and for S), and are NaN where
    singular values repeat.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.linalg.svd(fnp.array([[3.0, 0.0], [0.0, -4.0]]), compute_uv=False).tolist()
        [4.0, 3.0]
    """
    if subset_by_index is not None:
        raise NotImplementedError("svd: subset_by_index is not supported")
    a = _matrix("svd", a)
    if hermitian:
        return _svd_hermitian(a, compute_uv)
    if _is_complex(a):
        out = _complex("svd")(a, full_matrices, compute_uv)
        return SVDResult(*out) if compute_uv else out
    m, n = a.shape[-2:]
    k = builtins.min(m, n)
    u, s, v = LS.svd_parts(bind(LS.svd_p, a), m, n)
    if not compute_uv:
        return s
    if full_matrices and m > n:
        u = concatenate([u, _complement(u, k)], axis=-1)
    if full_matrices and n > m:
        v = concatenate([v, _complement(v, k)], axis=-1)
    return SVDResult(u, s, _mT(v))


def _svd_hermitian(a, compute_uv):
    # JAX's route: eigh, |w| sorted descending, U the eigenvectors, Vh signed by sign(w)
    w, v = eigh(a)
    s = _abs(w)
    order = flip(argsort(s, axis=-1), -1)    # JAX: a stable ascending sort, reversed
    s = take_along_axis(s, order, axis=-1)
    if not compute_uv:
        return s
    u = take_along_axis(v, broadcast_to(reshape(order, order.shape[:-1] + (1, -1)), v.shape),
                        axis=-1)
    sg = take_along_axis(sign(w), order, axis=-1).astype(u.dtype)
    return SVDResult(u, s, _mH(multiply(u, reshape(sg, sg.shape[:-1] + (1, -1)))))


def svdvals(x, /):
    """Singular values, descending."""
    return svd(x, compute_uv=False)


def qr(a, mode="reduced"):
    """Householder QR: mode 'reduced' (Q m x k, R k x n, k = min(m, n)), 'complete' (Q m x m)
    or 'r' (R only). As in JAX, derivatives need m >= n (reduced) or a square matrix.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> q, r = fnp.linalg.qr(fnp.array([[3.0], [4.0]]))
        >>> r.tolist()
        [[-5.0]]
    """
    if mode not in ("reduced", "complete", "r"):
        raise NotImplementedError(f"qr: mode={mode!r} (funcgrad has 'reduced', 'complete', "
                                  "'r')")
    a = _matrix("qr", a)
    if _is_complex(a):
        q, r = _complex("qr")(a, mode)
        return r if mode == "r" else QRResult(q, r)
    m, n = a.shape[-2:]
    full = mode == "complete"
    k = m if full else builtins.min(m, n)
    out = bind(LS.qr_p, a, full_matrices=full)
    r = LP.block(out, 0, k, k, k + n)
    return r if mode == "r" else QRResult(LP.block(out, 0, m, 0, k), r)


# ---------------------------------------------------------------------------------------------
# least squares, pseudo-inverse, rank, powers, tensor solves
# ---------------------------------------------------------------------------------------------

def lstsq(a, b, rcond=None, *, numpy_resid=False):
    """Least-squares solution of a x = b via the SVD: (x, residuals, rank, s), as JAX's.

    a is (m, n), b (m,) or (m, k); singular values below rcond * s_max (default: machine
    epsilon * max(m, n)) count as zero. Residuals are always returned (numpy_resid=True: empty
    when rank < n or m <= n, as numpy).
    """
    a, b = _inexact(a, b)
    if a.ndim != 2 or b.ndim not in (1, 2) or b.shape[0] != a.shape[0]:
        raise type_error("lstsq", "a must be (m, n) and b (m,) or (m, k)", (a.aval, b.aval))
    m, n = a.shape
    vec = b.ndim == 1
    b2 = reshape(b, (m, 1)) if vec else b
    rcond = float(finfo(s_dtype(a)).eps * builtins.max(m, n)) if rcond is None else rcond
    u, s, vh = svd(a, full_matrices=False)
    if s.shape[0] == 0:
        mask = s > 0
    else:
        mask = s >= asarray(rcond, s.dtype) * s[0]
    rank = sum(mask)
    safe = where(mask, s, asarray(1.0, s.dtype))
    s_inv = reshape(where(mask, 1 / safe, asarray(0.0, s.dtype)), (-1, 1))
    x = LP.mm(_mH(vh), s_inv.astype(a.dtype) * LP.mm(_mH(u), b2))
    if numpy_resid and (int(rank) < n or m <= n):
        resid = asarray(np.zeros((0,), s.dtype))
    else:
        r = b2 - LP.mm(a, x)
        resid = sum(_abs(r) ** 2 if _is_complex(r) else r * r, axis=0)
    return (reshape(x, (n,)) if vec else x), resid, rank, s


def pinv(a, rtol=None, hermitian=False, *, rcond=None):
    """Moore-Penrose pseudo-inverse via the SVD (singular values <= rtol * s_max dropped;
    default rtol 10 * max(m, n) * eps), batched.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.linalg.pinv(fnp.array([[2.0, 0.0], [0.0, 0.0]])).tolist()
        [[0.5, 0.0], [0.0, 0.0]]
    """
    a = _matrix("pinv", a)
    m, n = a.shape[-2:]
    rtol = rcond if rtol is None else rtol      # rcond: JAX's deprecated name of rtol
    if rtol is None:
        rtol = 10.0 * builtins.max(m, n) * float(finfo(s_dtype(a)).eps)
    u, s, vh = svd(a, full_matrices=False, hermitian=hermitian)
    if s.shape[-1] == 0:
        return asarray(np.zeros(a.shape[:-2] + (n, m), a.dtype))
    rt = asarray(rtol, s.dtype)
    cutoff = reshape(rt, rt.shape + (1,)) * s[..., 0:1]
    s = where(s > cutoff, s, asarray(np.inf, s.dtype))
    return LP.mm(_mH(vh), _mH(u) / reshape(s, s.shape + (1,)).astype(a.dtype))


def matrix_rank(M, rtol=None, *, hermitian=False, tol=None):
    """The number of singular values above the tolerance (JAX's rule: rtol, when given, is
    compared with the singular values; default s_max * max(m, n) * eps). hermitian: take the
    singular values from eigh; tol: JAX's deprecated name of rtol."""
    rtol = tol if rtol is None else rtol
    (M,) = _inexact(M)
    if M.ndim < 2:
        from funcgrad.numpy._ufuncs import any as _any
        return asarray(_any(not_equal(M, asarray(0.0, M.dtype))), np.int32)
    s = svd(M, compute_uv=False, hermitian=hermitian)
    if rtol is None:
        from funcgrad.numpy._ufuncs import max as _max
        tol = _max(s, axis=-1) * float(builtins.max(M.shape[-2:]) * finfo(s.dtype).eps) \
            if s.shape[-1] else asarray(np.zeros(s.shape[:-1], s.dtype))
    else:
        tol = asarray(rtol, s.dtype)
    tol = reshape(tol, tuple(tol.shape) + (1,))
    return sum(s > tol, axis=-1)


def matrix_power(a, n):
    """a raised to the integer power n (n < 0: powers of the inverse), by repeated squaring."""
    a = asarray(a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise type_error("matrix_power", f"needs square matrices, got shape {a.shape}",
                         (a.aval,))
    n = operator.index(n)
    if n == 0:
        return broadcast_to(asarray(np.eye(a.shape[-1], dtype=a.dtype)), a.shape)
    if n < 0:
        a, n = inv(a), -n
    result, base = None, a
    while n:
        if n & 1:
            result = base if result is None else LP.mm(result, base)
        n >>= 1
        if n:
            base = LP.mm(base, base)
    return result


def tensorinv(a, ind=2):
    """The inverse of a tensor seen as a matrix: the first `ind` axes against the rest."""
    a = asarray(a)
    ind = operator.index(ind)
    if ind <= 0:
        raise ValueError(f"tensorinv: ind must be a positive integer, got {ind}")
    rows, cols = a.shape[:ind], a.shape[ind:]
    flat = (int(np.prod(rows)), int(np.prod(cols)))
    if flat[0] != flat[1]:
        raise ValueError(f"tensorinv: the product of the first {ind} axes {rows} must equal "
                         f"that of the rest {cols}")
    return reshape(inv(reshape(a, flat)), tuple(cols) + tuple(rows))


def tensorsolve(a, b, axes=None):
    """x with tensordot(a, x, x.ndim) = b."""
    a, b = _inexact(a, b)
    if axes is not None:
        axes = [axes] if isinstance(axes, int) else list(axes)
        a = moveaxis(a, axes, list(range(a.ndim - len(axes), a.ndim)))  # numpy's order
    out_shape = tuple(a.shape[b.ndim:])
    if tuple(a.shape[:b.ndim]) != tuple(b.shape):
        raise ValueError(f"tensorsolve: the leading axes of a {tuple(a.shape)} must match "
                         f"b's shape {tuple(b.shape)}")
    a2 = reshape(a, (b.size, int(np.prod(out_shape))))
    return reshape(solve(a2, reshape(b, (-1,))), out_shape)
