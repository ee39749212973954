"""Rewrites: attention_dq and attention_dkv of one set of operands -> one attention_bwd
(and `pack`: its slices fed to one concatenate -> the packed layout)."""
from __future__ import annotations


from funcgrad import prims as P
from funcgrad.core import Eqn, Expr, ShapedArray, Var
from funcgrad.prims import attention as A
from funcgrad.prims.attention_bwd import _bwd_shape, attention_bwd_p


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
