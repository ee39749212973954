"""Debugging: funcgrad.debug.print inside transformations, and the debug_nans checker."""
from __future__ import annotations

import sys

import numpy as np

from funcgrad import core
from funcgrad.config import config
from funcgrad.core import FuncgradError, Primitive, ShapedArray, bind, eval_expr, user_frame_src
from funcgrad.tree_util import tree_flatten, tree_unflatten


def _print_impl(*args, fmt, tree, **_):
    vals = tree_unflatten(tree, [np.asarray(a) for a in args])
    pos, kw = vals
    sys.stdout.write(fmt.format(*pos, **kw) + "\n")
    return np.zeros((), np.int32)


def _print_call(*args, fmt, tree, **_):
    _print_impl(*args, fmt=fmt, tree=tree)
    return core.to_array(np.zeros((), np.int32), "cpu")


debug_print_p = Primitive("debug_print", lambda *avals, **_: ShapedArray((), np.int32),
                          _print_impl, kind="effect")
debug_print_p.call_impl = _print_call
debug_print_p.effectful = True
debug_print_p.vjp = lambda ct, *xs, out, **_: (None,) * len(xs)
debug_print_p.jvp = lambda ts, xs, *, out, **_: None


def _per_element(prim):
    """JAX's batching rule for debug effects: one call per element of the mapped axis
    (unmapped operands broadcast), in order."""
    def rule(args, dims, **params):
        size = next((a.shape[d] for a, d in zip(args, dims) if d is not None), None)
        if size is None:
            return bind(prim, *args, **params), None
        out = None
        for i in range(size):
            out = bind(prim, *[a if d is None else a[(slice(None),) * d + (i,)]
                               for a, d in zip(args, dims)], **params)
        return (np.zeros((), np.int32) if out is None else out), None
    return rule


debug_print_p.batch = _per_element(debug_print_p)


def print(fmt: str, *args, **kwargs) -> None:
    """Print formatted values at run time, also inside jit, vmap and grad.

    Under vmap it prints once per element of the mapped axis, as JAX's does. Output goes to
    stdout.

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp
        >>> funcgrad.jit(lambda x: funcgrad.debug.print("x={x}", x=x) or x)(fnp.ones(2))
        x=[1. 1.]
        Array([1., 1.], dtype=float32)
    """
    leaves, tree = tree_flatten((args, kwargs))
    from funcgrad.transforms.ad import _as_value
    bind(debug_print_p, *[_as_value(x) for x in leaves], fmt=fmt, tree=tree)


def _callback_impl(*args, callback, **_):
    callback(*[core.to_array(np.asarray(a), "cpu") for a in args])
    return np.zeros((), np.int32)


def _callback_call(*args, callback, **_):
    _callback_impl(*args, callback=callback)
    return core.to_array(np.zeros((), np.int32), "cpu")


debug_callback_p = Primitive("debug_callback", lambda *avals, **_: ShapedArray((), np.int32),
                             _callback_impl, kind="effect")
debug_callback_p.call_impl = _callback_call
debug_callback_p.effectful = True
debug_callback_p.vjp = lambda ct, *xs, out, **_: (None,) * len(xs)
debug_callback_p.jvp = lambda ts, xs, *, out, **_: None
debug_callback_p.batch = _per_element(debug_callback_p)


def _is_array_like(x) -> bool:
    return isinstance(x, (core.ArrayBase, np.ndarray, np.generic, bool, int, float, complex))


def _stage_callback(fn, args, kwargs):
    if not callable(fn):
        raise TypeError(f"first argument to funcgrad.debug.callback must be callable, but got "
                        f"an object of type {type(fn)}")
    leaves, tree = tree_flatten((args, kwargs))
    static = {i: x for i, x in enumerate(leaves) if not _is_array_like(x)}
    from funcgrad.transforms.ad import _as_value
    dyn = [_as_value(x) for i, x in enumerate(leaves) if i not in static]

    def flat_callback(*values):
        it = iter(values)
        full = [static[i] if i in static else next(it) for i in range(len(leaves))]
        pos, kw = tree_unflatten(tree, full)
        fn(*pos, **kw)

    flat_callback.__name__ = getattr(fn, "__name__", "callback")
    bind(debug_callback_p, *dyn, callback=flat_callback)


def callback(callback=None, *args, ordered: bool = False, partitioned: bool = False,
             **kwargs):
    """Call ``callback(*args, **kwargs)`` with concrete values when the code runs, also inside
    jit, vmap and grad (jax.debug.callback).

    Array leaves of args / kwargs (and Python numbers) reach the callback as CPU Arrays; other
    leaves (strings, ...) are passed as they are; the callback's return value is dropped. Under
    vmap it is called once per element of the mapped axis, as in JAX. Calls run in program
    order (`ordered` is accepted; `partitioned` has no meaning on one device). As in JAX,
    ``callback(ordered=True)`` without a function returns the function taking
    ``(callback, *args, **kwargs)``.

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp
        >>> seen = []
        >>> f = funcgrad.jit(lambda x: funcgrad.debug.callback(seen.append, x) or x * 2)
        >>> f(fnp.arange(3.0)).tolist(), seen[0].tolist()
        ([0.0, 2.0, 4.0], [0.0, 1.0, 2.0])
    """
    del ordered, partitioned
    if callback is not None:
        _stage_callback(callback, args, kwargs)
        return None
    if args or kwargs:
        raise TypeError(f"debug.callback received unexpected arguments in the two-call form: "
                        f"{args=} {kwargs=}")
    return lambda fn, *a, **k: _stage_callback(fn, a, k)


class FloatingPointError_(FuncgradError, FloatingPointError):
    """A NaN or Inf was produced while debug_nans was on."""


def _nan_hook(prim, params, out):
    if not config.debug_nans or not core.is_float(out.dtype):
        return
    a = np.asarray(out)
    if np.all(np.isfinite(a)):
        return
    where = user_frame_src()
    kind = "NaN" if np.isnan(a).any() else "Inf"
    if "(backward of " in where:
        loc, fwd = where.split(" (backward of ", 1)
        phase = f"in the backward pass of `{fwd.rstrip(')')}`"
    else:
        loc, phase = where, "in the forward pass"
    raise FloatingPointError_(f"debug_nans: `{prim.name}` produced {kind} {phase} "
                              f"(output {out.aval.str_short()})\n  at {loc}")


core._eval_hooks.append(_nan_hook)


def eval_checking_nans(expr, args, consts):
    """Run an expression op by op so that the debug_nans hook sees every result."""
    return eval_expr(expr, args, consts)
