"""Complex linear algebra behind funcgrad.numpy.linalg: Cholesky, eigh, SVD, QR and slogdet of
complex matrices as host LAPACK calls (numpy, batched) with JAX's derivative rules (custom_jvp:
forward mode, and reverse mode by transposition), and solve / inv through the real embedding
[[Re a, -Im a], [Im a, Re a]] (differentiable to any order with the real LU).

Complex eigenvector and singular-vector phases are LAPACK's, as in JAX; the rules hold for
functions that do not depend on them. The registration at the end hands these to
funcgrad.numpy.linalg, which dispatches complex operands here.
"""
from __future__ import annotations

import numpy as np

from funcgrad import numpy as fnp
from funcgrad.core import ShapedArray
from funcgrad.numpy import _linalg_decomp as D
from funcgrad.prims.callback import pure_callback
from funcgrad.transforms.custom import custom_jvp


def _real_dtype(dtype):
    return np.dtype(f"f{np.dtype(dtype).itemsize // 2}")


def _mH(x):
    return fnp.conj(fnp.swapaxes(x, -1, -2))


def _host(fn, spec_shape, dtype, *args):
    """fn(*numpy args) on the host, one packed result of shape spec_shape (batched by numpy
    under vmap)."""
    return pure_callback(fn, ShapedArray(spec_shape, dtype), *args, vmap_method="broadcast_all")


def _eye_like(x, n):
    return fnp.eye(n, dtype=x.dtype)


# ---------------------------------------------------------------------------------------------
# solve and inverse through the real embedding
# ---------------------------------------------------------------------------------------------

def solve(a, b):
    """x with a x = b for complex a (..., n, n) and b (..., n, k) of equal batch axes: the
    real 2n x 2n system [[Re a, -Im a], [Im a, Re a]] [Re x; Im x] = [Re b; Im b].

    Example:
        >>> import funcgrad.numpy as fnp
        >>> a = fnp.array([[2j, 0], [0, 1 + 1j]])
        >>> solve(a, fnp.array([[2.0 + 0j], [2.0]]))[:, 0].tolist()
        [-1j, (1-1j)]
    """
    n = a.shape[-1]
    ar, ai = fnp.real(a), fnp.imag(a)
    big = fnp.concatenate([fnp.concatenate([ar, -ai], axis=-1),
                           fnp.concatenate([ai, ar], axis=-1)], axis=-2)
    rhs = fnp.concatenate([fnp.real(b), fnp.imag(b)], axis=-2)
    x = D.solve(big, rhs)
    return (x[..., :n, :] + 1j * x[..., n:, :]).astype(a.dtype)


# ---------------------------------------------------------------------------------------------
# Cholesky
# ---------------------------------------------------------------------------------------------

def _np_cholesky(a):
    a = np.asarray(a)
    flat = a.reshape((-1,) + a.shape[-2:])
    out = np.full(flat.shape, np.nan, a.dtype)
    for i, m in enumerate(flat):
        try:
            out[i] = np.linalg.cholesky(m)
        except np.linalg.LinAlgError:
            pass   # not positive definite: NaNs, as JAX
    return out.reshape(a.shape)


@custom_jvp
def _cholesky(a):
    return _host(_np_cholesky, a.shape, a.dtype, a)


@_cholesky.defjvp
def _cholesky_jvp(primals, tangents):
    # dL = L phi(L^-1 dA L^-H), phi: the lower triangle with half its diagonal (Murray 2016)
    (a,), (da,) = primals, tangents
    low = _cholesky(a)
    n = a.shape[-1]
    inner = solve(low, _mH(solve(low, _mH(da))))   # L^-1 dA L^-H (dA Hermitian)
    half = fnp.tril(inner) * (1 - 0.5 * _eye_like(inner, n))
    return low, low @ half


def cholesky(a, symmetrize_input=True):
    """The lower Cholesky factor of Hermitian positive-definite complex matrices; (a + a^H) / 2
    with symmetrize_input, else the lower triangle (NaNs where not positive definite).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> low = cholesky(fnp.array([[4.0 + 0j, 2j], [-2j, 5.0]]))
        >>> [[complex(round(v.real, 5), round(v.imag, 5)) for v in r] for r in low.tolist()]
        [[(2+0j), 0j], [-1j, (2+0j)]]
    """
    if symmetrize_input:
        a = 0.5 * (a + _mH(a))
    else:
        a = fnp.tril(a) + _mH(fnp.tril(a, -1))
    return _cholesky(a)


# ---------------------------------------------------------------------------------------------
# eigh
# ---------------------------------------------------------------------------------------------

def _np_eigh(a):
    a = np.asarray(a)
    w, v = np.linalg.eigh(a)
    return np.concatenate([v, w[..., None, :].astype(a.dtype)], axis=-2)


@custom_jvp
def _eigh(a):
    n = a.shape[-1]
    packed = _host(_np_eigh, a.shape[:-2] + (n + 1, n), a.dtype, a)
    return fnp.real(packed[..., n, :]), packed[..., :n, :]


@_eigh.defjvp
def _eigh_jvp(primals, tangents):
    # JAX's rule: dw = Re diag(V^H dA V); dV = V (F * (V^H dA V)), F_ij = 1 / (w_j - w_i)
    (a,), (da,) = primals, tangents
    w, v = _eigh(a)
    n = a.shape[-1]
    m = _mH(v) @ da @ v
    eye = fnp.eye(n, dtype=w.dtype)
    diff = w[..., None, :] - w[..., :, None]
    f = 1 / (diff + eye) - eye
    dw = fnp.real(fnp.diagonal(m, axis1=-2, axis2=-1))
    return (w, v), (dw, v @ (f.astype(a.dtype) * m))


def eigh(a, uplo="L", symmetrize_input=True):
    """(eigenvalues ascending, eigenvectors) of Hermitian complex matrices; (a + a^H) / 2
    with symmetrize_input, else the `uplo` triangle.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> w, v = eigh(fnp.array([[2.0 + 0j, 1j], [-1j, 2.0]]))
        >>> [round(x, 5) for x in w.tolist()]
        [1.0, 3.0]
    """
    if symmetrize_input:
        a = 0.5 * (a + _mH(a))
    elif uplo == "L":
        a = fnp.tril(a) + _mH(fnp.tril(a, -1))
    else:
        a = fnp.triu(a) + _mH(fnp.triu(a, 1))
    return _eigh(a)


# ---------------------------------------------------------------------------------------------
# SVD
# ---------------------------------------------------------------------------------------------

def _np_svd_packed(a):
    """U (m, k), s (k) and Vh (k, n) packed into one (m + 1 + k, max(k, n)) array."""
    a = np.asarray(a)
    m, n = a.shape[-2:]
    k = min(m, n)
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    out = np.zeros(a.shape[:-2] + (m + 1 + k, max(k, n)), a.dtype)
    out[..., :m, :k] = u
    out[..., m, :k] = s
    out[..., m + 1:, :n] = vh
    return out


@custom_jvp
def _svd(a):
    m, n = a.shape[-2:]
    k = min(m, n)
    packed = _host(_np_svd_packed, a.shape[:-2] + (m + 1 + k, max(k, n)), a.dtype, a)
    return (packed[..., :m, :k], fnp.real(packed[..., m, :k]), packed[..., m + 1:, :n])


@_svd.defjvp
def _svd_jvp(primals, tangents):
    # JAX's rule for the reduced SVD (with the imaginary diagonal term of complex inputs)
    (a,), (da,) = primals, tangents
    u, s, vh = _svd(a)
    m, n = a.shape[-2:]
    k = min(m, n)
    v = _mH(vh)
    ds_mat = _mH(u) @ da @ v
    ds = fnp.real(fnp.diagonal(ds_mat, axis1=-2, axis2=-1))
    s_row = s[..., None, :]
    s_col = s[..., :, None]
    eye = fnp.eye(k, dtype=s.dtype)
    diffs = (s_row + s_col) * (s_row - s_col)
    f = (1 / (diffs + eye) - eye).astype(a.dtype)
    zero = (s == 0).astype(s.dtype)
    s_inv = 1 / (s + zero) - zero
    dss = s_row.astype(a.dtype) * ds_mat
    sds = s_col.astype(a.dtype) * ds_mat
    diag_term = 0.5 * (ds_mat - _mH(ds_mat)) * (eye * s_inv[..., None, :]).astype(a.dtype)
    du = u @ (f * (dss + _mH(dss)) + diag_term)
    dv = v @ (f * (sds + _mH(sds)))
    if m > n:
        dav = da @ v
        du = du + (dav - u @ (_mH(u) @ dav)) / s_row.astype(a.dtype)
    if n > m:
        dahu = _mH(da) @ u
        dv = dv + (dahu - v @ (vh @ dahu)) / s_row.astype(a.dtype)
    return (u, s, vh), (du, ds, _mH(dv))


def _np_svd_full(a):
    a = np.asarray(a)
    m, n = a.shape[-2:]
    u, s, vh = np.linalg.svd(a, full_matrices=True)
    out = np.zeros(a.shape[:-2] + (m + 1 + n, max(m, n)), a.dtype)
    out[..., :m, :m] = u
    out[..., m, :min(m, n)] = s
    out[..., m + 1:, :n] = vh
    return out


def svd(a, full_matrices=True, compute_uv=True):
    """The SVD of complex matrices: (U, S, Vh), or S when not compute_uv. As in JAX, the
    full_matrices factors of a non-square matrix have no derivative (differentiating them
    raises); the reduced factors and S have JAX's rules.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> s = svd(fnp.array([[3j, 0], [0, -4.0 + 0j]]), compute_uv=False)
        >>> [round(x, 5) for x in s.tolist()]
        [4.0, 3.0]
    """
    m, n = a.shape[-2:]
    if not compute_uv or not full_matrices or m == n:
        u, s, vh = _svd(a)
        return (u, s, vh) if compute_uv else s
    k = min(m, n)
    packed = _host(_np_svd_full, a.shape[:-2] + (m + 1 + n, max(m, n)), a.dtype, a)
    return (packed[..., :m, :m], fnp.real(packed[..., m, :k]), packed[..., m + 1:, :n])


# ---------------------------------------------------------------------------------------------
# QR
# ---------------------------------------------------------------------------------------------

def _np_qr(mode):
    def run(a):
        a = np.asarray(a)
        q, r = np.linalg.qr(a, mode=mode)
        m, n = a.shape[-2:]
        kq = q.shape[-1]
        out = np.zeros(a.shape[:-2] + (m + kq, max(kq, n)), a.dtype)
        out[..., :m, :kq] = q
        out[..., m:, :n] = r
        return out
    return run


def _qr_host(a, mode):
    m, n = a.shape[-2:]
    kq = m if mode == "complete" else min(m, n)
    packed = _host(_np_qr(mode), a.shape[:-2] + (m + kq, max(kq, n)), a.dtype, a)
    return packed[..., :m, :kq], packed[..., m:, :n]


@custom_jvp
def _qr_reduced(a):
    return _qr_host(a, "reduced")


@_qr_reduced.defjvp
def _qr_jvp(primals, tangents):
    # JAX's rule (m >= n), with the imaginary diagonal correction of complex inputs
    (a,), (da,) = primals, tangents
    q, r = _qr_reduced(a)
    n = a.shape[-1]
    dx_rinv = _mH(solve(_mH(r), _mH(da)))   # dA R^-1
    qt = _mH(q) @ dx_rinv
    low = fnp.tril(qt, -1)
    do = low - _mH(low)
    do = do + fnp.eye(n, dtype=qt.dtype) * (qt - fnp.real(qt).astype(qt.dtype))
    dq = q @ (do - qt) + dx_rinv
    dr = (qt - do) @ r
    return (q, r), (dq, dr)


def qr(a, mode="reduced"):
    """(Q, R) of complex matrices (mode "reduced", "complete" or "r", which returns (None,
    R)); derivatives as JAX's: for m >= n reduced factors or square matrices.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> q, r = qr(fnp.array([[1j], [1.0 + 0j]]))
        >>> round(abs(r[0, 0].item()), 5)
        1.41421
    """
    m, n = a.shape[-2:]
    if m >= n and (mode in ("reduced", "r") or m == n):
        q, r = _qr_reduced(a)
    else:
        q, r = _qr_host(a, "complete" if mode == "complete" else "reduced")
    return (None, r) if mode == "r" else (q, r)


# ---------------------------------------------------------------------------------------------
# slogdet
# ---------------------------------------------------------------------------------------------

def _np_slogdet(a):
    a = np.asarray(a)
    sgn, logabs = np.linalg.slogdet(a)
    return np.stack([sgn.astype(a.dtype), logabs.astype(a.dtype)], axis=-1)


@custom_jvp
def _slogdet(a):
    packed = _host(_np_slogdet, a.shape[:-2] + (2,), a.dtype, a)
    return packed[..., 0], fnp.real(packed[..., 1])


@_slogdet.defjvp
def _slogdet_jvp(primals, tangents):
    # d log det a = tr(a^-1 da): its real part moves log|det|, its imaginary part the phase
    (a,), (da,) = primals, tangents
    sgn, logabs = _slogdet(a)
    t = fnp.trace(solve(a, da), axis1=-2, axis2=-1)
    return (sgn, logabs), (sgn * 1j * fnp.imag(t).astype(sgn.dtype), fnp.real(t))


def slogdet(a):
    """(sign, log|det|) of complex square matrices; sign is the phase det / |det|.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> s, l = slogdet(fnp.array([[2j, 0], [0, 1.0 + 0j]]))
        >>> complex(s.item()), round(float(l), 5)
        (1j, 0.69315)
    """
    return _slogdet(a)


D.COMPLEX_IMPLS.update(cholesky=cholesky, eigh=eigh, qr=qr, slogdet=slogdet, solve=solve,
                       svd=svd)
