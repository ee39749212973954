"""funcgrad.optim.losses: optax's losses (classification, regression, smoothing), elementwise
or per example (no mean over the batch), in funcgrad.numpy so they trace and differentiate."""
from __future__ import annotations

import numpy as np

from funcgrad import lax
from funcgrad import numpy as fnp
from funcgrad import nn
from funcgrad.core.dtypes import dtype_kind
from funcgrad.optim.losses_seq import (
    ctc_loss,
    ctc_loss_with_forward_probs,
    ntxent,
    triplet_margin_loss,
)


def _check_float(x, name, fn):
    x = fnp.asarray(x)
    if dtype_kind(np.dtype(x.dtype)) != "f":
        raise TypeError(f"{fn}: `{name}` must be a floating array, got dtype {x.dtype}")
    return x


def _masked_sum(x, axis, where, keepdims=False):
    if where is not None:
        x = fnp.where(where, x, 0.0)
    return fnp.sum(x, axis=axis, keepdims=keepdims)


def _expand_where(where, logits, axis):
    if where is not None and fnp.ndim(where) != logits.ndim:
        where = fnp.expand_dims(fnp.asarray(where), axis)
    return where


def _log_softmax(x, axis=-1, where=None):
    """``x - logsumexp(x)`` along ``axis`` over the entries where ``where`` is True."""
    if where is None:
        x_max = lax.stop_gradient(fnp.max(x, axis=axis, keepdims=True))
        shifted = x - x_max
        return shifted - fnp.log(fnp.sum(fnp.exp(shifted), axis=axis, keepdims=True))
    x_max = lax.stop_gradient(fnp.max(fnp.where(where, x, -fnp.inf), axis=axis, keepdims=True))
    x_max = fnp.where(fnp.isfinite(x_max), x_max, 0.0)
    shifted = x - x_max
    lse = fnp.log(fnp.sum(fnp.where(where, fnp.exp(shifted), 0.0), axis=axis, keepdims=True))
    return fnp.where(where, shifted - lse, -fnp.inf)


def _log_sigmoid(x):
    return -nn.softplus(-x)


# ---------------------------------------------------------------------------------------------
# classification
# ---------------------------------------------------------------------------------------------

def sigmoid_binary_cross_entropy(logits, labels):
    """``-y log sigmoid(x) - (1 - y) log sigmoid(-x)`` elementwise.

    Example:
        >>> round(float(sigmoid_binary_cross_entropy(fnp.asarray(0.0), fnp.asarray(1.0))), 6)
        0.693147
    """
    logits = _check_float(logits, "logits", "sigmoid_binary_cross_entropy")
    labels = fnp.asarray(labels, logits.dtype)
    return -labels * _log_sigmoid(logits) - (1.0 - labels) * _log_sigmoid(-logits)


def hinge_loss(predictor_outputs, targets):
    """``max(0, 1 - y t)`` with targets in {-1, 1}.

    Example:
        >>> hinge_loss(fnp.asarray([0.5, 2.0]), fnp.asarray([1.0, 1.0])).tolist()
        [0.5, 0.0]
    """
    return fnp.maximum(0, 1 - fnp.asarray(predictor_outputs) * targets)


def perceptron_loss(predictor_outputs, targets):
    """``max(0, -y t)`` with targets in {-1, 1}.

    Example:
        >>> perceptron_loss(fnp.asarray([0.5, -2.0]), fnp.asarray([1.0, 1.0])).tolist()
        [0.0, 2.0]
    """
    predictor_outputs, targets = fnp.asarray(predictor_outputs), fnp.asarray(targets)
    if predictor_outputs.shape != targets.shape:
        raise ValueError(f"perceptron_loss: shapes differ: {predictor_outputs.shape} vs "
                         f"{targets.shape}")
    return fnp.maximum(0, -predictor_outputs * targets)


def _sparse_plus(x):
    # 0 (x <= -1), (x + 1)**2 / 4 (|x| < 1), x (x >= 1)
    return fnp.where(x <= -1.0, 0.0, fnp.where(x >= 1.0, x, (x + 1.0) ** 2 / 4))


def sparsemax_loss(logits, labels):
    """Binary sparsemax loss: ``sparse_plus(-x)`` for label 1, ``sparse_plus(x)`` for 0.

    Example:
        >>> sparsemax_loss(fnp.asarray([0.0, 2.0]), fnp.asarray([1, 1])).tolist()
        [0.25, 0.0]
    """
    logits = fnp.asarray(logits)
    return _sparse_plus(fnp.where(fnp.asarray(labels) != 0, -logits, logits))


def safe_softmax_cross_entropy(logits, labels):
    """Softmax cross-entropy that stays finite when logits are ``-inf`` where labels are 0.

    Example:
        >>> x = fnp.asarray([[0.0, -fnp.inf]])
        >>> float(safe_softmax_cross_entropy(x, fnp.asarray([[1.0, 0.0]]))[0]) == 0.0
        True
    """
    logits = _check_float(logits, "logits", "safe_softmax_cross_entropy")
    labels = fnp.asarray(labels)
    log_p = _log_softmax(logits, -1)
    return -fnp.sum(fnp.where(labels != 0.0, labels * fnp.where(labels != 0.0, log_p, 0.0),
                              0.0), axis=-1)


def softmax_cross_entropy(logits, labels, axis=-1, where=None):
    """``-sum(labels * log_softmax(logits))`` over ``axis`` (labels are probabilities).

    Args:
        logits: unnormalised log-probabilities.
        labels: target probabilities, same shape.
        axis: the class axis (or axes).
        where: optional mask of the classes to include.

    Example:
        >>> x = fnp.asarray([[0.0, 0.0]])
        >>> round(float(softmax_cross_entropy(x, fnp.asarray([[1.0, 0.0]]))[0]), 6)
        0.693147
    """
    logits = _check_float(logits, "logits", "softmax_cross_entropy")
    where = _expand_where(where, logits, axis)
    log_p = _log_softmax(logits, axis, where)
    if where is not None:
        log_p = fnp.where(where, log_p, 0.0)
    return -_masked_sum(fnp.asarray(labels) * log_p, axis, where)


def softmax_cross_entropy_with_integer_labels(logits, labels, axis=-1, where=None):
    """``logsumexp(logits) - logits[label]`` with integer class labels.

    Example:
        >>> x = fnp.asarray([[0.0, 0.0]])
        >>> round(float(softmax_cross_entropy_with_integer_labels(x, fnp.asarray([1]))[0]), 6)
        0.693147
    """
    logits = _check_float(logits, "logits", "softmax_cross_entropy_with_integer_labels")
    labels = fnp.asarray(labels)
    if dtype_kind(np.dtype(labels.dtype)) not in "iu":
        raise TypeError("softmax_cross_entropy_with_integer_labels: `labels` must be integers, "
                        f"got dtype {labels.dtype}")
    where = _expand_where(where, logits, axis)
    if isinstance(axis, tuple):
        ax = tuple(a % logits.ndim for a in axis)
        batch = tuple(a for a in range(logits.ndim) if a not in ax)
        logits = fnp.transpose(logits, batch + ax)
        logits = fnp.reshape(logits, logits.shape[:len(batch)] + (-1,))
        if where is not None:
            where = fnp.transpose(fnp.asarray(where), batch + ax)
            where = fnp.reshape(where, where.shape[:len(batch)] + (-1,))
        axis = len(batch)
    else:
        axis = axis % logits.ndim
    label_logits = fnp.squeeze(fnp.take_along_axis(logits, fnp.expand_dims(labels, axis), axis),
                               axis)
    log_norm = _logsumexp(logits, axis, where)
    out = log_norm - label_logits
    if where is not None:
        out = fnp.where(fnp.any(where, axis=axis), out, 0.0)
    return out


def _logsumexp(x, axis, where=None):
    if where is not None:
        x = fnp.where(where, x, -fnp.inf)
    x_max = lax.stop_gradient(fnp.max(x, axis=axis, keepdims=True))
    x_max = fnp.where(fnp.isfinite(x_max), x_max, 0.0)
    out = fnp.log(fnp.sum(fnp.exp(x - x_max), axis=axis, keepdims=True)) + x_max
    return fnp.squeeze(out, axis)


def multiclass_hinge_loss(scores, labels):
    """``max_k(s_k + 1 - [k == y]) - s_y``.

    Example:
        >>> multiclass_hinge_loss(fnp.asarray([[2.0, 0.5]]), fnp.asarray([0])).tolist()
        [0.0]
    """
    scores = fnp.asarray(scores)
    one_hot = nn.one_hot(labels, scores.shape[-1], dtype=scores.dtype)
    return fnp.max(scores + 1.0 - one_hot, axis=-1) - fnp.sum(scores * one_hot, axis=-1)


def multiclass_perceptron_loss(scores, labels):
    """``max_k s_k - s_y``.

    Example:
        >>> multiclass_perceptron_loss(fnp.asarray([[2.0, 0.5]]), fnp.asarray([1])).tolist()
        [1.5]
    """
    scores = fnp.asarray(scores)
    one_hot = nn.one_hot(labels, scores.shape[-1], dtype=scores.dtype)
    return fnp.max(scores, axis=-1) - fnp.sum(scores * one_hot, axis=-1)


def poly_loss_cross_entropy(logits, labels, *, epsilon: float = 2.0, axis=-1, where=None):
    """PolyLoss (Leng et al., 2022): ``CE + epsilon * sum(labels * (1 - softmax))``.

    Example:
        >>> x = fnp.asarray([[0.0, 0.0]])
        >>> round(float(poly_loss_cross_entropy(x, fnp.asarray([[1.0, 0.0]]))[0]), 6)
        1.693147
    """
    logits = _check_float(logits, "logits", "poly_loss_cross_entropy")
    labels = _check_float(labels, "labels", "poly_loss_cross_entropy")
    w = _expand_where(where, logits, axis)
    p = fnp.exp(_log_softmax(logits, axis, w))
    one_minus_pt = _masked_sum(labels * (1 - p), axis, w)
    return softmax_cross_entropy(logits, labels, axis, where) + epsilon * one_minus_pt


def kl_divergence(log_predictions, targets, axis=-1, where=None):
    """``sum(t * (log t - log_predictions))`` (0 log 0 = 0).

    Example:
        >>> lp = fnp.log(fnp.asarray([0.5, 0.5]))
        >>> round(float(kl_divergence(lp, fnp.asarray([1.0, 0.0]))), 6)
        0.693147
    """
    log_predictions = _check_float(log_predictions, "log_predictions", "kl_divergence")
    targets = _check_float(targets, "targets", "kl_divergence")
    safe_log = fnp.log(fnp.where(targets == 0, 1.0, targets))
    return _masked_sum(targets * (safe_log - log_predictions), axis, where)


def kl_divergence_with_log_targets(log_predictions, log_targets, axis=-1, where=None):
    """``sum(exp(log_t) * (log_t - log_predictions))``.

    Example:
        >>> lp = fnp.log(fnp.asarray([0.5, 0.5]))
        >>> float(kl_divergence_with_log_targets(lp, lp))
        0.0
    """
    log_predictions = _check_float(log_predictions, "log_predictions",
                                   "kl_divergence_with_log_targets")
    log_targets = _check_float(log_targets, "log_targets", "kl_divergence_with_log_targets")
    return _masked_sum(fnp.exp(log_targets) * (log_targets - log_predictions), axis, where)


def generalized_kl_divergence(log_predictions, targets, axis=-1, where=None):
    """KL for unnormalised measures: ``kl_divergence + sum(exp(log_p) - t)``.

    Example:
        >>> lp = fnp.log(fnp.asarray([1.0, 1.0]))
        >>> float(generalized_kl_divergence(lp, fnp.asarray([1.0, 1.0])))
        0.0
    """
    x = kl_divergence(log_predictions, targets, axis=axis, where=where)
    return x + _masked_sum(fnp.exp(log_predictions) - targets, axis, where)


def convex_kl_divergence(log_predictions, targets, axis=-1, where=None):
    """The deprecated name of :func:`generalized_kl_divergence`.

    Example:
        >>> lp = fnp.log(fnp.asarray([1.0]))
        >>> float(convex_kl_divergence(lp, fnp.asarray([1.0])))
        0.0
    """
    return generalized_kl_divergence(log_predictions, targets, axis=axis, where=where)


def sigmoid_focal_loss(logits, labels, *, alpha=None, gamma: float = 2.0):
    """Focal loss (Lin et al., 2017): ``BCE * (1 - p_t)**gamma``, optionally weighted by
    ``alpha`` for positives and ``1 - alpha`` for negatives.

    Example:
        >>> round(float(sigmoid_focal_loss(fnp.asarray(0.0), fnp.asarray(1.0))), 6)
        0.173287
    """
    logits = _check_float(logits, "logits", "sigmoid_focal_loss")
    labels = fnp.asarray(labels, logits.dtype)
    ce = sigmoid_binary_cross_entropy(logits, labels)
    y = fnp.where(labels >= 0.5, labels, 1.0 - labels)
    x = fnp.where(labels >= 0.5, -logits, logits)
    # log(1 - p_t), written to stay accurate for labels in [0, 1]
    log_one_minus_pt = _log_sigmoid(x) + fnp.log(y) + nn.softplus(-x + fnp.log1p(-y) - fnp.log(y))
    loss = ce * fnp.exp(gamma * log_one_minus_pt)
    if alpha is None:
        return loss
    return (alpha * labels + (1.0 - alpha) * (1.0 - labels)) * loss


# ---------------------------------------------------------------------------------------------
# regression
# ---------------------------------------------------------------------------------------------

def squared_error(predictions, targets=None):
    """``(predictions - targets)**2`` elementwise.

    Example:
        >>> squared_error(fnp.asarray([1.0, 3.0]), fnp.asarray([0.0, 1.0])).tolist()
        [1.0, 4.0]
    """
    predictions = _check_float(predictions, "predictions", "squared_error")
    if targets is not None:
        targets = fnp.asarray(targets)
        if targets.shape != predictions.shape:
            raise ValueError(f"squared_error: predictions {predictions.shape} and targets "
                             f"{targets.shape} must have the same shape")
    errors = predictions - targets if targets is not None else predictions
    return errors ** 2


def l2_loss(predictions, targets=None):
    """``0.5 * squared_error``.

    Example:
        >>> l2_loss(fnp.asarray([2.0])).tolist()
        [2.0]
    """
    return 0.5 * squared_error(fnp.asarray(predictions), targets)


def huber_loss(predictions, targets=None, *, delta: float = 1.0):
    """Huber loss: quadratic ``0.5 e**2`` for ``|e| <= delta``, linear beyond.

    Example:
        >>> huber_loss(fnp.asarray([0.5, 3.0])).tolist()
        [0.125, 2.5]
    """
    predictions = _check_float(predictions, "predictions", "huber_loss")
    errors = predictions - targets if targets is not None else predictions
    abs_e = fnp.abs(errors)
    quadratic = fnp.minimum(abs_e, delta)
    return 0.5 * quadratic ** 2 + delta * (abs_e - quadratic)


def log_cosh(predictions, targets=None):
    """``log(cosh(e))``, computed as ``logaddexp(e, -e) - log 2``.

    Example:
        >>> float(log_cosh(fnp.asarray(0.0)))
        0.0
    """
    predictions = _check_float(predictions, "predictions", "log_cosh")
    errors = predictions - targets if targets is not None else predictions
    return fnp.logaddexp(errors, -errors) - fnp.asarray(np.log(2.0), errors.dtype)


def cosine_similarity(predictions, targets, *, epsilon: float = 0.0, axis=-1, where=None):
    """``<a, b> / (max(|a|^2, eps)^.5 max(|b|^2, eps)^.5)`` along ``axis``.

    Example:
        >>> float(cosine_similarity(fnp.asarray([1.0, 0.0]), fnp.asarray([2.0, 0.0])))
        1.0
    """
    a = _check_float(predictions, "predictions", "cosine_similarity")
    b = _check_float(targets, "targets", "cosine_similarity")
    a_norm = fnp.sqrt(fnp.maximum(_masked_sum(a * a, axis, where, True), epsilon))
    b_norm = fnp.sqrt(fnp.maximum(_masked_sum(b * b, axis, where, True), epsilon))
    return _masked_sum((a / a_norm) * (b / b_norm), axis, where)


def cosine_distance(predictions, targets, *, epsilon: float = 0.0, axis=-1, where=None):
    """``1 - cosine_similarity``.

    Example:
        >>> float(cosine_distance(fnp.asarray([1.0, 0.0]), fnp.asarray([0.0, 2.0])))
        1.0
    """
    return 1.0 - cosine_similarity(predictions, targets, epsilon=epsilon, axis=axis, where=where)


def smooth_labels(labels, alpha: float, *, axis=-1, where=None):
    """Label smoothing (Szegedy et al., 2016): ``(1 - alpha) labels + alpha / K``.

    Example:
        >>> smooth_labels(fnp.asarray([1.0, 0.0]), 0.5).tolist()
        [0.75, 0.25]
    """
    labels = _check_float(labels, "labels", "smooth_labels")
    if where is None:
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        k = int(np.prod([labels.shape[a] for a in axes]))
    else:
        k = fnp.sum(fnp.asarray(where), axis=axis, keepdims=True)
    return (1.0 - alpha) * labels + alpha / k


__all__ = ["convex_kl_divergence", "cosine_distance", "cosine_similarity", "ctc_loss",
           "ctc_loss_with_forward_probs", "generalized_kl_divergence", "hinge_loss",
           "huber_loss", "kl_divergence", "kl_divergence_with_log_targets", "l2_loss",
           "log_cosh", "multiclass_hinge_loss", "multiclass_perceptron_loss", "ntxent",
           "perceptron_loss", "poly_loss_cross_entropy", "safe_softmax_cross_entropy",
           "sigmoid_binary_cross_entropy", "sigmoid_focal_loss", "smooth_labels",
           "softmax_cross_entropy", "softmax_cross_entropy_with_integer_labels",
           "sparsemax_loss", "squared_error", "triplet_margin_loss"]
