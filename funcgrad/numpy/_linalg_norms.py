"""jnp.linalg's norms, condition numbers and array-API products (cross, vecdot, multi_dot...)."""
from __future__ import annotations

import numpy as np

from funcgrad.prims import linalg as LP
from funcgrad.prims import complex as PC
from funcgrad.core import type_error
from funcgrad.core.dtypes import dtype_kind
from funcgrad.numpy._base import asarray, broadcast_shapes, broadcast_to, reshape
from funcgrad.numpy._index_tricks import diagonal as _diagonal
from funcgrad.numpy._index_tricks import matrix_transpose as _matrix_transpose
from funcgrad.numpy._linalg_decomp import _inexact, _matrix, inv, svdvals
from funcgrad.numpy._shape import expand_dims, moveaxis, stack, squeeze
from funcgrad.numpy._ufuncs import abs as _abs
from funcgrad.numpy._ufuncs import any as _any
from funcgrad.numpy._ufuncs import (
    isnan,
    logical_and,
    logical_not,
    not_equal,
    power,
    sqrt,
    sum,
    where,
)
from funcgrad.numpy._ufuncs import max as _max
from funcgrad.numpy._ufuncs import min as _min

_VECTOR = "None, 2, 1, 0, inf, -inf or another number"
_MATRIX = "None, 'fro', 'nuc', 1, -1, 2, -2, inf or -inf"


def _axes(axis, nd):
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axes:
        if not -nd <= a < nd:
            raise ValueError(f"norm: axis {a} is out of bounds for an array of rank {nd}")
        out.append(a % nd)
    if len(set(out)) != len(out):
        raise ValueError(f"norm: duplicate axes {axis}")
    return tuple(out)


def _empty_zero(x, axes):
    """0.0 when the reduced axes are empty (a max-norm of nothing is 0, as in JAX), else None."""
    return 0.0 if any(x.shape[a] == 0 for a in axes) else None


def _abs_sq(x):
    """|x|^2 elementwise, real (x * conj(x) for complex x, as JAX's norms)."""
    return PC.real(x * PC.conj(x)) if dtype_kind(x.dtype) == "c" else x * x


def _real_dtype(x):
    return np.dtype(f"f{x.dtype.itemsize // 2}") if dtype_kind(x.dtype) == "c" else x.dtype


def _vector(x, ord, axes, keepdims):
    kw = dict(axis=axes, keepdims=keepdims)
    if ord is None or ord == 2:
        return sqrt(sum(_abs_sq(x), **kw))
    if isinstance(ord, str):
        raise ValueError(f"norm: invalid order {ord!r} for vectors (use {_VECTOR})")
    if ord == np.inf:
        return _max(_abs(x), **kw, initial=_empty_zero(x, axes))
    if ord == -np.inf:
        return _min(_abs(x), **kw)
    if ord == 0:
        return sum(not_equal(x, asarray(0.0, x.dtype)), **kw).astype(_real_dtype(x))
    if ord == 1:
        return sum(_abs(x), **kw)
    p = asarray(float(ord), _real_dtype(x))
    return power(sum(power(_abs(x), p), **kw), 1 / p)


def _matrix_norm(x, ord, axes, keepdims):
    r, c = axes
    if ord is None or ord == "fro":
        return sqrt(sum(_abs_sq(x), axis=axes, keepdims=keepdims))
    if ord in ("nuc", 2, -2):
        s = svdvals(moveaxis(x, (r, c), (-2, -1)))
        y = sum(s, axis=-1) if ord == "nuc" else (_max if ord == 2 else _min)(s, axis=-1)
        return expand_dims(y, tuple(sorted(axes))) if keepdims else y
    if isinstance(ord, str) or ord not in (1, -1, np.inf, -np.inf):
        raise ValueError(f"norm: invalid order {ord!r} for matrices (use {_MATRIX})")
    # 1 / -1: the largest / smallest column sum; inf / -inf: the same over rows
    inner, outer = (r, c) if ord in (1, -1) else (c, r)
    red = _max if ord in (1, np.inf) else _min
    col = sum(_abs(x), axis=inner, keepdims=True)
    extra = {"initial": _empty_zero(col, (outer,))} if red is _max else {}
    y = red(col, axis=outer, keepdims=True, **extra)
    return y if keepdims else squeeze(y, tuple(sorted(axes)))


def norm(x, ord=None, axis=None, keepdims=False):
    """Vector or matrix norms, as numpy.linalg.norm / jax.numpy.linalg.norm.

    With axis=None: ord=None flattens (the 2-norm of all entries); otherwise x must be 1-D
    (vector norm) or 2-D (matrix norm). An int axis (or 1-tuple) takes vector norms
    (ord: None/2, 1, 0 (count of non-zeros), inf, -inf or any p); a 2-tuple takes matrix norms
    (None/'fro', 'nuc', 1, -1, 2 (largest singular value), -2, inf, -inf).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> float(fnp.linalg.norm(fnp.array([[3.0, 0.0], [0.0, 4.0]]), 2))
        4.0
    """
    (x,) = _inexact(x)
    nd = x.ndim
    if axis is None:
        if ord is None:
            y = sqrt(sum(_abs_sq(x)))
            return reshape(y, (1,) * nd) if keepdims else y
        if nd not in (1, 2):
            raise ValueError(f"norm: ord={ord!r} with axis=None needs a 1-D or 2-D array, got "
                             f"shape {tuple(x.shape)}")
        axis = tuple(range(nd))
    axes = _axes(axis, nd)
    if len(axes) == 1:
        return _vector(x, ord, axes, keepdims)
    if len(axes) == 2:
        return _matrix_norm(x, ord, axes, keepdims)
    raise ValueError(f"norm: axis must name one or two axes, got {axis}")


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    """Vector norm over `axis` (None: all entries, flattened)."""
    (x,) = _inexact(x)
    if axis is None:
        y = _vector(reshape(x, (-1,)), ord, (0,), False)
        return reshape(y, (1,) * x.ndim) if keepdims else y
    return _vector(x, ord, _axes(axis, x.ndim), keepdims)


def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    """Matrix norm over the last two axes."""
    x = _matrix("matrix_norm", x)
    return _matrix_norm(x, ord, (x.ndim - 2, x.ndim - 1), keepdims)


def cond(x, p=None):
    """Condition numbers: s_max / s_min for p None or 2 (s_min / s_max for -2), else
    norm(x, p) * norm(inv(x), p); NaN results from finite inputs become inf (JAX's rule)."""
    x = _matrix("cond", x)
    if p is None or p == 2 or p == -2:
        s = svdvals(x)
        r = s[..., 0] / s[..., -1] if p != -2 else s[..., -1] / s[..., 0]
    else:
        if x.shape[-1] != x.shape[-2]:
            raise type_error("cond", f"p={p!r} needs square matrices", (x.aval,))
        r = norm(x, p, (-2, -1)) * norm(inv(x), p, (-2, -1))
    finite_in = logical_not(_any(isnan(x), axis=(-2, -1)))
    return where(logical_and(isnan(r), finite_in), asarray(np.inf, r.dtype), r)


# ---------------------------------------------------------------------------------------------
# products of the array API / jnp.linalg namespace
# ---------------------------------------------------------------------------------------------

def _chain_order(dims):
    """numpy.linalg.multi_dot's optimal parenthesization: split[i][j] for the chain i..j."""
    n = len(dims) - 1
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j] = None
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if cost[i][j] is None or c < cost[i][j]:
                    cost[i][j], split[i][j] = c, k
    return split


def multi_dot(arrays, *, precision=None):
    """The product of a chain of matrices in the cheapest order (first/last may be 1-D).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.linalg.multi_dot([fnp.ones(2), fnp.ones((2, 3)), fnp.ones(3)]).tolist()
        6.0
    """
    arrays = list(arrays)
    if len(arrays) < 2:
        raise ValueError("multi_dot: expecting at least two arrays")
    arrays = _inexact(*arrays) if any(dtype_kind(asarray(a).dtype) != "f" for a in arrays) else \
        [asarray(a) for a in arrays]
    first_vec, last_vec = arrays[0].ndim == 1, arrays[-1].ndim == 1
    if first_vec:
        arrays[0] = reshape(arrays[0], (1, -1))
    if last_vec:
        arrays[-1] = reshape(arrays[-1], (-1, 1))
    for i, a in enumerate(arrays):
        if a.ndim != 2:
            raise ValueError(f"multi_dot: array {i} has {a.ndim} dimensions (2 needed)")
        if i and arrays[i - 1].shape[1] != a.shape[0]:
            raise type_error("multi_dot", f"shapes {tuple(arrays[i - 1].shape)} and "
                             f"{tuple(a.shape)} are not aligned", (arrays[i - 1].aval, a.aval))
    split = _chain_order([a.shape[0] for a in arrays] + [arrays[-1].shape[1]])

    def prod(i, j):
        if i == j:
            return arrays[i]
        k = split[i][j]
        return LP.mm(prod(i, k), prod(k + 1, j))
    out = prod(0, len(arrays) - 1)
    if first_vec and last_vec:
        return reshape(out, ())
    if first_vec or last_vec:
        return reshape(out, (-1,))
    return out


def outer(x1, x2, /):
    """The outer product of two 1-D arrays."""
    x1, x2 = _promoted(x1, x2)
    if x1.ndim != 1 or x2.ndim != 1:
        raise ValueError(f"linalg.outer: inputs must be 1-D, got shapes {tuple(x1.shape)} and "
                         f"{tuple(x2.shape)}")
    return reshape(x1, (-1, 1)) * reshape(x2, (1, -1))


def _promoted(*xs):
    from funcgrad.numpy._base import result_type
    dt = result_type(*xs)
    return [asarray(x, dt) for x in xs]


def cross(x1, x2, /, *, axis=-1):
    """Cross products of 3-vectors along `axis` (other axes broadcast)."""
    x1, x2 = _promoted(x1, x2)
    for x in (x1, x2):
        if x.ndim == 0 or not -x.ndim <= axis < x.ndim or x.shape[axis] != 3:
            raise ValueError(f"linalg.cross: both inputs need size 3 along axis {axis}, got "
                             f"shapes {tuple(x1.shape)} and {tuple(x2.shape)}")
    a, b = moveaxis(x1, axis, -1), moveaxis(x2, axis, -1)
    shape = broadcast_shapes(a.shape, b.shape, op="cross")
    a, b = broadcast_to(a, shape), broadcast_to(b, shape)
    a0, a1, a2 = (a[..., i] for i in range(3))
    b0, b1, b2 = (b[..., i] for i in range(3))
    c = stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)
    return moveaxis(c, -1, axis % len(shape))


def vecdot(x1, x2, /, *, axis=-1, precision=None, preferred_element_type=None):
    """sum(conj(x1) * x2, axis) with broadcasting, in the operands' dtype (array API vecdot).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.linalg.vecdot(fnp.asarray([1j, 2.0]), fnp.asarray([1j, 1.0])).item()
        (3+0j)
    """
    x1, x2 = _promoted(x1, x2)
    shape = broadcast_shapes(x1.shape, x2.shape, op="vecdot")
    if not shape or not -len(shape) <= axis < len(shape) or (
            x1.ndim and x2.ndim and x1.shape[axis] != x2.shape[axis]):
        raise ValueError(f"vecdot: axis {axis} must have one size in both inputs, got shapes "
                         f"{tuple(x1.shape)} and {tuple(x2.shape)}")
    if dtype_kind(x1.dtype) == "c":
        x1 = PC.conj(x1)
    out = sum(broadcast_to(x1, shape) * broadcast_to(x2, shape), axis=axis, dtype=x1.dtype)
    return out if preferred_element_type is None else out.astype(preferred_element_type)


def matrix_transpose(x, /):
    """Swap the last two axes."""
    return _matrix_transpose(x)


def diagonal(x, /, *, offset=0):
    """Diagonals of the last two axes."""
    x = asarray(x)
    if x.ndim < 2:
        raise ValueError(f"linalg.diagonal needs at least two axes, got shape {tuple(x.shape)}")
    return _diagonal(x, offset, -2, -1)


def trace(x, /, *, offset=0, dtype=None):
    """Sums of the diagonals of the last two axes."""
    return sum(diagonal(x, offset=offset), axis=-1, dtype=dtype)

