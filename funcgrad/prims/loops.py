"""Loop and branch primitives (scan, while, cond): bodies as closed expressions run by backends.

A loop with k results binds k equations `scan[rec, index=i]` (likewise `while`, `cond`) that
share one record `rec` (a LoopRec: the traced body expressions and the operand/result avals),
the way custom_vjp calls do. The record's expressions take every value they use as an explicit
operand (closure conversion), so a loop's expression is the same size for any trip count.

How a group runs:
  * eagerly: the first member run executes the loop once (memoized per argument set);
  * under jit: the passes `inline` each group into execution form, a lead `loop_run[ex, i]`
    equation (runs the loop, returns result i) plus `loop_out[ex, j](lead)` followers that
    pick the other results the lead stashed, keyed by the lead's result object, so a plan runs
    each loop once; `ex` (an ExecRec) holds the optimized bodies. `loop_run_effect` is the
    same for bodies with effects (debug.print), which DCE must keep;
  * the numpy impl evaluates the optimized body equation by equation with the numpy impls, in
    a Python loop; a CPU jit plan runs each body as a compiled CPU program instead
    (funcgrad/backends/cpu/loops.py), funcgrad/cuda/loops.py with the CUDA lowering table.
Differentiation, batching: funcgrad/transforms/loops.py registers the rules on these primitives.
"""
from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence

import numpy as np

from funcgrad.core import (
    ArrayBase,
    Expr,
    Lit,
    Primitive,
    ShapedArray,
    Var,
    bind,
    current_builder,
    trace_to_expr,
    type_error,
)
from funcgrad.compile.passes import optimize
from funcgrad.prims import IndexOutOfRange


class LoopRec:
    """A traced loop or branch: closed sub-expressions, operand avals and result avals.

    kind "scan": exprs = [body], body(consts, carry, x slices) -> (carry, y slices); fields
      n_consts, n_carry, length, reverse, unroll. Results: carry, then ys stacked (length, ...).
    kind "while": exprs = [cond, body], cond(cond consts, carry) -> bool scalar,
      body(body consts, carry) -> carry; fields n_cconsts, n_bconsts. Results: the carry.
    kind "cond": exprs = branches, each (ops) -> results; operands are (index, *ops).
    """

    def __init__(self, kind: str, exprs: Sequence[Expr], in_avals, out_avals, **fields):
        self.kind, self.exprs = kind, list(exprs)
        self.in_avals, self.out_avals = list(in_avals), list(out_avals)
        self.n_consts = self.n_carry = self.length = self.n_cconsts = self.n_bconsts = 0
        self.reverse, self.unroll = False, 1
        for k, v in fields.items():
            setattr(self, k, v)
        self.name = fields.get("name", kind)
        self._memo = None       # eager: (argument ids, arguments, results)
        self._inline = None     # jit's passes: the execution form of the group being inlined
        self._exec = None
        self.derived: dict = {}  # transformed records (jvp, vjp, batching), by signature

    def __repr__(self):
        n = sum(len(e.eqns) for e in self.exprs)
        extra = f" length={self.length}" + (" reverse" if self.reverse else "") \
            if self.kind == "scan" else ""
        return f"{self.kind}[{self.name}{extra} {n} eqns]"


class ExecRec:
    """The execution form of a LoopRec: its bodies optimized by jit's passes, each an
    (Expr, consts) pair; `stash` maps a lead result (by id) to the group's results."""

    def __init__(self, rec: LoopRec):
        for k in ("kind", "in_avals", "out_avals", "n_consts", "n_carry", "length", "reverse",
                  "unroll", "n_cconsts", "n_bconsts", "name"):
            setattr(self, k, getattr(rec, k))
        self.bodies = [optimize(e, []) for e in rec.exprs]
        self.np_consts = [[np.asarray(c) for c in consts] for _, consts in self.bodies]
        self.effectful = any(_effectful(e) for e, _ in self.bodies)
        self.stash: dict = {}
        self.device_cache: dict = {}   # per-backend data (funcgrad/cuda/loops.py)

    def __repr__(self):
        n = sum(len(e.eqns) for e, _ in self.bodies)
        return f"{self.kind}[{self.name} {n} eqns]"

    def put(self, lead, results):
        """Remember `results` for the followers of `lead` (while `lead` is alive)."""
        key = id(lead)
        stash = self.stash

        def gone(ref, key=key):
            hit = stash.get(key)
            if hit is not None and hit[0] is ref:
                del stash[key]
        stash[key] = (weakref.ref(lead, gone), results)

    def get(self, lead, index):
        hit = self.stash.get(id(lead))
        if hit is None or hit[0]() is not lead:
            raise RuntimeError(f"{self.kind}: result {index} was read before its loop ran "
                               "(a loop's results must follow its lead equation)")
        return hit[1][index]


def _effectful(expr: Expr) -> bool:
    return any(getattr(e.prim, "effectful", False) for e in expr.eqns)


def exec_of(rec: LoopRec) -> ExecRec:
    if rec._exec is None:
        rec._exec = ExecRec(rec)
    return rec._exec


# ---------------------------------------------------------------------------------------------
# tracing helpers
# ---------------------------------------------------------------------------------------------

def trace_closed(fn: Callable, in_avals) -> tuple[Expr, list]:
    """Trace fn(*tracers) -> list of values into an expression whose leading inputs are the
    values it closes over (returned alongside, to be passed as operands)."""
    expr, consts, _ = trace_to_expr(fn, list(in_avals))
    return Expr(list(expr.in_binders), expr.eqns, list(expr.outs), 0), list(consts)


def with_inputs(expr: Expr, binders) -> Expr:
    return Expr(list(binders), expr.eqns, expr.outs, 0)


def aval(x) -> ShapedArray:
    from funcgrad.core import aval_of
    return aval_of(x)


def bind_group(prim: Primitive, rec: LoopRec, operands) -> list:
    """Bind every result equation of a loop group; returns the results in order."""
    return [bind(prim, *operands, rec=rec, index=i) for i in range(len(rec.out_avals))]


def make_scan(fn: Callable, consts: list, carry_avals, x_avals, length: int, reverse=False,
              unroll=1, name="scan") -> tuple[LoopRec, list]:
    """Trace fn(*consts, *carry, *x) -> (*carry, *y) into a scan record; returns (rec, the
    constant operands to bind before carry and xs)."""
    c_avals = [aval(c) for c in consts]
    body, clos = trace_closed(fn, c_avals + list(carry_avals) + list(x_avals))
    ops = clos + list(consts)
    nk = len(carry_avals)
    outs = [o.aval for o in body.outs]
    ys = [ShapedArray((length,) + a.shape, a.dtype) for a in outs[nk:]]
    xs = [ShapedArray((length,) + a.shape, a.dtype) for a in x_avals]
    rec = LoopRec("scan", [body], [aval(c) for c in ops] + list(carry_avals) + xs,
                  outs[:nk] + ys, n_consts=len(ops), n_carry=nk, length=int(length),
                  reverse=bool(reverse), unroll=unroll, name=name)
    return rec, ops


def make_while(cond_fn: Callable, cconsts: list, body_fn: Callable, bconsts: list,
               carry_avals, name="while_loop") -> tuple[LoopRec, list]:
    """Trace cond_fn(*cconsts, *carry) -> pred and body_fn(*bconsts, *carry) -> carry into a
    while record; returns (rec, the constant operands to bind before the carry)."""
    cond, cclos = trace_closed(cond_fn, [aval(c) for c in cconsts] + list(carry_avals))
    body, bclos = trace_closed(body_fn, [aval(c) for c in bconsts] + list(carry_avals))
    cops, bops = cclos + list(cconsts), bclos + list(bconsts)
    ops = cops + bops
    rec = LoopRec("while", [cond, body], [aval(c) for c in ops] + list(carry_avals),
                  [o.aval for o in body.outs], n_cconsts=len(cops), n_bconsts=len(bops),
                  name=name)
    return rec, ops


def make_cond(branches: list[tuple[Expr, list]], op_avals, name="cond") -> tuple[LoopRec, list]:
    """A cond record from branches traced by trace_closed over op_avals (each (expr, closure
    values)); returns (rec, the extra operands to bind after index and ops). Every branch
    expression takes ops followed by every branch's closure values."""
    n_ops = len(op_avals)
    extra = [c for _, consts in branches for c in consts]
    exprs = []
    for k, (expr, consts) in enumerate(branches):
        own_consts, own_ops = expr.in_binders[:len(consts)], expr.in_binders[len(consts):]
        binders = list(own_ops)
        for j, (_, cj) in enumerate(branches):
            binders += list(own_consts) if j == k else [Var(aval(c)) for c in cj]
        exprs.append(with_inputs(expr, binders))
    assert all(len(e.in_binders) == n_ops + len(extra) for e in exprs)
    in_avals = [ShapedArray((), np.int32)] + list(op_avals) + [aval(c) for c in extra]
    rec = LoopRec("cond", exprs, in_avals, [o.aval for o in exprs[0].outs], name=name)
    return rec, extra


# ---------------------------------------------------------------------------------------------
# numpy execution (the reference semantics; eager calls run it)
# ---------------------------------------------------------------------------------------------

def eval_np(expr: Expr, consts: list, args: list) -> list:
    """Evaluate an (optimized) expression with the numpy impls, equation by equation."""
    env = dict(zip(expr.in_binders, list(consts) + list(args)))
    for e in expr.eqns:
        ins = [x.val if isinstance(x, Lit) else env[x] for x in e.inputs]
        try:
            out = np.asarray(e.prim.impl(*ins, **e.params))
        except IndexOutOfRange as err:
            raise IndexError(f"{err}\n  at {e.src}") from None
        if out.dtype != e.out.aval.dtype:
            out = out.astype(e.out.aval.dtype)
        env[e.out] = out
    return [o.val if isinstance(o, Lit) else env[o] for o in expr.outs]


def run_np(ex: ExecRec, bufs: list) -> list:
    """All results of a loop or branch on numpy operands."""
    with np.errstate(all="ignore"):
        if ex.kind == "scan":
            res = _scan_np(ex, bufs)
        elif ex.kind == "while":
            res = _while_np(ex, bufs)
        else:
            k = int(np.clip(np.asarray(bufs[0]), 0, len(ex.bodies) - 1))
            (expr, _), consts = ex.bodies[k], ex.np_consts[k]
            res = eval_np(expr, consts, list(bufs[1:]))
    return [np.asarray(r).astype(a.dtype, copy=False) for r, a in zip(res, ex.out_avals)]


def _scan_np(ex, bufs):
    nc, nk, n = ex.n_consts, ex.n_carry, ex.length
    (expr, _), bconsts = ex.bodies[0], ex.np_consts[0]
    consts, carry, xs = list(bufs[:nc]), list(bufs[nc:nc + nk]), bufs[nc + nk:]
    ys = [np.empty(a.shape, a.dtype) for a in ex.out_avals[nk:]]
    for t in range(n):
        i = n - 1 - t if ex.reverse else t
        outs = eval_np(expr, bconsts, consts + carry + [x[i] for x in xs])
        carry = outs[:nk]
        for y, o in zip(ys, outs[nk:]):
            y[i] = o
    return carry + ys


def _while_np(ex, bufs):
    ncc, nbc = ex.n_cconsts, ex.n_bconsts
    (cexpr, _), (bexpr, _) = ex.bodies
    cconsts, bconsts = list(bufs[:ncc]), list(bufs[ncc:ncc + nbc])
    carry = list(bufs[ncc + nbc:])
    while bool(eval_np(cexpr, ex.np_consts[0], cconsts + carry)[0]):
        carry = eval_np(bexpr, ex.np_consts[1], bconsts + carry)
    return carry


# ---------------------------------------------------------------------------------------------
# the primitives
# ---------------------------------------------------------------------------------------------

def _check_operands(name, avals, rec):
    if len(avals) != len(rec.in_avals) or any(a != b for a, b in zip(avals, rec.in_avals)):
        raise type_error(name, f"operands do not match the traced {rec!r}: expected "
                         f"{[a.str_short() for a in rec.in_avals]}", avals)


def _member_shape(name):
    def rule(*avals, rec, index):
        _check_operands(name, avals, rec)
        return rec.out_avals[index]
    return rule


def _member_impl(*bufs, rec, index):
    return run_np(exec_of(rec), list(bufs))[index]


def run_prim(ex: ExecRec) -> Primitive:
    return loop_run_effect_p if ex.effectful else loop_run_p


def _member_call(*args, rec, index):
    """Eager: run the group once per argument set (the lead), then read the others."""
    key = tuple(id(a) for a in args)
    memo = rec._memo
    if memo is not None and memo[0] == key:
        return memo[2][index]
    ex = exec_of(rec)
    lead = bind(run_prim(ex), *args, rec=ex, index=0)
    outs = [lead] + [bind(loop_out_p, lead, rec=ex, index=j)
                     for j in range(1, len(rec.out_avals))]
    rec._memo = (key, list(args), outs)
    return outs[index]


def _arg_key(x):
    if isinstance(x, ArrayBase):
        return ("v", id(x))
    a = np.asarray(x)
    if a.ndim == 0:
        return ("lit", a.dtype.str, a.item())
    return ("c", id(x))


def _member_inline(*args, rec, index):
    """jit's passes: one lead `loop_run` per group and argument set, `loop_out` for the rest."""
    key = tuple(_arg_key(a) for a in args)
    b = current_builder()
    slot = rec._inline
    if slot is None or slot["key"] != key or slot["builder"] is not b:
        slot = rec._inline = {"key": key, "args": args, "builder": b, "lead": None, "outs": {}}
    hit = slot["outs"].get(index)
    if hit is not None:
        return hit
    ex = exec_of(rec)
    if slot["lead"] is None:
        out = slot["lead"] = bind(run_prim(ex), *args, rec=ex, index=index)
    else:
        out = bind(loop_out_p, slot["lead"], rec=ex, index=index)
    slot["outs"][index] = out
    return out


def _make_member(name: str) -> Primitive:
    p = Primitive(name, _member_shape(name), _member_impl, kind="loop")
    p.call_impl = _member_call
    p.inline = _member_inline
    return p


scan_p = _make_member("scan")
while_p = _make_member("while")
cond_p = _make_member("cond")
MEMBER_PRIMS = (scan_p, while_p, cond_p)


def _lead_impl(*bufs, rec, index):
    results = run_np(rec, list(bufs))
    lead = results[index].view()   # a fresh object: the key of the stashed results
    rec.put(lead, results)
    return lead


def _out_impl(lead, *, rec, index):
    return rec.get(lead, index)


def _exec_shape(*avals, rec, index):
    _check_operands("loop_run", avals, rec)
    return rec.out_avals[index]


def _out_shape(lead, *, rec, index):
    return rec.out_avals[index]


def _exec_only(name):
    def rule(*_, **__):
        raise NotImplementedError(
            f"{name} is the execution form of a loop inside an optimized jit expression; "
            "transformations apply to the traced loop (scan/while/cond) instead")
    return rule


loop_run_p = Primitive("loop_run", _exec_shape, _lead_impl, kind="loop")
loop_run_effect_p = Primitive("loop_run_effect", _exec_shape, _lead_impl, kind="loop")
loop_run_effect_p.effectful = True    # the body prints: DCE and CSE keep it
loop_out_p = Primitive("loop_out", _out_shape, _out_impl, kind="loop")
EXEC_PRIMS = (loop_run_p, loop_run_effect_p, loop_out_p)
for _p in EXEC_PRIMS:
    _p.vjp = _p.jvp = _p.batch = _exec_only(_p.name)
