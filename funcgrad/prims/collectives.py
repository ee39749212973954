"""Collective primitives over named mapped axes (the axes of pmap and vmap(axis_name=)).

A collective never runs on its own: the transformation that owns its axis name (pmap or a named
vmap, through batching.batch_eval) rewrites it with ordinary primitives over the batch dimension
by the primitive's `named_batch` rule (psum over the named axis = reduce_sum over the batch
dimension, all_gather = moving the batch dimension into place, ...). So these primitives carry
shape, vjp, jvp and batching rules but no kernels of their own, and their numpy impl raises: a
collective that reaches execution had no enclosing mapped axis. They are kept out of the
primitive table (core.PRIMITIVES) for that reason, like custom.py's call primitives.

Params of every collective: axis_name (one name) and axis_size (that axis's size, looked up when
the user's call is traced, so shape rules are local).
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np

from funcgrad import prims as P
from funcgrad.core import Primitive, ShapedArray, bind, is_float, type_error, user_frame_src
from funcgrad.core.dtypes import dtype_kind

_state = threading.local()


# ---------------------------------------------------------------------------------------------
# the named axes in scope while a function is traced
# ---------------------------------------------------------------------------------------------

def _frames() -> list:
    f = getattr(_state, "frames", None)
    if f is None:
        f = _state.frames = []
    return f


@contextlib.contextmanager
def axis_frame(name, size: int):
    """Bind axis `name` (of `size`) for the collectives traced inside (pmap / named vmap)."""
    frames = _frames()
    frames.append((name, int(size)))
    try:
        yield
    finally:
        frames.pop()


def _shown(name) -> str:
    return "an unnamed axis" if isinstance(name, _Anonymous) else repr(name)


class _Anonymous:
    """The axis name of a pmap/vmap called without axis_name (no user name can match it)."""

    def __repr__(self):
        return "<unnamed axis>"


def anonymous_axis():
    return _Anonymous()


def bound_axis_size(name) -> int:
    """The size of the innermost mapped axis called `name`; NameError naming the user's line if
    no enclosing pmap or vmap(axis_name=) binds it."""
    for n, size in reversed(_frames()):
        if n == name:
            return size
    names = [n for n, _ in _frames() if not isinstance(n, _Anonymous)]
    raise NameError(f"unbound axis name: {name!r}. The named axes in scope (from pmap or "
                    f"vmap(axis_name=...)) are {names}\n  at {user_frame_src()}")


def _unbound_impl(prim_name):
    def impl(*args, axis_name, **params):
        raise NameError(f"{prim_name}: unbound axis name {axis_name!r}: a collective ran outside "
                        f"the pmap / vmap(axis_name=...) that names its axis\n  at "
                        f"{user_frame_src()}")
    return impl


def _collective(name, shape, vjp, jvp, batch, named_batch):
    p = Primitive(name, shape, _unbound_impl(name), vjp, jvp, batch)
    p.named_batch = named_batch
    return p


def _as_batched(x, d, size):
    """x with the mapped axis in front (broadcast when x does not vary along it)."""
    return P._bcast_batched(x, d, size)


# ---------------------------------------------------------------------------------------------
# psum / pmax / pmin
# ---------------------------------------------------------------------------------------------

def _same_shape(kinds):
    def rule(x, *, axis_name, axis_size, **_):
        if dtype_kind(x.dtype) not in kinds:
            raise type_error("collective", f"unsupported dtype {x.dtype} over axis "
                             f"{_shown(axis_name)}", (x,))
        return x
    return rule


def _psum_named(args, dims, *, axis_name, axis_size):
    x, d = args[0], dims[0]
    if d is None:                                  # the same value on every member: n * x
        return P.mul(x, P.full_like(x, axis_size)), None
    return P.reduce_sum(x, (0,)), None


psum_p = _collective(
    "psum", _same_shape("fiuc"), None,
    jvp=lambda ts, xs, *, out, **p: None if ts[0] is None else bind(psum_p, ts[0], **p),
    batch=lambda args, dims, **p: (bind(psum_p, args[0], **p), 0),
    named_batch=_psum_named)
# psum is its own transpose: the map (x_1..x_n) -> (s, .., s) with s = sum x_j
psum_p.vjp = lambda ct, x, *, out, **p: (bind(psum_p, ct, **p) if _diff(x) else None,)


def _diff(x) -> bool:
    return is_float(x.dtype) or dtype_kind(x.dtype) == "c"


def _chooser(name, reduce_p):
    def named(args, dims, *, axis_name, axis_size):
        x, d = args[0], dims[0]
        if d is None:
            return x, None
        return bind(reduce_p, x, axes=(0,)), None

    def share(x, out, p):
        """1/count where x attains the extreme over the axis (ties share, like reduce_max)."""
        loc = P.convert(P.eq(x, out), x.dtype)
        return P.div(loc, bind(psum_p, loc, **p))

    def vjp(ct, x, *, out, **p):       # d out = sum_j share_j dx_j; every member's ct reaches it
        if not is_float(x.dtype):
            return (None,)
        return (P.mul(bind(psum_p, ct, **p), share(x, out, p)),)

    def jvp(ts, xs, *, out, **p):
        if ts[0] is None or not is_float(out.dtype):
            return None
        return bind(psum_p, P.mul(ts[0], share(xs[0], out, p)), **p)

    p = _collective(name, _same_shape("fiub"), vjp, jvp, None, named)
    p.batch = lambda args, dims, **params: (bind(p, args[0], **params), 0)
    return p


pmax_p = _chooser("pmax", P.reduce_max_p)
pmin_p = _chooser("pmin", P.reduce_min_p)


# ---------------------------------------------------------------------------------------------
# all_gather / psum_scatter (each the other's transpose)
# ---------------------------------------------------------------------------------------------

def _gathered_shape(shape, n, axis, tiled):
    if tiled:
        return shape[:axis] + (shape[axis] * n,) + shape[axis + 1:]
    return shape[:axis] + (n,) + shape[axis:]


def _all_gather_shape(x, *, axis_name, axis_size, axis, tiled):
    limit = x.ndim if tiled else x.ndim + 1
    if not 0 <= axis < limit:
        raise type_error("all_gather", f"axis {axis} is out of range for an operand of rank "
                         f"{x.ndim} (tiled={tiled})", (x,))
    return ShapedArray(_gathered_shape(tuple(x.shape), axis_size, axis, tiled), x.dtype)


def _all_gather_named(args, dims, *, axis_name, axis_size, axis, tiled):
    x = _as_batched(args[0], dims[0], axis_size)    # (n, *s): member j's value is x[j]
    x = _move(x, 0, axis)                            # stacked at `axis`, the same for all
    if tiled:
        s = tuple(x.shape)
        x = P.reshape(x, s[:axis] + (s[axis] * s[axis + 1],) + s[axis + 2:])
    return x, None


all_gather_p = _collective(
    "all_gather", _all_gather_shape,
    vjp=lambda ct, x, *, out, axis_name, axis_size, axis, tiled: (
        bind(psum_scatter_p, ct, axis_name=axis_name, axis_size=axis_size,
             scatter_dimension=axis, tiled=tiled) if _diff(x) else None,),
    jvp=lambda ts, xs, *, out, **p: None if ts[0] is None else bind(all_gather_p, ts[0], **p),
    batch=lambda args, dims, *, axis, **p: (bind(all_gather_p, args[0], axis=axis + 1, **p), 0),
    named_batch=_all_gather_named)


def _psum_scatter_shape(x, *, axis_name, axis_size, scatter_dimension, tiled):
    sd = scatter_dimension
    if not 0 <= sd < x.ndim:
        raise type_error("psum_scatter", f"scatter_dimension {sd} is out of range for an "
                         f"operand of rank {x.ndim}", (x,))
    n, s = axis_size, tuple(x.shape)
    if tiled and s[sd] % n:
        raise type_error("psum_scatter", f"dimension {sd} of size {s[sd]} does not divide "
                         f"evenly over the {n} members of axis {_shown(axis_name)}", (x,))
    if not tiled and s[sd] != n:
        raise type_error("psum_scatter", f"dimension {sd} has size {s[sd]} but axis "
                         f"{_shown(axis_name)} has {n} members (non-tiled psum_scatter needs "
                         "them equal)", (x,))
    out = s[:sd] + (s[sd] // n,) + s[sd + 1:] if tiled else s[:sd] + s[sd + 1:]
    return ShapedArray(out, x.dtype)


def _psum_scatter_named(args, dims, *, axis_name, axis_size, scatter_dimension, tiled):
    n, sd = axis_size, scatter_dimension
    x, d = args[0], dims[0]
    total = P.reduce_sum(x, (0,)) if d is not None else P.mul(x, P.full_like(x, n))
    if tiled:                                        # split dimension sd into (n, size / n)
        s = tuple(total.shape)
        total = P.reshape(total, s[:sd] + (n, s[sd] // n) + s[sd + 1:])
    return _move(total, sd, 0), 0                    # member j keeps block j


psum_scatter_p = _collective(
    "psum_scatter", _psum_scatter_shape,
    vjp=lambda ct, x, *, out, axis_name, axis_size, scatter_dimension, tiled: (
        bind(all_gather_p, ct, axis_name=axis_name, axis_size=axis_size,
             axis=scatter_dimension, tiled=tiled) if _diff(x) else None,),
    jvp=lambda ts, xs, *, out, **p: None if ts[0] is None else bind(psum_scatter_p, ts[0], **p),
    batch=lambda args, dims, *, scatter_dimension, **p: (bind(
        psum_scatter_p, args[0], scatter_dimension=scatter_dimension + 1, **p), 0),
    named_batch=_psum_scatter_named)


def _move(x, src, dst):
    if src == dst:
        return x
    order = [i for i in range(x.ndim) if i != src]
    order.insert(dst, src)
    return P.transpose(x, order)


# ---------------------------------------------------------------------------------------------
# ppermute / axis_index
# ---------------------------------------------------------------------------------------------

def _ppermute_named(args, dims, *, axis_name, axis_size, perm):
    x = _as_batched(args[0], dims[0], axis_size)
    src_of = {dst: src for src, dst in perm}
    zero = None
    parts = []
    for j in range(axis_size):                       # member j receives x[src] or zeros
        if j in src_of:
            i = src_of[j]
            parts.append(bind(P.slice_p, x, start_indices=(i,) + (0,) * (x.ndim - 1),
                              limit_indices=(i + 1,) + tuple(x.shape[1:]),
                              strides=(1,) * x.ndim))
        else:
            if zero is None:
                zero = P.broadcast_in_dim(np.zeros((), x.dtype), (1,) + tuple(x.shape[1:]), ())
            parts.append(zero)
    return bind(P.concatenate_p, *parts, dimension=0), 0


def _inverse(perm):
    return tuple((dst, src) for src, dst in perm)


ppermute_p = _collective(
    "ppermute", _same_shape("fiubc"),
    # the transpose of sending src -> dst is sending dst -> src
    vjp=lambda ct, x, *, out, perm, **p: (
        bind(ppermute_p, ct, perm=_inverse(perm), **p) if _diff(x) else None,),
    jvp=lambda ts, xs, *, out, **p: None if ts[0] is None else bind(ppermute_p, ts[0], **p),
    batch=lambda args, dims, **p: (bind(ppermute_p, args[0], **p), 0),
    named_batch=_ppermute_named)


axis_index_p = _collective(
    "axis_index", lambda *, axis_name, axis_size: ShapedArray((), np.dtype(np.int32)),
    vjp=lambda ct, *, out, **p: (),
    jvp=lambda ts, xs, *, out, **p: None,
    batch=lambda args, dims, **p: (bind(axis_index_p, **p), None),
    named_batch=lambda args, dims, *, axis_name, axis_size: (bind(
        P.iota_p, dtype=np.dtype(np.int32), shape=(axis_size,), dimension=0), 0))

COLLECTIVES = (psum_p, pmax_p, pmin_p, all_gather_p, psum_scatter_p, ppermute_p, axis_index_p)
