"""funcgrad.nn: activations, softmax family and one_hot, as compositions of primitives."""
from __future__ import annotations

import math

import numpy as np

from . import numpy as fnp
from . import prims as P
from .ad import stop_gradient
from .core import bind


def relu(x):
    """max(x, 0), with gradient 0 at x == 0 (like jax.nn.relu).

    Example:
        >>> import funcgrad.nn as nn
        >>> nn.relu(fnp.array([-1.0, 2.0])).tolist()
        [0.0, 2.0]
    """
    x = fnp.asarray(x)
    return fnp.where(x > 0, x, fnp.zeros_like(x))


def sigmoid(x):
    """1 / (1 + exp(-x)), numerically stable (the logistic primitive)."""
    x = fnp.asarray(x)
    return bind(P.logistic_p, x if fnp.issubdtype(x.dtype, np.floating) else x.astype(fnp.float32))


def silu(x):
    """x * sigmoid(x) (swish)."""
    return x * sigmoid(x)


swish = silu


def softplus(x):
    """log(1 + exp(x)), stable: max(x, 0) + log1p(exp(-|x|))."""
    return fnp.logaddexp(x, 0.0)


def gelu(x, approximate: bool = True):
    """GELU; the tanh approximation by default (like jax.nn.gelu), else the exact erf form.

    Example:
        >>> round(float(gelu(1.0)), 4)
        0.8412
    """
    x = fnp.asarray(x)
    if approximate:
        c = math.sqrt(2 / math.pi)
        return 0.5 * x * (1.0 + fnp.tanh(c * (x + 0.044715 * (x * x * x))))
    return 0.5 * x * (1.0 + bind(P.erf_p, x * (1 / math.sqrt(2))))


def logsumexp(x, axis=None, keepdims: bool = False):
    """log(sum(exp(x))) along axis, stable (the max is subtracted first)."""
    x = fnp.asarray(x)
    m = stop_gradient(fnp.max(x, axis=axis, keepdims=True))
    m = fnp.where(fnp.isfinite(m), m, fnp.zeros_like(m))
    out = fnp.log(fnp.sum(fnp.exp(x - m), axis=axis, keepdims=True)) + m
    if not keepdims:
        out = fnp.squeeze(out, axis=tuple(range(x.ndim)) if axis is None else axis)
    return out


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x)) along axis, stable."""
    x = fnp.asarray(x)
    u = fnp.exp(x - stop_gradient(fnp.max(x, axis=axis, keepdims=True)))
    return u / fnp.sum(u, axis=axis, keepdims=True)


def log_softmax(x, axis=-1):
    """x - logsumexp(x) along axis."""
    x = fnp.asarray(x)
    shifted = x - stop_gradient(fnp.max(x, axis=axis, keepdims=True))
    return shifted - fnp.log(fnp.sum(fnp.exp(shifted), axis=axis, keepdims=True))


def one_hot(x, num_classes: int, dtype=fnp.float32, axis=-1):
    """One-hot encoding of integer labels: x[..., None] == arange(num_classes).

    Example:
        >>> one_hot(fnp.array([0, 2]), 3).tolist()
        [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    """
    x = fnp.asarray(x)
    cls = fnp.arange(num_classes, dtype=x.dtype)
    out = (fnp.expand_dims(x, -1) == cls).astype(dtype)
    return out if axis in (-1, x.ndim) else fnp.moveaxis(out, -1, axis)
