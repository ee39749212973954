"""jax.lax's named ops: elementwise ops, reductions, cumulative ops, sorting and top_k,
dynamic slicing, shape helpers, and the collective names (which need a named axis).

Everything here is a primitive or a composition of primitives or of funcgrad.numpy, so it
differentiates, batches, jits and runs on CUDA like the rest; dynamic slices are the
dynamic_slice / dynamic_update_slice primitives, which clamp their start indices into range
(after wrapping negative ones, as JAX does).
"""
from __future__ import annotations

import builtins
import enum

import numpy as np

from funcgrad import numpy as fnp
from funcgrad import prims as P
from funcgrad.core.dtypes import dtype_kind
from funcgrad.lax.special import digamma, erf_inv, erfc, lgamma  # noqa: F401
from funcgrad.core import ArrayBase, bind, canonicalize_dtype, user_frame_src
from funcgrad.numpy._cumulative import associative_scan_axis

# ---------------------------------------------------------------------------------------------
# elementwise
# ---------------------------------------------------------------------------------------------

# Python scalars' kinds: a scalar goes with arrays of its kind (1.0 with float32 or bfloat16)
_WEAK_KINDS = {bool: "b", int: "iu", float: "f", complex: "c"}
_WEAK_NAMES = {bool: "bool", int: "int32", float: "float32", complex: "complex64"}


def check_same_dtypes(name: str, *args) -> None:
    """JAX's lax rule: the operands of lax.<name> have one dtype (no implicit promotion).

    A Python scalar goes with arrays of its own kind (an int with integers, a float with
    floats); two Python scalars of different kinds (`lax.add(1, 1.0)`) and arrays of different
    dtypes raise TypeError as JAX's lax does, naming the dtypes and the user's line.

    Example:
        >>> from funcgrad import lax
        >>> try:
        ...     lax.add(1, 1.0)
        ... except TypeError as e:
        ...     print(str(e).split(" (Tip")[0])
        lax.add requires arguments to have the same dtypes, got int32, float32.
    """
    strong, weak = [], []
    for a in args:
        t = type(a)
        if t in _WEAK_KINDS:
            weak.append(t)
        elif isinstance(a, ArrayBase):
            strong.append(a.dtype)
        elif isinstance(a, (np.ndarray, np.generic)):
            strong.append(canonicalize_dtype(a.dtype))
        else:
            return   # a list or another value: the jnp function's own check names it
    if strong:
        ok = all(d == strong[0] for d in strong) and all(
            dtype_kind(strong[0]) in _WEAK_KINDS[t] for t in weak)
    else:
        ok = all(t is weak[0] for t in weak)
    if not ok:
        got = [a.dtype.name if isinstance(a, (ArrayBase, np.ndarray, np.generic))
               else _WEAK_NAMES[type(a)] for a in args]
        tip = _JNP_EQUIVALENTS.get(name)
        raise TypeError(f"lax.{name} requires arguments to have the same dtypes, got "
                        + ", ".join(got) + "."
                        + (f" (Tip: jnp.{tip} is a similar function that does automatic type "
                           "promotion on inputs)." if tip else "")
                        + f"\n  at {user_frame_src()}")


_JNP_EQUIVALENTS = {
    "add": "add", "sub": "subtract", "mul": "multiply", "div": "divide", "rem": "fmod",
    "max": "maximum", "min": "minimum", "eq": "equal", "ne": "not_equal", "lt": "less",
    "le": "less_equal", "gt": "greater", "ge": "greater_equal", "atan2": "arctan2",
    "bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
    "shift_left": "left_shift", "shift_right_arithmetic": "right_shift",
    "nextafter": "nextafter", "dynamic_update_slice": "lax.dynamic_update_slice",
}


def _same_dtypes(name: str, fun):
    """lax.<name>: `fun` (the jnp function) once the operands' dtypes agree (JAX's rule)."""
    def op(x, y):
        check_same_dtypes(name, x, y)
        return fun(x, y)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = (f"lax.{name}: jnp.{_JNP_EQUIVALENTS[name]} on operands of one dtype "
                  "(TypeError otherwise, as in JAX).")
    return op


abs = fnp.abs  # noqa: A001
neg = fnp.negative
add, sub, mul = (_same_dtypes(n, f) for n, f in
                 (("add", fnp.add), ("sub", fnp.subtract), ("mul", fnp.multiply)))
sign, floor, ceil = fnp.sign, fnp.floor, fnp.ceil
exp, exp2, log, log1p, expm1 = fnp.exp, fnp.exp2, fnp.log, fnp.log1p, fnp.expm1
sin, cos, tan, tanh, sinh, cosh = fnp.sin, fnp.cos, fnp.tan, fnp.tanh, fnp.sinh, fnp.cosh
asin, acos, atan = fnp.arcsin, fnp.arccos, fnp.arctan
atan2 = _same_dtypes("atan2", fnp.arctan2)
asinh, acosh, atanh = fnp.arcsinh, fnp.arccosh, fnp.arctanh
sqrt, cbrt = fnp.sqrt, fnp.cbrt
square_p = P.square_p


def square(x):
    """x * x elementwise, as one primitive (JAX's lax.square).

    Example:
        >>> from funcgrad import lax
        >>> lax.square(3.0).item()
        9.0
    """
    return bind(square_p, x)


max, min = _same_dtypes("max", fnp.maximum), _same_dtypes("min", fnp.minimum)  # noqa: A001
eq, ne, lt, le, gt, ge = (_same_dtypes(n, f) for n, f in (
    ("eq", fnp.equal), ("ne", fnp.not_equal), ("lt", fnp.less), ("le", fnp.less_equal),
    ("gt", fnp.greater), ("ge", fnp.greater_equal)))
bitwise_and, bitwise_or, bitwise_xor = (_same_dtypes(n, getattr(fnp, n)) for n in (
    "bitwise_and", "bitwise_or", "bitwise_xor"))
bitwise_not = fnp.bitwise_not
shift_left = _same_dtypes("shift_left", fnp.left_shift)
is_finite = fnp.isfinite
population_count = fnp.bitwise_count


def div(x, y):
    """lax.div: true division for floats, truncation toward zero for integers."""
    check_same_dtypes("div", x, y)
    a, b = fnp._base.promote_args("div", x, y)
    return bind(P.div_p, a, b)


def rem(x, y):
    """lax.rem: the remainder with the dividend's sign (C fmod)."""
    check_same_dtypes("rem", x, y)
    return fnp.fmod(x, y)


def pow(x, y):  # noqa: A001
    return fnp.power(x, y)


def shift_right_logical(x, y):
    check_same_dtypes("shift_right_logical", x, y)
    a, b = fnp._base.promote_args("shift_right_logical", x, y)
    return bind(P.shift_right_logical_p, a, b)


def shift_right_arithmetic(x, y):
    check_same_dtypes("shift_right_arithmetic", x, y)
    return fnp.right_shift(x, y)


def round(x, rounding_method=0):  # noqa: A001
    """lax.round: half away from zero (rounding_method 0) or half to even (1)."""
    x = fnp.asarray(x)
    if int(rounding_method) == 1:
        return fnp.round(x)
    return fnp.sign(x) * fnp.floor(fnp.abs(x) + 0.5)


class RoundingMethod(enum.IntEnum):
    AWAY_FROM_ZERO = 0
    TO_NEAREST_EVEN = 1


def clamp(min, x, max):  # noqa: A002
    """lax.clamp(min, x, max): x limited to [min, max] (one dtype, as in JAX)."""
    check_same_dtypes("clamp", min, x, max)
    return fnp.minimum(fnp.maximum(x, min), max)


def select_n(which, *cases):
    """lax.select_n: cases[which] elementwise (which bool for two cases, else int)."""
    if not cases:
        raise ValueError("select_n: at least one case is required")
    which = fnp.asarray(which)
    if len(cases) == 1:
        return fnp.asarray(cases[0])
    if which.dtype == np.bool_:
        if len(cases) != 2:
            raise ValueError("select_n: a boolean selector needs exactly two cases")
        return fnp.where(which, cases[1], cases[0])
    out = fnp.asarray(cases[0])
    for k in range(1, len(cases)):
        out = fnp.where(which == k, cases[k], out)
    return out


def reciprocal(x):
    return fnp.reciprocal(x)


def conj(x):
    return fnp.conjugate(x)


def real(x):
    return fnp.real(x)


def imag(x):
    return fnp.imag(x)


def optimization_barrier(operand):
    """Identity (funcgrad's optimizer never moves computation across it anyway)."""
    return operand


# ---------------------------------------------------------------------------------------------
# reductions, cumulative ops, sorting
# ---------------------------------------------------------------------------------------------

def _axes(axes):
    return tuple(int(a) for a in axes)


def reduce_sum(operand, axes):
    return fnp.sum(operand, axis=_axes(axes))


def reduce_prod(operand, axes):
    return fnp.prod(operand, axis=_axes(axes))


def reduce_max(operand, axes):
    return fnp.max(operand, axis=_axes(axes))


def reduce_min(operand, axes):
    return fnp.min(operand, axis=_axes(axes))


def reduce_and(operand, axes):
    return fnp.all(operand, axis=_axes(axes))


def reduce_or(operand, axes):
    return fnp.any(operand, axis=_axes(axes))


def argmax(operand, axis, index_dtype):
    return fnp.asarray(fnp.argmax(operand, axis), index_dtype)


def argmin(operand, axis, index_dtype):
    return fnp.asarray(fnp.argmin(operand, axis), index_dtype)


def _cum(op):
    def f(operand, axis=0, reverse=False):
        x = fnp.asarray(operand)
        ax = fnp._base._norm_axis(axis, x.ndim, "cumulative")
        return associative_scan_axis(op, x, ax, reverse)
    return f


cumsum = _cum(lambda a, b: a + b)
cumsum.__doc__ = "lax.cumsum(operand, axis=0, reverse=False): inclusive running sum."
cumprod = _cum(lambda a, b: a * b)
cummax = _cum(fnp.maximum)
cummin = _cum(fnp.minimum)
cumlogsumexp = _cum(fnp.logaddexp)


def sort(operand, dimension=-1, is_stable=True, num_keys=1):
    """lax.sort of one array, or of a tuple of arrays by the first num_keys of them."""
    if isinstance(operand, (tuple, list)):
        ops = [fnp.asarray(o) for o in operand]
        keys = ops[:num_keys]
        idx = fnp.lexsort(keys[::-1], axis=dimension)
        return tuple(fnp.take_along_axis(o, idx, dimension) for o in ops)
    return fnp.sort(operand, axis=dimension)


def sort_key_val(keys, values, dimension=-1, is_stable=True):
    return sort((keys, values), dimension, is_stable, 1)


def top_k(operand, k):
    """The k largest entries of each last-axis row and their indices (ties: lower index
    first), like lax.top_k; the values are differentiable.

    Example:
        >>> import funcgrad
        >>> v, i = funcgrad.lax.top_k(funcgrad.numpy.array([1.0, 3.0, 2.0]), 2)
        >>> v.tolist(), i.tolist()
        ([3.0, 2.0], [1, 2])
    """
    x = fnp.asarray(operand)
    k = int(k)
    if x.ndim == 0 or not 0 <= k <= x.shape[-1]:
        raise ValueError(f"top_k: k={k} must be in [0, {x.shape[-1] if x.ndim else 0}] for an "
                         f"operand of shape {tuple(x.shape)}")
    idx = fnp.argsort(x, axis=-1, descending=True)[..., :k]
    return fnp.take_along_axis(x, idx, -1), idx


approx_max_k = top_k


def approx_min_k(operand, k, **kw):
    v, i = top_k(-fnp.asarray(operand), k)
    return -v, i


# ---------------------------------------------------------------------------------------------
# slicing and shapes
# ---------------------------------------------------------------------------------------------

dynamic_slice_p = P.dynamic_slice_p
dynamic_update_slice_p = P.dynamic_update_slice_p


def _start_list(name, x, start_indices, allow_negative_indices):
    """One int scalar per axis of x, negative ones wrapped once (JAX's default) where
    `allow_negative_indices` says so (a bool, or one per axis)."""
    if isinstance(start_indices, (ArrayBase, np.ndarray)):
        idx = start_indices if isinstance(start_indices, ArrayBase) else fnp.asarray(
            start_indices)
        if idx.ndim != 1:
            raise ValueError(f"{name}: start_indices must be a sequence of scalars or a 1-D "
                             f"array, got shape {tuple(idx.shape)}")
        start_indices = [idx[i] for i in range(idx.shape[0])]
    starts = list(start_indices)
    if len(starts) != x.ndim:
        raise ValueError(f"{name}: need one start index per axis ({x.ndim}), got "
                         f"{len(starts)}\n  at {user_frame_src()}")
    wrap = ([bool(allow_negative_indices)] * x.ndim if isinstance(allow_negative_indices, bool)
            else [bool(w) for w in allow_negative_indices])
    if len(wrap) != x.ndim:
        raise ValueError(f"{name}: allow_negative_indices needs one bool per axis")
    out = []
    for s, n, w in zip(starts, x.shape, wrap):
        if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer, ArrayBase,
                                                                  np.ndarray)):
            raise TypeError(f"{name}: start indices must be integer scalars, got {s!r}")
        if isinstance(s, (int, np.integer)):   # concrete: wrapped now, a literal
            s = int(s)
            out.append(np.int32(s + n if w and s < 0 else s) if -2 ** 31 <= s < 2 ** 31
                       else np.int64(s + n if w and s < 0 else s))
            continue
        s = fnp.asarray(s)
        if s.ndim != 0 or dtype_kind(s.dtype) not in "iu":
            raise TypeError(f"{name}: start indices must be integer scalars, got "
                            f"{s.aval.str_short()}\n  at {user_frame_src()}")
        if w and dtype_kind(s.dtype) == "i":
            s = fnp.where(s < 0, s + np.asarray(n, s.dtype), s)
        out.append(s)
    return out


def dynamic_slice(operand, start_indices, slice_sizes, *, allow_negative_indices=True):
    """lax.dynamic_slice: a static-size window at traced start indices.

    Each start is wrapped once when negative (JAX's default, `allow_negative_indices`), then
    clamped so that the window fits, as XLA does.

    Args:
        operand: the array to slice.
        start_indices: one integer scalar per axis (Python ints or traced scalars), or a 1-D
            integer array.
        slice_sizes: the window's static size per axis.
        allow_negative_indices: whether negative starts count from the end (a bool, or one
            per axis).

    Returns:
        The window, of shape `slice_sizes`.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> from funcgrad import lax
        >>> lax.dynamic_slice(fnp.arange(6), (fnp.asarray(4),), (3,)).tolist()
        [3, 4, 5]
    """
    x = fnp.asarray(operand)
    sizes = tuple(int(m) for m in slice_sizes)
    if len(sizes) != x.ndim:
        raise ValueError(f"dynamic_slice: need one slice size per axis ({x.ndim}), got "
                         f"{len(sizes)}\n  at {user_frame_src()}")
    for m, n in zip(sizes, x.shape):
        if not 0 <= m <= n:
            raise ValueError(f"dynamic_slice: slice size {m} exceeds the axis size {n}"
                             f"\n  at {user_frame_src()}")
    starts = _start_list("dynamic_slice", x, start_indices, allow_negative_indices)
    return bind(dynamic_slice_p, x, *starts, slice_sizes=sizes)


def dynamic_update_slice(operand, update, start_indices, *, allow_negative_indices=True):
    """lax.dynamic_update_slice: operand with `update` written at traced start indices.

    Each start is wrapped once when negative (JAX's default), then clamped so that the update
    fits. One primitive: under jit with the operand donated (and not read after the update)
    the CUDA backend writes the window into the operand's memory, copying nothing else.

    Args:
        operand: the array to update.
        update: the values to write, of the operand's rank and dtype (TypeError otherwise,
            as in JAX; a Python scalar of the operand's kind is taken).
        start_indices: one integer scalar per axis, or a 1-D integer array.
        allow_negative_indices: whether negative starts count from the end.

    Returns:
        The updated array.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> from funcgrad import lax
        >>> lax.dynamic_update_slice(fnp.zeros(5), fnp.ones(2), (4,)).tolist()
        [0.0, 0.0, 0.0, 1.0, 1.0]
    """
    check_same_dtypes("dynamic_update_slice", operand, update)
    x = fnp.asarray(operand)
    u = fnp.asarray(update, x.dtype)
    if u.ndim != x.ndim:
        raise ValueError(f"dynamic_update_slice: the update {tuple(u.shape)} must have the "
                         f"operand's rank ({tuple(x.shape)})\n  at {user_frame_src()}")
    for m, n in zip(u.shape, x.shape):
        if m > n:
            raise ValueError(f"dynamic_update_slice: the update {tuple(u.shape)} does not fit "
                             f"in the operand {tuple(x.shape)}\n  at {user_frame_src()}")
    starts = _start_list("dynamic_update_slice", x, start_indices, allow_negative_indices)
    return bind(dynamic_update_slice_p, x, u, *starts)


def dynamic_slice_in_dim(operand, start_index, slice_size, axis=0, *,
                         allow_negative_indices=True):
    """lax.dynamic_slice_in_dim: dynamic_slice along one axis (the others whole)."""
    x = fnp.asarray(operand)
    ax = fnp._base._norm_axis(axis, x.ndim, "dynamic_slice_in_dim")
    starts = [0] * x.ndim
    sizes = list(x.shape)
    starts[ax], sizes[ax] = start_index, slice_size
    return dynamic_slice(x, starts, sizes, allow_negative_indices=allow_negative_indices)


def dynamic_index_in_dim(operand, index, axis=0, keepdims=True, *,
                         allow_negative_indices=True):
    """lax.dynamic_index_in_dim: the slice of size 1 at a traced index of one axis."""
    out = dynamic_slice_in_dim(operand, index, 1, axis,
                               allow_negative_indices=allow_negative_indices)
    return out if keepdims else fnp.squeeze(out, axis)


def dynamic_update_slice_in_dim(operand, update, start_index, axis, *,
                                allow_negative_indices=True):
    """lax.dynamic_update_slice_in_dim: dynamic_update_slice along one axis."""
    x = fnp.asarray(operand)
    ax = fnp._base._norm_axis(axis, x.ndim, "dynamic_update_slice_in_dim")
    starts = [0] * x.ndim
    starts[ax] = start_index
    return dynamic_update_slice(x, update, starts,
                                allow_negative_indices=allow_negative_indices)


def dynamic_update_index_in_dim(operand, update, index, axis, *, allow_negative_indices=True):
    """lax.dynamic_update_index_in_dim: writes a slice of size 1 (or of rank one less) at a
    traced index of one axis."""
    x = fnp.asarray(operand)
    ax = fnp._base._norm_axis(axis, x.ndim, "dynamic_update_index_in_dim")
    u = fnp.asarray(update)
    if u.ndim == x.ndim - 1:
        u = fnp.expand_dims(u, ax)
    return dynamic_update_slice_in_dim(x, u, index, ax,
                                       allow_negative_indices=allow_negative_indices)


def slice_in_dim(operand, start_index, limit_index, stride=1, axis=0):
    x = fnp.asarray(operand)
    ax = fnp._base._norm_axis(axis, x.ndim, "slice_in_dim")
    n = x.shape[ax]
    start = 0 if start_index is None else (start_index + n if start_index < 0 else start_index)
    limit = n if limit_index is None else (limit_index + n if limit_index < 0 else limit_index)
    lo, hi, st = [0] * x.ndim, list(x.shape), [1] * x.ndim
    lo[ax], hi[ax], st[ax] = start, limit, stride
    return bind(P.slice_p, x, start_indices=tuple(lo), limit_indices=tuple(hi),
                strides=tuple(st))


def index_in_dim(operand, index, axis=0, keepdims=True):
    x = fnp.asarray(operand)
    ax = fnp._base._norm_axis(axis, x.ndim, "index_in_dim")
    index = index + x.shape[ax] if index < 0 else index
    out = slice_in_dim(x, index, index + 1, 1, ax)
    return out if keepdims else fnp.squeeze(out, ax)


def reshape(operand, new_sizes, dimensions=None):
    x = fnp.asarray(operand)
    if dimensions is not None:
        x = fnp.transpose(x, dimensions)
    return fnp.reshape(x, tuple(new_sizes))


def transpose(operand, permutation):
    return fnp.transpose(operand, permutation)


def squeeze(array, dimensions):
    return fnp.squeeze(array, tuple(dimensions))


def expand_dims(array, dimensions):
    return fnp.expand_dims(array, tuple(dimensions))


def rev(operand, dimensions):
    return fnp.flip(operand, tuple(dimensions))


def concatenate(operands, dimension):
    return fnp.concatenate(operands, dimension)


def pad(operand, padding_value, padding_config):
    """lax.pad: (low, high, interior) per axis; negative low/high crop."""
    x = fnp.asarray(operand)
    cfg = [tuple(int(v) for v in c) for c in padding_config]
    crop = [(builtins.max(-lo, 0), builtins.max(-hi, 0)) for lo, hi, _ in cfg]
    out = bind(P.pad_p, x, padding_config=tuple((builtins.max(lo, 0), builtins.max(hi, 0), it)
                                                for lo, hi, it in cfg), value=0.0)
    mask = bind(P.pad_p, fnp.ones(x.shape, np.bool_) if x.size else fnp.zeros(x.shape, bool),
                padding_config=tuple((builtins.max(lo, 0), builtins.max(hi, 0), it)
                                     for lo, hi, it in cfg), value=0.0)
    out = fnp.where(mask, out, fnp.asarray(padding_value, x.dtype))
    if any(c != (0, 0) for c in crop):
        out = bind(P.slice_p, out, start_indices=tuple(c[0] for c in crop),
                   limit_indices=tuple(n - c[1] for n, c in zip(out.shape, crop)),
                   strides=(1,) * out.ndim)
    return out


def broadcast(operand, sizes):
    x = fnp.asarray(operand)
    return fnp.broadcast_to(x, tuple(sizes) + tuple(x.shape))


def broadcast_to_rank(x, rank):
    x = fnp.asarray(x)
    return fnp.reshape(x, (1,) * (rank - x.ndim) + tuple(x.shape))


def broadcasted_iota(dtype, shape, dimension):
    return bind(P.iota_p, dtype=np.dtype(dtype), shape=tuple(int(s) for s in shape),
                dimension=int(dimension))


def collapse(operand, start_dimension, stop_dimension=None):
    x = fnp.asarray(operand)
    stop = x.ndim if stop_dimension is None else stop_dimension
    shape = tuple(x.shape)
    return fnp.reshape(x, shape[:start_dimension] + (-1,) + shape[stop:])


def full(shape, fill_value, dtype=None, *, sharding=None):
    return fnp.full(shape, fill_value, dtype)


def full_like(x, fill_value, dtype=None, shape=None, sharding=None):
    return fnp.full_like(x, fill_value, dtype, shape)


def zeros_like_array(x):
    return fnp.zeros_like(x)


def dot(lhs, rhs, precision=None, preferred_element_type=None):
    from funcgrad.numpy._linalg import widen_operands
    lhs, rhs = widen_operands(lhs, rhs, preferred_element_type)
    out = fnp.dot(lhs, rhs, precision=precision)
    return out if preferred_element_type is None else fnp.asarray(out, preferred_element_type)


def batch_matmul(lhs, rhs, precision=None):
    return fnp.matmul(lhs, rhs, precision=precision)


class Precision(enum.Enum):
    """Matmul precision (JAX's names): DEFAULT follows funcgrad.config's
    "default_matmul_precision", HIGH is TF32 and HIGHEST full float32 for float32 products on
    CUDA; the CPU computes in the operand dtype."""
    DEFAULT = 0
    HIGH = 1
    HIGHEST = 2


# ---------------------------------------------------------------------------------------------
# collectives over the named axes of pmap / vmap(axis_name=): funcgrad/lax/parallel.py
# ---------------------------------------------------------------------------------------------

from funcgrad.lax.parallel import (
    all_gather,
    axis_index,
    pmax,
    pmean,
    pmin,
    ppermute,
    psum,
    psum_scatter,
)


def all_to_all(x, axis_name, split_axis, concat_axis, *, axis_index_groups=None, tiled=False):
    """lax.all_to_all: not built yet (needs multi-GPU collectives); raises."""
    raise NotImplementedError("lax.all_to_all is not implemented by funcgrad yet; psum, pmean, "
                              "pmax, pmin, all_gather, psum_scatter, ppermute and axis_index "
                              "are")


__all__ = [
    "abs",
    "add",
    "sub",
    "mul",
    "neg",
    "sign",
    "floor",
    "ceil",
    "exp",
    "exp2",
    "log",
    "log1p",
    "expm1",
    "sin",
    "cos",
    "tan",
    "tanh",
    "sinh",
    "cosh",
    "asin",
    "acos",
    "atan",
    "atan2",
    "asinh",
    "acosh",
    "atanh",
    "sqrt",
    "cbrt",
    "square",
    "square_p",
    "max",
    "min",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bitwise_not",
    "shift_left",
    "is_finite",
    "population_count",
    "div",
    "rem",
    "pow",
    "shift_right_logical",
    "shift_right_arithmetic",
    "round",
    "RoundingMethod",
    "clamp",
    "select_n",
    "reciprocal",
    "conj",
    "real",
    "imag",
    "optimization_barrier",
    "reduce_sum",
    "reduce_prod",
    "reduce_max",
    "reduce_min",
    "reduce_and",
    "reduce_or",
    "argmax",
    "argmin",
    "cumsum",
    "cumprod",
    "cummax",
    "cummin",
    "cumlogsumexp",
    "sort",
    "sort_key_val",
    "top_k",
    "approx_max_k",
    "approx_min_k",
    "dynamic_slice",
    "dynamic_slice_p",
    "dynamic_update_slice",
    "dynamic_update_slice_p",
    "dynamic_slice_in_dim",
    "dynamic_index_in_dim",
    "dynamic_update_slice_in_dim",
    "dynamic_update_index_in_dim",
    "slice_in_dim",
    "index_in_dim",
    "reshape",
    "transpose",
    "squeeze",
    "expand_dims",
    "rev",
    "concatenate",
    "pad",
    "broadcast",
    "broadcast_to_rank",
    "broadcasted_iota",
    "collapse",
    "full",
    "full_like",
    "zeros_like_array",
    "dot",
    "batch_matmul",
    "Precision",
    "psum",
    "pmean",
    "pmax",
    "pmin",
    "all_gather",
    "all_to_all",
    "ppermute",
    "psum_scatter",
    "axis_index",
    "digamma",
    "erf_inv",
    "erfc",
    "lgamma",
]
