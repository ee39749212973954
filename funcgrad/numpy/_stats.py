"""Statistics of funcgrad.numpy: NaN-aware reductions, quantiles and medians, average, ptp,
cov, corrcoef, histogram (JAX's semantics; differentiable where JAX is).

Quantiles sort along the reduced axes (argsort + gather) and interpolate between neighbours,
so their gradient flows to the one or two elements that define each quantile.
"""
from __future__ import annotations

import builtins

import numpy as np

from funcgrad.core import is_float
from funcgrad.numpy._base import (
    _norm_axis,
    asarray,
    canonical_dtype,
    full,
    norm_axes,
    reshape,
    result_type,
)
from funcgrad.numpy._shape import moveaxis, ravel, take_along_axis, transpose
from funcgrad.numpy._sorting import sort
from funcgrad.numpy._ufuncs import (
    _float_dtype,
    any,
    argmax,
    argmin,
    floor,
    isnan,
    logical_not,
    max,
    mean,
    min,
    sqrt,
    square,
    sum,
    where,
)
from funcgrad.numpy._ufuncs import prod as _prod


def _nan_fill(a, fill):
    x = asarray(a)
    return where(isnan(x), fill, x) if is_float(x.dtype) else x


def nansum(a, axis=None, dtype=None, keepdims=False):
    """sum treating NaNs as zero."""
    return sum(_nan_fill(a, 0), axis=axis, dtype=dtype, keepdims=keepdims)


def nanprod(a, axis=None, dtype=None, keepdims=False):
    """prod treating NaNs as one."""
    return _prod(_nan_fill(a, 1), axis=axis, dtype=dtype, keepdims=keepdims)


def _count(x, axis, keepdims):
    ok = logical_not(isnan(x)) if is_float(x.dtype) else full(x.shape, True, np.bool_)
    return sum(ok, axis=axis, keepdims=keepdims)


def nanmean(a, axis=None, dtype=None, keepdims=False):
    """mean of the non-NaN elements (NaN where there are none)."""
    x = asarray(a)
    x = asarray(x, canonical_dtype(dtype) or _float_dtype(x))
    n = asarray(_count(x, axis, keepdims), x.dtype)
    return nansum(x, axis, keepdims=keepdims) / n


def nanvar(a, axis=None, dtype=None, ddof=0, keepdims=False):
    """var of the non-NaN elements."""
    x = asarray(a)
    x = asarray(x, canonical_dtype(dtype) or _float_dtype(x))
    m = nanmean(x, axis, keepdims=True)
    n = asarray(_count(x, axis, keepdims), x.dtype)
    ss = nansum(square(x - m), axis, keepdims=keepdims)
    from funcgrad.numpy._ufuncs import maximum
    return ss / maximum(n - ddof, 0)


def nanstd(a, axis=None, dtype=None, ddof=0, keepdims=False):
    return sqrt(nanvar(a, axis, dtype, ddof, keepdims))


def _nan_chooser(fn, fill):
    def f(a, axis=None, keepdims=False, initial=None):
        x = asarray(a)
        if not is_float(x.dtype):
            return fn(x, axis=axis, keepdims=keepdims, initial=initial)
        out = fn(where(isnan(x), fill, x), axis=axis, keepdims=keepdims, initial=initial)
        all_nan = logical_not(any(logical_not(isnan(x)), axis=axis, keepdims=keepdims))
        return where(all_nan, np.nan, out)
    return f


nanmax = _nan_chooser(max, -np.inf)
nanmax.__name__, nanmax.__doc__ = "nanmax", "max ignoring NaNs (NaN where all are NaN)."
nanmin = _nan_chooser(min, np.inf)
nanmin.__name__, nanmin.__doc__ = "nanmin", "min ignoring NaNs (NaN where all are NaN)."


def nanargmax(a, axis=None, keepdims=False):
    """argmax ignoring NaNs (-1 where every element is NaN, as in JAX)."""
    x = asarray(a)
    if not is_float(x.dtype):
        return argmax(x, axis, keepdims=keepdims)
    out = argmax(where(isnan(x), -np.inf, x), axis, keepdims=keepdims)
    return where(_all_nan(x, axis, keepdims), -1, out)


def nanargmin(a, axis=None, keepdims=False):
    x = asarray(a)
    if not is_float(x.dtype):
        return argmin(x, axis, keepdims=keepdims)
    out = argmin(where(isnan(x), np.inf, x), axis, keepdims=keepdims)
    return where(_all_nan(x, axis, keepdims), -1, out)


def _all_nan(x, axis, keepdims):
    from funcgrad.numpy._ufuncs import all
    if axis is None:
        m = all(isnan(x))
        return reshape(m, (1,) * x.ndim) if keepdims else m
    return all(isnan(x), axis=axis, keepdims=keepdims)


# ---------------------------------------------------------------------------------------------
# quantiles
# ---------------------------------------------------------------------------------------------

_METHODS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(a, q, axis, method, keepdims, nan_aware, name):
    if method not in _METHODS:
        raise ValueError(f"{name}: method must be one of {_METHODS}, got {method!r}")
    x = asarray(a)
    x = asarray(x, _float_dtype(x))
    q = asarray(q, x.dtype)
    if q.ndim > 1:
        raise ValueError(f"{name}: q must be a scalar or 1-D")
    nd = x.ndim
    axes = norm_axes(axis, nd, name)
    kept = [i for i in range(nd) if i not in axes]
    xt = transpose(x, kept + list(axes)) if nd else x
    rows = reshape(xt, [x.shape[i] for i in kept] + [-1 if x.size else
                                                     int(np.prod([x.shape[i] for i in axes]))])
    n = rows.shape[-1]
    s = sort(rows, axis=-1)                       # NaNs last
    qf = reshape(q, (-1,))
    nq = qf.shape[0]
    if nan_aware:
        cnt = asarray(_count(rows, -1, True), x.dtype)          # (..., 1)
    else:
        cnt = full(rows.shape[:-1] + (1,), float(n), x.dtype)
    pos = qf * (cnt - 1.0)                                      # (..., nq)
    lo = floor(pos)
    hi_ = where(lo + 1.0 > cnt - 1.0, lo, lo + 1.0)
    frac = pos - lo
    if method == "lower":
        hi_, frac = lo, frac * 0.0
    elif method == "higher":
        lo = where(frac > 0, hi_, lo)
        hi_, frac = lo, frac * 0.0
    elif method == "nearest":
        from funcgrad.numpy._ufuncs import round
        lo = where(round(pos) > lo, hi_, lo)
        hi_, frac = lo, frac * 0.0
    elif method == "midpoint":
        frac = where(frac > 0, 0.5, 0.0)
    top = builtins.max(n - 1, 0)
    from funcgrad.numpy._ufuncs import clip
    ilo = asarray(clip(lo, 0, top), np.int32)
    ihi = asarray(clip(hi_, 0, top), np.int32)
    if n == 0:
        out = full(rows.shape[:-1] + (nq,), np.nan, x.dtype)
    else:
        vlo = take_along_axis(s, ilo, -1)
        vhi = take_along_axis(s, ihi, -1)
        out = vlo + (vhi - vlo) * frac if method in ("linear", "midpoint") else vlo
        out = where(frac == 0, vlo, out)   # exact at nodes (also when vhi is inf)
    if nan_aware:
        out = where(cnt == 0, np.nan, out)
    elif n:
        out = where(any(isnan(rows), axis=-1, keepdims=True), np.nan, out)
    out = moveaxis(out, -1, 0)                   # (nq, *kept)
    if keepdims:
        shape = [1 if i in axes else x.shape[i] for i in range(nd)]
        out = reshape(out, (nq,) + tuple(shape))
    return reshape(out, tuple(out.shape[1:])) if q.ndim == 0 else out


def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
             keepdims=False, *, interpolation=None):
    """numpy.quantile (q in [0, 1]; a NaN in a slice gives NaN); differentiable in a.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> float(fnp.quantile(fnp.array([1.0, 2.0, 3.0, 4.0]), 0.5))
        2.5
    """
    return _quantile(a, q, axis, interpolation or method, keepdims, False, "quantile")


def nanquantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                keepdims=False, *, interpolation=None):
    """quantile of the non-NaN elements."""
    return _quantile(a, q, axis, interpolation or method, keepdims, True, "nanquantile")


def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
               keepdims=False, *, interpolation=None):
    """numpy.percentile (q in [0, 100])."""
    return quantile(a, asarray(q) / 100.0, axis, method=interpolation or method,
                    keepdims=keepdims)


def nanpercentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                  keepdims=False, *, interpolation=None):
    return nanquantile(a, asarray(q) / 100.0, axis, method=interpolation or method,
                       keepdims=keepdims)


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """numpy.median (the mean of the two middle values for an even count).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> float(fnp.median(fnp.array([3.0, 1.0, 2.0])))
        2.0
    """
    return quantile(a, 0.5, axis, keepdims=keepdims)


def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    return nanquantile(a, 0.5, axis, keepdims=keepdims)


# ---------------------------------------------------------------------------------------------
# moments and friends
# ---------------------------------------------------------------------------------------------

def average(a, axis=None, weights=None, returned=False, keepdims=False):
    """numpy.average: the (weighted) mean; returned=True also gives the sum of weights."""
    x = asarray(a)
    if weights is None:
        avg = mean(x, axis, keepdims=keepdims)
        n = float(x.size // builtins.max(1, avg.size)) if x.size else 0.0
        wsum = full(avg.shape, n, avg.dtype)
    else:
        w = asarray(weights)
        dt = result_type(_float_dtype(x), w)
        x, w = asarray(x, dt), asarray(w, dt)
        if w.shape != x.shape:
            if axis is None or w.ndim != 1:
                raise ValueError("average: weights must have a's shape, or be 1-D along axis")
            ax = _norm_axis(axis, x.ndim, "average")
            shape = [1] * x.ndim
            shape[ax] = w.shape[0]
            w = reshape(w, shape)
            from funcgrad.numpy._base import broadcast_to
            w = broadcast_to(w, x.shape)
        wsum = sum(w, axis, keepdims=keepdims)
        avg = sum(x * w, axis, keepdims=keepdims) / wsum
    return (avg, wsum) if returned else avg


def ptp(a, axis=None, out=None, keepdims=False):
    """Range (max - min) along axis."""
    return max(a, axis, keepdims=keepdims) - min(a, axis, keepdims=keepdims)


def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None):
    """numpy.cov: covariance matrix of variables (rows unless rowvar=False)."""
    from funcgrad.numpy._linalg import matmul
    from funcgrad.numpy._shape import concatenate
    x = asarray(m)
    x = asarray(x, _float_dtype(x))
    if x.ndim > 2:
        raise ValueError("cov: m has more than 2 dimensions")
    x = reshape(x, (1, -1)) if x.ndim < 2 else x
    if not rowvar and x.shape[0] != 1:
        x = transpose(x)
    if y is not None:
        yy = asarray(y, x.dtype)
        yy = reshape(yy, (1, -1)) if yy.ndim < 2 else yy
        if not rowvar and yy.shape[0] != 1:
            yy = transpose(yy)
        x = concatenate([x, yy], 0)
    ddof = (0 if bias else 1) if ddof is None else ddof
    n = x.shape[1]
    w = None
    if fweights is not None:
        w = asarray(fweights, x.dtype)
    if aweights is not None:
        aw = asarray(aweights, x.dtype)
        w = aw if w is None else w * aw
    if w is None:
        avg = mean(x, axis=1, keepdims=True)
        fact = float(n - ddof)
        xc = x - avg
        return _squeeze2(matmul(xc, transpose(xc)) / fact)
    wsum = sum(w)
    avg = sum(x * w, axis=1, keepdims=True) / wsum
    if aweights is None:
        fact = wsum - ddof
    else:
        fact = wsum - ddof * sum(w * asarray(aweights, x.dtype)) / wsum
    xc = x - avg
    return _squeeze2(matmul(xc * w, transpose(xc)) / fact)


def _squeeze2(c):
    return reshape(c, ()) if c.shape == (1, 1) else c


def corrcoef(x, y=None, rowvar=True):
    """numpy.corrcoef: Pearson correlation coefficients, clipped to [-1, 1]."""
    from funcgrad.numpy._base import eye
    from funcgrad.numpy._ufuncs import clip
    c = cov(x, y, rowvar)
    if c.ndim == 0:
        return c / c
    d = sum(c * eye(c.shape[0], dtype=c.dtype), axis=1)
    s = sqrt(d)
    return clip(c / reshape(s, (-1, 1)) / reshape(s, (1, -1)), -1.0, 1.0)


def histogram_bin_edges(a, bins=10, range=None, weights=None):
    """Equal-width bin edges over range (default: the data's min and max)."""
    from funcgrad.numpy._base import arange
    x = ravel(asarray(a))
    dt = _float_dtype(x)
    if not isinstance(bins, (int, np.integer)):
        return asarray(bins, dt)
    if range is None:
        lo, hi = min(x).astype(dt), max(x).astype(dt)
    else:
        lo, hi = asarray(range[0], dt), asarray(range[1], dt)
    same = hi == lo
    lo, hi = where(same, lo - 0.5, lo), where(same, hi + 0.5, hi)
    return lo + (hi - lo) * (arange(int(bins) + 1, dtype=dt) / float(bins))


def histogram(a, bins=10, range=None, weights=None, density=None):
    """numpy.histogram: (counts, edges); the last bin is closed on the right."""
    from funcgrad.numpy._sorting import searchsorted
    x = ravel(asarray(a))
    edges = histogram_bin_edges(x, bins, range)
    nb = edges.shape[0] - 1
    idx = searchsorted(edges, x, side="right") - 1
    idx = where(x == edges[-1], nb - 1, idx)
    inside = (x >= edges[0]) & (x <= edges[-1])
    j = reshape(asarray(np.arange(nb, dtype=np.int32)), (nb, 1))
    hit = (reshape(idx, (1, -1)) == j) & reshape(inside, (1, -1))
    if weights is None:
        counts = sum(hit, axis=1, dtype=np.int32 if not density else None)
    else:
        counts = sum(where(hit, reshape(asarray(weights), (1, -1)), 0), axis=1)
    if density:
        counts = asarray(counts, edges.dtype)
        widths = edges[1:] - edges[:-1]
        counts = counts / widths / sum(counts)
    return counts, edges


__all__ = [
    "nansum",
    "nanprod",
    "nanmean",
    "nanvar",
    "nanstd",
    "nanmax",
    "nanmin",
    "nanargmax",
    "nanargmin",
    "quantile",
    "nanquantile",
    "percentile",
    "nanpercentile",
    "median",
    "nanmedian",
    "average",
    "ptp",
    "cov",
    "corrcoef",
    "histogram_bin_edges",
    "histogram",
]
