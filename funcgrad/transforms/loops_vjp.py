"""Reverse mode of lax.scan (one forward scan saving residuals, one reverse scan) and lax.cond.

A scan's results are one vjp group (ad.py calls `rec.fwd` / `rec.bwd` once per loop, keyed by
record and operands as custom_vjp calls). The forward scan computes the results and stacks,
for each step, the carry entering it and the body's values that the reverse scan reads and
that change from step to step (a tanh's output for its derivative, a mask of a ReLU, ...), as
JAX's partial evaluation of a scan saves its residuals; the reverse scan runs the body's
backward pass with those values kept (`ad._forward(kept=...)`), so the body's forward is not
computed a second time there. Values that depend on the loop's constants alone are recomputed
(they do not grow with the trip count), as are a nested loop's or a custom_vjp call's results
and everything inside `checkpoint` (its policy decides what it saves). Which values the
reverse scan reads is found once per record and differentiated-operand mask, by tracing the
body's backward pass and following the cotangent-free operands of its cotangent-dependent
equations back to the body's own values. Cotangents are computed only for the operands the
differentiated inputs reach.

A cond's results are a group too: its backward is one cond over the branches' backward passes
taking every result's cotangent (the selected branch's forward runs again there).
"""
from __future__ import annotations

import numpy as np

from funcgrad import prims as P
from funcgrad.transforms.ad import FORWARD_REWRITES, _forward, backward_pass, vjp
from funcgrad.core import (
    Expr,
    ShapedArray,
    Tracer,
    Var,
    aval_of,
    eval_expr,
    is_float,
    trace_to_expr,
)
from funcgrad.prims.loops import bind_group, cond_p, make_cond, make_scan, scan_p, trace_closed


def _floats(avals):
    return [is_float(a.dtype) for a in avals]


def _zeros(x):
    return P.zeros_like(x)


def _spread(vals, mask):
    """vals placed at the True positions of mask, None elsewhere."""
    it = iter(vals)
    return [next(it) if m else None for m in mask]


def _split(args, *sizes):
    """args cut into consecutive lists of the given sizes (a traced body's packed operands)."""
    out, i = [], 0
    for n in sizes:
        out.append(list(args[i:i + n]))
        i += n
    return out


class _AdBody:
    """The body as reverse mode sees it, for one mask of differentiated operands.

    expr: the body with the forward rewrites applied (ad.FORWARD_REWRITES) and its operands
    reordered, those not differentiated first (as constants of `_forward`); consts: the
    rewrites' constants; order: operand indices in expr's order; n_fixed: how many lead;
    saved: the body values the reverse scan reads that vary by step (stacked by the forward).
    """

    def __init__(self, rec, diff):
        body = rec.exprs[0]
        expr, consts = body, []
        for rewrite in FORWARD_REWRITES:
            expr, consts = rewrite(expr, consts)
        ins = expr.in_binders[expr.n_consts:]
        fixed = [i for i, d in enumerate(diff) if not d]
        moving = [i for i, d in enumerate(diff) if d]
        self.order, self.n_fixed = fixed + moving, len(fixed)
        self.consts = list(consts)
        self.outs = list(expr.outs)
        self.expr = Expr(list(expr.in_binders[:expr.n_consts]) + [ins[i] for i in self.order],
                         expr.eqns, self.outs, expr.n_consts + len(fixed))
        self.saved = self._reads(rec, ins)

    def forward(self, vals, kept=None):
        """_forward over the body's operands (in the record's order)."""
        ordered = [vals[i] for i in self.order]
        return _forward(self.expr, self.consts + ordered[:self.n_fixed],
                        ordered[self.n_fixed:], kept=kept)

    def cts_out(self, rec, ctk, cty):
        """The body results' cotangents: carry j's from ctk (float carries, in order), y j's
        from cty (a dict; missing: zero)."""
        nk = rec.n_carry
        fo = _floats(rec.out_avals)
        it = iter(ctk)
        return [(next(it) if fo[j] else None) if j < nk else cty.get(j)
                for j in range(len(self.outs))]

    def _reads(self, rec, ins):
        """Body values read by the backward pass that depend on the carry or the xs."""
        nc = rec.n_consts
        fo = _floats(rec.out_avals)
        ct_at = [j for j, f in enumerate(fo) if f]
        out_avals = [aval_of(o) if not isinstance(o, Var) else o.aval for o in self.outs]
        avals = [v.aval for v in ins] + [out_avals[j] for j in ct_at]
        mapped = {}

        def g(*a):
            vals, cts = list(a[:len(ins)]), list(a[len(ins):])
            env, active, read = self.forward(vals)
            for e in self.expr.eqns:
                t = env.get(e.out)
                if isinstance(t, Tracer) and not e.prim.vjp_group:
                    mapped[t.var] = e.out
            full = [None] * len(self.outs)
            for j, c in zip(ct_at, cts):
                full[j] = c
            got = [c for c in backward_pass(self.expr, env, active, read, full) if c is not None]
            return got or [P.full((), 0, np.float32)]
        traced, _, _ = trace_to_expr(g, avals)
        n_lead = traced.n_consts
        args = traced.in_binders[n_lead:]
        unknown = set(args[len(ins):])                 # the cotangents
        varying = set(args[nc:len(ins)])               # the carry and the xs
        producer = {}
        for e in traced.eqns:
            producer[e.out] = e
            vs = [x for x in e.inputs if isinstance(x, Var)]
            if any(x in unknown for x in vs):
                unknown.add(e.out)
            elif any(x in varying for x in vs):
                varying.add(e.out)
        todo = [x for e in traced.eqns if e.out in unknown for x in e.inputs
                if isinstance(x, Var) and x not in unknown]
        todo += [o for o in traced.outs if isinstance(o, Var) and o not in unknown]
        need, seen = set(), set()
        while todo:
            v = todo.pop()
            if v in seen or v not in varying:
                continue
            seen.add(v)
            if v in mapped:
                need.add(mapped[v])
                continue
            e = producer.get(v)
            if e is not None:
                todo += [x for x in e.inputs if isinstance(x, Var)]
        return [e.out for e in self.expr.eqns if e.out in need]


def _ad_body(rec, diff) -> _AdBody:
    key = ("ad_body", tuple(diff))
    hit = rec.derived.get(key)
    if hit is None:
        hit = rec.derived[key] = _AdBody(rec, diff)
    return hit


def _wanted(rec, active):
    """Float operands the differentiated inputs reach (`active`, from ad.py; None: all)."""
    fl = _floats(rec.in_avals)
    return tuple(f and (active is None or a) for f, a in zip(fl, active or fl))


def _diff_mask(rec, wanted):
    """Operands that get cotangents: the wanted floats, and every float carry (the carry's
    cotangent flows through the steps)."""
    nc, nk = rec.n_consts, rec.n_carry
    fl = list(wanted)
    fl[nc:nc + nk] = _floats(rec.in_avals[nc:nc + nk])
    return fl


def scan_fwd(rec, *xs, active=None):
    """(results, residuals): one scan of the body that also stacks the carries entering each
    step and the body values the reverse scan reads; the residuals also say which operands get
    cotangents (`active`: those the differentiated function's inputs reach)."""
    nc, nk = rec.n_consts, rec.n_carry
    diff = _diff_mask(rec, _wanted(rec, active))
    ab = _ad_body(rec, diff)
    # the body with the saved values as extra results, evaluated once a step
    both = Expr(ab.expr.in_binders, ab.expr.eqns, ab.outs + ab.saved, ab.expr.n_consts)

    def fn(*a):
        outs = eval_expr(both, [a[i] for i in ab.order], ab.consts)
        n = len(ab.outs)
        return outs[:n] + list(a[nc:nc + nk]) + outs[n:]

    c_avals = rec.in_avals[nc:nc + nk]
    x_avals = [ShapedArray(a.shape[1:], a.dtype) for a in rec.in_avals[nc + nk:]]
    new, ops = make_scan(fn, list(xs[:nc]), c_avals, x_avals, rec.length, rec.reverse,
                         rec.unroll, name=f"fwd({rec.name})")
    res = bind_group(scan_p, new, ops + list(xs[nc:]))
    n = len(rec.out_avals)
    return res[:n], (diff, list(xs), res[n:n + nk], res[n + nk:])


def scan_bwd(rec, res, cts):
    """Operand cotangents from the results' (None: zero): a reverse scan of the body's
    backward pass at the saved carries and values; the constants' cotangents sum up in its
    carry."""
    nc, nk = rec.n_consts, rec.n_carry
    fl, xs, carries, stacks = res
    n_in = len(rec.in_avals)
    fc, fk, fx = fl[:nc], fl[nc:nc + nk], fl[nc + nk:]
    fo = _floats(rec.out_avals)
    cts = [c if f else None for c, f in zip(cts, fo)]
    if not any(fl) or all(c is None for c in cts):
        return [None] * n_in
    ab = _ad_body(rec, fl)
    nx = n_in - nc - nk
    n_fc, n_fk = sum(fc), sum(fk)
    y_in = [j for j in range(nk, len(cts)) if cts[j] is not None]   # ys with a cotangent
    moving = ab.order[ab.n_fixed:]

    def fn(*a):
        consts, acc, ctk, x, carry, cty, saved = _split(
            a, nc, n_fc, n_fk, nx, nk, len(y_in), len(ab.saved))
        cty, kept = dict(zip(y_in, cty)), dict(zip(ab.saved, saved))
        full = consts + carry + x
        env, active, read = ab.forward(full, kept)
        got = backward_pass(ab.expr, env, active, read, ab.cts_out(rec, ctk, cty))
        d = dict(zip(moving, got))

        def ct(i):   # operand i's cotangent at this step (zero where none reached it)
            return d[i] if d.get(i) is not None else _zeros(full[i])
        d_c = [ct(i) for i in range(nc) if fc[i]]
        d_k = [ct(nc + j) for j in range(nk) if fk[j]]
        d_x = [ct(nc + nk + j) for j in range(nx) if fx[j]]
        return [s + dc for s, dc in zip(acc, d_c)] + d_k + d_x

    consts = xs[:nc]
    acc0 = [_zeros(c) for c, f in zip(consts, fc) if f]
    ctk0 = [cts[j] if cts[j] is not None else _zeros(xs[nc + j])
            for j in range(nk) if fk[j]]   # carry result j pairs with carry operand j
    x_ops = xs[nc + nk:] + list(carries) + [cts[j] for j in y_in] + list(stacks)
    c_avals = [ShapedArray(c.shape, c.dtype) for c in acc0 + ctk0]
    x_avals = [ShapedArray(x.shape[1:], x.dtype) for x in x_ops]
    new, ops = make_scan(fn, consts, c_avals, x_avals, rec.length, not rec.reverse, rec.unroll,
                         name=f"bwd({rec.name})")
    out = bind_group(scan_p, new, ops + acc0 + ctk0 + x_ops)
    d_c, d_k, d_x = out[:n_fc], out[n_fc:n_fc + n_fk], out[n_fc + n_fk:]
    return _spread(d_c, fc) + _spread(d_k, fk) + _spread(d_x, fx)


def cond_fwd(rec, *xs, active=None):
    """(results, residuals): the cond itself; the residuals are its operands and which of them
    get cotangents."""
    return bind_group(cond_p, rec, list(xs)), (_wanted(rec, active), list(xs))


def cond_bwd(rec, res, cts):
    """Operand cotangents from the results' (None: zero): a cond, on the same index, over the
    branches' backward passes."""
    wanted, xs = res
    ops, fops = list(xs[1:]), list(wanted[1:])
    fo = _floats(rec.out_avals)
    at = [j for j, (c, f) in enumerate(zip(cts, fo)) if f and c is not None]
    if not any(fops) or not at:
        return [None] * len(xs)
    n = len(ops)

    def branch(expr):
        def fn(*a):
            o, c = list(a[:n]), list(a[n:])

            def f(*d):
                it = iter(d)
                outs = eval_expr(expr, [next(it) if m else v for v, m in zip(o, fops)])
                return [outs[j] for j in at]
            _, f_vjp = vjp(f, *[v for v, m in zip(o, fops) if m])
            return list(f_vjp(c))
        return fn
    given = [cts[j] for j in at]
    avals = [ShapedArray(x.shape, x.dtype) for x in ops + given]
    new, extra = make_cond([trace_closed(branch(e), avals) for e in rec.exprs], avals,
                           name=f"bwd({rec.name})")
    out = bind_group(cond_p, new, [xs[0]] + ops + given + extra)
    return [None] + _spread(out, fops)
