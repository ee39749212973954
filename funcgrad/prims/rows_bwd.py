"""Backward primitives of the fused last-axis primitives (funcgrad/prims/rows.py).

softmax_bwd(y, ct), log_softmax_bwd(out, ct) and softmax_xent_bwd(x, labels, ct) give the input
cotangent; layer_norm_bwd(x, scale, ct) and rms_norm_bwd(x, scale, ct) give every cotangent
packed into one array of shape (R + 2, n) (resp. (R + 1, n)) with R = prod(x.shape[:-1]): rows
[0, R) are dx, row R is dscale, row R + 1 dbias, so that one kernel reads x and ct once (the
per-column sums are its second, small pass); `unpack_norm` takes the views apart.

Each has a numpy impl (the spec) and rules derived from its composition with primitives (`math`
below), so the backward differentiates again (grad of grad) and batches.
"""
from __future__ import annotations

import math

import numpy as np

from funcgrad.prims import rows as F
from funcgrad import prims as P
from funcgrad.core import ShapedArray, bind, defprim, is_int, trace_to_expr, type_error

# ---------------------------------------------------------------------------------------------
# rules from a composition: vjp/jvp by differentiating `math`, batching by vmapping it
# ---------------------------------------------------------------------------------------------


def _composite(name, shape, impl, math_fn, nondiff=(), rowwise=True):
    """A primitive whose rules come from math_fn(*operands, **params) (written with
    primitives); operands listed in `nondiff` (integer labels) get no cotangent. A `rowwise`
    primitive batches by binding itself on the batched rows; the packed norm backward sums over
    rows (per example under vmap), so it batches by vmapping its composition."""

    def vjp(ct, *xs, out, **params):
        from funcgrad.transforms.ad import vjp as ad_vjp
        diff = [i for i in range(len(xs)) if i not in nondiff]

        def f(*d):
            full = list(xs)
            for i, v in zip(diff, d):
                full[i] = v
            return math_fn(*full, **params)
        _, back = ad_vjp(f, *[xs[i] for i in diff])
        cts = back(ct)
        res = [None] * len(xs)
        for i, c in zip(diff, cts):
            res[i] = c
        return tuple(res)

    def jvp(ts, xs, *, out, **params):
        from funcgrad.transforms.ad import jvp_expr_eval
        from funcgrad.core import aval_of
        if all(t is None for t in ts):
            return None
        expr, consts, _ = trace_to_expr(lambda *a: [math_fn(*a, **params)],
                                        [aval_of(x) for x in xs])
        return jvp_expr_eval(expr, consts, xs, list(ts))[1][0]

    def batch(args, dims, **params):
        if not rowwise:
            from funcgrad.transforms.batching import vmap
            return vmap(lambda *a: math_fn(*a, **params), in_axes=tuple(dims))(*args), 0
        size = P._batch_size(args, dims)
        return bind(prim, *[P._bcast_batched(a, d, size) for a, d in zip(args, dims)],
                    **params), 0

    prim = defprim(name, shape, impl, vjp, jvp, batch)
    return prim


# ---------------------------------------------------------------------------------------------
# softmax_bwd(y, ct) = y * (ct - sum(ct * y)); log_softmax_bwd(out, ct) = ct - e^out sum(ct)
# ---------------------------------------------------------------------------------------------

def _pair_shape(name):
    def rule(y, ct):
        F._check_rows(name, y, (ct,))
        if ct.shape != y.shape or ct.dtype != y.dtype:
            raise type_error(name, "the cotangent must match the output", (y, ct))
        return ShapedArray(y.shape, y.dtype)
    return rule


def _softmax_bwd_impl(y, ct):
    a, c = F._acc(y), F._acc(ct)
    return (a * (c - (c * a).sum(axis=-1, keepdims=True))).astype(y.dtype)


def _log_softmax_bwd_impl(out, ct):
    a, c = F._acc(out), F._acc(ct)
    return (c - np.exp(a) * c.sum(axis=-1, keepdims=True)).astype(out.dtype)


softmax_bwd_p = _composite("softmax_bwd", _pair_shape("softmax_bwd"), _softmax_bwd_impl,
                           lambda y, ct: F._softmax_lin(ct, y))
log_softmax_bwd_p = _composite(
    "log_softmax_bwd", _pair_shape("log_softmax_bwd"), _log_softmax_bwd_impl,
    lambda out, ct: P.sub(ct, P.mul(bind(P.exp_p, out), F._rsum(ct))))


# ---------------------------------------------------------------------------------------------
# softmax_xent_bwd(x, labels, ct) = ct[..., None] * (softmax(x) - one_hot(labels))
# ---------------------------------------------------------------------------------------------

def _xent_bwd_shape(x, labels, ct):
    F._check_rows("softmax_xent_bwd", x, (labels, ct))
    if (not is_int(labels.dtype) or labels.shape != x.shape[:-1] or ct.shape != labels.shape
            or ct.dtype != x.dtype):
        raise type_error("softmax_xent_bwd", "labels (integers) and the cotangent must be "
                         "shaped like the logits without their class axis", (x, labels, ct))
    return ShapedArray(x.shape, x.dtype)


def _xent_bwd_impl(x, labels, ct):
    if x.shape[-1] == 0:
        return np.zeros(x.shape, x.dtype)
    a = F._acc(x)
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    hit = np.arange(x.shape[-1]) == labels[..., None]
    return (F._acc(ct)[..., None] * (p - hit)).astype(x.dtype)


def _xent_bwd_math(x, labels, ct):
    nd = len(x.shape)
    return P.mul(P.broadcast_in_dim(ct, x.shape, range(nd - 1)), F._xent_dlogits(x, labels))


softmax_xent_bwd_p = _composite("softmax_xent_bwd", _xent_bwd_shape, _xent_bwd_impl,
                                _xent_bwd_math, nondiff=(1,))


# ---------------------------------------------------------------------------------------------
# layer_norm_bwd / rms_norm_bwd(x, scale, ct) -> packed [dx rows; dscale; (dbias)]
# ---------------------------------------------------------------------------------------------

def _norm_bwd_shape(name, k):
    def rule(x, scale, ct, *, eps):
        F._check_rows(name, x, (scale, ct))
        F._check_vector(name, x, scale, "scale")
        if ct.shape != x.shape or ct.dtype != x.dtype:
            raise type_error(name, "the cotangent must match x", (x, scale, ct))
        n = x.shape[-1]
        return ShapedArray((math.prod(x.shape[:-1]) + k, n), x.dtype)
    return rule


def _norm_bwd_impl(x, scale, ct, eps, center):
    n, rows = x.shape[-1], math.prod(x.shape[:-1])
    if n == 0 or rows == 0:
        return np.zeros((rows + (2 if center else 1), n), x.dtype)
    a, g = F._acc(x).reshape(rows, n), F._acc(ct).reshape(rows, n)
    xc = a - a.mean(axis=-1, keepdims=True) if center else a
    rstd = 1 / np.sqrt((xc * xc).mean(axis=-1, keepdims=True) + eps)
    xhat = xc * rstd
    gs = g * F._acc(scale)
    m2 = (gs * xhat).mean(axis=-1, keepdims=True)
    inner = gs - gs.mean(axis=-1, keepdims=True) - xhat * m2 if center else gs - xhat * m2
    parts = [rstd * inner, (g * xhat).sum(axis=0)[None]] + ([g.sum(axis=0)[None]]
                                                           if center else [])
    return np.concatenate(parts, axis=0).astype(x.dtype)


def _ln_bwd_math(x, scale, ct, *, eps):
    dx, ds, db = F._ln_vjp_composed(ct, x, scale, eps)
    return _pack(dx, [ds, db])


def _rms_bwd_math(x, scale, ct, *, eps):
    dx, ds = F._rms_vjp_composed(ct, x, scale, eps)
    return _pack(dx, [ds])


def _pack(dx, vecs):
    n = dx.shape[-1]
    rows = math.prod(dx.shape[:-1])
    return bind(P.concatenate_p, P.reshape(dx, (rows, n)),
                *[P.reshape(v, (1, n)) for v in vecs], dimension=0)


def unpack_norm(packed, xshape, k):
    """(dx shaped like x, [the k per-column (n,) vectors]) from a packed (R + k, n) array."""
    rows, n = packed.shape[0] - k, xshape[-1]

    def rows_of(lo, hi):
        return bind(P.slice_p, packed, start_indices=(lo, 0), limit_indices=(hi, n),
                    strides=(1, 1))
    return (P.reshape(rows_of(0, rows), xshape),
            [P.reshape(rows_of(rows + i, rows + i + 1), (n,)) for i in range(k)])


layer_norm_bwd_p = _composite(
    "layer_norm_bwd", _norm_bwd_shape("layer_norm_bwd", 2),
    lambda x, scale, ct, *, eps: _norm_bwd_impl(x, scale, ct, eps, True), _ln_bwd_math,
    rowwise=False)
rms_norm_bwd_p = _composite(
    "rms_norm_bwd", _norm_bwd_shape("rms_norm_bwd", 1),
    lambda x, scale, ct, *, eps: _norm_bwd_impl(x, scale, ct, eps, False), _rms_bwd_math,
    rowwise=False)

BWD_PRIMITIVES = (softmax_bwd_p, log_softmax_bwd_p, softmax_xent_bwd_p, layer_norm_bwd_p,
                  rms_norm_bwd_p)


F._BWD[:] = [__import__(__name__, fromlist=["_"])]   # fused.py's vjps bind these primitives
