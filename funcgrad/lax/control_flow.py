"""Structured control flow (lax.scan, fori_loop, while_loop, map, cond, switch) as primitives.

Each function traces its body once into a closed expression and binds a loop primitive
(funcgrad/prims/loops.py): the expression, the compile time and the plan do not grow with the trip
count, trip counts and conditions may be traced values, and `cond`/`switch` run one branch.
Reverse mode works through `scan` (and `fori_loop` with concrete bounds, which is a scan):
a forward scan stacks each step's carry, a reverse scan runs the body's vjp. `while_loop`
(and `fori_loop` with traced bounds) supports forward mode only, as in JAX. `vmap` batches
bodies; a batched `while_loop` condition runs until every member is done, as JAX does.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from funcgrad.transforms import loops as loops_rules  # noqa: F401  (registers jvp, reverse mode and batching)
from funcgrad.transforms.ad import _as_value
from funcgrad.core import ArrayBase, ShapedArray, Tracer, aval_of, user_frame_src
from funcgrad.core.dtypes import dtype_kind
from funcgrad.prims.loops import (
    bind_group,
    cond_p,
    make_cond,
    make_scan,
    make_while,
    scan_p,
    trace_closed,
    while_p,
)
from funcgrad.tree_util import tree_flatten, tree_unflatten


def _aval(x) -> ShapedArray:
    """The abstract value of an array, tracer, numpy array, Python scalar or nested list."""
    return aval_of(x) if isinstance(x, (ArrayBase, np.ndarray, np.generic, bool, int, float)) \
        else aval_of(np.asarray(x))


def _show(tree, avals) -> str:
    return f"{tree} with leaves [{', '.join(a.str_short() for a in avals)}]"


# a Python number in a first value is weakly typed, as in JAX: it takes the dtype that the
# loop body gives it (a float may become float64, an int any integer or float type)
_WEAK_KINDS = {bool: "b", int: "biuf", float: "f"}


class _Carry:
    """The initial carry of a loop: leaves, structure, avals, and which leaves are weak."""

    def __init__(self, init):
        leaves, self.tree = tree_flatten(init)
        self.weak = [_WEAK_KINDS.get(type(x)) for x in leaves]
        self.avals = [_aval(x) for x in leaves]
        self.leaves = leaves

    def settle(self, name: str, what: str, trace: Callable):
        """trace(carry avals) -> (result, out tree, out avals); traced again once if a weak
        leaf takes another dtype. Raises naming the user's line when the types differ."""
        res, tree, avals = trace(self.avals)
        if tree == self.tree and len(avals) == len(self.avals) and avals != self.avals and all(
                e == g or (w is not None and g.shape == () and dtype_kind(g.dtype) in w)
                for e, g, w in zip(self.avals, avals, self.weak)):
            self.avals = list(avals)
            res, tree, avals = trace(self.avals)
        if tree != self.tree or list(avals) != list(self.avals):
            raise TypeError(f"{name}: {what} must have the same pytree structure, shapes and "
                            f"dtypes as the initial carry {_show(self.tree, self.avals)}, but "
                            f"got {_show(tree, avals)}\n  at {user_frame_src()}")
        return res

    def operands(self) -> list:
        from funcgrad import numpy as fnp
        return [x if isinstance(x, ArrayBase) and x.dtype == a.dtype else fnp.asarray(x, a.dtype)
                for x, a in zip(self.leaves, self.avals)]


def _static_int(x, name: str, arg: str) -> int:
    if np.ndim(x) != 0 or dtype_kind(np.asarray(x).dtype) not in "iu" and not isinstance(x, int):
        raise TypeError(f"{name}: {arg} must be an integer scalar, got {x!r}\n"
                        f"  at {user_frame_src()}")
    return int(x)


def _int_scalar(x, name: str, arg: str):
    a = _aval(x)
    if a.shape != () or dtype_kind(a.dtype) not in "iu":
        raise TypeError(f"{name}: {arg} must be an integer scalar, got {a.str_short()}\n"
                        f"  at {user_frame_src()}")
    return x


def _scan_length(name: str, x_leaves, length) -> int:
    lengths = set()
    for leaf in x_leaves:
        shape = _aval(leaf).shape
        if not shape:
            raise TypeError(f"{name}: every leaf of xs needs a leading axis to scan over, got a "
                            f"scalar\n  at {user_frame_src()}")
        lengths.add(shape[0])
    if length is not None:
        if isinstance(length, Tracer):
            raise TypeError(f"{name}: length must be a concrete integer (it sets the shapes of "
                            f"the stacked outputs), got a traced {length.aval.str_short()}\n"
                            f"  at {user_frame_src()}")
        lengths.add(_static_int(length, name, "length"))
    if not lengths:
        raise TypeError(f"{name}: give xs or length\n  at {user_frame_src()}")
    if len(lengths) > 1:
        raise ValueError(f"{name}: xs leaves and length disagree on the number of iterations: "
                         f"{sorted(lengths)}\n  at {user_frame_src()}")
    return lengths.pop()


def _scan(name, what, f, init, xs, length, reverse, unroll):
    x_leaves, x_tree = tree_flatten(xs)
    x_leaves = [_as_value(x) for x in x_leaves]
    n = _scan_length(name, x_leaves, length)
    if isinstance(unroll, bool):
        unroll = n if unroll else 1
    if not isinstance(unroll, (int, np.integer)) or unroll < 0:
        raise TypeError(f"{name}: unroll must be a non-negative int or a bool, got {unroll!r}\n"
                        f"  at {user_frame_src()}")
    carry = _Carry(init)
    nk = len(carry.avals)
    x_avals = [ShapedArray(x.shape[1:], x.dtype) for x in x_leaves]
    store = {}

    def trace(c_avals):
        def fn(*a):
            out = f(tree_unflatten(carry.tree, list(a[:nk])),
                    tree_unflatten(x_tree, list(a[nk:])))
            if not (isinstance(out, (tuple, list)) and len(out) == 2):
                raise TypeError(f"{name}: f must return a pair (carry, y), got "
                                f"{type(out).__name__}\n  at {user_frame_src()}")
            cl, store["ctree"] = tree_flatten(out[0])
            yl, store["ytree"] = tree_flatten(out[1])
            cl = [_as_value(v) for v in cl]
            store["cavals"] = [v.aval for v in cl]
            return cl + [_as_value(v) for v in yl]
        rec = make_scan(fn, [], c_avals, x_avals, n, reverse, max(int(unroll), 1), name=name)
        return rec, store["ctree"], store["cavals"]

    rec, ops = carry.settle(name, what, trace)
    outs = bind_group(scan_p, rec, ops + carry.operands() + x_leaves)
    return tree_unflatten(carry.tree, outs[:nk]), tree_unflatten(store["ytree"], outs[nk:])


def scan(f: Callable, init: Any, xs: Any = None, length: int | None = None,
         reverse: bool = False, unroll: int | bool = 1) -> tuple[Any, Any]:
    """Scan `f` over the leading axis of `xs` with a carry, like `jax.lax.scan`.

    `carry, y = f(carry, x)` runs once per slice `x` of `xs` (last to first with
    reverse=True); the `y`s are stacked along a new leading axis. `f` is traced once into a
    loop primitive, so the expression does not grow with the number of steps; the number of
    steps (xs's leading axis, or `length`) must be concrete. Differentiable in both modes.

    Args:
        f: (carry, x) -> (carry, y), with a carry of unchanging structure, shapes and dtypes.
        init: the initial carry (a pytree).
        xs: a pytree of arrays with a common leading axis, or None (then give `length`).
        length: the number of iterations when xs is None (checked against xs otherwise).
        reverse: scan from the last slice to the first (ys keep xs's order).
        unroll: accepted for JAX compatibility (a performance hint; a non-negative int or a
            bool); the loop runs one body per iteration and the results do not depend on it.

    Returns:
        (final carry, stacked ys).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> from funcgrad import lax
        >>> total, sums = lax.scan(lambda c, x: (c + x, c + x), 0.0, fnp.arange(4.0))
        >>> float(total), sums.tolist()
        (6.0, [0.0, 1.0, 3.0, 6.0])
    """
    return _scan("scan", "the carry f returns", f, init, xs, length, reverse, unroll)


def fori_loop(lower, upper, body_fun: Callable, init_val: Any, *, unroll=None) -> Any:
    """Loop `val = body_fun(i, val)` for i in [lower, upper), like `jax.lax.fori_loop`.

    With concrete bounds (Python ints, concrete arrays) the loop is a `scan` of
    upper - lower steps, differentiable in both modes. With traced bounds it is a
    `while_loop` (forward-mode differentiable only, as in JAX). `i` is an int32 scalar for
    concrete bounds, the bounds' dtype otherwise.

    Args:
        lower, upper: the loop bounds (integer scalars, concrete or traced).
        body_fun: (i, val) -> val, keeping val's structure, shapes and dtypes.
        init_val: the initial carry (a pytree of arrays).
        unroll: passed to scan for concrete bounds (a performance hint).

    Returns:
        The final carry.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> from funcgrad import lax
        >>> float(lax.fori_loop(0, 4, lambda i, x: x * 2.0 + i, fnp.asarray(1.0)))
        27.0
    """
    from funcgrad import numpy as fnp
    _int_scalar(lower, "fori_loop", "lower")
    _int_scalar(upper, "fori_loop", "upper")
    what = "body_fun's result"
    if not isinstance(lower, Tracer) and not isinstance(upper, Tracer):
        lo, hi = int(lower), int(upper)
        carry = _Carry(init_val)
        nk = len(carry.avals)
        store = {}

        def trace(c_avals):
            def fn(i, *v):
                out = body_fun(i, tree_unflatten(carry.tree, list(v)))
                ol, store["tree"] = tree_flatten(out)
                ol = [_as_value(o) for o in ol]
                store["avals"] = [o.aval for o in ol]
                return [i + np.int32(1)] + ol
            rec = make_scan(fn, [], [ShapedArray((), np.int32)] + list(c_avals), [],
                            max(hi - lo, 0), unroll=max(int(unroll or 1), 1), name="fori_loop")
            return rec, store["tree"], store["avals"]

        rec, ops = carry.settle("fori_loop", what, trace)
        outs = bind_group(scan_p, rec, ops + [fnp.asarray(lo, np.int32)] + carry.operands())
        return tree_unflatten(carry.tree, outs[1:1 + nk])
    dt = np.promote_types(_aval(lower).dtype, _aval(upper).dtype)
    lo, hi = fnp.asarray(lower, dt), fnp.asarray(upper, dt)

    def body(pre, v):
        i, u = pre
        return (i + np.asarray(1, dt), u), body_fun(i, v)
    return _while("fori_loop", what, lambda pre, v: pre[0] < pre[1], body, init_val,
                  pre=(lo, hi))


def map(f: Callable, xs: Any, *, batch_size: int | None = None) -> Any:  # noqa: A001
    """Apply `f` to each slice of `xs` along its leading axis and stack the results.

    Like `jax.lax.map`: a `scan` without a carry. With `batch_size`, `f` is vmapped over
    batches of that many slices (the remainder in one last call).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> from funcgrad import lax
        >>> lax.map(lambda row: row.sum(), fnp.ones((3, 2))).tolist()
        [2.0, 2.0, 2.0]
    """
    if batch_size is None:
        return scan(lambda c, x: (c, f(x)), (), xs)[1]
    from funcgrad import numpy as fnp
    from funcgrad.transforms.batching import vmap
    if not isinstance(batch_size, int) or batch_size < 1:
        raise TypeError(f"map: batch_size must be a positive int, got {batch_size!r}\n"
                        f"  at {user_frame_src()}")
    leaves, tree = tree_flatten(xs)
    leaves = [_as_value(x) for x in leaves]
    n = _scan_length("map", leaves, None)
    nb, rem = divmod(n, batch_size)
    parts = []
    if nb:
        main = tree_unflatten(tree, [x[:nb * batch_size].reshape((nb, batch_size) + x.shape[1:])
                                     for x in leaves])
        ys = scan(lambda c, x: (c, vmap(f)(x)), (), main)[1]
        parts.append(tree_flatten(ys)[0])
        ytree = tree_flatten(ys)[1]
        parts[0] = [y.reshape((nb * batch_size,) + y.shape[2:]) for y in parts[0]]
    if rem:
        ys = vmap(f)(tree_unflatten(tree, [x[nb * batch_size:] for x in leaves]))
        leaves_r, ytree = tree_flatten(ys)
        parts.append(leaves_r)
    cols = zip(*parts)
    return tree_unflatten(ytree, [fnp.concatenate(list(c)) if len(c) > 1 else c[0]
                                  for c in cols])


def _branch_traces(name, fns, operands):
    """Trace each branch over the operands: (list of (expr, consts), out tree, out avals),
    raising when the branches disagree on structure, shapes or dtypes."""
    leaves, tree = tree_flatten(tuple(operands))
    leaves = [_as_value(x) for x in leaves]
    avals = [x.aval for x in leaves]
    traced, types = [], []
    for fn in fns:
        store = {}

        def flat(*a, fn=fn, store=store):
            out = fn(*tree_unflatten(tree, list(a)))
            ol, store["tree"] = tree_flatten(out)
            ol = [_as_value(o) for o in ol]
            store["avals"] = [o.aval for o in ol]
            return ol
        traced.append(trace_closed(flat, avals))
        types.append((store["tree"], store["avals"]))
    if any(t != types[0] for t in types):
        shown = " and " if len(types) == 2 else "; "
        what = ("true_fun and false_fun must" if name == "cond" else "every branch must")
        raise TypeError(f"{name}: {what} return the same structure, shapes and dtypes, got "
                        f"{shown.join(_show(*t) for t in types)}\n  at {user_frame_src()}")
    return traced, leaves, avals, types[0]


def _cond_bind(name, index, fns, operands):
    traced, leaves, avals, (out_tree, _) = _branch_traces(name, fns, operands)
    rec, extra = make_cond(traced, avals, name=name)
    outs = bind_group(cond_p, rec, [index] + leaves + extra)
    return tree_unflatten(out_tree, outs)


def cond(pred, true_fun: Callable, false_fun: Callable, *operands) -> Any:
    """`true_fun(*operands)` if pred else `false_fun(*operands)`, like `jax.lax.cond`.

    A concrete predicate calls one branch directly. A traced one (inside jit, grad or vmap)
    traces both branches, which must return the same structure, shapes and dtypes, into a
    `cond` primitive that executes only the selected branch (under vmap with a batched
    predicate both run and the results are selected, as in JAX).

    Args:
        pred: a boolean or number scalar.
        true_fun, false_fun: functions of `operands` returning pytrees of arrays.
        *operands: the branches' arguments.

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp
        >>> from funcgrad import lax
        >>> f = funcgrad.jit(lambda x: lax.cond(x > 0, lambda v: v * 2.0, lambda v: -v, x))
        >>> float(f(3.0)), float(f(-3.0))
        (6.0, 3.0)
    """
    from funcgrad import numpy as fnp
    p_aval = aval_of(pred) if isinstance(pred, ArrayBase) else _aval(pred)
    if p_aval.shape != () or dtype_kind(p_aval.dtype) not in "biuf":
        raise TypeError(f"cond: pred must be a boolean or number scalar, got "
                        f"{p_aval.str_short()}\n  at {user_frame_src()}")
    if not isinstance(pred, Tracer):
        return (true_fun if bool(pred) else false_fun)(*operands)
    index = fnp.asarray(pred if p_aval.dtype == np.bool_ else pred != 0, np.int32)
    return _cond_bind("cond", index, [false_fun, true_fun], operands)


def switch(index, branches, *operands) -> Any:
    """`branches[index](*operands)`, like `jax.lax.switch`.

    As in JAX, an index out of range is clamped into [0, len(branches) - 1]. A concrete index
    calls one branch directly; a traced one traces every branch (all must return the same
    structure, shapes and dtypes) into a `cond` primitive that runs only the selected one.

    Args:
        index: an integer scalar.
        branches: a sequence of functions of `operands`.
        *operands: the branches' arguments.

    Example:
        >>> import funcgrad
        >>> from funcgrad import lax
        >>> fs = [lambda x: x + 1.0, lambda x: x * 10.0, lambda x: -x]
        >>> f = funcgrad.jit(lambda i, x: lax.switch(i, fs, x))
        >>> [float(f(i, 2.0)) for i in range(3)] + [float(f(7, 2.0))]
        [3.0, 20.0, -2.0, -2.0]
    """
    from funcgrad import numpy as fnp
    branches = list(branches)
    _int_scalar(index, "switch", "index")
    if not branches:
        raise ValueError(f"switch: needs at least one branch\n  at {user_frame_src()}")
    if not isinstance(index, Tracer):
        return branches[min(max(int(index), 0), len(branches) - 1)](*operands)
    if len(branches) == 1:
        return branches[0](*operands)
    index = fnp.asarray(fnp.clip(index, 0, len(branches) - 1), np.int32)
    return _cond_bind("switch", index, branches, operands)


def _while(name, what, cond_fun, body_fun, init_val, pre=()):
    """A while primitive over (*pre, *leaves of init_val): cond_fun(pre, val) -> bool,
    body_fun(pre, val) -> (pre, val); `pre` (fori_loop's counter and bound) keeps its types,
    init_val's types are settled and checked. Returns the final val."""
    carry = _Carry(init_val)
    npre, pre_avals = len(pre), [x.aval for x in pre]
    store = {}

    def trace(c_avals):
        def c_fn(*a):
            p = _as_value(cond_fun(list(a[:npre]), tree_unflatten(carry.tree, list(a[npre:]))))
            if p.aval.shape != () or dtype_kind(p.dtype) not in "biuf":
                raise TypeError(f"{name}: cond_fun must return a boolean scalar, got "
                                f"{p.aval.str_short()}\n  at {user_frame_src()}")
            return [p if p.dtype == np.bool_ else p != 0]

        def b_fn(*a):
            pre_out, out = body_fun(list(a[:npre]), tree_unflatten(carry.tree, list(a[npre:])))
            ol, store["tree"] = tree_flatten(out)
            ol = [_as_value(o) for o in ol]
            store["avals"] = [o.aval for o in ol]
            return list(pre_out) + ol
        rec = make_while(c_fn, [], b_fn, [], pre_avals + list(c_avals), name=name)
        return rec, store["tree"], store["avals"]

    rec, ops = carry.settle(name, what, trace)
    outs = bind_group(while_p, rec, ops + list(pre) + carry.operands())
    return tree_unflatten(carry.tree, outs[npre:])


def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any) -> Any:
    """`while cond_fun(val): val = body_fun(val)`, like `jax.lax.while_loop`.

    Both functions are traced once into a `while` primitive, so the condition may depend on
    traced values (inside jit, vmap, jvp). Reverse-mode differentiation raises, as in JAX
    (the trip count is unknown when the backward pass is built); use `scan` or `fori_loop`
    with concrete bounds for that. On the GPU the condition is read back on the host each
    iteration. The carry keeps its structure, shapes and dtypes.

    Args:
        cond_fun: val -> a boolean scalar.
        body_fun: val -> val.
        init_val: the initial carry (a pytree).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> from funcgrad import lax
        >>> float(lax.while_loop(lambda x: x < 100.0, lambda x: x * 3.0, fnp.asarray(1.0)))
        243.0
    """
    return _while("while_loop", "body_fun's result", lambda pre, v: cond_fun(v),
                  lambda pre, v: ((), body_fun(v)), init_val)


from funcgrad.lax.associative import associative_scan  # noqa: E402,F401
