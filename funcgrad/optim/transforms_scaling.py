"""Norm-based and step-size transformations (optax's): trust ratio, per-block norms,
normalize_by_update_norm, centralize, apply_every, optimistic gradients, DoG, Polyak steps."""
from __future__ import annotations

from typing import Any, NamedTuple

from funcgrad import numpy as fnp
from funcgrad.tree_util import tree_leaves, tree_map
from funcgrad.optim.base import (
    NO_PARAMS_MSG,
    EmptyState,
    GradientTransformation,
    GradientTransformationExtraArgs,
    init_empty_state,
    safe_increment,
    tree_cast,
    tree_zeros_like,
    zero_count,
)
from funcgrad.optim.numerics import safe_norm, safe_root_mean_squares

ScaleByTrustRatioState = EmptyState
ScaleState = EmptyState


def _tree_norm_sq(tree):
    leaves = tree_leaves(tree)
    if not leaves:
        return fnp.zeros((), fnp.float32)
    return sum(fnp.sum(fnp.square(fnp.asarray(x))) for x in leaves)


def scale_by_trust_ratio(min_norm: float = 0.0, trust_coefficient: float = 1.0,
                         eps: float = 0.0) -> GradientTransformation:
    """LARS/LAMB's layer-wise trust ratio: ``u * tc ||p|| / (||u|| + eps)`` per leaf (the ratio
    is 1 where either norm is zero; norms are floored at ``min_norm``).

    Example:
        >>> t = scale_by_trust_ratio()
        >>> p = fnp.asarray([3.0, 4.0])
        >>> t.update(fnp.asarray([0.0, 2.0]), t.init(p), p)[0].tolist()
        [0.0, 5.0]
    """
    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)

        def one(u, p):
            p_norm, u_norm = safe_norm(p, min_norm), safe_norm(u, min_norm)
            ratio = trust_coefficient * p_norm / (u_norm + eps)
            zero = (p_norm == 0.0) | (u_norm == 0.0)
            return u * fnp.where(zero, fnp.asarray(1.0, fnp.asarray(p).dtype), ratio)
        return tree_map(one, updates, params), state
    return GradientTransformation(init_empty_state, update)


def scale_by_param_block_norm(min_scale: float = 1e-3) -> GradientTransformation:
    """Multiplies each update leaf by its parameter's L2 norm (at least ``min_scale``).

    Example:
        >>> t = scale_by_param_block_norm()
        >>> p = fnp.asarray([3.0, 4.0])
        >>> t.update(fnp.ones(2), t.init(p), p)[0].tolist()
        [5.0, 5.0]
    """
    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        return tree_map(lambda u, p: u * safe_norm(p, min_scale), updates, params), state
    return GradientTransformation(init_empty_state, update)


def scale_by_param_block_rms(min_scale: float = 1e-3) -> GradientTransformation:
    """Multiplies each update leaf by its parameter's root mean square (at least
    ``min_scale``), as Adafactor does.

    Example:
        >>> t = scale_by_param_block_rms()
        >>> p = fnp.asarray([2.0, 2.0])
        >>> t.update(fnp.ones(2), t.init(p), p)[0].tolist()
        [2.0, 2.0]
    """
    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        return tree_map(lambda u, p: u * safe_root_mean_squares(p, min_scale),
                        updates, params), state
    return GradientTransformation(init_empty_state, update)


def normalize_by_update_norm(scale_factor: float = 1.0, eps: float = 1e-6
                             ) -> GradientTransformation:
    """Divides all updates by ``(global_norm + eps) / scale_factor``.

    Example:
        >>> t = normalize_by_update_norm(eps=0.0)
        >>> t.update(fnp.asarray([3.0, 4.0]), t.init(None))[0].tolist()
        [0.6000000238418579, 0.800000011920929]
    """
    def update(updates, state, params=None):
        del params
        g_norm = (fnp.sqrt(_tree_norm_sq(updates)) + eps) / scale_factor
        return tree_map(lambda g: g / g_norm, updates), state
    return GradientTransformation(init_empty_state, update)


def centralize() -> GradientTransformation:
    """Gradient centralization (Yong et al., 2020): subtracts from each leaf of rank > 1 its
    mean over all axes but the first.

    Example:
        >>> t = centralize()
        >>> t.update(fnp.asarray([[1.0, 3.0]]), t.init(None))[0].tolist()
        [[-1.0, 1.0]]
    """
    def sub_mean(g):
        if g.ndim > 1:
            return g - fnp.mean(g, axis=tuple(range(1, g.ndim)), keepdims=True)
        return g

    def update(updates, state, params=None):
        del params
        return tree_map(sub_mean, updates), state
    return GradientTransformation(init_empty_state, update)


class ApplyEvery(NamedTuple):
    """apply_every's state: the call count modulo k and the accumulated gradients."""
    count: Any
    grad_acc: Any


def apply_every(k: int = 1) -> GradientTransformation:
    """Accumulates updates and emits their sum every ``k`` calls (zeros in between).

    Example:
        >>> t = apply_every(2)
        >>> s = t.init(fnp.zeros(1))
        >>> u, s = t.update(fnp.ones(1), s)
        >>> u.tolist(), t.update(fnp.ones(1), s)[0].tolist()
        ([0.0], [2.0])
    """
    def init(params):
        return ApplyEvery(zero_count(), tree_zeros_like(params))

    def update(updates, state, params=None):
        del params
        c = state.count % k
        acc = c != 0
        grad_acc = tree_map(lambda g, ga: fnp.where(acc, ga, 0) + g, updates, state.grad_acc)
        emit = c == (k - 1)
        updates = tree_map(lambda ga: fnp.where(emit, ga, 0), grad_acc)
        return updates, ApplyEvery(safe_increment(state.count) % k, grad_acc)
    return GradientTransformation(init, update)


class ScaleByOptimisticGradientState(NamedTuple):
    """Whether this is the first step, and the previous gradient."""
    is_initial_step: Any
    previous_gradient: Any


def scale_by_optimistic_gradient(alpha: float = 1.0, beta: float = 1.0
                                 ) -> GradientTransformation:
    """Optimistic gradient (Daskalakis et al., 2018): ``(alpha + beta) g - beta g_prev``
    (``g_prev = g`` on the first step).

    Example:
        >>> t = scale_by_optimistic_gradient()
        >>> s = t.init(fnp.zeros(1))
        >>> u, s = t.update(fnp.ones(1), s)
        >>> t.update(fnp.full(1, 3.0), s)[0].tolist()
        [5.0]
    """
    def init(params):
        return ScaleByOptimisticGradientState(fnp.asarray(True), tree_zeros_like(params))

    def update(updates, state, params=None):
        del params
        new = tree_map(lambda g, pg: (alpha + beta) * g
                       - beta * fnp.where(state.is_initial_step, g, pg),
                       updates, state.previous_gradient)
        return new, ScaleByOptimisticGradientState(fnp.asarray(False), updates)
    return GradientTransformation(init, update)


class ScaleByDistanceOverGradientsState(NamedTuple):
    """DoG's state: per-leaf max distance from the start, sum of squared gradient norms, and
    the initial params."""
    max_dist: Any
    grad_sum_of_squares: Any
    init_params: Any


def scale_by_distance_over_gradients(reps_rel: float = 1e-6, eps: float = 1e-8,
                                     param_dtype=fnp.float32, global_scale: float = 1.0
                                     ) -> GradientTransformation:
    """Layer-wise DoG (Ivgi et al., 2023): step ``global_scale * max_dist / sqrt(sum ||g||^2
    + eps)`` per leaf, with ``max_dist`` starting at ``reps_rel (1 + ||p0||)``.

    Example:
        >>> t = scale_by_distance_over_gradients()
        >>> p = fnp.ones(2)
        >>> t.update(fnp.ones(2), t.init(p), p)[0].shape
        (2,)
    """
    def l2(x, y=0.0):
        return fnp.sqrt(fnp.sum(fnp.square(x - y)))

    def init(params):
        return ScaleByDistanceOverGradientsState(
            tree_map(lambda x: reps_rel * (1 + l2(x)), params),
            tree_map(lambda x: fnp.zeros(1), params), tree_cast(params, param_dtype))

    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        max_dist = tree_map(lambda d, x, y: fnp.maximum(d, l2(x, y)), state.max_dist, params,
                            state.init_params)
        g_sos = tree_map(lambda s, g: s + fnp.sum(fnp.square(g)), state.grad_sum_of_squares,
                         updates)
        updates = tree_map(lambda g, d, s: global_scale * (d / fnp.sqrt(s + eps)) * g,
                           updates, max_dist, g_sos)
        return updates, ScaleByDistanceOverGradientsState(max_dist, g_sos, state.init_params)
    return GradientTransformation(init, update)


def scale_by_polyak(f_min: float = 0.0, max_learning_rate: float = 1.0, eps: float = 0.0,
                    variant: str = "sps") -> GradientTransformationExtraArgs:
    """Polyak step size (Loizou et al., 2021): ``g * min((f - f_min) / (||g||^2 + eps),
    max_learning_rate)``; the loss value comes as the keyword ``value=`` of ``update``.

    ``variant='sps+'`` clips the gap ``f - f_min`` at zero.

    Example:
        >>> t = scale_by_polyak()
        >>> t.update(fnp.asarray([2.0]), t.init(None), value=fnp.asarray(1.0))[0].tolist()
        [0.5]
    """
    if variant not in ("sps", "sps+"):
        raise ValueError(f"scale_by_polyak: invalid variant={variant!r}; use 'sps' or 'sps+'")

    def update(updates, state, params=None, *, value, **extra_args):
        del params, extra_args
        sq = _tree_norm_sq(updates)
        gap = fnp.asarray(fnp.asarray(value) - f_min, sq.dtype)
        if variant == "sps+":
            gap = fnp.maximum(gap, 0.0)
        tiny = float(fnp.finfo(fnp.float64).eps)
        step = fnp.where(sq + eps <= tiny, 0.0, fnp.minimum(gap / (sq + eps), max_learning_rate))
        return tree_map(lambda g: fnp.asarray(step, g.dtype) * g, updates), state
    return GradientTransformationExtraArgs(init_empty_state, update)


__all__ = ["ApplyEvery", "ScaleByDistanceOverGradientsState", "ScaleByOptimisticGradientState",
           "ScaleByTrustRatioState", "ScaleState", "apply_every", "centralize",
           "normalize_by_update_norm", "scale_by_distance_over_gradients",
           "scale_by_optimistic_gradient", "scale_by_param_block_norm",
           "scale_by_param_block_rms", "scale_by_polyak", "scale_by_trust_ratio"]
