"""custom_vmap: a function whose batching under vmap is the user's rule (jax.custom_batching)."""
from __future__ import annotations

import functools
from collections.abc import Callable

from funcgrad.core import FuncgradError, aval_of, user_frame_src
from funcgrad.transforms.custom import (
    _bind_group,
    _body_jvp,
    _closure_converted,
    _make_call_prim,
    _Rec,
)
from funcgrad.tree_util import tree_flatten, tree_unflatten


def _call_batch(args, dims, *, rec, index):
    # the rule runs once for the group's k equations (one per output), memoized on the args
    key = (tuple(id(a) for a in args), tuple(dims))
    memo = rec._batched.get("rule")
    if memo is None or memo[0] != key:
        memo = rec._batched["rule"] = (key, list(args), _apply_rule(rec, args, dims))
    outs, out_dims = memo[2]
    return outs[index], out_dims[index]


def _apply_rule(rec, args, dims):
    """rec.rule(axis_size, in_batched, *args) -> (flat outputs, their batch dims 0 / None)."""
    size = next(a.shape[0] for a, d in zip(args, dims) if d is not None)
    n = rec.n_args
    if any(d is not None for d in dims[n:]):
        raise FuncgradError(
            f"{rec.name}: a custom_vmap function closes over a value that vmap batches; its "
            f"rule sees only the explicit arguments: pass the value as an argument"
            f"\n  at {user_frame_src()}")
    in_args = tree_unflatten(rec.in_tree, list(args[:n]))
    in_batched = tree_unflatten(rec.in_tree, [d is not None for d in dims[:n]])
    got = rec.rule(size, list(in_batched), *in_args)
    if not (isinstance(got, (tuple, list)) and len(got) == 2):
        raise TypeError(f"{rec.name}: the vmap rule must return a pair (out, out_batched), "
                        f"got {type(got).__name__}\n  at {user_frame_src()}")
    out, out_batched = got
    outs, tree = tree_flatten(out)
    flags, flags_tree = tree_flatten(out_batched)
    if tree != rec.out_tree:
        raise ValueError(f"structure of output returned by custom vmap rule ({rec.name}) does "
                         f"not match that of original custom-vmapped function.\nOriginal "
                         f"output: {rec.out_tree}\nRule output: {tree}\n  at {user_frame_src()}")
    if flags_tree != tree:
        raise ValueError(f"structure of output values and output batching specification "
                         f"returned by custom vmap rule ({rec.name}) do not match.\nOutput "
                         f"values: {tree}\nBatching spec: {flags_tree}\n  at {user_frame_src()}")
    from funcgrad.transforms.ad import _as_value
    outs = [_as_value(o) for o in outs]
    for o, b, want in zip(outs, flags, rec.out_avals):
        shape = tuple(aval_of(o).shape)
        expect = ((size,) if b else ()) + tuple(want.shape)
        if shape != expect:
            raise ValueError(f"{rec.name}: the vmap rule returned an output of shape {shape} "
                             f"{'batched' if b else 'unbatched'}, expected {expect} (axis size "
                             f"{size})\n  at {user_frame_src()}")
    return outs, [0 if b else None for b in flags]


def _call_vjp(ct, *xs, out, rec, index):
    # reverse mode differentiates the body (the rule only says how to batch)
    from funcgrad.transforms.ad import vjp
    return tuple(vjp(lambda *ys: rec.fun_flat(*ys)[index], *xs)[1](ct))


custom_vmap_call_p = _make_call_prim("custom_vmap_call")
custom_vmap_call_p.batch = _call_batch
custom_vmap_call_p.jvp = _body_jvp
custom_vmap_call_p.vjp = _call_vjp


class custom_vmap:
    """A function with a user-defined batching rule (JAX's jax.custom_batching.custom_vmap).

    Outside vmap it runs `fun`; under vmap (nested ones too, and inside jit) the rule
    `rule(axis_size, in_batched, *args) -> (out, out_batched)` computes the batched result:
    `in_batched` mirrors the arguments' pytree with a bool per leaf (True: the leaf carries
    the batch axis, at the front), `out_batched` mirrors `out` likewise. Derivatives
    differentiate `fun`.

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp
        >>> from funcgrad.custom_batching import custom_vmap
        >>> @custom_vmap
        ... def f(x):
        ...     return fnp.sin(x)
        >>> @f.def_vmap
        ... def f_rule(axis_size, in_batched, x):
        ...     return fnp.cos(x), in_batched[0]      # a rule that differs, to show it runs
        >>> float(f(0.0)), funcgrad.vmap(f)(fnp.zeros(2)).tolist()
        (0.0, [1.0, 1.0])
    """

    def __init__(self, fun: Callable):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.vmap_rule = None

    def def_vmap(self, vmap_rule: Callable) -> Callable:
        """Set the rule, `vmap_rule(axis_size, in_batched, *args) -> (out, out_batched)`;
        returns it (usable as a decorator)."""
        self.vmap_rule = vmap_rule
        return vmap_rule

    def __call__(self, *args, **kwargs):
        name = getattr(self.fun, "__name__", "custom_vmap")
        if self.vmap_rule is None:
            raise AttributeError(f"No batching rule defined for custom_vmap function {name} "
                                 "using def_vmap.")
        if kwargs:
            args = _bind_kwargs(self.fun, name, args, kwargs)
        from funcgrad.transforms.ad import _as_value
        leaves, in_tree = tree_flatten(tuple(args))
        leaves = [_as_value(x) for x in leaves]
        store = {}

        def fun_flat(*xs):
            ol, store["out_tree"] = tree_flatten(self.fun(*tree_unflatten(in_tree, list(xs))))
            return [_as_value(o) for o in ol]

        rec = _Rec("custom_vmap", name, fun_flat, [aval_of(x) for x in leaves])
        n_args = len(leaves)
        rec, leaves, _ = _closure_converted(
            rec, leaves, lambda f, avals: _Rec("custom_vmap", name, f, avals))
        rec.rule, rec.in_tree, rec.n_args = self.vmap_rule, in_tree, n_args
        rec.out_tree = store["out_tree"]
        return _bind_group(custom_vmap_call_p, rec, leaves, store["out_tree"])


def _bind_kwargs(fun, name, args, kwargs):
    """Keyword arguments as positional ones, in fun's parameter order (JAX resolves them so)."""
    import inspect
    try:
        bound = inspect.signature(fun).bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{name}: {e}\n  at {user_frame_src()}") from None
    if bound.kwargs:
        raise TypeError(f"{name}: custom_vmap functions take keyword-only arguments "
                        f"{sorted(bound.kwargs)} only by position\n  at {user_frame_src()}")
    return bound.args

