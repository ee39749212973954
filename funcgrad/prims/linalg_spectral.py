"""Orthogonal factorization primitives: Householder QR, symmetric eigendecomposition and SVD.

Each has one packed output (layouts below); funcgrad.numpy.linalg slices the parts apart.
Eigenvectors and singular vectors are only defined up to sign: funcgrad fixes it (the entry of
largest magnitude of each eigenvector, and of each left singular vector, is positive) so that
every backend returns the same vectors. Derivatives follow JAX's rules (jax._src.lax.linalg):
QR's for m >= n (reduced, or square), eigh's with 1 / (w_j - w_i) between eigenvalues (inf/NaN
where eigenvalues repeat, as in JAX), SVD's for the reduced factors (NaN where singular values
repeat, as in JAX); reverse mode is the transpose of each forward rule, written out.
"""
from __future__ import annotations

import numpy as np

from funcgrad import prims as P
from funcgrad.core import ShapedArray, defprim
from funcgrad.prims.linalg import (
    batch_unary,
    block,
    check_matrix,
    col_vec,
    concat,
    const_like,
    diag_embed,
    diag_part,
    mm,
    mT,
    pad_block,
    row,
    row_vec,
    solve_right_upper_t,
    tril,
    triangular_solve,
)


def fix_signs(u, *others):
    """Flip columns of u (and the same columns of `others`) so that each column's entry of
    largest magnitude (the first, on ties) is positive."""
    if u.shape[-2] == 0 or u.shape[-1] == 0:
        return (u,) + others
    i = np.argmax(np.abs(u), axis=-2)[..., None, :]
    s = np.sign(np.take_along_axis(u, i, axis=-2))
    s = np.where(s == 0, 1, s).astype(u.dtype)
    return (u * s,) + tuple(o * s for o in others)


# ---------------------------------------------------------------------------------------------
# qr_p(a, full_matrices) -> packed (..., m, k + n), k = m if full_matrices else min(m, n):
# columns [0, k) hold Q (m x k), the block [0, k) x [k, k + n) holds R (k x n), zeros below
# ---------------------------------------------------------------------------------------------

def _qr_k(m, n, full_matrices):
    return m if full_matrices else min(m, n)


def _qr_shape(a, *, full_matrices):
    check_matrix("qr", a)
    m, n = a.shape[-2:]
    return ShapedArray(a.shape[:-2] + (m, _qr_k(m, n, full_matrices) + n), a.dtype)


def _qr_impl(a, *, full_matrices):
    m, n = a.shape[-2:]
    k = _qr_k(m, n, full_matrices)
    q, r = np.linalg.qr(a, mode="complete" if full_matrices else "reduced")
    out = np.zeros(a.shape[:-2] + (m, k + n), a.dtype)
    out[..., :, :k] = q
    out[..., :k, k:] = r
    return out


def _qr_parts(packed, m, n, full_matrices):
    k = _qr_k(m, n, full_matrices)
    return block(packed, 0, m, 0, k), block(packed, 0, k, k, k + n)


def _qr_check_diff(m, n, full_matrices):
    if m < n or (full_matrices and m != n):
        raise NotImplementedError(
            f"qr: derivatives are defined for m >= n with reduced factors (or square matrices), "
            f"as in JAX; got a {m}x{n} matrix with full_matrices={full_matrices}")


def _qr_jvp(ts, xs, *, out, full_matrices):
    # X = A' R^-1, M = Q^T X, O = tril(M, -1) - tril(M, -1)^T; Q' = Q (O - M) + X, R' = (M - O) R
    (t,) = ts
    if t is None:
        return None
    m, n = xs[0].shape[-2:]
    _qr_check_diff(m, n, full_matrices)
    q, r = _qr_parts(out, m, n, full_matrices)
    x = solve_right_upper_t(r, t)
    mq = mm(mT(q), x)
    low = tril(mq, -1)
    om = P.sub(low, mT(low))
    dq = P.add(mm(q, P.sub(om, mq)), x)
    dr = mm(P.sub(mq, om), r)
    return concat([dq, pad_block(dr, m, n)], -1)


def _qr_vjp(ct, a, *, out, full_matrices):
    # G = Q^T Q_bar - R_bar R^T; M_bar = tril(G - G^T, -1) - G; A_bar = (Q_bar + Q M_bar) R^-T
    m, n = a.shape[-2:]
    _qr_check_diff(m, n, full_matrices)
    q, r = _qr_parts(out, m, n, full_matrices)
    qb, rb = _qr_parts(ct, m, n, full_matrices)
    g = P.sub(mm(mT(q), qb), mm(rb, mT(r)))
    mb = P.sub(tril(P.sub(g, mT(g)), -1), g)
    xb = P.add(qb, mm(q, mb))
    return (mT(triangular_solve(r, mT(xb), lower=False)),)


qr_p = defprim("qr", _qr_shape, _qr_impl, _qr_vjp, _qr_jvp)
qr_p.batch = batch_unary(qr_p)


# ---------------------------------------------------------------------------------------------
# eigh_p(a, lower) -> packed (..., n + 1, n): rows [0, n) the eigenvectors (columns), row n the
# eigenvalues in ascending order; reads the lower (or upper) triangle of a, as LAPACK does
# ---------------------------------------------------------------------------------------------

def _eigh_shape(a, *, lower):
    check_matrix("eigh", a, square=True)
    return ShapedArray(a.shape[:-2] + (a.shape[-1] + 1, a.shape[-1]), a.dtype)


def _eigh_impl(a, *, lower):
    w, v = np.linalg.eigh(a, UPLO="L" if lower else "U")
    (v,) = fix_signs(v.astype(a.dtype))
    return np.concatenate([v, w.astype(a.dtype)[..., None, :]], axis=-2)


def _eigh_parts(out):
    n = out.shape[-1]
    return block(out, 0, n, 0, n), row(out, n)


def _fold(t, lower):
    """The symmetric matrix the primitive sees in t: its lower (upper) triangle mirrored."""
    tri = tril(t) if lower else tril(mT(t))
    return P.add(tri, mT(tril(tri, -1)))


def _eigh_f(w):
    # F[i, j] = 1 / (w_j - w_i) off the diagonal, 0 on it (JAX's 1 / (I + w_j - w_i) - I)
    n = w.shape[-1]
    diff = P.sub(row_vec(w, n), col_vec(w, n))
    eye = const_like(np.eye(n), diff)
    return P.sub(P.div(P.full_like(diff, 1.0), P.add(eye, diff)), eye)


def _f_times(f, x):
    """F o x, but exactly 0 where x is 0: a zero cotangent (eigenvalues or singular values used
    alone) stays zero next to the infinite F of repeated values, as JAX's symbolic zeros do."""
    return P.select(P.eq(x, P.zeros_like(x)), P.zeros_like(x), P.mul(f, x))


def _eigh_jvp(ts, xs, *, out, lower):
    # M = V^T A' V: w' = diag(M), V' = V (F o M)
    (t,) = ts
    if t is None:
        return None
    v, w = _eigh_parts(out)
    m = mm(mT(v), mm(_fold(t, lower), v))
    dv = mm(v, P.mul(_eigh_f(w), m))
    dw = diag_part(m)
    return concat([dv, P.reshape(dw, tuple(dw.shape[:-1]) + (1, dw.shape[-1]))], -2)


def _eigh_vjp(ct, a, *, out, lower):
    # G = V (F o V^T V_bar + diag(w_bar)) V^T, folded back onto the triangle that was read
    n = a.shape[-1]
    v, w = _eigh_parts(out)
    vb, wb = block(ct, 0, n, 0, n), row(ct, n)
    inner = P.add(_f_times(_eigh_f(w), mm(mT(v), vb)), diag_embed(wb))
    g = mm(v, mm(inner, mT(v)))
    sym_low = P.add(tril(P.add(g, mT(g)), -1), diag_embed(diag_part(g)))
    return (sym_low if lower else mT(sym_low),)


eigh_p = defprim("eigh", _eigh_shape, _eigh_impl, _eigh_vjp, _eigh_jvp)
eigh_p.batch = batch_unary(eigh_p)


# ---------------------------------------------------------------------------------------------
# svd_p(a) -> packed (..., m + 1 + n, k), k = min(m, n): rows [0, m) U, row m the singular
# values (descending), rows [m + 1, m + 1 + n) V (so a = U diag(s) V^T)
# ---------------------------------------------------------------------------------------------

def _svd_shape(a):
    check_matrix("svd", a)
    m, n = a.shape[-2:]
    return ShapedArray(a.shape[:-2] + (m + 1 + n, min(m, n)), a.dtype)


def _svd_impl(a):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    u, v = fix_signs(u.astype(a.dtype), np.swapaxes(vh, -1, -2).astype(a.dtype))
    return np.concatenate([u, s.astype(a.dtype)[..., None, :], v], axis=-2)


def svd_parts(out, m, n):
    """(U, s, V) of a packed svd_p result."""
    k = min(m, n)
    return block(out, 0, m, 0, k), row(out, m), block(out, m + 1, m + 1 + n, 0, k)


def _svd_f(s):
    # F[i, j] = 1 / (s_j^2 - s_i^2) off the diagonal, 0 on it (JAX's form)
    k = s.shape[-1]
    sj, si = row_vec(s, k), col_vec(s, k)
    eye = const_like(np.eye(k), sj)
    d = P.mul(P.add(sj, si), P.sub(sj, si))
    return P.sub(P.div(P.full_like(d, 1.0), P.add(d, eye)), eye)


def _svd_jvp(ts, xs, *, out):
    # dS = U^T A' V; s' = diag(dS); U' = U (F o (dS S + S dS^T)) [+ (I - U U^T) A' V / s];
    # V' = V (F o (S dS + dS^T S)) [+ (I - V V^T) A'^T U / s]
    (t,) = ts
    if t is None:
        return None
    m, n = xs[0].shape[-2:]
    u, s, v = svd_parts(out, m, n)
    k = s.shape[-1]
    f = _svd_f(s)
    ds = mm(mT(u), mm(t, v))
    s_row, s_col = row_vec(s, k), col_vec(s, k)
    dss, sds = P.mul(ds, s_row), P.mul(s_col, ds)
    du = mm(u, P.mul(f, P.add(dss, mT(dss))))
    dv = mm(v, P.mul(f, P.add(sds, mT(sds))))
    if m > n:
        tav = mm(t, v)
        du = P.add(du, P.div(P.sub(tav, mm(u, mm(mT(u), tav))), row_vec(s, m)))
    if n > m:
        tau = mm(mT(t), u)
        dv = P.add(dv, P.div(P.sub(tau, mm(v, mm(mT(v), tau))), row_vec(s, n)))
    dsv = diag_part(ds)
    return concat([du, P.reshape(dsv, tuple(dsv.shape[:-1]) + (1, k)), dv], -2)


def _svd_vjp(ct, a, *, out):
    # dS_bar = diag(s_bar) + (J + J^T) S + S (K + K^T), J = F o U^T U_bar, K = F o V^T V_bar;
    # A_bar = U dS_bar V^T [+ (I - U U^T) U_bar S^-1 V^T] [+ U S^-1 V_bar^T (I - V V^T)]
    m, n = a.shape[-2:]
    u, s, v = svd_parts(out, m, n)
    ub, sb, vb = svd_parts(ct, m, n)
    k = s.shape[-1]
    f = _svd_f(s)
    j = _f_times(f, mm(mT(u), ub))
    kk = _f_times(f, mm(mT(v), vb))
    s_row, s_col = row_vec(s, k), col_vec(s, k)
    dsb = P.add(diag_embed(sb), P.add(P.mul(P.add(j, mT(j)), s_row),
                                      P.mul(s_col, P.add(kk, mT(kk)))))
    abar = mm(u, mm(dsb, mT(v)))
    if m > n:
        r = _f_times(P.div(P.full_like(ub, 1.0), row_vec(s, m)),
                     P.sub(ub, mm(u, mm(mT(u), ub))))
        abar = P.add(abar, mm(r, mT(v)))
    if n > m:
        r = _f_times(P.div(P.full_like(vb, 1.0), row_vec(s, n)),
                     P.sub(vb, mm(v, mm(mT(v), vb))))
        abar = P.add(abar, mm(u, mT(r)))
    return (abar,)


svd_p = defprim("svd", _svd_shape, _svd_impl, _svd_vjp, _svd_jvp)
svd_p.batch = batch_unary(svd_p)

