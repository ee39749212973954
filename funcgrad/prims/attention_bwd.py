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
from funcgrad import prims as P
from funcgrad.prims.attention_lse import flat_batch
from funcgrad.core import Eqn, Expr, ShapedArray, Var, defprim, type_error


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
    from funcgrad.compile.passes import dce
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


def _is_slice(e, x, start, limit):
    """Whether eqn e is x[start:limit] (unit strides)."""
    return (e is not None and e.prim is P.slice_p and e.inputs[0] is x
            and tuple(e.params["start_indices"]) == tuple(start)
            and tuple(e.params["limit_indices"]) == tuple(limit)
            and all(st == 1 for st in e.params["strides"]))


def _match(c, prod):
    """The eqns (bwd, dq piece, dq, dkv piece, dkv, dk, dv) when concatenate eqn c joins the
    dq, dk and dv views of one unpacked attention_bwd (S == T, H == Hv) along the heads, else
    None."""
    if c.params["dimension"] != 2 or len(c.inputs) != 3:
        return None
    rq, rk, rv = (prod.get(x) if isinstance(x, Var) else None for x in c.inputs)
    if rq is None or rq.prim is not P.reshape_p or rk is None or rv is None:
        return None
    sq = prod.get(rq.inputs[0])
    bw = prod.get(sq.inputs[0]) if sq is not None and sq.prim is P.slice_p else None
    if bw is None or bw.prim is not attention_bwd_p or bw.params.get("packed"):
        return None
    q, k, v = (x.aval for x in bw.inputs[:3])
    b, t, _, h = q.shape
    s, kh, hv = k.shape[1], k.shape[2], v.shape[3]
    rkv = prod.get(rk.inputs[0])
    skv = prod.get(rkv.inputs[0]) if rkv is not None and rkv.prim is P.reshape_p else None
    n_kv = b * s * kh * (h + hv)
    ok = (s == t and hv == h and _is_slice(sq, bw.out, (0,), (q.size,))
          and _is_slice(skv, bw.out, (q.size,), (q.size + n_kv,))
          and rkv.out.aval.shape == (b, s, kh, h + hv)
          and _is_slice(rk, rkv.out, (0,) * 4, (b, s, kh, h))
          and _is_slice(rv, rkv.out, (0, 0, 0, h), (b, s, kh, h + hv)))
    return (bw, sq, rq, skv, rkv, rk, rv) if ok else None


def _packed_eqns(c, m):
    """attention_bwd[packed], c's output as a reshape of its result, and the equations that
    redefine the unpacked views' variables from it: dq, dk, dv slices of the heads; dkv and the
    pieces concatenates and reshapes (dce drops those nobody reads)."""
    bw, sq, rq, skv, rkv, rk, rv = m
    b, t, n, h = bw.inputs[0].aval.shape
    kh = bw.inputs[1].aval.shape[2]
    flat = Var(bw.out.aval)

    def eqn(prim, ins, params, out):
        return Eqn(prim, ins, params, out, bw.src, bw.tag)
    out = [eqn(attention_bwd_p, list(bw.inputs), dict(bw.params, packed=True), flat),
           Eqn(P.reshape_p, [flat], {"new_sizes": (b, t, n + 2 * kh, h)}, c.out, c.src, c.tag)]
    for x, lo, hi in ((rq.out, 0, n), (rk.out, n, n + kh), (rv.out, n + kh, n + 2 * kh)):
        out.append(eqn(P.slice_p, [c.out], {"start_indices": (0, 0, lo, 0),
                                            "limit_indices": (b, t, hi, h),
                                            "strides": (1,) * 4}, x))
    return out + [eqn(P.concatenate_p, [rk.out, rv.out], {"dimension": 3}, rkv.out),
                  eqn(P.reshape_p, [rq.out], {"new_sizes": (sq.out.aval.size,)}, sq.out),
                  eqn(P.reshape_p, [rkv.out], {"new_sizes": (skv.out.aval.size,)}, skv.out),
                  eqn(P.concatenate_p, [sq.out, skv.out], {"dimension": 0}, bw.out)]


def pack(expr: Expr, consts: list) -> tuple[Expr, list]:
    """concatenate([dq, dk, dv], heads) of the views of one attention_bwd (the backward of a
    fused qkv projection's split) -> a reshape of attention_bwd[packed] (at the attention_bwd);
    other readers of the views read slices of the packed array."""
    prod = {e.out: e for e in expr.eqns}
    found = {}
    for e in expr.eqns:
        if e.prim is P.concatenate_p:
            m = _match(e, prod)
            if m is not None and m[0] not in found:
                found[m[0]] = (e, m)
    if not found:
        return expr, consts
    gone = {x for c, m in found.values() for x in (c,) + m}
    new = []
    for e in expr.eqns:
        if e in found:
            new += _packed_eqns(*found[e])
        elif e not in gone:
            new.append(e)
    return Expr(expr.in_binders, new, expr.outs, expr.n_consts), consts


def _register():
    from funcgrad.compile import passes
    for r in (rewrite, pack):   # pack right after rewrite, which makes what it matches
        if r in passes.POST_REWRITES:
            passes.POST_REWRITES.remove(r)
    passes.POST_REWRITES.append(rewrite)
    passes.POST_REWRITES.append(pack)


_register()
