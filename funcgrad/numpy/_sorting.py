"""Sorting, searching, counting and set operations of funcgrad.numpy (JAX's semantics).

sort is argsort (a primitive) followed by a gather, so it is differentiable: the gradient of
sort scatters the cotangent back through the permutation. Functions whose output shape depends
on the data (unique, nonzero, the set operations) run eagerly on concrete arrays; under jit they
need JAX's static `size=` argument, like jax.numpy.
"""
from __future__ import annotations

import builtins

import numpy as np

from funcgrad import prims as P
from funcgrad.core import ConcretizationError, Tracer, bind, is_float, user_frame_src
from funcgrad.prims.sorting import argsort_p
from funcgrad.numpy._base import _norm_axis, arange, asarray, full, reshape, result_type
from funcgrad.numpy._shape import concatenate, flip, moveaxis, ravel, take, take_along_axis
from funcgrad.numpy._ufuncs import (
    any,
    argmax,
    equal,
    isnan,
    less,
    logical_and,
    logical_not,
    logical_or,
    sum,
    where,
)


def _is_traced(*xs):
    return builtins.any(isinstance(x, Tracer) for x in xs)


def _concrete(x):
    """x's value as a numpy array when Python may read it (not traced, or traced by eager
    autodiff, whose values are concrete), else None."""
    if not isinstance(x, Tracer):
        return np.asarray(x)
    v = x.to_concrete_value()
    return None if v is None else np.asarray(v)


def _needs_size(name):
    raise ConcretizationError(
        f"{name}: the output shape depends on the values of a traced array; pass a static "
        f"size= (as in jax.numpy.{name}) to use it under jit/vmap/grad.\n  at {user_frame_src()}")


# ---------------------------------------------------------------------------------------------
# sort / argsort
# ---------------------------------------------------------------------------------------------

def _argsort_last(x, descending):
    if not descending:
        return bind(argsort_p, x)
    # stable descending: argsort the reversed row, map indices back, reverse (ties keep order)
    n = x.shape[-1]
    r = bind(argsort_p, flip(x, -1))
    return flip((n - 1) - r, -1)


def argsort(a, axis=-1, *, kind=None, order=None, stable=True, descending=False):
    """numpy.argsort: a stable sort's indices (int32); NaNs sort last.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.argsort(fnp.array([3.0, 1.0, 2.0])).tolist()
        [1, 2, 0]
    """
    if order is not None:
        raise TypeError("funcgrad.numpy.argsort: the 'order' argument is not supported")
    x = asarray(a)
    if axis is None:
        x, axis = ravel(x), 0
    if x.ndim == 0:
        return reshape(asarray(0), ())
    ax = _norm_axis(axis, x.ndim, "argsort")
    return moveaxis(_argsort_last(moveaxis(x, ax, -1), descending), -1, ax)


def sort(a, axis=-1, *, kind=None, order=None, stable=True, descending=False):
    """numpy.sort (stable; NaNs last); differentiable through the permutation.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.sort(fnp.array([3.0, 1.0, 2.0])).tolist()
        [1.0, 2.0, 3.0]
    """
    x = asarray(a)
    if axis is None:
        x, axis = ravel(x), 0
    if x.ndim == 0:
        return x
    idx = argsort(x, axis, order=order, descending=descending)
    return take_along_axis(x, idx, axis)


def msort(a):
    return sort(a, axis=0)


def partition(a, kth, axis=-1):
    """numpy.partition: here the fully sorted array (a valid partition for every kth)."""
    return sort(a, axis)


def argpartition(a, kth, axis=-1):
    """numpy.argpartition: here the indices of a full stable sort (valid for every kth)."""
    return argsort(a, axis)


def sort_complex(a):
    return sort(a)


def lexsort(keys, axis=-1):
    """numpy.lexsort: sort by keys[-1], ties broken by keys[-2], ... (stable)."""
    keys = [asarray(k) for k in keys]
    if not keys:
        raise TypeError("lexsort: need at least one key")
    ax = _norm_axis(axis, keys[0].ndim, "lexsort")
    idx = None
    for k in keys:  # least significant first: each later stable sort keeps earlier ties
        kk = k if idx is None else take_along_axis(k, idx, ax)
        step = argsort(kk, ax)
        idx = step if idx is None else take_along_axis(idx, step, ax)
    return idx


def _lt_nan_last(a, b):
    """a sorts before b in numpy's order (NaN greatest)."""
    if not is_float(result_type(a, b)):
        return less(a, b)
    return logical_or(less(a, b), logical_and(isnan(b), logical_not(isnan(a))))


def searchsorted(a, v, side="left", sorter=None, *, method="compare_all"):
    """numpy.searchsorted on a sorted 1-D array (int32 insertion indices; compares all pairs).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.searchsorted(fnp.array([1.0, 2.0, 3.0]), fnp.array([2.0, 2.5])).tolist()
        [1, 2]
    """
    a = asarray(a)
    if a.ndim != 1:
        raise ValueError(f"searchsorted: a must be 1-D, got shape {tuple(a.shape)}")
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    if sorter is not None:
        a = take(a, sorter)
    dt = result_type(a, v)
    a, v = asarray(a, dt), asarray(v, dt)
    vv = reshape(v, tuple(v.shape) + (1,))
    if side == "left":
        before = _lt_nan_last(a, vv)                  # a[i] < v
    else:
        before = logical_not(_lt_nan_last(vv, a))     # a[i] <= v
    return sum(before, axis=-1, dtype=np.int32)


# ---------------------------------------------------------------------------------------------
# data-dependent shapes: unique, nonzero and friends
# ---------------------------------------------------------------------------------------------

def _first_true_positions(flag, size):
    """For j < size: the position of the j-th True of the 1-D bool `flag`, and whether it
    exists (compare-all: O(len(flag) * size))."""
    from funcgrad.numpy._cumulative import cumsum
    n = flag.shape[0]
    rank = cumsum(P.convert(flag, np.int32)) - 1
    j = reshape(arange(size, dtype=np.int32), (size, 1))
    hit = logical_and(reshape(flag, (1, n)), equal(reshape(rank, (1, n)), j))
    found = any(hit, axis=1)
    pos = argmax(hit, axis=1) if n else full((size,), 0, np.int32)
    return pos, found


def nonzero(a, *, size=None, fill_value=None):
    """numpy.nonzero: a tuple of int32 index arrays; under jit pass a static size= (padded
    with fill_value, default 0, or truncated, as in JAX)."""
    x = asarray(a)
    if x.ndim == 0:
        raise ValueError("nonzero is not defined for 0-d arrays; use atleast_1d first")
    if size is None:
        v = _concrete(x)
        if v is None:
            _needs_size("nonzero")
        # indices carry no derivative: eager autodiff's concrete values give them as constants
        return tuple(asarray(i.astype(np.int32)) for i in np.nonzero(v))
    flag = ravel(x != 0) if x.dtype != np.bool_ else ravel(x)
    if flag.shape[0] == 0:
        flat = full((size,), 0, np.int32)
        found = full((size,), False, np.bool_)
    else:
        flat, found = _first_true_positions(flag, int(size))
    out, rem = [], flat
    for d in reversed(x.shape):
        out.append(rem % d if d else rem)
        rem = rem // d if d else rem
    out = out[::-1]
    fills = fill_value if isinstance(fill_value, (tuple, list)) else [fill_value] * x.ndim
    return tuple(where(found, o, 0 if f is None else f) for o, f in zip(out, fills))


def flatnonzero(a, *, size=None, fill_value=None):
    return nonzero(ravel(a), size=size, fill_value=fill_value)[0]


def argwhere(a, *, size=None, fill_value=None):
    """numpy.argwhere: (count, ndim) int32 indices of the non-zero elements."""
    from funcgrad.numpy._shape import stack
    x = asarray(a)
    if x.ndim == 0:
        x = reshape(x, (1,))
        idx = nonzero(x, size=size, fill_value=fill_value)
        return reshape(idx[0], (-1, 0)) if idx[0].shape[0] == 0 else stack(idx, 1)[:, :0]
    return stack(nonzero(x, size=size, fill_value=fill_value), axis=1)


def where_nonzero(condition, x=None, y=None, /, *, size=None, fill_value=None):
    """numpy.where: where(condition, x, y) selects; where(condition) is nonzero(condition)
    (pass size= under jit)."""
    if x is None and y is None:
        return nonzero(condition, size=size, fill_value=fill_value)
    return where(condition, x, y)


def unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None,
           *, equal_nan=True, size=None, fill_value=None, sorted=True):
    """numpy.unique (sorted unique values, optional index / inverse / counts).

    Eager on concrete arrays; under jit pass a static size= (the result is padded with
    fill_value, default the smallest value, as in JAX). Not differentiable.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.unique(fnp.array([3, 1, 3, 2])).tolist()
        [1, 2, 3]
    """
    x = asarray(ar)
    extras = return_index or return_inverse or return_counts
    if size is None and axis is None and _is_traced(x):
        v = _concrete(x)   # eager autodiff: the size from the value; the values stay traced
        if v is not None:
            size = np.unique(v, equal_nan=equal_nan).shape[0]
    if size is None or (not _is_traced(x) and axis is not None):
        if _is_traced(x):
            _needs_size("unique")
        res = np.unique(np.asarray(x), return_index, return_inverse, return_counts, axis=axis,
                        equal_nan=equal_nan)
        if not extras:
            return asarray(res)
        vals = [asarray(r if i == 0 else r.astype(np.int32)) for i, r in enumerate(res)]
        if return_inverse and axis is None:
            k = 1 + builtins.int(return_index)
            vals[k] = reshape(vals[k], x.shape)
        return tuple(vals)
    if axis is not None:
        raise NotImplementedError("unique: size= with axis= is not supported")
    flat = ravel(x)
    n = flat.shape[0]
    size = builtins.int(size)
    perm = argsort(flat)
    s = take(flat, perm)
    if n:
        prev = concatenate([s[:1], s[:-1]])
        same = equal(s, prev)
        if equal_nan and is_float(s.dtype):
            same = logical_or(same, logical_and(isnan(s), isnan(prev)))
        flag = concatenate([full((1,), True, np.bool_), logical_not(same)[1:]])
        pos, found = _first_true_positions(flag, size)
        from funcgrad.numpy._cumulative import cumsum
        group = cumsum(P.convert(flag, np.int32)) - 1
    else:
        pos = full((size,), 0, np.int32)
        found = full((size,), False, np.bool_)
        group = full((0,), 0, np.int32)
    fill = fill_value
    if fill is None:
        from funcgrad.numpy._ufuncs import min as _min
        fill = _min(flat) if n else 0
    values = where(found, take(s, pos) if n else full((size,), 0, s.dtype), fill)
    if not extras:
        return values
    out = [values]
    if return_index:
        out.append(where(found, take(perm, pos) if n else pos, 0))
    if return_inverse:
        inv_perm = argsort(perm)
        out.append(reshape(take(group, inv_perm), x.shape) if n else reshape(group, x.shape))
    if return_counts:
        j = reshape(arange(size, dtype=np.int32), (size, 1))
        out.append(sum(equal(reshape(group, (1, n)), j), axis=1, dtype=np.int32))
    return tuple(out)


def unique_values(x, *, size=None, fill_value=None):
    return unique(x, size=size, fill_value=fill_value)


def unique_counts(x, *, size=None, fill_value=None):
    from collections import namedtuple
    v, c = unique(x, return_counts=True, size=size, fill_value=fill_value)
    return namedtuple("UniqueCountsResult", ["values", "counts"])(v, c)


def unique_inverse(x, *, size=None, fill_value=None):
    from collections import namedtuple
    v, i = unique(x, return_inverse=True, size=size, fill_value=fill_value)
    return namedtuple("UniqueInverseResult", ["values", "inverse_indices"])(v, i)


def unique_all(x, *, size=None, fill_value=None):
    from collections import namedtuple
    v, i, inv, c = unique(x, True, True, True, size=size, fill_value=fill_value)
    return namedtuple("UniqueAllResult", ["values", "indices", "inverse_indices", "counts"])(
        v, i, inv, c)


def isin(element, test_elements, assume_unique=False, invert=False):
    """numpy.isin by comparing every pair (no sorting)."""
    e = asarray(element)
    t = ravel(asarray(test_elements))
    hit = any(equal(reshape(e, tuple(e.shape) + (1,)), t), axis=-1) if t.shape[0] else \
        full(e.shape, False, np.bool_)
    return logical_not(hit) if invert else hit


def _eager_set(name, fn, *arrays, size=None, fill_value=None):
    if _is_traced(*arrays):
        if size is None:
            _needs_size(name)
        return unique(concatenate([ravel(asarray(a)) for a in arrays]), size=size,
                      fill_value=fill_value) if name == "union1d" else _needs_size(name)
    res = asarray(fn(*[np.asarray(a) for a in arrays]))
    if size is None:
        return res
    n = res.shape[0]
    if n >= size:
        return res[:size]
    fill = fill_value if fill_value is not None else (res.min() if n else 0)
    return concatenate([res, full((size - n,), fill, res.dtype)])


def union1d(ar1, ar2, *, size=None, fill_value=None):
    return _eager_set("union1d", np.union1d, ar1, ar2, size=size, fill_value=fill_value)


def intersect1d(ar1, ar2, assume_unique=False, return_indices=False, *, size=None,
                fill_value=None):
    if return_indices:
        if _is_traced(ar1, ar2):
            _needs_size("intersect1d")
        res = np.intersect1d(np.asarray(ar1), np.asarray(ar2), assume_unique, True)
        return tuple(asarray(r if i == 0 else r.astype(np.int32)) for i, r in enumerate(res))
    return _eager_set("intersect1d", np.intersect1d, ar1, ar2, size=size, fill_value=fill_value)


def setdiff1d(ar1, ar2, assume_unique=False, *, size=None, fill_value=None):
    return _eager_set("setdiff1d", np.setdiff1d, ar1, ar2, size=size, fill_value=fill_value)


def setxor1d(ar1, ar2, assume_unique=False, *, size=None, fill_value=None):
    return _eager_set("setxor1d", np.setxor1d, ar1, ar2, size=size, fill_value=fill_value)


def trim_zeros(filt, trim="fb"):
    """numpy.trim_zeros (eager: the output length depends on the values)."""
    if _is_traced(filt):
        _needs_size("trim_zeros")
    return asarray(np.trim_zeros(np.asarray(filt), trim))


def extract(condition, arr, *, size=None, fill_value=0):
    """numpy.extract: arr's elements where condition holds (flattened)."""
    idx = flatnonzero(condition, size=size, fill_value=0)
    vals = take(ravel(arr), idx)
    if size is None:
        return vals
    n_true = sum(asarray(condition) != 0)
    return where(arange(size) < n_true, vals, fill_value)


def compress(condition, a, axis=None, *, size=None, fill_value=0):
    """numpy.compress: slices of a along axis where condition holds."""
    c = ravel(asarray(condition))
    x = asarray(a)
    if axis is None:
        x, axis = ravel(x), 0
    ax = _norm_axis(axis, x.ndim, "compress")
    idx = flatnonzero(c, size=size, fill_value=0)
    out = take(x, idx, axis=ax)
    if size is None:
        return out
    keep = arange(size) < sum(c != 0)
    shape = [1] * x.ndim
    shape[ax] = size
    return where(reshape(keep, shape), out, fill_value)


def bincount(x, weights=None, minlength=0, *, length=None):
    """numpy.bincount of non-negative ints; under jit pass a static length= (values outside
    [0, length) are dropped, as in JAX)."""
    x = asarray(x)
    if length is None:
        xv = _concrete(x)
        if xv is None:
            _needs_size("bincount")
        length = builtins.max(builtins.int(xv.max()) + 1 if xv.size else 0, minlength)
    length = builtins.max(builtins.int(length), builtins.int(minlength))
    j = reshape(arange(length, dtype=x.dtype), (length, 1))
    hit = equal(reshape(ravel(x), (1, -1)), j)
    if weights is None:
        return sum(hit, axis=1, dtype=np.int32)
    w = ravel(asarray(weights))
    return sum(where(hit, reshape(w, (1, -1)), 0), axis=1)


def digitize(x, bins, right=False):
    """numpy.digitize for monotonically increasing or decreasing static-order bins."""
    b = asarray(bins)
    if b.ndim != 1:
        raise ValueError("digitize: bins must be 1-D")
    n = b.shape[0]
    increasing = n < 2 or _is_traced(b) or builtins.bool(np.asarray(b)[-1] >= np.asarray(b)[0])
    side = "left" if right else "right"
    if increasing:
        return searchsorted(b, x, side=side)
    return n - searchsorted(flip(b, 0), x, side=side)


__all__ = [
    "argsort",
    "sort",
    "msort",
    "partition",
    "argpartition",
    "sort_complex",
    "lexsort",
    "searchsorted",
    "nonzero",
    "flatnonzero",
    "argwhere",
    "unique",
    "unique_values",
    "unique_counts",
    "unique_inverse",
    "unique_all",
    "isin",
    "union1d",
    "intersect1d",
    "setdiff1d",
    "setxor1d",
    "trim_zeros",
    "extract",
    "compress",
    "bincount",
    "digitize",
]
