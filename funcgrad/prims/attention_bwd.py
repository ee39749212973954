"""The attention backward as one primitive: attention_dq and attention_dkv of one set of operands
merged after optimization, so a GPU computes the scores, probabilities and dS once per key tile.

  attention_bwd(q, k, v, do, stats) -> flat [B*T*N*H + B*S*K*(H+Hv)]: dq (C order), then
                                       attention_dkv's [B, S, K, H + Hv] (C order)
  attention_bwd[packed](...)        -> flat [B, T, N + 2K, H] (S == T, H == Hv): per row the dq
                                       heads, then the dk heads, then the dv heads

attention's vjp binds attention_dq and attention_dkv (two passes that each recompute S = q k^T,
P, dP = do v^T and dS: seven GEMM-sized products where one pass needs five). A rewrite after
optimization replaces a pair reading the same operands with the same params by attention_bwd
and views of its result; the CUDA lowering (funcgrad/cuda/attention.py) runs one kernel per key
tile that keeps dK and dV in registers and writes per-key-tile dQ partials, then sums them in a
fixed order (deterministic, no atomics). TF32 pairs are left alone (their tensor-core kernels
stay separate). When q, k and v are heads split from one fused projection (a GPT's
`split(qkv, 3, axis=2)`), the backward of the split concatenates dq, dk and dv along the heads;
a second rewrite (`pack`) gives the primitive the packed layout instead, so the kernels store
that array and the concatenate (a copy of the whole qkv gradient) goes.

  attention_bwdl(q, k, v, do, fl)   -> attention_bwd's result, with attention_fwdl's flat o and
                                       logsumexp `fl` in place of the statistics (cuDNN's SDPA
                                       backward reads them: funcgrad/prims/attention_lse.py)
"""
from __future__ import annotations

import numpy as np

from funcgrad.prims import attention as A
from funcgrad import prims as P
from funcgrad.prims import attention_lse as AL
from funcgrad.prims.attention_lse import flat_batch
from funcgrad.core import ShapedArray, bind, defprim, type_error


def _bwd_shape(q, k, v, do, stats, *, scale, causal, precision=None, packed=False):
    prm = {"scale": scale, "causal": causal}
    n_q = A.attention_dq_p.shape(q, k, v, do, stats, **prm).size
    if packed and not (k.shape[1] == q.shape[1] and k.shape[3] == v.shape[3]):
        raise type_error("attention_bwd", "the packed layout needs S == T and H == Hv",
                         (q, k, v, do, stats))
    return ShapedArray((n_q + A.attention_dkv_p.shape(q, k, v, do, stats, **prm).size,),
                       q.dtype)


def _bwd_impl(q, k, v, do, stats, *, scale, causal, precision=None, packed=False):
    # one pass over the query chunks: dq = s dS k; dk = s dS^T q; dv = P^T do
    b, _, n, h = q.shape
    s, kh, hv = k.shape[1], k.shape[2], v.shape[3]
    qa, doa = A._acc(q), A._acc(do)
    dq = np.zeros(q.shape, qa.dtype)
    dk = np.zeros((b, s, n, h), qa.dtype)
    dv = np.zeros((b, s, n, hv), qa.dtype)
    for t0, t1, p, ds, kk in A._bwd_chunks(q, k, v, do, stats, scale, causal):
        dq[:, t0:t1] = np.einsum("bnts,bsnh->btnh", ds, kk)
        dv += np.einsum("bnts,btnh->bsnh", p, doa[:, t0:t1])
        dk += np.einsum("bnts,btnh->bsnh", ds, qa[:, t0:t1])
    sc = qa.dtype.type(scale)
    g = n // kh
    dk = dk.reshape(b, s, kh, g, h).sum(axis=3) * sc
    dv = dv.reshape(b, s, kh, g, hv).sum(axis=3)
    if packed:
        return np.concatenate([dq * sc, dk, dv], axis=2).reshape(-1).astype(q.dtype)
    dkv = np.concatenate([dk, dv], axis=-1)
    return np.concatenate([(dq * sc).reshape(-1), dkv.reshape(-1)]).astype(q.dtype)


def _ref_bwd(q, k, v, do, stats, *, scale, causal, precision=None, packed=False):
    from funcgrad import numpy as fnp
    prm = {"scale": scale, "causal": causal}
    dq, dkv = A._ref_dq(q, k, v, do, stats, **prm), A._ref_dkv(q, k, v, do, stats, **prm)
    if packed:
        h = k.shape[3]
        dkv = fnp.concatenate([dq, A._last_slice(dkv, 0, h), A._last_slice(dkv, h, 2 * h)],
                              axis=2)
        return fnp.reshape(dkv, (-1,))
    return fnp.concatenate([fnp.reshape(dq, (-1,)), fnp.reshape(dkv, (-1,))])


def _bwd_pieces(avals, params):
    q, k, v, _, _ = avals
    n_kv = k.shape[0] * k.shape[1] * k.shape[2] * (k.shape[3] + v.shape[3])
    return (q.size + n_kv,) if params.get("packed") else (q.size, n_kv)


_self: list = []
attention_bwd_p = defprim("attention_bwd", _bwd_shape, _bwd_impl, A._ref_vjp(_ref_bwd),
                          A._ref_jvp(_ref_bwd), batch=flat_batch(_self, _bwd_pieces))
_self.append(attention_bwd_p)


# ---------------------------------------------------------------------------------------------
# attention_bwdl(q, k, v, do, fl) -> attention_bwd's flat result, from attention_fwdl's o, lse
# ---------------------------------------------------------------------------------------------


def _bwdl_shape(q, k, v, do, fl, *, scale, causal, precision=None, packed=False):
    want = AL._fwdl_shape(q, k, v, scale=scale, causal=causal)
    if fl.shape != want.shape or fl.dtype != want.dtype:
        raise type_error("attention_bwdl", f"fl must be attention_fwdl's result "
                         f"{want.dtype.name}{list(want.shape)}", (q, k, v, do, fl))
    b, t, n, _ = q.shape
    stats = ShapedArray((b, n, t, 2), A._stats_dtype(q.dtype))
    return _bwd_shape(q, k, v, do, stats, scale=scale, causal=causal, packed=packed)


def _bwdl_impl(q, k, v, do, fl, *, scale, causal, precision=None, packed=False):
    o, lse = AL.split_saved(np.ascontiguousarray(fl), q, v)
    stats = AL._delta_impl(A._acc(o), A._acc(do), lse)
    return _bwd_impl(q, k, v, do, stats, scale=scale, causal=causal, packed=packed)


def _ref_bwdl(q, k, v, do, fl, *, scale, causal, precision=None, packed=False):
    from funcgrad import numpy as fnp
    b, t, n, _ = q.shape
    n_o, st = b * t * n * v.shape[3], A._stats_dtype(q.dtype)
    o = fnp.reshape(AL._piece(fl, 0, n_o), (b, t, n, v.shape[3]))
    if AL.lse_slots(q.dtype) > 1:
        # 16-bit: the saved lse is the float32 logsumexp of (q, k)'s logits, recomputed here
        # (its bits have no derivative; through q and k it has one)
        lse = A._ref_stats(q, k, o, do, scale=scale, causal=causal)[..., 0]
    else:
        lse = fnp.reshape(AL._piece(fl, n_o, fl.shape[0]), (b, n, t))
    delta = fnp.transpose(fnp.sum(o.astype(st) * do.astype(st), axis=-1), (0, 2, 1))
    stats = fnp.stack([lse.astype(st), delta], axis=-1)
    return _ref_bwd(q, k, v, do, stats, scale=scale, causal=causal, packed=packed)


def _bwdl_pieces(avals, params):
    q, k, v, do, _ = avals
    return _bwd_pieces((q, k, v, do, None), params)


def _bwdl_batch(args, dims, **params):
    """vmap: as flat_batch, with fl re-laid as the merged batch's attention_fwdl result (every
    row's o, then every row's lse)."""
    size = P._batch_size(args, dims)
    args = [P._bcast_batched(a, d, size) for a, d in zip(args, dims)]
    q, v, fl = args[0], args[2], args[4]
    n_o = q.shape[1] * q.shape[2] * q.shape[3] * v.shape[4]
    o = P.reshape(bind(P.slice_p, fl, start_indices=(0, 0), limit_indices=(size, n_o),
                       strides=(1, 1)), (size * n_o,))
    lse = P.reshape(bind(P.slice_p, fl, start_indices=(0, n_o),
                         limit_indices=(size, fl.shape[1]), strides=(1, 1)),
                    (size * (fl.shape[1] - n_o),))
    args[4] = P.reshape(bind(P.concatenate_p, o, lse, dimension=0), (size, fl.shape[1]))
    return AL.flat_batch(_bwdl_self, _bwdl_pieces)(args, (0,) * len(args), **params)


_bwdl_self: list = []
attention_bwdl_p = defprim("attention_bwdl", _bwdl_shape, _bwdl_impl, A._ref_vjp(_ref_bwdl),
                           A._ref_jvp(_ref_bwdl), batch=_bwdl_batch)
_bwdl_self.append(attention_bwdl_p)
