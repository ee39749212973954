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
debug_print_p.batch = lambda args, dims, **p: (bind(debug_print_p, *args, **p), None)


def print(fmt: str, *args, **kwargs) -> None:
    """Print formatted values at run time, also inside jit, vmap and grad.

    Under vmap the batched values are printed. Output goes to stdout.

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp
        >>> funcgrad.jit(lambda x: funcgrad.debug.print("x={x}", x=x) or x)(fnp.ones(2))
        x=[1. 1.]
        Array([1., 1.], dtype=float32)
    """
    leaves, tree = tree_flatten((args, kwargs))
    from funcgrad.transforms.ad import _as_value
    bind(debug_print_p, *[_as_value(x) for x in leaves], fmt=fmt, tree=tree)


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
