"""Fused primitives over the last axis: softmax, log_softmax, softmax cross-entropy with integer
labels, layer_norm and rms_norm.

Each one keeps the full rule set of a primitive (shape rule, numerically stable numpy impl, vjp
and jvp, batching rule). Their vjps bind the backward primitives of funcgrad/prims/rows_bwd.py (one
hand-written kernel each on CUDA), whose own rules are the compositions written here, so that
they differentiate again. They reduce
the *last* axis only: `funcgrad.nn` moves (and merges) the user's axes there first. float16
operands accumulate in float32 inside the impls. The CUDA side lowers each one to a single
kernel with one block per row (funcgrad/cuda/fused.py).
"""
from __future__ import annotations

import numpy as np

from funcgrad import prims as P
from funcgrad.core import ShapedArray, bind, defprim, is_float, is_half, is_int, type_error

# ---------------------------------------------------------------------------------------------
# helpers shared by the rules (all rows are the last axis)
# ---------------------------------------------------------------------------------------------


def _acc(x: np.ndarray) -> np.ndarray:
    """float16/bfloat16 values widened to float32 for accumulation; other dtypes unchanged."""
    return x.astype(np.float32) if is_half(x.dtype) else x


def _rsum(x):
    """Row sums broadcast back to x's shape."""
    nd = len(x.shape)
    return P.broadcast_in_dim(P.reduce_sum(x, (nd - 1,)), x.shape, range(nd - 1))


def _rmean(x):
    """Row means broadcast back to x's shape."""
    return P.scalar_mul(_rsum(x), 1.0 / max(x.shape[-1], 1))


def _row(v, shape):
    """A per-column vector of shape (n,) broadcast along every row of `shape`."""
    return P.broadcast_in_dim(v, tuple(shape), (len(shape) - 1,))


def _lead_sum(x):
    """Sum over every axis but the last: (..., n) -> (n,)."""
    nd = len(x.shape)
    return x if nd == 1 else P.reduce_sum(x, range(nd - 1))


def _check_rows(name, x, others=()):
    if x.ndim < 1:
        raise type_error(name, "needs an operand of rank >= 1 (it reduces the last axis)",
                         (x,) + tuple(others))
    if not is_float(x.dtype):
        raise type_error(name, f"dtype {x.dtype.name} is not a floating type",
                         (x,) + tuple(others))


def _check_vector(name, x, v, what):
    if v.shape != (x.shape[-1],) or v.dtype != x.dtype:
        raise type_error(name, f"{what} must be {x.dtype.name}[{x.shape[-1]}] (one value per "
                         "element of the normalized last axis)", (x, v))


_BWD: list = []


def _B():
    """funcgrad.prims.rows_bwd: the backward primitives (it builds on this module and registers
    itself in _BWD when imported; funcgrad/__init__.py imports it)."""
    return _BWD[0]


def _batched(args, dims):
    """Every operand with a leading batch axis (unbatched ones broadcast)."""
    size = P._batch_size(args, dims)
    return [P._bcast_batched(a, d, size) for a, d in zip(args, dims)]


# ---------------------------------------------------------------------------------------------
# softmax and log_softmax
# ---------------------------------------------------------------------------------------------

def _rows_shape(name):
    def rule(x):
        _check_rows(name, x)
        return ShapedArray(x.shape, x.dtype)
    return rule


def _softmax_impl(x):
    if x.shape[-1] == 0:
        return x.copy()
    a = _acc(x)
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(x.dtype)


def _softmax_lin(t, y):
    """The softmax Jacobian (symmetric) applied to t: y * (t - sum(t * y))."""
    return P.mul(y, P.sub(t, _rsum(P.mul(t, y))))


softmax_p = defprim(
    "softmax", _rows_shape("softmax"), _softmax_impl,
    vjp=lambda ct, x, *, out: (bind(_B().softmax_bwd_p, out, ct),),
    jvp=lambda ts, xs, *, out: None if ts[0] is None else _softmax_lin(ts[0], out),
    batch=lambda args, dims: (bind(softmax_p, args[0]), 0))


def _log_softmax_impl(x):
    if x.shape[-1] == 0:
        return x.copy()
    a = _acc(x)
    s = a - a.max(axis=-1, keepdims=True)
    return (s - np.log(np.exp(s).sum(axis=-1, keepdims=True))).astype(x.dtype)


# d log_softmax^T ct = ct - softmax(x) * sum(ct), with softmax(x) = exp(out)
log_softmax_p = defprim(
    "log_softmax", _rows_shape("log_softmax"), _log_softmax_impl,
    vjp=lambda ct, x, *, out: (bind(_B().log_softmax_bwd_p, out, ct),),
    jvp=lambda ts, xs, *, out: None if ts[0] is None else P.sub(
        ts[0], _rsum(P.mul(bind(P.exp_p, out), ts[0]))),
    batch=lambda args, dims: (bind(log_softmax_p, args[0]), 0))


# ---------------------------------------------------------------------------------------------
# softmax cross-entropy with integer labels: loss[...] = logsumexp(x[..., :]) - x[..., label]
# ---------------------------------------------------------------------------------------------

def _xent_shape(logits, labels):
    _check_rows("softmax_xent", logits, (labels,))
    if not is_int(labels.dtype) or labels.shape != logits.shape[:-1]:
        raise type_error("softmax_xent", "labels must be integers shaped like the logits "
                         "without their last (class) axis", (logits, labels))
    return ShapedArray(labels.shape, logits.dtype)


def _xent_impl(x, labels):
    n = x.shape[-1]
    bad = (labels < 0) | (labels >= n)
    if np.any(bad):
        raise P.IndexOutOfRange(f"softmax_xent: label {labels[bad].flat[0]} is out of range "
                                f"for {n} classes")
    if x.size == 0:
        return np.zeros(labels.shape, x.dtype)
    a = _acc(x)
    s = a - a.max(axis=-1, keepdims=True)
    picked = np.take_along_axis(s, labels[..., None].astype(np.intp), axis=-1)[..., 0]
    return (np.log(np.exp(s).sum(axis=-1)) - picked).astype(x.dtype)


def _one_hot_rows(labels, shape, dtype):
    """one_hot(labels) shaped like the logits: iota(last axis) == labels[..., None]."""
    nd = len(shape)
    cls = bind(P.iota_p, dtype=labels.dtype, shape=tuple(shape), dimension=nd - 1)
    hit = P.eq(cls, P.broadcast_in_dim(labels, shape, range(nd - 1)))
    return P.convert(hit, dtype)


def _xent_dlogits(x, labels):
    """d loss / d logits = softmax(x) - one_hot(labels)."""
    return P.sub(bind(softmax_p, x), _one_hot_rows(labels, x.shape, x.dtype))


def _xent_vjp(ct, x, labels, *, out):
    return bind(_B().softmax_xent_bwd_p, x, labels, ct), None


def _xent_jvp(ts, xs, *, out):
    if ts[0] is None:
        return None
    x, labels = xs
    return P.reduce_sum(P.mul(ts[0], _xent_dlogits(x, labels)), (len(x.shape) - 1,))


softmax_xent_p = defprim(
    "softmax_xent", _xent_shape, _xent_impl, _xent_vjp, _xent_jvp,
    batch=lambda args, dims: (bind(softmax_xent_p, *_batched(args, dims)), 0))


# ---------------------------------------------------------------------------------------------
# layer_norm(x, scale, bias) = (x - mean) / sqrt(var + eps) * scale + bias
# ---------------------------------------------------------------------------------------------

def _ln_shape(x, scale, bias, *, eps):
    _check_rows("layer_norm", x, (scale, bias))
    _check_vector("layer_norm", x, scale, "scale")
    _check_vector("layer_norm", x, bias, "bias")
    return ShapedArray(x.shape, x.dtype)


def _ln_impl(x, scale, bias, *, eps):
    if x.size == 0:
        return np.zeros(x.shape, x.dtype)
    a = _acc(x)
    xc = a - a.mean(axis=-1, keepdims=True)
    rstd = 1 / np.sqrt((xc * xc).mean(axis=-1, keepdims=True) + eps)
    return (xc * rstd * _acc(scale) + _acc(bias)).astype(x.dtype)


def _ln_stats(x, eps):
    """xhat = (x - mean) * rstd and rstd = 1 / sqrt(var + eps), both shaped like x."""
    xc = P.sub(x, _rmean(x))
    rstd = bind(P.rsqrt_p, P.add(_rmean(P.mul(xc, xc)), P.full_like(x, eps)))
    return P.mul(xc, rstd), rstd


def _ln_lin(g, xhat, rstd):
    """The (symmetric) Jacobian of xhat applied to g: rstd (g - mean g - xhat mean(g xhat))."""
    return P.mul(rstd, P.sub(P.sub(g, _rmean(g)), P.mul(xhat, _rmean(P.mul(g, xhat)))))


def _ln_vjp_composed(ct, x, scale, eps):
    """(dx, dscale, dbias) written with primitives (the rules of layer_norm_bwd use it)."""
    xhat, rstd = _ln_stats(x, eps)
    dx = _ln_lin(P.mul(ct, _row(scale, x.shape)), xhat, rstd)
    return dx, _lead_sum(P.mul(ct, xhat)), _lead_sum(ct)


def _ln_vjp(ct, x, scale, bias, *, out, eps):
    B = _B()
    dx, (dscale, dbias) = B.unpack_norm(bind(B.layer_norm_bwd_p, x, scale, ct, eps=eps),
                                        x.shape, 2)
    return dx, dscale, dbias


def _ln_jvp(ts, xs, *, out, eps):
    tx, tscale, tbias = ts
    x, scale, _ = xs
    if tx is None and tscale is None and tbias is None:
        return None
    xhat, rstd = _ln_stats(x, eps)
    return P.add_any(P.add_any(
        None if tx is None else P.mul(_ln_lin(tx, xhat, rstd), _row(scale, x.shape)),
        None if tscale is None else P.mul(xhat, _row(tscale, x.shape))),
        None if tbias is None else _row(tbias, x.shape))


def _affine_batch(prim, args, dims, **params):
    """Batch a normalization whose per-column scale (and bias) may carry the batch axis."""
    x, vecs = args[0], args[1:]
    if all(d is None for d in dims[1:]):
        return bind(prim, x, *vecs, **params), 0
    # batched scale/bias: normalize with unit scale (and zero bias), then apply them per example
    n = x.shape[-1]
    dt = x.dtype
    unit = [P.broadcast_in_dim(np.asarray(v, dt), (n,), ())
            for v in [1.0] + [0.0] * (len(vecs) - 1)]
    xhat = bind(prim, x, *unit, **params)
    size = P._batch_size(args, dims)
    xhat = P._bcast_batched(xhat, dims[0], size)
    shape = tuple(xhat.shape)
    nd = len(shape)

    def spread(v, d):  # (n,) or (B, n) -> the batched output shape
        return P.broadcast_in_dim(v, shape, (nd - 1,) if d is None else (0, nd - 1))
    out = P.mul(xhat, spread(vecs[0], dims[1]))
    if len(vecs) > 1:
        out = P.add(out, spread(vecs[1], dims[2]))
    return out, 0


layer_norm_p = defprim("layer_norm", _ln_shape, _ln_impl, _ln_vjp, _ln_jvp,
                       batch=lambda args, dims, *, eps: _affine_batch(layer_norm_p, args, dims,
                                                                      eps=eps))


# ---------------------------------------------------------------------------------------------
# rms_norm(x, scale) = x / sqrt(mean(x^2) + eps) * scale
# ---------------------------------------------------------------------------------------------

def _rms_shape(x, scale, *, eps):
    _check_rows("rms_norm", x, (scale,))
    _check_vector("rms_norm", x, scale, "scale")
    return ShapedArray(x.shape, x.dtype)


def _rms_impl(x, scale, *, eps):
    if x.size == 0:
        return np.zeros(x.shape, x.dtype)
    a = _acc(x)
    rrms = 1 / np.sqrt((a * a).mean(axis=-1, keepdims=True) + eps)
    return (a * rrms * _acc(scale)).astype(x.dtype)


def _rms_stats(x, eps):
    """xhat = x * rrms and rrms = 1 / sqrt(mean(x^2) + eps), both shaped like x."""
    rrms = bind(P.rsqrt_p, P.add(_rmean(P.mul(x, x)), P.full_like(x, eps)))
    return P.mul(x, rrms), rrms


def _rms_lin(g, xhat, rrms):
    """The (symmetric) Jacobian of xhat applied to g: rrms (g - xhat mean(g xhat))."""
    return P.mul(rrms, P.sub(g, P.mul(xhat, _rmean(P.mul(g, xhat)))))


def _rms_vjp_composed(ct, x, scale, eps):
    """(dx, dscale) written with primitives (the rules of rms_norm_bwd use it)."""
    xhat, rrms = _rms_stats(x, eps)
    return _rms_lin(P.mul(ct, _row(scale, x.shape)), xhat, rrms), _lead_sum(P.mul(ct, xhat))


def _rms_vjp(ct, x, scale, *, out, eps):
    B = _B()
    dx, (dscale,) = B.unpack_norm(bind(B.rms_norm_bwd_p, x, scale, ct, eps=eps), x.shape, 1)
    return dx, dscale


def _rms_jvp(ts, xs, *, out, eps):
    tx, tscale = ts
    x, scale = xs
    if tx is None and tscale is None:
        return None
    xhat, rrms = _rms_stats(x, eps)
    return P.add_any(
        None if tx is None else P.mul(_rms_lin(tx, xhat, rrms), _row(scale, x.shape)),
        None if tscale is None else P.mul(xhat, _row(tscale, x.shape)))


rms_norm_p = defprim("rms_norm", _rms_shape, _rms_impl, _rms_vjp, _rms_jvp,
                     batch=lambda args, dims, *, eps: _affine_batch(rms_norm_p, args, dims,
                                                                    eps=eps))

FUSED_PRIMITIVES = (softmax_p, log_softmax_p, softmax_xent_p, layer_norm_p, rms_norm_p)

