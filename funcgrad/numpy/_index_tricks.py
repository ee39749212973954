"""Index building and array construction of funcgrad.numpy: diag/diagonal/trace, roll,
meshgrid, indices, ix_, tri*_indices, mgrid/ogrid/r_/c_, atleast_*d, stacking and splitting
helpers, rot90, kron, select/choose/piecewise, insert/delete/append, unravel_index.

Index arrays of static shapes (tril_indices, diag_indices, ...) are computed by numpy and
returned as int32 arrays; everything that touches array values is a composition of
primitives, so it differentiates, batches and runs under jit.
"""
from __future__ import annotations

import builtins

import numpy as np

from funcgrad import prims as P
from funcgrad.core import ArrayBase
from funcgrad.numpy._base import (
    _norm_axis,
    arange,
    asarray,
    broadcast_to,
    norm_axes,
    reshape,
    result_type,
    zeros,
)
from funcgrad.numpy._shape import (
    concatenate,
    expand_dims,
    flip,
    moveaxis,
    ravel,
    split,
    swapaxes,
    take,
    transpose,
)
from funcgrad.numpy._ufuncs import sum, where


def _i32(a):
    return asarray(np.asarray(a).astype(np.int32))


# ---------------------------------------------------------------------------------------------
# diagonals
# ---------------------------------------------------------------------------------------------

def diagonal(a, offset=0, axis1=0, axis2=1):
    """numpy.diagonal: the diagonal of axes (axis1, axis2) moved to the last axis.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.diagonal(fnp.arange(9).reshape(3, 3)).tolist()
        [0, 4, 8]
    """
    x = asarray(a)
    if x.ndim < 2:
        raise ValueError("diagonal requires an array of at least two dimensions")
    a1, a2 = _norm_axis(axis1, x.ndim, "diagonal"), _norm_axis(axis2, x.ndim, "diagonal")
    if a1 == a2:
        raise ValueError("diagonal: axis1 and axis2 cannot be the same")
    rest = [i for i in range(x.ndim) if i not in (a1, a2)]
    x = transpose(x, rest + [a1, a2])
    n, m = x.shape[-2], x.shape[-1]
    r0, c0 = (0, offset) if offset >= 0 else (-offset, 0)
    k = builtins.max(0, builtins.min(n - r0, m - c0))
    flat = reshape(x, tuple(x.shape[:-2]) + (n * m,))
    idx = _i32((r0 + np.arange(k)) * m + c0 + np.arange(k))
    return take(flat, idx, axis=flat.ndim - 1)


def diag(v, k=0):
    """numpy.diag: the k-th diagonal of a matrix, or a matrix with v on its k-th diagonal."""
    v = asarray(v)
    if v.ndim == 2:
        return diagonal(v, k)
    if v.ndim != 1:
        raise ValueError("diag: input must be 1-D or 2-D")
    m = v.shape[0]
    n = m + builtins.abs(k)
    if m == 0:
        return zeros((n, n), v.dtype)
    eye_mask = asarray(np.eye(n, k=k, dtype=bool))
    # row i of the result holds v[i - max(0, -k)] on its diagonal entry
    placed = take(v, _i32(np.clip(np.arange(n) - builtins.max(0, -k), 0, m - 1)))
    mat = broadcast_to(reshape(placed, (n, 1)), (n, n))
    return where(eye_mask, mat, P.zeros_like(mat))


def diagflat(v, k=0):
    return diag(ravel(v), k)


def trace(a, offset=0, axis1=0, axis2=1, dtype=None):
    """Sum along a diagonal."""
    return sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


def fill_diagonal(a, val, wrap=False, *, inplace=True):
    """numpy.fill_diagonal, returning the new array (JAX needs inplace=False)."""
    if inplace:
        raise ValueError("funcgrad arrays are immutable: call fill_diagonal(..., inplace=False)")
    x = asarray(a)
    if x.ndim < 2 or (x.ndim > 2 and len(set(x.shape)) != 1):
        raise ValueError("fill_diagonal: array must be 2-D, or have all dimensions equal")
    n = builtins.min(x.shape)
    mask = np.zeros(x.shape, bool)
    if x.ndim == 2 and wrap:
        rows, cols = x.shape
        mask.reshape(-1)[::cols + 1] = True
        mask = mask.reshape(rows, cols)
    else:
        mask[tuple(np.arange(n) for _ in x.shape)] = True
    v = ravel(asarray(val, x.dtype))
    k = int(mask.sum())
    pos = np.cumsum(mask.reshape(-1)) - 1
    vals = take(v, _i32(np.where(mask.reshape(-1), pos, 0) % builtins.max(v.shape[0], 1)))
    return where(asarray(mask), reshape(vals, x.shape), x) if k and v.shape[0] else x


def diag_indices(n, ndim=2):
    return tuple(_i32(np.arange(n)) for _ in range(ndim))


def diag_indices_from(arr):
    s = np.shape(arr)
    if len(set(s)) != 1 or len(s) < 2:
        raise ValueError("diag_indices_from: all dimensions of the input must be equal")
    return diag_indices(s[0], len(s))


def tri(N, M=None, k=0, dtype=None):
    """Ones on and below the k-th diagonal (float32 by default)."""
    from funcgrad.numpy._base import canonical_dtype
    return asarray(np.tri(N, M, k, dtype=canonical_dtype(dtype) or np.float32))


def tril_indices(n, k=0, m=None):
    return tuple(_i32(i) for i in np.tril_indices(n, k, m))


def triu_indices(n, k=0, m=None):
    return tuple(_i32(i) for i in np.triu_indices(n, k, m))


def tril_indices_from(arr, k=0):
    s = np.shape(arr)
    return tril_indices(s[-2], k, s[-1])


def triu_indices_from(arr, k=0):
    s = np.shape(arr)
    return triu_indices(s[-2], k, s[-1])


def mask_indices(n, mask_func, k=0, *, size=None):
    m = np.asarray(mask_func(np.ones((n, n), np.int32), k)) != 0
    return tuple(_i32(i) for i in np.nonzero(m))


# ---------------------------------------------------------------------------------------------
# grids
# ---------------------------------------------------------------------------------------------

def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    """numpy.meshgrid ('xy' or 'ij' indexing, optionally sparse).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> [g.shape for g in fnp.meshgrid(fnp.arange(3), fnp.arange(2))]
        [(2, 3), (2, 3)]
    """
    if indexing not in ("xy", "ij"):
        raise ValueError("meshgrid: indexing must be 'xy' or 'ij'")
    xs = [ravel(asarray(x)) for x in xi]
    nd = len(xs)
    shape = [x.shape[0] for x in xs]
    if indexing == "xy" and nd > 1:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, x in enumerate(xs):
        d = i
        if indexing == "xy" and nd > 1 and i < 2:
            d = 1 - i
        s = [1] * nd
        s[d] = x.shape[0]
        g = reshape(x, s)
        out.append(g if sparse else broadcast_to(g, shape))
    return tuple(out)


def indices(dimensions, dtype=None, sparse=False):
    """numpy.indices: a grid of index arrays (int32)."""
    from funcgrad.numpy._base import canonical_dtype
    dt = canonical_dtype(dtype) or np.dtype(np.int32)
    dims = tuple(int(d) for d in dimensions)
    outs = []
    for i, n in enumerate(dims):
        shape = [1] * len(dims)
        shape[i] = n
        g = reshape(arange(n, dtype=dt), shape)
        outs.append(g if sparse else broadcast_to(g, dims))
    if sparse:
        return tuple(outs)
    from funcgrad.numpy._shape import stack
    return stack(outs) if outs else zeros((0,), dt)


def ix_(*args):
    """numpy.ix_: open-mesh index arrays for outer indexing."""
    out = []
    for i, a in enumerate(args):
        a = asarray(a)
        if a.ndim != 1:
            raise ValueError("ix_: arguments must be 1-D")
        s = [1] * len(args)
        s[i] = a.shape[0]
        out.append(reshape(a, s))
    return tuple(out)


def _grid_axis(s):
    if not isinstance(s, slice):
        return asarray(s)
    start = 0 if s.start is None else s.start
    step = 1 if s.step is None else s.step
    if isinstance(step, complex):
        from funcgrad.numpy._base import linspace
        return linspace(start, s.stop, int(builtins.abs(step)), dtype=np.float32)
    return arange(start, s.stop, step)


class _Grid:
    def __init__(self, sparse):
        self.sparse = sparse

    def __getitem__(self, key):
        if isinstance(key, slice):
            return _grid_axis(key)
        axes = [_grid_axis(k) for k in key]
        dt = result_type(*axes)
        grids = meshgrid(*[asarray(a, dt) for a in axes], indexing="ij", sparse=self.sparse)
        if self.sparse:
            return grids
        from funcgrad.numpy._shape import stack
        return stack(grids)


mgrid = _Grid(False)
ogrid = _Grid(True)


class _Concat:
    def __init__(self, axis, ndmin):
        self.axis, self.ndmin = axis, ndmin

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        axis, ndmin = self.axis, self.ndmin
        parts = []
        for k in key:
            if isinstance(k, str):
                nums = [int(v) for v in k.split(",")]
                axis = nums[0]
                ndmin = nums[1] if len(nums) > 1 else ndmin
                continue
            a = _grid_axis(k) if isinstance(k, slice) else asarray(k)
            while a.ndim < ndmin:
                a = reshape(a, tuple(a.shape) + (1,)) if self.axis == -1 and ndmin == 2 \
                    else reshape(a, (1,) + tuple(a.shape))
            parts.append(a)
        return concatenate(parts, axis) if parts else zeros((0,))


r_ = _Concat(0, 1)
c_ = _Concat(-1, 2)


class _IndexExp:
    def __init__(self, maketuple):
        self.maketuple = maketuple

    def __getitem__(self, item):
        return item if (not self.maketuple or isinstance(item, tuple)) else (item,)


index_exp = _IndexExp(True)
s_ = _IndexExp(False)


# ---------------------------------------------------------------------------------------------
# shapes, stacking, splitting
# ---------------------------------------------------------------------------------------------

def atleast_1d(*arys):
    out = [reshape(asarray(a), (1,)) if np.ndim(a) == 0 else asarray(a) for a in arys]
    return out[0] if len(out) == 1 else out


def atleast_2d(*arys):
    out = []
    for a in arys:
        a = asarray(a)
        out.append(reshape(a, (1,) * (2 - a.ndim) + tuple(a.shape)) if a.ndim < 2 else a)
    return out[0] if len(out) == 1 else out


def atleast_3d(*arys):
    out = []
    for a in arys:
        a = asarray(a)
        if a.ndim == 0:
            a = reshape(a, (1, 1, 1))
        elif a.ndim == 1:
            a = reshape(a, (1, a.shape[0], 1))
        elif a.ndim == 2:
            a = reshape(a, tuple(a.shape) + (1,))
        out.append(a)
    return out[0] if len(out) == 1 else out


def column_stack(tup):
    return concatenate([reshape(asarray(a), (-1, 1)) if np.ndim(a) < 2 else asarray(a)
                        for a in tup], 1)


def dstack(tup, dtype=None):
    return concatenate(atleast_3d(*tup) if len(tup) > 1 else [atleast_3d(*tup)], 2)


def concat(arrays, /, *, axis=0):
    return concatenate(arrays, axis)


def hsplit(ary, indices_or_sections):
    a = asarray(ary)
    return split(a, indices_or_sections, axis=1 if a.ndim > 1 else 0)


def vsplit(ary, indices_or_sections):
    return split(ary, indices_or_sections, axis=0)


def dsplit(ary, indices_or_sections):
    return split(ary, indices_or_sections, axis=2)


def unstack(x, /, *, axis=0):
    x = asarray(x)
    ax = _norm_axis(axis, x.ndim, "unstack")
    return tuple(reshape(p, tuple(s for i, s in enumerate(x.shape) if i != ax))
                 for p in split(x, x.shape[ax], ax)) if x.shape[ax] else ()


def permute_dims(a, /, axes):
    return transpose(a, axes)


def matrix_transpose(x, /):
    x = asarray(x)
    if x.ndim < 2:
        raise ValueError("matrix_transpose requires at least 2 dimensions")
    return swapaxes(x, -1, -2)


def rollaxis(a, axis, start=0):
    a = asarray(a)
    ax = _norm_axis(axis, a.ndim, "rollaxis")
    start = start + a.ndim if start < 0 else start
    if ax < start:
        start -= 1
    return moveaxis(a, ax, start)


def roll(a, shift, axis=None):
    """numpy.roll: elements shifted cyclically (static shifts)."""
    x = asarray(a)
    if axis is None:
        return reshape(roll(ravel(x), shift, 0), x.shape)
    shifts = shift if isinstance(shift, (tuple, list)) else (shift,)
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    if len(shifts) == 1 and len(axes) > 1:
        shifts = shifts * len(axes)
    if len(axes) == 1 and len(shifts) > 1:
        axes = axes * len(shifts)
    for s, ax in zip(shifts, axes):
        ax = _norm_axis(ax, x.ndim, "roll")
        n = x.shape[ax]
        if n == 0:
            continue
        if isinstance(s, ArrayBase):   # traced shift: a gather with wrapped indices
            from funcgrad.numpy._ufuncs import remainder
            idx = remainder(arange(n, dtype=np.int32) - asarray(s, np.int32), n)
            x = take(x, idx, axis=ax)
            continue
        k = int(s) % n
        if k:
            lo, hi = split(x, [n - k], ax)
            x = concatenate([hi, lo], ax)
    return x


def rot90(m, k=1, axes=(0, 1)):
    m = asarray(m)
    a0, a1 = (_norm_axis(a, m.ndim, "rot90") for a in axes)
    k %= 4
    if k == 0:
        return m
    if k == 2:
        return flip(flip(m, a0), a1)
    perm = list(range(m.ndim))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    return transpose(flip(m, a1), perm) if k == 1 else flip(transpose(m, perm), a1)


def kron(a, b):
    """Kronecker product."""
    a, b = asarray(a), asarray(b)
    nd = builtins.max(a.ndim, b.ndim)
    a = reshape(a, (1,) * (nd - a.ndim) + tuple(a.shape))
    b = reshape(b, (1,) * (nd - b.ndim) + tuple(b.shape))
    ea = reshape(a, [v for s in a.shape for v in (s, 1)])
    eb = reshape(b, [v for s in b.shape for v in (1, s)])
    out = ea * eb
    return reshape(out, [x * y for x, y in zip(a.shape, b.shape)])


def resize(a, new_shape):
    """numpy.resize: repeat the flattened array to fill new_shape."""
    x = ravel(asarray(a))
    shape = (new_shape,) if isinstance(new_shape, int) else tuple(new_shape)
    n = int(np.prod(shape))
    if x.shape[0] == 0:
        return zeros(shape, x.dtype)
    reps = -(-n // x.shape[0])
    from funcgrad.numpy._shape import tile
    return reshape(tile(x, reps)[:n], shape)


def append(arr, values, axis=None):
    if axis is None:
        return concatenate([ravel(arr), ravel(values)])
    return concatenate([arr, values], axis)


def delete(arr, obj, axis=None, *, assume_unique_indices=False):
    """numpy.delete with static indices (an int, slice or index list)."""
    x = asarray(arr)
    if axis is None:
        x, axis = ravel(x), 0
    ax = _norm_axis(axis, x.ndim, "delete")
    n = x.shape[ax]
    drop = np.zeros(n, bool)
    drop[np.arange(n)[obj] if isinstance(obj, slice) else np.asarray(obj)] = True
    return take(x, _i32(np.nonzero(~drop)[0]), axis=ax)


def insert(arr, obj, values, axis=None):
    """numpy.insert with static positions (an int, slice or index list)."""
    x = asarray(arr)
    if axis is None:
        x, axis = ravel(x), 0
    ax = _norm_axis(axis, x.ndim, "insert")
    n = x.shape[ax]
    scalar = isinstance(obj, (int, np.integer))
    pos = np.arange(n + 1)[obj] if isinstance(obj, slice) else np.asarray(obj).reshape(-1)
    pos = np.atleast_1d(np.where(pos < 0, pos + n, pos))
    v = asarray(values, x.dtype)
    v = reshape(v, (1,) * builtins.max(0, x.ndim - v.ndim) + tuple(v.shape))
    if scalar:
        v = moveaxis(v, 0, ax)
        k = v.shape[ax]
        pos = np.full(k, pos[0])
    k = len(pos)
    shape = list(x.shape)
    shape[ax] = k
    v = broadcast_to(v, shape)
    order = np.argsort(np.concatenate([np.arange(n) + 0.0, pos - 0.5]), kind="stable")
    return take(concatenate([x, v], ax), _i32(order), axis=ax)


def unravel_index(indices, shape):
    idx = asarray(indices)
    out, rem = [], idx
    for d in reversed(tuple(shape)):
        out.append(rem % d)
        rem = rem // d
    return tuple(out[::-1])


def ravel_multi_index(multi_index, dims, mode="raise", order="C"):
    if order != "C":
        raise NotImplementedError("ravel_multi_index: order='C' only")
    out = 0
    for i, d in zip(multi_index, dims):
        i = asarray(i)
        if mode == "clip":
            from funcgrad.numpy._ufuncs import clip
            i = clip(i, 0, d - 1)
        elif mode == "wrap":
            i = i % d
        out = out * d + i
    return out


# ---------------------------------------------------------------------------------------------
# choosing
# ---------------------------------------------------------------------------------------------

def select(condlist, choicelist, default=0):
    """numpy.select: the first choice whose condition holds, else default."""
    if len(condlist) != len(choicelist):
        raise ValueError("select: condlist and choicelist must have the same length")
    out = asarray(default, result_type(*choicelist, default)) if choicelist else asarray(default)
    for c, v in zip(condlist[::-1], choicelist[::-1]):
        out = where(c, v, out)
    return out


def choose(a, choices, out=None, mode="raise"):
    """numpy.choose: out[i] = choices[a[i]][i] (mode 'raise', 'wrap' or 'clip')."""
    idx = asarray(a)
    from funcgrad.numpy._shape import stack
    ch = stack(_broadcast_choices(*choices, idx))
    n = ch.shape[0]
    if mode == "wrap":
        idx = idx % n
    elif mode == "clip":
        from funcgrad.numpy._ufuncs import clip
        idx = clip(idx, 0, n - 1)
    out_v = ch[0]
    for k in range(1, n):
        out_v = where(idx == k, ch[k], out_v)
    return out_v


def _broadcast_choices(*args):
    shape = np.broadcast_shapes(*[np.shape(a) for a in args])
    return [broadcast_to(asarray(a), shape) for a in args[:-1]]


def piecewise(x, condlist, funclist, *args, **kw):
    """numpy.piecewise: every function is evaluated on all of x and the results selected."""
    x = asarray(x)
    condlist = [condlist] if isinstance(condlist, ArrayBase) and condlist.ndim == x.ndim \
        and not isinstance(condlist, list) else list(condlist)
    n = len(condlist)
    if len(funclist) not in (n, n + 1):
        raise ValueError("piecewise: funclist must have len(condlist) or len(condlist)+1 items")

    def ev(f):
        return broadcast_to(asarray(f(x, *args, **kw) if callable(f) else f, x.dtype), x.shape)
    out = ev(funclist[n]) if len(funclist) == n + 1 else P.zeros_like(x)
    for c, f in zip(condlist[::-1], funclist[:n][::-1]):
        out = where(c, ev(f), out)
    return out


def put(a, ind, v, mode=None, *, inplace=True):
    """numpy.put returning a new array (JAX needs inplace=False)."""
    if inplace:
        raise ValueError("funcgrad arrays are immutable: call put(..., inplace=False)")
    x = asarray(a)
    flat = ravel(x)
    idx = ravel(asarray(ind))
    vals = ravel(asarray(v, x.dtype))
    if vals.shape[0] != idx.shape[0]:
        from funcgrad.numpy._shape import tile
        vals = tile(vals, -(-idx.shape[0] // builtins.max(vals.shape[0], 1)))[:idx.shape[0]]
    if mode == "wrap":
        idx = idx % flat.shape[0]
    elif mode == "clip":
        from funcgrad.numpy._ufuncs import clip
        idx = clip(idx, 0, flat.shape[0] - 1)
    return reshape(flat.at[idx].set(vals), x.shape)


def place(arr, mask, vals, *, inplace=True):
    """numpy.place returning a new array (JAX needs inplace=False)."""
    if inplace:
        raise ValueError("funcgrad arrays are immutable: call place(..., inplace=False)")
    x = asarray(arr)
    m = ravel(asarray(mask, np.bool_))
    from funcgrad.numpy._cumulative import cumsum
    k = cumsum(asarray(m, np.int32)) - 1
    v = ravel(asarray(vals, x.dtype))
    if v.shape[0] == 0:
        return x
    src = take(v, k % v.shape[0])
    return reshape(where(m, src, ravel(x)), x.shape)


def put_along_axis(arr, indices, values, axis, inplace=True, *, mode=None):
    """numpy.put_along_axis returning a new array (JAX needs inplace=False)."""
    if inplace:
        raise ValueError("funcgrad arrays are immutable: call put_along_axis(..., "
                         "inplace=False)")
    x = asarray(arr)
    idx = asarray(indices)
    ax = _norm_axis(axis, x.ndim, "put_along_axis")
    grids = [reshape(arange(s, dtype=np.int32), [s if i == d else 1 for i in range(x.ndim)])
             for d, s in enumerate(idx.shape)]
    grids[ax] = idx
    shape = np.broadcast_shapes(*[tuple(g.shape) for g in grids])
    grids = tuple(broadcast_to(g, shape) for g in grids)
    return x.at[grids].set(broadcast_to(asarray(values, x.dtype), shape))


def vander(x, N=None, increasing=False):
    """Vandermonde matrix: columns are powers of x."""
    x = ravel(asarray(x))
    n = x.shape[0] if N is None else int(N)
    pw = arange(n, dtype=np.int32)
    if not increasing:
        pw = flip(pw, 0)
    from funcgrad.numpy._ufuncs import power
    cols = [power(x, int(p)) for p in np.asarray(pw)]
    from funcgrad.numpy._shape import stack
    return stack(cols, axis=1) if cols else zeros((x.shape[0], 0), x.dtype)


def apply_along_axis(func1d, axis, arr, *args, **kwargs):
    """numpy.apply_along_axis via vmap over every other axis."""
    from funcgrad.transforms.batching import vmap
    x = asarray(arr)
    ax = _norm_axis(axis, x.ndim, "apply_along_axis")
    x = moveaxis(x, ax, -1)
    f = lambda v: func1d(v, *args, **kwargs)  # noqa: E731
    for _ in range(x.ndim - 1):
        f = vmap(f)
    out = asarray(f(x))
    nk = x.ndim - 1
    if out.ndim == nk:
        return out
    return moveaxis(out, list(range(nk, out.ndim)), list(range(ax, ax + out.ndim - nk)))


def apply_over_axes(func, a, axes):
    out = asarray(a)
    for ax in norm_axes(axes, out.ndim, "apply_over_axes"):
        res = asarray(func(out, ax))
        out = res if res.ndim == out.ndim else expand_dims(res, ax)
    return out


def block(arrays):
    """numpy.block: assemble an array from nested lists of blocks."""
    def depth(x):
        return 1 + depth(x[0]) if isinstance(x, list) and x else (1 if isinstance(x, list)
                                                                  else 0)
    d = depth(arrays)

    def rec(x, lvl):
        if not isinstance(x, list):
            return asarray(x)
        parts = [rec(e, lvl + 1) for e in x]
        nd = builtins.max(builtins.max(p.ndim for p in parts), d)
        parts = [reshape(p, (1,) * (nd - p.ndim) + tuple(p.shape)) for p in parts]
        return concatenate(parts, axis=-(d - lvl))
    return rec(arrays, 0)


__all__ = [
    "diagonal",
    "diag",
    "diagflat",
    "trace",
    "fill_diagonal",
    "diag_indices",
    "diag_indices_from",
    "tri",
    "tril_indices",
    "triu_indices",
    "tril_indices_from",
    "triu_indices_from",
    "mask_indices",
    "meshgrid",
    "indices",
    "ix_",
    "mgrid",
    "ogrid",
    "r_",
    "c_",
    "index_exp",
    "s_",
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "column_stack",
    "dstack",
    "concat",
    "hsplit",
    "vsplit",
    "dsplit",
    "unstack",
    "permute_dims",
    "matrix_transpose",
    "rollaxis",
    "roll",
    "rot90",
    "kron",
    "resize",
    "append",
    "delete",
    "insert",
    "unravel_index",
    "ravel_multi_index",
    "select",
    "choose",
    "piecewise",
    "put",
    "place",
    "put_along_axis",
    "vander",
    "apply_along_axis",
    "apply_over_axes",
    "block",
]
