"""More of optax's combinators: partition (multi_transform), named_chain, flatten, lookahead,
conditional transforms, freezing, update skipping and monitoring. Conditions are applied with
``where`` (both branches computed) so a step still traces into one expression."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import numpy as np

from funcgrad import numpy as fnp
from funcgrad.tree_util import tree_flatten, tree_leaves, tree_map, tree_unflatten
from funcgrad.optim.base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    chain,
    safe_increment,
    set_to_zero,
    stateless,
    with_extra_args_support,
    zero_count,
)
from funcgrad.optim.transforms_misc import ema
from funcgrad.optim.wrappers import masked


def _select(pred, on_true, on_false):
    return tree_map(lambda a, b: fnp.where(pred, a, b), on_true, on_false)


# ---------------------------------------------------------------------------------------------
# combining
# ---------------------------------------------------------------------------------------------

def named_chain(*args: tuple[str, GradientTransformation]) -> GradientTransformationExtraArgs:
    """Like :func:`chain`, with the state a dict keyed by each transformation's name.

    Example:
        >>> from funcgrad import optim
        >>> t = named_chain(("clip", optim.clip(1.0)), ("sgd", optim.sgd(0.1)))
        >>> list(t.init(fnp.zeros(1)))
        ['clip', 'sgd']
    """
    names = [name for name, _ in args]
    if len(names) != len(set(names)):
        raise ValueError(f"named_chain: names must be unique, got {names}")
    transforms = [(name, with_extra_args_support(t)) for name, t in args]

    def init(params):
        return OrderedDict((name, t.init(params)) for name, t in transforms)

    def update(updates, state, params=None, **extra_args):
        new_state = OrderedDict()
        for name, t in transforms:
            updates, new_state[name] = t.update(updates, state[name], params, **extra_args)
        return updates, new_state
    return GradientTransformationExtraArgs(init, update)


class PartitionState(NamedTuple):
    """partition's state: each group's (masked) inner state, keyed by label."""
    inner_states: dict


MultiTransformState = PartitionState


def partition(transforms: dict, param_labels, *, mask_compatible_extra_args: bool = False
              ) -> GradientTransformationExtraArgs:
    """Applies ``transforms[label]`` to the params labelled ``label``.

    Args:
        transforms: label -> transformation.
        param_labels: a pytree of labels shaped like the params (or a prefix), or a function
            ``params -> such a pytree``.
        mask_compatible_extra_args: accepted for optax compatibility (extra args are passed
            to every group unchanged).

    Example:
        >>> from funcgrad import optim
        >>> t = partition({"a": optim.sgd(1.0), "b": optim.set_to_zero()}, {"w": "a", "v": "b"})
        >>> p = {"w": fnp.ones(1), "v": fnp.ones(1)}
        >>> u, _ = t.update(p, t.init(p), p)
        >>> u["w"].tolist(), u["v"].tolist()
        ([-1.0], [0.0])
    """
    del mask_compatible_extra_args
    transforms = {k: with_extra_args_support(v) for k, v in transforms.items()}

    def labels_for(tree):
        return param_labels(tree) if callable(param_labels) else param_labels

    def mask_for(labels, group):
        return tree_map(lambda label: label == group, labels)

    def init(params):
        labels = labels_for(params)
        missing = set(tree_leaves(labels)) - set(transforms)
        if missing:
            raise ValueError(f"partition: labels {sorted(missing)} have no transformation; "
                             f"transforms are for {sorted(transforms)}")
        return PartitionState({g: masked(t, mask_for(labels, g)).init(params)
                               for g, t in transforms.items()})

    def update(updates, state, params=None, **extra_args):
        labels = labels_for(updates)
        new_inner = {}
        for g, t in transforms.items():
            updates, new_inner[g] = masked(t, mask_for(labels, g)).update(
                updates, state.inner_states[g], params, **extra_args)
        return updates, PartitionState(new_inner)
    return GradientTransformationExtraArgs(init, update)


multi_transform = partition


def flatten(inner: GradientTransformation) -> GradientTransformationExtraArgs:
    """Runs ``inner`` on one flat vector of all leaves (ravelled and concatenated), so its
    state is a few large arrays instead of one per leaf.

    Example:
        >>> from funcgrad import optim
        >>> t = flatten(optim.sgd(1.0))
        >>> p = {"a": fnp.ones((2, 2)), "b": fnp.ones(3)}
        >>> t.update(p, t.init(p))[0]["a"].shape
        (2, 2)
    """
    inner = with_extra_args_support(inner)

    def flat(tree):
        return fnp.concatenate([fnp.reshape(fnp.asarray(x), (-1,)) for x in tree_leaves(tree)])

    def unflat(like, vec):
        leaves, treedef = tree_flatten(like)
        out, start = [], 0
        for leaf in leaves:
            size = int(np.prod(fnp.shape(leaf)))
            out.append(fnp.reshape(vec[start:start + size], fnp.shape(leaf)))
            start += size
        return tree_unflatten(treedef, out)

    def init(params):
        return inner.init(flat(params))

    def update(updates, state, params=None, **extra_args):
        flat_params = None if params is None else flat(params)
        new, state = inner.update(flat(updates), state, flat_params, **extra_args)
        return unflat(updates, new), state
    return GradientTransformationExtraArgs(init, update)


# ---------------------------------------------------------------------------------------------
# lookahead
# ---------------------------------------------------------------------------------------------

class LookaheadState(NamedTuple):
    """lookahead's state: the fast optimizer's state and the steps since the last sync."""
    fast_state: Any
    steps_since_sync: Any


class LookaheadParams(NamedTuple):
    """The fast and slow parameter copies lookahead works on."""
    fast: Any
    slow: Any

    @classmethod
    def init_synced(cls, params) -> LookaheadParams:
        """Both copies equal to ``params``."""
        return cls(fast=params, slow=params)


def lookahead(fast_optimizer: GradientTransformation, sync_period: int, slow_step_size: float,
              reset_state: bool = False) -> GradientTransformation:
    """Lookahead (Zhang et al., 2019): the fast weights take ``sync_period`` steps, then the
    slow weights move ``slow_step_size`` of the way to them and the fast weights reset there.

    Works on :class:`LookaheadParams`; its updates are LookaheadParams too.

    Example:
        >>> from funcgrad import optim
        >>> opt = lookahead(optim.sgd(0.1), sync_period=2, slow_step_size=0.5)
        >>> params = LookaheadParams.init_synced(fnp.ones(1))
        >>> state = opt.init(params)
        >>> for _ in range(2):
        ...     u, state = opt.update(fnp.ones(1), state, params)
        ...     params = optim.apply_updates(params, u)
        >>> [round(x, 6) for x in params.slow.tolist()]
        [0.9]
    """
    if sync_period < 1:
        raise ValueError("lookahead: sync_period must be >= 1")

    def init(params):
        fast = getattr(params, "fast", params)
        return LookaheadState(fast_optimizer.init(fast), zero_count())

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("lookahead needs the current LookaheadParams in `update`")
        updates, fast_state = fast_optimizer.update(updates, state.fast_state, params.fast)
        sync = state.steps_since_sync == (sync_period - 1)
        last_diff = tree_map(lambda f, u, s: f + u - s, params.fast, updates, params.slow)
        slow_updates = tree_map(lambda d: fnp.where(sync, slow_step_size * d, 0.0), last_diff)
        fast_updates = tree_map(lambda u, d: u - fnp.where(sync, (1 - slow_step_size) * d, 0.0),
                                updates, last_diff)
        if reset_state:
            fast_state = _select(sync, fast_optimizer.init(params.fast), fast_state)
        return (LookaheadParams(fast=fast_updates, slow=slow_updates),
                LookaheadState(fast_state, (state.steps_since_sync + 1) % sync_period))
    return GradientTransformation(init, update)


# ---------------------------------------------------------------------------------------------
# conditionality and freezing
# ---------------------------------------------------------------------------------------------

class ConditionFn(Protocol):
    """``should_transform_fn(step, **extra_args) -> bool scalar``."""

    def __call__(self, step, **extra_args: Any) -> Any:
        """Whether to apply the inner transformation at ``step``."""


ConditionFn = Callable[..., Any]
"""The type of conditionally_transform's / conditionally_mask's should_transform_fn: step
count (and extra arguments) -> a boolean scalar."""


class ConditionallyTransformState(NamedTuple):
    """The inner state and the step count."""
    inner_state: Any
    step: Any


class ConditionallyMaskState(NamedTuple):
    """The step count and the inner state."""
    step: Any
    inner_state: Any


def _conditional(inner, should_transform_fn, forward_extra_args, zero_rejected):
    inner = with_extra_args_support(inner)

    def run(updates, step, inner_state, params, extra_args):
        kwargs = extra_args if forward_extra_args else {}
        cond = fnp.asarray(should_transform_fn(step, **kwargs))
        new, new_inner = inner.update(updates, inner_state, params, **extra_args)
        rejected = tree_map(fnp.zeros_like, updates) if zero_rejected else updates
        return _select(cond, new, rejected), _select(cond, new_inner, inner_state)
    return inner, run


def conditionally_transform(inner: GradientTransformation, should_transform_fn: Callable,
                            forward_extra_args: bool = False
                            ) -> GradientTransformationExtraArgs:
    """Applies ``inner`` only at steps where ``should_transform_fn(step)`` is True; otherwise
    the updates pass through unchanged and the inner state is kept.

    Example:
        >>> from funcgrad import optim
        >>> t = conditionally_transform(optim.scale(2.0), lambda step: step >= 1)
        >>> s = t.init(fnp.zeros(1))
        >>> u, s = t.update(fnp.ones(1), s)
        >>> u.tolist(), t.update(fnp.ones(1), s)[0].tolist()
        ([1.0], [2.0])
    """
    inner, run = _conditional(inner, should_transform_fn, forward_extra_args, False)

    def init(params):
        return ConditionallyTransformState(inner.init(params), zero_count())

    def update(updates, state, params=None, **extra_args):
        new, inner_state = run(updates, state.step, state.inner_state, params, extra_args)
        return new, ConditionallyTransformState(inner_state, safe_increment(state.step))
    return GradientTransformationExtraArgs(init, update)


def conditionally_mask(inner: GradientTransformation, should_transform_fn: Callable,
                       forward_extra_args: bool = False) -> GradientTransformationExtraArgs:
    """Applies ``inner`` where ``should_transform_fn(step)`` is True; otherwise the updates
    become zeros and the inner state is kept.

    Example:
        >>> from funcgrad import optim
        >>> t = conditionally_mask(optim.sgd(1.0), lambda step: step >= 1)
        >>> t.update(fnp.ones(1), t.init(fnp.zeros(1)))[0].tolist()
        [0.0]
    """
    inner, run = _conditional(inner, should_transform_fn, forward_extra_args, True)

    def init(params):
        return ConditionallyMaskState(zero_count(), inner.init(params))

    def update(updates, state, params=None, **extra_args):
        new, inner_state = run(updates, state.step, state.inner_state, params, extra_args)
        return new, ConditionallyMaskState(safe_increment(state.step), inner_state)
    return GradientTransformationExtraArgs(init, update)


def freeze(mask) -> GradientTransformation:
    """Zeros the updates where ``mask`` is True (freezes those params).

    Example:
        >>> t = freeze({"a": True, "b": False})
        >>> p = {"a": fnp.ones(1), "b": fnp.ones(1)}
        >>> t.update(p, t.init(p))[0]["a"].tolist()
        [0.0]
    """
    return masked(set_to_zero(), mask)


def selective_transform(optimizer: GradientTransformation, *, freeze_mask
                        ) -> GradientTransformation:
    """Runs ``optimizer`` on the params where ``freeze_mask`` is False and zeros the rest
    (frozen params keep no optimizer state).

    Example:
        >>> from funcgrad import optim
        >>> t = selective_transform(optim.sgd(1.0), freeze_mask={"a": True, "b": False})
        >>> p = {"a": fnp.ones(1), "b": fnp.ones(1)}
        >>> u, _ = t.update(p, t.init(p))
        >>> u["a"].tolist(), u["b"].tolist()
        ([0.0], [-1.0])
    """
    def labels(params):
        del params
        return tree_map(lambda m: "freeze" if m else "train", freeze_mask)
    return partition({"train": optimizer, "freeze": set_to_zero()}, param_labels=labels)


# ---------------------------------------------------------------------------------------------
# skipping (for MultiSteps' should_skip_update_fn)
# ---------------------------------------------------------------------------------------------

class ShouldSkipUpdateFunction(Protocol):
    """``(updates, gradient_step, params) -> (should_skip bool scalar, state pytree)``."""

    def __call__(self, updates, gradient_step, params) -> tuple[Any, Any]:
        """Decides whether MultiSteps skips this update."""


def skip_not_finite(updates, gradient_step, params):
    """Skips updates containing NaN or Inf; reports how many entries were not finite.

    Example:
        >>> skip, info = skip_not_finite({"a": fnp.asarray([fnp.nan, 1.0])}, 0, None)
        >>> bool(skip), int(info["num_not_finite"])
        (True, 1)
    """
    del gradient_step, params
    num = sum(fnp.sum(~fnp.isfinite(x)) for x in tree_leaves(updates))
    num = fnp.asarray(num)
    skip = num > 0
    return skip, {"should_skip": skip, "num_not_finite": num}


def skip_large_updates(updates, gradient_step, params, max_squared_norm):
    """Skips updates whose squared global norm is not below ``max_squared_norm`` (or NaN).

    Example:
        >>> skip, info = skip_large_updates(fnp.asarray([3.0, 4.0]), 0, None, 10.0)
        >>> bool(skip), float(info["norm_squared"])
        (True, 25.0)
    """
    del gradient_step, params
    norm_sq = fnp.asarray(sum(fnp.sum(fnp.square(x)) for x in tree_leaves(updates)))
    skip = ~(norm_sq < max_squared_norm)
    return skip, {"should_skip": skip, "norm_squared": norm_sq}


# ---------------------------------------------------------------------------------------------
# monitoring
# ---------------------------------------------------------------------------------------------

class SnapshotState(NamedTuple):
    """The last measurement, under its name."""
    measurement: dict


def snapshot(measure_name: str, measure: Callable) -> GradientTransformation:
    """Records ``measure(updates)`` in the state (``measure(params)`` at init); the updates
    pass through.

    Example:
        >>> t = snapshot("norm", lambda u: fnp.sum(u ** 2))
        >>> float(t.update(fnp.asarray([3.0]), t.init(fnp.zeros(1)))[1].measurement["norm"])
        9.0
    """
    def init(params):
        return SnapshotState({measure_name: measure(params)})

    def update(updates, state, params=None):
        del params, state
        return updates, SnapshotState({measure_name: measure(updates)})
    return GradientTransformation(init, update)


class MonitorState(NamedTuple):
    """The measurements of the last step and the measures' own states."""
    measurements: dict
    measure_states: tuple


def monitor(measures: dict) -> GradientTransformationExtraArgs:
    """Records several measurements of the updates: each value is a function of the updates
    or a transformation whose output is the measurement. The updates pass through.

    Example:
        >>> t = monitor({"sum": lambda u: fnp.sum(u)})
        >>> float(t.update(fnp.asarray([1.0, 2.0]), t.init(fnp.zeros(2)))[1]
        ...       .measurements["sum"])
        3.0
    """
    measures = {name: with_extra_args_support(
        stateless(lambda u, _, m=m: m(u)) if not isinstance(m, GradientTransformation) else m)
        for name, m in measures.items()}
    names = tuple(measures)

    def init(params):
        return MonitorState({}, tuple(measures[n].init(params) for n in names))

    def update(updates, state, params=None, **extra_args):
        measurements, new_states = {}, []
        for i, name in enumerate(names):
            m, s = measures[name].update(updates, state.measure_states[i], params, **extra_args)
            measurements[name] = m
            new_states.append(s)
        return updates, MonitorState(measurements, tuple(new_states))
    return GradientTransformationExtraArgs(init, update)


def measure_with_ema(measure: Callable, decay: float, debias: bool = True,
                     accumulator_dtype=None) -> GradientTransformationExtraArgs:
    """A transformation whose output is an EMA of ``measure(updates)`` (for :func:`monitor`).

    Example:
        >>> t = measure_with_ema(lambda u: fnp.sum(u), 0.5, debias=False)
        >>> float(t.update(fnp.asarray([2.0]), t.init(fnp.zeros(1)))[0])
        1.0
    """
    base_ema = ema(decay, debias, accumulator_dtype)
    measurement_ema = base_ema._replace(init=lambda params: base_ema.init(measure(params)))
    return chain(stateless(lambda updates, _: measure(updates)), measurement_ema)


__all__ = ["ConditionallyMaskState", "ConditionallyTransformState", "LookaheadParams",
           "LookaheadState", "MonitorState", "MultiTransformState", "PartitionState",
           "ShouldSkipUpdateFunction", "SnapshotState", "conditionally_mask",
           "conditionally_transform", "flatten", "freeze", "lookahead", "measure_with_ema",
           "monitor", "multi_transform", "named_chain", "partition", "selective_transform",
           "skip_large_updates", "skip_not_finite", "snapshot"]
