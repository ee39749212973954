"""Rewrite: a training step's attention forward and attention_stats pair -> attention_fwdl
(the forward keeps its logsumexp for the backward, FlashAttention-2's saved lse)."""
from __future__ import annotations


from funcgrad import prims as P
from funcgrad.core import Eqn, Expr, ShapedArray, Var
from funcgrad.prims import attention as A
from funcgrad.prims.attention_lse import _fwdl_shape, attention_delta_p, attention_fwdl_p


def rewrite(expr: Expr, consts: list) -> tuple[Expr, list]:
    """attention(q, k, v) whose output feeds attention_stats(q, k, o, do) -> attention_fwdl +
    attention_delta (the logsumexp from the forward kernel)."""
    fwd = {e.out: e for e in expr.eqns if e.prim is A.attention_p}
    if not fwd:
        return expr, consts
    lse_of, new, hit = {}, [], False
    stats_fwd = {}
    for e in expr.eqns:
        if e.prim is A.attention_stats_p:
            q, k, o, do = e.inputs
            f = fwd.get(o) if isinstance(o, Var) else None
            if (f is not None and f.inputs[0] is q and f.inputs[1] is k
                    and f.params == e.params and A._stats_dtype(q.aval.dtype) == q.aval.dtype):
                stats_fwd[e] = f
    wanted = set(stats_fwd.values())
    for e in expr.eqns:
        if e in wanted:
            q, k, v = e.inputs
            flat = Var(_fwdl_shape(q.aval, k.aval, v.aval, **e.params))
            new.append(Eqn(attention_fwdl_p, [q, k, v], e.params, flat, e.src, e.tag))
            n_o = e.out.aval.size
            o_flat = Var(ShapedArray((n_o,), q.aval.dtype))
            new.append(Eqn(P.slice_p, [flat], {"start_indices": (0,), "limit_indices": (n_o,),
                                               "strides": (1,)}, o_flat, e.src, e.tag))
            new.append(Eqn(P.reshape_p, [o_flat], {"new_sizes": tuple(e.out.aval.shape)},
                           e.out, e.src, e.tag))
            b, t, n, _ = q.aval.shape
            l_flat = Var(ShapedArray((b * n * t,), q.aval.dtype))
            new.append(Eqn(P.slice_p, [flat], {"start_indices": (n_o,),
                                               "limit_indices": (n_o + b * n * t,),
                                               "strides": (1,)}, l_flat, e.src, e.tag))
            lse = Var(ShapedArray((b, n, t), q.aval.dtype))
            new.append(Eqn(P.reshape_p, [l_flat], {"new_sizes": (b, n, t)}, lse, e.src, e.tag))
            lse_of[e] = lse
            hit = True
        elif e in stats_fwd:
            _, _, o, do = e.inputs
            new.append(Eqn(attention_delta_p, [o, do, lse_of[stats_fwd[e]]], {}, e.out, e.src,
                           e.tag))
        else:
            new.append(e)
    if not hit:
        return expr, consts
    return Expr(expr.in_binders, new, expr.outs, expr.n_consts), consts
