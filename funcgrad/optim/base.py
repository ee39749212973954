"""Optimizer building blocks (optax's shape): GradientTransformation, chain, apply_updates."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from .. import numpy as fnp
from ..tree_util import tree_leaves, tree_map

Params = Any  # a pytree of arrays
Updates = Params  # gradients, or updates derived from them: a pytree shaped like the params
OptState = Any  # a pytree (usually NamedTuples of arrays)

NO_PARAMS_MSG = ("You are using a transformation that requires the current value of the "
                 "parameters, but you did not pass `params` when calling `update`.")


class GradientTransformation(NamedTuple):
    """A pair of pure functions: ``init(params) -> state`` and
    ``update(updates, state, params=None) -> (updates, state)``.

    Because both are pure and written with funcgrad.numpy, a whole training step (loss, grad,
    update, apply) traces into one expression.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> from funcgrad import optim
        >>> opt = optim.sgd(0.1)
        >>> params = {"w": fnp.ones(3)}
        >>> state = opt.init(params)
        >>> updates, state = opt.update({"w": fnp.ones(3)}, state, params)
        >>> optim.apply_updates(params, updates)["w"].tolist()
        [0.8999999761581421, 0.8999999761581421, 0.8999999761581421]
    """

    init: Callable[[Params], OptState]
    update: Callable[..., tuple[Updates, OptState]]


class EmptyState(NamedTuple):
    """The state of a stateless transformation (a pytree with no leaves)."""


def init_empty_state(params: Params) -> EmptyState:
    """An ``init`` for stateless transformations."""
    del params
    return EmptyState()


def identity() -> GradientTransformation:
    """The transformation that leaves updates unchanged.

    Example:
        >>> t = identity()
        >>> t.update({"g": 1.0}, t.init(None))
        ({'g': 1.0}, EmptyState())
    """
    def update(updates, state, params=None):
        del params
        return updates, state
    return GradientTransformation(init_empty_state, update)


def chain(*transforms: GradientTransformation) -> GradientTransformation:
    """Applies transformations one after the other; the state is the tuple of their states.

    Args:
        *transforms: transformations, applied left to right.

    Returns:
        A transformation whose state is ``tuple(t.init(params) for t in transforms)``.

    Example:
        >>> from funcgrad import optim
        >>> adam = optim.chain(optim.scale_by_adam(), optim.scale_by_learning_rate(1e-3))
    """
    init_fns = tuple(t.init for t in transforms)
    update_fns = tuple(t.update for t in transforms)

    def init(params):
        return tuple(fn(params) for fn in init_fns)

    def update(updates, state, params=None):
        if len(state) != len(update_fns):
            raise ValueError(f"chain: the state has {len(state)} entries but the chain has "
                             f"{len(update_fns)} transformations; was it made by this chain's "
                             "init?")
        new_state = []
        for fn, s in zip(update_fns, state):
            updates, s = fn(updates, s, params)
            new_state.append(s)
        return updates, tuple(new_state)

    return GradientTransformation(init, update)


def apply_updates(params: Params, updates: Updates) -> Params:
    """Adds updates to parameters, keeping each parameter's dtype (``None`` leaves stay None).

    Args:
        params: a pytree of arrays.
        updates: a pytree of the same structure (e.g. from an optimizer's ``update``).

    Returns:
        ``params + updates`` leaf by leaf, cast back to the parameters' dtypes.

    Example:
        >>> apply_updates({"w": fnp.ones(2)}, {"w": fnp.full(2, 0.5)})["w"].tolist()
        [1.5, 1.5]
    """
    def add(p, u):
        if p is None:
            return None
        p = fnp.asarray(p)
        return fnp.asarray(p + u, p.dtype)
    return tree_map(add, params, updates, is_leaf=lambda x: x is None)


# ---------------------------------------------------------------------------------------------
# small numerics shared by the transformations
# ---------------------------------------------------------------------------------------------

_INT32_MAX = int(np.iinfo(np.int32).max)


def zero_count():
    """A fresh step counter: an int32 scalar array."""
    return fnp.zeros((), np.int32)


def safe_increment(count):
    """count + 1, saturating at the int32 maximum instead of wrapping."""
    count = fnp.asarray(count)
    return fnp.where(count < _INT32_MAX, count + 1, _INT32_MAX)


def tree_zeros_like(tree, dtype=None):
    """Zeros shaped like each leaf (optionally of another dtype)."""
    return tree_map(lambda x: fnp.zeros_like(x, dtype=dtype), tree)


def tree_cast(tree, dtype):
    """Each leaf cast to ``dtype`` (unchanged when dtype is None)."""
    if dtype is None:
        return tree
    return tree_map(lambda x: fnp.asarray(x, dtype), tree)


def global_norm(updates: Updates):
    """The L2 norm of all leaves together: ``sqrt(sum of squares of every element)``.

    Example:
        >>> float(global_norm({"a": fnp.asarray([3.0]), "b": fnp.asarray([4.0])}))
        5.0
    """
    leaves = tree_leaves(updates)
    if not leaves:
        return fnp.zeros((), np.float32)
    total = sum(fnp.sum(fnp.square(fnp.asarray(x))) for x in leaves)
    return fnp.sqrt(total)


def cast_like(value, x):
    """A hyperparameter (Python number, schedule output or array) ready to multiply ``x``:
    Python numbers stay weak; arrays are cast to x's dtype so the update keeps its dtype."""
    if type(value) in (int, float):
        return value
    return fnp.asarray(value, fnp.asarray(x).dtype)
