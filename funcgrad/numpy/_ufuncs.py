"""Elementwise functions and reductions of funcgrad.numpy, lowered to primitives."""
from __future__ import annotations

import builtins

import numpy as np

from funcgrad import prims as P
from funcgrad.prims import complex as PC
from funcgrad.core import ArrayBase, Tracer, bind, is_float, is_int, type_error
from funcgrad.core.dtypes import STORAGE_ONLY_DTYPES, dtype_kind, is_half
from funcgrad.numpy._base import (
    asarray,
    broadcast_shapes,
    broadcast_to,
    canonical_dtype,
    norm_axes,
    promote_args,
    reshape,
    result_type,
)

_F32 = np.dtype(np.float32)


def _float_dtype(*args):
    dt = result_type(*args)   # float8 stays float8: the primitive then names it (no kernel)
    return dt if dtype_kind(dt) in "fc" or dt in STORAGE_ONLY_DTYPES else _F32


def _inexact(dtype):
    return dtype_kind(np.dtype(dtype)) in "fc"


def _unary_float(prim, name):
    def f(x):
        (x,) = promote_args(name, x, dtype=_float_dtype(x))
        return bind(prim, x)
    f.__name__ = name
    f.__doc__ = f"Elementwise numpy.{name} (integer inputs give float32)."
    return f


exp = _unary_float(P.exp_p, "exp")
log = _unary_float(P.log_p, "log")
log1p = _unary_float(P.log1p_p, "log1p")
expm1 = _unary_float(P.expm1_p, "expm1")
tanh = _unary_float(P.tanh_p, "tanh")
sin = _unary_float(P.sin_p, "sin")
cos = _unary_float(P.cos_p, "cos")
sqrt = _unary_float(P.sqrt_p, "sqrt")
_floor_float = _unary_float(P.floor_p, "floor")


def floor(x):
    """Elementwise numpy.floor (integer and bool inputs are returned as they are)."""
    x = asarray(x)
    return x if dtype_kind(x.dtype) in "biu" else _floor_float(x)
_isfinite_real = _unary_float(P.isfinite_p, "isfinite")


def isfinite(x):
    """Elementwise numpy.isfinite (complex: both parts finite)."""
    x = asarray(x)
    if dtype_kind(x.dtype) == "c":
        return logical_and(_isfinite_real(PC.real(x)), _isfinite_real(PC.imag(x)))
    return _isfinite_real(x)


def _unary_same(prim, name):
    def f(x):
        x = asarray(x)
        if dtype_kind(x.dtype) == "u":   # unsigned: |x| = x, sign x = (x != 0), -x wraps around
            if prim is P.abs_p:
                return x
            if prim is P.sign_p:
                return P.convert(bind(P.ne_p, x, P.zeros_like(x)), x.dtype)
            return bind(P.sub_p, P.zeros_like(x), x)
        return bind(prim, x) if x.dtype != np.bool_ else x
    f.__name__ = name
    f.__doc__ = f"Elementwise numpy.{name}."
    return f


negative = _unary_same(P.neg_p, "negative")
abs = absolute = _unary_same(P.abs_p, "abs")
sign = _unary_same(P.sign_p, "sign")


def tan(x):
    return sin(x) / cos(x)


def log2(x):
    return log(x) / float(np.log(2.0))  # a weak Python float: exact to the input's precision


def log10(x):
    return log(x) / float(np.log(10.0))


def exp2(x):
    x = asarray(x)  # (a numpy operand times a Python float would be computed by numpy, in f64)
    return exp(asarray(x, _float_dtype(x)) * float(np.log(2.0)))


def ceil(x):
    x = asarray(x)
    return x if not is_float(x.dtype) else -floor(-x)


def trunc(x):
    x = asarray(x)
    return x if not is_float(x.dtype) else sign(x) * floor(abs(x))


def round(x, decimals=0):
    """Round half to even (numpy.round)."""
    x = asarray(x)
    if not is_float(x.dtype):
        return x
    if decimals == 0:
        return bind(P.round_p, x)
    s = float(10.0 ** decimals)
    return bind(P.round_p, x * s) / s


around = round


def reciprocal(x):
    return divide(1.0, x)


def square(x):
    x = asarray(x)
    return bind(P.integer_pow_p, x, y=2)


def isnan(x):
    x = asarray(x)
    return not_equal(x, x) if _inexact(x.dtype) else full_bool(x, False)


def isinf(x):
    x = asarray(x)
    if dtype_kind(x.dtype) == "c":
        return logical_or(isinf(PC.real(x)), isinf(PC.imag(x)))
    if not is_float(x.dtype):
        return full_bool(x, False)
    return logical_and(logical_not(isfinite(x)), logical_not(isnan(x)))


def full_bool(x, v):
    return P.full_like(x, v, np.bool_)


def _binary(prim, name, float_only=False):
    def f(x1, x2):
        dt = _float_dtype(x1, x2) if float_only else None
        a, b = promote_args(name, x1, x2, dtype=dt)
        return bind(prim, a, b)
    f.__name__ = name
    f.__doc__ = f"Elementwise numpy.{name} with broadcasting and JAX-style promotion."
    return f


add = _binary(P.add_p, "add")
subtract = _binary(P.sub_p, "subtract")
multiply = _binary(P.mul_p, "multiply")
true_divide = divide = _binary(P.div_p, "divide", float_only=True)
maximum = _binary(P.max_p, "maximum")
minimum = _binary(P.min_p, "minimum")
equal = _binary(P.eq_p, "equal")
not_equal = _binary(P.ne_p, "not_equal")
less = _binary(P.lt_p, "less")
less_equal = _binary(P.le_p, "less_equal")
greater = _binary(P.gt_p, "greater")
greater_equal = _binary(P.ge_p, "greater_equal")


def _bitwise(prim, name):
    def f(x1, x2):
        a, b = promote_args(name, x1, x2)
        if is_float(a.dtype):
            raise type_error(name, f"not supported for floating point dtype {a.dtype.name}",
                             (a.aval, b.aval) if isinstance(a, ArrayBase) else ())
        return bind(prim, a, b)
    f.__name__ = name
    return f


bitwise_and = _bitwise(P.and_p, "bitwise_and")
bitwise_or = _bitwise(P.or_p, "bitwise_or")
bitwise_xor = _bitwise(P.xor_p, "bitwise_xor")


def invert(x):
    x = asarray(x)
    if is_float(x.dtype):
        raise type_error("invert", "not supported for floating point", (x.aval,))
    return bind(P.not_p, x)


bitwise_not = invert


def _to_bool(x):
    x = asarray(x)
    return x if x.dtype == np.bool_ else not_equal(x, 0)


def logical_and(x1, x2): return bitwise_and(_to_bool(x1), _to_bool(x2))
def logical_or(x1, x2): return bitwise_or(_to_bool(x1), _to_bool(x2))
def logical_xor(x1, x2): return bitwise_xor(_to_bool(x1), _to_bool(x2))
def logical_not(x): return bind(P.not_p, _to_bool(x))


def left_shift(x1, x2):
    a, b = promote_args("left_shift", x1, x2)
    return bind(P.shift_left_p, a, b)


def right_shift(x1, x2):
    """Arithmetic shift for signed ints (numpy semantics), logical for unsigned."""
    a, b = promote_args("right_shift", x1, x2)
    if dtype_kind(a.dtype) == "u":
        return bind(P.shift_right_logical_p, a, b)
    logical = bind(P.shift_right_logical_p, a, b)
    neg_shift = bind(P.not_p, bind(P.shift_right_logical_p, bind(P.not_p, a), b))
    return where(less(a, 0), neg_shift, logical)


def power(x1, x2):
    """numpy.power; a static integer exponent lowers to integer_pow (exact for negative x)."""
    if isinstance(x2, (builtins.int, np.integer)) and not isinstance(x2, builtins.bool):
        x = asarray(x1)
        if is_int(x.dtype) and x2 < 0:
            raise ValueError("integers to negative integer powers are not allowed")
        return bind(P.integer_pow_p, x, y=int(x2))
    a, b = promote_args("power", x1, x2)
    if not _inexact(a.dtype):
        return _int_power(asarray(a), asarray(b))
    return bind(P.pow_p, a, b)


def _int_power(a, b):
    """Integer a ** b by square-and-multiply over the exponent's bits. A concrete negative
    exponent raises (like numpy); a traced one gives lax's result (0 unless |a| == 1)."""
    if a.dtype == np.bool_:
        a, b = asarray(a, np.int32), asarray(b, np.int32)
    concrete = not isinstance(b, Tracer)
    if concrete:
        bv = np.asarray(b)
        if bv.size and bv.min() < 0:
            raise ValueError("integers to negative integer powers are not allowed")
        nbits = int(bv.max()).bit_length() if bv.size else 0
    else:
        nbits = a.dtype.itemsize * 8 - (dtype_kind(a.dtype) == "i")
    one = P.full_like(b, 1)
    out, base, e = P.full_like(a, 1), a, b
    for k in range(nbits):
        out = where(not_equal(bind(P.and_p, e, one), 0), out * base, out)
        if k + 1 < nbits:
            base, e = base * base, bind(P.shift_right_logical_p, e, one)
    if not concrete and dtype_kind(a.dtype) == "i":
        odd = not_equal(bind(P.and_p, b, one), 0)
        neg_pow = where(equal(a, 1), 1, where(equal(a, -1), where(odd, -1, 1), 0))
        out = where(less(b, 0), neg_pow, out)
    return out


def floor_divide(x1, x2):
    """numpy.floor_divide (rounds toward -inf, also for integers)."""
    a, b = promote_args("floor_divide", x1, x2)
    if is_float(a.dtype):
        return floor(bind(P.div_p, a, b))
    q = bind(P.div_p, a, b)
    r = bind(P.rem_p, a, b)
    adjust = logical_and(not_equal(r, 0), not_equal(less(r, 0), less(b, 0)))
    return where(adjust, q - 1, q)


def remainder(x1, x2):
    """numpy.remainder / `%` (result has the sign of the divisor)."""
    a, b = promote_args("remainder", x1, x2)
    r = bind(P.rem_p, a, b)
    adjust = logical_and(not_equal(r, 0), not_equal(less(r, 0), less(b, 0)))
    out = where(adjust, r + b, r)
    if is_float(out.dtype):   # a zero result takes the divisor's sign (the array API, C99)
        zero = P.full_like(out, 0.0)
        out = where(equal(out, 0), where(less(b, 0), -zero, zero), out)
    return out


mod = remainder


def fmod(x1, x2):
    a, b = promote_args("fmod", x1, x2)
    return bind(P.rem_p, a, b)


def where(condition, x=None, y=None):
    """numpy.where(condition, x, y) with broadcasting; the one-argument form is not supported
    (its output shape depends on the data)."""
    if x is None or y is None:
        raise TypeError("funcgrad.numpy.where needs three arguments (the one-argument form has "
                        "a data-dependent shape)")
    cond = _to_bool(condition)
    a, b = promote_args("where", x, y, dtype=result_type(x, y))
    shape = broadcast_shapes(cond.shape, np.shape(a), np.shape(b), op="where")
    return bind(P.select_p, broadcast_to(cond, shape), broadcast_to(a, shape),
                broadcast_to(b, shape))


def clip(x, /, min=None, max=None, *, a_min=None, a_max=None):
    """numpy.clip: minimum(maximum(x, min), max) (a_min/a_max: numpy's older names)."""
    lo, hi = (min if min is not None else a_min), (max if max is not None else a_max)
    out = asarray(x)
    if lo is not None:
        out = maximum(out, lo)
    if hi is not None:
        out = minimum(out, hi)
    return out


def logaddexp(x1, x2):
    """log(exp(x1) + exp(x2)), stable, with exact derivatives of every order (also at x1 ==
    x2, where a max / |x1 - x2| form has a kink: JAX's custom rule gives 0.25 there).

    With m = max(x1, x2) held constant, m + log1p(expm1(x1 - m) + exp(x2 - m)) equals
    log(exp(x1) + exp(x2)) for every x1, x2 (and its mirror image too): each branch is the
    smooth function itself, evaluated where it is accurate (expm1(0) = 0 exactly).

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp
        >>> round(float(fnp.logaddexp(0.0, 0.0)), 6)
        0.693147
        >>> float(funcgrad.grad(funcgrad.grad(fnp.logaddexp))(1.0, 1.0))
        0.25
    """
    a, b = (asarray(v) for v in promote_args("logaddexp", x1, x2, dtype=_float_dtype(x1, x2)))
    d = a - b   # nan when both are the same infinity: then the answer is a + b (like JAX)
    inf = asarray(np.inf, a.dtype)
    special = isnan(d) | equal(a, inf) | equal(b, inf)
    zero = P.zeros_like(a)
    af, bf = where(special, zero, a), where(special, zero, b)   # no nan/inf in the smooth part
    m = bind(P.stop_gradient_p, maximum(af, bf))
    first = m + log1p(expm1(af - m) + exp(bf - m))     # af is the larger: expm1(af - m) = 0
    second = m + log1p(exp(af - m) + expm1(bf - m))
    smooth = where(af >= bf, first, second)
    return where(special, where(isnan(d), a + b, maximum(a, b)), smooth)


# ---------------------------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------------------------

def _keep(out, x, axes, keepdims):
    if not keepdims:
        return out
    return reshape(out, [1 if i in axes else s for i, s in enumerate(x.shape)])


def sum(a, axis=None, dtype=None, keepdims=False):
    """numpy.sum over axis None/int/tuple (bools and small ints sum as int32)."""
    x = asarray(a)
    dt = canonical_dtype(dtype) or (  # small ints as int32 (unsigned: uint32), like JAX
        np.dtype(np.uint32 if x.dtype.kind == "u" else np.int32) if x.dtype.kind == "b" or (
            x.dtype.kind in "iu" and x.dtype.itemsize < 4) else x.dtype)
    x = asarray(x, dt)
    axes = norm_axes(axis, x.ndim, "sum")
    out = bind(P.reduce_sum_p, x, axes=axes) if axes else x
    return _keep(out, x, axes, keepdims)


def mean(a, axis=None, dtype=None, keepdims=False):
    """numpy.mean (integer inputs give float32)."""
    x = asarray(a)
    dt = canonical_dtype(dtype) or (x.dtype if _inexact(x.dtype) else _F32)
    if is_half(dt):   # float16/bfloat16: summed and divided in float32, rounded once (JAX)
        return asarray(mean(asarray(x, _F32), axis, keepdims=keepdims), dt)
    x = asarray(x, dt)
    axes = norm_axes(axis, x.ndim, "mean")
    n = int(np.prod([x.shape[i] for i in axes]))
    return sum(x, axes, keepdims=keepdims) / np.asarray(n, dt) if n else \
        sum(x, axes, keepdims=keepdims) * np.asarray(np.nan, dt)


def _chooser(prim, name):
    def f(a, axis=None, keepdims=False, initial=None):
        x = asarray(a)
        axes = norm_axes(axis, x.ndim, name)
        if initial is not None and builtins.any(x.shape[i] == 0 for i in axes):  # empty
            from funcgrad.numpy._base import full
            return full([1 if i in axes else s for i, s in enumerate(x.shape)] if keepdims
                        else [s for i, s in enumerate(x.shape) if i not in axes],
                        initial, result_type(x, initial))
        out = bind(prim, x, axes=axes) if axes else x
        out = _keep(out, x, axes, keepdims)
        if initial is not None:
            out = (maximum if prim is P.reduce_max_p else minimum)(out, initial)
        return out
    f.__name__ = name
    f.__doc__ = f"numpy.{name} over axis None/int/tuple; empty reductions raise."
    return f


max = amax = _chooser(P.reduce_max_p, "max")
min = amin = _chooser(P.reduce_min_p, "min")


def prod(a, axis=None, dtype=None, keepdims=False):
    """numpy.prod over axis None/int/tuple."""
    x = asarray(a, canonical_dtype(dtype))
    if dtype is None and (x.dtype.kind == "b" or (x.dtype.kind in "iu" and x.dtype.itemsize < 4)):
        x = asarray(x, np.uint32 if x.dtype.kind == "u" else np.int32)  # like sum
    axes = norm_axes(axis, x.ndim, "prod")
    out = bind(P.reduce_prod_p, x, axes=axes) if axes else x
    return _keep(out, x, axes, keepdims)


def var(a, axis=None, dtype=None, ddof=0, keepdims=False, *, correction=None):
    """numpy.var: mean of squared deviations, divided by n - ddof (correction: the array API's
    name for ddof)."""
    ddof = ddof if correction is None else correction
    x = asarray(a)
    x = asarray(x, canonical_dtype(dtype) or (x.dtype if _inexact(x.dtype) else _F32))
    if is_half(x.dtype):   # computed in float32, rounded once (jnp.var's upcast)
        return asarray(var(asarray(x, _F32), axis, None, ddof, keepdims), x.dtype)
    axes = norm_axes(axis, x.ndim, "var")
    n = int(np.prod([x.shape[i] for i in axes]))
    centered = x - mean(x, axes, keepdims=True)
    if dtype_kind(x.dtype) == "c":   # numpy: the mean of |x - mean|^2, a real number
        centered = abs(centered)
    ss = sum(square(centered), axes, keepdims=keepdims)
    return ss / np.asarray(builtins.max(n - ddof, 0), ss.dtype)


def std(a, axis=None, dtype=None, ddof=0, keepdims=False, *, correction=None):
    """numpy.std (correction: the array API's name for ddof)."""
    return sqrt(var(a, axis, dtype, ddof, keepdims, correction=correction))


def _arg(prim, name):
    def f(a, axis=None, keepdims=False):
        x = asarray(a)
        if axis is None:
            out = bind(prim, reshape(x, (-1,)), axis=0, index_dtype=np.dtype(np.int32))
            return reshape(out, (1,) * x.ndim) if keepdims else out
        (ax,) = norm_axes(axis, x.ndim, name)
        out = bind(prim, x, axis=ax, index_dtype=np.dtype(np.int32))
        return _keep(out, x, (ax,), keepdims)
    f.__name__ = name
    f.__doc__ = f"numpy.{name} (int32 indices)."
    return f


argmax = _arg(P.argmax_p, "argmax")
argmin = _arg(P.argmin_p, "argmin")


def all(a, axis=None, keepdims=False):
    x = _to_bool(a)
    axes = norm_axes(axis, x.ndim, "all")
    return _keep(bind(P.reduce_min_p, x, axes=axes) if axes and x.size else
                 _empty_bool(x, axes, True), x, axes, keepdims)


def any(a, axis=None, keepdims=False):
    x = _to_bool(a)
    axes = norm_axes(axis, x.ndim, "any")
    return _keep(bind(P.reduce_max_p, x, axes=axes) if axes and x.size else
                 _empty_bool(x, axes, False), x, axes, keepdims)


def _empty_bool(x, axes, value):
    from funcgrad.numpy._base import full
    if not axes:
        return x
    return full([s for i, s in enumerate(x.shape) if i not in axes], value, np.bool_)


def count_nonzero(a, axis=None, keepdims=False):
    return sum(_to_bool(a), axis=axis, keepdims=keepdims)

