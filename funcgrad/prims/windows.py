"""Window reductions (lax.reduce_window: sum, max and min pooling) and the select-and-scatter /
select-and-gather pair that routes a max-pool's gradient to each window's selected element.

Windows follow XLA: the operand gets base_dilation - 1 holes between neighbours and (lo, hi)
edges, both holding the reduction's identity; a window has window_dimensions taps,
window_dilation apart, and moves by window_strides. The selection of max/min pooling is the
*first* maximum (minimum) in row-major window order, as XLA's select with `ge` (`le`) keeps.
"""
from __future__ import annotations

import math
import operator
import sys

import numpy as np

from funcgrad import prims as P
from funcgrad.core.dtypes import dtype_kind, is_half
from funcgrad.prims.conv import (
    _vjp_lhs_padding,
    _zeros,
    dilate_dim,
    pad_dilate,
    padtype_to_pads,
    stride_dim,
    window_view,
)
from funcgrad.core import ShapedArray, Tracer, bind, defprim, is_float, type_error, user_frame_src

WINDOW_KEYS = ("window_dimensions", "window_strides", "padding", "base_dilation",
               "window_dilation")


def window_out_shape(shape, window_dimensions, window_strides, padding, base_dilation,
                     window_dilation) -> tuple:
    """Shape of the windows' output: per axis stride_dim(dilated padded size, dilated window)."""
    return tuple(stride_dim(dilate_dim(n, b) + lo + hi, dilate_dim(w, d), s)
                 for n, w, s, (lo, hi), b, d in zip(shape, window_dimensions, window_strides,
                                                     padding, base_dilation, window_dilation))


def reduce_window_shape_tuple(operand_shape, window_dimensions, window_strides, padding,
                              base_dilation=None, window_dilation=None) -> tuple:
    """Output shape of reduce_window (`jax.lax.reduce_window_shape_tuple`).

    Example:
        >>> reduce_window_shape_tuple((1, 5, 5, 3), (1, 2, 2, 1), (1, 2, 2, 1), ((0, 0),) * 4)
        (1, 2, 2, 3)
    """
    n = len(operand_shape)
    return window_out_shape(operand_shape, window_dimensions, window_strides, padding,
                            base_dilation or (1,) * n, window_dilation or (1,) * n)


def _check(name, x, params, kinds="fiu", avals=None):
    avals = avals or (x,)
    n = x.ndim
    if any(len(params[k]) != n for k in WINDOW_KEYS):
        raise type_error(name, f"window_dimensions, window_strides, padding, base_dilation and "
                         f"window_dilation need {n} entries (one per operand axis)", avals)
    if any(v < 1 for k in WINDOW_KEYS if k != "padding" for v in params[k]):
        raise type_error(name, "window dimensions, strides and dilations must be >= 1", avals)
    if any(lo < 0 or hi < 0 for lo, hi in params["padding"]):
        raise type_error(name, f"padding {params['padding']} must be non-negative", avals)
    if dtype_kind(x.dtype) not in kinds:
        raise type_error(name, f"dtype {x.dtype.name} is not supported", avals)
    return window_out_shape(x.shape, *(params[k] for k in WINDOW_KEYS))


def identity(kind: str, dtype):
    """The identity of a window reduction: 0 (sum), -inf / the least integer (max), ..."""
    dtype = np.dtype(dtype)
    if kind == "sum":
        return dtype.type(0)
    big = np.inf if dtype_kind(dtype) == "f" else np.iinfo(dtype).max
    small = -np.inf if dtype_kind(dtype) == "f" else np.iinfo(dtype).min
    return dtype.type(small if kind in ("max", "ge") else big)


def _view(x, value, params):
    """(*out, *window) view of x's windows after dilation and padding with `value`."""
    p = pad_dilate(x, params["padding"], params["base_dilation"], value)
    out = window_out_shape(x.shape, *(params[k] for k in WINDOW_KEYS))
    return window_view(p, out, params["window_dimensions"], params["window_strides"],
                       params["window_dilation"]), out


def _extend(params):
    """Window params with a leading unit window over a new batch axis."""
    return {"window_dimensions": (1,) + tuple(params["window_dimensions"]),
            "window_strides": (1,) + tuple(params["window_strides"]),
            "padding": ((0, 0),) + tuple(params["padding"]),
            "base_dilation": (1,) + tuple(params["base_dilation"]),
            "window_dilation": (1,) + tuple(params["window_dilation"])}


# ---------------------------------------------------------------------------------------------
# reduce_window_{sum,max,min}
# ---------------------------------------------------------------------------------------------

def _rw_shape(name):
    def rule(x, **params):
        return ShapedArray(_check(name, x, params), x.dtype)
    return rule


def _rw_impl(kind):
    def impl(x, **params):
        v, out = _view(x, identity(kind, x.dtype), params)
        axes = tuple(range(x.ndim, 2 * x.ndim))
        if kind == "sum":
            acc = np.float32 if is_half(x.dtype) else x.dtype
            return np.sum(v, axis=axes, dtype=acc).astype(x.dtype, copy=False)
        return (np.max if kind == "max" else np.min)(v, axis=axes) if axes else v.copy()
    return impl


def pad_general(x, config):
    """lax.pad with (lo, hi, interior) triples where lo and hi may be negative (crops)."""
    if all(c == (0, 0, 0) for c in config):
        return x
    y = bind(P.pad_p, x, padding_config=tuple((max(lo, 0), max(hi, 0), it)
                                              for lo, hi, it in config), value=0.0)
    if all(lo >= 0 and hi >= 0 for lo, hi, _ in config):
        return y
    return bind(P.slice_p, y, start_indices=tuple(max(-lo, 0) for lo, _, _ in config),
                limit_indices=tuple(n - max(-hi, 0) for n, (_, hi, _) in zip(y.shape, config)),
                strides=(1,) * len(config))


def _rws_vjp(ct, x, *, out, **params):
    # the transpose of a window sum: the cotangent dilated by the strides, summed over windows
    if not is_float(x.dtype):
        return (None,)
    if 0 in tuple(ct.shape) + tuple(x.shape):
        return (_zeros(x.shape, ct.dtype),)
    n = len(x.shape)
    pads = _vjp_lhs_padding(x.shape, params["window_dimensions"], params["window_strides"],
                            ct.shape, params["padding"], params["base_dilation"],
                            params["window_dilation"])
    cfg = [(lo, hi, s - 1) for (lo, hi), s in zip(pads, params["window_strides"])]
    return (bind(reduce_window_sum_p, pad_general(ct, cfg),
                 window_dimensions=tuple(params["window_dimensions"]),
                 window_strides=tuple(params["base_dilation"]), padding=((0, 0),) * n,
                 base_dilation=(1,) * n, window_dilation=tuple(params["window_dilation"])),)


def _rw_batch(prim):
    return lambda args, dims, **params: (bind(prim, args[0], **_extend(params)), 0)


reduce_window_sum_p = defprim("reduce_window_sum", _rw_shape("reduce_window_sum"),
                              _rw_impl("sum"), _rws_vjp)
reduce_window_sum_p.jvp = lambda ts, xs, *, out, **p: None if ts[0] is None or not is_float(
    out.dtype) else bind(reduce_window_sum_p, ts[0], **p)
reduce_window_sum_p.batch = _rw_batch(reduce_window_sum_p)


def _chooser(kind):
    sel = "ge" if kind == "max" else "le"

    def vjp(ct, x, *, out, **params):   # the cotangent goes to each window's selected element
        if not is_float(x.dtype):
            return (None,)
        return (bind(select_and_scatter_add_p, ct, x, select_prim=sel, **params),)

    def jvp(ts, xs, *, out, **params):  # the tangent of each window's selected element
        if ts[0] is None or not is_float(out.dtype):
            return None
        return bind(select_and_gather_add_p, ts[0], xs[0], select_prim=sel, **params)
    name = f"reduce_window_{kind}"
    p = defprim(name, _rw_shape(name), _rw_impl(kind), vjp, jvp)
    p.batch = _rw_batch(p)
    return p


reduce_window_max_p = _chooser("max")
reduce_window_min_p = _chooser("min")


# ---------------------------------------------------------------------------------------------
# select_and_gather_add / select_and_scatter_add: linear in their first operand
# ---------------------------------------------------------------------------------------------

def select_indices(operand: np.ndarray, select_prim: str, params) -> np.ndarray:
    """For every window, the flat index into `operand` of its selected element: the first
    one that no later element beats (`ge`: max, `le`: min); -1 where padding is selected."""
    ident = identity(select_prim, operand.dtype)
    vals, out = _view(operand, ident, params)
    pos = np.arange(operand.size, dtype=np.int64).reshape(operand.shape)
    idx, _ = _view(pos, -1, params)
    w = math.prod(params["window_dimensions"])
    vals, idx = vals.reshape(out + (w,)), idx.reshape(out + (w,))
    best, sel = vals[..., 0].copy(), idx[..., 0].copy()
    keep = np.greater_equal if select_prim == "ge" else np.less_equal
    for k in range(1, w):
        v = vals[..., k]
        take = ~keep(best, v)
        best = np.where(take, v, best)
        sel = np.where(take, idx[..., k], sel)
    return sel


def _sel_params(select_prim, name, avals):
    if select_prim not in ("ge", "le"):
        raise type_error(name, f"select_prim must be 'ge' or 'le', got {select_prim!r}", avals)


def _sga_shape(t, x, *, select_prim, **params):
    name = "select_and_gather_add"
    _sel_params(select_prim, name, (t, x))
    if t.shape != x.shape or dtype_kind(t.dtype) not in "fiu":
        raise type_error(name, "tangents must be numeric and shaped like the operand", (t, x))
    return ShapedArray(_check(name, x, params, avals=(t, x)), t.dtype)


def _sga_impl(t, x, *, select_prim, **params):
    sel = select_indices(x, select_prim, params)
    flat = np.asarray(t).reshape(-1)
    got = flat[np.where(sel >= 0, sel, 0)] if flat.size else np.zeros(sel.shape, t.dtype)
    return np.where(sel >= 0, got, t.dtype.type(0)).astype(t.dtype, copy=False)


def _ssa_shape(s, x, *, select_prim, **params):
    name = "select_and_scatter_add"
    _sel_params(select_prim, name, (s, x))
    out = _check(name, x, params, avals=(s, x))
    if tuple(s.shape) != out or dtype_kind(s.dtype) not in "fiu":
        raise type_error(name, f"source must be numeric and shaped like the windows' output "
                         f"{out}", (s, x))
    return ShapedArray(x.shape, s.dtype)


def _ssa_impl(s, x, *, select_prim, **params):
    sel = select_indices(x, select_prim, params).reshape(-1)
    out = np.zeros(x.size, s.dtype)
    ok = sel >= 0
    np.add.at(out, sel[ok], np.asarray(s).reshape(-1)[ok])   # in window order
    return out.reshape(x.shape)


def _sel_batch(prim):
    def rule(args, dims, **params):
        size = P._batch_size(args, dims)
        a, x = (P._bcast_batched(v, d, size) for v, d in zip(args, dims))
        ext = _extend(params)
        return bind(prim, a, x, select_prim=params["select_prim"], **ext), 0
    return rule


def _linear_first(prim_of_ct, prim_of_t):
    def vjp(ct, a, x, *, out, **params):
        if not is_float(a.dtype):
            return None, None
        return bind(prim_of_ct(), ct, x, **params), None

    def jvp(ts, xs, *, out, **params):
        if ts[0] is None or not is_float(out.dtype):
            return None
        return bind(prim_of_t(), ts[0], xs[1], **params)
    return vjp, jvp


select_and_gather_add_p = defprim("select_and_gather_add", _sga_shape, _sga_impl)
select_and_scatter_add_p = defprim("select_and_scatter_add", _ssa_shape, _ssa_impl)
# gather(t)[w] = t[sel(w)] and scatter(s)[i] = sum of s[w] over windows w selecting i are
# transposes of each other
select_and_gather_add_p.vjp, select_and_gather_add_p.jvp = _linear_first(
    lambda: select_and_scatter_add_p, lambda: select_and_gather_add_p)
select_and_scatter_add_p.vjp, select_and_scatter_add_p.jvp = _linear_first(
    lambda: select_and_gather_add_p, lambda: select_and_scatter_add_p)
select_and_gather_add_p.batch = _sel_batch(select_and_gather_add_p)
select_and_scatter_add_p.batch = _sel_batch(select_and_scatter_add_p)


# ---------------------------------------------------------------------------------------------
# lax.reduce_window
# ---------------------------------------------------------------------------------------------

def _monoid(computation):
    from funcgrad import numpy as fnp
    table = {fnp.add: "sum", fnp.maximum: "max", fnp.minimum: "min", operator.add: "sum"}
    lax = sys.modules.get("funcgrad.lax")   # loaded with funcgrad (it imports this module)
    for name, kind in (("add", "sum"), ("max", "max"), ("min", "min")):
        f = getattr(lax, name, None)
        if f is not None:
            table[f] = kind
    try:
        return table.get(computation)
    except TypeError:   # an unhashable callable
        return None


def _tuple(name, v, n, default=1):
    if v is None:
        return (default,) * n
    v = tuple(int(a) for a in v)
    if len(v) != n:
        raise ValueError(f"reduce_window: {name} needs {n} entries (one per operand axis), "
                         f"got {v}\n  at {user_frame_src()}")
    return v


def reduce_window(operand, init_value, computation, window_dimensions, window_strides,
                  padding, base_dilation=None, window_dilation=None):
    """Reduce every window of `operand` with `computation`, as `jax.lax.reduce_window`.

    Sums, maxima and minima (computation lax.add / lax.max / lax.min or funcgrad.numpy's
    add / maximum / minimum) are primitives with gradients: a max-pool's cotangent goes to
    each window's first maximum. Any other binary `computation` folds over the window taps.

    Args:
        operand: the array.
        init_value: the reduction's start value, also the value of padding and of the holes
            of base_dilation (0 for sums, -inf for max pooling).
        computation: binary function, e.g. lax.add or lax.max.
        window_dimensions, window_strides: one int per operand axis.
        padding: "SAME", "VALID" or one non-negative (low, high) pair per axis.
        base_dilation, window_dilation: one int per axis (default 1).

    Example:
        >>> import numpy as np, funcgrad.numpy as fnp
        >>> from funcgrad import lax
        >>> x = np.arange(16.0).reshape(1, 4, 4, 1)                 # NHWC
        >>> lax.reduce_window(x, -np.inf, fnp.maximum, (1, 2, 2, 1), (1, 2, 2, 1),
        ...                   "VALID")[0, :, :, 0]
        Array([[ 5.,  7.],
               [13., 15.]], dtype=float64)
    """
    from funcgrad.numpy import asarray, maximum, minimum
    x = asarray(operand)
    n = len(x.shape)
    params = {"window_dimensions": _tuple("window_dimensions", window_dimensions, n),
              "window_strides": _tuple("window_strides", window_strides, n),
              "base_dilation": _tuple("base_dilation", base_dilation, n),
              "window_dilation": _tuple("window_dilation", window_dilation, n)}
    if isinstance(padding, str):
        win = [dilate_dim(w, d) for w, d in zip(params["window_dimensions"],
                                                 params["window_dilation"])]
        padding = padtype_to_pads(x.shape, win, params["window_strides"], padding)
    params["padding"] = tuple((int(lo), int(hi)) for lo, hi in padding)
    kind = _monoid(computation)
    if kind is None:
        return _fold(x, init_value, computation, params)
    prim = {"sum": reduce_window_sum_p, "max": reduce_window_max_p,
            "min": reduce_window_min_p}[kind]
    res = bind(prim, x, **params)
    init = init_value if isinstance(init_value, Tracer) else np.asarray(init_value)
    if not isinstance(init, Tracer):
        if init.ndim or (not is_float(x.dtype) and not (np.isfinite(init) and init == int(init))):
            raise TypeError(f"reduce_window: init_value {init_value!r} is not a scalar of the "
                            f"operand's dtype {x.dtype.name}\n  at {user_frame_src()}")
        if init == identity(kind, x.dtype):
            return res
    init = asarray(init, x.dtype)
    if kind == "max":
        return maximum(res, init)
    if kind == "min":
        return minimum(res, init)
    # padding and holes hold init too: count them with a window sum of ones
    count = bind(reduce_window_sum_p, P.full_like(x, 1), **params)
    taps = math.prod(params["window_dimensions"])
    return res + init * (1 + taps - count)


def _fold(x, init_value, computation, params):
    """A generic window reduction: computation folded over the window taps (strided slices
    of the padded, dilated operand)."""
    if isinstance(init_value, Tracer):
        raise TypeError("reduce_window with a custom computation needs a concrete init_value"
                        f"\n  at {user_frame_src()}")
    init = float(np.asarray(init_value)) if is_float(x.dtype) else int(np.asarray(init_value))
    cfg = tuple((lo, hi, b - 1) for (lo, hi), b in zip(params["padding"],
                                                       params["base_dilation"]))
    xp = bind(P.pad_p, x, padding_config=cfg, value=init) if any(
        c != (0, 0, 0) for c in cfg) else x
    out = window_out_shape(x.shape, *(params[k] for k in WINDOW_KEYS))
    acc = bind(P.broadcast_in_dim_p, np.asarray(init, x.dtype), shape=out,
               broadcast_dimensions=())
    for tap in np.ndindex(*params["window_dimensions"]):
        start = [t * d if o else 0 for t, d, o in zip(tap, params["window_dilation"], out)]
        limit = [s + (o - 1) * st + 1 if o else 0 for s, o, st in
                 zip(start, out, params["window_strides"])]
        piece = bind(P.slice_p, xp, start_indices=tuple(start), limit_indices=tuple(limit),
                     strides=tuple(params["window_strides"]))
        acc = computation(acc, piece)
    return acc
