"""Shape manipulation of funcgrad.numpy: transposes, joins, splits, repeats, gathers."""
from __future__ import annotations

import numpy as np

from funcgrad import prims as P
from funcgrad.core import ArrayBase, bind, is_int, type_error
from funcgrad.numpy._base import (
    _norm_axis,
    asarray,
    broadcast_shapes,
    broadcast_to,
    norm_axes,
    reshape,
    result_type,
    value_error,
)
from funcgrad.numpy._ufuncs import logical_or, where


def transpose(a, axes=None):
    """numpy.transpose (reverses the axes when `axes` is None)."""
    a = asarray(a)
    perm = tuple(range(a.ndim))[::-1] if axes is None else tuple(
        _norm_axis(x, a.ndim, "transpose") for x in axes)
    if sorted(perm) != list(range(a.ndim)):
        raise type_error("transpose", f"axes {tuple(axes)} don't match an array of rank "
                         f"{a.ndim}", (a.aval,))
    return a if perm == tuple(range(a.ndim)) else P.transpose(a, perm)


def swapaxes(a, axis1, axis2):
    a = asarray(a)
    perm = list(range(a.ndim))
    i, j = _norm_axis(axis1, a.ndim, "swapaxes"), _norm_axis(axis2, a.ndim, "swapaxes")
    perm[i], perm[j] = perm[j], perm[i]
    return transpose(a, perm)


def moveaxis(a, source, destination):
    """numpy.moveaxis for an int or a sequence of axes."""
    a = asarray(a)
    src = norm_axes(source, a.ndim, "moveaxis")
    dst = norm_axes(destination, a.ndim, "moveaxis")
    if len(src) != len(dst):
        raise ValueError("moveaxis: source and destination must have the same number of axes")
    order = [i for i in range(a.ndim) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(a, order)


def expand_dims(a, axis):
    """numpy.expand_dims for an int or a tuple of new axes."""
    a = asarray(a)
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    nd = a.ndim + len(axes)
    axes = sorted(norm_axes(tuple(axes), nd, "expand_dims"))
    shape = list(a.shape)
    for ax in axes:
        shape.insert(ax, 1)
    return reshape(a, shape)


def squeeze(a, axis=None):
    """numpy.squeeze; squeezing an axis whose size is not 1 raises."""
    a = asarray(a)
    if axis is None:
        axes = [i for i, s in enumerate(a.shape) if s == 1]
    else:
        axes = norm_axes(axis, a.ndim, "squeeze")
        for ax in axes:
            if a.shape[ax] != 1:
                raise value_error("squeeze", f"cannot select an axis to squeeze out which has "
                                 f"size not equal to one (axis {ax})", (a.aval,))
    return reshape(a, [s for i, s in enumerate(a.shape) if i not in axes])


def ravel(a):
    return reshape(a, (-1,))


def broadcast_arrays(*args):
    shape = broadcast_shapes(*[np.shape(a) for a in args])
    return tuple(broadcast_to(asarray(a), shape) for a in args)


def concatenate(arrays, axis=0, dtype=None):
    """numpy.concatenate (axis=None flattens first)."""
    arrays = list(arrays)
    if not arrays:
        raise ValueError("need at least one array to concatenate")
    dt = dtype or result_type(*arrays)
    arrays = [asarray(a, dt) for a in arrays]
    if axis is None:
        arrays, axis = [ravel(a) for a in arrays], 0
    nd = arrays[0].ndim
    if nd == 0:
        raise type_error("concatenate", "zero-dimensional arrays cannot be concatenated",
                         [a.aval for a in arrays])
    ax = _norm_axis(axis, nd, "concatenate")
    if len(arrays) == 1:
        return arrays[0]
    return bind(P.concatenate_p, *arrays, dimension=ax)


def hstack(arrays):
    arrays = [asarray(a) for a in arrays]
    arrays = [reshape(a, (1,)) if a.ndim == 0 else a for a in arrays]  # numpy's atleast_1d
    return concatenate(arrays, axis=0 if arrays[0].ndim == 1 else 1)


def vstack(arrays):
    return concatenate([reshape(a, (1, -1)) if asarray(a).ndim < 2 else a for a in arrays], 0)


def _slice_axis(a, start, stop, axis):
    lo = [0] * a.ndim
    hi = list(a.shape)
    lo[axis], hi[axis] = start, stop
    return bind(P.slice_p, a, start_indices=tuple(lo), limit_indices=tuple(hi),
                strides=(1,) * a.ndim)


def split(ary, indices_or_sections, axis=0):
    """numpy.split by a number of equal sections or by a list of split indices."""
    a = asarray(ary)
    ax = _norm_axis(axis, a.ndim, "split")
    n = a.shape[ax]
    if isinstance(indices_or_sections, (int, np.integer)):
        k = int(indices_or_sections)
        if k <= 0 or n % k:
            raise ValueError(f"array split does not result in an equal division: axis of size "
                             f"{n} into {k} sections")
        bounds = [i * (n // k) for i in range(k + 1)]
    else:
        idx = [min(max(int(i) + (n if int(i) < 0 else 0), 0), n) for i in indices_or_sections]
        bounds = [0] + idx + [n]
    return [_slice_axis(a, lo, max(lo, hi), ax) for lo, hi in zip(bounds, bounds[1:])]


def array_split(ary, indices_or_sections, axis=0):
    a = asarray(ary)
    if isinstance(indices_or_sections, (int, np.integer)):
        n, k = a.shape[_norm_axis(axis, a.ndim, "array_split")], int(indices_or_sections)
        sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]
        return split(a, list(np.cumsum(sizes)[:-1]), axis)
    return split(a, indices_or_sections, axis)


def repeat(a, repeats, axis=None):
    """numpy.repeat with an int or a static sequence of repeats."""
    a = asarray(a)
    if axis is None:
        a, axis = ravel(a), 0
    ax = _norm_axis(axis, a.ndim, "repeat")
    if isinstance(repeats, (int, np.integer)):
        r = int(repeats)
        shape = list(a.shape)
        exp = reshape(a, shape[:ax + 1] + [1] + shape[ax + 1:])
        tgt = shape[:ax + 1] + [r] + shape[ax + 1:]
        out = broadcast_to(exp, tgt)
        shape[ax] *= r
        return reshape(out, shape)
    reps = np.asarray(repeats)
    if isinstance(repeats, ArrayBase):
        reps = np.asarray(repeats)  # must be concrete: the output shape depends on it
    idx = np.repeat(np.arange(a.shape[ax]), reps).astype(np.int32)
    return bind(P.take_p, a, idx, axis=ax)


def tile(A, reps):
    """numpy.tile."""
    a = asarray(A)
    reps = (reps,) if isinstance(reps, (int, np.integer)) else tuple(reps)
    nd = max(a.ndim, len(reps))
    a = reshape(a, (1,) * (nd - a.ndim) + tuple(a.shape))
    reps = (1,) * (nd - len(reps)) + reps
    inter = []
    for r, s in zip(reps, a.shape):
        inter += [r, s]
    exp = reshape(a, [x for s in a.shape for x in (1, s)])
    out = broadcast_to(exp, inter)
    return reshape(out, [r * s for r, s in zip(reps, a.shape)])


def flip(m, axis=None):
    """numpy.flip over axis None/int/tuple."""
    m = asarray(m)
    axes = norm_axes(axis, m.ndim, "flip")
    return bind(P.rev_p, m, dimensions=axes) if axes else m


def fliplr(m):
    return flip(m, 1)


def flipud(m):
    return flip(m, 0)


def _int_index(indices, op):
    idx = asarray(indices)
    if not is_int(idx.dtype):
        raise type_error(op, f"indices must be integers, got {idx.dtype.name}", (idx.aval,))
    return idx


def take(a, indices, axis=None):
    """numpy.take; out-of-range indices raise IndexError (never clamped or wrapped)."""
    a = asarray(a)
    idx = _int_index(indices, "take")
    if axis is None:
        a, axis = ravel(a), 0
    ax = _norm_axis(axis, a.ndim, "take")
    return bind(P.take_p, a, idx, axis=ax)


def take_along_axis(arr, indices, axis):
    """numpy.take_along_axis, lowered to one gather over the flattened array."""
    a = asarray(arr)
    idx = _int_index(indices, "take_along_axis")
    if axis is None:
        return take(ravel(a), ravel(idx))
    ax = _norm_axis(axis, a.ndim, "take_along_axis")
    if idx.ndim != a.ndim:
        raise type_error("take_along_axis", "indices and arr must have the same number of "
                         "dimensions", (a.aval, idx.aval))
    shape = list(broadcast_shapes(*[[s for i, s in enumerate(x.shape) if i != ax]
                                    for x in (a, idx)], op="take_along_axis"))
    a_shape = shape[:ax] + [a.shape[ax]] + shape[ax:]
    i_shape = shape[:ax] + [idx.shape[ax]] + shape[ax:]
    a = broadcast_to(a, a_shape)
    idx = broadcast_to(idx, i_shape)
    n = a.shape[ax]
    dt = idx.dtype
    strides = np.cumprod([1] + a_shape[::-1])[::-1][1:]
    lin = checked_index(idx, n)
    lin = lin * int(strides[ax]) if strides[ax] != 1 else lin  # before the other axes' terms
    for d in range(a.ndim):
        if d != ax:
            pos = bind(P.iota_p, dtype=dt, shape=tuple(i_shape), dimension=d)
            lin = lin + pos * int(strides[d])
    lin = guard_index(idx, n, lin, a.size)
    return bind(P.take_p, ravel(a), lin, axis=0)


def checked_index(idx, n):
    """Negative indices wrapped once (numpy semantics)."""
    return where(idx < 0, idx + n, idx)


def guard_index(idx, n, lin, total):
    """Keep an out-of-range index out of range after linearising (so take reports it)."""
    bad = logical_or(idx < -n, idx >= n)
    return where(bad, -total - 1, lin)


def pad(array, pad_width, mode="constant", constant_values=0):
    """numpy.pad in constant mode."""
    if mode != "constant":
        raise NotImplementedError("funcgrad.numpy.pad supports mode='constant' only")
    a = asarray(array)
    pw = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (a.ndim, 2))
    cfg = tuple((int(lo), int(hi), 0) for lo, hi in pw)
    return bind(P.pad_p, a, padding_config=cfg, value=float(constant_values))


def stack(arrays, axis=0):
    """numpy.stack: join arrays of equal shape along a new axis."""
    arrays = [asarray(a) if not isinstance(a, ArrayBase) else a for a in arrays]
    if not arrays:
        raise ValueError("need at least one array to stack")
    shapes = {tuple(a.shape) for a in arrays}
    if len(shapes) != 1:
        raise type_error("stack", f"all input arrays must have the same shape, got "
                         f"{sorted(shapes)}", [a.aval for a in arrays])
    nd = arrays[0].ndim + 1
    ax = _norm_axis(axis, nd, "stack")
    return concatenate([expand_dims(a, ax) for a in arrays], axis=ax)
