"""The closed primitive set: one definition block per primitive (shape, impl, vjp, jvp, batch).

Conventions: binary elementwise primitives take operands of equal shape and dtype (funcgrad.numpy
broadcasts and promotes first); derivative and batching rules are written with these same
primitives, so backward passes are expressions too. Batching rules see every batched operand with
its batch dimension at axis 0 (batching.py moves it there) and return (out, out_dim).
"""
from __future__ import annotations

import math

import numpy as np

from funcgrad.config import canonical_precision, config
from funcgrad.core import (
    ShapedArray,
    bind,
    compute_dtype,
    defprim,
    is_float,
    is_half,
    is_int,
    real_dtype,
    type_error,
)
from funcgrad.core.dtypes import dtype_kind

# ---------------------------------------------------------------------------------------------
# helpers shared by the rules
# ---------------------------------------------------------------------------------------------

FLOAT_KINDS, INT_KINDS, BOOL_KINDS = "f", "iu", "b"


def _inexact(dtype) -> bool:
    """Float or complex: the dtypes that carry gradients."""
    return dtype_kind(np.dtype(dtype)) in "fc"


def _dtype_ok(name, avals, kinds):
    for a in avals:
        if dtype_kind(a.dtype) not in kinds:
            raise type_error(name, f"dtype {a.dtype.name} is not supported", avals)


def _same_shape_rule(name, kinds="fiub", out_dtype=None):
    def rule(*avals, **_):
        a0 = avals[0]
        for a in avals[1:]:
            if a.shape != a0.shape:
                raise type_error(name, "operands must have equal shapes "
                                 "(funcgrad.numpy broadcasts; primitives do not)", avals)
            if a.dtype != a0.dtype:
                raise type_error(name, "operands must have equal dtypes", avals)
        _dtype_ok(name, avals, kinds)
        return ShapedArray(a0.shape, out_dtype or a0.dtype)
    return rule


def full(shape, value, dtype):
    """An array of `shape` filled with a scalar (a broadcast of a literal)."""
    return bind(broadcast_in_dim_p, np.asarray(value, np.dtype(dtype)), shape=tuple(shape),
                broadcast_dimensions=())


def full_like(x, value, dtype=None):
    """An array shaped like x filled with a scalar (a broadcast of a literal)."""
    return full(x.shape, value, dtype or x.dtype)


def zeros_like(x):
    return full_like(x, 0)


def add(x, y): return bind(add_p, x, y)
def sub(x, y): return bind(sub_p, x, y)
def mul(x, y): return bind(mul_p, x, y)
def div(x, y): return bind(div_p, x, y)
def neg(x): return bind(neg_p, x)
def select(pred, x, y): return bind(select_p, pred, x, y)
def eq(x, y): return bind(eq_p, x, y)
def convert(x, dtype): return bind(convert_element_type_p, x, new_dtype=np.dtype(dtype))
def reduce_sum(x, axes): return bind(reduce_sum_p, x, axes=tuple(axes))
def reshape(x, shape): return bind(reshape_p, x, new_sizes=tuple(shape))
def transpose(x, perm):
    perm = tuple(int(p) for p in perm)
    return x if perm == tuple(range(len(perm))) else bind(transpose_p, x, permutation=perm)


def broadcast_in_dim(x, shape, dims):
    return bind(broadcast_in_dim_p, x, shape=tuple(shape), broadcast_dimensions=tuple(dims))


def scalar_mul(x, c):
    return mul(x, full_like(x, c))


def add_any(a, b):
    """Sum of two tangents/cotangents where None stands for zero."""
    if a is None:
        return b
    if b is None:
        return a
    return add(a, b)


def _bcast_batched(x, d, size):
    """x with a leading batch axis of `size` (broadcast when unbatched)."""
    if d is not None:
        return x
    return broadcast_in_dim(x, (size,) + tuple(x.shape), range(1, len(x.shape) + 1))


def _batch_size(args, dims):
    return next(a.shape[0] for a, d in zip(args, dims) if d is not None)


def batch_elementwise(prim):
    def rule(args, dims, **params):
        size = _batch_size(args, dims)
        return bind(prim, *[_bcast_batched(a, d, size) for a, d in zip(args, dims)],
                    **params), 0
    return rule


# ---------------------------------------------------------------------------------------------
# elementwise unary primitives
# ---------------------------------------------------------------------------------------------

def _unary(name, impl, vjp=None, jvp=None, kinds="fiu", out_dtype=None):
    p = defprim(name, _same_shape_rule(name, kinds, out_dtype), impl, vjp, jvp,
                kind="elementwise")
    p.batch = batch_elementwise(p)
    return p


def _unary_diff(name, impl, deriv, kinds="fc"):
    """A differentiable unary primitive with derivative deriv(x, out) (an expression)."""
    return _unary(name, impl,
                  vjp=lambda ct, x, *, out: (mul(ct, deriv(x, out)),),
                  jvp=lambda ts, xs, *, out: None if ts[0] is None else mul(ts[0],
                                                                        deriv(xs[0], out)),
                  kinds=kinds)


def _linear_unary_jvp(prim):
    return lambda ts, xs, *, out, **params: None if ts[0] is None else bind(prim, ts[0], **params)


neg_p = _unary("neg", np.negative, vjp=lambda ct, x, *, out: (neg(ct),), kinds="fic")
neg_p.jvp = _linear_unary_jvp(neg_p)
exp_p = _unary_diff("exp", np.exp, lambda x, out: out)                      # (e^x)' = e^x
log_p = _unary_diff("log", np.log, lambda x, out: div(full_like(x, 1), x))  # (log x)' = 1/x
log1p_p = _unary_diff("log1p", np.log1p,
                      lambda x, out: div(full_like(x, 1), add(x, full_like(x, 1))), kinds="f")
expm1_p = _unary_diff("expm1", np.expm1, lambda x, out: add(out, full_like(x, 1)), kinds="f")
tanh_p = _unary_diff("tanh", np.tanh,                                       # 1 - tanh^2
                     lambda x, out: sub(full_like(x, 1), mul(out, out)))
logistic_p = _unary_diff(                                                   # s (1 - s)
    "logistic", lambda x: np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))),
                                   np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x)))).astype(x.dtype),
    lambda x, out: mul(out, sub(full_like(x, 1), out)), kinds="f")
sin_p = _unary_diff("sin", np.sin, lambda x, out: bind(cos_p, x))           # sin' = cos
cos_p = _unary_diff("cos", np.cos, lambda x, out: neg(bind(sin_p, x)))      # cos' = -sin
sqrt_p = _unary_diff("sqrt", np.sqrt,                                       # 1 / (2 sqrt x)
                     lambda x, out: div(full_like(x, 0.5), out))
square_p = _unary_diff("square", np.square,                                 # (x^2)' = 2x
                       lambda x, out: mul(full_like(x, 2), x), kinds="fic")
rsqrt_p = _unary_diff("rsqrt", lambda x: (1 / np.sqrt(x)).astype(x.dtype),  # -x^-3/2 / 2
                      lambda x, out: mul(full_like(x, -0.5), div(out, x)), kinds="f")
erf_p = _unary_diff(                                                        # 2/sqrt(pi) e^-x^2
    "erf", lambda x: np.vectorize(math.erf, otypes=[x.dtype])(x) if x.size else x.copy(),
    lambda x, out: mul(full_like(x, 2 / math.sqrt(math.pi)), bind(exp_p, neg(mul(x, x)))),
    kinds="f")
def _abs_dir(x, out):
    """d|x|: sign x for reals; for complex z, |z|/z = conj(z)/|z| (0 at z = 0, like JAX)."""
    if dtype_kind(x.dtype) != "c":
        return bind(sign_p, x)
    zero = eq(x, zeros_like(x))
    return select(zero, zeros_like(x), div(convert(out, x.dtype), select(zero, full_like(x, 1), x)))


def _abs_shape(x):
    _same_shape_rule("abs", "fic")(x)
    return ShapedArray(x.shape, real_dtype(x.dtype))


# |x|' = sign x; complex z: d|z| = Re(conj(z) dz) / |z|, transposed: ct conj(z) / |z|
abs_p = _unary("abs", np.abs, kinds="fic",
               vjp=lambda ct, x, *, out: (mul(convert(ct, x.dtype), _abs_dir(x, out)),),
               jvp=lambda ts, xs, *, out: None if ts[0] is None else convert(
                   mul(ts[0], _abs_dir(xs[0], out)), out.dtype))
abs_p.shape = _abs_shape
# piecewise-constant functions: zero derivative
sign_p = _unary("sign", np.sign, kinds="fic", vjp=lambda ct, x, *, out: (None,),
                jvp=lambda ts, xs, *, out: None)
floor_p = _unary("floor", np.floor, kinds="f", vjp=lambda ct, x, *, out: (None,),
                 jvp=lambda ts, xs, *, out: None)
round_p = _unary("round", np.round, kinds="f", vjp=lambda ct, x, *, out: (None,),
                 jvp=lambda ts, xs, *, out: None)
isfinite_p = _unary("isfinite", np.isfinite, kinds="f", out_dtype=np.bool_,
                    vjp=lambda ct, x, *, out: (None,), jvp=lambda ts, xs, *, out: None)
not_p = _unary("not", lambda x: np.logical_not(x) if x.dtype == np.bool_ else np.invert(x),
               kinds="biu", vjp=lambda ct, x, *, out: (None,), jvp=lambda ts, xs, *, out: None)
stop_gradient_p = _unary("stop_gradient", lambda x: x, kinds="fiubc",
                         vjp=lambda ct, x, *, out: (None,), jvp=lambda ts, xs, *, out: None)


# convert_element_type: a float->float cast passes gradients through (cast back)
def _convert_shape(x, *, new_dtype):
    return ShapedArray(x.shape, new_dtype)


def _convert_vjp(ct, x, *, out, new_dtype):
    # real <-> complex casts transpose to each other (complex -> real keeps the real part)
    if _inexact(new_dtype) and _inexact(x.dtype):
        return (convert(ct, x.dtype),)
    return (None,)


def _convert_jvp(ts, xs, *, out, new_dtype):
    if ts[0] is None or not (_inexact(new_dtype) and _inexact(xs[0].dtype)):
        return None
    return convert(ts[0], new_dtype)


def _convert_impl(x, *, new_dtype):
    if x.dtype.kind == "c" and dtype_kind(new_dtype) in "fiu":   # JAX: the real part
        return x.real.astype(new_dtype)
    return x.astype(new_dtype)


convert_element_type_p = defprim(
    "convert_element_type", _convert_shape, _convert_impl, _convert_vjp, _convert_jvp,
    kind="elementwise")
convert_element_type_p.batch = batch_elementwise(convert_element_type_p)


# integer_pow: x ** n for a static Python int n;  d/dx x^n = n x^(n-1)
def _ipow_impl(x, *, y):
    return (np.power(x, y) if y >= 0 or not is_int(x.dtype) else 1 / np.power(x, -y)
            ).astype(x.dtype)


def _ipow_deriv(x, y):
    if y == 0:
        return None
    if y == 1:
        return full_like(x, 1)
    return scalar_mul(x if y == 2 else bind(integer_pow_p, x, y=y - 1), float(y))


integer_pow_p = defprim(
    "integer_pow", lambda x, *, y: _same_shape_rule("integer_pow", "fiuc")(x), _ipow_impl,
    vjp=lambda ct, x, *, out, y: (None if y == 0 else mul(ct, _ipow_deriv(x, y)),),
    jvp=lambda ts, xs, *, out, y: None if ts[0] is None or y == 0 else mul(
        ts[0], _ipow_deriv(xs[0], y)),
    kind="elementwise")
integer_pow_p.batch = batch_elementwise(integer_pow_p)


# ---------------------------------------------------------------------------------------------
# elementwise binary primitives (equal shapes and dtypes)
# ---------------------------------------------------------------------------------------------

def _binary(name, impl, vjp=None, jvp=None, kinds="fiu", out_dtype=None):
    p = defprim(name, _same_shape_rule(name, kinds, out_dtype), impl, vjp, jvp,
                kind="elementwise")
    p.batch = batch_elementwise(p)
    return p


def _nondiff(*_, **__):
    return None


def _nondiff_vjp(n):
    return lambda ct, *xs, out, **p: (None,) * n


add_p = _binary("add", np.add, vjp=lambda ct, x, y, *, out: (ct, ct),        # d(x+y) = dx + dy
                jvp=lambda ts, xs, *, out: add_any(ts[0], ts[1]), kinds="fiuc")
sub_p = _binary("sub", np.subtract, vjp=lambda ct, x, y, *, out: (ct, neg(ct)),
                jvp=lambda ts, xs, *, out: ts[0] if ts[1] is None else
                neg(ts[1]) if ts[0] is None else sub(ts[0], ts[1]), kinds="fiuc")
mul_p = _binary("mul", np.multiply,                                           # d(xy) = y dx + x dy
                vjp=lambda ct, x, y, *, out: (mul(ct, y), mul(x, ct)),
                jvp=lambda ts, xs, *, out: add_any(
                    None if ts[0] is None else mul(ts[0], xs[1]),
                    None if ts[1] is None else mul(xs[0], ts[1])), kinds="fiuc")


def _div_impl(x, y):
    if is_int(x.dtype):  # C-style truncation, like lax.div; exact for 64-bit values too
        with np.errstate(all="ignore"):
            d = np.where(y == 0, 1, y).astype(x.dtype)
            q = np.floor_divide(x, d)
            q = q + ((np.remainder(x, d) != 0) & ((x < 0) != (d < 0))).astype(x.dtype)
        return np.where(y == 0, 0, q).astype(x.dtype)
    return np.divide(x, y)


def _div_vjp(ct, x, y, *, out):     # d(x/y) = dx/y - x dy/y^2
    if is_int(x.dtype):
        return (None, None)
    return div(ct, y), neg(div(mul(ct, out), y))


div_p = _binary("div", _div_impl, vjp=_div_vjp,
                jvp=lambda ts, xs, *, out: None if is_int(out.dtype) else add_any(
                    None if ts[0] is None else div(ts[0], xs[1]),
                    None if ts[1] is None else neg(div(mul(ts[1], out), xs[1]))), kinds="fiuc")


def _rem_impl(x, y):
    if is_int(x.dtype):
        with np.errstate(all="ignore"):
            return np.where(y == 0, 0, np.fmod(x, np.where(y == 0, 1, y))).astype(x.dtype)
    return np.fmod(x, y)


# rem(x, y) = x - y trunc(x / y): d/dx = 1, d/dy = -trunc(x / y)
rem_p = _binary("rem", _rem_impl,
                vjp=lambda ct, x, y, *, out: (None, None) if is_int(x.dtype) else (
                    ct, mul(neg(ct), _trunc(div(x, y)))),
                jvp=lambda ts, xs, *, out: None if is_int(out.dtype) else add_any(
                    ts[0], None if ts[1] is None else mul(neg(ts[1]),
                                                          _trunc(div(xs[0], xs[1])))))


def _trunc(x):
    return mul(bind(sign_p, x), bind(floor_p, bind(abs_p, x)))


def _pow_dx(x, y, out):                                                       # y x^(y-1)
    one = full_like(x, 1)
    return select(eq(y, zeros_like(y)), zeros_like(x), mul(y, bind(pow_p, x, sub(y, one))))


def _pow_dy(x, y, out):                                                       # log(x) x^y
    safe = select(eq(x, zeros_like(x)), full_like(x, 1), x)
    return mul(bind(log_p, safe), out)


pow_p = _binary("pow", np.power, kinds="fc",
                vjp=lambda ct, x, y, *, out: (mul(ct, _pow_dx(x, y, out)),
                                              mul(ct, _pow_dy(x, y, out))),
                jvp=lambda ts, xs, *, out: add_any(
                    None if ts[0] is None else mul(ts[0], _pow_dx(xs[0], xs[1], out)),
                    None if ts[1] is None else mul(ts[1], _pow_dy(xs[0], xs[1], out))))


def _balanced(x, y, out):
    """1 where x alone attains the max/min, 1/2 on ties, else 0 (JAX's convention)."""
    one, half, zero = full_like(x, 1), full_like(x, 0.5), zeros_like(x)
    return select(eq(x, y), half, select(eq(x, out), one, zero))


def _minmax(name, impl):
    def vjp(ct, x, y, *, out):
        if not is_float(x.dtype):
            return (None, None)
        return mul(ct, _balanced(x, y, out)), mul(ct, _balanced(y, x, out))

    def jvp(ts, xs, *, out):
        if not is_float(out.dtype):
            return None
        x, y = xs
        return add_any(None if ts[0] is None else mul(ts[0], _balanced(x, y, out)),
                       None if ts[1] is None else mul(ts[1], _balanced(y, x, out)))
    return _binary(name, impl, vjp=vjp, jvp=jvp, kinds="fiub")


max_p = _minmax("max", np.maximum)
min_p = _minmax("min", np.minimum)


def _cmp(name, impl, kinds="fiub"):
    return _binary(name, impl, vjp=_nondiff_vjp(2), jvp=_nondiff, kinds=kinds,
                   out_dtype=np.bool_)


eq_p = _cmp("eq", np.equal, "fiubc")
ne_p = _cmp("ne", np.not_equal, "fiubc")
lt_p = _cmp("lt", np.less)
le_p = _cmp("le", np.less_equal)
gt_p = _cmp("gt", np.greater)
ge_p = _cmp("ge", np.greater_equal)
and_p = _binary("and", np.bitwise_and, vjp=_nondiff_vjp(2), jvp=_nondiff, kinds="biu")
or_p = _binary("or", np.bitwise_or, vjp=_nondiff_vjp(2), jvp=_nondiff, kinds="biu")
xor_p = _binary("xor", np.bitwise_xor, vjp=_nondiff_vjp(2), jvp=_nondiff, kinds="biu")


def _shift_impl(op):
    def impl(x, y):
        bits = x.dtype.itemsize * 8
        big = (y < 0) | (y >= bits)
        out = op(x, np.where(big, 0, y).astype(x.dtype))
        return np.where(big, 0, out).astype(x.dtype)  # lax semantics: shifts >= width give 0
    return impl


shift_left_p = _binary("shift_left", _shift_impl(np.left_shift), vjp=_nondiff_vjp(2),
                       jvp=_nondiff, kinds="iu")
shift_right_logical_p = _binary(
    "shift_right_logical",
    _shift_impl(lambda x, y: (x.view(np.dtype(f"u{x.dtype.itemsize}")) >> y.view(
        np.dtype(f"u{x.dtype.itemsize}"))).view(x.dtype)),
    vjp=_nondiff_vjp(2), jvp=_nondiff, kinds="iu")


# select(pred, on_true, on_false): the gradient goes to the branch that was taken
def _select_shape(pred, x, y):
    if pred.dtype != np.bool_:
        raise type_error("select", f"predicate must be bool, got {pred.dtype.name}", (pred, x, y))
    if not (pred.shape == x.shape == y.shape) or x.dtype != y.dtype:
        raise type_error("select", "operands must have equal shapes and branch dtypes",
                         (pred, x, y))
    return ShapedArray(x.shape, x.dtype)


def _select_vjp(ct, pred, x, y, *, out):
    z = zeros_like(ct)
    return None, select(pred, ct, z), select(pred, z, ct)


def _select_jvp(ts, xs, *, out):
    if ts[1] is None and ts[2] is None:
        return None
    pred, x, y = xs
    tx = ts[1] if ts[1] is not None else zeros_like(x)
    ty = ts[2] if ts[2] is not None else zeros_like(y)
    return select(pred, tx, ty)


def _select_impl(p, x, y):
    # np.where mispredicts a branch per element on random masks (~4 ns each); large numeric
    # selects blend bit patterns instead, out = y ^ ((x ^ y) & -p), exact for every value
    x, y = np.asarray(x), np.asarray(y)
    shape = np.broadcast_shapes(np.shape(p), x.shape, y.shape)
    if (math.prod(shape) < 8192 or x.dtype != y.dtype or dtype_kind(x.dtype) not in "fiu"
            or x.dtype.itemsize not in (4, 8)):
        return np.where(p, x, y)
    u = np.dtype(f"u{x.dtype.itemsize}")
    m = np.asarray(p).astype(u)
    np.negative(m, out=m)
    xi, yi = x.view(u), y.view(u)
    if yi.ndim == 0 and yi == 0 and m.shape == shape:   # where(p, x, +0): relu and its vjp
        return np.bitwise_and(m, xi, out=m).view(x.dtype)
    out = np.bitwise_xor(xi, yi)
    out = np.bitwise_and(out, m, out=out) if out.shape == m.shape else np.bitwise_and(out, m)
    np.bitwise_xor(out, yi, out=out)
    return out.view(x.dtype)


select_p = defprim("select", _select_shape, _select_impl,
                   _select_vjp, _select_jvp, kind="elementwise")
select_p.batch = batch_elementwise(select_p)


# ---------------------------------------------------------------------------------------------
# shape primitives
# ---------------------------------------------------------------------------------------------

def _bid_shape(x, *, shape, broadcast_dimensions):
    bd = broadcast_dimensions
    ok = (len(bd) == x.ndim and all(0 <= d < len(shape) for d in bd)
          and all(b > a for a, b in zip(bd, bd[1:]))
          and all(x.shape[i] in (1, shape[d]) for i, d in enumerate(bd)))
    if not ok:
        raise type_error("broadcast_in_dim", f"cannot broadcast to shape {tuple(shape)} with "
                         f"broadcast_dimensions={tuple(bd)}", (x,))
    return ShapedArray(shape, x.dtype)


def _bid_impl(x, *, shape, broadcast_dimensions):
    expanded = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        expanded[d] = x.shape[i]
    return np.broadcast_to(np.reshape(x, expanded), shape)


def _bid_vjp(ct, x, *, out, shape, broadcast_dimensions):
    # the transpose of a broadcast is a sum over the broadcast axes
    bd = broadcast_dimensions
    summed = tuple(d for d in range(len(shape)) if d not in bd) + tuple(
        d for i, d in enumerate(bd) if x.shape[i] == 1 and shape[d] != 1)
    r = reduce_sum(ct, sorted(summed)) if summed else ct
    return (reshape(r, x.shape) if tuple(r.shape) != tuple(x.shape) else r,)


def _bid_batch(args, dims, *, shape, broadcast_dimensions):
    (x,) = args
    return broadcast_in_dim(x, (x.shape[0],) + tuple(shape),
                            (0,) + tuple(b + 1 for b in broadcast_dimensions)), 0


broadcast_in_dim_p = defprim("broadcast_in_dim", _bid_shape, _bid_impl, _bid_vjp,
                             _linear_unary_jvp(None), _bid_batch)
broadcast_in_dim_p.jvp = _linear_unary_jvp(broadcast_in_dim_p)


def _reshape_shape(x, *, new_sizes):
    if math.prod(new_sizes) != x.size or any(s < 0 for s in new_sizes):
        raise type_error("reshape", f"cannot reshape to {tuple(new_sizes)}", (x,))
    return ShapedArray(new_sizes, x.dtype)


reshape_p = defprim(
    "reshape", _reshape_shape, lambda x, *, new_sizes: np.reshape(x, new_sizes),
    vjp=lambda ct, x, *, out, new_sizes: (reshape(ct, x.shape),),
    batch=lambda args, dims, *, new_sizes: (reshape(args[0], (args[0].shape[0],)
                                                    + tuple(new_sizes)), 0))
reshape_p.jvp = _linear_unary_jvp(reshape_p)


def _transpose_shape(x, *, permutation):
    if sorted(permutation) != list(range(x.ndim)):
        raise type_error("transpose", f"permutation {tuple(permutation)} is not a permutation "
                         f"of the {x.ndim} axes", (x,))
    return ShapedArray([x.shape[p] for p in permutation], x.dtype)


transpose_p = defprim(
    "transpose", _transpose_shape, lambda x, *, permutation: np.transpose(x, permutation),
    vjp=lambda ct, x, *, out, permutation: (transpose(ct, np.argsort(permutation).tolist()),),
    batch=lambda args, dims, *, permutation: (
        transpose(args[0], (0,) + tuple(p + 1 for p in permutation)), 0))
transpose_p.jvp = _linear_unary_jvp(transpose_p)


# ---------------------------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------------------------

def _check_axes(name, x, axes):
    if len(set(axes)) != len(axes) or any(not 0 <= a < x.ndim for a in axes):
        raise type_error(name, f"invalid axes {tuple(axes)} for a rank-{x.ndim} operand", (x,))


def _reduce_shape(name, kinds):
    def rule(x, *, axes):
        _check_axes(name, x, axes)
        _dtype_ok(name, (x,), kinds)
        return ShapedArray([s for i, s in enumerate(x.shape) if i not in axes], x.dtype)
    return rule


def _kept(x, axes):
    return [i for i in range(len(x.shape)) if i not in axes]


def _reduce_batch(prim):
    return lambda args, dims, *, axes: (bind(prim, args[0], axes=tuple(a + 1 for a in axes)), 0)


def _expand(ct, x, axes):
    """Broadcast a reduction's output back to the operand's shape."""
    return broadcast_in_dim(ct, x.shape, _kept(x, axes))


def _reduce_sum_impl(x, *, axes):
    # float16/bfloat16 accumulate in float32 and round once (jnp.sum's upcast, XLA's sums)
    return np.sum(x, axis=tuple(axes), dtype=compute_dtype(x.dtype)).astype(x.dtype, copy=False)


reduce_sum_p = defprim(
    "reduce_sum", _reduce_shape("reduce_sum", "fiuc"), _reduce_sum_impl,
    vjp=lambda ct, x, *, out, axes: (_expand(ct, x, axes),),                 # sum' = broadcast
    batch=None)
reduce_sum_p.jvp = _linear_unary_jvp(reduce_sum_p)
reduce_sum_p.batch = _reduce_batch(reduce_sum_p)


def _chooser_grad(x, out, axes):
    """Where x attains the max/min, weighted 1/count (ties share the gradient, like JAX)."""
    loc = convert(eq(x, _expand(out, x, axes)), x.dtype)
    return div(loc, _expand(reduce_sum(loc, axes), x, axes))


def _chooser(name, impl):
    def vjp(ct, x, *, out, axes):
        if not is_float(x.dtype):
            return (None,)
        return (mul(_expand(ct, x, axes), _chooser_grad(x, out, axes)),)

    def jvp(ts, xs, *, out, axes):
        if ts[0] is None or not is_float(out.dtype):
            return None
        return reduce_sum(mul(ts[0], _chooser_grad(xs[0], out, axes)), axes)

    def checked_impl(x, *, axes):
        if x.size == 0 and any(x.shape[a] == 0 for a in axes):
            raise ValueError(f"{name}: zero-size reduction over axes {tuple(axes)} of an array "
                             f"of shape {x.shape} has no identity")
        return impl(x, axis=tuple(axes))
    p = defprim(name, _reduce_shape(name, "fiub"), checked_impl, vjp, jvp)
    p.batch = _reduce_batch(p)
    return p


reduce_max_p = _chooser("reduce_max", np.max)
reduce_min_p = _chooser("reduce_min", np.min)


def _prod_vjp(ct, x, *, out, axes):
    # d prod / dx_i = product of the others; exact with zeros (one zero: its slot gets the rest)
    if not _inexact(x.dtype):
        return (None,)
    zero = eq(x, zeros_like(x))
    one = full_like(x, 1)
    safe = select(zero, one, x)
    nz = _expand(bind(reduce_prod_p, safe, axes=axes), x, axes)
    nzeros = _expand(reduce_sum(convert(zero, x.dtype), axes), x, axes)
    z = zeros_like(x)
    g = select(zero, select(eq(nzeros, one), nz, z),
               select(eq(nzeros, z), div(nz, safe), z))
    return (mul(_expand(ct, x, axes), g),)


reduce_prod_p = defprim(
    "reduce_prod", _reduce_shape("reduce_prod", "fiuc"),
    lambda x, *, axes: np.prod(x, axis=tuple(axes), dtype=compute_dtype(x.dtype)).astype(
        x.dtype, copy=False), _prod_vjp,
    lambda ts, xs, *, out, axes: None if ts[0] is None else reduce_sum(
        mul(ts[0], _prod_vjp(full_like(out, 1), xs[0], out=out, axes=axes)[0]), axes))
reduce_prod_p.batch = _reduce_batch(reduce_prod_p)


def _arg_shape(name):
    def rule(x, *, axis, index_dtype):
        _check_axes(name, x, (axis,))
        return ShapedArray(x.shape[:axis] + x.shape[axis + 1:], index_dtype)
    return rule


def _arg_impl(fn, name):
    def impl(x, *, axis, index_dtype):
        if x.shape[axis] == 0:
            raise ValueError(f"{name}: attempt to get {name} of an empty sequence "
                             f"(axis {axis} of shape {x.shape})")
        return fn(x, axis=axis).astype(index_dtype)
    return impl


def _arg_prim(name, fn):
    p = defprim(name, _arg_shape(name), _arg_impl(fn, name), _nondiff_vjp(1), _nondiff)
    p.batch = lambda args, dims, *, axis, index_dtype: (
        bind(p, args[0], axis=axis + 1, index_dtype=index_dtype), 0)
    return p


argmax_p = _arg_prim("argmax", np.argmax)
argmin_p = _arg_prim("argmin", np.argmin)


# ---------------------------------------------------------------------------------------------
# slicing, padding, concatenation, reversal, iota
# ---------------------------------------------------------------------------------------------

def _slice_shape(x, *, start_indices, limit_indices, strides):
    ok = len(start_indices) == len(limit_indices) == len(strides) == x.ndim and all(
        0 <= s <= e <= n and st >= 1
        for s, e, st, n in zip(start_indices, limit_indices, strides, x.shape))
    if not ok:
        raise type_error("slice", f"invalid slice start={start_indices} limit={limit_indices} "
                         f"strides={strides}", (x,))
    return ShapedArray([-(-(e - s) // st) for s, e, st in
                        zip(start_indices, limit_indices, strides)], x.dtype)


def _slice_impl(x, *, start_indices, limit_indices, strides):
    return x[tuple(slice(s, e, st) for s, e, st in zip(start_indices, limit_indices, strides))]


def _slice_vjp(ct, x, *, out, start_indices, limit_indices, strides):
    # the transpose of a slice pads the cotangent back with zeros
    config = []
    for s, st, n, m in zip(start_indices, strides, x.shape, out.shape):
        used = s + (m - 1) * st + 1 if m > 0 else s
        config.append((s, n - used, st - 1 if m > 0 else 0))
    return (bind(pad_p, ct, padding_config=tuple(config), value=0.0),)


def _slice_batch(args, dims, *, start_indices, limit_indices, strides):
    x = args[0]
    return bind(slice_p, x, start_indices=(0,) + tuple(start_indices),
                limit_indices=(x.shape[0],) + tuple(limit_indices),
                strides=(1,) + tuple(strides)), 0


slice_p = defprim("slice", _slice_shape, _slice_impl, _slice_vjp, batch=_slice_batch)
slice_p.jvp = _linear_unary_jvp(slice_p)


def _pad_shape(x, *, padding_config, value):
    if len(padding_config) != x.ndim or any(lo < 0 or hi < 0 or it < 0
                                            for lo, hi, it in padding_config):
        raise type_error("pad", f"invalid padding_config {padding_config}", (x,))
    return ShapedArray([lo + hi + n + max(n - 1, 0) * it
                        for (lo, hi, it), n in zip(padding_config, x.shape)], x.dtype)


def _pad_impl(x, *, padding_config, value):
    out = np.full(_pad_shape(ShapedArray(x.shape, x.dtype), padding_config=padding_config,
                             value=value).shape, value, dtype=x.dtype)
    idx = tuple(slice(lo, lo + max(n - 1, 0) * (it + 1) + 1 if n else lo, it + 1)
                for (lo, hi, it), n in zip(padding_config, x.shape))
    out[idx] = x
    return out


def _pad_vjp(ct, x, *, out, padding_config, value):
    # the transpose of padding slices the operand's positions back out
    starts = [lo for lo, _, _ in padding_config]
    limits = [lo + max(n - 1, 0) * (it + 1) + 1 if n else lo
              for (lo, _, it), n in zip(padding_config, x.shape)]
    strides = [it + 1 for _, _, it in padding_config]
    return (bind(slice_p, ct, start_indices=tuple(starts), limit_indices=tuple(limits),
                 strides=tuple(strides)),)


pad_p = defprim("pad", _pad_shape, _pad_impl, _pad_vjp,
                batch=lambda args, dims, *, padding_config, value: (bind(
                    pad_p, args[0], padding_config=((0, 0, 0),) + tuple(padding_config),
                    value=value), 0))
pad_p.jvp = lambda ts, xs, *, out, padding_config, value: None if ts[0] is None else bind(
    pad_p, ts[0], padding_config=padding_config, value=0.0)


def _concat_shape(*xs, dimension):
    x0 = xs[0]
    ok = 0 <= dimension < x0.ndim and all(
        x.ndim == x0.ndim and x.dtype == x0.dtype and all(
            a == b for i, (a, b) in enumerate(zip(x.shape, x0.shape)) if i != dimension)
        for x in xs)
    if not ok:
        raise type_error("concatenate", f"operands must agree except along axis {dimension}", xs)
    shape = list(x0.shape)
    shape[dimension] = sum(x.shape[dimension] for x in xs)
    return ShapedArray(shape, x0.dtype)


def _concat_vjp(ct, *xs, out, dimension):
    res, start = [], 0
    for x in xs:
        lo = [0] * len(out.shape)
        hi = list(out.shape)
        lo[dimension], hi[dimension] = start, start + x.shape[dimension]
        start += x.shape[dimension]
        res.append(bind(slice_p, ct, start_indices=tuple(lo), limit_indices=tuple(hi),
                        strides=(1,) * len(lo)))
    return tuple(res)


def _concat_jvp(ts, xs, *, out, dimension):
    if all(t is None for t in ts):
        return None
    ts = [zeros_like(x) if t is None else t for t, x in zip(ts, xs)]
    return bind(concatenate_p, *ts, dimension=dimension)


def _concat_batch(args, dims, *, dimension):
    size = _batch_size(args, dims)
    return bind(concatenate_p, *[_bcast_batched(a, d, size) for a, d in zip(args, dims)],
                dimension=dimension + 1), 0


concatenate_p = defprim("concatenate", _concat_shape,
                        lambda *xs, dimension: np.concatenate(xs, axis=dimension),
                        _concat_vjp, _concat_jvp, _concat_batch)


def _rev_shape(x, *, dimensions):
    _check_axes("rev", x, dimensions)
    return x


rev_p = defprim("rev", _rev_shape, lambda x, *, dimensions: np.flip(x, dimensions),
                vjp=lambda ct, x, *, out, dimensions: (bind(rev_p, ct, dimensions=dimensions),),
                batch=lambda args, dims, *, dimensions: (bind(
                    rev_p, args[0], dimensions=tuple(d + 1 for d in dimensions)), 0))
rev_p.jvp = _linear_unary_jvp(rev_p)


def _iota_shape(*, dtype, shape, dimension):
    if not 0 <= dimension < len(shape):
        raise type_error("iota", f"dimension {dimension} out of range for shape {shape}")
    return ShapedArray(shape, dtype)


def _iota_impl(*, dtype, shape, dimension):
    r = np.arange(shape[dimension], dtype=dtype).reshape(
        [-1 if i == dimension else 1 for i in range(len(shape))])
    return np.broadcast_to(r, shape)


iota_p = defprim("iota", _iota_shape, _iota_impl, lambda ct, *, out, **p: (), _nondiff,
                 batch=lambda args, dims, **p: (bind(iota_p, **p), None))


# ---------------------------------------------------------------------------------------------
# gather / scatter along one axis (integer indices; out-of-range raises, never clamps)
# ---------------------------------------------------------------------------------------------

class IndexOutOfRange(IndexError):
    """An integer index outside [-n, n) reached take/scatter."""


def _norm_index(name, idx, n):
    bad = (idx < -n) | (idx >= n)
    if np.any(bad):
        first = idx[bad].flat[0]
        raise IndexOutOfRange(f"{name}: index {first} is out of bounds for an axis of size {n} "
                              f"({int(np.sum(bad))} of {idx.size} indices out of range)")
    return np.where(idx < 0, idx + n, idx)


def _take_shape(x, idx, *, axis):
    if not is_int(idx.dtype):
        raise type_error("take", f"indices must be integers, got {idx.dtype.name}", (x, idx))
    if not 0 <= axis < x.ndim:
        raise type_error("take", f"axis {axis} out of range", (x, idx))
    return ShapedArray(x.shape[:axis] + idx.shape + x.shape[axis + 1:], x.dtype)


def _take_impl(x, idx, *, axis):
    return np.take(x, _norm_index("take", idx, x.shape[axis]), axis=axis)


def _take_batch(args, dims, *, axis):
    x, idx = args
    dx, di = dims
    if di is None:
        return bind(take_p, x, idx, axis=axis + 1), 0
    if dx is None:
        return bind(take_p, x, idx, axis=axis), axis
    # both batched: fold the batch into the indexed axis and offset the indices
    xf, idxf, pre = _fold_batch(x, idx, axis)
    return bind(take_p, xf, idxf, axis=pre), pre


def _fold_batch(x, idx, axis):
    """x (B, *pre, n, *post) -> (*pre, B*n, *post); idx (B, ...) -> flat indices into it."""
    size, n = x.shape[0], x.shape[axis + 1]
    nd = len(x.shape)
    perm = list(range(1, axis + 1)) + [0] + list(range(axis + 1, nd))
    xt = transpose(x, perm)
    xf = reshape(xt, xt.shape[:axis] + (size * n,) + xt.shape[axis + 2:])
    ishape = tuple(idx.shape)
    dt = idx.dtype
    nn = full_like(idx, n)
    bad = bind(or_p, bind(lt_p, idx, neg(nn)), bind(ge_p, idx, nn))
    pos = select(bind(lt_p, idx, zeros_like(idx)), add(idx, nn), idx)
    offs = mul(bind(iota_p, dtype=dt, shape=ishape, dimension=0), nn)
    # an out-of-range index stays out of range after folding (so it is still reported)
    idxf = select(bad, full_like(idx, -(size * n) - 1), add(pos, offs))
    return xf, idxf, axis


def _take_vjp(ct, x, idx, *, out, axis):
    # the transpose of a gather is a scatter-add of the cotangent
    return bind(scatter_add_p, zeros_like(x), idx, ct, axis=axis), None


take_p = defprim("take", _take_shape, _take_impl, _take_vjp,
                 lambda ts, xs, *, out, axis: None if ts[0] is None else bind(
                     take_p, ts[0], xs[1], axis=axis), _take_batch)


def _scatter_shape(name):
    def rule(x, idx, upd, *, axis):
        want = _take_shape(x, idx, axis=axis)
        if upd.shape != want.shape or upd.dtype != x.dtype:
            raise type_error(name, f"updates must be {want.str_short()}", (x, idx, upd))
        return x
    return rule


def _scatter_impl(add_mode):
    def impl(x, idx, upd, *, axis):
        i = _norm_index("scatter_add" if add_mode else "scatter", idx, x.shape[axis])
        out = np.array(x, copy=True)
        moved = np.moveaxis(out, axis, 0)
        u = np.moveaxis(upd.reshape(x.shape[:axis] + (idx.size,) + x.shape[axis + 1:]), axis, 0)
        if add_mode:
            np.add.at(moved, i.reshape(-1), u)
        else:
            moved[i.reshape(-1)] = u
        return out
    return impl


def _scatter_batch(prim):
    def rule(args, dims, *, axis):
        size = _batch_size(args, dims)
        x, idx, upd = [_bcast_batched(a, d, size) for a, d in zip(args, dims)]
        xf, idxf, pre = _fold_batch(x, idx, axis)
        nd_idx = len(idx.shape) - 1
        perm = list(range(1, axis + 1)) + [0] + list(range(axis + 1, len(upd.shape)))
        updt = transpose(upd, perm)
        updf = reshape(updt, updt.shape[:pre] + (size * _prod(idx.shape[1:]),)
                       + updt.shape[pre + 1 + nd_idx:])
        idxf = reshape(idxf, (size * _prod(idx.shape[1:]),))
        out = bind(prim, xf, idxf, updf, axis=pre)
        return reshape(out, x.shape[1:axis + 1] + (size,) + x.shape[axis + 1:]), pre
    return rule


def _prod(shape):
    return math.prod(shape)


scatter_add_p = defprim(
    "scatter_add", _scatter_shape("scatter_add"), _scatter_impl(True),
    vjp=lambda ct, x, idx, upd, *, out, axis: (ct, None, bind(take_p, ct, idx, axis=axis)),
    jvp=lambda ts, xs, *, out, axis: None if ts[0] is None and ts[2] is None else bind(
        scatter_add_p, ts[0] if ts[0] is not None else zeros_like(xs[0]), xs[1],
        ts[2] if ts[2] is not None else zeros_like(xs[2]), axis=axis))
scatter_add_p.batch = _scatter_batch(scatter_add_p)

# scatter (set): with duplicate indices one of the updates wins (unspecified which, like JAX)
scatter_p = defprim(
    "scatter", _scatter_shape("scatter"), _scatter_impl(False),
    vjp=lambda ct, x, idx, upd, *, out, axis: (
        bind(scatter_p, ct, idx, zeros_like(upd), axis=axis), None,
        bind(take_p, ct, idx, axis=axis)),
    jvp=lambda ts, xs, *, out, axis: None if ts[0] is None and ts[2] is None else bind(
        scatter_p, ts[0] if ts[0] is not None else zeros_like(xs[0]), xs[1],
        ts[2] if ts[2] is not None else zeros_like(xs[2]), axis=axis))
scatter_p.batch = _scatter_batch(scatter_p)


# ---------------------------------------------------------------------------------------------
# dynamic slicing: a static-size window at traced start indices (XLA's DynamicSlice and
# DynamicUpdateSlice: each start is clamped into [0, n - m] so that the window fits; the lax
# functions wrap negative starts first, as JAX does)
# ---------------------------------------------------------------------------------------------

def _dyn_check(name, x, starts, sizes, avals):
    if len(starts) != x.ndim:
        raise type_error(name, f"needs one start index per operand axis ({x.ndim}), got "
                         f"{len(starts)}", avals)
    if any(s.ndim != 0 or not is_int(s.dtype) for s in starts):
        raise type_error(name, "start indices must be integer scalars", avals)
    if len(sizes) != x.ndim or any(not 0 <= m <= n for m, n in zip(sizes, x.shape)):
        raise type_error(name, f"window {tuple(sizes)} does not fit in the operand "
                         f"{x.str_short()}", avals)


def clamped_starts(starts, shape, sizes) -> tuple:
    """Concrete start indices clamped so that a window of `sizes` fits in `shape`."""
    return tuple(min(max(int(s), 0), n - m) for s, n, m in zip(starts, shape, sizes))


def _window(starts, shape, sizes):
    return tuple(slice(s, s + m) for s, m in zip(clamped_starts(starts, shape, sizes), sizes))


def _ds_shape(x, *starts, slice_sizes):
    _dyn_check("dynamic_slice", x, starts, slice_sizes, (x,) + starts)
    return ShapedArray(tuple(slice_sizes), x.dtype)


def _ds_impl(x, *starts, slice_sizes):
    return np.array(x[_window(starts, x.shape, slice_sizes)])


def _dus_shape(x, upd, *starts):
    avals = (x, upd) + starts
    if upd.dtype != x.dtype:
        raise type_error("dynamic_update_slice", "the update must have the operand's dtype",
                         avals)
    if upd.ndim != x.ndim:
        raise type_error("dynamic_update_slice", "the update must have the operand's rank",
                         avals)
    _dyn_check("dynamic_update_slice", x, starts, upd.shape, avals)
    return x


def _dus_impl(x, upd, *starts):
    out = np.array(x, copy=True)
    out[_window(starts, x.shape, upd.shape)] = upd
    return out


def _flat_window(shape, sizes, starts, size):
    """Flat positions in a (size, *shape) array of each batch row's window (a batch of start
    vectors, each start [size]): int [size, *sizes], every window clamped into range."""
    total = size * math.prod(shape)
    dt = np.dtype(np.int32 if total < 2 ** 31 else np.int64)
    full_shape = (size,) + tuple(sizes)
    flat = mul(bind(iota_p, dtype=dt, shape=full_shape, dimension=0),
               full(full_shape, math.prod(shape), dt))
    stride = 1
    for d in reversed(range(len(shape))):
        s = starts[d]
        s = bind(min_p, bind(max_p, s, full_like(s, 0)), full_like(s, shape[d] - sizes[d]))
        pos = add(broadcast_in_dim(convert(s, dt), full_shape, (0,)),
                  bind(iota_p, dtype=dt, shape=full_shape, dimension=d + 1))
        flat = add(flat, mul(pos, full(full_shape, stride, dt)) if stride != 1 else pos)
        stride *= shape[d]
    return flat


def _dyn_batch_starts(args, dims, size):
    """The start operands, each a [size] vector (broadcast when unbatched)."""
    return [_bcast_batched(s, d, size) for s, d in zip(args, dims)]


def _ds_batch(args, dims, *, slice_sizes):
    x, starts = args[0], args[1:]
    size = _batch_size(args, dims)
    if all(d is None for d in dims[1:]):   # one window for every batch row
        return bind(dynamic_slice_p, x, np.int32(0), *starts,
                    slice_sizes=(size,) + tuple(slice_sizes)), 0
    x = _bcast_batched(x, dims[0], size)
    flat = _flat_window(x.shape[1:], slice_sizes, _dyn_batch_starts(starts, dims[1:], size),
                        size)
    return bind(take_p, reshape(x, (x.size,)), flat, axis=0), 0


def _dus_batch(args, dims):
    x, upd, starts = args[0], args[1], args[2:]
    size = _batch_size(args, dims)
    x, upd = _bcast_batched(x, dims[0], size), _bcast_batched(upd, dims[1], size)
    if all(d is None for d in dims[2:]):   # one window for every batch row
        return bind(dynamic_update_slice_p, x, upd, np.int32(0), *starts), 0
    # a window per batch row: a scatter into the flattened operand
    flat = _flat_window(x.shape[1:], upd.shape[1:], _dyn_batch_starts(starts, dims[2:], size),
                        size)
    out = bind(scatter_p, reshape(x, (x.size,)), reshape(flat, (flat.size,)),
               reshape(upd, (upd.size,)), axis=0)
    return reshape(out, x.shape), 0


# dynamic_slice(x, *starts)' = the same window of the tangent; its transpose writes the
# cotangent into zeros at the window
dynamic_slice_p = defprim(
    "dynamic_slice", _ds_shape, _ds_impl,
    vjp=lambda ct, x, *starts, out, slice_sizes: (
        bind(dynamic_update_slice_p, zeros_like(x), ct, *starts),) + (None,) * len(starts),
    jvp=lambda ts, xs, *, out, slice_sizes: None if ts[0] is None else bind(
        dynamic_slice_p, ts[0], *xs[1:], slice_sizes=slice_sizes),
    batch=_ds_batch)


# dynamic_update_slice(x, u, *starts): the operand's cotangent is ct with the window zeroed,
# the update's the window of ct
def _dus_vjp(ct, x, upd, *starts, out):
    return (bind(dynamic_update_slice_p, ct, zeros_like(upd), *starts),
            bind(dynamic_slice_p, ct, *starts, slice_sizes=tuple(upd.shape))) + (
        None,) * len(starts)


def _dus_jvp(ts, xs, *, out):
    if ts[0] is None and ts[1] is None:
        return None
    tx = ts[0] if ts[0] is not None else zeros_like(xs[0])
    tu = ts[1] if ts[1] is not None else zeros_like(xs[1])
    return bind(dynamic_update_slice_p, tx, tu, *xs[2:])


dynamic_update_slice_p = defprim("dynamic_update_slice", _dus_shape, _dus_impl, _dus_vjp,
                                 _dus_jvp, _dus_batch)


# ---------------------------------------------------------------------------------------------
# dot_general: contractions with batch dimensions
# ---------------------------------------------------------------------------------------------

def _dot_dims(x, y, dimension_numbers):
    (lc, rc), (lb, rb) = dimension_numbers
    lf = [i for i in range(x.ndim) if i not in lc and i not in lb]
    rf = [i for i in range(y.ndim) if i not in rc and i not in rb]
    return lc, rc, lb, rb, lf, rf


def _dot_shape(x, y, *, dimension_numbers, precision=None):
    lc, rc, lb, rb, lf, rf = _dot_dims(x, y, dimension_numbers)
    ok = (len(lc) == len(rc) and len(lb) == len(rb)
          and all(0 <= a < x.ndim for a in lc + lb) and all(0 <= a < y.ndim for a in rc + rb)
          and len(set(lc + lb)) == len(lc + lb) and len(set(rc + rb)) == len(rc + rb)
          and all(x.shape[a] == y.shape[b] for a, b in zip(lc, rc))
          and all(x.shape[a] == y.shape[b] for a, b in zip(lb, rb)))
    if not ok:
        raise type_error("dot_general", f"incompatible contraction "
                         f"{dimension_numbers}", (x, y))
    if x.dtype != y.dtype:
        raise type_error("dot_general", "operands must have equal dtypes", (x, y))
    _dtype_ok("dot_general", (x,), "fiuc")
    return ShapedArray([x.shape[i] for i in lb] + [x.shape[i] for i in lf]
                       + [y.shape[i] for i in rf], x.dtype)


def _as_matrix(a, contract, contract_first: bool):
    """a as a 2-D (k, rest) or (rest, k) matrix when its contracting dims are a leading or
    trailing run in order (a reshape, so a view when a is contiguous), else None."""
    nc, nd = len(contract), a.ndim
    k = math.prod(a.shape[i] for i in contract)
    rest = math.prod(a.shape[i] for i in range(nd) if i not in contract)
    if k and tuple(contract) == tuple(range(nc)):
        m = a.reshape(k, rest)
        return m if contract_first else m.T
    if k and tuple(contract) == tuple(range(nd - nc, nd)):
        m = a.reshape(rest, k)
        return m.T if contract_first else m
    return None


def _dot_impl(x, y, *, dimension_numbers, precision=None):
    # numpy computes in the operands' dtype: `precision` changes nothing on the CPU. float16 and
    # bfloat16 products accumulate in float32 (BLAS) and round once, as XLA's CPU dots do
    if is_half(x.dtype):
        return _dot_impl(x.astype(np.float32), y.astype(np.float32),
                         dimension_numbers=dimension_numbers).astype(x.dtype)
    (lc, rc), (lb, _) = dimension_numbers
    if not lb and lc:   # contractions over leading/trailing runs: one matmul of reshaped views
        xm, ym = _as_matrix(x, lc, False), _as_matrix(y, rc, True)
        if xm is not None and ym is not None:
            free = [d for i, d in enumerate(x.shape) if i not in lc] + [
                d for i, d in enumerate(y.shape) if i not in rc]
            return np.matmul(xm, ym).reshape(free)
    # as one batched matmul: x -> [batch, free, contract], y -> [batch, contract, free]
    lc, rc, lb, rb, lf, rf = _dot_dims(x, y, dimension_numbers)
    bs = [x.shape[i] for i in lb]
    m = math.prod(x.shape[i] for i in lf)
    k = math.prod(x.shape[i] for i in lc)
    n = math.prod(y.shape[i] for i in rf)
    xt = np.transpose(x, list(lb) + lf + list(lc)).reshape(bs + [m, k])
    yt = np.transpose(y, list(rb) + list(rc) + rf).reshape(bs + [k, n])
    out = np.matmul(xt, yt) if k else np.zeros(bs + [m, n], x.dtype)
    return out.reshape(bs + [x.shape[i] for i in lf] + [y.shape[i] for i in rf]).astype(
        x.dtype, copy=False)


def dot_general(x, y, dimension_numbers, precision=None):
    """bind dot_general; precision None/"default" takes config's "default_matmul_precision"
    now (at trace time), so the param says what the product computes."""
    (lc, rc), (lb, rb) = dimension_numbers
    dn = ((tuple(lc), tuple(rc)), (tuple(lb), tuple(rb)))
    p = canonical_precision(precision)
    if p is None:
        p = config.default_matmul_precision
    return bind(dot_general_p, x, y, dimension_numbers=dn, precision=p)


def _dot_vjp(ct, x, y, *, out, dimension_numbers, precision=None):
    # ct_x = ct . y over y's free axes, then permuted back into x's axis order (same for y)
    lc, rc, lb, rb, lf, rf = _dot_dims(x, y, dimension_numbers)
    if not _inexact(x.dtype):
        return None, None
    nb = len(lb)
    ct_b = tuple(range(nb))
    ct_xf = tuple(range(nb, nb + len(lf)))
    ct_yf = tuple(range(nb + len(lf), nb + len(lf) + len(rf)))
    ct_x = _dot_ct(ct, y, (ct_yf, tuple(rf)), ct_b, tuple(rb), list(lb), lf,
                   [lc[j] for j in np.argsort(rc, kind="stable")], precision)
    ct_y = _dot_ct(ct, x, (ct_xf, tuple(lf)), ct_b, tuple(lb), list(rb), rf,
                   [rc[j] for j in np.argsort(lc, kind="stable")], precision)
    return ct_x, ct_y


def _dot_ct(ct, other, contract, ct_b, other_b, batch, free, rest, precision):
    """One operand's cotangent: ct . other over `contract`, in the operand's axis order.

    The product's axes come out as batch + free + rest (ct first) or batch + rest + free
    (other first); the order that needs no transpose is taken (a weight gradient x^T ct comes
    out as [K, N] directly, not as [N, K] read through a strided view)."""
    order = batch + free + rest
    if order == sorted(order) or batch + rest + free != sorted(order):
        r = dot_general(ct, other, (contract, (ct_b, other_b)), precision)
    else:
        r = dot_general(other, ct, ((contract[1], contract[0]), (other_b, ct_b)), precision)
        order = batch + rest + free
    return transpose(r, [order.index(i) for i in range(len(order))])


def _dot_jvp(ts, xs, *, out, dimension_numbers, precision=None):
    if not _inexact(out.dtype):
        return None
    x, y = xs
    kw = dict(dimension_numbers=dimension_numbers, precision=precision)
    return add_any(None if ts[0] is None else bind(dot_general_p, ts[0], y, **kw),
                   None if ts[1] is None else bind(dot_general_p, x, ts[1], **kw))


def _dot_batch(args, dims, *, dimension_numbers, precision=None):
    x, y = args
    dx, dy = dims
    (lc, rc), (lb, rb) = dimension_numbers
    sh = lambda t: tuple(a + 1 for a in t)
    if dx is not None and dy is not None:
        return dot_general(x, y, ((sh(lc), sh(rc)), ((0,) + sh(lb), (0,) + sh(rb))),
                           precision), 0
    if dx is not None:  # x's batch axis becomes its first free axis
        return dot_general(x, y, ((sh(lc), rc), (sh(lb), rb)), precision), len(lb)
    nfx = len(x.shape) - len(lc) - len(lb)
    return dot_general(x, y, ((lc, sh(rc)), (lb, sh(rb))), precision), len(lb) + nfx


dot_general_p = defprim("dot_general", _dot_shape, _dot_impl, _dot_vjp, _dot_jvp, _dot_batch)
