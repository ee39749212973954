"""Adaptive rescalings behind optax's optimizers: scale_by_rss (AdaGrad), _amsgrad, _adamax,
_adadelta, _adan, _belief, _yogi, _radam, _rprop, _sign, _sm3, _novograd."""
from __future__ import annotations

import functools
from typing import Any, NamedTuple

from funcgrad import lax
from funcgrad import numpy as fnp
from funcgrad.tree_util import tree_leaves, tree_map
from funcgrad.optim.base import (
    GradientTransformation,
    init_empty_state,
    safe_increment,
    tree_cast,
    tree_zeros_like,
    zero_count,
)
from funcgrad.optim.numerics import (
    abs_sq,
    bias_correction,
    update_infinity_moment,
    update_moment,
    update_moment_per_elem_norm,
)
from funcgrad.optim.transforms_basic import ScaleByAdamState


def _full_like(tree, value):
    return tree_map(lambda p: fnp.full_like(p, value), tree)


def _nesterov_mu_hat(mu, updates, b1, count_inc):
    """NAdam's look-ahead first moment: ``b1 m_hat(t+1) + (1 - b1) g_hat(t)``."""
    return tree_map(lambda m, g: b1 * m + (1 - b1) * g,
                    bias_correction(mu, b1, safe_increment(count_inc)),
                    bias_correction(updates, b1, count_inc))


class ScaleByRssState(NamedTuple):
    """AdaGrad's state: the running sum of squared gradients."""
    sum_of_squares: Any


def scale_by_rss(initial_accumulator_value: float = 0.1, eps: float = 1e-7
                 ) -> GradientTransformation:
    """AdaGrad's rescaling: ``s = s + g**2``; ``g / sqrt(s + eps)`` (0 where ``s == 0``).

    Example:
        >>> t = scale_by_rss(0.0, 0.0)
        >>> t.update(fnp.asarray([2.0]), t.init(fnp.zeros(1)))[0].tolist()
        [1.0]
    """
    def init(params):
        return ScaleByRssState(sum_of_squares=_full_like(params, initial_accumulator_value))

    def update(updates, state, params=None):
        del params
        sos = tree_map(lambda g, t: abs_sq(g) + t, updates, state.sum_of_squares)
        updates = tree_map(lambda t, g: fnp.where(t > 0, lax.rsqrt(t + eps), 0.0) * g,
                           sos, updates)
        return updates, ScaleByRssState(sum_of_squares=sos)
    return GradientTransformation(init, update)


class ScaleByAmsgradState(NamedTuple):
    """AMSGrad's state: count, moments and the running maximum of the second moment."""
    count: Any
    mu: Any
    nu: Any
    nu_max: Any


def scale_by_amsgrad(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
                     eps_root: float = 0.0, mu_dtype=None, bias_correction_mu: bool = True,
                     bias_correction_nu: bool = True) -> GradientTransformation:
    """AMSGrad (Reddi et al., 2018): Adam with ``v_max = max(v_max, v_hat)`` in the denominator.

    Example:
        >>> t = scale_by_amsgrad()
        >>> [round(x, 4) for x in t.update(fnp.asarray([1.0]), t.init(fnp.zeros(1)))[0].tolist()]
        [1.0]
    """
    mu_dtype = fnp.canonical_dtype(mu_dtype)

    def init(params):
        return ScaleByAmsgradState(zero_count(), tree_zeros_like(params, mu_dtype),
                                   tree_zeros_like(params), tree_zeros_like(params))

    def update(updates, state, params=None):
        del params
        mu = update_moment(updates, state.mu, b1, 1)
        nu = update_moment_per_elem_norm(updates, state.nu, b2, 2)
        count_inc = safe_increment(state.count)
        mu_hat = bias_correction(mu, b1, count_inc) if bias_correction_mu else mu
        nu_eff = bias_correction(nu, b2, count_inc) if bias_correction_nu else nu
        nu_max = tree_map(fnp.maximum, state.nu_max, nu_eff)
        updates = tree_map(lambda m, v: m / (fnp.sqrt(v + eps_root) + eps), mu_hat, nu_max)
        return updates, ScaleByAmsgradState(count_inc, tree_cast(mu, mu_dtype), nu, nu_max)
    return GradientTransformation(init, update)


def scale_by_adamax(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8
                    ) -> GradientTransformation:
    """Adamax (Kingma & Ba, 2014): ``m_hat / u`` with ``u = max(|g| + eps, b2 u)``.

    Example:
        >>> t = scale_by_adamax()
        >>> [round(x, 4) for x in t.update(fnp.asarray([2.0]), t.init(fnp.zeros(1)))[0].tolist()]
        [1.0]
    """
    def init(params):
        return ScaleByAdamState(zero_count(), tree_zeros_like(params), tree_zeros_like(params))

    def update(updates, state, params=None):
        del params
        count_inc = safe_increment(state.count)
        mu = update_moment(updates, state.mu, b1, 1)
        nu = update_infinity_moment(updates, state.nu, b2, eps)
        mu_hat = bias_correction(mu, b1, count_inc)
        return tree_map(lambda m, v: m / v, mu_hat, nu), ScaleByAdamState(count_inc, mu, nu)
    return GradientTransformation(init, update)


class ScaleByAdaDeltaState(NamedTuple):
    """AdaDelta's state: averages of squared gradients (e_g) and squared updates (e_x)."""
    e_g: Any
    e_x: Any


def scale_by_adadelta(rho: float = 0.9, eps: float = 1e-6) -> GradientTransformation:
    """AdaDelta (Zeiler, 2012): ``sqrt(E[dx^2] + eps) / sqrt(E[g^2] + eps) * g``.

    Example:
        >>> t = scale_by_adadelta()
        >>> t.update(fnp.asarray([1.0]), t.init(fnp.zeros(1)))[0].shape
        (1,)
    """
    def init(params):
        return ScaleByAdaDeltaState(tree_zeros_like(params), tree_zeros_like(params))

    def update(updates, state, params=None):
        del params
        e_g = update_moment(updates, state.e_g, rho, 2)
        updates = tree_map(lambda g, eg, ex: (fnp.sqrt(ex + eps) / fnp.sqrt(eg + eps)) * g,
                           updates, e_g, state.e_x)
        e_x = update_moment(updates, state.e_x, rho, 2)
        return updates, ScaleByAdaDeltaState(e_g, e_x)
    return GradientTransformation(init, update)


class ScaleByAdanState(NamedTuple):
    """Adan's state: moments of g, of gradient differences, of the squared look-ahead, the
    previous gradient and the step."""
    m: Any
    v: Any
    n: Any
    g: Any
    t: Any


def scale_by_adan(b1: float = 0.98, b2: float = 0.92, b3: float = 0.99, eps: float = 1e-8,
                  eps_root: float = 0.0) -> GradientTransformation:
    """Adan (Xie et al., 2022): ``(m_hat + (1 - b2) v_hat) / (sqrt(n_hat + eps_root) + eps)``,
    v averaging gradient differences and n the square of ``g + (1 - b2) (g - g_prev)``.

    Example:
        >>> t = scale_by_adan()
        >>> t.update(fnp.asarray([1.0]), t.init(fnp.zeros(1)))[0].shape
        (1,)
    """
    def init(params):
        z = tree_zeros_like
        return ScaleByAdanState(z(params), z(params), z(params), z(params), zero_count())

    def update(updates, state, params=None):
        del params
        g = updates
        diff = tree_map(lambda a, b: fnp.where(state.t == 0, fnp.zeros_like(a), a - b),
                        g, state.g)
        m = update_moment(g, state.m, b1, 1)
        v = update_moment(diff, state.v, b2, 1)
        sq = tree_map(lambda a, d: a + (1 - b2) * d, g, diff)
        n = update_moment_per_elem_norm(sq, state.n, b3, 2)
        t = safe_increment(state.t)
        m_hat, v_hat, n_hat = (bias_correction(m, b1, t), bias_correction(v, b2, t),
                               bias_correction(n, b3, t))
        u = tree_map(lambda a, b, c: (a + (1 - b2) * b) / (fnp.sqrt(c + eps_root) + eps),
                     m_hat, v_hat, n_hat)
        return u, ScaleByAdanState(m, v, n, g, t)
    return GradientTransformation(init, update)


class ScaleByBeliefState(NamedTuple):
    """AdaBelief's state: count, first moment, and the second moment of ``g - m``."""
    count: Any
    mu: Any
    nu: Any


def scale_by_belief(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-16,
                    eps_root: float = 1e-16, *, nesterov: bool = False
                    ) -> GradientTransformation:
    """AdaBelief (Zhuang et al., 2020): Adam whose second moment tracks ``(g - m)**2``
    (plus ``eps_root``), the 'belief' in the current gradient.

    Example:
        >>> t = scale_by_belief()
        >>> t.update(fnp.asarray([1.0]), t.init(fnp.zeros(1)))[0].shape
        (1,)
    """
    def init(params):
        return ScaleByBeliefState(zero_count(), tree_zeros_like(params), tree_zeros_like(params))

    def update(updates, state, params=None):
        del params
        mu = update_moment(updates, state.mu, b1, 1)
        pred_err = tree_map(lambda g, m: g - m, updates, mu)
        nu = update_moment_per_elem_norm(pred_err, state.nu, b2, 2)
        nu = tree_map(lambda v: v + eps_root, nu)
        count_inc = safe_increment(state.count)
        mu_hat = (_nesterov_mu_hat(mu, updates, b1, count_inc) if nesterov
                  else bias_correction(mu, b1, count_inc))
        nu_hat = bias_correction(nu, b2, count_inc)
        updates = tree_map(lambda m, v: m / (fnp.sqrt(v) + eps), mu_hat, nu_hat)
        return updates, ScaleByBeliefState(count_inc, mu, nu)
    return GradientTransformation(init, update)


def scale_by_yogi(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-3, eps_root: float = 0.0,
                  initial_accumulator_value: float = 1e-6) -> GradientTransformation:
    """Yogi (Zaheer et al., 2018): ``v = v - (1 - b2) sign(v - g**2) g**2``, then Adam's step.

    Example:
        >>> t = scale_by_yogi()
        >>> t.update(fnp.asarray([1.0]), t.init(fnp.zeros(1)))[0].shape
        (1,)
    """
    def init(params):
        return ScaleByAdamState(zero_count(), _full_like(params, initial_accumulator_value),
                                _full_like(params, initial_accumulator_value))

    def update(updates, state, params=None):
        del params
        mu = update_moment(updates, state.mu, b1, 1)
        nu = tree_map(lambda g, v: v - (1 - b2) * fnp.sign(v - abs_sq(g)) * abs_sq(g),
                      updates, state.nu)
        count_inc = safe_increment(state.count)
        mu_hat, nu_hat = bias_correction(mu, b1, count_inc), bias_correction(nu, b2, count_inc)
        updates = tree_map(lambda m, v: m / (fnp.sqrt(v + eps_root) + eps), mu_hat, nu_hat)
        return updates, ScaleByAdamState(count_inc, mu, nu)
    return GradientTransformation(init, update)


def scale_by_radam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, eps_root: float = 0.0,
                   threshold: float = 5.0, *, nesterov: bool = False) -> GradientTransformation:
    """Rectified Adam (Liu et al., 2020): Adam times the variance rectification ``r`` once the
    SMA length ``rho_t`` reaches ``threshold``; before that, plain momentum ``m_hat``.

    ``rho_inf = 2 / (1 - b2) - 1``, ``rho_t = rho_inf - 2 t b2^t / (1 - b2^t)``.

    Example:
        >>> t = scale_by_radam()
        >>> [round(x, 4) for x in t.update(fnp.asarray([2.0]), t.init(fnp.zeros(1)))[0].tolist()]
        [2.0]
    """
    ro_inf = 2.0 / (1.0 - b2) - 1.0

    def init(params):
        return ScaleByAdamState(zero_count(), tree_zeros_like(params), tree_zeros_like(params))

    def update(updates, state, params=None):
        del params
        mu = update_moment(updates, state.mu, b1, 1)
        nu = update_moment_per_elem_norm(updates, state.nu, b2, 2)
        count_inc = safe_increment(state.count)
        dt = fnp.result_type(*[fnp.asarray(m).dtype for m in tree_leaves(mu)] or [fnp.float32])
        t = fnp.asarray(count_inc, dt)
        b2t = fnp.power(fnp.asarray(b2, dt), t)
        ro = ro_inf - 2 * t * b2t / (1 - b2t)
        mu_hat = (_nesterov_mu_hat(mu, updates, b1, count_inc) if nesterov
                  else bias_correction(mu, b1, count_inc))
        nu_hat = bias_correction(nu, b2, count_inc)
        # r = sqrt((rho-4)(rho-2) rho_inf / ((rho_inf-4)(rho_inf-2) rho)); NaN-free where used
        r = fnp.sqrt(fnp.maximum((ro - 4.0) * (ro - 2.0) * ro_inf
                                 / ((ro_inf - 4.0) * (ro_inf - 2.0) * ro), 0.0))
        out = tree_map(lambda m, v: fnp.where(
            ro >= threshold, fnp.asarray(r, m.dtype) * m / (fnp.sqrt(v + eps_root) + eps), m),
            mu_hat, nu_hat)
        return out, ScaleByAdamState(count_inc, mu, nu)
    return GradientTransformation(init, update)


class ScaleByRpropState(NamedTuple):
    """Rprop's state: per-element step sizes and the previous updates."""
    step_sizes: Any
    prev_updates: Any


def scale_by_rprop(learning_rate: float, eta_minus: float = 0.5, eta_plus: float = 1.2,
                   min_step_size: float = 1e-6, max_step_size: float = 50.0
                   ) -> GradientTransformation:
    """Rprop (Riedmiller & Braun, 1993): per-element steps grow by ``eta_plus`` while the
    gradient keeps its sign and shrink by ``eta_minus`` when it flips (that step is skipped).

    Example:
        >>> t = scale_by_rprop(0.1)
        >>> [round(x, 6) for x in t.update(fnp.asarray([-3.0]), t.init(fnp.zeros(1)))[0].tolist()]
        [-0.1]
    """
    def init(params):
        return ScaleByRpropState(_full_like(params, learning_rate), tree_zeros_like(params))

    def update(updates, state, params=None):
        del params
        sign = tree_map(lambda g, pg: g * pg, updates, state.prev_updates)
        step_sizes = tree_map(lambda s, st: fnp.where(
            s == 0, st, fnp.clip(fnp.where(s > 0, st * eta_plus, st * eta_minus),
                                 min_step_size, max_step_size)), sign, state.step_sizes)
        prev_updates = tree_map(lambda s, g, st: fnp.where(s < 0, fnp.zeros_like(g),
                                                           st * fnp.sign(g)),
                                sign, updates, step_sizes)
        updates = tree_map(lambda s, pg, old: fnp.where(s < 0, fnp.zeros_like(pg), pg),
                           sign, prev_updates, state.prev_updates)
        return updates, ScaleByRpropState(step_sizes, prev_updates)
    return GradientTransformation(init, update)


def scale_by_sign() -> GradientTransformation:
    """Replaces each update by its sign.

    Example:
        >>> t = scale_by_sign()
        >>> t.update(fnp.asarray([-3.0, 0.0, 2.0]), t.init(None))[0].tolist()
        [-1.0, 0.0, 1.0]
    """
    def update(updates, state, params=None):
        del params
        return tree_map(fnp.sign, updates), state
    return GradientTransformation(init_empty_state, update)


class ScaleBySM3State(NamedTuple):
    """SM3's state: one accumulator vector per axis of each parameter, and the momentum."""
    mu: Any
    nu: Any


def _other_axes(i, ndim):
    return tuple(a for a in range(ndim) if a != i)


def scale_by_sm3(b1: float = 0.9, b2: float = 1.0, eps: float = 1e-8) -> GradientTransformation:
    """SM3 (Anil et al., 2019): memory-efficient AdaGrad with one accumulator per axis;
    the elementwise accumulator is the min over axes of the broadcast per-axis maxima.

    Example:
        >>> t = scale_by_sm3()
        >>> t.update(fnp.ones((2, 3)), t.init(fnp.zeros((2, 3))))[0].shape
        (2, 3)
    """
    def init(params):
        def zeros_for_dim(p):
            p = fnp.asarray(p)
            return [fnp.zeros((p.shape[i],), p.dtype) for i in range(p.ndim)]
        return ScaleBySM3State(tree_map(zeros_for_dim, params), tree_zeros_like(params))

    def new_accum(g, v):
        c0, c1 = ((1.0 - b2) if b2 != 1.0 else 1.0), b2
        if g.ndim < 2:
            return c0 * g ** 2 + c1 * v[0]
        return c0 * g ** 2 + c1 * functools.reduce(fnp.minimum, v)

    def update(updates, state, params=None):
        del params
        expanded = tree_map(lambda g, v: [
            fnp.reshape(v[i], [1] * i + [g.shape[i]] + [1] * (g.ndim - i - 1))
            for i in range(g.ndim)], updates, state.mu)
        accum = tree_map(new_accum, updates, expanded)
        up = tree_map(lambda g, a: g * fnp.where(a > 0, lax.rsqrt(a + eps), 0.0), updates, accum)
        nu = update_moment(up, state.nu, b1, 1)
        mu = tree_map(lambda a: [a if a.ndim < 2 else fnp.max(a, axis=_other_axes(i, a.ndim))
                                 for i in range(a.ndim)], accum)
        return nu, ScaleBySM3State(mu, nu)
    return GradientTransformation(init, update)


class ScaleByNovogradState(NamedTuple):
    """NovoGrad's state: count, first moment, and per-layer second moments (scalars)."""
    count: Any
    mu: Any
    nu: Any


def scale_by_novograd(b1: float = 0.9, b2: float = 0.25, eps: float = 1e-8,
                      eps_root: float = 0.0, weight_decay: float = 0.0,
                      mu_dtype=None) -> GradientTransformation:
    """NovoGrad (Ginsburg et al., 2019): layer-wise ``nu = b2 nu + (1 - b2) ||g||^2``
    (``nu = ||g||^2`` on the first step), ``m = b1 m + g / (sqrt(nu + eps_root) + eps) + wd p``
    (no ``b1 m`` on the first step).

    Example:
        >>> t = scale_by_novograd()
        >>> p = fnp.zeros(2)
        >>> [round(x, 4) for x in t.update(fnp.asarray([3.0, 4.0]), t.init(p), p)[0].tolist()]
        [0.6, 0.8]
    """
    mu_dtype = fnp.canonical_dtype(mu_dtype)

    def init(params):
        nu = tree_map(lambda p: fnp.zeros((), fnp.asarray(p).dtype), params)
        return ScaleByNovogradState(zero_count(), tree_zeros_like(params, mu_dtype), nu)

    def update(updates, state, params):
        count_inc = safe_increment(state.count)
        first = count_inc == 1
        nu = tree_map(lambda g, n: fnp.where(
            first, fnp.asarray(fnp.sum(g * g), n.dtype),
            (1 - b2) * fnp.sum(g * g) + b2 * n), updates, state.nu)
        add = tree_map(lambda g, p, n: g / (fnp.sqrt(n + eps_root) + eps) + weight_decay * p,
                       updates, params, nu)
        mu = tree_map(lambda m, a: fnp.where(first, a, b1 * m + a), state.mu, add)
        mu = tree_cast(mu, mu_dtype)
        return mu, ScaleByNovogradState(count_inc, mu, nu)
    return GradientTransformation(init, update)


__all__ = ["ScaleByAdaDeltaState", "ScaleByAdanState", "ScaleByAmsgradState",
           "ScaleByBeliefState", "ScaleByNovogradState", "ScaleByRpropState",
           "ScaleByRssState", "ScaleBySM3State", "scale_by_adadelta", "scale_by_adamax",
           "scale_by_adan", "scale_by_amsgrad", "scale_by_belief", "scale_by_novograd",
           "scale_by_radam", "scale_by_rprop", "scale_by_rss", "scale_by_sign",
           "scale_by_sm3", "scale_by_yogi"]
