"""L-BFGS (optax's scale_by_lbfgs and lbfgs) and the backtracking line search, with
value_and_grad_from_state for reusing the values a line search already computed."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from funcgrad.transforms import ad
from funcgrad import lax
from funcgrad import numpy as fnp
from funcgrad.tree_util import tree_leaves, tree_map
from funcgrad.optim.base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    chain,
    identity,
    safe_increment,
    tree_zeros_like,
)
from funcgrad.optim.linesearch_zoom import _split_fn_kwargs, scale_by_zoom_linesearch
from funcgrad.optim.transforms_basic import scale, scale_by_learning_rate


def _vdot(a, b):
    leaves_a, leaves_b = tree_leaves(a), tree_leaves(b)
    if not leaves_a:
        return fnp.zeros((), fnp.float32)
    return sum(fnp.sum(x * y) for x, y in zip(leaves_a, leaves_b))


def _float_dtype(tree):
    """The widest floating dtype among the leaves (float32 when there is none)."""
    dts = [fnp.asarray(x).dtype for x in tree_leaves(tree)]
    return fnp.result_type(*dts) if dts else fnp.float32


class ScaleByLBFGSState(NamedTuple):
    """L-BFGS state: the step count, the previous params and updates, and the memory of
    parameter differences, gradient differences and their inverse inner products."""
    count: Any
    params: Any
    updates: Any
    diff_params_memory: Any
    diff_updates_memory: Any
    weights_memory: Any


def _row(memory, idx):
    return tree_map(lambda m: fnp.take(m, idx, axis=0), memory)


def _set_row(memory, idx, value, size):
    def one(m, v):
        hit = fnp.reshape(fnp.arange(size) == idx, (size,) + (1,) * (m.ndim - 1))
        return fnp.where(hit, fnp.expand_dims(fnp.asarray(v, m.dtype), 0), m)
    return tree_map(one, memory, value)


def _precondition(updates, dp_mem, du_mem, rhos, identity_scale, memory_idx, size):
    """The two-loop recursion: ``H_k g`` from the ``size`` most recent (s, y) pairs, oldest
    slot at ``memory_idx``."""
    indices = [(memory_idx + i) % size for i in range(size)]
    vec, alphas = updates, []
    for idx in reversed(indices):  # newest to oldest: alpha_i = rho_i s_i.v; v -= alpha_i y_i
        alpha = fnp.take(rhos, idx) * _vdot(_row(dp_mem, idx), vec)
        vec = tree_map(lambda v, y: v - fnp.asarray(alpha, v.dtype) * y, vec, _row(du_mem, idx))
        alphas.append(alpha)
    alphas = alphas[::-1]
    vec = tree_map(lambda v: fnp.asarray(identity_scale, v.dtype) * v, vec)
    for idx, alpha in zip(indices, alphas):  # oldest to newest: v += (alpha_i - beta_i) s_i
        beta = fnp.take(rhos, idx) * _vdot(_row(du_mem, idx), vec)
        vec = tree_map(lambda v, s: v + fnp.asarray(alpha - beta, v.dtype) * s, vec,
                       _row(dp_mem, idx))
    return vec


def scale_by_lbfgs(memory_size: int = 10, scale_init_precond: bool = True
                   ) -> GradientTransformation:
    """L-BFGS's direction (Nocedal & Wright, Alg. 7.4): the gradient preconditioned by the
    inverse-Hessian estimate from the last ``memory_size`` steps (no sign flip).

    The initial estimate is ``gamma I`` with ``gamma = s.y / y.y`` from the newest pair
    (``min(1, 1 / ||g||)`` on the first step) when ``scale_init_precond``, else ``I``.

    Example:
        >>> t = scale_by_lbfgs()
        >>> p = fnp.asarray([1.0, 2.0])
        >>> t.update(fnp.asarray([0.5, 0.5]), t.init(p), p)[0].tolist()
        [0.5, 0.5]
    """
    if memory_size < 1:
        raise ValueError("scale_by_lbfgs: memory_size must be >= 1")

    def init(params):
        stacked = tree_map(lambda x: fnp.zeros((memory_size,) + fnp.shape(x),
                                               fnp.asarray(x).dtype), params)
        return ScaleByLBFGSState(fnp.asarray(0, fnp.int32), tree_zeros_like(params),
                                 tree_zeros_like(params), stacked, stacked,
                                 fnp.zeros(memory_size, _float_dtype(params)))

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("scale_by_lbfgs needs the current params in `update`")
        memory_idx = state.count % memory_size
        prev_idx = (state.count - 1) % memory_size
        started = state.count > 0
        diff_params = tree_map(lambda p, q: fnp.where(started, p - q, 0.0), params,
                               state.params)
        diff_updates = tree_map(lambda g, h: fnp.where(started, g - h, 0.0), updates,
                                state.updates)
        sy = _vdot(diff_updates, diff_params)
        weight = fnp.where(started & (sy != 0.0), 1.0 / fnp.where(sy == 0.0, 1.0, sy), 0.0)
        dp_mem = _set_row(state.diff_params_memory, prev_idx, diff_params, memory_size)
        du_mem = _set_row(state.diff_updates_memory, prev_idx, diff_updates, memory_size)
        w_mem = _set_row(state.weights_memory, prev_idx, weight, memory_size)
        if scale_init_precond:
            yy = _vdot(diff_updates, diff_updates)
            gamma = fnp.where(yy > 0.0, sy / fnp.where(yy > 0.0, yy, 1.0), 1.0)
            u_norm = fnp.sqrt(_vdot(updates, updates))
            capped = fnp.minimum(1.0, 1.0 / lax.stop_gradient(u_norm))
            identity_scale = fnp.where(started, gamma, capped)
        else:
            identity_scale = 1.0
        direction = _precondition(updates, dp_mem, du_mem, w_mem, identity_scale, memory_idx,
                                  memory_size)
        return direction, ScaleByLBFGSState(safe_increment(state.count), params, updates,
                                            dp_mem, du_mem, w_mem)
    return GradientTransformation(init, update)


# ---------------------------------------------------------------------------------------------
# backtracking line search
# ---------------------------------------------------------------------------------------------

class BacktrackingLinesearchInfo(NamedTuple):
    """How many trial steps the search took and the final sufficient-decrease error."""
    num_linesearch_steps: Any
    decrease_error: Any


class ScaleByBacktrackingLinesearchState(NamedTuple):
    """The accepted step size, the value there, its gradient (if stored) and search info."""
    learning_rate: Any
    value: Any
    grad: Any
    info: BacktrackingLinesearchInfo


def scale_by_backtracking_linesearch(max_backtracking_steps: int, slope_rtol: float = 1e-4,
                                     decrease_factor: float = 0.8,
                                     increase_factor: float = 1.5,
                                     max_learning_rate: float = 1.0, atol: float = 0.0,
                                     rtol: float = 0.0, store_grad: bool = False,
                                     verbose: bool = False) -> GradientTransformationExtraArgs:
    """Armijo backtracking: start from ``min(increase_factor * previous, max_learning_rate)``
    and multiply by ``decrease_factor`` until ``f(x + a u) <= (1 + rtol) f(x) + a slope_rtol
    <u, g> + atol`` (at most ``max_backtracking_steps`` reductions). A search that never sees
    a finite value returns step 0.

    ``update`` needs ``value=f(params)``, ``grad=`` its gradient and ``value_fn=f``; other
    keywords accepted by ``value_fn`` are passed to it. The trial steps are unrolled (a fixed
    ``max_backtracking_steps + 1`` evaluations, later ones masked), so the search jits.

    Example:
        >>> from funcgrad import optim
        >>> f = lambda x: fnp.sum(x ** 2)
        >>> ls = scale_by_backtracking_linesearch(max_backtracking_steps=15)
        >>> x = fnp.asarray([1.0])
        >>> g = fnp.asarray([2.0])
        >>> u, s = ls.update(-g, ls.init(x), x, value=f(x), grad=g, value_fn=f)
        >>> round(float(s.learning_rate), 4)  # 1.0 misses the Armijo condition, 0.8 meets it
        0.8
    """
    del verbose

    def init(params):
        dt = fnp.asarray(tree_leaves(params)[0]).dtype
        return ScaleByBacktrackingLinesearchState(
            fnp.asarray(1.0, dt), fnp.asarray(fnp.inf, dt),
            tree_zeros_like(params) if store_grad else None,
            BacktrackingLinesearchInfo(fnp.asarray(0), fnp.asarray(fnp.inf, dt)))

    def decrease_error(stepsize, slope, value, new_value):
        err = new_value - (1.0 + rtol) * value - stepsize * slope_rtol * slope
        return fnp.maximum(fnp.where(fnp.isnan(err), fnp.inf, err), 0.0)

    def update(updates, state, params=None, *, value, grad, value_fn, **extra_args):
        fn_kwargs, rest = _split_fn_kwargs(value_fn, extra_args)
        if rest:
            raise TypeError("scale_by_backtracking_linesearch.update: keyword arguments not "
                            f"accepted by value_fn: {sorted(rest)}")
        dt = state.learning_rate.dtype
        slope = _vdot(updates, grad)
        lr = fnp.minimum(increase_factor * state.learning_rate, max_learning_rate)
        new_value = fnp.asarray(value, dt)
        new_grad = tree_zeros_like(params)
        err = fnp.asarray(fnp.inf, dt)
        it = fnp.asarray(0)
        for i in range(int(max_backtracking_steps) + 1):
            running = ~(err <= atol)  # the while-loop condition, as a mask
            trial_lr = lr * decrease_factor if i > 0 else lr
            trial = tree_map(lambda p, u: p + fnp.asarray(trial_lr, u.dtype) * u, params,
                             updates)
            if store_grad:
                trial_value, trial_grad = ad.value_and_grad(
                    lambda q: value_fn(q, **fn_kwargs))(trial)
                new_grad = tree_map(lambda a, b: fnp.where(running, a, b), trial_grad, new_grad)
            else:
                trial_value = value_fn(trial, **fn_kwargs)
            trial_err = decrease_error(trial_lr, slope, value, trial_value)
            lr = fnp.where(running, trial_lr, lr)
            new_value = fnp.where(running, fnp.asarray(trial_value, dt), new_value)
            err = fnp.where(running, fnp.asarray(trial_err, dt), err)
            it = fnp.where(running, it + 1, it)
        new_lr = fnp.asarray(fnp.where(fnp.isinf(err), 0.0, lr), dt)
        new_updates = tree_map(lambda u: fnp.asarray(new_lr, u.dtype) * u, updates)
        return new_updates, ScaleByBacktrackingLinesearchState(
            new_lr, new_value, new_grad if store_grad else None,
            BacktrackingLinesearchInfo(it, err))
    return GradientTransformationExtraArgs(init, update)


def _find_field(tree, name):
    """The unique NamedTuple field ``name`` anywhere in an optimizer state (or None)."""
    found = []

    def walk(node):
        if isinstance(node, tuple) and hasattr(node, "_fields"):
            if name in node._fields:
                found.append(getattr(node, name))
            for child in node:
                walk(child)
        elif isinstance(node, (tuple, list)):
            for child in node:
                walk(child)
        elif isinstance(node, dict):
            for child in node.values():
                walk(child)
    walk(tree)
    if len(found) > 1:
        raise KeyError(f"value_and_grad_from_state: several fields named {name!r} in the state")
    return found[0] if found else None


def value_and_grad_from_state(value_fn: Callable) -> Callable:
    """``value_and_grad(value_fn)`` that reuses the value and gradient a line search stored in
    the optimizer state (recomputing them when the stored value is not finite, e.g. on the
    first step).

    Returns:
        ``f(params, *args, state, **kwargs) -> (value, grad)``.

    Example:
        >>> from funcgrad import optim
        >>> f = lambda x: fnp.sum(x ** 2)
        >>> opt = optim.chain(optim.sgd(0.1), optim.scale_by_backtracking_linesearch(
        ...     max_backtracking_steps=5, store_grad=True))
        >>> x = fnp.asarray([1.0])
        >>> value_and_grad_from_state(f)(x, state=opt.init(x))[0].tolist()
        1.0
    """
    def value_and_grad(params, *fn_args, state, **fn_kwargs):
        value, grad = _find_field(state, "value"), _find_field(state, "grad")
        if value is None or grad is None:
            raise ValueError("value_and_grad_from_state: no stored value and grad in the "
                             "state; use an optimizer that stores them (store_grad=True)")
        fresh_v, fresh_g = ad.value_and_grad(value_fn)(params, *fn_args, **fn_kwargs)
        ok = ~fnp.isinf(value) & ~fnp.isnan(value)
        return (fnp.where(ok, value, fresh_v),
                tree_map(lambda a, b: fnp.where(ok, a, b), grad, fresh_g))
    return value_and_grad


def lbfgs(learning_rate=None, memory_size: int = 10, scale_init_precond: bool = True,
          linesearch: GradientTransformation | None = scale_by_zoom_linesearch(
              max_linesearch_steps=20, initial_guess_strategy="one")
          ) -> GradientTransformationExtraArgs:
    """L-BFGS: ``chain(scale_by_lbfgs, scale(-1) or -learning_rate, linesearch)``, by default
    with the zoom (strong Wolfe) line search, as in optax; ``linesearch=None`` takes fixed
    steps.

    ``update`` needs ``value=``, ``grad=`` and ``value_fn=`` for the line search; use
    :func:`value_and_grad_from_state` to reuse the value and gradient it computed.

    Example:
        >>> import funcgrad
        >>> from funcgrad import optim
        >>> f = lambda x: fnp.sum((x - 1.0) ** 2)
        >>> opt = optim.lbfgs()
        >>> x = fnp.zeros(2)
        >>> state = opt.init(x)
        >>> vg = optim.value_and_grad_from_state(f)
        >>> for _ in range(3):
        ...     v, g = vg(x, state=state)
        ...     u, state = opt.update(g, state, x, value=v, grad=g, value_fn=f)
        ...     x = optim.apply_updates(x, u)
        >>> [round(v, 4) for v in x.tolist()]
        [1.0, 1.0]
    """
    base_scaling = scale(-1.0) if learning_rate is None else \
        scale_by_learning_rate(learning_rate)
    if linesearch is None:
        linesearch = identity()
    return chain(scale_by_lbfgs(memory_size, scale_init_precond), base_scaling, linesearch)


__all__ = ["BacktrackingLinesearchInfo", "ScaleByBacktrackingLinesearchState",
           "ScaleByLBFGSState", "lbfgs", "scale_by_backtracking_linesearch", "scale_by_lbfgs",
           "value_and_grad_from_state"]
