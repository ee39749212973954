"""Matrix factorization primitives (cholesky, triangular_solve, lu) and the helpers they share.

Every primitive works on the last two axes and is batched over the leading ones (a batching rule
just binds the primitive again: the mapped axis becomes one more leading axis). Operands are
float32 or float64. Primitives have one output, so factorizations with several results pack
them into one array (documented per primitive); funcgrad.numpy.linalg slices them apart.
Derivative rules are written with funcgrad primitives (dot_general, triangular_solve, masks),
so they can be differentiated again. The QR, eigh and SVD primitives live in linalg_spectral.py.
"""
from __future__ import annotations

import numpy as np

from funcgrad import prims as P
from funcgrad.core import ShapedArray, bind, defprim, type_error

# ---------------------------------------------------------------------------------------------
# helpers on the last two axes, written with primitives (used by the rules of both modules)
# ---------------------------------------------------------------------------------------------


def check_matrix(name, x, square=False):
    """Shape-rule checks shared by the linalg primitives: rank >= 2, float32/64, square."""
    if x.ndim < 2:
        raise type_error(name, "operand must have at least two axes (a batch of matrices)",
                         (x,))
    if x.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise type_error(name, f"dtype {x.dtype.name} is not supported (float32 or float64)",
                         (x,))
    if square and x.shape[-1] != x.shape[-2]:
        raise type_error(name, "the last two axes must be square", (x,))


def mT(x):
    """Swap the last two axes."""
    n = len(x.shape)
    return P.transpose(x, list(range(n - 2)) + [n - 1, n - 2])


def mm(a, b):
    """Batched matrix product of (..., m, k) and (..., k, n) with equal batch shapes."""
    n = len(a.shape)
    bd = tuple(range(n - 2))
    return P.dot_general(a, b, (((n - 1,), (n - 2,)), (bd, bd)))


def const_like(arr, like):
    """A constant (r, c) numpy matrix broadcast to like's shape and dtype."""
    nd = len(like.shape)
    return P.broadcast_in_dim(np.asarray(arr, like.dtype), like.shape, (nd - 2, nd - 1))


def masked(x, mask):
    """x where the (r, c) boolean numpy mask holds, else 0 (a select: infinities stay out)."""
    nd = len(x.shape)
    m = P.broadcast_in_dim(np.asarray(mask, bool), x.shape, (nd - 2, nd - 1))
    return P.select(m, x, P.zeros_like(x))


def tril(x, k=0):
    return masked(x, np.tri(x.shape[-2], x.shape[-1], k, dtype=bool))


def triu(x, k=0):
    return masked(x, ~np.tri(x.shape[-2], x.shape[-1], k - 1, dtype=bool))


def diag_part(x):
    """(..., n, n) -> (..., n): the diagonal, as a masked sum over the last axis."""
    return P.reduce_sum(masked(x, np.eye(x.shape[-2], x.shape[-1], dtype=bool)),
                        (len(x.shape) - 1,))


def diag_embed(v):
    """(..., n) -> (..., n, n) with v on the diagonal."""
    n, nd = v.shape[-1], len(v.shape)
    full = P.broadcast_in_dim(v, tuple(v.shape) + (n,), tuple(range(nd)))
    return masked(full, np.eye(n, dtype=bool))


def row_vec(v, rows):
    """(..., k) -> (..., rows, k): v repeated along a new second-to-last axis."""
    nd = len(v.shape)
    return P.broadcast_in_dim(v, tuple(v.shape[:-1]) + (rows, v.shape[-1]),
                              tuple(range(nd - 1)) + (nd,))


def col_vec(v, cols):
    """(..., k) -> (..., k, cols): v repeated along a new last axis."""
    nd = len(v.shape)
    return P.broadcast_in_dim(v, tuple(v.shape) + (cols,), tuple(range(nd)))


def block(x, r0, r1, c0, c1):
    """x[..., r0:r1, c0:c1]."""
    nd = len(x.shape)
    return bind(P.slice_p, x, start_indices=(0,) * (nd - 2) + (r0, c0),
                limit_indices=tuple(x.shape[:-2]) + (r1, c1), strides=(1,) * nd)


def row(x, i):
    """x[..., i, :] (a rank-reduced slice)."""
    b = block(x, i, i + 1, 0, x.shape[-1])
    return P.reshape(b, tuple(x.shape[:-2]) + (x.shape[-1],))


def concat(xs, axis):
    return bind(P.concatenate_p, *xs, dimension=axis % len(xs[0].shape))


def pad_rows(x, below):
    """x with `below` zero rows appended (second-to-last axis)."""
    if not below:
        return x
    cfg = ((0, 0, 0),) * (len(x.shape) - 2) + ((0, below, 0), (0, 0, 0))
    return bind(P.pad_p, x, padding_config=cfg, value=0.0)


def pad_block(x, rows, cols, r0=0, c0=0):
    """x placed at (r0, c0) inside a zero (..., rows, cols) matrix."""
    cfg = ((0, 0, 0),) * (len(x.shape) - 2) + ((r0, rows - r0 - x.shape[-2], 0),
                                               (c0, cols - c0 - x.shape[-1], 0))
    return bind(P.pad_p, x, padding_config=cfg, value=0.0)


def sym(x):
    """(x + x^T) / 2."""
    return P.scalar_mul(P.add(x, mT(x)), 0.5)


def batch_unary(prim):
    """Batching rule of a one-operand matrix primitive: the mapped axis leads, bind again."""
    return lambda args, dims, **params: (bind(prim, args[0], **params), 0)


def batch_nary(prim):
    """Batching rule of a several-operand matrix primitive (unmapped operands broadcast)."""
    def rule(args, dims, **params):
        size = P._batch_size(args, dims)
        return bind(prim, *[P._bcast_batched(a, d, size) for a, d in zip(args, dims)],
                    **params), 0
    return rule


def _batched(x):
    """x as (B, r, c) plus a function restoring the leading axes."""
    lead = x.shape[:-2]
    nb = int(np.prod(lead, dtype=np.int64))
    return x.reshape((nb,) + x.shape[-2:]), lambda y: y.reshape(lead + y.shape[1:])


# ---------------------------------------------------------------------------------------------
# cholesky_p(a) -> L: the lower Cholesky factor of the symmetric part (a + a^T) / 2
# ---------------------------------------------------------------------------------------------

def _cholesky_shape(a):
    check_matrix("cholesky", a, square=True)
    return ShapedArray(a.shape, a.dtype)


def _cholesky_impl(a):
    s = (a + np.swapaxes(a, -1, -2)) / 2
    try:
        return np.linalg.cholesky(s).astype(a.dtype)
    except np.linalg.LinAlgError:  # JAX's semantics: NaNs for the matrices that are not PD
        flat, back = _batched(s)
        out = np.full(flat.shape, np.nan, a.dtype)
        for i, m in enumerate(flat):
            try:
                out[i] = np.linalg.cholesky(m)
            except np.linalg.LinAlgError:
                pass
        return back(out)


_PHI = lambda n: np.tri(n, k=-1) + 0.5 * np.eye(n)  # noqa: E731  tril with a halved diagonal


def _cholesky_jvp(ts, xs, *, out):
    # L' = L Phi(L^-1 sym(A') L^-T), Phi = lower triangle with the diagonal halved
    (t,) = ts
    if t is None:
        return None
    y = triangular_solve(out, sym(t), lower=True)                  # L^-1 S
    z = triangular_solve(out, mT(y), lower=True)                   # L^-1 S L^-T
    return mm(out, P.mul(z, const_like(_PHI(out.shape[-1]), z)))


def _cholesky_vjp(ct, a, *, out):
    # A_bar = sym(L^-T Phi(L^T L_bar) L^-1)
    p = P.mul(mm(mT(out), ct), const_like(_PHI(out.shape[-1]), ct))
    y = triangular_solve(out, p, lower=True, transpose_a=True)     # L^-T P
    z = triangular_solve(out, mT(y), lower=True, transpose_a=True)  # (L^-T P L^-1)^T
    return (sym(z),)


cholesky_p = defprim("cholesky", _cholesky_shape, _cholesky_impl, _cholesky_vjp,
                     _cholesky_jvp)
cholesky_p.batch = batch_unary(cholesky_p)


# ---------------------------------------------------------------------------------------------
# triangular_solve_p(a, b) -> x with op(T) x = b, T the lower/upper triangle of a
# (unit_diagonal: ones assumed on the diagonal), op = transpose when transpose_a
# ---------------------------------------------------------------------------------------------

def _trisolve_shape(a, b, *, lower, transpose_a, unit_diagonal):
    check_matrix("triangular_solve", a, square=True)
    check_matrix("triangular_solve", b)
    if a.dtype != b.dtype or a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
        raise type_error("triangular_solve", "operands must be (..., m, m) and (..., m, n) "
                         "with equal batch axes and dtypes", (a, b))
    return ShapedArray(b.shape, b.dtype)


def effective_triangle(a, lower, transpose_a, unit_diagonal):
    """(T, lower') as numpy: the triangle the solve reads, transposed when asked."""
    n = a.shape[-1]
    keep = np.tri(n, dtype=bool) if lower else ~np.tri(n, k=-1, dtype=bool)
    t = np.where(keep, a, 0)
    if unit_diagonal:
        t = np.where(np.eye(n, dtype=bool), 1, t)
    if transpose_a:
        return np.swapaxes(t, -1, -2), not lower
    return t, lower


def _trisolve_impl(a, b, *, lower, transpose_a, unit_diagonal):
    # forward / back substitution, one row at a time, vectorized over batch and columns
    t, low = effective_triangle(a, lower, transpose_a, unit_diagonal)
    m = a.shape[-1]
    x = np.zeros(b.shape, b.dtype)
    order = range(m) if low else range(m - 1, -1, -1)
    with np.errstate(all="ignore"):   # a zero pivot gives inf/nan, as LAPACK's trsm does
        for i in order:
            done = slice(0, i) if low else slice(i + 1, m)
            acc = b[..., i, :] - np.matmul(t[..., i:i + 1, done], x[..., done, :])[..., 0, :]
            x[..., i, :] = acc / t[..., i, i:i + 1]
    return x


def _tri_mask(n, lower, unit_diagonal):
    keep = np.tri(n, dtype=bool) if lower else ~np.tri(n, k=-1, dtype=bool)
    return keep & ~np.eye(n, dtype=bool) if unit_diagonal else keep


def _trisolve_jvp(ts, xs, *, out, lower, transpose_a, unit_diagonal):
    # x' = op(T)^-1 (b' - op(T') x)
    ta, tb = ts
    a = xs[0]
    kw = dict(lower=lower, transpose_a=transpose_a, unit_diagonal=unit_diagonal)
    rhs = tb
    if ta is not None:
        tt = masked(ta, _tri_mask(a.shape[-1], lower, unit_diagonal))
        rhs = P.add_any(rhs, P.neg(mm(mT(tt) if transpose_a else tt, out)))
    return None if rhs is None else triangular_solve(a, rhs, **kw)


def _trisolve_vjp(ct, a, b, *, out, lower, transpose_a, unit_diagonal):
    # b_bar = op(T)^-T x_bar; T_bar = -b_bar x^T (or -x b_bar^T for op = transpose), masked
    b_bar = triangular_solve(a, ct, lower=lower, transpose_a=not transpose_a,
                             unit_diagonal=unit_diagonal)
    g = mm(out, mT(b_bar)) if transpose_a else mm(b_bar, mT(out))
    a_bar = P.neg(masked(g, _tri_mask(a.shape[-1], lower, unit_diagonal)))
    return a_bar, b_bar


triangular_solve_p = defprim("triangular_solve", _trisolve_shape, _trisolve_impl,
                             _trisolve_vjp, _trisolve_jvp)
triangular_solve_p.batch = batch_nary(triangular_solve_p)


def triangular_solve(a, b, lower=True, transpose_a=False, unit_diagonal=False):
    """x with op(tri(a)) x = b (left side; batched over equal leading axes)."""
    return bind(triangular_solve_p, a, b, lower=bool(lower), transpose_a=bool(transpose_a),
                unit_diagonal=bool(unit_diagonal))


def solve_right_upper_t(u, y):
    """y U^-1 for an upper-triangular U: (U^-T y^T)^T."""
    return mT(triangular_solve(u, mT(y), lower=False, transpose_a=True))


# ---------------------------------------------------------------------------------------------
# lu_p(a) -> packed (..., n + 2, n): rows [0, n) the LU factors (unit-lower L below the
# diagonal, U on and above it) of P a = L U with partial pivoting; row n the pivots (LAPACK's
# ipiv, 0-based: row i was swapped with row piv[i] at step i); row n + 1 the permutation
# (row i of P a is row perm[i] of a). Pivots and permutation are stored as floats (exact).
# ---------------------------------------------------------------------------------------------

def _lu_shape(a):
    check_matrix("lu", a, square=True)
    return ShapedArray(a.shape[:-2] + (a.shape[-1] + 2, a.shape[-1]), a.dtype)


def _lu_impl(a):
    flat, back = _batched(a)
    nb, n, _ = flat.shape
    lu = flat.astype(a.dtype, copy=True)
    piv = np.zeros((nb, n), a.dtype)
    perm = np.tile(np.arange(n, dtype=a.dtype), (nb, 1))
    idx = np.arange(nb)
    with np.errstate(all="ignore"):
        for k in range(n):
            p = k + np.argmax(np.abs(lu[:, k:, k]), axis=1)    # first largest |pivot|
            piv[:, k] = p
            lu[idx, k], lu[idx, p] = lu[idx, p], lu[idx, k].copy()
            perm[idx, k], perm[idx, p] = perm[idx, p], perm[idx, k].copy()
            pivot = lu[:, k, k:k + 1]
            lu[:, k + 1:, k] = np.where(pivot != 0, lu[:, k + 1:, k] / pivot, lu[:, k + 1:, k])
            lu[:, k + 1:, k + 1:] -= lu[:, k + 1:, k:k + 1] * lu[:, k:k + 1, k + 1:]
    return back(np.concatenate([lu, piv[:, None], perm[:, None]], axis=1))


def lu_parts(packed):
    """(L, U, P as a permutation matrix) of a packed lu_p result, as primitives."""
    n = packed.shape[-1]
    lu = block(packed, 0, n, 0, n)
    ell = P.add(tril(lu, -1), const_like(np.eye(n), lu))
    u = triu(lu)
    return ell, u, perm_matrix(row(packed, n + 1))


def perm_matrix(perm):
    """(..., n) float permutation -> (..., n, n) matrix P with P[i, j] = (perm[i] == j)."""
    n, nd = perm.shape[-1], len(perm.shape)
    shape = tuple(perm.shape) + (n,)
    cols = bind(P.iota_p, dtype=perm.dtype, shape=shape, dimension=nd)
    return P.convert(P.eq(col_vec(perm, n), cols), perm.dtype)


def _lu_jvp(ts, xs, *, out):
    # M = L^-1 P A' U^-1; LU' = L tril(M, -1) + triu(M) U (pivots: zero tangent)
    (t,) = ts
    if t is None:
        return None
    ell, u, pm = lu_parts(out)
    y = triangular_solve(ell, mm(pm, t), lower=True, unit_diagonal=True)
    m = solve_right_upper_t(u, y)
    d = P.add(mm(ell, tril(m, -1)), mm(triu(m), u))
    return pad_rows(d, 2)


def _lu_vjp(ct, a, *, out):
    # M_bar = tril(L^T C, -1) + triu(C U^T); A_bar = P^T L^-T M_bar U^-T
    n = a.shape[-1]
    ell, u, pm = lu_parts(out)
    c = block(ct, 0, n, 0, n)
    mbar = P.add(tril(mm(mT(ell), c), -1), triu(mm(c, mT(u))))
    z = triangular_solve(ell, mbar, lower=True, transpose_a=True, unit_diagonal=True)
    w = mT(triangular_solve(u, mT(z), lower=False))                 # Z U^-T
    return (mm(mT(pm), w),)


lu_p = defprim("lu", _lu_shape, _lu_impl, _lu_vjp, _lu_jvp)
lu_p.batch = batch_unary(lu_p)
