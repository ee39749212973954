"""Sequence and self-supervised losses of optax: CTC (forward algorithm as a lax.scan over
time), NT-Xent and the triplet margin loss."""
from __future__ import annotations

import numpy as np

from funcgrad.core.dtypes import finfo
from funcgrad import lax
from funcgrad import numpy as fnp
from funcgrad import nn


def _log_softmax_last(x):
    m = lax.stop_gradient(fnp.max(x, axis=-1, keepdims=True))
    return x - m - fnp.log(fnp.sum(fnp.exp(x - m), axis=-1, keepdims=True))


def ctc_loss_with_forward_probs(logits, logit_paddings, labels, label_paddings, *,
                                blank_id: int = 0, log_epsilon: float = -1e5):
    """CTC loss (Graves et al., 2006) and the forward log-probabilities.

    Args:
        logits: ``[B, T, K]`` unnormalised log-probabilities per frame.
        logit_paddings: ``[B, T]``, 1.0 on padded frames.
        labels: ``[B, N]`` integer labels.
        label_paddings: ``[B, N]``, 1.0 on padded label positions (padding at the end).
        blank_id: the blank class.
        log_epsilon: the stand-in for log(0).

    Returns:
        ``(per_seq_loss [B], logalpha_phi [T, B, N+1], logalpha_emit [T, B, N])``.

    Example:
        >>> logits = fnp.zeros((1, 2, 2))
        >>> loss, _, _ = ctc_loss_with_forward_probs(logits, fnp.zeros((1, 2)),
        ...     fnp.asarray([[1]]), fnp.zeros((1, 1)))
        >>> round(float(loss[0]), 5)  # 3 of the 4 paths of two frames emit the label
        0.28768
    """
    logits = fnp.asarray(logits)
    labels, label_paddings = fnp.asarray(labels), fnp.asarray(label_paddings)
    logit_paddings = fnp.asarray(logit_paddings)
    if logits.ndim != 3 or labels.ndim != 2:
        raise ValueError(f"ctc_loss: logits must be [B, T, K] and labels [B, N]; got "
                         f"{logits.shape} and {labels.shape}")
    if labels.shape != label_paddings.shape or logits.shape[:2] != logit_paddings.shape:
        raise ValueError("ctc_loss: paddings must match: labels "
                         f"{labels.shape} vs {label_paddings.shape}, logits "
                         f"{logits.shape[:2]} vs {logit_paddings.shape}")
    batch, _, num_classes = logits.shape
    if labels.shape[0] != batch:
        raise ValueError(f"ctc_loss: expected labels with batch size {batch}, got "
                         f"{labels.shape[0]}")
    max_label_len = labels.shape[1]
    dt = logits.dtype
    logprobs = _log_softmax_last(logits)
    label_lens = max_label_len - fnp.asarray(fnp.sum(label_paddings, axis=1), fnp.int32)
    repeat = fnp.asarray(labels[:, :-1] == labels[:, 1:], dt)
    repeat = fnp.concatenate([repeat, fnp.zeros((batch, 1), dt)], axis=1)
    logprobs_phi = fnp.transpose(logprobs[:, :, blank_id:blank_id + 1], (1, 0, 2))  # [T, B, 1]
    one_hot = nn.one_hot(labels, num_classes, dtype=dt)  # [B, N, K]
    logprobs_emit = fnp.transpose(fnp.einsum("btk,bnk->btn", logprobs, one_hot), (1, 0, 2))
    phi_init = fnp.concatenate([fnp.zeros((batch, 1), dt),
                                fnp.full((batch, max_label_len), log_epsilon, dt)], axis=1)
    emit_init = fnp.full((batch, max_label_len), log_epsilon, dt)

    def update_phi(phi, added):
        return fnp.concatenate([phi[:, :1], fnp.logaddexp(phi[:, 1:], added)], axis=-1)

    def step(carry, x):
        prev_phi, prev_emit = carry
        prev_phi_orig = prev_phi
        prev_phi = update_phi(prev_phi, prev_emit + log_epsilon * repeat)
        lp_emit, lp_phi, pad = x
        next_emit = fnp.logaddexp(prev_phi[:, :-1] + lp_emit, prev_emit + lp_emit)
        next_phi = update_phi(prev_phi + lp_phi,
                              prev_emit + lp_phi + log_epsilon * (1.0 - repeat))
        pad = fnp.reshape(pad, (batch, 1))
        next_emit = pad * prev_emit + (1.0 - pad) * next_emit
        next_phi = pad * prev_phi_orig + (1.0 - pad) * next_phi
        return (next_phi, next_emit), (next_phi, next_emit)

    xs = (logprobs_emit, logprobs_phi, fnp.transpose(fnp.asarray(logit_paddings, dt), (1, 0)))
    _, (logalpha_phi, logalpha_emit) = lax.scan(step, (phi_init, emit_init), xs)
    last = update_phi(logalpha_phi[-1], logalpha_emit[-1])
    logalpha_phi = fnp.concatenate([logalpha_phi[:-1], last[None]], axis=0)
    sel = nn.one_hot(label_lens, max_label_len + 1, dtype=dt)
    per_seq_loss = -fnp.sum(last * sel, axis=1)
    return per_seq_loss, logalpha_phi, logalpha_emit


def ctc_loss(logits, logit_paddings, labels, label_paddings, *, blank_id: int = 0,
             log_epsilon: float = -1e5):
    """The per-sequence CTC loss (see :func:`ctc_loss_with_forward_probs`).

    Example:
        >>> float(ctc_loss(fnp.zeros((1, 1, 2)), fnp.zeros((1, 1)), fnp.asarray([[1]]),
        ...                fnp.zeros((1, 1)))[0]) == float(fnp.log(2.0))
        True
    """
    return ctc_loss_with_forward_probs(logits, logit_paddings, labels, label_paddings,
                                       blank_id=blank_id, log_epsilon=log_epsilon)[0]


def _cosine_matrix(e, eps):
    norm = fnp.sqrt(fnp.maximum(fnp.sum(e * e, axis=-1, keepdims=True), eps))
    u = e / norm
    return fnp.matmul(u, fnp.transpose(u))


def ntxent(embeddings, labels, temperature: float = 0.07):
    """NT-Xent (Chen et al., 2020, SimCLR): a softmax contrastive loss over cosine
    similarities, positives being other examples with the same label.

    Example:
        >>> e = fnp.asarray([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [0.1, 1.0]])
        >>> float(ntxent(e, fnp.asarray([0, 0, 1, 1]))) < 0.1
        True
    """
    embeddings = fnp.asarray(embeddings)
    labels = fnp.asarray(labels)
    if labels.shape[0] != embeddings.shape[0]:
        raise ValueError(f"ntxent: labels ({labels.shape[0]}) and embeddings "
                         f"({embeddings.shape[0]}) need the same leading dimension")
    eps = float(finfo(np.dtype(embeddings.dtype)).eps)
    xcs = _cosine_matrix(embeddings, eps) / temperature
    n = labels.shape[0]
    same = labels[:, None] == labels[None, :]
    diffs = ~same
    matches = same & ~fnp.asarray(np.eye(n, dtype=bool))
    xcs_diffs = fnp.where(diffs, xcs, -fnp.inf)
    xcs_matches = fnp.where(matches, xcs, -fnp.inf)
    xcs_max = lax.stop_gradient(fnp.max(fnp.concatenate([xcs_diffs, xcs_matches], axis=-1),
                                        axis=1, keepdims=True))
    shift_diffs, shift_matches = xcs_diffs - xcs_max, xcs_matches - xcs_max
    denom = fnp.sum(fnp.exp(shift_diffs), axis=1, keepdims=True) + fnp.exp(shift_matches)
    log_softm = shift_matches - fnp.log(denom)
    return -fnp.sum(fnp.where(matches, log_softm, 0.0)) / fnp.sum(matches)


def triplet_margin_loss(anchors, positives, negatives, axis: int = -1, norm_degree=2,
                        margin: float = 1.0, eps: float = 1e-6):
    """``max(d(a, p) - d(a, n) + margin, 0)`` with ``d(x, y) = (sum((x - y)**deg) + eps)
    **(1/deg)``.

    Example:
        >>> a = fnp.asarray([[0.0, 0.0]])
        >>> float(triplet_margin_loss(a, a, fnp.asarray([[3.0, 4.0]]))[0])
        0.0
    """
    anchors, positives, negatives = (fnp.asarray(x) for x in (anchors, positives, negatives))

    def dist(x, y):
        return fnp.power(fnp.sum(fnp.power(x - y, norm_degree), axis=axis) + eps,
                         1 / norm_degree)
    return fnp.maximum(dist(anchors, positives) - dist(anchors, negatives) + margin, 0)


__all__ = ["ctc_loss", "ctc_loss_with_forward_probs", "ntxent", "triplet_margin_loss"]
