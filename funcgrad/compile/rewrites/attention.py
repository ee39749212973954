"""jit pass: composed attention `softmax(where(mask, q @ k^T * s, -inf)) @ v` -> the fused
attention primitive (funcgrad/prims/attention.py), so hand-written attention gets the flash
kernels too.

The pattern, over equations of an Expr (every intermediate used only by the next step):

    L  = dot_general(A, Bk)        batch dims (<= 2) first, one free axis each (T, S), one
                                   contracted axis (the head dim, <= 128)
    Ls = L * c | L / c | L         c a scalar constant: the scale
    M  = select(mask, Ls, fill)    optional; mask a constant (a computed-from-constants mask
                                   counts) equal to tril (causal) or all true, broadcast over
                                   the batch dims; fill a constant <= -1e9 or -inf
    P  = softmax(M)                the fused primitive, over S
    O  = dot_general(P, V)         contracting S, same batch dims

becomes O = attention(q, k, v) with q, k, v transposed views of A, Bk, V (no copies on CUDA).
Under grad the composed backward reads L and P too, so the chain is not single-use there and
stays composed: differentiate nn.dot_product_attention (which binds the primitive directly) to
get the flash backward.
"""
from __future__ import annotations

import numpy as np

from funcgrad import prims as P
from funcgrad.prims.attention import MAX_HEAD_DIM, _params, attention_p, tf32_of
from funcgrad.core import Eqn, Expr, Lit, Var, is_float
from funcgrad.prims.rows import softmax_p

_EVAL_LIMIT = 1 << 22   # elements of a constant mask evaluated at trace time


class _Graph:
    def __init__(self, expr, consts):
        self.expr = expr
        self.producer = {e.out: e for e in expr.eqns}
        self.uses: dict = {}
        for e in expr.eqns:
            for x in e.inputs:
                if isinstance(x, Var):
                    self.uses[x] = self.uses.get(x, 0) + 1
        for o in expr.outs:
            if isinstance(o, Var):
                self.uses[o] = self.uses.get(o, 0) + 2   # outputs are never folded away
        self.const = {v: np.asarray(c) for v, c in zip(expr.in_binders[:expr.n_consts], consts)}
        self.memo: dict = {}

    def single(self, v, prim):
        """The equation producing v with `prim` when v feeds only one equation, else None."""
        e = self.producer.get(v) if isinstance(v, Var) else None
        return e if e is not None and e.prim is prim and self.uses.get(v) == 1 else None

    def value(self, x):
        """x's value when it is computable from constants alone (small), else None."""
        if isinstance(x, Lit):
            return np.asarray(x.val)
        if x in self.const:
            return self.const[x]
        if x in self.memo:
            return self.memo[x]
        e = self.producer.get(x)
        val = None
        if (e is not None and not getattr(e.prim, "effectful", False)
                and e.prim.call_impl is None and x.aval.size <= _EVAL_LIMIT):
            args = [self.value(a) for a in e.inputs]
            if all(a is not None for a in args):
                try:
                    with np.errstate(all="ignore"):
                        val = np.asarray(e.prim.impl(*args, **e.params))
                except Exception:  # noqa: BLE001 - not a constant we understand: no match
                    val = None
        self.memo[x] = val
        return val

    def scalar(self, x):
        """The single value of a constant that is a (broadcast) scalar, else None."""
        while isinstance(x, Var) and x in self.producer and \
                self.producer[x].prim is P.broadcast_in_dim_p:
            x = self.producer[x].inputs[0]
        v = self.value(x) if isinstance(x, Lit) or x in self.const or (
            isinstance(x, Var) and x.aval.size == 1) else None
        return None if v is None or v.size != 1 else float(v.reshape(()))

    def mask_kind(self, m):
        """"causal" / "full" when mask m is tril / all true over its last two axes (the same
        for every batch index), else None."""
        src, bd = m, tuple(range(m.aval.ndim))
        while isinstance(src, Var) and src in self.producer and \
                self.producer[src].prim is P.broadcast_in_dim_p:
            e = self.producer[src]
            bd = tuple(bd[i] for i in e.params["broadcast_dimensions"])
            src = e.inputs[0]
        val = self.value(src)
        if val is None:
            return None
        shape = [1] * m.aval.ndim
        for i, a in enumerate(bd):
            shape[a] = val.shape[i]
        arr = np.transpose(val, np.argsort(bd)).reshape(shape) if val.ndim else val.reshape(shape)
        t, s = m.aval.shape[-2:]
        arr = arr.reshape((-1,) + arr.shape[-2:])
        if arr.shape[0] > 1 and not (arr == arr[:1]).all():
            return None
        full = np.broadcast_to(arr[0], (t, s))
        if full.all():
            return "full"
        if (full == np.tri(t, s, dtype=bool)).all():
            return "causal"
        return None


def _match(g: _Graph, e5: Eqn):
    """The fused replacement of the chain ending in dot_general e5, or None."""
    pv, v = e5.inputs
    e4 = g.single(pv, softmax_p)
    if e4 is None:
        return None
    m = e4.inputs[0]
    causal = False
    e3 = g.single(m, P.select_p)
    ls = m
    if e3 is not None:
        pred, ls, fill = e3.inputs
        f = g.scalar(fill)
        fill_ok = f is not None and f <= -1e9
        kind = g.mask_kind(pred) if fill_ok else None
        if kind is None:
            return None
        causal = kind == "causal"
    scale, lv = 1.0, ls
    for prim, inv in ((P.mul_p, False), (P.div_p, True)):
        e2 = g.single(ls, prim)
        if e2 is not None:
            a, b = e2.inputs
            c = g.scalar(b)
            if c is None and not inv:
                a, b = b, a
                c = g.scalar(b)
            if c is None or (inv and c == 0):
                return None
            scale, lv = (1.0 / c if inv else c), a
            break
    e1 = g.single(lv, P.dot_general_p)
    if e1 is None:
        return None
    return _build(e1, e5, causal, scale)


def _build(e1, e5, causal, scale):
    (ca, cb), (ba, bb) = e1.params["dimension_numbers"]
    (cp, cv), (bp, bv) = e5.params["dimension_numbers"]
    a, bk = e1.inputs
    pv, v = e5.inputs
    nb = len(ba)
    if (len(ca) != 1 or nb > 2 or a.aval.ndim != nb + 2 or bk.aval.ndim != nb + 2
            or v.aval.ndim != nb + 2 or tuple(bp) != tuple(range(nb)) or len(cp) != 1
            or cp[0] != nb + 1 or len(cv) != 1):
        return None
    if not (is_float(a.aval.dtype) and a.aval.dtype == bk.aval.dtype == v.aval.dtype):
        return None
    fa = next(i for i in range(nb + 2) if i not in ca and i not in ba)
    fb = next(i for i in range(nb + 2) if i not in cb and i not in bb)
    fv = next(i for i in range(nb + 2) if i not in cv and i not in bv)
    if a.aval.shape[ca[0]] > MAX_HEAD_DIM or v.aval.shape[fv] > MAX_HEAD_DIM:
        return None
    eqns = []

    def emit(prim, x, **params):
        out = Var(prim.shape(x.aval, **params))
        eqns.append(Eqn(prim, [x], params, out, e5.src, e5.tag))
        return out

    def as4(x, batch, free, contract):
        # -> [B, free, N, contract]; missing batch axes become unit axes (views)
        order = ([batch[0]] if nb else []) + [free] + ([batch[1]] if nb == 2 else []) + \
            [contract]
        y = emit(P.transpose_p, x, permutation=tuple(order))
        shape, dims = list(y.aval.shape), list(range(len(order)))
        if nb < 2:   # the head axis (after the free axis)
            shape.insert(2 - (nb == 0), 1)
            dims = [d if d < 2 - (nb == 0) else d + 1 for d in dims]
        if nb == 0:   # the batch axis
            shape.insert(0, 1)
            dims = [d + 1 for d in dims]
        if len(shape) == y.aval.ndim:
            return y
        return emit(P.broadcast_in_dim_p, y, shape=tuple(shape),
                    broadcast_dimensions=tuple(dims))

    q4 = as4(a, ba, fa, ca[0])
    k4 = as4(bk, bb, fb, cb[0])
    v4 = as4(v, bv, cv[0], fv)
    # TF32 kernels only when both products allowed TF32 (or less)
    tf32 = all(tf32_of(e.params.get("precision")) for e in (e1, e5))
    params = _params(float(scale), bool(causal), "tensorfloat32" if tf32 else None)
    o = Var(attention_p.shape(q4.aval, k4.aval, v4.aval, **params))
    eqns.append(Eqn(attention_p, [q4, k4, v4], params, o, e5.src, e5.tag))
    o2 = Var(e5.out.aval)
    if nb == 2:   # [B, T, N, Hv] -> [B, N, T, Hv]
        eqns.append(Eqn(P.transpose_p, [o], {"permutation": (0, 2, 1, 3)}, o2, e5.src, e5.tag))
    else:         # unit batch/head axes dropped (a view of the contiguous output)
        eqns.append(Eqn(P.reshape_p, [o], {"new_sizes": tuple(e5.out.aval.shape)}, o2, e5.src,
                        e5.tag))
    return eqns, o2


def rewrite(expr: Expr, consts: list) -> tuple[Expr, list]:
    """expr with every composed-attention chain replaced by the fused primitive."""
    if not any(e.prim is softmax_p for e in expr.eqns):
        return expr, consts
    g = _Graph(expr, consts)
    new, rename, hit = [], {}, False
    for e in expr.eqns:
        rep = _match(g, e) if e.prim is P.dot_general_p else None
        if rep is None:
            new.append(e)
            continue
        eqns, out = rep
        new += eqns
        rename[e.out] = out
        hit = True
    if not hit:
        return expr, consts

    def ren(x):
        return rename.get(x, x) if isinstance(x, Var) else x
    new = [Eqn(e.prim, [ren(x) for x in e.inputs], e.params, e.out, e.src, e.tag)
           if any(isinstance(x, Var) and x in rename for x in e.inputs) else e for e in new]
    from funcgrad.compile.passes import dce
    return dce(Expr(expr.in_binders, new, [ren(o) for o in expr.outs], expr.n_consts), consts)
