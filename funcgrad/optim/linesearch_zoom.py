"""optax's zoom line search (strong Wolfe conditions; Nocedal & Wright, Alg. 3.5-3.6, with
Hager-Zhang's approximate decrease condition): scale_by_zoom_linesearch, L-BFGS's default.

Eagerly the search runs as a Python loop that evaluates one trial step per iteration; under
jit it is unrolled to ``max_linesearch_steps`` masked iterations (each computing both the
bracketing and the zoom trial), so the same numbers come out either way."""
from __future__ import annotations

import inspect
from typing import Any, NamedTuple

from funcgrad.transforms import ad
from funcgrad import numpy as fnp
from funcgrad.core import ConcretizationError
from funcgrad.tree_util import tree_leaves, tree_map
from funcgrad.optim.base import GradientTransformationExtraArgs, tree_zeros_like


def _vdot(a, b):
    return sum(fnp.sum(x * y) for x, y in zip(tree_leaves(a), tree_leaves(b)))


def _select(pred, a, b):
    return tree_map(lambda x, y: fnp.where(pred, x, y), a, b)


def _split_fn_kwargs(fn, kwargs):
    """(the kwargs ``fn`` accepts, the rest)."""
    names = set(inspect.signature(fn).parameters)
    return ({k: v for k, v in kwargs.items() if k in names},
            {k: v for k, v in kwargs.items() if k not in names})


def _concrete(x):
    """``bool(x)`` when x has a value, None while tracing."""
    try:
        return bool(x)
    except (ConcretizationError, TypeError):
        return None


class ZoomLinesearchInfo(NamedTuple):
    """How many trial steps the search took and the final Wolfe errors."""
    num_linesearch_steps: Any
    decrease_error: Any
    curvature_error: Any


class ScaleByZoomLinesearchState(NamedTuple):
    """The accepted step size, the value and gradient there, and search info."""
    learning_rate: Any
    value: Any
    grad: Any
    info: ZoomLinesearchInfo


class _Search(NamedTuple):
    count: Any
    stepsize: Any
    value: Any
    grad: Any
    slope: Any
    decrease_error: Any
    curvature_error: Any
    interval_found: Any
    done: Any
    failed: Any
    low: Any
    value_low: Any
    slope_low: Any
    high: Any
    value_high: Any
    slope_high: Any
    cubic_ref: Any
    value_cubic_ref: Any
    safe_stepsize: Any
    safe_value: Any
    safe_grad: Any


def _cubicmin(a, fa, fpa, b, fb, c, fc):
    """The minimiser of the cubic through (a, fa) with slope fpa, (b, fb) and (c, fc)."""
    db, dc = b - a, c - a
    denom = (db * dc) ** 2 * (db - dc)
    r1, r2 = fb - fa - fpa * db, fc - fa - fpa * dc
    A = (dc ** 2 * r1 - db ** 2 * r2) / denom  # noqa: N806
    B = (-(dc ** 3) * r1 + db ** 3 * r2) / denom  # noqa: N806
    return a + (-B + fnp.sqrt(B * B - 3.0 * A * fpa)) / (3.0 * A)


def _quadmin(a, fa, fpa, b, fb):
    """The minimiser of the quadratic through (a, fa) with slope fpa and (b, fb)."""
    db = b - a
    return a - fpa / (2.0 * ((fb - fa - fpa * db) / db ** 2))


def scale_by_zoom_linesearch(max_linesearch_steps: int, max_learning_rate: float | None = None,
                             tol: float = 0.0, increase_factor: float = 2.0,
                             slope_rtol: float = 1e-4, curv_rtol: float = 0.9,
                             approx_dec_rtol: float | None = 1e-6,
                             stepsize_precision: float = 1e-5,
                             initial_guess_strategy: str = "keep",
                             verbose: bool = False) -> GradientTransformationExtraArgs:
    """Scales the updates by a step size meeting the strong Wolfe conditions: first a
    bracketing phase growing the step by ``increase_factor``, then zooming into the bracket by
    cubic, quadratic or bisection interpolation. If no such step is found within
    ``max_linesearch_steps`` trials, the best step with sufficient decrease is taken.

    ``update`` needs ``value=f(params)``, ``grad=`` its gradient and ``value_fn=f`` (other
    keywords accepted by ``value_fn`` are passed to it); the state keeps the value and gradient
    at the new point (see :func:`value_and_grad_from_state`).

    Args:
        max_linesearch_steps: the most trial steps.
        max_learning_rate: an optional cap on the step size.
        tol: tolerance on the Wolfe errors.
        increase_factor: growth of the step while bracketing.
        slope_rtol: the sufficient-decrease constant c1.
        curv_rtol: the curvature constant c2.
        approx_dec_rtol: relative tolerance of the approximate decrease condition (None: off).
        stepsize_precision: the interval length below which zooming gives up.
        initial_guess_strategy: ``'keep'`` (start from the last step size) or ``'one'``.
        verbose: accepted for optax compatibility (no diagnostics are printed).

    Example:
        >>> f = lambda x: fnp.sum((x - 3.0) ** 2)
        >>> ls = scale_by_zoom_linesearch(max_linesearch_steps=15)
        >>> x = fnp.asarray([1.0])
        >>> g = fnp.asarray([-4.0])
        >>> u, s = ls.update(-g, ls.init(x), x, value=f(x), grad=g, value_fn=f)
        >>> round(float(s.learning_rate), 4), round(float(s.value), 4)
        (0.5, 0.0)
    """
    del verbose
    if initial_guess_strategy not in ("one", "keep"):
        raise ValueError(f"scale_by_zoom_linesearch: unknown initial_guess_strategy "
                         f"{initial_guess_strategy!r}; use 'one' or 'keep'")

    def decrease_error(stepsize, value_step, slope_step, value_init, slope_init):
        err = value_step - value_init - slope_rtol * stepsize * slope_init
        if approx_dec_rtol is not None:
            approx = fnp.maximum(slope_step - (2 * slope_rtol - 1.0) * slope_init,
                                 value_step - value_init - approx_dec_rtol * fnp.abs(value_init))
            err = fnp.minimum(approx, err)
        err = fnp.maximum(err, 0.0)
        return fnp.where(fnp.isnan(err), fnp.inf, err)

    def curvature_error(slope_step, slope_init):
        err = fnp.maximum(fnp.abs(slope_step) - curv_rtol * fnp.abs(slope_init), 0.0)
        return fnp.where(fnp.isnan(err), fnp.inf, err)

    def search_interval(s, ctx):
        params, updates, guess, value_init, slope_init, vg = ctx
        new = fnp.where(s.count == 0, guess, increase_factor * s.stepsize)
        if max_learning_rate is not None:
            max_reached = new >= max_learning_rate
            new = fnp.minimum(new, max_learning_rate)
        else:
            max_reached = fnp.asarray(False)
        v, g, slope = vg(new)
        dec, curv = decrease_error(new, v, slope, value_init, slope_init), \
            curvature_error(slope, slope_init)
        err = fnp.maximum(dec, curv)
        safe = dec <= tol
        safe_step, safe_value, safe_grad = _select(
            safe, (new, v, g), (s.safe_stepsize, s.safe_value, s.safe_grad))
        set_high = (dec > 0.0) | ((v >= s.value) & (s.count > 0))
        set_low = (slope >= 0.0) & ~set_high
        low, vlow, slow, high, vhigh, shigh = _select(
            set_low, (new, v, slope, s.stepsize, s.value, s.slope),
            (s.stepsize, s.value, s.slope, new, v, slope))
        found = set_high | set_low | (err <= tol)
        done = (err <= tol) | (max_reached & ~found)
        failed = (s.count + 1 >= max_linesearch_steps) & ~done
        return _Search(s.count + 1, new, v, g, slope, dec, curv, found, done, failed, low, vlow,
                       slow, high, vhigh, shigh, low, vlow, safe_step, safe_value, safe_grad)

    def zoom_interval(s, ctx):
        params, updates, guess, value_init, slope_init, vg = ctx
        delta = fnp.abs(s.high - s.low)
        left, right = fnp.minimum(s.high, s.low), fnp.maximum(s.high, s.low)
        too_small = delta <= stepsize_precision
        cubic = _cubicmin(s.low, s.value_low, s.slope_low, s.high, s.value_high, s.cubic_ref,
                          s.value_cubic_ref)
        use_cubic = (cubic > left + 0.2 * delta) & (cubic < right - 0.2 * delta)
        quad = _quadmin(s.low, s.value_low, s.slope_low, s.high, s.value_high)
        use_quad = ~use_cubic & (quad > left + 0.1 * delta) & (quad < right - 0.1 * delta)
        middle = fnp.where(use_cubic, cubic, s.cubic_ref)
        middle = fnp.where(use_quad, quad, middle)
        middle = fnp.where(~use_cubic & ~use_quad, (s.low + s.high) / 2.0, middle)
        v, g, slope = vg(middle)
        dec, curv = decrease_error(middle, v, slope, value_init, slope_init), \
            curvature_error(slope, slope_init)
        err = fnp.maximum(dec, curv)
        better = (dec <= tol) & (v < s.safe_value)
        safe_step, safe_value, safe_grad = _select(
            better, (middle, v, g), (s.safe_stepsize, s.safe_value, s.safe_grad))
        done = err <= tol
        high_to_middle = (dec > 0.0) | (v >= s.value_low)
        high_to_low = (slope * (s.high - s.low) >= 0.0) & ~high_to_middle
        high = _select(high_to_middle, (middle, v, slope), (s.high, s.value_high, s.slope_high))
        high = _select(high_to_low, (s.low, s.value_low, s.slope_low), high)
        low = _select(~high_to_middle, (middle, v, slope), (s.low, s.value_low, s.slope_low))
        ref = _select(high_to_middle | high_to_low, (s.high, s.value_high),
                      (s.low, s.value_low))
        failed = ((s.count + 1 >= max_linesearch_steps) | (too_small & (safe_step > 0.0))) \
            & ~done
        return _Search(s.count + 1, middle, v, g, slope, dec, curv, s.interval_found, done,
                       failed, *low, *high, *ref, safe_step, safe_value, safe_grad)

    def try_safe_step(s):
        use_safe = (s.safe_stepsize > 0.0) | fnp.isinf(s.decrease_error)
        step, value, grad = _select(use_safe, (s.safe_stepsize, s.safe_value, s.safe_grad),
                                    (s.stepsize, s.value, s.grad))
        return s._replace(stepsize=step, value=value, grad=grad)

    def init(params):
        dt = fnp.asarray(tree_leaves(params)[0]).dtype
        return ScaleByZoomLinesearchState(
            fnp.asarray(1.0, dt), fnp.asarray(fnp.inf, dt), tree_zeros_like(params),
            ZoomLinesearchInfo(fnp.asarray(0), fnp.asarray(fnp.inf), fnp.asarray(fnp.inf)))

    def update(updates, state, params=None, *, value, grad, value_fn, **extra_args):
        fn_kwargs, rest = _split_fn_kwargs(value_fn, extra_args)
        if rest:
            raise TypeError("scale_by_zoom_linesearch.update: keyword arguments not accepted "
                            f"by value_fn: {sorted(rest)}")
        dt = state.learning_rate.dtype
        value = fnp.asarray(value, dt)
        slope = _vdot(updates, grad)
        value_and_grad = ad.value_and_grad(lambda q: value_fn(q, **fn_kwargs))

        def vg(stepsize):
            trial = tree_map(lambda p, u: p + fnp.asarray(stepsize, u.dtype) * u, params, updates)
            v, g = value_and_grad(trial)
            return fnp.asarray(v, dt), g, _vdot(g, updates)
        guess = fnp.asarray(1.0, dt) if initial_guess_strategy == "one" else state.learning_rate
        ctx = (params, updates, guess, value, slope, vg)
        zero, inf = fnp.asarray(0.0, dt), fnp.asarray(fnp.inf, dt)
        false = fnp.asarray(False)
        s = _Search(fnp.asarray(0), zero, value, grad, slope, inf, inf, false, false, false,
                    zero, value, slope, zero, value, slope, zero, value, zero, value, grad)
        for _ in range(int(max_linesearch_steps)):
            running = _concrete(~(s.done | s.failed))
            if running is False:
                break
            found = _concrete(s.interval_found)
            if running is None or found is None:  # traced: both phases, masked
                new = _select(s.interval_found, zoom_interval(s, ctx), search_interval(s, ctx))
            else:
                new = zoom_interval(s, ctx) if found else search_interval(s, ctx)
            new = _select(new.failed, try_safe_step(new), new)
            s = new if running else _select(~(s.done | s.failed), new, s)
        lr = fnp.asarray(s.stepsize, dt)
        new_updates = tree_map(lambda u: fnp.asarray(lr, u.dtype) * u, updates)
        return new_updates, ScaleByZoomLinesearchState(
            lr, s.value, s.grad, ZoomLinesearchInfo(s.count, s.decrease_error,
                                                     s.curvature_error))
    return GradientTransformationExtraArgs(init, update)


__all__ = ["ScaleByZoomLinesearchState", "ZoomLinesearchInfo", "scale_by_zoom_linesearch"]
