"""More of optax's schedules: piecewise interpolation, one-cycle, SGDR, warmup variants, and
the stateful-schedule machinery (WrappedSchedule, inject_stateful_hyperparams)."""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from funcgrad import numpy as fnp
from funcgrad.optim.base import safe_increment, zero_count
from funcgrad.optim.schedules import Schedule, exponential_decay, join_schedules, linear_schedule
from funcgrad.optim.wrappers import inject_hyperparams


def piecewise_interpolate_schedule(interpolate_type: str, init_value,
                                   boundaries_and_scales: dict | None = None) -> Schedule:
    """Interpolates (``'linear'`` or ``'cosine'``) between values that multiply by ``scale``
    at each boundary: value ``init * prod(scales so far)`` is reached at each boundary.

    Example:
        >>> s = piecewise_interpolate_schedule("linear", 1.0, {10: 0.5})
        >>> round(float(s(5)), 6), round(float(s(10)), 6), round(float(s(20)), 6)
        (0.75, 0.5, 0.5)
    """
    if interpolate_type == "linear":
        def interp(start, end, pct):
            return (end - start) * pct + start
    elif interpolate_type == "cosine":
        def interp(start, end, pct):
            return end + (start - end) / 2.0 * (fnp.cos(math.pi * pct) + 1)
    else:
        raise ValueError("piecewise_interpolate_schedule: interpolate_type must be 'linear' or "
                         f"'cosine', got {interpolate_type!r}")
    items = sorted((boundaries_and_scales or {}).items())
    if any(scale < 0.0 for _, scale in items):
        raise ValueError("piecewise_interpolate_schedule expects non-negative scale factors")
    bounds = [0] + [int(b) for b, _ in items]
    values = [init_value]
    for _, scale in items:
        values.append(values[-1] * scale)

    def schedule(count):
        count = fnp.asarray(count)
        out = fnp.where(bounds[-1] <= count, values[-1], 0.0)
        for i in range(len(bounds) - 1):
            size = max(bounds[i + 1] - bounds[i], 1)
            inside = (bounds[i] <= count) & (count < bounds[i + 1])
            pct = (count - bounds[i]) / size
            out = out + fnp.where(inside, interp(values[i], values[i + 1], pct), 0.0)
        return out
    return schedule


def linear_onecycle_schedule(transition_steps: int, peak_value, pct_start: float = 0.3,
                             pct_final: float = 0.85, div_factor: float = 25.0,
                             final_div_factor: float = 1e4) -> Schedule:
    """One-cycle (Smith & Topin, 2017) with linear pieces: ``peak / div_factor`` up to the peak
    at ``pct_start``, back down at ``pct_final``, then to ``init / final_div_factor``.

    Example:
        >>> s = linear_onecycle_schedule(100, 1.0)
        >>> round(float(s(30)), 6)
        1.0
    """
    if transition_steps <= 0:
        raise ValueError("linear_onecycle_schedule: transition_steps must be positive")
    return piecewise_interpolate_schedule("linear", peak_value / div_factor, {
        int(pct_start * transition_steps): div_factor,
        int(pct_final * transition_steps): 1.0 / div_factor,
        transition_steps: 1.0 / final_div_factor})


def cosine_onecycle_schedule(transition_steps: int, peak_value, pct_start: float = 0.3,
                             div_factor: float = 25.0, final_div_factor: float = 1e4
                             ) -> Schedule:
    """One-cycle with cosine pieces: up to ``peak_value`` at ``pct_start``, then down to
    ``peak / (div_factor * final_div_factor)``.

    Example:
        >>> s = cosine_onecycle_schedule(100, 1.0)
        >>> round(float(s(30)), 6)
        1.0
    """
    if transition_steps <= 0:
        raise ValueError("cosine_onecycle_schedule: transition_steps must be positive")
    return piecewise_interpolate_schedule("cosine", peak_value / div_factor, {
        int(pct_start * transition_steps): div_factor,
        int(transition_steps): 1.0 / (div_factor * final_div_factor)})


def warmup_constant_schedule(init_value, peak_value, warmup_steps: int) -> Schedule:
    """Linear warmup from ``init_value`` to ``peak_value``, then constant.

    Example:
        >>> s = warmup_constant_schedule(0.0, 1.0, 10)
        >>> round(float(s(5)), 6), round(float(s(50)), 6)
        (0.5, 1.0)
    """
    return linear_schedule(init_value, peak_value, warmup_steps)


def warmup_exponential_decay_schedule(init_value, peak_value, warmup_steps: int,
                                      transition_steps: int, decay_rate: float,
                                      transition_begin: int = 0, staircase: bool = False,
                                      end_value=None) -> Schedule:
    """Linear warmup to ``peak_value``, then :func:`exponential_decay` from it.

    Example:
        >>> s = warmup_exponential_decay_schedule(0.0, 1.0, 10, 10, 0.5)
        >>> round(float(s(5)), 6), round(float(s(20)), 6)
        (0.5, 0.5)
    """
    return join_schedules([linear_schedule(init_value, peak_value, warmup_steps),
                           exponential_decay(peak_value, transition_steps, decay_rate,
                                             transition_begin, staircase, end_value)],
                          [warmup_steps])


def sgdr_schedule(cosine_kwargs: Iterable[dict]) -> Schedule:
    """SGDR (Loshchilov & Hutter, 2016): warm restarts, one
    ``warmup_cosine_decay_schedule(**kwargs)`` per cycle, each ``decay_steps`` long.

    Example:
        >>> kw = dict(init_value=0.0, peak_value=1.0, warmup_steps=2, decay_steps=10)
        >>> s = sgdr_schedule([kw, kw])
        >>> round(float(s(2)), 6), round(float(s(12)), 6)
        (1.0, 1.0)
    """
    from funcgrad.optim.schedules import warmup_cosine_decay_schedule
    boundaries, schedules, step = [], [], 0
    for kwargs in cosine_kwargs:
        schedules.append(warmup_cosine_decay_schedule(**kwargs))
        step += kwargs["decay_steps"]
        boundaries.append(step)
    return join_schedules(schedules, boundaries[:-1])


# ---------------------------------------------------------------------------------------------
# stateful schedules
# ---------------------------------------------------------------------------------------------

class WrappedScheduleState(NamedTuple):
    """A wrapped schedule's state: its own step count."""
    count: Any


class WrappedSchedule:
    """A plain schedule ``count -> value`` seen as a stateful one (``init``, ``update``,
    ``__call__(state)``), as :func:`inject_stateful_hyperparams` expects.

    Example:
        >>> w = WrappedSchedule(lambda c: 2 * c)
        >>> st = w.update(w.init())
        >>> int(w(st))
        2
    """

    def __init__(self, schedule_fn: Callable):
        self.schedule_fn = schedule_fn

    def init(self) -> WrappedScheduleState:
        return WrappedScheduleState(zero_count())

    def update(self, state: WrappedScheduleState, **extra_args) -> WrappedScheduleState:
        del extra_args
        return WrappedScheduleState(safe_increment(state.count))

    def __call__(self, state: WrappedScheduleState, **extra_args):
        del extra_args
        return self.schedule_fn(state.count)


class InjectStatefulHyperparamsState(NamedTuple):
    """Like InjectHyperparamsState, plus the states of stateful schedules."""
    count: Any
    hyperparams: dict
    hyperparams_states: dict
    inner_state: Any


def inject_stateful_hyperparams(inner_factory: Callable, static_args=(),
                                hyperparam_dtype=None) -> Callable:
    """Deprecated in optax in favour of :func:`inject_hyperparams` (which it now returns);
    plain schedules behave the same way.

    Example:
        >>> import warnings
        >>> from funcgrad import optim
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     opt = inject_stateful_hyperparams(optim.sgd)(learning_rate=0.1)
    """
    warnings.warn("inject_stateful_hyperparams is deprecated, use inject_hyperparams",
                  DeprecationWarning, stacklevel=2)
    return inject_hyperparams(inner_factory, static_args, hyperparam_dtype)


__all__ = ["InjectStatefulHyperparamsState", "WrappedSchedule", "WrappedScheduleState",
           "cosine_onecycle_schedule", "inject_stateful_hyperparams",
           "linear_onecycle_schedule", "piecewise_interpolate_schedule", "sgdr_schedule",
           "warmup_constant_schedule", "warmup_exponential_decay_schedule"]
