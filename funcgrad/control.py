"""Structured control flow (lax.scan, fori_loop, while_loop, map, cond, switch) by unrolling.

funcgrad has no loop or branch primitives: `fori_loop` and `scan` call their body once per
iteration while the program is traced, so the trip count must be known then (a Python int, a
static argument of jit, or a concrete array), and a jitted loop of n steps becomes an
expression n bodies long. `grad`, `vmap` and `jit` see ordinary equations, so every
transformation composes with them, and a loop inside jit still replays as one plan (one CUDA
graph on the GPU): running k training steps per jitted call divides the per-call host cost by k.
`cond` with a traced predicate evaluates both branches and selects, as `where` does; `switch`
with a traced index evaluates every branch and gathers (an index out of range raises).
"""
from __future__ import annotations

import builtins
from typing import Any, Callable

import numpy as np

from .core import ArrayBase, ConcretizationError, Tracer, aval_of, user_frame_src
from .tree_util import tree_flatten, tree_map, tree_structure, tree_unflatten


def _types(tree) -> tuple:
    """(structure, (shape, dtype) per leaf) of a pytree of arrays and scalars."""
    leaves, struct = tree_flatten(tree)
    return struct, tuple(_aval(leaf) for leaf in leaves)


# a Python number in a first value is weakly typed, as in JAX: it takes the dtype that the
# next value gives it (a float may become float64, an int any integer or float type)
_WEAK_KINDS = {bool: "b", int: "biuf", float: "f"}


def _show(types) -> str:
    struct, avals = types
    return f"{struct} with leaves [{', '.join(a.str_short() for a in avals)}]"


class _SameTypes:
    """Successive values (loop carries, scan outputs) must keep one pytree structure, shapes
    and dtypes; `types` is the latest accepted value's."""

    def __init__(self, first):
        self.types = _types(first)
        self.weak = tuple(_WEAK_KINDS.get(type(leaf)) for leaf in tree_flatten(first)[0])

    def accept(self, value) -> bool:
        got = _types(value)
        (es, ea), (gs, ga) = self.types, got
        ok = es == gs and len(ea) == len(ga) and all(
            e == g or (w is not None and g.shape == () and g.dtype.kind in w)
            for e, g, w in zip(ea, ga, self.weak))
        if ok:
            self.types, self.weak = got, (None,) * len(ga)
        return ok


def _check_carry(name: str, what: str, carry: _SameTypes, value):
    expected = carry.types
    if not carry.accept(value):
        raise TypeError(f"{name}: {what} must have the same pytree structure, shapes and dtypes "
                        f"as the initial carry {_show(expected)}, but got {_show(_types(value))}"
                        f"\n  at {user_frame_src()}")


def _static_int(x, name: str, arg: str) -> int:
    if isinstance(x, Tracer):
        raise ConcretizationError(
            f"{name}: {arg} is a traced value {x.aval.str_short()}, but funcgrad unrolls loops "
            f"while tracing, so the trip count must be known: pass a Python int, or make it a "
            f"static argument of jit (static_argnums).\n  at {user_frame_src()}")
    if np.ndim(x) != 0 or np.asarray(x).dtype.kind not in "iu" and not isinstance(x, int):
        raise TypeError(f"{name}: {arg} must be an integer scalar, got {x!r}\n"
                        f"  at {user_frame_src()}")
    return int(x)


def fori_loop(lower, upper, body_fun: Callable, init_val: Any) -> Any:
    """Loop `val = body_fun(i, val)` for i in [lower, upper), like `jax.lax.fori_loop`.

    The bounds must be concrete; `i` is an int32 scalar array. The carry must keep its pytree
    structure, shapes and dtypes. The loop is unrolled while tracing (see the module docstring).

    Args:
        lower, upper: the loop bounds (Python ints or concrete integer arrays).
        body_fun: (i, val) -> val.
        init_val: the initial carry (a pytree of arrays).

    Returns:
        The final carry.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> from funcgrad import lax
        >>> float(lax.fori_loop(0, 4, lambda i, x: x * 2.0 + i, fnp.asarray(1.0)))
        27.0
    """
    from . import numpy as fnp
    lo = _static_int(lower, "fori_loop", "lower")
    hi = _static_int(upper, "fori_loop", "upper")
    carry = _SameTypes(init_val)
    val = init_val
    for i in range(lo, hi):
        val = body_fun(fnp.asarray(i, np.int32), val)
        _check_carry("fori_loop", "body_fun's result", carry, val)
    return val


def _aval(x):
    """The abstract value of an array, tracer, numpy array, Python scalar or nested list."""
    return aval_of(x) if isinstance(x, (ArrayBase, np.ndarray, np.generic, bool, int, float)) \
        else aval_of(np.asarray(x))


def _scan_length(name: str, x_leaves, length) -> int:
    lengths = set()
    for leaf in x_leaves:
        shape = _aval(leaf).shape
        if not shape:
            raise TypeError(f"{name}: every leaf of xs needs a leading axis to scan over, got a "
                            f"scalar\n  at {user_frame_src()}")
        lengths.add(shape[0])
    if length is not None:
        lengths.add(_static_int(length, name, "length"))
    if not lengths:
        raise TypeError(f"{name}: give xs or length\n  at {user_frame_src()}")
    if len(lengths) > 1:
        raise ValueError(f"{name}: xs leaves and length disagree on the number of iterations: "
                         f"{sorted(lengths)}\n  at {user_frame_src()}")
    return lengths.pop()


def scan(f: Callable, init: Any, xs: Any = None, length: int | None = None,
         reverse: bool = False) -> tuple[Any, Any]:
    """Scan `f` over the leading axis of `xs` with a carry, like `jax.lax.scan`.

    `carry, y = f(carry, x)` runs once per slice `x` of `xs` (in reverse with reverse=True);
    the `y`s are stacked along a new leading axis. The number of iterations must be known while
    tracing (the leading axis of xs, or `length`); the loop is unrolled (module docstring).
    With zero iterations, `f` runs once on zero slices to learn the shapes of the `y`s.

    Args:
        f: (carry, x) -> (carry, y), with a carry of unchanging structure, shapes and dtypes.
        init: the initial carry (a pytree).
        xs: a pytree of arrays with a common leading axis, or None (then give `length`).
        length: the number of iterations when xs is None (checked against xs otherwise).
        reverse: scan from the last slice to the first (ys keep xs's order).

    Returns:
        (final carry, stacked ys).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> from funcgrad import lax
        >>> total, sums = lax.scan(lambda c, x: (c + x, c + x), 0.0, fnp.arange(4.0))
        >>> float(total), sums.tolist()
        (6.0, [0.0, 1.0, 3.0, 6.0])
    """
    from . import numpy as fnp
    x_leaves, x_tree = tree_flatten(xs)
    n = _scan_length("scan", x_leaves, length)
    carry_types, y_types = _SameTypes(init), None

    def slice_at(i):
        return tree_unflatten(x_tree, [leaf[i] for leaf in x_leaves])

    carry, ys = init, []
    for i in (range(n - 1, -1, -1) if reverse else range(n)):
        carry, y = f(carry, slice_at(i))
        _check_carry("scan", "the carry f returns", carry_types, carry)
        if y_types is None:
            y_types = _SameTypes(y)
        elif not y_types.accept(y):
            raise TypeError(f"scan: f must return ys of one structure, shapes and dtypes; got "
                            f"{_show(_types(y))} after {_show(y_types.types)}\n"
                            f"  at {user_frame_src()}")
        ys.append(y)
    if reverse:
        ys.reverse()
    if n == 0:
        zero_slices = [fnp.zeros(a.shape[1:], a.dtype) for a in builtins.map(_aval, x_leaves)]
        _, y0 = f(init, tree_unflatten(x_tree, zero_slices))
        return carry, tree_map(lambda y: fnp.zeros((0,) + _aval(y).shape, _aval(y).dtype), y0)
    y_struct = tree_structure(ys[0])
    columns = zip(*[tree_flatten(y)[0] for y in ys])
    return carry, tree_unflatten(y_struct, [fnp.stack(list(c)) for c in columns])


def map(f: Callable, xs: Any) -> Any:  # noqa: A001 - JAX's name (lax.map)
    """Apply `f` to each slice of `xs` along its leading axis and stack the results.

    Like `jax.lax.map`; an unrolled `scan` without a carry (for batching, prefer `vmap`).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> from funcgrad import lax
        >>> lax.map(lambda row: row.sum(), fnp.ones((3, 2))).tolist()
        [2.0, 2.0, 2.0]
    """
    return scan(lambda c, x: (c, f(x)), (), xs)[1]


def cond(pred, true_fun: Callable, false_fun: Callable, *operands) -> Any:
    """`true_fun(*operands)` if pred else `false_fun(*operands)`, like `jax.lax.cond`.

    A concrete predicate runs one branch. A traced one (inside jit, grad or vmap) runs both
    and selects leaf by leaf, so both branches must return the same structure, shapes and
    dtypes; as with `where`, a branch not taken still runs, and a NaN in its backward pass
    (e.g. sqrt at 0) can reach the gradient — guard its input as you would for `where`.

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
    from . import numpy as fnp
    p_aval = aval_of(pred)
    if p_aval.shape != () or p_aval.dtype.kind not in "biuf":
        raise TypeError(f"cond: pred must be a boolean or number scalar, got "
                        f"{p_aval.str_short()}\n  at {user_frame_src()}")
    if not isinstance(pred, Tracer):
        return (true_fun if bool(pred) else false_fun)(*operands)
    t, f = true_fun(*operands), false_fun(*operands)
    if _types(t) != _types(f):
        raise TypeError(f"cond: true_fun and false_fun must return the same structure, shapes "
                        f"and dtypes, got {_show(_types(t))} and {_show(_types(f))}\n"
                        f"  at {user_frame_src()}")
    p = pred if p_aval.dtype == np.bool_ else pred != 0
    return tree_map(lambda a, b: fnp.where(p, a, b), t, f)


def switch(index, branches, *operands) -> Any:
    """`branches[index](*operands)`, like `jax.lax.switch` but without clamping the index.

    A concrete index runs one branch. A traced one runs every branch and picks the result
    with an indexed gather, so all branches must return the same structure, shapes and dtypes,
    and an index out of range raises IndexError (JAX clamps it into range instead).

    Args:
        index: an integer scalar.
        branches: a sequence of functions of `operands`.
        *operands: the branches' arguments.

    Example:
        >>> import funcgrad
        >>> from funcgrad import lax
        >>> fs = [lambda x: x + 1.0, lambda x: x * 10.0, lambda x: -x]
        >>> f = funcgrad.jit(lambda i, x: lax.switch(i, fs, x))
        >>> [float(f(i, 2.0)) for i in range(3)]
        [3.0, 20.0, -2.0]
    """
    from . import numpy as fnp
    branches = list(branches)
    i_aval = _aval(index)
    if i_aval.shape != () or i_aval.dtype.kind not in "iu":
        raise TypeError(f"switch: index must be an integer scalar, got {i_aval.str_short()}\n"
                        f"  at {user_frame_src()}")
    if not branches:
        raise ValueError(f"switch: needs at least one branch\n  at {user_frame_src()}")
    if not isinstance(index, Tracer):
        k = int(index)
        if not 0 <= k < len(branches):
            raise IndexError(f"switch: index {k} is out of range for {len(branches)} branches\n"
                             f"  at {user_frame_src()}")
        return branches[k](*operands)
    outs = [b(*operands) for b in branches]
    types = [_types(o) for o in outs]
    if any(t != types[0] for t in types):
        raise TypeError(f"switch: every branch must return the same structure, shapes and "
                        f"dtypes, got {'; '.join(_show(t) for t in types)}\n"
                        f"  at {user_frame_src()}")
    columns = zip(*[tree_flatten(o)[0] for o in outs])
    return tree_unflatten(types[0][0], [fnp.stack(list(c))[index] for c in columns])


def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any) -> Any:
    """`while cond_fun(val): val = body_fun(val)`, like `jax.lax.while_loop`.

    The condition must be concrete every time it is checked, since funcgrad unrolls loops while
    tracing: outside jit/grad/vmap that always holds; inside them the condition may depend only
    on concrete parts of the carry (e.g. a Python int counter). A traced condition raises and
    suggests `fori_loop` with a static bound. The carry keeps its structure, shapes and dtypes.

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
    carry = _SameTypes(init_val)
    val = init_val
    while True:
        c = cond_fun(val)
        if isinstance(c, Tracer):
            raise ConcretizationError(
                f"while_loop: cond_fun returned a traced value {c.aval.str_short()}; funcgrad "
                f"unrolls loops while tracing, so the condition must be concrete. Use "
                f"fori_loop with a static trip count (or scan), or keep the condition on "
                f"concrete parts of the carry.\n  at {user_frame_src()}")
        c_aval = _aval(c)
        if c_aval.shape != () or c_aval.dtype.kind not in "biuf":
            raise TypeError(f"while_loop: cond_fun must return a boolean scalar, got "
                            f"{c_aval.str_short()}\n  at {user_frame_src()}")
        if not bool(c):
            return val
        val = body_fun(val)
        _check_carry("while_loop", "body_fun's result", carry, val)
