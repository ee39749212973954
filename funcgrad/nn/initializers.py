"""funcgrad.nn.initializers: JAX's parameter initializers, each `init(key, shape, dtype)`.

The random ones draw from funcgrad.random (imported when an initializer runs), so for the same
key they give the same numbers on every device.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from funcgrad import numpy as fnp

Initializer = Callable  # init(key, shape, dtype=float32) -> array

_F32 = np.dtype(np.float32)


def _random():
    from funcgrad import random  # lazily: funcgrad.random is a sibling module built on funcgrad.numpy
    return random


def _shape(shape) -> tuple:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)


def zeros(key, shape, dtype=_F32):
    """All zeros (the key is ignored).

    Example:
        >>> from funcgrad.nn import initializers
        >>> initializers.zeros(None, (2,)).tolist()
        [0.0, 0.0]
    """
    return fnp.zeros(_shape(shape), dtype)


def ones(key, shape, dtype=_F32):
    """All ones (the key is ignored).

    Example:
        >>> from funcgrad.nn import initializers
        >>> initializers.ones(None, (2,)).tolist()
        [1.0, 1.0]
    """
    return fnp.ones(_shape(shape), dtype)


def constant(value, dtype=_F32) -> Initializer:
    """An initializer filling with `value`.

    Example:
        >>> from funcgrad.nn import initializers
        >>> initializers.constant(0.5)(None, (2,)).tolist()
        [0.5, 0.5]
    """
    def init(key, shape, dtype=dtype):
        return fnp.full(_shape(shape), value, dtype)
    return init


def normal(stddev: float = 1e-2, dtype=_F32) -> Initializer:
    """An initializer drawing N(0, stddev^2).

    Example:
        >>> import funcgrad.random as random
        >>> from funcgrad.nn import initializers
        >>> initializers.normal(0.02)(random.PRNGKey(0), (3, 4)).shape
        (3, 4)
    """
    def init(key, shape, dtype=dtype):
        return _random().normal(key, _shape(shape), dtype) * np.asarray(stddev, dtype)
    return init


def uniform(scale: float = 1e-2, dtype=_F32) -> Initializer:
    """An initializer drawing uniformly from [0, scale).

    Example:
        >>> import funcgrad.random as random
        >>> from funcgrad.nn import initializers
        >>> initializers.uniform(1.0)(random.PRNGKey(0), (3,)).shape
        (3,)
    """
    def init(key, shape, dtype=dtype):
        return _random().uniform(key, _shape(shape), dtype) * np.asarray(scale, dtype)
    return init


def truncated_normal(stddev: float = 1e-2, dtype=_F32, lower: float = -2.0,
                     upper: float = 2.0) -> Initializer:
    """An initializer drawing stddev * N(0, 1) truncated to [lower, upper] (in units of stddev).

    Example:
        >>> import funcgrad.random as random
        >>> from funcgrad.nn import initializers
        >>> initializers.truncated_normal(0.02)(random.PRNGKey(0), (3,)).shape
        (3,)
    """
    def init(key, shape, dtype=dtype):
        z = _random().truncated_normal(key, lower, upper, _shape(shape), dtype)
        return z * np.asarray(stddev, dtype)
    return init


def _compute_fans(shape, in_axis=-2, out_axis=-1, batch_axis=()):
    """(fan_in, fan_out): the in/out axis sizes times the receptive field (other axes)."""
    if len(shape) < 2:
        raise ValueError(f"can't compute input and output sizes of a {len(shape)}-dimensional "
                         "weights tensor; it must be at least 2-D")
    nd = len(shape)
    batch = (batch_axis,) if isinstance(batch_axis, int) else tuple(batch_axis)
    in_axes = (in_axis,) if isinstance(in_axis, int) else tuple(in_axis)
    out_axes = (out_axis,) if isinstance(out_axis, int) else tuple(out_axis)
    in_axes, out_axes, batch = ([a % nd for a in t] for t in (in_axes, out_axes, batch))
    in_size = math.prod(shape[a] for a in in_axes)
    out_size = math.prod(shape[a] for a in out_axes)
    batch_size = math.prod(shape[a] for a in batch)
    receptive = math.prod(shape) / max(in_size * out_size * batch_size, 1)
    return in_size * receptive, out_size * receptive


def variance_scaling(scale: float, mode: str, distribution: str, in_axis=-2, out_axis=-1,
                     batch_axis: Sequence[int] = (), dtype=_F32) -> Initializer:
    """An initializer with variance scale / fan, as jax.nn.initializers.variance_scaling.

    Args:
        scale: the variance scale (1 for Glorot/LeCun, 2 for He).
        mode: "fan_in", "fan_out", "fan_avg" or "fan_geo_avg".
        distribution: "truncated_normal" (truncated to 2 stddev, rescaled so the variance is
            right), "normal" or "uniform".
        in_axis, out_axis, batch_axis: which axes of the shape are inputs, outputs, batch.

    Example:
        >>> import funcgrad.random as random
        >>> from funcgrad.nn import initializers
        >>> init = initializers.variance_scaling(2.0, "fan_in", "normal")
        >>> init(random.PRNGKey(0), (64, 32)).shape
        (64, 32)
    """
    if mode not in ("fan_in", "fan_out", "fan_avg", "fan_geo_avg"):
        raise ValueError(f"invalid mode for variance scaling initializer: {mode!r}")
    if distribution not in ("truncated_normal", "normal", "uniform"):
        raise ValueError(f"invalid distribution for variance scaling initializer: "
                         f"{distribution!r}")

    def init(key, shape, dtype=dtype):
        shape = _shape(shape)
        fan_in, fan_out = _compute_fans(shape, in_axis, out_axis, batch_axis)
        denom = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2,
                 "fan_geo_avg": math.sqrt(fan_in * fan_out)}[mode]
        variance = scale / max(denom, 1.0)
        random = _random()
        if distribution == "truncated_normal":
            # std of a standard normal truncated to [-2, 2]
            std = math.sqrt(variance) / .87962566103423978
            z = random.truncated_normal(key, -2.0, 2.0, shape, dtype)
            return z * np.asarray(std, dtype)
        if distribution == "normal":
            return random.normal(key, shape, dtype) * np.asarray(math.sqrt(variance), dtype)
        # U(-1, 1) scaled afterwards, as JAX does, so the numbers match jax.nn.initializers'
        return random.uniform(key, shape, dtype, -1.0) * np.asarray(math.sqrt(3 * variance),
                                                                     dtype)
    return init


def glorot_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=_F32) -> Initializer:
    """Glorot/Xavier uniform: U(-a, a) with a = sqrt(6 / (fan_in + fan_out)).

    Example:
        >>> import funcgrad.random as random
        >>> from funcgrad.nn import initializers
        >>> initializers.glorot_uniform()(random.PRNGKey(0), (4, 3)).shape
        (4, 3)
    """
    return variance_scaling(1.0, "fan_avg", "uniform", in_axis, out_axis, batch_axis, dtype)


def glorot_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=_F32) -> Initializer:
    """Glorot/Xavier normal: truncated normal with variance 2 / (fan_in + fan_out).

    Example:
        >>> import funcgrad.random as random
        >>> from funcgrad.nn import initializers
        >>> initializers.glorot_normal()(random.PRNGKey(0), (4, 3)).shape
        (4, 3)
    """
    return variance_scaling(1.0, "fan_avg", "truncated_normal", in_axis, out_axis, batch_axis,
                            dtype)


def lecun_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=_F32) -> Initializer:
    """LeCun uniform: U(-a, a) with a = sqrt(3 / fan_in).

    Example:
        >>> import funcgrad.random as random
        >>> from funcgrad.nn import initializers
        >>> initializers.lecun_uniform()(random.PRNGKey(0), (4, 3)).shape
        (4, 3)
    """
    return variance_scaling(1.0, "fan_in", "uniform", in_axis, out_axis, batch_axis, dtype)


def lecun_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=_F32) -> Initializer:
    """LeCun normal: truncated normal with variance 1 / fan_in.

    Example:
        >>> import funcgrad.random as random
        >>> from funcgrad.nn import initializers
        >>> initializers.lecun_normal()(random.PRNGKey(0), (4, 3)).shape
        (4, 3)
    """
    return variance_scaling(1.0, "fan_in", "truncated_normal", in_axis, out_axis, batch_axis,
                            dtype)


def he_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=_F32) -> Initializer:
    """He/Kaiming uniform: U(-a, a) with a = sqrt(6 / fan_in).

    Example:
        >>> import funcgrad.random as random
        >>> from funcgrad.nn import initializers
        >>> initializers.he_uniform()(random.PRNGKey(0), (4, 3)).shape
        (4, 3)
    """
    return variance_scaling(2.0, "fan_in", "uniform", in_axis, out_axis, batch_axis, dtype)


def he_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=_F32) -> Initializer:
    """He/Kaiming normal: truncated normal with variance 2 / fan_in.

    Example:
        >>> import funcgrad.random as random
        >>> from funcgrad.nn import initializers
        >>> initializers.he_normal()(random.PRNGKey(0), (4, 3)).shape
        (4, 3)
    """
    return variance_scaling(2.0, "fan_in", "truncated_normal", in_axis, out_axis, batch_axis,
                            dtype)


xavier_uniform, xavier_normal = glorot_uniform, glorot_normal
kaiming_uniform, kaiming_normal = he_uniform, he_normal


def orthogonal(scale: float = 1.0, column_axis: int = -1, dtype=_F32) -> Initializer:
    """An initializer of (semi-)orthogonal matrices (jax.nn.initializers.orthogonal): the Q of
    a Gaussian matrix's QR, signs fixed by R's diagonal, reshaped so that `column_axis` indexes
    the columns; times `scale`.

    Example:
        >>> import numpy as np, funcgrad.random as random
        >>> from funcgrad.nn import initializers
        >>> w = np.asarray(initializers.orthogonal()(random.PRNGKey(0), (4, 3)))
        >>> bool(np.allclose(w.T @ w, np.eye(3), atol=1e-5))
        True
    """
    def init(key, shape, dtype=dtype):
        shape = _shape(shape)
        if len(shape) < 2:
            raise ValueError(f"orthogonal initializer requires at least a 2-D shape, got {shape}")
        ax = column_axis % len(shape)
        n_cols = shape[ax]
        n_rows = math.prod(shape) // n_cols if n_cols else 0
        rows, cols = (n_rows, n_cols) if n_rows >= n_cols else (n_cols, n_rows)
        a = _random().normal(key, (rows, cols), dtype)
        q, r = fnp.linalg.qr(a)
        q = q * fnp.sign(fnp.diagonal(r))[None, :]
        if n_rows < n_cols:
            q = q.T
        rest = tuple(s for i, s in enumerate(shape) if i != ax)
        q = fnp.reshape(q, rest + (n_cols,))
        return fnp.moveaxis(q, -1, ax) * np.asarray(scale, dtype)
    return init


def delta_orthogonal(scale: float = 1.0, column_axis: int = -1, dtype=_F32) -> Initializer:
    """The delta-orthogonal initializer of convolution kernels
    (jax.nn.initializers.delta_orthogonal): zeros except at the spatial centre, which holds an
    orthogonal (in x out) matrix from `orthogonal(scale, column_axis)`; 3-D, 4-D or 5-D shapes
    (spatial dims first, then in, out) with in <= out.

    Example:
        >>> import numpy as np, funcgrad.random as random
        >>> from funcgrad.nn import initializers
        >>> w = np.asarray(initializers.delta_orthogonal()(random.PRNGKey(0), (3, 3, 2, 4)))
        >>> bool(np.allclose(w[1, 1] @ w[1, 1].T, np.eye(2), atol=1e-5)), float(abs(w[0]).sum())
        (True, 0.0)
    """
    def init(key, shape, dtype=dtype):
        shape = _shape(shape)
        if len(shape) not in (3, 4, 5):
            raise ValueError(f"delta_orthogonal initializer requires a 3-D, 4-D or 5-D shape, "
                             f"got {shape}")
        if shape[-1] < shape[-2]:
            raise ValueError(f"delta_orthogonal initializer needs fan_in <= fan_out (the last "
                             f"two dims), got {shape}")
        w = orthogonal(scale=scale, column_axis=column_axis, dtype=dtype)(key, shape[-2:])
        centre = tuple((k - 1) // 2 for k in shape[:-2])
        return fnp.zeros(shape, dtype).at[centre].set(w)
    return init
