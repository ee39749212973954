"""jax.nn's activations beyond relu/gelu/silu: elu, leaky_relu, selu, celu, relu6, hard_*, mish,
glu, log_sigmoid, soft_sign, sparse_*, squareplus, standardize, log1mexp, logmeanexp.

All are compositions of funcgrad.numpy operations with JAX's formulas, so they differentiate
(with JAX's conventions at kinks), batch, jit and run on CUDA.
"""
from __future__ import annotations

import math

import numpy as np

from funcgrad import numpy as fnp
from funcgrad.core.dtypes import dtype_kind
from funcgrad.nn._functions import logsumexp, sigmoid, softplus


def _f(x):
    x = fnp.asarray(x)
    return x if dtype_kind(x.dtype) == "f" else fnp.asarray(x, np.float32)


def identity(x):
    """The identity activation."""
    return fnp.asarray(x)


def tanh(x):
    return fnp.tanh(x)


def relu6(x):
    """min(max(x, 0), 6)."""
    return fnp.minimum(fnp.maximum(_f(x), 0.0), 6.0)


def elu(x, alpha=1.0):
    """x for x > 0, alpha (exp(x) - 1) otherwise.

    Example:
        >>> import funcgrad
        >>> round(float(funcgrad.nn.elu(-1.0)), 6)
        -0.632121
    """
    x = _f(x)
    return fnp.where(x > 0, x, alpha * fnp.expm1(fnp.where(x > 0, 0.0, x)))


def celu(x, alpha=1.0):
    x = _f(x)
    return fnp.maximum(x, 0.0) + alpha * fnp.expm1(fnp.minimum(x, 0.0) / alpha)


def selu(x):
    alpha, scale = 1.6732632423543772, 1.0507009873554805
    return scale * elu(x, alpha)


def leaky_relu(x, negative_slope=0.01):
    x = _f(x)
    return fnp.where(x >= 0, x, negative_slope * x)


def hard_tanh(x):
    return fnp.clip(_f(x), -1.0, 1.0)


def hard_sigmoid(x):
    return relu6(_f(x) + 3.0) / 6.0


def hard_silu(x):
    x = _f(x)
    return x * hard_sigmoid(x)


hard_swish = hard_silu


def log_sigmoid(x):
    """log(sigmoid(x)) = -softplus(-x), stable."""
    return -softplus(-_f(x))


def soft_sign(x):
    x = _f(x)
    return x / (fnp.abs(x) + 1.0)


def mish(x):
    x = _f(x)
    return x * fnp.tanh(softplus(x))


def glu(x, axis=-1):
    """Gated linear unit: a * sigmoid(b) for the two halves of x along axis."""
    x = _f(x)
    n = x.shape[axis]
    if n % 2:
        raise ValueError(f"glu: axis {axis} has odd size {n}")
    a, b = fnp.split(x, 2, axis)
    return a * sigmoid(b)


def sparse_plus(x):
    x = _f(x)
    return fnp.where(x <= -1.0, 0.0, fnp.where(x >= 1.0, x, (x + 1.0) ** 2 / 4.0))


def sparse_sigmoid(x):
    return 0.5 * fnp.clip(_f(x) + 1.0, 0.0, 2.0)


def squareplus(x, b=4):
    x = _f(x)
    return (x + fnp.sqrt(x * x + b)) / 2.0


def standardize(x, axis=-1, mean=None, variance=None, epsilon=1e-5, where=None):
    """(x - mean) / sqrt(variance + epsilon) along axis."""
    x = _f(x)
    if mean is None:
        mean = fnp.mean(x, axis, keepdims=True)
    if variance is None:
        variance = fnp.mean(fnp.square(x), axis, keepdims=True) - fnp.square(mean)
    return (x - mean) * (1.0 / fnp.sqrt(variance + epsilon))


def log1mexp(x):
    """log(1 - exp(-x)) for x > 0, accurate for small and large x."""
    x = _f(x)
    return fnp.where(x < math.log(2.0), fnp.log(-fnp.expm1(-x)), fnp.log1p(-fnp.exp(-x)))


def logmeanexp(x, axis=None, keepdims=False):
    x = _f(x)
    n = x.size if axis is None else int(np.prod([x.shape[a] for a in
                                                 (axis if isinstance(axis, tuple) else (axis,))]))
    return logsumexp(x, axis=axis, keepdims=keepdims) - math.log(n)


__all__ = ["identity", "tanh", "relu6", "elu", "celu", "selu", "leaky_relu", "hard_tanh",
           "hard_sigmoid", "hard_silu", "hard_swish", "log_sigmoid", "soft_sign", "mish", "glu",
           "sparse_plus", "sparse_sigmoid", "squareplus", "standardize", "log1mexp",
           "logmeanexp"]
