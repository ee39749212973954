"""Pattern rewrites: hand-written layer norm, RMSNorm, softmax, log_softmax and cross-entropy
become fused primitives.

`rewrite(expr, consts)` finds, over the last axis of an operand x,
  layer norm  ((x - mean(x)) * rsqrt(var + eps), or / sqrt(var + eps), then optionally * g,
              + b with per-column g, b; var = mean((x - mean(x))**2), mean = sum / n),
  RMSNorm     x * rsqrt(mean(x * x) + eps), or x / sqrt(mean(x**2) + eps), optionally * g,
  softmax     exp(x - max(x)) / sum(exp(x - max(x))) (or without the max shift),
  log_softmax (x - max(x)) - log(sum(exp(x - max(x)))),
  cross-entropy with integer labels y, as users write it with funcgrad.numpy:
              nn.logsumexp(x, -1) - take_along_axis(x, y[..., None], -1)[..., 0], or
              -take_along_axis(log_softmax(x), y[..., None], -1)[..., 0] (also under a
              sum or mean: -mean(...) becomes mean(softmax_xent)),
and binds layer_norm / rms_norm / softmax / log_softmax / softmax_xent (funcgrad/prims/rows.py)
in their place; the rest of the hand-written chain is left dead for DCE. The cross-entropy's
labels are the gather's own wrapped labels (y + n where y < 0), so a label outside [-n, n)
still raises IndexError.

Where it runs, and why there: `funcgrad.transforms.ad.vjp` rewrites the *forward* expression it traced
before differentiating it, so the backward of a hand-written layer norm or softmax is the fused
backward primitive (funcgrad/prims/rows_bwd.py) rather than a long chain of primitives
(`jit(grad(loss))` traces grad first, so matching the already-differentiated joint expression
would mean matching every backward chain as well); `funcgrad.compile.passes.optimize` runs it too, for
forward-only jitted programs. Matches are exact on structure: anything else is left as written.
"""
from __future__ import annotations

import numpy as np

from funcgrad import prims as P
from funcgrad.core import Expr, Lit, Var, bind, eqn_tag, new_builder, source_info
from funcgrad.core.dtypes import bfloat16, dtype_kind
from funcgrad.prims import rows as F

_RED = {P.reduce_sum_p: "sum", P.reduce_max_p: "max"}


F32 = np.dtype(np.float32)
HALF = (np.dtype(np.float16), bfloat16)   # means of these accumulate in float32 (jnp.mean)


class _Matcher:
    def __init__(self, expr):
        self.prod = {e.out: e for e in expr.eqns}

    def eqn(self, v, prim):
        e = self.prod.get(v) if isinstance(v, Var) else None
        return e if e is not None and e.prim is prim else None

    def scalar(self, v):
        """The value of a broadcast scalar literal (or a literal), else None."""
        if isinstance(v, Lit):
            return np.asarray(v.val).item() if np.ndim(v.val) == 0 else None
        e = self.eqn(v, P.broadcast_in_dim_p)
        if e is not None and not e.params["broadcast_dimensions"]:
            return self.scalar(e.inputs[0])
        return None

    def keep(self, v, x):
        """w if v is a row value w (x.shape[:-1], or with a trailing 1) broadcast to x's shape
        along the leading axes, else None."""
        e = self.eqn(v, P.broadcast_in_dim_p)
        nd = len(x.aval.shape)
        if e is None or tuple(e.params["shape"]) != tuple(x.aval.shape):
            return None
        w = e.inputs[0]
        if isinstance(w, Lit) or tuple(e.params["broadcast_dimensions"]) != tuple(
                range(len(w.aval.shape))) or len(w.aval.shape) not in (nd - 1, nd):
            return None
        return w

    def row_value(self, v, x):
        """keep(v, x), or v itself when x's rows have one element (no broadcast is needed)."""
        if x.aval.shape[-1:] == (1,) and not isinstance(v, Lit) and \
                tuple(v.aval.shape) == tuple(x.aval.shape):
            return v
        return self.keep(v, x)

    def unkeep(self, w):
        """Strip a keepdims reshape: lead + (1,) -> lead."""
        e = self.eqn(w, P.reshape_p)
        if e is not None and tuple(w.aval.shape[-1:]) == (1,) and tuple(
                e.inputs[0].aval.shape) == tuple(w.aval.shape[:-1]):
            return e.inputs[0]
        return w

    def row_reduce(self, w, kind, x=None):
        """The operand r if w is a last-axis reduction of r (through a keepdims reshape)."""
        e = self.prod.get(self.unkeep(w)) if isinstance(w, Var) else None
        if e is None or _RED.get(e.prim) != kind:
            return None
        r = e.inputs[0]
        if isinstance(r, Lit) or tuple(e.params["axes"]) != (len(r.aval.shape) - 1,):
            return None
        return r if x is None or r is x else None

    def mean_of(self, w):
        """r if w = sum(r, last) / n (or * 1/n), else None; a 16-bit float r's mean as jnp
        writes it (sum of float32(r), / n, rounded back to r's dtype) counts too."""
        c16 = self.eqn(w, P.convert_element_type_p)
        if c16 is not None and c16.out.aval.dtype in HALF and c16.inputs[0].aval.dtype == F32:
            r = self.mean_of(c16.inputs[0])
            e = self.eqn(r, P.convert_element_type_p) if r is not None else None
            return e.inputs[0] if e is not None and e.inputs[0].aval.dtype == w.aval.dtype \
                else None
        for prim in (P.div_p, P.mul_p):
            e = self.eqn(w, prim)
            if e is None:
                continue
            r = self.row_reduce(e.inputs[0], "sum")
            c = self.scalar(e.inputs[1])
            if r is None or c is None:
                continue
            n = r.aval.shape[-1]
            if (prim is P.div_p and c == n) or (prim is P.mul_p and n and np.isclose(c, 1 / n)):
                return r
        return None

    def centered(self, v):
        """x if v = x - mean(x) broadcast, else None."""
        e = self.eqn(v, P.sub_p)
        if e is None or isinstance(e.inputs[0], Lit):
            return None
        x = e.inputs[0]
        w = self.keep(e.inputs[1], x)
        return x if w is not None and self.mean_of(w) is x else None

    def square_of(self, v):
        e = self.eqn(v, P.integer_pow_p)
        if e is not None and e.params["y"] == 2:
            return e.inputs[0]
        e = self.eqn(v, P.mul_p)
        if e is not None and e.inputs[0] is e.inputs[1]:
            return e.inputs[0]
        return None

    def inv_std(self, w, x):
        """eps if w = rsqrt(mean((x - mean x)^2) + eps) (a row value), else None."""
        e = self.eqn(w, P.rsqrt_p)
        if e is None:
            return None
        return self.var_eps(e.inputs[0], x)

    def var_eps(self, v, x, centered=True):
        """eps if v = mean(c * c) + eps with c = x - mean(x) (or c = x), else None."""
        e = self.eqn(v, P.add_p)
        if e is None:
            return None
        for a, b in ((0, 1), (1, 0)):
            eps = self.scalar(e.inputs[b])
            r = self.mean_of(e.inputs[a])
            sq = self.square_of(r) if r is not None else None
            if eps is not None and sq is not None and (
                    self.centered(sq) if centered else sq) is x:
                return float(eps)
        return None

    def rms_normalized(self, v):
        """(x, eps) if v = x * rsqrt(mean(x^2) + eps) or x / sqrt(mean(x^2) + eps)."""
        e = self.eqn(v, P.mul_p)
        for a, b in ((0, 1), (1, 0)) if e is not None else ():
            x = e.inputs[a]
            w = self.row_value(e.inputs[b], x) if not isinstance(x, Lit) else None
            r = self.eqn(w, P.rsqrt_p) if w is not None else None
            eps = self.var_eps(r.inputs[0], x, centered=False) if r is not None else None
            if eps is not None:
                return x, eps
        e = self.eqn(v, P.div_p)
        if e is not None and not isinstance(e.inputs[0], Lit):
            x = e.inputs[0]
            w = self.row_value(e.inputs[1], x)
            s = self.eqn(w, P.sqrt_p) if w is not None else None
            eps = self.var_eps(s.inputs[0], x, centered=False) if s is not None else None
            if eps is not None:
                return x, eps
        return None

    def rms_norm(self, v):
        """(x, scale or None, eps) if v is an RMSNorm of x, optionally times a column g."""
        e = self.eqn(v, P.mul_p)
        for a, b in ((0, 1), (1, 0)) if e is not None else ():
            n = self.rms_normalized(e.inputs[a])
            if n is not None and self.column(e.inputs[b], n[0]) is not None:
                return n[0], self.column(e.inputs[b], n[0]), n[1]
        n = self.rms_normalized(v)
        return None if n is None else (n[0], None, n[1])

    def normalized(self, v):
        """(x, eps) if v = (x - mean) * rsqrt(var + eps) or (x - mean) / sqrt(var + eps)."""
        e = self.eqn(v, P.mul_p)
        if e is not None:
            for a, b in ((0, 1), (1, 0)):
                x = self.centered(e.inputs[a])
                w = self.keep(e.inputs[b], x) if x is not None else None
                eps = self.inv_std(w, x) if w is not None else None
                if eps is not None:
                    return x, eps
        e = self.eqn(v, P.div_p)
        if e is not None:
            x = self.centered(e.inputs[0])
            w = self.keep(e.inputs[1], x) if x is not None else None
            s = self.eqn(w, P.sqrt_p) if w is not None else None
            eps = self.var_eps(s.inputs[0], x) if s is not None else None
            if eps is not None:
                return x, eps
        return None

    def column(self, v, x):
        """g if v broadcasts a per-column (n,) vector g along x's rows, else None."""
        e = self.eqn(v, P.broadcast_in_dim_p)
        nd = len(x.aval.shape)
        if e is None or tuple(e.params["shape"]) != tuple(x.aval.shape):
            return None
        g = e.inputs[0]
        if isinstance(g, Lit) or tuple(e.params["broadcast_dimensions"]) != (nd - 1,) or \
                g.aval.dtype != x.aval.dtype or tuple(g.aval.shape) != (x.aval.shape[-1],):
            return None
        return g

    def layer_norm(self, v):
        """(x, scale or None, bias or None, eps) for the outermost matching form."""
        e = self.eqn(v, P.add_p)
        if e is not None:
            for a, b in ((0, 1), (1, 0)):
                inner = self.scaled(e.inputs[a])
                if inner is not None and self.column(e.inputs[b], inner[0]) is not None:
                    return inner[0], inner[1], self.column(e.inputs[b], inner[0]), inner[2]
        inner = self.scaled(v)
        return None if inner is None else (inner[0], inner[1], None, inner[2])

    def scaled(self, v):
        e = self.eqn(v, P.mul_p)
        if e is not None:
            for a, b in ((0, 1), (1, 0)):
                n = self.normalized(e.inputs[a])
                if n is not None and self.column(e.inputs[b], n[0]) is not None:
                    return n[0], self.column(e.inputs[b], n[0]), n[1]
        n = self.normalized(v)
        return None if n is None else (n[0], None, n[1])

    def shifted(self, v):
        """x if v = x - max(x) broadcast, else None."""
        e = self.eqn(v, P.sub_p)
        if e is None or isinstance(e.inputs[0], Lit):
            return None
        x = e.inputs[0]
        w = self.keep(e.inputs[1], x)
        return x if w is not None and self.row_reduce(w, "max", x) is not None else None

    def softmax(self, v):
        e = self.eqn(v, P.div_p)
        if e is None or isinstance(e.inputs[0], Lit):
            return None
        ex = self.eqn(e.inputs[0], P.exp_p)
        w = self.keep(e.inputs[1], e.inputs[0]) if ex is not None else None
        if w is None or self.row_reduce(w, "sum", e.inputs[0]) is None:
            return None
        s = ex.inputs[0]
        return None if isinstance(s, Lit) else (self.shifted(s) or s)

    def log_softmax(self, v):
        e = self.eqn(v, P.sub_p)
        if e is None or isinstance(e.inputs[0], Lit):
            return None
        s = e.inputs[0]
        x = self.shifted(s)
        w = self.keep(e.inputs[1], s) if x is not None else None
        lg = self.eqn(self.unkeep(w), P.log_p) if w is not None else None
        if lg is None:
            lg = self.eqn(w, P.log_p) if w is not None else None
        if lg is None:
            return None
        r = self.row_reduce(lg.inputs[0], "sum")
        ex = self.eqn(r, P.exp_p) if r is not None else None
        return x if ex is not None and ex.inputs[0] is s else None

    def logsumexp(self, v):
        """x if v = nn.logsumexp(x, -1): log(sum(exp(x - m))) + m, m = stop_gradient(max(x))
        (zeroed where not finite), squeezed to the rows' shape."""
        r = self.eqn(v, P.reshape_p)
        o = self.eqn(r.inputs[0], P.add_p) if r is not None else None
        for a, b in ((0, 1), (1, 0)) if o is not None else ():
            lg, m = self.eqn(o.inputs[a], P.log_p), o.inputs[b]
            sel = self.eqn(m, P.select_p)
            if sel is not None:
                fin = self.eqn(sel.inputs[0], P.isfinite_p)
                if fin is None or fin.inputs[0] is not sel.inputs[1] or \
                        self.scalar(sel.inputs[2]) != 0:
                    continue
                m = sel.inputs[1]
            sg = self.eqn(m, P.stop_gradient_p)
            r = self.row_reduce(lg.inputs[0], "sum") if lg is not None else None
            ex = self.eqn(r, P.exp_p)
            sub = self.eqn(ex.inputs[0], P.sub_p) if ex is not None else None
            if sg is None or sub is None or isinstance(sub.inputs[0], Lit):
                continue
            x = sub.inputs[0]
            if self.row_value(sub.inputs[1], x) is o.inputs[b] and \
                    self.row_reduce(sg.inputs[0], "max", x) is not None and \
                    tuple(v.aval.shape) == tuple(x.aval.shape[:-1]):
                return x
        return None

    def picked(self, v):
        """(x, wrapped labels [..., 1]) if v = take_along_axis(x, y[..., None], -1)[..., 0] as
        funcgrad.numpy writes it: a take of the flattened x at wrap(y) + sum_d iota_d * stride_d,
        where wrap(y) = take(iota(n), y) wraps a negative label once and raises for one outside
        [-n, n) (numpy/_shape.py's checked_index)."""
        r = self.eqn(v, P.reshape_p)
        t = self.eqn(r.inputs[0], P.take_p) if r is not None else None
        fl = self.eqn(t.inputs[0], P.reshape_p) if t is not None else None
        if fl is None or t.params["axis"] != 0 or isinstance(fl.inputs[0], Lit):
            return None
        x, lin = fl.inputs[0], t.inputs[1]
        shape = tuple(x.aval.shape)
        if not shape or tuple(lin.aval.shape) != shape[:-1] + (1,) or \
                tuple(v.aval.shape) != shape[:-1]:
            return None
        n = shape[-1]
        cur, stride = lin, n
        for d in reversed(range(len(shape) - 1)):   # ((wrap(y) + iota_0 s_0) + iota_1 s_1) ...
            a = self.eqn(cur, P.add_p)
            mul = self.eqn(a.inputs[1], P.mul_p) if a is not None else None
            io = self.eqn(mul.inputs[0], P.iota_p) if mul is not None else None
            if io is None or io.params["dimension"] != d or self.scalar(mul.inputs[1]) != stride:
                return None
            stride *= shape[d]
            cur = a.inputs[0]
        w = self.eqn(cur, P.take_p)                  # wrap(y) = take(iota(n), y)
        io = self.eqn(w.inputs[0], P.iota_p) if w is not None else None
        if io is None or w.params["axis"] != 0 or tuple(io.params["shape"]) != (n,) or \
                io.params["dimension"] != 0:
            return None
        return x, cur

    def xent(self, v):
        """(logits, wrapped labels) if v = logsumexp(x) - x[label] or -log_softmax(x)[label]
        (row values), else None."""
        e = self.eqn(v, P.sub_p)
        if e is not None:
            x = self.logsumexp(e.inputs[0])
            pk = self.picked(e.inputs[1]) if x is not None else None
            return pk if pk is not None and pk[0] is x else None
        e = self.eqn(v, P.neg_p)
        return self.xent_from_log_softmax(e.inputs[0]) if e is not None else None

    def xent_total(self, v):
        """(x, labels, axes, scale) if v = -sum(picked log_softmax) (times or over a scalar
        literal: a mean), with scale = (mul or div, the scalar operand) or None."""
        e = self.eqn(v, P.neg_p)
        u = e.inputs[0] if e is not None else None
        scale = None
        for prim in (P.div_p, P.mul_p):
            d = self.eqn(u, prim)
            if d is not None and self.scalar(d.inputs[1]) is not None:
                scale, u = (prim, d.inputs[1]), d.inputs[0]
                break
        r = self.eqn(u, P.reduce_sum_p)
        if r is None:
            return None
        xy = self.xent_from_log_softmax(r.inputs[0])
        return None if xy is None else (*xy, r.params["axes"], scale)

    def xent_from_log_softmax(self, v):
        """(x, wrapped labels) if v = take_along_axis(log_softmax(x), y[..., None], -1)[..., 0]."""
        pk = self.picked(v)
        if pk is None:
            return None
        ls = self.eqn(pk[0], F.log_softmax_p)
        x = ls.inputs[0] if ls is not None else self.log_softmax(pk[0])
        return None if x is None or isinstance(x, Lit) else (x, pk[1])


def _match(m, e):
    """(prim, operands, params) replacing eqn e, or None."""
    if dtype_kind(e.out.aval.dtype) != "f":
        return None
    if e.prim is P.sub_p or e.prim is P.neg_p:
        xy = m.xent(e.out)       # loss[...] = logsumexp(x[..., :]) - x[..., y]
        if xy is not None and xy[0].aval.shape[-1]:
            return "softmax_xent", xy, {}
    if e.prim is P.neg_p:
        t = m.xent_total(e.out)  # -sum(log_softmax(x)[y]) (/ c) = sum(softmax_xent) (/ c)
        if t is not None and t[0].aval.shape[-1]:
            return "softmax_xent_total", t[:2], {"axes": t[2], "scale": t[3]}
    if not e.out.aval.shape or e.out.aval.shape[-1] == 0:
        return None
    if e.prim is P.add_p or e.prim is P.mul_p or e.prim is P.div_p:
        ln = m.layer_norm(e.out)
        if ln is not None:
            x, g, b, eps = ln
            return "layer_norm", (x, g, b), {"eps": eps}
    if e.prim is P.mul_p or e.prim is P.div_p:
        rn = m.rms_norm(e.out)   # x * rsqrt(mean(x^2) + eps) * g
        if rn is not None:
            x, g, eps = rn
            return "rms_norm", (x, g), {"eps": eps}
    if e.prim is P.div_p:
        x = m.softmax(e.out)
        if x is not None:
            return "softmax", (x,), {}
    if e.prim is P.sub_p:
        x = m.log_softmax(e.out)
        if x is not None:
            return "log_softmax", (x,), {}
    return None


def _bind(kind, ops, params, read, aval):
    if kind == "softmax":
        return bind(F.softmax_p, read(ops[0]))
    if kind == "log_softmax":
        return bind(F.log_softmax_p, read(ops[0]))
    if kind.startswith("softmax_xent"):
        x, y = ops
        loss = bind(F.softmax_xent_p, read(x), P.reshape(read(y), x.aval.shape[:-1]))
        if kind == "softmax_xent":
            return loss
        out = P.reduce_sum(loss, params["axes"])
        scale = params["scale"]
        return out if scale is None else bind(scale[0], out, read(scale[1]))
    n, dt = aval.shape[-1], aval.dtype
    if kind == "rms_norm":
        x, g = ops
        scale = read(g) if g is not None else P.broadcast_in_dim(np.asarray(1, dt), (n,), ())
        return bind(F.rms_norm_p, read(x), scale, eps=params["eps"])
    x, g, b = ops
    scale = read(g) if g is not None else P.broadcast_in_dim(np.asarray(1, dt), (n,), ())
    bias = read(b) if b is not None else P.broadcast_in_dim(np.asarray(0, dt), (n,), ())
    return bind(F.layer_norm_p, read(x), scale, bias, eps=params["eps"])


def rewrite(expr: Expr, consts: list) -> tuple[Expr, list]:
    """expr with the hand-written patterns replaced by fused primitives (expr itself when
    nothing matches); dead equations are removed."""
    m = _Matcher(expr)
    found = {}
    for e in expr.eqns:
        hit = _match(m, e)
        if hit is not None:
            found[e.out] = hit
    if not found:
        return expr, consts
    from funcgrad.compile.passes import dce
    with new_builder() as b:
        ins = [b.new_arg(v.aval) for v in expr.in_binders[expr.n_consts:]]
        env = dict(zip(expr.in_binders[:expr.n_consts], consts))
        env.update(zip(expr.in_binders[expr.n_consts:], ins))

        def read(x):
            return x.val if isinstance(x, Lit) else env[x]

        for e in expr.eqns:
            with source_info(e.src), eqn_tag(e.tag):
                if e.out in found:
                    kind, ops, params = found[e.out]
                    env[e.out] = _bind(kind, ops, params, read, e.out.aval)
                else:
                    env[e.out] = bind(e.prim, *[read(x) for x in e.inputs], **e.params)
        new_expr, new_consts = b.build(ins, [read(o) for o in expr.outs])
    return dce(new_expr, new_consts)
