"""Accumulation, noise, clipping and constraints (optax's): ema, add_noise, clip_by_block_rms,
adaptive_grad_clip, per-example clipping, keep_params_nonnegative, zero_nans."""
from __future__ import annotations

from typing import Any, NamedTuple

from funcgrad import numpy as fnp
from funcgrad import random
from funcgrad.tree_util import tree_flatten, tree_leaves, tree_map, tree_unflatten
from funcgrad.optim.base import (
    NO_PARAMS_MSG,
    EmptyState,
    GradientTransformation,
    init_empty_state,
    safe_increment,
    tree_cast,
    tree_zeros_like,
    zero_count,
)
from funcgrad.optim.numerics import abs_sq, bias_correction, update_moment

AdaptiveGradClipState = EmptyState
AddDecayedWeightsState = EmptyState
ClipByGlobalNormState = EmptyState
ClipState = EmptyState
NonNegativeParamsState = EmptyState


class EmaState(NamedTuple):
    """ema's state: the step count and the moving average."""
    count: Any
    ema: Any


def ema(decay: float, debias: bool = True, accumulator_dtype=None) -> GradientTransformation:
    """Exponential moving average of the updates: ``e = (1 - decay) g + decay e``, returned
    bias-corrected (``e / (1 - decay**t)``) when ``debias``.

    Example:
        >>> t = ema(0.5, debias=False)
        >>> t.update(fnp.asarray([2.0]), t.init(fnp.zeros(1)))[0].tolist()
        [1.0]
    """
    accumulator_dtype = fnp.canonical_dtype(accumulator_dtype)

    def init(params):
        return EmaState(zero_count(), tree_zeros_like(params, accumulator_dtype))

    def update(updates, state, params=None):
        del params
        updates = new_ema = update_moment(updates, state.ema, decay, 1)
        count_inc = safe_increment(state.count)
        if debias:
            updates = bias_correction(new_ema, decay, count_inc)
        return updates, EmaState(count_inc, tree_cast(new_ema, accumulator_dtype))
    return GradientTransformation(init, update)


class AddNoiseState(NamedTuple):
    """add_noise's state: the step count and the PRNG key."""
    count: Any
    rng_key: Any


def _canonical_key(key):
    if isinstance(key, int):
        return random.PRNGKey(key)
    return key


def add_noise(eta: float, gamma: float, key=None, *, seed: int | None = None
              ) -> GradientTransformation:
    """Adds annealed Gaussian noise (Neelakantan et al., 2015): ``g + sqrt(eta / t**gamma) n``,
    ``n`` standard normal, one key per leaf from ``split(key, num_leaves)``.

    Args:
        eta: the base variance.
        gamma: the decay exponent of the variance.
        key: a PRNG key or an int seed (default 0).
        seed: deprecated spelling of an int ``key``.

    Example:
        >>> t = add_noise(0.01, 0.55, key=0)
        >>> t.update(fnp.zeros(3), t.init(fnp.zeros(3)))[0].shape
        (3,)
    """
    if seed is not None:
        if key is not None:
            raise ValueError("add_noise: give only one of seed or key")
        key = seed
    key = 0 if key is None else key

    def init(params):
        del params
        return AddNoiseState(zero_count(), _canonical_key(key))

    def update(updates, state, params=None):
        del params
        count_inc = safe_increment(state.count)
        std = fnp.sqrt(eta / fnp.power(fnp.asarray(count_inc, fnp.float32), gamma))
        keys = random.split(state.rng_key)
        rng_key, sample_key = keys[0], keys[1]
        leaves, treedef = tree_flatten(updates)
        leaf_keys = random.split(sample_key, len(leaves)) if leaves else []
        noisy = [g + fnp.asarray(std, g.dtype) * random.normal(k, g.shape, g.dtype)
                 for g, k in zip(leaves, leaf_keys)]
        return tree_unflatten(treedef, noisy), AddNoiseState(count_inc, rng_key)
    return GradientTransformation(init, update)


# ---------------------------------------------------------------------------------------------
# clipping
# ---------------------------------------------------------------------------------------------

def clip_by_block_rms(threshold: float) -> GradientTransformation:
    """Divides each leaf by ``max(1, rms(leaf) / threshold)``.

    Example:
        >>> t = clip_by_block_rms(1.0)
        >>> t.update(fnp.asarray([2.0, 2.0]), t.init(None))[0].tolist()
        [1.0, 1.0]
    """
    def update(updates, state, params=None):
        del params
        return tree_map(lambda u: u / fnp.maximum(1.0, fnp.sqrt(fnp.mean(abs_sq(u)))
                                                  / threshold), updates), state
    return GradientTransformation(init_empty_state, update)


def unitwise_norm(x, axis=None):
    """The L2 norm of each unit of x, broadcast to x's shape (optax.transforms.unitwise_norm).

    A unit reduces over `axis`, or by rank: the whole array for scalars and vectors, axis 0
    for rank 2 and 3 (linear layers, multi-head linear), all but the last axis for rank 4
    and 5 (convolution kernels).

    Example:
        >>> unitwise_norm(fnp.asarray([[3.0, 1.0], [4.0, 0.0]])).tolist()
        [[5.0, 1.0], [5.0, 1.0]]
    """
    if axis is not None:
        sq = fnp.sum(abs_sq(x), axis=axis, keepdims=True)
    elif fnp.squeeze(x).ndim <= 1:
        sq = fnp.sum(abs_sq(x), keepdims=True)
    elif x.ndim in (2, 3):
        sq = fnp.sum(abs_sq(x), axis=0, keepdims=True)
    elif x.ndim in (4, 5):
        sq = fnp.sum(abs_sq(x), axis=tuple(range(x.ndim - 1)), keepdims=True)
    else:
        raise ValueError(f"adaptive_grad_clip: expected a parameter of rank 1 to 5, got shape "
                         f"{x.shape}; pass `axis` for other shapes")
    return fnp.broadcast_to(fnp.sqrt(sq), x.shape)


def adaptive_grad_clip(clipping: float, eps: float = 1e-3, axis=None) -> GradientTransformation:
    """Adaptive gradient clipping (Brock et al., 2021): unit-wise, clip ``g`` to norm
    ``clipping * max(||p||, eps)`` (unit = output unit: all axes but the last for rank >= 2).

    Example:
        >>> t = adaptive_grad_clip(0.5)
        >>> p = fnp.asarray([3.0, 4.0])
        >>> t.update(fnp.asarray([30.0, 40.0]), t.init(p), p)[0].tolist()
        [1.5, 2.0]
    """
    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)

        def one(g, p):
            g_norm, p_norm = unitwise_norm(g, axis), unitwise_norm(p, axis)
            return unitwise_clip(g_norm, clipping * fnp.maximum(p_norm, eps), g)
        return tree_map(one, updates, params), state
    return GradientTransformation(init_empty_state, update)


def unitwise_clip(g_norm, max_norm, grad, div_eps=1e-6):
    """grad where its unit norm g_norm is below max_norm, else grad scaled to max_norm
    (optax.transforms.unitwise_clip; the shapes must be equal).

    Example:
        >>> g = fnp.asarray([3.0, 4.0])
        >>> unitwise_clip(fnp.full(2, 5.0), fnp.full(2, 1.0), g).tolist()
        [0.6000000238418579, 0.800000011920929]
    """
    if not (fnp.shape(g_norm) == fnp.shape(max_norm) == fnp.shape(grad)):
        raise ValueError(f"unitwise_clip: g_norm, max_norm and grad must have equal shapes, "
                         f"got {fnp.shape(g_norm)}, {fnp.shape(max_norm)} and "
                         f"{fnp.shape(grad)}")
    clipped = grad * (max_norm / fnp.maximum(g_norm, div_eps))
    return fnp.where(g_norm < max_norm, grad, clipped)


def _check_batch_dim(grads, name):
    leaves = tree_leaves(grads)
    if not leaves or not all(g.ndim >= 1 and g.shape[0] == leaves[0].shape[0] for g in leaves):
        raise ValueError(f"{name} expects every leaf of `grads` to have the same batch "
                         f"dimension in axis 0; got shapes {[g.shape for g in leaves]}")


def per_example_global_norm_clip(grads, l2_norm_clip):
    """Clips each example's gradient (axis 0 of every leaf) to global norm ``l2_norm_clip``
    and sums over examples.

    Returns:
        ``(clipped_sum, num_clipped)``.

    Example:
        >>> s, n = per_example_global_norm_clip([fnp.asarray([[3.0, 4.0], [0.3, 0.4]])], 1.0)
        >>> [round(x, 4) for x in s[0].tolist()], int(n)
        ([0.9, 1.2], 1)
    """
    _check_batch_dim(grads, "per_example_global_norm_clip")
    leaves = tree_leaves(grads)
    sq = sum(fnp.sum(abs_sq(g).reshape(g.shape[0], -1), axis=1) for g in leaves)
    norms = fnp.sqrt(sq)
    mult = fnp.minimum(l2_norm_clip / norms, 1.0)
    mult = fnp.where(fnp.isnan(mult), 1.0, mult)
    num_clipped = fnp.sum(mult < 1.0)
    return tree_map(lambda g: fnp.tensordot(mult, g, axes=1), grads), num_clipped


def per_example_layer_norm_clip(grads, global_l2_norm_clip, uniform: bool = True):
    """Per-example clipping leaf by leaf: each leaf gets the clip norm
    ``C / sqrt(num_leaves)`` (``uniform``) or ``C sqrt(leaf_size / total_size)``.

    Returns:
        ``(tree of clipped sums, tree of clipped counts)``.

    Example:
        >>> s, n = per_example_layer_norm_clip([fnp.asarray([[3.0, 4.0]])], 1.0)
        >>> [round(x, 4) for x in s[0].tolist()], int(n[0])
        ([0.6, 0.8], 1)
    """
    _check_batch_dim(grads, "per_example_layer_norm_clip")
    leaves, treedef = tree_flatten(grads)
    if uniform:
        clips = [global_l2_norm_clip * (1.0 / len(leaves)) ** 0.5 for _ in leaves]
    else:
        total = sum(g[0].size for g in leaves)
        clips = [global_l2_norm_clip * (g[0].size / total) ** 0.5 for g in leaves]
    results = [per_example_global_norm_clip(g, c) for g, c in zip(leaves, clips)]
    return (tree_unflatten(treedef, [r[0] for r in results]),
            tree_unflatten(treedef, [r[1] for r in results]))


# ---------------------------------------------------------------------------------------------
# constraints
# ---------------------------------------------------------------------------------------------

def keep_params_nonnegative() -> GradientTransformation:
    """Changes updates so that ``params + updates >= 0``: where it would go negative the
    update becomes ``-params``.

    Example:
        >>> t = keep_params_nonnegative()
        >>> p = fnp.asarray([1.0, 1.0])
        >>> t.update(fnp.asarray([-2.0, 0.5]), t.init(p), p)[0].tolist()
        [-1.0, 0.5]
    """
    def update(updates, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        return tree_map(lambda p, u: None if p is None else fnp.where((p + u) < 0.0, -p, u),
                        params, updates, is_leaf=lambda x: x is None), state
    return GradientTransformation(init_empty_state, update)


class ZeroNansState(NamedTuple):
    """zero_nans' state: per leaf, whether the last update held a NaN."""
    found_nan: Any


def zero_nans() -> GradientTransformation:
    """Replaces NaNs in the updates by zeros and records per leaf whether any were found.

    Example:
        >>> t = zero_nans()
        >>> u, s = t.update(fnp.asarray([fnp.nan, 1.0]), t.init(fnp.zeros(2)))
        >>> u.tolist(), bool(s.found_nan)
        ([0.0, 1.0], True)
    """
    def init(params):
        return ZeroNansState(tree_map(lambda p: fnp.asarray(False), params))

    def update(updates, state, params=None):
        del params, state
        found = tree_map(lambda u: fnp.any(fnp.isnan(u)), updates)
        return (tree_map(lambda u: fnp.where(fnp.isnan(u), fnp.zeros_like(u), u), updates),
                ZeroNansState(found))
    return GradientTransformation(init, update)



__all__ = ["AdaptiveGradClipState", "AddDecayedWeightsState", "AddNoiseState",
           "ClipByGlobalNormState", "ClipState", "EmaState", "NonNegativeParamsState",
           "ZeroNansState", "adaptive_grad_clip", "add_noise", "clip_by_block_rms", "ema",
           "keep_params_nonnegative", "per_example_global_norm_clip",
           "per_example_layer_norm_clip", "zero_nans"]
