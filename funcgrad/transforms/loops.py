"""jvp, reverse mode and batching of the loop primitives (funcgrad/prims/loops.py).

Every rule builds a new loop of a transformed body: the jvp of a scan is a scan of the body's
jvp; its reverse mode (funcgrad/transforms/loops_vjp.py, a vjp group: ad.py calls rec.fwd / rec.bwd once
per loop) is a forward scan that also stacks the carry entering each step and the body values
the derivative reads, then one reverse scan of the body's backward pass taking every result's
cotangent; batching scans the batched body. The other rules are called per result equation of
a group, so each memoizes what the group shares (the transformed group) on the record by
argument identity and binds it once.
"""
from __future__ import annotations

from funcgrad import prims as P
from funcgrad.transforms.ad import jvp_expr_eval
from funcgrad.transforms.batching import batch_eval
from funcgrad.core import FuncgradError, bind, ShapedArray, eval_expr, user_frame_src
from funcgrad.prims.loops import (
    LoopRec,
    bind_group,
    cond_p,
    make_cond,
    make_scan,
    make_while,
    scan_p,
    trace_closed,
    while_p,
)
from funcgrad.transforms.loops_vjp import (
    _floats,
    _split,
    _spread,
    _zeros,
    cond_bwd,
    cond_fwd,
    scan_bwd,
    scan_fwd,
)


def _memo(rec, kind, args, extra, build):
    """Results of build() for these argument objects (one slot per record and kind)."""
    key = (tuple(id(a) if a is not None else None for a in args), extra)
    slot = rec.derived.get(("memo", kind))
    if slot is not None and slot[0] == key:
        return slot[2]
    res = build()
    rec.derived[("memo", kind)] = (key, list(args), res)   # keep args alive: ids stay unique
    return res


def _pick(xs, mask):
    return [x for x, m in zip(xs, mask) if m]


# ---------------------------------------------------------------------------------------------
# jvp
# ---------------------------------------------------------------------------------------------

def _scan_jvp(ts, xs, *, out, rec, index):
    nc, nk = rec.n_consts, rec.n_carry
    fl = _floats(rec.in_avals)
    has = [t is not None and f for t, f in zip(ts, fl)]
    has[nc:nc + nk] = fl[nc:nc + nk]             # every float carry gets a tangent
    ny = len(rec.out_avals) - nk
    fk = fl[nc:nc + nk]
    fy = _floats(rec.out_avals[nk:])

    def build():
        body = rec.exprs[0]
        nx = len(xs) - nc - nk
        m_c, m_x = has[:nc], has[nc + nk:]
        n_tc, n_tk, n_tx = sum(m_c), sum(fk), sum(m_x)

        def fn(*a):
            consts, tc, carry, tk, x, tx = _split(a, nc, n_tc, nk, n_tk, nx, n_tx)
            tangents = _spread(tc, m_c) + _spread(tk, fk) + _spread(tx, m_x)
            outs, touts = jvp_expr_eval(body, [], consts + carry + x, tangents)
            tout = [t if t is not None else _zeros(o) for t, o in zip(touts, outs)]
            return (outs[:nk] + _pick(tout[:nk], fk) + outs[nk:] + _pick(tout[nk:], fy))

        tangent_of = lambda i: ts[i] if ts[i] is not None else _zeros(xs[i])   # noqa: E731
        consts = list(xs[:nc]) + [tangent_of(i) for i in range(nc) if has[i]]
        carry = list(xs[nc:nc + nk]) + [tangent_of(nc + j) for j in range(nk) if fk[j]]
        xss = list(xs[nc + nk:]) + [tangent_of(i) for i in range(nc + nk, len(xs)) if has[i]]
        carry_avals = [ShapedArray(c.shape, c.dtype) for c in carry]
        x_avals = [ShapedArray(x.shape[1:], x.dtype) for x in xss]
        new, ops = make_scan(fn, consts, carry_avals, x_avals, rec.length, rec.reverse,
                             rec.unroll, name=f"jvp({rec.name})")
        res = bind_group(scan_p, new, ops + carry + xss)
        nkt = nk + sum(fk)
        primal = res[:nk] + res[nkt:nkt + ny]
        tang = _spread(res[nk:nkt], fk) + _spread(res[nkt + ny:], fy)
        return primal, tang

    return _memo(rec, "jvp", list(xs) + list(ts), None, build)[1][index]


def _while_jvp(ts, xs, *, out, rec, index):
    ncc, nbc = rec.n_cconsts, rec.n_bconsts
    fl = _floats(rec.in_avals)
    n = len(xs)
    nk = n - ncc - nbc
    fk = fl[ncc + nbc:]
    m_b = [ts[ncc + i] is not None and fl[ncc + i] for i in range(nbc)]

    def build():
        cexpr, bexpr = rec.exprs
        n_tb, n_tk = sum(m_b), sum(fk)

        def cond_fn(*a):
            return eval_expr(cexpr, list(a[:ncc + nk]))

        def body_fn(*a):
            bc, tb = list(a[:nbc]), list(a[nbc:nbc + n_tb])
            carry = list(a[nbc + n_tb:nbc + n_tb + nk])
            tk = list(a[nbc + n_tb + nk:])
            outs, touts = jvp_expr_eval(bexpr, [], bc + carry, _spread(tb, m_b) + _spread(tk, fk))
            tout = [t if t is not None else _zeros(o) for t, o in zip(touts, outs)]
            return outs + _pick(tout, fk)

        cconsts = list(xs[:ncc])
        bconsts = list(xs[ncc:ncc + nbc]) + [ts[ncc + i] for i in range(nbc) if m_b[i]]
        carry = list(xs[ncc + nbc:])
        tcarry = [ts[ncc + nbc + j] if ts[ncc + nbc + j] is not None else _zeros(carry[j])
                  for j in range(nk) if fk[j]]
        c_avals = [ShapedArray(c.shape, c.dtype) for c in carry + tcarry]
        new, ops = make_while(cond_fn, cconsts, body_fn, bconsts, c_avals,
                              name=f"jvp({rec.name})")
        res = bind_group(while_p, new, ops + carry + tcarry)
        return res[:nk], _spread(res[nk:], fk)

    return _memo(rec, "jvp", list(xs) + list(ts), None, build)[1][index]


def _cond_jvp(ts, xs, *, out, rec, index):
    fl = _floats(rec.in_avals)
    m = [t is not None and f for t, f in zip(ts, fl)]
    m[0] = False
    fo = _floats(rec.out_avals)

    def build():
        ops = list(xs[1:])
        tops = [ts[i] for i in range(1, len(xs)) if m[i]]

        def branch(expr):
            def fn(*a):
                o, t = list(a[:len(ops)]), list(a[len(ops):])
                outs, touts = jvp_expr_eval(expr, [], o, _spread(t, m[1:]))
                tout = [t if t is not None else _zeros(x) for t, x in zip(touts, outs)]
                return outs + _pick(tout, fo)
            return fn
        avals = [ShapedArray(x.shape, x.dtype) for x in ops + tops]
        new, extra = make_cond([trace_closed(branch(e), avals) for e in rec.exprs], avals,
                               name=f"jvp({rec.name})")
        res = bind_group(cond_p, new, [xs[0]] + ops + tops + extra)
        k = len(rec.out_avals)
        return res[:k], _spread(res[k:], fo)

    return _memo(rec, "jvp", list(xs) + list(ts), None, build)[1][index]


# ---------------------------------------------------------------------------------------------
# reverse mode: a scan's or a cond's results are one vjp group (funcgrad/transforms/loops_vjp.py); a
# while_loop's (a trip count unknown when the backward is built) raise
# ---------------------------------------------------------------------------------------------

def _while_vjp(ct, *xs, out, rec, index):
    raise FuncgradError(
        "Reverse-mode differentiation does not work for lax.while_loop or lax.fori_loop with "
        "dynamic start/stop values (the number of iterations is not known when the backward "
        "pass is built). Use lax.scan, or fori_loop with concrete (static) bounds, or "
        f"forward mode (jvp, jacfwd).\n  at {user_frame_src()}")


def _group_only(ct, *xs, out, rec, index):
    raise AssertionError(f"{rec.kind} results are differentiated as a group (ad.py: rec.fwd/bwd)")


def _group_fwd(rec, *xs, active=None):
    return (scan_fwd if rec.kind == "scan" else cond_fwd)(rec, *xs, active=active)


def _group_bwd(rec, res, cts):
    return (scan_bwd if rec.kind == "scan" else cond_bwd)(rec, res, cts)


scan_p.vjp, while_p.vjp, cond_p.vjp = _group_only, _while_vjp, _group_only
scan_p.vjp_group, while_p.vjp_group, cond_p.vjp_group = True, False, True
# ad.py calls a group's record: rec.fwd(*operands, active=...) -> (results, residuals),
# rec.bwd(residuals, result cotangents, None for zero) -> operand cotangents
LoopRec.fwd, LoopRec.bwd, LoopRec.none_cts = _group_fwd, _group_bwd, True
LoopRec.wants_active = True   # rec.fwd learns which operands are differentiated


# ---------------------------------------------------------------------------------------------
# batching
# ---------------------------------------------------------------------------------------------

def _bcast(x, size):
    return P.broadcast_in_dim(x, (size,) + tuple(x.shape), range(1, len(x.shape) + 1))


def _slice_avals(avals, batched, size):
    return [ShapedArray(((size,) if b else ()) + tuple(a.shape), a.dtype)
            for a, b in zip(avals, batched)]


def _batched_outs(expr, args, dims, force=None):
    """batch_eval of expr; with `force` (a mask), those outputs broadcast to batched."""
    res = batch_eval(expr, [], list(args), list(dims))
    if force is None:
        return res
    size = next(a.shape[0] for a, d in zip(args, dims) if d is not None)
    return [(v, d) if d is not None or not f else (_bcast(v, size), 0)
            for (v, d), f in zip(res, force)]


def _probe(expr, avals, batched, size):
    """Which outputs of expr come out batched when the inputs marked `batched` are."""
    out = {}

    def fn(*a):
        res = batch_eval(expr, [], list(a), [0 if b else None for b in batched])
        out["dims"] = [d is not None for _, d in res]
        return [v for v, _ in res]
    trace_closed(fn, _slice_avals(avals, batched, size))
    return out["dims"]


def _scan_batch(args, dims, *, rec, index):
    def build():
        nc, nk = rec.n_consts, rec.n_carry
        size = next(a.shape[0] for a, d in zip(args, dims) if d is not None)
        body = rec.exprs[0]
        bc = [d is not None for d in dims[:nc]]
        bk = [d is not None for d in dims[nc:nc + nk]]
        bx = [d is not None for d in dims[nc + nk:]]
        slot_avals = rec.in_avals[:nc + nk] + [ShapedArray(a.shape[1:], a.dtype)
                                               for a in rec.in_avals[nc + nk:]]
        while True:   # a carry is batched if the body makes it so: iterate to the fixpoint
            ob = _probe(body, slot_avals, bc + bk + bx, size)
            new_bk = [a or b for a, b in zip(bk, ob[:nk])]
            if new_bk == bk:
                break
            bk = new_bk
        by = ob[nk:]

        def fn(*a):
            res = _batched_outs(body, a, [0 if b else None for b in bc + bk + bx], bk + by)
            return [v for v, _ in res]

        consts = list(args[:nc])
        carry = [_bcast(c, size) if b and d is None else c
                 for c, b, d in zip(args[nc:nc + nk], bk, dims[nc:nc + nk])]
        xs = [P.transpose(x, [1, 0] + list(range(2, x.ndim))) if b else x
              for x, b in zip(args[nc + nk:], bx)]
        c_avals = _slice_avals(rec.in_avals[nc:nc + nk], bk, size)
        x_avals = _slice_avals([ShapedArray(a.shape[1:], a.dtype)
                                for a in rec.in_avals[nc + nk:]], bx, size)
        new, ops = make_scan(fn, consts, c_avals, x_avals, rec.length, rec.reverse,
                             rec.unroll, name=f"vmap({rec.name})")
        res = bind_group(scan_p, new, ops + carry + xs)
        outs = [(r, 0 if b else None) for r, b in zip(res[:nk], bk)]
        for r, b in zip(res[nk:], by):
            outs.append((P.transpose(r, [1, 0] + list(range(2, r.ndim))), 0) if b else (r, None))
        return outs

    return _memo(rec, "batch", args, tuple(dims), build)[index]


def _while_batch(args, dims, *, rec, index):
    def build():
        ncc, nbc = rec.n_cconsts, rec.n_bconsts
        size = next(a.shape[0] for a, d in zip(args, dims) if d is not None)
        cexpr, bexpr = rec.exprs
        bcc = [d is not None for d in dims[:ncc]]
        bbc = [d is not None for d in dims[ncc:ncc + nbc]]
        bk = [d is not None for d in dims[ncc + nbc:]]
        k_avals = rec.in_avals[ncc + nbc:]
        while True:
            ob = _probe(bexpr, rec.in_avals[ncc:ncc + nbc] + k_avals, bbc + bk, size)
            new_bk = [a or b for a, b in zip(bk, ob)]
            if new_bk == bk:
                break
            bk = new_bk
        pred_batched = _probe(cexpr, rec.in_avals[:ncc] + k_avals, bcc + bk, size)[0]
        if pred_batched:   # as JAX: run while any is true, and keep finished carries
            bk = [True] * len(bk)
        nk = len(bk)
        cconsts, bconsts = list(args[:ncc]), list(args[ncc:ncc + nbc])
        carry = [_bcast(c, size) if b and d is None else c
                 for c, b, d in zip(args[ncc + nbc:], bk, dims[ncc + nbc:])]
        cdims = [0 if b else None for b in bcc + bk]

        def cond_fn(*a):
            (p, _), = batch_eval(cexpr, [], list(a), cdims)
            return [bind(P.reduce_max_p, p, axes=(0,))] if pred_batched else [p]  # any

        if pred_batched:
            def body_fn(*a):
                bc, cc, c = list(a[:nbc]), list(a[nbc:nbc + ncc]), list(a[nbc + ncc:])
                (p, _), = batch_eval(cexpr, [], cc + c, cdims)
                new = _batched_outs(bexpr, bc + c, [0 if b else None for b in bbc + bk], bk)
                return [P.select(P.broadcast_in_dim(p, v.shape, (0,)), v, old)
                        for (v, _), old in zip(new, c)]
            bconsts = bconsts + cconsts
        else:
            def body_fn(*a):
                res = _batched_outs(bexpr, a, [0 if b else None for b in bbc + bk], bk)
                return [v for v, _ in res]
        new, ops = make_while(cond_fn, cconsts, body_fn, bconsts,
                              _slice_avals(k_avals, bk, size), name=f"vmap({rec.name})")
        res = bind_group(while_p, new, ops + carry)
        return [(r, 0 if b else None) for r, b in zip(res, bk)]

    return _memo(rec, "batch", args, tuple(dims), build)[index]


def _cond_batch(args, dims, *, rec, index):
    def build():
        size = next(a.shape[0] for a, d in zip(args, dims) if d is not None)
        ops, odims = list(args[1:]), [0 if d is not None else None for d in dims[1:]]
        force = [True] * len(rec.out_avals)
        if dims[0] is not None:   # a batched index: every branch runs, then a select
            idx = args[0]
            outs = None
            for k, expr in enumerate(rec.exprs):
                vals = [v for v, _ in _batched_outs(expr, ops, odims, force)]
                if outs is None:
                    outs = vals
                    continue
                outs = [P.select(P.broadcast_in_dim(idx == k, v.shape, (0,)), v, o)
                        for v, o in zip(vals, outs)]
            return [(o, 0) for o in outs]

        def branch(expr):
            def fn(*a):
                return [v for v, _ in _batched_outs(expr, a, odims, force)]
            return fn
        avals = _slice_avals(rec.in_avals[1:], [d is not None for d in odims], size)
        new, extra = make_cond([trace_closed(branch(e), avals) for e in rec.exprs], avals,
                               name=f"vmap({rec.name})")
        res = bind_group(cond_p, new, [args[0]] + ops + extra)
        return [(r, 0) for r in res]

    return _memo(rec, "batch", args, tuple(dims), build)[index]


scan_p.jvp, while_p.jvp, cond_p.jvp = _scan_jvp, _while_jvp, _cond_jvp
scan_p.batch, while_p.batch, cond_p.batch = _scan_batch, _while_batch, _cond_batch
