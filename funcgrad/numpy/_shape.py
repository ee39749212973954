"""Shape manipulation of funcgrad.numpy: transposes, joins, splits, repeats, gathers."""
from __future__ import annotations

import numpy as np

from funcgrad import prims as P
from funcgrad.core import ArrayBase, bind, is_int, type_error
from funcgrad.core.dtypes import dtype_kind
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
from funcgrad.numpy._ufuncs import where


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


_MODES = {None: "raise", "raise": "raise", "clip": "clip", "wrap": "wrap", "fill": "fill",
          "drop": "fill", "promise_in_bounds": "promise_in_bounds"}


def index_mode(mode, op, allowed=tuple(_MODES)):
    """The canonical name of an out-of-bounds mode (a string or a lax.GatherScatterMode)."""
    name = getattr(mode, "value", mode)   # GatherScatterMode.FILL_OR_DROP.value == "fill"
    if name not in allowed or name not in _MODES:
        shown = ", ".join(repr(m) for m in allowed if m is not None)
        raise ValueError(f"{op}: invalid mode {mode!r}; use None (out-of-range indices raise "
                         f"IndexError) or one of {shown}")
    return _MODES[name]


def default_fill(dtype):
    """JAX's fill value for out-of-bounds reads: NaN for inexact types, the most negative
    value for signed integers, the largest for unsigned ones, True for booleans."""
    dtype = np.dtype(dtype)
    if dtype_kind(dtype) in "fc":
        return np.nan
    if dtype_kind(dtype) in "iu":
        return int(np.iinfo(dtype).min if dtype_kind(dtype) == "i" else np.iinfo(dtype).max)
    return True


def moded_index(idx, n, mode, normalize=False):
    """(indices, pad): `idx` into an axis of size n under `mode` ("raise" leaves them to
    take's check). pad: "fill" maps every out-of-range index to n, a slot the caller appends
    holding the fill value. normalize: "clip" first wraps negative indices once (indexing's
    rule, `.at[].get`); take's "clip" clamps them to 0 as numpy's and JAX's take do."""
    from funcgrad.numpy._ufuncs import clip, logical_and, remainder
    if mode == "raise" or not n and mode != "fill":
        return idx, False
    if mode == "wrap":
        return remainder(idx, n), False
    if mode == "fill":
        ok = logical_and(idx >= -n, idx < n)
        return where(ok, where(idx < 0, idx + n, idx), n), True
    if normalize or mode == "promise_in_bounds":
        idx = where(idx < 0, idx + n, idx)
    return clip(idx, 0, n - 1), False


def pad_fill(a, axis, fill_value):
    """a with one slot holding fill_value appended along axis (for "fill" mode)."""
    from funcgrad.numpy._base import full
    value = default_fill(a.dtype) if fill_value is None else fill_value
    shape = tuple(a.shape[:axis]) + (1,) + tuple(a.shape[axis + 1:])
    return concatenate([a, full(shape, value, a.dtype)], axis=axis)


def take(a, indices, axis=None, out=None, mode=None, unique_indices=False,
         indices_are_sorted=False, fill_value=None):
    """numpy.take, with JAX's out-of-bounds modes.

    Args:
        a: the array.
        indices: integer indices (negative ones count from the end).
        axis: the axis to take along; None takes from the flattened array.
        out: unsupported (arrays are immutable); must be None.
        mode: None or "raise" (funcgrad's default: an out-of-range index raises IndexError
            naming it and the user's line; JAX's default is "fill"), "clip" (clamped into
            [0, n - 1]; negative indices become 0), "wrap" (taken modulo n), "fill" (JAX's
            FILL_OR_DROP, also "drop": out-of-range indices read `fill_value`) or
            "promise_in_bounds" (negative indices wrapped once, then clamped, as XLA does).
        unique_indices: accepted for JAX compatibility (a hint).
        indices_are_sorted: accepted for JAX compatibility (a hint).
        fill_value: the value "fill" reads (default: NaN for inexact types, the most negative
            signed / largest unsigned integer, True for bool).

    Returns:
        a.shape[:axis] + indices.shape + a.shape[axis + 1:]; every mode differentiates (the
        gradient of a filled element is 0).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.take(fnp.arange(5.0), [1, 9, -1], mode="fill", fill_value=-1.0).tolist()
        [1.0, -1.0, 4.0]
    """
    if out is not None:
        raise NotImplementedError("funcgrad.numpy.take: out= is not supported (arrays are "
                                  "immutable)")
    mode = index_mode(mode, "take")
    a = asarray(a)
    idx = _int_index(indices, "take")
    if axis is None:
        a, axis = ravel(a), 0
    ax = _norm_axis(axis, a.ndim, "take")
    idx, pad = moded_index(idx, a.shape[ax], mode)
    if pad:
        a = pad_fill(a, ax, fill_value)
    return bind(P.take_p, a, idx, axis=ax)


def take_along_axis(arr, indices, axis, mode=None, fill_value=None):
    """numpy.take_along_axis, lowered to one gather over the flattened array.

    An out-of-range index raises IndexError naming it and the axis' size (mode None, as
    numpy); `mode` and `fill_value` are take's (JAX's modes).
    """
    mode = index_mode(mode, "take_along_axis")
    a = asarray(arr)
    idx = _int_index(indices, "take_along_axis")
    if axis is None:
        return take(ravel(a), ravel(idx), mode=None if mode == "raise" else mode,
                    fill_value=fill_value)
    ax = _norm_axis(axis, a.ndim, "take_along_axis")
    if idx.ndim != a.ndim:
        raise type_error("take_along_axis", "indices and arr must have the same number of "
                         "dimensions", (a.aval, idx.aval))
    shape = list(broadcast_shapes(*[[s for i, s in enumerate(x.shape) if i != ax]
                                    for x in (a, idx)], op="take_along_axis"))
    idx, pad = moded_index(idx, a.shape[ax], mode)
    if pad:
        a = pad_fill(a, ax, fill_value)
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
    return bind(P.take_p, ravel(a), lin, axis=0)


def checked_index(idx, n):
    """idx in [0, n): negative indices wrapped once (numpy semantics), by a gather from
    arange(n), whose check raises IndexError naming an out-of-range index as the user gave it
    and n (a linearised sentinel had reported "index -6" for 9 on 5 elements)."""
    return bind(P.take_p, bind(P.iota_p, dtype=idx.dtype, shape=(n,), dimension=0), idx,
                axis=0)


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
