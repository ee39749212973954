"""Differentially private SGD (optax's contrib dpsgd, also at optax's top level): per-example
clipping to a global L2 norm, summing, Gaussian noise, then the batch mean."""
from __future__ import annotations

import warnings
from typing import Any, NamedTuple

from funcgrad import random
from funcgrad.tree_util import tree_flatten, tree_unflatten
from funcgrad.optim.base import GradientTransformation, chain, identity
from funcgrad.optim.transforms_basic import ScalarOrSchedule, scale_by_learning_rate, trace
from funcgrad.optim.transforms_misc import per_example_global_norm_clip


class DifferentiallyPrivateAggregateState(NamedTuple):
    """The PRNG key for the next noise draw."""
    rng_key: Any


def differentially_private_aggregate(l2_norm_clip: float, noise_multiplier: float, key=None, *,
                                     seed: int | None = None) -> GradientTransformation:
    """Aggregates per-example gradients (axis 0 of every leaf) privately (Abadi et al., 2016):
    ``(sum_i clip(g_i, C) + C * noise_multiplier * N(0, 1)) / batch_size``.

    Noise keys: ``new_key, *leaf_keys = split(key, num_leaves + 1)``.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> t = differentially_private_aggregate(1.0, 0.0, key=0)
        >>> g = fnp.asarray([[3.0, 4.0], [0.0, 0.5]])
        >>> [round(x, 4) for x in t.update(g, t.init(fnp.zeros(2)))[0].tolist()]
        [0.3, 0.65]
    """
    if seed is not None:
        warnings.warn('"seed" is deprecated, use "key"', DeprecationWarning, stacklevel=2)
        if key is not None:
            raise ValueError("differentially_private_aggregate: give only one of seed or key")
        key = seed
    if key is None:
        key = 0
    key = random.PRNGKey(key) if isinstance(key, int) else key
    noise_std = l2_norm_clip * noise_multiplier

    def init(params):
        del params
        return DifferentiallyPrivateAggregateState(key)

    def update(updates, state, params=None):
        del params
        leaves, treedef = tree_flatten(updates)
        bsize = leaves[0].shape[0]
        clipped, _ = per_example_global_norm_clip(leaves, l2_norm_clip)
        keys = random.split(state.rng_key, len(leaves) + 1)
        noised = [(g + noise_std * random.normal(keys[i + 1], g.shape, g.dtype)) / bsize
                  for i, g in enumerate(clipped)]
        return tree_unflatten(treedef, noised), DifferentiallyPrivateAggregateState(keys[0])
    return GradientTransformation(init, update)


def dpsgd(learning_rate: ScalarOrSchedule, l2_norm_clip: float, noise_multiplier: float,
          key=None, momentum: float | None = None, nesterov: bool = False, *,
          seed: int | None = None) -> GradientTransformation:
    """DP-SGD: :func:`differentially_private_aggregate`, optional momentum, the learning rate.
    ``update`` takes per-example gradients (a leading batch axis on every leaf).

    Example:
        >>> opt = dpsgd(0.1, l2_norm_clip=1.0, noise_multiplier=1.1, key=0)
    """
    if seed is not None:
        warnings.warn('"seed" is deprecated, use "key"', DeprecationWarning, stacklevel=2)
        if key is not None:
            raise ValueError("dpsgd: give only one of seed or key")
        key = seed
    return chain(differentially_private_aggregate(l2_norm_clip, noise_multiplier, key),
                 trace(momentum, nesterov) if momentum is not None else identity(),
                 scale_by_learning_rate(learning_rate))


__all__ = ["DifferentiallyPrivateAggregateState", "differentially_private_aggregate", "dpsgd"]
