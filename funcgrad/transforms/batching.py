"""vmap: evaluate an expression over a batch axis using each primitive's batching rule."""
from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any


from funcgrad import prims as P
from funcgrad.prims.collectives import axis_frame
from funcgrad.core import Lit, aval_of, bind, source_info, trace_to_expr, user_frame_src
from funcgrad.tree_util import tree_flatten, tree_unflatten


def _move_to_front(x, d):
    if d is None or d == 0:
        return x
    perm = [d] + [i for i in range(len(x.shape)) if i != d]
    return P.transpose(x, perm)


def _move_axis(x, src, dst):
    if src == dst:
        return x
    order = [i for i in range(len(x.shape)) if i != src]
    order.insert(dst, src)
    return P.transpose(x, order)


_current = threading.local()
_INHERIT = object()


def batch_eval(expr, consts, args, dims, axis=_INHERIT):
    """Evaluate expr on batched args (dims: batch axis per arg or None) -> (outs, out_dims).

    axis: (name, size) when the batch axis is a named one (pmap, vmap(axis_name=)): collectives
    over that name become ordinary ops by their named_batch rule. By default the enclosing
    batch_eval's axis, since a control-flow body batched by its rule maps the same axis.
    """
    if axis is _INHERIT:
        axis = getattr(_current, "axis", None)
    prev = getattr(_current, "axis", None)
    _current.axis = axis
    try:
        return _batch_eval(expr, consts, args, dims, axis)
    finally:
        _current.axis = prev


def _batch_eval(expr, consts, args, dims, axis):
    env = {}
    for v, c in zip(expr.in_binders, list(consts)):
        env[v] = (c, None)
    for v, a, d in zip(expr.in_binders[expr.n_consts:], args, dims):
        env[v] = (a, d)

    def read(x):
        return (x.val, None) if isinstance(x, Lit) else env[x]

    for e in expr.eqns:
        vals, ds = zip(*[read(x) for x in e.inputs]) if e.inputs else ((), ())
        with source_info(e.src):
            named = getattr(e.prim, "named_batch", None)
            if named is not None and axis is not None and e.params["axis_name"] == axis[0]:
                # a collective over this axis: e.g. psum = reduce_sum over the batch dim
                vals = [_move_to_front(v, d) for v, d in zip(vals, ds)]
                env[e.out] = named(vals, [None if d is None else 0 for d in ds], **e.params)
                continue
            if all(d is None for d in ds):
                env[e.out] = (bind(e.prim, *vals, **e.params), None)
                continue
            vals = [_move_to_front(v, d) for v, d in zip(vals, ds)]
            ds = [None if d is None else 0 for d in ds]
            if e.prim.batch is None:
                raise NotImplementedError(f"batching rule for {e.prim.name} is not defined")
            env[e.out] = e.prim.batch(vals, ds, **e.params)
    return [read(o) for o in expr.outs]


def _prefix_leaves(spec, tree, what):
    """Expand an in_axes/out_axes prefix tree to one entry per leaf of `tree`."""
    if spec is None or isinstance(spec, int):
        return [spec] * len(tree_flatten(tree)[0])
    if isinstance(spec, (tuple, list)) and isinstance(tree, (tuple, list)) and len(spec) == len(
            tree):
        return [x for s, t in zip(spec, tree) for x in _prefix_leaves(s, t, what)]
    if isinstance(spec, dict) and isinstance(tree, dict) and set(spec) == set(tree):
        return [x for k in sorted(tree) for x in _prefix_leaves(spec[k], tree[k], what)]
    raise ValueError(f"vmap {what} specification {spec!r} does not match the structure of the "
                     f"value it applies to ({type(tree).__name__})\n  at {user_frame_src()}")


def vmap(fun: Callable, in_axes: Any = 0, out_axes: Any = 0, axis_name: Any = None,
         axis_size: int | None = None):
    """Vectorize `fun` over a batch axis of its inputs.

    Args:
        fun: function of pytrees of arrays.
        in_axes: int, None, or a tuple (one entry per positional argument) of pytree prefixes
            of ints/None: the axis of each input carrying the batch (None: not batched).
        out_axes: same for the outputs (None: output must not depend on the batch).
        axis_name: a name for the batch axis, so that collectives inside `fun`
            (funcgrad.lax.psum, pmean, all_gather, axis_index, ...) can refer to it.
        axis_size: the batch size when no input is batched.

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp
        >>> funcgrad.vmap(lambda x, y: x @ y, in_axes=(0, None))(fnp.ones((5, 3)),
        ...                                                       fnp.ones(3)).shape
        (5,)
    """
    @functools.wraps(fun)
    def wrapped(*args):
        spec = in_axes
        if isinstance(spec, list):
            spec = tuple(spec)
        if isinstance(spec, tuple) and len(spec) != len(args):
            raise ValueError(f"vmap in_axes has {len(spec)} entries but the function got "
                             f"{len(args)} positional arguments\n  at {user_frame_src()}")
        axes = _prefix_leaves(spec, tuple(args), "in_axes") if isinstance(spec, tuple) else \
            _prefix_leaves(spec, args, "in_axes")
        leaves, tree = tree_flatten(tuple(args))
        from funcgrad.transforms.ad import _as_value
        leaves = [_as_value(x) for x in leaves]
        sizes = set()
        dims, avals = [], []
        for x, a in zip(leaves, axes):
            av = aval_of(x)
            if a is None:
                dims.append(None)
                avals.append(av)
                continue
            if not -av.ndim <= a < av.ndim:
                raise ValueError(f"vmap: in_axes {a} is out of range for an argument of shape "
                                 f"{av.shape}\n  at {user_frame_src()}")
            a = a % av.ndim
            sizes.add(av.shape[a])
            dims.append(a)
            avals.append(type(av)(av.shape[:a] + av.shape[a + 1:], av.dtype))
        if axis_size is not None:
            sizes.add(axis_size)
        if len(sizes) > 1:
            raise ValueError(f"vmap got inconsistent sizes for the mapped axes: {sorted(sizes)}"
                             f"\n  at {user_frame_src()}")
        if not sizes:
            raise ValueError("vmap must have at least one non-None value in in_axes (or "
                             "axis_size)")
        size = sizes.pop()
        store = [None]

        def flat(*xs):
            out = fun(*tree_unflatten(tree, list(xs)))
            ol, ot = tree_flatten(out)
            store[0] = (out, ot)
            return [_as_value(o) for o in ol]

        if axis_name is None:
            expr, consts, _ = trace_to_expr(flat, avals)
            results = batch_eval(expr, consts, leaves, dims, axis=None)
        else:
            with axis_frame(axis_name, size):
                expr, consts, _ = trace_to_expr(flat, avals)
                results = batch_eval(expr, consts, leaves, dims, axis=(axis_name, size))
        out_struct, out_tree = store[0]
        oaxes = _prefix_leaves(out_axes, out_struct, "out_axes")
        outs = []
        for (v, d), oa in zip(results, oaxes):
            if oa is None:
                if d is not None:
                    raise ValueError("vmap: out_axes=None but the output depends on the mapped "
                                     f"axis\n  at {user_frame_src()}")
                outs.append(v)
                continue
            if d is None:
                v = _as_value(v)
                v = P.broadcast_in_dim(v, (size,) + tuple(v.shape), range(1, len(v.shape) + 1))
                d = 0
            oa = oa % (len(v.shape))
            outs.append(_move_axis(v, d, oa))
        return tree_unflatten(out_tree, outs)

    return wrapped


