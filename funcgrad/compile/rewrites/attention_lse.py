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


_BWD = (A.attention_dq_p, A.attention_dkv_p)


def _same(p, r) -> bool:
    return p["scale"] == r["scale"] and p["causal"] == r["causal"]


def _saved_pairs(expr, supported):
    """{attention_stats eqn: (its forward, its readers)} for each statistics whose o is the
    forward's of the same q, k and params, read only by backward primitives of (q, k, v, do),
    on operands `supported` takes."""
    from funcgrad.prims.attention_bwd import attention_bwd_p
    prod = {e.out: e for e in expr.eqns}
    readers: dict = {}
    for e in expr.eqns:
        for x in e.inputs:
            if isinstance(x, Var):
                readers.setdefault(x, []).append(e)
    outs = {id(x) for x in expr.outs}
    found = {}
    for e in expr.eqns:
        if e.prim is not A.attention_stats_p or id(e.out) in outs:
            continue
        q, k, o, do = e.inputs
        f = prod.get(o) if isinstance(o, Var) else None
        if (f is None or f.prim is not A.attention_p or f.inputs[0] is not q
                or f.inputs[1] is not k or not _same(f.params, e.params)):
            continue
        v, cons = f.inputs[2], readers.get(e.out, [])
        ok = cons and all(
            (c.prim is attention_bwd_p or c.prim in _BWD) and _same(c.params, e.params)
            and [id(x) for x in c.inputs] == [id(q), id(k), id(v), id(do), id(e.out)]
            for c in cons)
        if ok and supported(q.aval, k.aval, v.aval, f.params):
            found[e] = (f, cons)
    return found


def rewrite_saved(expr: Expr, consts: list, supported) -> tuple[Expr, list]:
    """attention(q, k, v) -> o, attention_stats(q, k, o, do) and the backward primitives that
    alone read those statistics -> attention_fwdl(q, k, v) (o and the lse as views) and
    attention_bwdl(q, k, v, do, fl): the backward reads the forward's output and logsumexp
    (cuDNN's SDPA pair; the CUDA plan applies it where funcgrad/cuda/cudnn_attn.py takes the
    operands: `supported(q, k, v, params)` on their avals). An attention_bwd keeps its params
    (packed too); attention_dq / attention_dkv become views of one unpacked attention_bwdl.
    """
    from funcgrad.prims.attention_bwd import _bwd_shape, attention_bwd_p, attention_bwdl_p
    from funcgrad.compile.rewrites.attention_bwd import _view
    found = _saved_pairs(expr, supported)
    if not found:
        return expr, consts
    flat_of, group_of = {}, {}
    for s_eqn, (f, cons) in found.items():
        flat_of[f] = Var(_fwdl_shape(*(x.aval for x in f.inputs), **f.params))
        for c in cons:
            group_of[c] = (f, s_eqn, cons)
    new, done = [], set()
    for e in expr.eqns:
        if e in flat_of:
            flat = flat_of[e]
            new.append(Eqn(attention_fwdl_p, list(e.inputs), e.params, flat, e.src, e.tag))
            new += _view(flat, 0, e.out, e)
        elif e in found:
            continue
        elif e in group_of:
            f, s_eqn, cons = group_of[e]
            q, k, v, do = e.inputs[:4]
            ins = [q, k, v, do, flat_of[f]]
            if e.prim is attention_bwd_p:
                new.append(Eqn(attention_bwdl_p, ins, e.params, e.out, e.src, e.tag))
                continue
            if s_eqn in done:
                continue
            done.add(s_eqn)
            prm = {x: y for x, y in e.params.items() if x != "packed"}
            flat = Var(_bwd_shape(*(x.aval for x in e.inputs), **prm))
            new.append(Eqn(attention_bwdl_p, ins, prm, flat, e.src, e.tag))
            n_q = q.aval.size
            for c in cons:
                if c.prim is A.attention_dq_p:
                    new += _view(flat, 0, c.out, c)
                elif c.prim is A.attention_dkv_p:
                    new += _view(flat, n_q, c.out, c)
        else:
            new.append(e)
    return Expr(expr.in_binders, new, expr.outs, expr.n_consts), consts
