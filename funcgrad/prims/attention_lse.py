"""The attention forward's logsumexp reused by its backward (FlashAttention-2's saved lse).

`attention_stats(q, k, o, do)` recomputes every logits row to get its logsumexp: a whole
q.k^T pass. When the plan also holds the forward `o = attention(q, k, v)` (a training step), a
rewrite after optimization replaces the pair by

  attention_fwdl(q, k, v)  -> flat [B*T*N*Hv + B*N*T]: o (C order), then the rows' logsumexp
  attention_delta(o, do, lse) -> [B, N, T, 2]: (lse, sum(o * do) over Hv), attention_stats'
                                 layout, read by attention_dq / attention_dkv

so the forward kernel writes the logsumexp it already has and the backward's statistics cost
one read of o and do. o and lse are contiguous slices of the flat result (views). That rewrite
takes float32 and float64 only (attention_delta's lse has o's dtype).

For float16 and bfloat16 the logsumexp is float32: attention_fwdl's flat result (o's dtype)
then holds each row's float32 lse as two 16-bit elements (its bits, little-endian), and

  attention_bwdl(q, k, v, do, fl) -> attention_bwd's flat result (dq, then dk | dv; or packed)

(funcgrad/prims/attention_bwd.py) reads o and the lse from that flat result `fl`: the backward
of cuDNN's fused SDPA, which takes the forward's output and logsumexp
(funcgrad/cuda/cudnn_attn.py). The CUDA plan's rewrite (`rewrite_saved` in
funcgrad/compile/rewrites/attention_lse.py) makes this pair where cuDNN takes the geometry;
the impls are its numpy spec, for every float dtype.
"""
from __future__ import annotations

import numpy as np

from funcgrad.prims import attention as A
from funcgrad import prims as P
from funcgrad.core import ShapedArray, bind, defprim, type_error

# ---------------------------------------------------------------------------------------------
# attention_fwdl(q, k, v) -> flat (o, lse)
# ---------------------------------------------------------------------------------------------


def lse_slots(dtype) -> int:
    """Elements of attention_fwdl's flat result per logsumexp: 2 for float16 / bfloat16 (the
    float32 lse's bits), else 1."""
    return np.dtype(A._stats_dtype(dtype)).itemsize // np.dtype(dtype).itemsize


def _fwdl_shape(q, k, v, *, scale, causal, precision=None):
    o = A.attention_p.shape(q, k, v, scale=scale, causal=causal)
    b, t, n, _ = q.shape
    return ShapedArray((o.size + lse_slots(q.dtype) * b * n * t,), q.dtype)


def _lse_impl(q, k, scale, causal):
    qa, kk = A._acc(q), A._expand(A._acc(k), q.shape[2])
    b, t, n, _ = q.shape
    lse = np.zeros((b, n, t), qa.dtype)
    for t0, t1 in A._chunks(t):
        lse[:, :, t0:t1] = A._chunk_probs(qa[:, t0:t1], kk, t0, scale, causal)[1]
    return lse


def _fwdl_impl(q, k, v, *, scale, causal, precision=None):
    o = A._attn_impl(q, k, v, scale=scale, causal=causal)
    lse = _lse_impl(q, k, scale, causal).astype(A._stats_dtype(q.dtype)).reshape(-1)
    # a 16-bit dtype holds each float32 lse as its two halves (bits)
    tail = lse.view(o.dtype) if lse_slots(q.dtype) > 1 else lse.astype(o.dtype)
    return np.concatenate([o.reshape(-1), tail])


def _ref_fwdl(q, k, v, *, scale, causal, precision=None):
    from funcgrad import numpy as fnp
    o = A._ref_attention(q, k, v, scale=scale, causal=causal)
    b, t, n, _ = q.shape
    if lse_slots(q.dtype) > 1:
        # the lse's bits have no derivative (as lax.bitcast_convert_type's): the rules read
        # only this reference's tangents and cotangents, so zeros stand in for them
        lse = fnp.zeros((2 * b * n * t,), q.dtype)
    else:
        lse = A._ref_stats(q, k, o, o, scale=scale, causal=causal)[..., 0]
    return fnp.concatenate([fnp.reshape(o, (-1,)), fnp.reshape(lse, (-1,))])


def flat_batch(prim_ref, pieces):
    """vmap rule of a primitive whose flat result is pieces each leading with the batch axis:
    the mapped axis merges into the batch axis and each piece is re-split per mapped row.
    pieces(avals, params) -> the pieces' sizes for the merged operands' avals."""
    def rule(args, dims, **params):
        size = P._batch_size(args, dims)
        args = [P._bcast_batched(a, d, size) for a, d in zip(args, dims)]
        args = [P.reshape(a, (size * a.shape[1],) + tuple(a.shape[2:])) for a in args]
        flat = bind(prim_ref[0], *args, **params)
        parts, lo = [], 0
        for n in pieces([a.aval for a in args], params):
            parts.append(P.reshape(_piece(flat, lo, lo + n), (size, n // size)))
            lo += n
        return bind(P.concatenate_p, *parts, dimension=1), 0
    return rule


def _fwdl_pieces(avals, params):
    q, k, v = avals
    n_o = A.attention_p.shape(q, k, v, **params).size
    return n_o, lse_slots(q.dtype) * q.shape[0] * q.shape[2] * q.shape[1]


def _piece(x, lo, hi):
    return bind(P.slice_p, x, start_indices=(lo,), limit_indices=(hi,), strides=(1,))


_fwdl_self: list = []
attention_fwdl_p = defprim("attention_fwdl", _fwdl_shape, _fwdl_impl, A._ref_vjp(_ref_fwdl),
                           A._ref_jvp(_ref_fwdl), batch=flat_batch(_fwdl_self, _fwdl_pieces))
_fwdl_self.append(attention_fwdl_p)

# ---------------------------------------------------------------------------------------------
# attention_delta(o, do, lse) -> stats
# ---------------------------------------------------------------------------------------------


def _delta_shape(o, do, lse):
    b, t, n, _ = o.shape if o.ndim == 4 else (None,) * 4
    if (o.ndim != 4 or do.shape != o.shape or lse.shape != (b, n, t)
            or not (o.dtype == do.dtype == lse.dtype) or A._stats_dtype(o.dtype) != o.dtype):
        raise type_error("attention_delta", "expects o, do [B, T, N, Hv] and lse [B, N, T] of "
                         "one float32/float64 dtype", (o, do, lse))
    return ShapedArray((b, n, t, 2), o.dtype)


def _delta_impl(o, do, lse):
    delta = (o * do).sum(axis=-1).transpose(0, 2, 1)
    return np.stack([lse, delta.astype(lse.dtype)], axis=-1)


def _ref_delta(o, do, lse):
    from funcgrad import numpy as fnp
    delta = fnp.transpose(fnp.sum(o * do, axis=-1), (0, 2, 1))
    return fnp.stack([lse, delta], axis=-1)


_delta_self: list = []
attention_delta_p = defprim("attention_delta", _delta_shape, _delta_impl,
                            A._ref_vjp(_ref_delta), A._ref_jvp(_ref_delta),
                            batch=A._batch_rule(_delta_self))
_delta_self.append(attention_delta_p)

# ---------------------------------------------------------------------------------------------
# attention_fwdl's flat result read back (attention_bwdl's operand: prims/attention_bwd.py)
# ---------------------------------------------------------------------------------------------


def split_saved(fl, q, v):
    """(o [B, T, N, Hv], lse [B, N, T] in the statistics dtype) of attention_fwdl's flat
    numpy result."""
    b, t, n, _ = q.shape
    n_o = b * t * n * v.shape[3]
    tail = fl[n_o:]
    st = A._stats_dtype(q.dtype)
    lse = tail.view(st) if lse_slots(q.dtype) > 1 else tail.astype(st)
    return fl[:n_o].reshape(b, t, n, v.shape[3]), lse.reshape(b, n, t)


LSE_PRIMITIVES = (attention_fwdl_p, attention_delta_p)
