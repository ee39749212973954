"""Transformations of transformations (optax's wrappers): masked, apply_if_finite, MultiSteps,
inject_hyperparams. None of them branches in Python on array values: both outcomes are computed
and chosen with ``where``, so a step that uses them still traces into one expression."""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from funcgrad import numpy as fnp
from funcgrad.tree_util import tree_leaves, tree_map, tree_structure
from funcgrad.core.dtypes import dtype_kind
from funcgrad.optim.base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    safe_increment,
    tree_zeros_like,
    with_extra_args_support,
    zero_count,
)


def _tree_select(pred, on_true, on_false):
    """Leaf-wise ``where(pred, a, b)`` of two pytrees of one structure (pred a bool scalar)."""
    return tree_map(lambda a, b: fnp.where(pred, a, b), on_true, on_false)


# ---------------------------------------------------------------------------------------------
# masked
# ---------------------------------------------------------------------------------------------

class MaskedState(NamedTuple):
    """The state of the inner transformation, kept only for the unmasked leaves."""
    inner_state: Any


class MaskedNode(NamedTuple):
    """Stands in for a masked-out leaf: a pytree node with no leaves, so the inner
    transformation never sees (or keeps state for) that leaf."""


def _apply_mask(tree, mask_tree):
    def keep(m, sub):
        if not isinstance(m, (bool, np.bool_)):
            raise TypeError(f"masked: mask leaves must be Python bools, got {type(m).__name__}")
        return sub if m else tree_map(lambda _: MaskedNode(), sub)
    return tree_map(keep, mask_tree, tree)


def masked(inner: GradientTransformation, mask, *,
           mask_compatible_extra_args: bool = False) -> GradientTransformationExtraArgs:
    """Applies ``inner`` only where ``mask`` is True; other updates pass through unchanged.

    Args:
        inner: the transformation to mask.
        mask: a pytree of bools with the structure of the params (or a prefix of it), or a
            function ``params -> such a pytree``.
        mask_compatible_extra_args: also mask extra keyword arguments shaped like the
            updates (others pass to ``inner`` unchanged).

    Example:
        >>> from funcgrad import optim
        >>> t = masked(optim.scale(0.0), {"w": True, "b": False})
        >>> t.update({"w": 1.0, "b": 1.0}, t.init({"w": 1.0, "b": 1.0}))[0]
        {'w': 0.0, 'b': 1.0}
    """
    inner = with_extra_args_support(inner)

    def mask_for(tree):
        return mask(tree) if callable(mask) else mask

    def init(params):
        return MaskedState(inner.init(_apply_mask(params, mask_for(params))))

    def update(updates, state, params=None, **extra_args):
        mask_tree = mask_for(updates)
        inner_params = None if params is None else _apply_mask(params, mask_tree)
        if mask_compatible_extra_args:
            struct = tree_structure(updates)
            extra_args = {k: (_apply_mask(v, mask_tree) if tree_structure(v) == struct else v)
                          for k, v in extra_args.items()}
        new, inner_state = inner.update(_apply_mask(updates, mask_tree), state.inner_state,
                                        inner_params, **extra_args)
        merged = tree_map(lambda m, n, old: n if m else old, mask_tree, new, updates)
        return merged, MaskedState(inner_state)
    return GradientTransformationExtraArgs(init, update)


# ---------------------------------------------------------------------------------------------
# apply_if_finite
# ---------------------------------------------------------------------------------------------

class ApplyIfFiniteState(NamedTuple):
    """Counts of non-finite updates, whether the last was finite, and the inner state."""
    notfinite_count: Any
    last_finite: Any
    total_notfinite: Any
    inner_state: Any


def apply_if_finite(inner: GradientTransformation,
                    max_consecutive_errors: int) -> GradientTransformationExtraArgs:
    """Skips updates containing NaN or Inf: the update becomes zero and the inner state is kept.

    After more than ``max_consecutive_errors`` non-finite updates in a row the update is applied
    anyway (so a persistent problem surfaces instead of silently freezing training).

    Args:
        inner: the transformation to protect.
        max_consecutive_errors: how many non-finite updates in a row to skip.

    Example:
        >>> from funcgrad import optim
        >>> t = apply_if_finite(optim.sgd(0.1), 3)
        >>> u, s = t.update(fnp.asarray([fnp.nan]), t.init(fnp.zeros(1)))
        >>> u.tolist(), int(s.notfinite_count)
        ([0.0], 1)
    """
    inner = with_extra_args_support(inner)

    def init(params):
        return ApplyIfFiniteState(notfinite_count=zero_count(),
                                  last_finite=fnp.asarray(True),
                                  total_notfinite=zero_count(),
                                  inner_state=inner.init(params))

    def update(updates, state, params=None, **extra_args):
        finite = fnp.asarray(True)
        for leaf in tree_leaves(updates):
            finite = finite & fnp.all(fnp.isfinite(leaf))
        notfinite_count = fnp.where(finite, 0, safe_increment(state.notfinite_count))
        apply = finite | (notfinite_count > max_consecutive_errors)
        new_updates, new_inner = inner.update(updates, state.inner_state, params, **extra_args)
        new_updates = _tree_select(apply, new_updates, tree_zeros_like(new_updates))
        new_inner = _tree_select(apply, new_inner, state.inner_state)
        total = fnp.where(finite, state.total_notfinite, safe_increment(state.total_notfinite))
        return new_updates, ApplyIfFiniteState(notfinite_count, finite, total, new_inner)
    return GradientTransformationExtraArgs(init, update)


# ---------------------------------------------------------------------------------------------
# MultiSteps: gradient accumulation
# ---------------------------------------------------------------------------------------------

class MultiStepsState(NamedTuple):
    """Gradient accumulation state.

    Attributes:
        mini_step: micro-steps accumulated since the last real update (int32).
        gradient_step: real updates applied so far (int32).
        inner_opt_state: the wrapped optimizer's state.
        acc_grads: the running mean (or sum) of the accumulated gradients.
        skip_state: whatever ``should_skip_update_fn`` returns as its state.
    """
    mini_step: Any
    gradient_step: Any
    inner_opt_state: Any
    acc_grads: Any
    skip_state: Any = ()


class MultiSteps:
    """Accumulates gradients over ``every_k_schedule`` calls and applies the inner optimizer
    once per k calls (optax's MultiSteps); in between, the updates are zero.

    With ``use_grad_mean`` (the default) the inner optimizer sees the mean of the k gradients,
    so k micro-batches equal one step on their union.

    Args:
        opt: the inner transformation.
        every_k_schedule: k, or a function ``gradient_step -> k``.
        use_grad_mean: average (True) or sum (False) the accumulated gradients.
        should_skip_update_fn: optional ``(updates, gradient_step, params) -> (skip, state)``;
            a skipped call changes nothing but ``skip_state``.

    Example:
        >>> from funcgrad import optim
        >>> opt = MultiSteps(optim.sgd(1.0), every_k_schedule=2)
        >>> state = opt.init(fnp.zeros(1))
        >>> u, state = opt.update(fnp.ones(1), state)         # accumulate: no update yet
        >>> u, state = opt.update(fnp.full(1, 3.0), state)    # apply the mean gradient, 2
        >>> u.tolist()
        [-2.0]
    """

    def __init__(self, opt: GradientTransformation, every_k_schedule: int | Callable,
                 use_grad_mean: bool = True, should_skip_update_fn: Callable | None = None,
                 accumulator_dtype=None):
        self._opt = with_extra_args_support(opt)
        self._accumulator_dtype = fnp.canonical_dtype(accumulator_dtype)
        if callable(every_k_schedule):
            self._every_k_schedule = every_k_schedule
        else:
            self._every_k_schedule = lambda step: every_k_schedule
        self._use_grad_mean = use_grad_mean
        self._should_skip_update_fn = should_skip_update_fn

    @property
    def inner_opt(self) -> GradientTransformation:
        return self._opt

    def init(self, params) -> MultiStepsState:
        skip_state = ()
        if self._should_skip_update_fn is not None:
            skip_state = self._should_skip_update_fn(
                tree_zeros_like(params), zero_count(), params)[1]
        return MultiStepsState(mini_step=zero_count(), gradient_step=zero_count(),
                               inner_opt_state=self._opt.init(params),
                               acc_grads=tree_zeros_like(params, self._accumulator_dtype),
                               skip_state=skip_state)

    def _accumulate(self, updates, acc, n_acc):
        if self._use_grad_mean:  # running mean: acc + (g - acc) / (n + 1)
            return tree_map(lambda g, a: a + (g - a) / (n_acc + 1), updates, acc)
        return tree_map(lambda g, a: g + a, updates, acc)

    def update(self, updates, state: MultiStepsState, params=None, **extra_args):
        k_steps = self._every_k_schedule(state.gradient_step)
        acc = self._accumulate(updates, state.acc_grads, state.mini_step)
        if self._accumulator_dtype is not None:
            acc = tree_map(lambda a: fnp.asarray(a, self._accumulator_dtype), acc)
        final_updates, final_inner = self._opt.update(
            tree_map(lambda a, g: fnp.asarray(a, fnp.asarray(g).dtype), acc, updates),
            state.inner_opt_state, params, **extra_args)
        is_final = state.mini_step >= k_steps - 1
        new_updates = _tree_select(is_final, final_updates, tree_zeros_like(final_updates))
        new_state = MultiStepsState(
            mini_step=fnp.where(is_final, 0, safe_increment(state.mini_step)),
            gradient_step=fnp.where(is_final, safe_increment(state.gradient_step),
                                    state.gradient_step),
            inner_opt_state=_tree_select(is_final, final_inner, state.inner_opt_state),
            acc_grads=_tree_select(is_final, tree_zeros_like(acc), acc),
            skip_state=state.skip_state)
        if self._should_skip_update_fn is None:
            return new_updates, new_state
        skip, skip_state = self._should_skip_update_fn(updates, state.gradient_step, params)
        new_updates = _tree_select(skip, tree_zeros_like(new_updates), new_updates)
        kept = state._replace(skip_state=skip_state)
        new_state = _tree_select(skip, kept._replace(skip_state=()),
                                 new_state._replace(skip_state=()))
        return new_updates, new_state._replace(skip_state=skip_state)

    def has_updated(self, state: MultiStepsState):
        """Whether the last call applied a real update (a bool scalar array)."""
        return (state.mini_step == 0) & (state.gradient_step > 0)

    def gradient_transformation(self) -> GradientTransformationExtraArgs:
        """This optimizer as a plain ``GradientTransformation`` (for ``chain`` and friends)."""
        return GradientTransformationExtraArgs(self.init, self.update)


# ---------------------------------------------------------------------------------------------
# inject_hyperparams
# ---------------------------------------------------------------------------------------------

class InjectHyperparamsState(NamedTuple):
    """The step count, the current hyperparameters (arrays, by name) and the inner state."""
    count: Any
    hyperparams: dict
    inner_state: Any


def _convert_floats(x, dtype):
    a = fnp.asarray(x)
    return fnp.asarray(a, dtype) if dtype is not None and dtype_kind(a.dtype) == "f" else a


def _float_dtype_of(tree, hyperparam_dtype):
    if hyperparam_dtype is not None:
        return fnp.canonical_dtype(hyperparam_dtype)
    leaves = tree_leaves(tree)
    dt = getattr(leaves[0], "dtype", None) if leaves else None
    return dt if dt is not None and dtype_kind(np.dtype(dt)) == "f" else None


def inject_hyperparams(inner_factory: Callable, static_args=(),
                       hyperparam_dtype=None) -> Callable[..., GradientTransformation]:
    """Wraps an optimizer factory so that its numeric hyperparameters live in the state.

    Numbers become arrays in ``state.hyperparams`` (read them, or assign new values between
    steps, without retracing a jitted step: they are inputs, not constants); schedules are
    evaluated at each step's count and their value is stored there too. Bools, None and the
    names in ``static_args`` stay static.

    Args:
        inner_factory: a function returning a GradientTransformation, e.g. ``optim.adam``.
        static_args: names of arguments to keep static.
        hyperparam_dtype: dtype of float hyperparameters (default: the first param's).

    Returns:
        A factory with ``inner_factory``'s signature.

    Example:
        >>> from funcgrad import optim
        >>> opt = inject_hyperparams(optim.sgd)(learning_rate=0.1)
        >>> state = opt.init(fnp.zeros(1))
        >>> state.hyperparams["learning_rate"] = fnp.asarray(0.5)
        >>> opt.update(fnp.ones(1), state)[0].tolist()
        [-0.5]
    """
    static_args = {static_args} if isinstance(static_args, str) else set(static_args)
    signature = inspect.signature(inner_factory)

    @functools.wraps(inner_factory)
    def wrapped(*args, **kwargs) -> GradientTransformation:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        sched_hps, numeric_hps, other_hps = {}, {}, {}
        for name, value in bound.arguments.items():
            if name in static_args or isinstance(value, (bool, np.bool_)):
                other_hps[name] = value
            elif callable(value):
                sched_hps[name] = value
            elif isinstance(value, (int, float, np.ndarray, np.number, fnp.ndarray)):
                numeric_hps[name] = value
            else:
                other_hps[name] = value

        def scheduled(count, dtype):
            return {k: _convert_floats(f(count), dtype) for k, f in sched_hps.items()}

        def init(params):
            dtype = _float_dtype_of(params, hyperparam_dtype)
            count = zero_count()
            hparams = {k: _convert_floats(v, dtype) for k, v in numeric_hps.items()}
            hparams.update(scheduled(count, dtype))
            inner_state = inner_factory(**other_hps, **hparams).init(params)
            return InjectHyperparamsState(count, hparams, inner_state)

        def update(updates, state, params=None, **extra_args):
            dtype = _float_dtype_of(updates, hyperparam_dtype)
            hparams = {k: _convert_floats(v, dtype) for k, v in state.hyperparams.items()}
            hparams.update(scheduled(state.count, dtype))
            updates, inner_state = with_extra_args_support(
                inner_factory(**other_hps, **hparams)).update(
                updates, state.inner_state, params, **extra_args)
            return updates, InjectHyperparamsState(safe_increment(state.count), hparams,
                                                   inner_state)
        return GradientTransformationExtraArgs(init, update)
    return wrapped


__all__ = ["ApplyIfFiniteState", "InjectHyperparamsState", "MaskedNode", "MaskedState",
           "MultiSteps", "MultiStepsState", "apply_if_finite", "inject_hyperparams", "masked"]
