"""Adafactor's factored second-moment estimate (optax's scale_by_factored_rms)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from funcgrad import numpy as fnp
from funcgrad.tree_util import tree_flatten, tree_unflatten
from funcgrad.optim.base import NO_PARAMS_MSG, GradientTransformation, safe_increment, zero_count
from funcgrad.optim.numerics import abs_sq


def _decay_rate_pow(i, exponent: float = 0.8):
    """Adafactor's second-moment decay ``1 - (i + 1)**(-exponent)``."""
    t = fnp.asarray(fnp.asarray(i) + 1, fnp.float32)
    return 1.0 - t ** (-exponent)


def _factored_dims(shape, factored: bool, min_dim_size_to_factor: int):
    """The two largest axes (second largest, largest) when the param is factored, else None."""
    if not factored or len(shape) < 2:
        return None
    sorted_dims = np.argsort(shape)
    if shape[sorted_dims[-2]] < min_dim_size_to_factor:
        return None
    return int(sorted_dims[-2]), int(sorted_dims[-1])


class FactoredState(NamedTuple):
    """Adafactor's state: the step count, row/column statistics for factored params and
    full statistics for the others (unused slots hold a size-1 zero)."""
    count: Any
    v_row: Any
    v_col: Any
    v: Any


def scale_by_factored_rms(factored: bool = True, decay_rate: float = 0.8, step_offset: int = 0,
                          min_dim_size_to_factor: int = 128, epsilon: float = 1e-30,
                          decay_rate_fn: Callable = _decay_rate_pow) -> GradientTransformation:
    """Adafactor's rescaling (Shazeer & Stern, 2018): ``g / sqrt(v)`` where for a matrix ``v``
    is the outer product of row and column means of ``g**2 + epsilon`` (divided by their
    mean), and the full average otherwise; the decay is ``decay_rate_fn(step - offset)``.

    Args:
        factored: factor the second moment of rank >= 2 params.
        decay_rate: the exponent passed to ``decay_rate_fn``.
        step_offset: subtracted from the step before computing the decay.
        min_dim_size_to_factor: only factor when the second largest axis is at least this.
        epsilon: added to the squared gradients.
        decay_rate_fn: ``(step, decay_rate) -> decay``.

    Example:
        >>> t = scale_by_factored_rms(min_dim_size_to_factor=2)
        >>> p = fnp.ones((2, 3))
        >>> [round(x, 4) for x in t.update(fnp.ones((2, 3)), t.init(p), p)[0][0].tolist()]
        [1.0, 1.0, 1.0]
    """
    def init(params):
        leaves, treedef = tree_flatten(params)
        rows, cols, vs = [], [], []
        for p in leaves:
            p = fnp.asarray(p)
            dims = _factored_dims(p.shape, factored, min_dim_size_to_factor)
            small = fnp.zeros((1,), p.dtype)
            if dims is not None:
                d1, d0 = dims
                rows.append(fnp.zeros(tuple(s for i, s in enumerate(p.shape) if i != d0),
                                      p.dtype))
                cols.append(fnp.zeros(tuple(s for i, s in enumerate(p.shape) if i != d1),
                                      p.dtype))
                vs.append(small)
            else:
                rows.append(small)
                cols.append(small)
                vs.append(fnp.zeros_like(p))
        tree = lambda xs: tree_unflatten(treedef, xs)  # noqa: E731
        return FactoredState(zero_count(), tree(rows), tree(cols), tree(vs))

    def update(grads, state, params=None):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        g_leaves, treedef = tree_flatten(grads)
        p_leaves = tree_flatten(params)[0]
        r_leaves, c_leaves = tree_flatten(state.v_row)[0], tree_flatten(state.v_col)[0]
        v_leaves = tree_flatten(state.v)[0]
        outs, rows, cols, vs = [], [], [], []
        decay_t = decay_rate_fn(state.count - step_offset, decay_rate)
        for g, p, v_row, v_col, v in zip(g_leaves, p_leaves, r_leaves, c_leaves, v_leaves):
            dtype = fnp.asarray(p).dtype
            small = fnp.zeros((1,), dtype)
            dims = _factored_dims(fnp.asarray(p).shape, factored, min_dim_size_to_factor)
            grad_sqr = abs_sq(g) + epsilon
            if dims is not None:
                d1, d0 = dims
                new_row = fnp.asarray(decay_t * v_row
                                      + (1.0 - decay_t) * fnp.mean(grad_sqr, axis=d0), dtype)
                new_col = fnp.asarray(decay_t * v_col
                                      + (1.0 - decay_t) * fnp.mean(grad_sqr, axis=d1), dtype)
                reduced_d1 = d1 - 1 if d1 > d0 else d1
                row_col_mean = fnp.mean(new_row, axis=reduced_d1, keepdims=True)
                row_factor = (new_row / row_col_mean) ** -0.5
                col_factor = new_col ** -0.5
                outs.append(g * fnp.expand_dims(row_factor, d0)
                            * fnp.expand_dims(col_factor, d1))
                rows.append(new_row)
                cols.append(new_col)
                vs.append(small)
            else:
                new_v = fnp.asarray(decay_t * v + (1.0 - decay_t) * grad_sqr, dtype)
                outs.append(g * new_v ** -0.5)
                rows.append(small)
                cols.append(small)
                vs.append(new_v)
        tree = lambda xs: tree_unflatten(treedef, xs)  # noqa: E731
        return tree(outs), FactoredState(safe_increment(state.count), tree(rows), tree(cols),
                                         tree(vs))
    return GradientTransformation(init, update)


__all__ = ["FactoredState", "scale_by_factored_rms"]
