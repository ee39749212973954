"""Activations, the softmax family, normalizations, losses, embedding lookup and dropout."""
from __future__ import annotations

import math

import numpy as np

from funcgrad.prims import rows as F
from funcgrad import numpy as fnp
from funcgrad import prims as P
from funcgrad.transforms.ad import stop_gradient
from funcgrad.core import bind
from funcgrad.numpy._base import norm_axes

# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def _float_dtype(*xs):
    """The promoted dtype of the non-None operands, float32 unless it is already floating."""
    dt = fnp.result_type(*[x for x in xs if x is not None])
    return dt if fnp.issubdtype(dt, np.floating) else np.dtype(np.float32)


def _to_rows(x, axis, op):
    """x with the `axis` axes moved last and merged into one axis.

    Returns (rows, merged_shape, back) where back(y) undoes the move for a y shaped like rows.
    """
    nd = x.ndim
    axes = sorted(norm_axes(axis, nd, op))
    keep = [i for i in range(nd) if i not in axes]
    perm = keep + axes
    moved = perm != list(range(nd))
    xt = fnp.transpose(x, perm) if moved else x
    tshape = tuple(xt.shape)
    merged = tshape[len(keep):]
    rows = xt if len(axes) == 1 else fnp.reshape(xt, tshape[:len(keep)] + (math.prod(merged),))
    inverse = np.argsort(perm).tolist()

    def back(y):
        y = y if len(axes) == 1 else fnp.reshape(y, tshape)
        return fnp.transpose(y, inverse) if moved else y
    return rows, merged, back


def _per_column(v, merged, dtype, fill):
    """A scale/bias broadcast to the normalized axes' shape and flattened to (n,)."""
    n = math.prod(merged)
    if v is None:
        return fnp.full((n,), fill, dtype)
    return fnp.reshape(fnp.broadcast_to(fnp.asarray(v, dtype), merged), (n,))


# ---------------------------------------------------------------------------------------------
# activations
# ---------------------------------------------------------------------------------------------

def relu(x):
    """max(x, 0), with gradient 0 at x == 0 (like jax.nn.relu); NaN stays NaN.

    The select is `where(x <= 0, 0, x)`, not `where(x > 0, x, 0)`, which turned NaN into 0
    and so let a model whose activations went NaN report a finite loss. A NaN
    element's gradient is the incoming cotangent (jax.nn.relu's is 0 there).

    Example:
        >>> import funcgrad.nn as nn, funcgrad.numpy as fnp
        >>> nn.relu(fnp.array([-1.0, 2.0, float("nan")])).tolist()
        [0.0, 2.0, nan]
    """
    x = fnp.asarray(x)
    return fnp.where(x <= 0, fnp.zeros_like(x), x)


def sigmoid(x):
    """1 / (1 + exp(-x)), numerically stable (the logistic primitive).

    Example:
        >>> import funcgrad.nn as nn
        >>> float(nn.sigmoid(0.0))
        0.5
    """
    x = fnp.asarray(x)
    return bind(P.logistic_p, x if fnp.issubdtype(x.dtype, np.floating) else x.astype(fnp.float32))


def silu(x):
    """x * sigmoid(x) (swish).

    Example:
        >>> import funcgrad.nn as nn
        >>> float(nn.silu(0.0))
        0.0
    """
    return x * sigmoid(x)


swish = silu


def softplus(x):
    """log(1 + exp(x)), stable: max(x, 0) + log1p(exp(-|x|)).

    Example:
        >>> import funcgrad.nn as nn
        >>> round(float(nn.softplus(0.0)), 4)
        0.6931
    """
    return fnp.logaddexp(x, 0.0)


def gelu(x, approximate: bool = True):
    """GELU; the tanh approximation by default (like jax.nn.gelu), else the exact erf form.

    Example:
        >>> import funcgrad.nn as nn
        >>> round(float(nn.gelu(1.0)), 4)
        0.8412
    """
    x = fnp.asarray(x)
    if approximate:
        c = math.sqrt(2 / math.pi)
        return 0.5 * x * (1.0 + fnp.tanh(c * (x + 0.044715 * (x * x * x))))
    return 0.5 * x * (1.0 + bind(P.erf_p, x * (1 / math.sqrt(2))))


# ---------------------------------------------------------------------------------------------
# the softmax family (softmax and log_softmax are fused primitives)
# ---------------------------------------------------------------------------------------------

def logsumexp(x, axis=None, keepdims: bool = False):
    """log(sum(exp(x))) along axis, stable (the max is subtracted first).

    Example:
        >>> import funcgrad.nn as nn, funcgrad.numpy as fnp
        >>> round(float(nn.logsumexp(fnp.zeros(4))), 4)
        1.3863
    """
    x = fnp.asarray(x)
    m = stop_gradient(fnp.max(x, axis=axis, keepdims=True))
    m = fnp.where(fnp.isfinite(m), m, fnp.zeros_like(m))
    out = fnp.log(fnp.sum(fnp.exp(x - m), axis=axis, keepdims=True)) + m
    if not keepdims:
        out = fnp.squeeze(out, axis=tuple(range(x.ndim)) if axis is None else axis)
    return out


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x)) along axis (an int, a tuple or None), as one fused primitive.

    Numerically stable (the row max is subtracted); a row of all -inf gives nan, like JAX.

    Example:
        >>> import funcgrad.nn as nn, funcgrad.numpy as fnp
        >>> nn.softmax(fnp.array([0.0, 0.0])).tolist()
        [0.5, 0.5]
    """
    x = fnp.asarray(x, _float_dtype(x))
    rows, _, back = _to_rows(x, axis, "softmax")
    return back(bind(F.softmax_p, rows))


def log_softmax(x, axis=-1):
    """x - logsumexp(x) along axis, as one fused primitive.

    Example:
        >>> import funcgrad.nn as nn, funcgrad.numpy as fnp
        >>> [round(v, 4) for v in nn.log_softmax(fnp.array([0.0, 0.0])).tolist()]
        [-0.6931, -0.6931]
    """
    x = fnp.asarray(x, _float_dtype(x))
    rows, _, back = _to_rows(x, axis, "log_softmax")
    return back(bind(F.log_softmax_p, rows))


def one_hot(x, num_classes: int, dtype=fnp.float32, axis=-1):
    """One-hot encoding of integer labels: x[..., None] == arange(num_classes).

    Example:
        >>> import funcgrad.nn as nn, funcgrad.numpy as fnp
        >>> nn.one_hot(fnp.array([0, 2]), 3).tolist()
        [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    """
    x = fnp.asarray(x)
    cls = fnp.arange(num_classes, dtype=x.dtype)
    out = (fnp.expand_dims(x, -1) == cls).astype(dtype)
    return out if axis in (-1, x.ndim) else fnp.moveaxis(out, -1, axis)


# ---------------------------------------------------------------------------------------------
# normalizations (fused primitives)
# ---------------------------------------------------------------------------------------------

def layer_norm(x, scale=None, bias=None, axis=-1, eps: float = 1e-5):
    """Layer normalization: (x - mean) / sqrt(var + eps) * scale + bias over `axis`.

    One fused primitive. `axis` may be an int or a tuple; the statistics are taken over all of
    its axes together. `scale` and `bias` (default 1 and 0) broadcast to the shape of the
    normalized axes, e.g. (d,) for x of shape (..., d) with axis=-1.

    Example:
        >>> import funcgrad.nn as nn, funcgrad.numpy as fnp
        >>> y = nn.layer_norm(fnp.array([[1.0, 2.0, 3.0]]))
        >>> [round(v, 3) for v in y[0].tolist()]
        [-1.225, 0.0, 1.225]
    """
    dt = _float_dtype(x, scale, bias)
    x = fnp.asarray(x, dt)
    rows, merged, back = _to_rows(x, axis, "layer_norm")
    s = _per_column(scale, merged, dt, 1.0)
    b = _per_column(bias, merged, dt, 0.0)
    return back(bind(F.layer_norm_p, rows, s, b, eps=float(eps)))


def rms_norm(x, scale=None, axis=-1, eps: float = 1e-6):
    """RMS normalization: x / sqrt(mean(x^2) + eps) * scale over `axis` (one fused primitive).

    `scale` (default 1) broadcasts to the shape of the normalized axes.

    Example:
        >>> import funcgrad.nn as nn, funcgrad.numpy as fnp
        >>> [round(v, 3) for v in nn.rms_norm(fnp.array([3.0, 4.0])).tolist()]
        [0.849, 1.131]
    """
    dt = _float_dtype(x, scale)
    x = fnp.asarray(x, dt)
    rows, merged, back = _to_rows(x, axis, "rms_norm")
    s = _per_column(scale, merged, dt, 1.0)
    return back(bind(F.rms_norm_p, rows, s, eps=float(eps)))


# ---------------------------------------------------------------------------------------------
# losses (optax's names)
# ---------------------------------------------------------------------------------------------

def softmax_cross_entropy_with_integer_labels(logits, labels, axis=-1):
    """Per-example cross-entropy -log softmax(logits)[label] (optax's name and semantics).

    One fused primitive (log-softmax and the pick together); its gradient is
    softmax(logits) - one_hot(labels). Labels outside [0, num_classes) raise IndexError.

    Args:
        logits: float array [..., num_classes] (the class axis is `axis`).
        labels: integer array shaped like logits without the class axis.
        axis: the class axis of `logits`.

    Returns:
        The losses, shaped like `labels`.

    Example:
        >>> import funcgrad.nn as nn, funcgrad.numpy as fnp
        >>> loss = nn.softmax_cross_entropy_with_integer_labels(fnp.zeros((2, 4)),
        ...                                                     fnp.array([0, 3]))
        >>> [round(v, 4) for v in loss.tolist()]
        [1.3863, 1.3863]
    """
    logits = fnp.asarray(logits, _float_dtype(logits))
    labels = fnp.asarray(labels)
    if not fnp.issubdtype(labels.dtype, np.integer):
        raise TypeError(f"labels must be integers, got {labels.dtype.name}")
    rows, _, _ = _to_rows(logits, axis, "softmax_cross_entropy_with_integer_labels")
    return bind(F.softmax_xent_p, rows, labels)


def softmax_cross_entropy(logits, labels, axis=-1):
    """Cross-entropy with a distribution over classes: -sum(labels * log_softmax(logits)).

    Example:
        >>> import funcgrad.nn as nn, funcgrad.numpy as fnp
        >>> round(float(nn.softmax_cross_entropy(fnp.zeros(4), fnp.array([0., 1, 0, 0]))), 4)
        1.3863
    """
    return -fnp.sum(labels * log_softmax(logits, axis=axis), axis=axis)


# ---------------------------------------------------------------------------------------------
# embedding lookup and dropout
# ---------------------------------------------------------------------------------------------

def embedding(table, ids):
    """Rows of `table` [vocab, dim] at integer `ids` -> ids.shape + (dim,).

    A gather (take along axis 0); its gradient is a scatter-add into the table, so repeated ids
    accumulate. Out-of-range ids raise IndexError.

    Example:
        >>> import funcgrad.nn as nn, funcgrad.numpy as fnp
        >>> nn.embedding(fnp.eye(3), fnp.array([2, 0])).tolist()
        [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    """
    return fnp.take(table, ids, axis=0)


def _dropout_mask(keep, rate: float, x):
    """x / (1 - rate) where `keep` is True, else 0 (inverted dropout, as flax computes it)."""
    x = fnp.asarray(x)
    return fnp.where(keep, x / (1.0 - rate), fnp.zeros_like(x))


def dropout(key, rate: float, x, deterministic: bool = False):
    """Inverted dropout: zero each element with probability `rate`, scale the rest by
    1 / (1 - rate) so the expectation is unchanged.

    Args:
        key: a funcgrad.random key (the mask is funcgrad.random.bernoulli(key, 1 - rate)).
        rate: the drop probability, a Python float in [0, 1].
        x: the array.
        deterministic: return x unchanged (evaluation mode).

    Example:
        >>> import funcgrad.nn as nn, funcgrad.numpy as fnp
        >>> nn.dropout(None, 0.5, fnp.ones(3), deterministic=True).tolist()
        [1.0, 1.0, 1.0]
    """
    rate = float(rate)
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"dropout rate must be in [0, 1], got {rate}")
    x = fnp.asarray(x)
    if deterministic or rate == 0.0:
        return x
    if rate == 1.0:
        return fnp.zeros_like(x)
    from funcgrad import random as frandom  # lazily: funcgrad.random imports funcgrad.numpy
    keep = frandom.bernoulli(key, 1.0 - rate, tuple(x.shape))
    return _dropout_mask(keep, rate, x)
