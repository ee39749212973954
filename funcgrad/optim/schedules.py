"""Learning-rate schedules (optax's): functions of the int32 step count, traceable."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from funcgrad import numpy as fnp

Schedule = Callable  # count -> value


def constant_schedule(value) -> Schedule:
    """The same value at every step.

    Example:
        >>> constant_schedule(0.1)(100)
        0.1
    """
    return lambda count: value


def polynomial_schedule(init_value, end_value, power, transition_steps: int,
                        transition_begin: int = 0) -> Schedule:
    """Polynomial decay from ``init_value`` to ``end_value`` over ``transition_steps``:
    ``(init - end) * (1 - t / transition_steps) ** power + end``, t = clip(count - begin).

    Args:
        init_value: the value before and at ``transition_begin``.
        end_value: the value from ``transition_begin + transition_steps`` on.
        power: the exponent of the decay.
        transition_steps: the length of the transition (<= 0 gives a constant schedule).
        transition_begin: steps to hold ``init_value`` before the transition.

    Example:
        >>> round(float(polynomial_schedule(1.0, 0.0, 2, 10)(5)), 6)
        0.25
    """
    if transition_steps <= 0:
        return constant_schedule(init_value)
    transition_begin = max(int(transition_begin), 0)

    def schedule(count):
        count = fnp.clip(fnp.asarray(count) - transition_begin, 0, transition_steps)
        frac = 1 - count / transition_steps
        return (init_value - end_value) * (frac ** power) + end_value
    return schedule


def linear_schedule(init_value, end_value, transition_steps: int,
                    transition_begin: int = 0) -> Schedule:
    """Linear interpolation from ``init_value`` to ``end_value`` over ``transition_steps``.

    Example:
        >>> round(float(linear_schedule(0.0, 1.0, 10)(3)), 6)
        0.3
    """
    return polynomial_schedule(init_value, end_value, 1, transition_steps, transition_begin)


def cosine_decay_schedule(init_value, decay_steps: int, alpha: float = 0.0,
                          exponent: float = 1.0) -> Schedule:
    """Cosine decay: ``init * ((1 - alpha) * (0.5 (1 + cos(pi t / decay_steps)))**exponent
    + alpha)`` with t = min(count, decay_steps).

    Args:
        init_value: the initial value.
        decay_steps: steps over which to decay (must be positive).
        alpha: the final value as a fraction of ``init_value``.
        exponent: power applied to the cosine factor.

    Example:
        >>> round(float(cosine_decay_schedule(1.0, 100)(50)), 6)
        0.5
    """
    if not decay_steps > 0:
        raise ValueError("cosine_decay_schedule: decay_steps must be positive")

    def schedule(count):
        count = fnp.minimum(fnp.asarray(count), decay_steps)
        cosine = 0.5 * (1 + fnp.cos(math.pi * count / decay_steps))
        return init_value * ((1 - alpha) * cosine ** exponent + alpha)
    return schedule


def exponential_decay(init_value, transition_steps: int, decay_rate: float,
                      transition_begin: int = 0, staircase: bool = False,
                      end_value=None) -> Schedule:
    """Exponential decay: ``init * decay_rate ** ((count - begin) / transition_steps)``.

    Args:
        init_value: the value up to ``transition_begin``.
        transition_steps: steps per factor of ``decay_rate`` (<= 0 gives a constant).
        decay_rate: the decay factor (0 gives a constant schedule).
        transition_begin: steps to hold ``init_value`` first.
        staircase: decay in whole steps of ``transition_steps`` (floor of the exponent).
        end_value: a lower bound (an upper bound when ``decay_rate > 1``).

    Example:
        >>> round(float(exponential_decay(1.0, 10, 0.5)(20)), 6)
        0.25
    """
    if transition_steps <= 0 or decay_rate == 0:
        return constant_schedule(init_value)
    transition_begin = max(int(transition_begin), 0)
    clip_fn = None
    if end_value is not None:
        clip_fn = fnp.maximum if decay_rate < 1.0 else fnp.minimum

    def schedule(count):
        decreased = fnp.asarray(count) - transition_begin
        p = decreased / transition_steps
        if staircase:
            p = fnp.floor(p)
        value = fnp.where(decreased <= 0, init_value, init_value * fnp.power(decay_rate, p))
        return value if clip_fn is None else clip_fn(value, end_value)
    return schedule


def join_schedules(schedules: Sequence[Schedule], boundaries: Sequence[int]) -> Schedule:
    """Runs ``schedules[i]`` from ``boundaries[i-1]`` on, each restarting its count at 0.

    Example:
        >>> s = join_schedules([constant_schedule(1.0), constant_schedule(2.0)], [10])
        >>> float(s(9)), float(s(10))
        (1.0, 2.0)
    """
    def schedule(step):
        step = fnp.asarray(step)
        out = schedules[0](step)
        for boundary, sched in zip(boundaries, schedules[1:]):
            out = fnp.where(step < boundary, out, sched(step - boundary))
        return out
    return schedule


def warmup_cosine_decay_schedule(init_value, peak_value, warmup_steps: int, decay_steps: int,
                                 end_value=0.0, exponent: float = 1.0) -> Schedule:
    """Linear warmup from ``init_value`` to ``peak_value``, then cosine decay to ``end_value``.

    ``decay_steps`` counts the warmup too: the cosine lasts ``decay_steps - warmup_steps``.

    Example:
        >>> s = warmup_cosine_decay_schedule(0.0, 1.0, 10, 110)
        >>> round(float(s(5)), 6), round(float(s(10)), 6), round(float(s(110)), 6)
        (0.5, 1.0, 0.0)
    """
    alpha = 0.0 if peak_value == 0.0 else end_value / peak_value
    return join_schedules(
        [linear_schedule(init_value, peak_value, warmup_steps),
         cosine_decay_schedule(peak_value, decay_steps - warmup_steps, alpha, exponent)],
        [warmup_steps])


def piecewise_constant_schedule(init_value, boundaries_and_scales: dict | None = None
                                ) -> Schedule:
    """Multiplies the value by ``scale`` from each boundary step on.

    Example:
        >>> s = piecewise_constant_schedule(1.0, {5: 0.1})
        >>> float(s(4)), round(float(s(5)), 6)
        (1.0, 0.1)
    """
    items = sorted((boundaries_and_scales or {}).items())

    def schedule(count):
        count = fnp.asarray(count)
        value = fnp.full((), init_value, fnp.float32)
        for boundary, scale in items:
            value = fnp.where(count < boundary, value, value * scale)
        return value
    return schedule


__all__ = ["constant_schedule", "cosine_decay_schedule", "exponential_decay", "join_schedules",
           "linear_schedule", "piecewise_constant_schedule", "polynomial_schedule",
           "warmup_cosine_decay_schedule"]
