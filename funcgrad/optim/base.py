"""Optimizer building blocks (optax's shape): GradientTransformation, chain, apply_updates."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import numpy as np

from funcgrad import numpy as fnp
from funcgrad.core.dtypes import dtype_kind, finfo
from funcgrad.tree_util import tree_leaves, tree_map

Params = Any  # a pytree of arrays
Updates = Params  # gradients, or updates derived from them: a pytree shaped like the params
OptState = Any  # a pytree (usually NamedTuples of arrays)
ArrayTree = Any  # any pytree of arrays
Schedule = Callable[[Any], Any]  # step count -> value
ScalarOrSchedule = Any  # a float, a scalar array, or a Schedule
MaskOrFn = Any  # None, a pytree of bools, or a function params -> pytree of bools


class TransformInitFn(Protocol):
    """``init(params) -> state``."""

    def __call__(self, params: Params) -> OptState:
        """Builds the initial state for ``params``."""


class TransformUpdateFn(Protocol):
    """``update(updates, state, params=None) -> (updates, state)``."""

    def __call__(self, updates: Updates, state: OptState,
                 params: Params | None = None) -> tuple[Updates, OptState]:
        """Transforms ``updates``."""


class TransformUpdateExtraArgsFn(Protocol):
    """``update(updates, state, params=None, **extra_args) -> (updates, state)``."""

    def __call__(self, updates: Updates, state: OptState, params: Params | None = None,
                 **extra_args: Any) -> tuple[Updates, OptState]:
        """Transforms ``updates``; may read keyword arguments such as ``value``."""

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


class GradientTransformationExtraArgs(GradientTransformation):
    """A GradientTransformation whose ``update`` accepts keyword ``**extra_args`` (for example
    ``value=`` for Polyak step sizes and line searches) and forwards them to inner transforms.

    Example:
        >>> from funcgrad import optim
        >>> t = optim.chain(optim.scale(2.0))
        >>> isinstance(t, optim.GradientTransformationExtraArgs)
        True
        >>> t.update(fnp.ones(1), t.init(None), value=3.0)[0].tolist()
        [2.0]
    """


def with_extra_args_support(tx: GradientTransformation) -> GradientTransformationExtraArgs:
    """Wraps ``tx`` so that its ``update`` accepts (and ignores) keyword extra arguments.

    Example:
        >>> t = with_extra_args_support(identity())
        >>> t.update(1.0, t.init(None), value=2.0)[0]
        1.0
    """
    if isinstance(tx, GradientTransformationExtraArgs):
        return tx

    def update(updates, state, params=None, **extra_args):
        del extra_args
        return tx.update(updates, state, params)
    return GradientTransformationExtraArgs(tx.init, update)


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


def set_to_zero() -> GradientTransformation:
    """Replaces every update by zeros (used to freeze parameters).

    Example:
        >>> t = set_to_zero()
        >>> t.update(fnp.ones(2), t.init(None))[0].tolist()
        [0.0, 0.0]
    """
    def update(updates, state, params=None):
        del params
        return tree_map(fnp.zeros_like, updates), state
    return GradientTransformation(init_empty_state, update)


def stateless(f: Callable) -> GradientTransformation:
    """A stateless transformation from ``f(updates, params) -> updates`` (whole trees).

    Example:
        >>> t = stateless(lambda u, p: tree_map(lambda x: 2 * x, u))
        >>> t.update(fnp.ones(1), t.init(None))[0].tolist()
        [2.0]
    """
    def update(updates, state, params=None):
        del state
        return f(updates, params), EmptyState()
    return GradientTransformation(init_empty_state, update)


def stateless_with_tree_map(f: Callable) -> GradientTransformation:
    """A stateless transformation from a leaf function ``f(update, param) -> update``
    (``param`` is None when no params are passed).

    Example:
        >>> t = stateless_with_tree_map(lambda g, p: -g)
        >>> t.update(fnp.ones(1), t.init(None))[0].tolist()
        [-1.0]
    """
    def update(updates, state, params=None):
        del state
        if params is not None:
            return tree_map(f, updates, params), EmptyState()
        return tree_map(lambda u: f(u, None), updates), EmptyState()
    return GradientTransformation(init_empty_state, update)


def chain(*transforms: GradientTransformation) -> GradientTransformationExtraArgs:
    """Applies transformations one after the other; the state is the tuple of their states.

    Args:
        *transforms: transformations, applied left to right.

    Returns:
        A transformation whose state is ``tuple(t.init(params) for t in transforms)``.

    Example:
        >>> from funcgrad import optim
        >>> adam = optim.chain(optim.scale_by_adam(), optim.scale_by_learning_rate(1e-3))
    """
    transforms = tuple(with_extra_args_support(t) for t in transforms)
    init_fns = tuple(t.init for t in transforms)
    update_fns = tuple(t.update for t in transforms)

    def init(params):
        return tuple(fn(params) for fn in init_fns)

    def update(updates, state, params=None, **extra_args):
        if len(state) != len(update_fns):
            raise ValueError(f"chain: the state has {len(state)} entries but the chain has "
                             f"{len(update_fns)} transformations; was it made by this chain's "
                             "init?")
        new_state = []
        for fn, s in zip(update_fns, state):
            updates, s = fn(updates, s, params, **extra_args)
            new_state.append(s)
        return updates, tuple(new_state)

    return GradientTransformationExtraArgs(init, update)


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



def zero_count():
    """A fresh step counter: an int32 scalar array."""
    return fnp.zeros((), np.int32)


def safe_increment(count):
    """count + 1, saturating at its dtype's maximum instead of wrapping (int or float counts).

    Example:
        >>> int(safe_increment(fnp.asarray(2147483647, fnp.int32)))
        2147483647
    """
    count = fnp.asarray(count)
    dt = np.dtype(count.dtype)
    if dtype_kind(dt) in "iu":
        top = int(np.iinfo(dt).max)
    elif dtype_kind(dt) == "f":
        top = float(finfo(dt).max)
    else:
        raise ValueError(f"safe_increment: cannot increment a count of dtype {dt}; use an "
                         "integer or floating dtype")
    top = fnp.asarray(top, dt)
    return fnp.where(count < top, count + fnp.asarray(1, dt), top)


safe_int32_increment = safe_increment


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
