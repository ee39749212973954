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
"""
from __future__ import annotations

import numpy as np

from funcgrad.prims import attention as A
from funcgrad.prims.attention_lse import flat_batch
from funcgrad.core import ShapedArray, defprim, type_error


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
