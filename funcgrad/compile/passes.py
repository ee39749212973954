"""Expression passes for jit: inlining, trivial algebra, constant folding, CSE, DCE, liveness."""
from __future__ import annotations

import numpy as np

from funcgrad import prims as P
from funcgrad.core import (
    Array,
    ArrayBase,
    Expr,
    Lit,
    Tracer,
    Var,
    current_tag,
    eqn_tag,
    new_builder,
    source_info,
)

_FOLD_LIMIT = 1 << 12  # elements: larger constant results stay as equations


def _concrete(x):
    return not isinstance(x, Tracer)


def _np(x):
    return np.asarray(x) if isinstance(x, (Array, np.ndarray, np.generic)) else x


def _key(x):
    if isinstance(x, Tracer):
        return ("v", id(x.var))
    if isinstance(x, (np.ndarray, np.generic)) and np.ndim(x) == 0:
        return ("lit", x.dtype.str, x.item())
    return ("c", id(x))


class _Rewriter:
    """Re-binds every equation into a fresh builder, simplifying on the way."""

    def __init__(self, builder):
        self.b = builder
        self.memo = {}
        self.fills = {}  # id(var) -> scalar value of a broadcast literal
        self.pieces = {}  # id(var) -> (axis, [(start, stop, operand)]): see note_pad

    def fill_of(self, x):
        if isinstance(x, Tracer):
            return self.fills.get(id(x.var))
        if isinstance(x, (np.ndarray, np.generic)) and np.ndim(x) == 0:
            return x.item()
        return None

    def apply(self, prim, args, params):
        if getattr(prim, "inline", None) is not None:
            return prim.inline(*args, **params)
        if prim is P.add_p:
            joined = self.join_pieces(args)
            if joined is not None:
                return joined
        simple = self.simplify(prim, args, params)
        if simple is not None:
            return simple
        effectful = getattr(prim, "effectful", False)
        if not effectful and args and all(_concrete(a) or self.fill_of(a) is not None
                                          for a in args):
            folded = self.fold(prim, args, params)
            if folded is not None:
                return folded
        if not effectful and prim.kind == "elementwise" and args:
            fills = [self.fill_of(a) for a in args]
            if all(v is not None for v in fills):  # every operand a broadcast scalar
                folded = self.fold_fills(prim, args, fills, params)
                if folded is not None:
                    return folded
        key = None
        if not effectful:
            try:
                key = (prim, tuple(_key(a) for a in args), tuple(sorted(params.items())),
                       current_tag())
                hash(key)
            except TypeError:
                key = None
            if key is not None and key in self.memo:
                return self.memo[key]
        out = prim.bind(*args, **params)
        if key is not None:
            self.memo[key] = out
        if prim is P.broadcast_in_dim_p:
            v = self.fill_of(args[0])
            if v is not None:
                self.fills[id(out.var)] = v
        elif prim is P.pad_p:
            self.note_pad(out, args[0], params)
        return out

    # sums of zero-padded pieces (the transpose of slicing q, k, v out of one array) ---------

    def note_pad(self, out, x, params):
        """Remember a zero pad along one axis as pieces: (axis, [(start, stop, operand)])."""
        cfg = params["padding_config"]
        moved = [d for d, (lo, hi, it) in enumerate(cfg) if lo or hi or it]
        if (len(moved) != 1 or cfg[moved[0]][2] or params["value"] != 0
                or not isinstance(x, Tracer) or not isinstance(out, Tracer)):
            return
        d = moved[0]
        lo = cfg[d][0]
        self.pieces[id(out.var)] = (d, [(lo, lo + x.shape[d], x)])

    def join_pieces(self, args):
        """add of zero-padded pieces that do not overlap -> one concatenate (one pass)."""
        if not all(isinstance(a, Tracer) for a in args):
            return None
        ps = [self.pieces.get(id(a.var)) for a in args]
        if None in ps or ps[0][0] != ps[1][0] or args[0].aval != args[1].aval:
            return None
        d = ps[0][0]
        segs = sorted(ps[0][1] + ps[1][1], key=lambda p: p[0])
        if any(a[1] > b[0] for a, b in zip(segs, segs[1:])):
            return None
        shape, n = list(args[0].shape), args[0].shape[d]
        parts, at = [], 0
        for lo, hi, x in segs + [(n, n, None)]:
            if lo > at:     # a gap between pieces: zeros
                shape[d] = lo - at
                parts.append(self.apply(P.broadcast_in_dim_p,
                                        [np.zeros((), args[0].dtype)],
                                        {"shape": tuple(shape), "broadcast_dimensions": ()}))
            if x is not None:
                parts.append(x)
            at = hi
        out = self.apply(P.concatenate_p, parts, {"dimension": d})
        self.pieces[id(out.var)] = (d, segs)
        return out

    def fold(self, prim, args, params):
        from funcgrad.core import _check, aval_of
        aval = _check(prim, [aval_of(a) for a in args], params)
        if aval.size > _FOLD_LIMIT or prim in (P.broadcast_in_dim_p, P.iota_p):
            return None
        if all(self.fill_of(a) is not None for a in args) and prim.kind == "elementwise":
            return None  # fold_fills keeps it a broadcast of one scalar
        vals = [np.full(a.aval.shape, self.fill_of(a), a.aval.dtype) if isinstance(a, Tracer)
                else _np(a) for a in args]  # broadcast scalars count as constants
        with np.errstate(all="ignore"):
            try:
                out = np.asarray(prim.impl(*vals, **params)).astype(aval.dtype)
            except Exception:  # noqa: BLE001 - errors surface when the plan runs instead
                return None
        return out

    def fold_fills(self, prim, args, fills, params):
        """An elementwise op of broadcast scalars is a broadcast of the op on the scalars."""
        from funcgrad.core import _check, aval_of
        aval = _check(prim, [aval_of(a) for a in args], params)
        scalars = [np.asarray(v, _dtype(a)) for v, a in zip(fills, args)]
        with np.errstate(all="ignore"):
            try:
                out = np.asarray(prim.impl(*scalars, **params)).astype(aval.dtype)
            except Exception:  # noqa: BLE001 - errors surface when the plan runs instead
                return None
        return self.apply(P.broadcast_in_dim_p, [out],
                          {"shape": tuple(aval.shape), "broadcast_dimensions": ()})

    def simplify(self, prim, args, params):
        f = self.fill_of
        if prim is P.mul_p:
            if f(args[1]) == 1 and _same(args[0], args[1]):
                return args[0]
            if f(args[0]) == 1 and _same(args[1], args[0]):
                return args[1]
        elif prim is P.add_p:
            if f(args[1]) == 0 and _same(args[0], args[1]):
                return args[0]
            if f(args[0]) == 0 and _same(args[1], args[0]):
                return args[1]
        elif prim in (P.sub_p,):
            if f(args[1]) == 0 and _same(args[0], args[1]):
                return args[0]
        elif prim is P.div_p:
            if f(args[1]) == 1 and _same(args[0], args[1]):
                return args[0]
        elif prim is P.broadcast_in_dim_p:
            x = args[0]
            if tuple(np.shape(x)) == tuple(params["shape"]):
                return x
            v = f(x)
            if v is not None and isinstance(x, Tracer):  # broadcast of a broadcast scalar
                return self.apply(prim, [np.asarray(v, x.dtype)],
                                  dict(params, broadcast_dimensions=()))
        elif prim is P.reshape_p:
            if tuple(np.shape(args[0])) == tuple(params["new_sizes"]):
                return args[0]
        elif prim is P.transpose_p:
            if tuple(params["permutation"]) == tuple(range(len(params["permutation"]))):
                return args[0]
        elif prim is P.convert_element_type_p:
            if _dtype(args[0]) == params["new_dtype"]:
                return args[0]
        elif prim is P.stop_gradient_p or prim is P.integer_pow_p and params["y"] == 1:
            return args[0]
        elif prim is P.select_p:
            v = f(args[0])
            if v is not None:
                return args[1] if v else args[2]
        return None


def _same(x, y):
    return tuple(np.shape(x)) == tuple(np.shape(y)) and _dtype(x) == _dtype(y)


def _dtype(x):
    return x.dtype if isinstance(x, ArrayBase) else np.asarray(x).dtype


# the pattern rewrites optimize runs, each rewrite(expr, consts) -> (expr, consts): PRE before
# simplification, POST after it. compile/pipeline.py fills both, in their order, once
PRE_REWRITES: list = []
POST_REWRITES: list = []


def optimize(expr: Expr, consts: list) -> tuple[Expr, list]:
    """Inline call primitives, simplify, fold constants, CSE, then drop dead equations."""
    for rewrite in PRE_REWRITES:     # e.g. hand-written norms -> fused primitives
        expr, consts = rewrite(expr, consts)
    with new_builder() as b:
        rw = _Rewriter(b)
        ins = [b.new_arg(v.aval) for v in expr.in_binders[expr.n_consts:]]
        env = {}
        for v, c in zip(expr.in_binders[:expr.n_consts], consts):
            # rank-0 constants (optimizer hyperparameters such as b1) become literals, so that
            # CSE sees equal values as equal: adam's 1 - b1**t is computed once, not per leaf
            env[v] = np.asarray(c) if isinstance(c, Array) and c.ndim == 0 else c
        for v, t in zip(expr.in_binders[expr.n_consts:], ins):
            env[v] = t

        def read(x):
            return x.val if isinstance(x, Lit) else env[x]

        for e in expr.eqns:
            with source_info(e.src), eqn_tag(e.tag):
                env[e.out] = rw.apply(e.prim, [read(x) for x in e.inputs], e.params)
        new_expr, new_consts = b.build(ins, [read(o) for o in expr.outs])
    for rewrite in POST_REWRITES:    # e.g. composed attention -> flash attention
        new_expr, new_consts = rewrite(new_expr, new_consts)
    return dce(new_expr, new_consts)


def dce(expr: Expr, consts: list, removable=None) -> tuple[Expr, list]:
    """Remove equations whose results are unused (effectful ones stay) and unused constants;
    `removable(eqn)` may restrict which dead equations go."""
    live = {o for o in expr.outs if isinstance(o, Var)}
    keep = []
    for e in reversed(expr.eqns):
        if (e.out in live or getattr(e.prim, "effectful", False)
                or (removable is not None and not removable(e))):
            keep.append(e)
            live.update(x for x in e.inputs if isinstance(x, Var))
    keep.reverse()
    const_vars = expr.in_binders[:expr.n_consts]
    used = [(v, c) for v, c in zip(const_vars, consts) if v in live]
    ins = [v for v, _ in used] + expr.in_binders[expr.n_consts:]
    return Expr(ins, keep, expr.outs, n_consts=len(used)), [c for _, c in used]


def _nbytes(aval):
    return aval.size * aval.dtype.itemsize


def peak_bytes(expr: Expr) -> int:
    """Peak bytes of live buffers when equations run in order and each intermediate is freed
    after its last use (inputs and constants count throughout; aliasing ops count zero)."""
    last = {}
    for i, e in enumerate(expr.eqns):
        for x in e.inputs:
            if isinstance(x, Var):
                last[x] = i
    for o in expr.outs:
        if isinstance(o, Var):
            last[o] = len(expr.eqns)
    base = sum(_nbytes(v.aval) for v in expr.in_binders)
    live = 0
    peak = base
    sizes = {}
    for i, e in enumerate(expr.eqns):
        size = 0 if getattr(e.prim, "aliases_input", False) else _nbytes(e.out.aval)
        sizes[e.out] = size
        live += size
        peak = max(peak, base + live)
        for x in set(x for x in e.inputs if isinstance(x, Var)):
            if last.get(x) == i and x in sizes:
                live -= sizes.pop(x)
        if e.out not in last:
            live -= sizes.pop(e.out, 0)
    return peak
