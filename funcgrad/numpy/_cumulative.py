"""Cumulative reductions (cumsum, cumprod, cummax, cummin and nan variants), diff, trapezoid.

A cumulative op along an axis of length n is a Hillis-Steele scan: ceil(log2 n) rounds, each
combining every element with the one 2^k places before it (a shifted copy, a select keeps the
first 2^k unchanged). Every round is ordinary primitives, so cumulative ops differentiate
(cumsum's gradient is a reversed cumsum), batch, jit and run on CUDA with no new kernel.
"""
from __future__ import annotations

import numpy as np

from funcgrad import prims as P
from funcgrad.core import bind, is_float
from funcgrad.core.dtypes import dtype_kind, is_half
from funcgrad.numpy._base import _norm_axis, asarray, canonical_dtype, reshape
from funcgrad.numpy._shape import concatenate, flip, moveaxis, ravel
from funcgrad.numpy._ufuncs import isnan, maximum, minimum, multiply, sum, where


def _shift_mask(n, k, ndim, axis):
    """bool mask, True at positions >= k along `axis` (broadcastable)."""
    shape = [1] * ndim
    shape[axis] = n
    pos = bind(P.iota_p, dtype=np.dtype(np.int32), shape=tuple(shape), dimension=axis)
    return bind(P.ge_p, pos, P.full_like(pos, k))


def _slice_axis(x, start, stop, axis):
    lo = [0] * x.ndim
    hi = list(x.shape)
    lo[axis], hi[axis] = start, stop
    return bind(P.slice_p, x, start_indices=tuple(lo), limit_indices=tuple(hi),
                strides=(1,) * x.ndim)


def associative_scan_axis(op, x, axis, reverse=False):
    """Inclusive scan of the binary `op` along `axis` (Hillis-Steele, log2(n) rounds)."""
    if reverse:
        return flip(associative_scan_axis(op, flip(x, axis), axis), axis)
    n = x.shape[axis]
    k = 1
    while k < n:
        shifted = concatenate([_slice_axis(x, 0, k, axis), _slice_axis(x, 0, n - k, axis)],
                              axis)
        x = where(_shift_mask(n, k, x.ndim, axis), op(x, shifted), x)
        k *= 2
    return x


def _accum_dtype(x, dtype):
    dt = canonical_dtype(dtype)
    if dt is not None:
        return dt
    if dtype_kind(x.dtype) == "b" or (dtype_kind(x.dtype) in "iu" and x.dtype.itemsize < 4):
        # like sum: bools and small ints accumulate as int32 (unsigned ones as uint32)
        return np.dtype(np.uint32 if dtype_kind(x.dtype) == "u" else np.int32)
    return x.dtype


def _cumulative(op, name, promote=True):
    def f(a, axis=None, dtype=None):
        x = asarray(a)
        if promote:
            x = asarray(x, _accum_dtype(x, dtype))
        if axis is None:
            x, axis = ravel(x), 0
        if x.ndim == 0:
            x = reshape(x, (1,))
        ax = _norm_axis(axis, x.ndim, name)
        if promote and is_half(x.dtype):   # float16/bfloat16 sums and products in float32
            return asarray(associative_scan_axis(op, asarray(x, np.float32), ax), x.dtype)
        return associative_scan_axis(op, x, ax)
    f.__name__ = name
    f.__doc__ = (f"numpy.{name} along axis (None: the flattened array); differentiable.\n\n"
                 f"    Example:\n        >>> import funcgrad.numpy as fnp\n"
                 f"        >>> fnp.{name}(fnp.array([1, 2, 3])).shape\n        (3,)\n")
    return f


def _add(a, b):
    return a + b


cumsum = _cumulative(_add, "cumsum")
cumprod = _cumulative(multiply, "cumprod")
cumulative_max = _cumulative(maximum, "cummax", promote=False)
cumulative_min = _cumulative(minimum, "cummin", promote=False)


def nancumsum(a, axis=None, dtype=None):
    """cumsum with NaNs counted as zero."""
    x = asarray(a)
    return cumsum(where(isnan(x), 0, x) if is_float(x.dtype) else x, axis, dtype)


def nancumprod(a, axis=None, dtype=None):
    """cumprod with NaNs counted as one."""
    x = asarray(a)
    return cumprod(where(isnan(x), 1, x) if is_float(x.dtype) else x, axis, dtype)


def _with_initial(fn, identity):
    def f(x, /, *, axis=None, dtype=None, include_initial=False):
        x = asarray(x)
        if axis is None:
            if x.ndim > 1:
                raise ValueError(f"{fn.__name__}: axis must be given for arrays of rank > 1")
            axis = 0
        out = fn(x, axis, dtype)
        if include_initial:
            ax = _norm_axis(axis, out.ndim, fn.__name__)
            shape = list(out.shape)
            shape[ax] = 1
            from funcgrad.numpy._base import full
            out = concatenate([full(shape, identity, out.dtype), out], ax)
        return out
    return f


cumulative_sum = _with_initial(cumsum, 0)
cumulative_sum.__name__ = "cumulative_sum"
cumulative_sum.__doc__ = "Array API cumulative_sum (include_initial prepends a zero)."
cumulative_prod = _with_initial(cumprod, 1)
cumulative_prod.__name__ = "cumulative_prod"
cumulative_prod.__doc__ = "Array API cumulative_prod (include_initial prepends a one)."


def diff(a, n=1, axis=-1, prepend=None, append=None):
    """numpy.diff: the n-th discrete difference along axis."""
    x = asarray(a)
    ax = _norm_axis(axis, x.ndim, "diff")
    from funcgrad.numpy._base import broadcast_to

    def edge(e):
        e = asarray(e)
        if e.ndim == 0:
            shape = list(x.shape)
            shape[ax] = 1
            e = broadcast_to(e, shape)
        return e
    seq = ([edge(prepend)] if prepend is not None else []) + [x] + (
        [edge(append)] if append is not None else [])
    if len(seq) > 1:
        x = concatenate(seq, ax)
    for _ in range(n):
        m = x.shape[ax]
        x = _slice_axis(x, 1, m, ax) - _slice_axis(x, 0, max(m - 1, 0), ax) if m else x
        if x.dtype == np.bool_:
            x = x != False  # noqa: E712 - numpy's bool diff is not-equal
    return x


def ediff1d(ary, to_end=None, to_begin=None):
    """numpy.ediff1d: differences of the flattened array, with optional ends."""
    d = diff(ravel(ary))
    parts = ([ravel(asarray(to_begin, d.dtype))] if to_begin is not None else []) + [d] + (
        [ravel(asarray(to_end, d.dtype))] if to_end is not None else [])
    return concatenate(parts) if len(parts) > 1 else d


def trapezoid(y, x=None, dx=1.0, axis=-1):
    """numpy.trapezoid: the trapezoidal rule along axis."""
    y = asarray(y)
    ax = _norm_axis(axis, y.ndim, "trapezoid")
    y = moveaxis(y, ax, -1)
    if x is None:
        d = dx
    else:
        x = asarray(x)
        d = diff(x) if x.ndim == 1 else diff(moveaxis(x, ax, -1))
    n = y.shape[-1]
    avg = (_slice_axis(y, 1, n, y.ndim - 1) + _slice_axis(y, 0, max(n - 1, 0), y.ndim - 1))
    return sum(d * avg, axis=-1) * 0.5


def gradient(f, *varargs, axis=None, edge_order=None):
    """numpy.gradient with unit or scalar spacings: central differences inside, one-sided
    first-order differences at the ends."""
    f = asarray(f)
    f = f if is_float(f.dtype) else asarray(f, np.float32)
    axes = list(range(f.ndim)) if axis is None else (
        [axis] if isinstance(axis, int) else list(axis))
    axes = [_norm_axis(a, f.ndim, "gradient") for a in axes]
    if len(varargs) == 0:
        spacing = [1.0] * len(axes)
    elif len(varargs) == 1:
        spacing = list(varargs) * len(axes)
    else:
        spacing = list(varargs)
    if edge_order not in (None, 1):
        raise NotImplementedError("gradient: only edge_order=1 is supported")
    outs = []
    for ax, h in zip(axes, spacing):
        if np.ndim(h) != 0:
            raise NotImplementedError("gradient: only scalar spacings are supported")
        n = f.shape[ax]
        if n < 2:
            raise ValueError("gradient: shape of the array too small to calculate a numerical "
                             "gradient, at least 2 elements are required")
        first = _slice_axis(f, 1, 2, ax) - _slice_axis(f, 0, 1, ax)
        last = _slice_axis(f, n - 1, n, ax) - _slice_axis(f, n - 2, n - 1, ax)
        mid = (_slice_axis(f, 2, n, ax) - _slice_axis(f, 0, n - 2, ax)) * 0.5
        outs.append(concatenate([first, mid, last], ax) / h)
    return outs[0] if len(outs) == 1 else outs


__all__ = [
    "cumsum",
    "cumprod",
    "nancumsum",
    "nancumprod",
    "cumulative_sum",
    "cumulative_prod",
    "diff",
    "ediff1d",
    "trapezoid",
    "gradient",
]
