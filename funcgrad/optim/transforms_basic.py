"""The basic gradient transformations with optax's names, signatures and arithmetic
(scale_by_adam, scale, trace, scale_by_rms, ...)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from funcgrad import lax
from funcgrad import numpy as fnp
from funcgrad.tree_util import tree_map
from funcgrad.optim.base import (
    NO_PARAMS_MSG,
    EmptyState,
    GradientTransformation,
    cast_like,
    global_norm,
    init_empty_state,
    safe_increment,
    tree_cast,
    tree_zeros_like,
    zero_count,
)
from funcgrad.optim.numerics import bias_correction as _bias_correction   # scale_by_rms's flag shares the name

ScalarOrSchedule = Any  # a float, a scalar array, or a function of the int32 step count


def _update_moment(updates, moments, decay, order):
    """Exponential moving average of g (order 1) or g**2 (order 2): (1-d) g^k + d m."""
    if order == 1:
        return tree_map(lambda g, m: (1 - decay) * g + decay * m, updates, moments)
    return tree_map(lambda g, m: (1 - decay) * (g * g) + decay * m, updates, moments)


# ---------------------------------------------------------------------------------------------
# scaling
# ---------------------------------------------------------------------------------------------

def scale(step_size) -> GradientTransformation:
    """Multiplies updates by a fixed ``step_size``.

    Example:
        >>> t = scale(0.5)
        >>> t.update(fnp.ones(2), t.init(None))[0].tolist()
        [0.5, 0.5]
    """
    def update(updates, state, params=None):
        del params
        return tree_map(lambda g: cast_like(step_size, g) * g, updates), state
    return GradientTransformation(init_empty_state, update)


class ScaleByScheduleState(NamedTuple):
    """The number of updates applied so far (an int32 scalar)."""
    count: Any


def scale_by_schedule(step_size_fn: Callable) -> GradientTransformation:
    """Multiplies updates by ``step_size_fn(count)``, count = 0 on the first update.

    Example:
        >>> t = scale_by_schedule(lambda count: 1.0 / (count + 1))
        >>> t.update(fnp.ones(1), t.init(None))[0].tolist()
        [1.0]
    """
    def init(params):
        del params
        return ScaleByScheduleState(count=zero_count())

    def update(updates, state, params=None):
        del params
        step_size = step_size_fn(state.count)
        updates = tree_map(lambda g: cast_like(step_size, g) * g, updates)
        return updates, ScaleByScheduleState(count=safe_increment(state.count))
    return GradientTransformation(init, update)


def scale_by_learning_rate(learning_rate: ScalarOrSchedule | None = None, *,
                           flip_sign: bool = True) -> GradientTransformation:
    """Scales by the learning rate, negated by default (so ``apply_updates`` descends).

    Args:
        learning_rate: a float/array, or a schedule ``count -> rate`` (None: the identity).
        flip_sign: multiply by ``-learning_rate`` (the default) rather than ``learning_rate``.

    Example:
        >>> t = scale_by_learning_rate(0.1)
        >>> t.update(fnp.ones(1), t.init(None))[0].tolist()
        [-0.10000000149011612]
    """
    if learning_rate is None:
        from funcgrad.optim.base import identity
        return identity()
    m = -1 if flip_sign else 1
    if callable(learning_rate):
        return scale_by_schedule(lambda count: m * learning_rate(count))
    return scale(m * learning_rate)


# ---------------------------------------------------------------------------------------------
# adaptive scalings
# ---------------------------------------------------------------------------------------------

class ScaleByAdamState(NamedTuple):
    """Adam's state: the step count and the first and second moment estimates."""
    count: Any
    mu: Any
    nu: Any


def scale_by_adam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, eps_root: float = 0.0,
                  mu_dtype=None, *, nesterov: bool = False) -> GradientTransformation:
    """Adam's rescaling (Kingma & Ba, 2014): ``m_hat / (sqrt(v_hat + eps_root) + eps)``.

    ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g**2``; the hats divide by
    ``1 - b**t`` with t the 1-based step.

    Args:
        b1: decay of the first moment.
        b2: decay of the second moment.
        eps: added to the denominator outside the square root.
        eps_root: added inside the square root (useful when differentiating through Adam).
        mu_dtype: optional dtype for the first moment.
        nesterov: use Nesterov momentum (NAdam).

    Example:
        >>> t = scale_by_adam()
        >>> params = fnp.zeros(2)
        >>> updates, state = t.update(fnp.asarray([1.0, -2.0]), t.init(params))
        >>> [round(u, 4) for u in updates.tolist()]  # the first step is about +-1
        [1.0, -1.0]
    """
    mu_dtype = fnp.canonical_dtype(mu_dtype)

    def init(params):
        return ScaleByAdamState(count=zero_count(), mu=tree_zeros_like(params, mu_dtype),
                                nu=tree_zeros_like(params))

    def update(updates, state, params=None):
        del params
        mu = _update_moment(updates, state.mu, b1, 1)
        nu = _update_moment(updates, state.nu, b2, 2)
        count_inc = safe_increment(state.count)
        if nesterov:
            mu_hat = tree_map(lambda m, g: b1 * m + (1 - b1) * g,
                              _bias_correction(mu, b1, safe_increment(count_inc)),
                              _bias_correction(updates, b1, count_inc))
        else:
            mu_hat = _bias_correction(mu, b1, count_inc)
        nu_hat = _bias_correction(nu, b2, count_inc)
        updates = tree_map(lambda m, v: m / (fnp.sqrt(v + eps_root) + eps), mu_hat, nu_hat)
        return updates, ScaleByAdamState(count=count_inc, mu=tree_cast(mu, mu_dtype), nu=nu)
    return GradientTransformation(init, update)


class ScaleByRmsState(NamedTuple):
    """RMSProp's state: the moving average of squared gradients."""
    nu: Any


class ScaleByRmsWithCountState(NamedTuple):
    """RMSProp's state with a step count (for bias correction)."""
    count: Any
    nu: Any


def _rms_scaling(denominator, eps, eps_in_sqrt):
    if eps_in_sqrt:
        return lambda n: lax.rsqrt(denominator(n) + eps)
    return lambda n: 1 / (fnp.sqrt(denominator(n)) + eps)


def scale_by_rms(decay: float = 0.9, eps: float = 1e-8, initial_scale: float = 0.0,
                 eps_in_sqrt: bool = True, bias_correction: bool = False) -> GradientTransformation:
    """Divides updates by the root of a moving average of their squares (RMSProp).

    ``nu = decay nu + (1 - decay) g**2``; ``g / sqrt(nu + eps)`` (or ``g / (sqrt(nu) + eps)``
    when ``eps_in_sqrt`` is False).

    Args:
        decay: decay of the moving average.
        eps: the term that keeps the division finite.
        initial_scale: the initial value of the average.
        eps_in_sqrt: whether eps goes inside the square root.
        bias_correction: divide the average by ``1 - decay**t``.

    Example:
        >>> t = scale_by_rms()
        >>> updates, _ = t.update(fnp.asarray([2.0]), t.init(fnp.zeros(1)))
        >>> round(updates.tolist()[0], 5)  # 2 / sqrt(0.1 * 4)
        3.16228
    """
    def init(params):
        nu = tree_map(lambda p: fnp.full_like(p, initial_scale), params)
        return ScaleByRmsWithCountState(zero_count(), nu) if bias_correction else \
            ScaleByRmsState(nu)

    def update(updates, state, params=None):
        del params
        nu = _update_moment(updates, state.nu, decay, 2)
        if bias_correction:
            count_inc = safe_increment(state.count)
            nu_hat = _bias_correction(nu, decay, count_inc)
        else:
            nu_hat = nu
        scaling = _rms_scaling(lambda n: n, eps, eps_in_sqrt)
        updates = tree_map(lambda g, n: scaling(n) * g, updates, nu_hat)
        return updates, (ScaleByRmsWithCountState(count_inc, nu) if bias_correction
                         else ScaleByRmsState(nu))
    return GradientTransformation(init, update)


class ScaleByRStdDevState(NamedTuple):
    """Centered RMSProp's state: moving averages of gradients and of their squares."""
    mu: Any
    nu: Any


class ScaleByRStdDevWithCountState(NamedTuple):
    """Centered RMSProp's state with a step count (for bias correction)."""
    count: Any
    mu: Any
    nu: Any


def scale_by_stddev(decay: float = 0.9, eps: float = 1e-8, initial_scale: float = 0.0,
                    eps_in_sqrt: bool = True,
                    bias_correction: bool = False) -> GradientTransformation:
    """Divides updates by a running estimate of their standard deviation (centered RMSProp):
    ``g / sqrt(nu - mu**2 + eps)``.

    Example:
        >>> t = scale_by_stddev()
        >>> t.update(fnp.ones(1), t.init(fnp.zeros(1)))[0].shape
        (1,)
    """
    def init(params):
        mu = tree_zeros_like(params)
        nu = tree_map(lambda p: fnp.full_like(p, initial_scale), params)
        return ScaleByRStdDevWithCountState(zero_count(), mu, nu) if bias_correction else \
            ScaleByRStdDevState(mu, nu)

    def update(updates, state, params=None):
        del params
        mu = _update_moment(updates, state.mu, decay, 1)
        nu = _update_moment(updates, state.nu, decay, 2)
        if bias_correction:
            count_inc = safe_increment(state.count)
            mu_hat = _bias_correction(mu, decay, count_inc)
            nu_hat = _bias_correction(nu, decay, count_inc)
        else:
            mu_hat, nu_hat = mu, nu
        scaling = _rms_scaling(lambda mn: mn[1] - fnp.square(mn[0]), eps, eps_in_sqrt)
        updates = tree_map(lambda g, m, n: scaling((m, n)) * g, updates, mu_hat, nu_hat)
        return updates, (ScaleByRStdDevWithCountState(count_inc, mu, nu) if bias_correction
                         else ScaleByRStdDevState(mu, nu))
    return GradientTransformation(init, update)


class ScaleByLionState(NamedTuple):
    """Lion's state: the step count and the momentum."""
    count: Any
    mu: Any


def scale_by_lion(b1: float = 0.9, b2: float = 0.99, mu_dtype=None, *, mode: str = "hard",
                  smooth_beta: float = 1.0) -> GradientTransformation:
    """Lion's update direction (Chen et al., 2023): ``sign(b1 m + (1 - b1) g)``, then
    ``m = b2 m + (1 - b2) g``. ``mode='smooth'`` uses ``tanh(smooth_beta x)`` instead of the
    sign, ``mode='refined'`` keeps ``x`` where ``|x| < 1``.

    Example:
        >>> t = scale_by_lion()
        >>> t.update(fnp.asarray([0.3, -2.0]), t.init(fnp.zeros(2)))[0].tolist()
        [1.0, -1.0]
    """
    mu_dtype = fnp.canonical_dtype(mu_dtype)
    if mode not in ("hard", "smooth", "refined"):
        raise ValueError(f"scale_by_lion: unknown mode {mode!r}; use 'hard', 'smooth' or "
                         "'refined'")

    def comb(g, m):
        x = (1.0 - b1) * g + b1 * m
        if mode == "hard":
            return fnp.sign(x)
        if mode == "smooth":
            return fnp.tanh(smooth_beta * x)
        return fnp.where(fnp.abs(x) < 1.0, x, fnp.sign(x))

    def init(params):
        return ScaleByLionState(count=zero_count(), mu=tree_zeros_like(params, mu_dtype))

    def update(updates, state, params=None):
        del params
        direction = tree_map(comb, updates, state.mu)
        mu = tree_cast(_update_moment(updates, state.mu, b2, 1), mu_dtype)
        return direction, ScaleByLionState(count=safe_increment(state.count), mu=mu)
    return GradientTransformation(init, update)


# ---------------------------------------------------------------------------------------------
# momentum, weight decay, clipping
# ---------------------------------------------------------------------------------------------

class TraceState(NamedTuple):
    """The momentum buffer of :func:`trace`."""
    trace: Any


def trace(decay: float, nesterov: bool = False, accumulator_dtype=None) -> GradientTransformation:
    """Momentum: ``t = g + decay t``; the update is ``t`` (or ``g + decay t`` for Nesterov).

    Args:
        decay: the momentum coefficient.
        nesterov: use Nesterov's accelerated variant.
        accumulator_dtype: optional dtype of the buffer.

    Example:
        >>> t = trace(0.9)
        >>> state = t.init(fnp.zeros(1))
        >>> u, state = t.update(fnp.ones(1), state)
        >>> [round(x, 6) for x in t.update(fnp.ones(1), state)[0].tolist()]
        [1.9]
    """
    accumulator_dtype = fnp.canonical_dtype(accumulator_dtype)

    def init(params):
        return TraceState(trace=tree_zeros_like(params, accumulator_dtype))

    def update(updates, state, params=None):
        del params
        new_trace = tree_map(lambda g, t: g + decay * t, updates, state.trace)
        if nesterov:
            updates = tree_map(lambda g, t: g + decay * t, updates, new_trace)
        else:
            updates = new_trace
        return updates, TraceState(trace=tree_cast(new_trace, accumulator_dtype))
    return GradientTransformation(init, update)


class WeightDecaySchedule(NamedTuple):
    """add_decayed_weights' state when the decay is a schedule: the step count."""
    count: Any


def add_decayed_weights(weight_decay=0.0, mask=None) -> GradientTransformation:
    """Adds ``weight_decay * params`` to the updates (decoupled weight decay, as in AdamW).

    Args:
        weight_decay: the coefficient, or a schedule ``count -> coefficient``.
        mask: optional pytree of bools (or a function ``params -> pytree of bools``) with the
            params' structure (or a prefix of it): decay applies where True.

    Example:
        >>> t = add_decayed_weights(0.1)
        >>> params = fnp.ones(2)
        >>> t.update(fnp.zeros(2), t.init(params), params)[0].tolist()
        [0.10000000149011612, 0.10000000149011612]
    """
    scheduled = callable(weight_decay)

    def init(params):
        del params
        return WeightDecaySchedule(zero_count()) if scheduled else EmptyState()

    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        new_state = WeightDecaySchedule(safe_increment(state.count)) if scheduled else state
        if type(weight_decay) in (int, float) and weight_decay == 0.0:
            return updates, new_state
        s = weight_decay(state.count) if scheduled else weight_decay
        return tree_map(lambda g, p: None if g is None else g + cast_like(s, g) * p,
                        updates, params, is_leaf=lambda x: x is None), new_state
    inner = GradientTransformation(init, update)
    if mask is not None:
        from funcgrad.optim.wrappers import masked
        return masked(inner, mask)
    return inner


def clip(max_delta) -> GradientTransformation:
    """Clips every update element into ``[-max_delta, max_delta]``.

    Example:
        >>> t = clip(1.0)
        >>> t.update(fnp.asarray([-3.0, 0.5]), t.init(None))[0].tolist()
        [-1.0, 0.5]
    """
    def update(updates, state, params=None):
        del params
        return tree_map(lambda g: fnp.clip(g, -max_delta, max_delta), updates), state
    return GradientTransformation(init_empty_state, update)


def clip_by_global_norm(max_norm) -> GradientTransformation:
    """Rescales all updates together so that their global L2 norm is at most ``max_norm``.

    When the norm ``n`` exceeds ``max_norm`` every leaf becomes ``(g / n) * max_norm``.

    Example:
        >>> t = clip_by_global_norm(1.0)
        >>> t.update({"a": fnp.asarray([3.0]), "b": fnp.asarray([4.0])}, t.init(None))[0]["b"]
        Array([0.8], dtype=float32)
    """
    def update(updates, state, params=None):
        del params
        g_norm = global_norm(updates)
        trigger = g_norm < max_norm
        updates = tree_map(
            lambda t: fnp.where(trigger, t, (t / fnp.asarray(g_norm, t.dtype)) * max_norm),
            updates)
        return updates, state
    return GradientTransformation(init_empty_state, update)


__all__ = [
    "EmptyState",
    "ScaleByAdamState",
    "ScaleByLionState",
    "ScaleByRStdDevState",
    "ScaleByRStdDevWithCountState",
    "ScaleByRmsState",
    "ScaleByRmsWithCountState",
    "ScaleByScheduleState",
    "TraceState",
    "WeightDecaySchedule",
    "add_decayed_weights",
    "clip",
    "clip_by_global_norm",
    "scale",
    "scale_by_adam",
    "scale_by_learning_rate",
    "scale_by_lion",
    "scale_by_rms",
    "scale_by_schedule",
    "scale_by_stddev",
    "trace",
]
