"""The attention backward as one primitive: attention_dq and attention_dkv of one set of operands
merged after optimization, so a GPU computes the scores, probabilities and dS once per key tile.

  attention_bwd(q, k, v, do, stats) -> flat [B*T*N*H + B*S*K*(H+Hv)]: dq (C order), then
                                       attention_dkv's [B, S, K, H + Hv] (C order)

attention's vjp binds attention_dq and attention_dkv (two passes that each recompute S = q k^T,
P, dP = do v^T and dS: seven GEMM-sized products where one pass needs five). A rewrite after
optimization replaces a pair reading the same operands with the same params by attention_bwd
and views of its result; the CUDA lowering (funcgrad/cuda/attention.py) runs one kernel per key
tile that keeps dK and dV in registers and writes per-key-tile dQ partials, then sums them in a
fixed order (deterministic, no atomics). TF32 pairs are left alone (their tensor-core kernels
stay separate).
"""
from __future__ import annotations

import numpy as np

from . import attention_prim as A
from . import prims as P
from .attention_lse import flat_batch
from .core import Eqn, Expr, ShapedArray, Var, defprim


def _bwd_shape(q, k, v, do, stats, *, scale, causal, precision=None):
    prm = {"scale": scale, "causal": causal}
    n_q = A.attention_dq_p.shape(q, k, v, do, stats, **prm).size
    return ShapedArray((n_q + A.attention_dkv_p.shape(q, k, v, do, stats, **prm).size,),
                       q.dtype)


def _bwd_impl(q, k, v, do, stats, *, scale, causal, precision=None):
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
    dkv = np.concatenate([dk, dv], axis=-1)
    return np.concatenate([(dq * sc).reshape(-1), dkv.reshape(-1)]).astype(q.dtype)


def _ref_bwd(q, k, v, do, stats, *, scale, causal, precision=None):
    from . import numpy as fnp
    prm = {"scale": scale, "causal": causal}
    return fnp.concatenate([fnp.reshape(A._ref_dq(q, k, v, do, stats, **prm), (-1,)),
                            fnp.reshape(A._ref_dkv(q, k, v, do, stats, **prm), (-1,))])


def _bwd_pieces(avals, params):
    q, k, v, _, _ = avals
    return q.size, k.shape[0] * k.shape[1] * k.shape[2] * (k.shape[3] + v.shape[3])


_self: list = []
attention_bwd_p = defprim("attention_bwd", _bwd_shape, _bwd_impl, A._ref_vjp(_ref_bwd),
                          A._ref_jvp(_ref_bwd), batch=flat_batch(_self, _bwd_pieces))
_self.append(attention_bwd_p)


def _view(flat, lo, out, e):
    """Equations out = reshape(flat[lo : lo + out.size]) (views on CUDA)."""
    n = out.aval.size
    piece = Var(ShapedArray((n,), out.aval.dtype))
    return [Eqn(P.slice_p, [flat], {"start_indices": (lo,), "limit_indices": (lo + n,),
                                    "strides": (1,)}, piece, e.src, e.tag),
            Eqn(P.reshape_p, [piece], {"new_sizes": tuple(out.aval.shape)}, out, e.src, e.tag)]


def rewrite(expr: Expr, consts: list) -> tuple[Expr, list]:
    """attention_dq and attention_dkv of the same operands and params (no TF32), both live ->
    attention_bwd at the first of the two, dq and dkv as views of its result."""
    if not any(e.prim is A.attention_dkv_p for e in expr.eqns):
        return expr, consts
    from .passes import dce
    expr, consts = dce(expr, consts)   # a dead dq or dkv (one gradient wanted) stays dead
    dq_of = {}
    for e in expr.eqns:
        if e.prim is A.attention_dq_p and "precision" not in e.params:
            dq_of.setdefault((tuple(map(id, e.inputs)), tuple(sorted(e.params.items()))), e)
    pairs = {}
    for e in expr.eqns:
        if e.prim is A.attention_dkv_p:
            d = dq_of.pop((tuple(map(id, e.inputs)), tuple(sorted(e.params.items()))), None)
            if d is not None:
                pairs[d], pairs[e] = e, d
    if not pairs:
        return expr, consts
    new, done = [], set()
    for e in expr.eqns:
        if e not in pairs:
            new.append(e)
        elif e not in done:
            dq, dkv = (e, pairs[e]) if e.prim is A.attention_dq_p else (pairs[e], e)
            flat = Var(_bwd_shape(*(x.aval for x in e.inputs), **e.params))
            new.append(Eqn(attention_bwd_p, list(e.inputs), e.params, flat, e.src, e.tag))
            new += _view(flat, 0, dq.out, e) + _view(flat, dq.out.aval.size, dkv.out, e)
            done.update((dq, dkv))
    return Expr(expr.in_binders, new, expr.outs, expr.n_consts), consts


def _register():
    from . import passes
    if rewrite not in passes.POST_REWRITES:
        passes.POST_REWRITES.append(rewrite)


_register()
