"""Rewrite: large elementwise results read again late (by the backward pass) are recomputed there.

A training step keeps every forward result the backward reads until the backward reads it. For
an elementwise result (GPT-2's GELU output, read by the next GEMM in the forward and by that
GEMM's weight gradient in the backward) whose operands the backward keeps anyway (the
pre-activation, read by the GELU's own derivative next to that weight gradient; parameters),
holding it is a full activation of memory for one cheap elementwise pass: the late readers
get a copy of the elementwise equations computed right before the first of them, and the
forward's result dies with its early readers. Operands count as kept when they or results
computed from them by cheap equations are read at or after the late readers (a plan's fused
kernels recompute such results from the operand: S1's GELU derivative reads the GEMM's
output, the bias add and the tanh in one kernel of the backward). At GPT-2 small (S1: T 1024,
batch 8) that is 11 GELU outputs of 96 MiB (the last layer's is read at once), at S2 the SwiGLU
products: the plans' dry-run arenas go from 6,404 to 5,348 MiB and from 6,087 to 4,855 MiB
(simulator, 2026-12-02), as torch.compile's min-cut rematerialization does; each costs one
elementwise kernel in the backward (S1: ~0.05 ms a layer by its bytes, not yet timed).

Matched for results of at least MIN_BYTES (FUNCGRAD_REMAT_MIN_MIB, default 64; 0 turns the
rewrite off) made by at most MAX_CHAIN elementwise, broadcast, reshape or convert equations
from arguments and at most MAX_LEAVES other variables, each kept until the late readers;
"late" readers are those after a gap of at least GAP equations in the result's reader list.
"""
from __future__ import annotations

import os

from funcgrad import prims as P
from funcgrad.compile import switches
from funcgrad.core import Eqn, Expr, Var

MIN_BYTES = int(float(os.environ.get("FUNCGRAD_REMAT_MIN_MIB", "64")) * (1 << 20))
MAX_CHAIN = 48
MAX_LEAVES = 2      # operands other than arguments: GELU's pre-activation, SwiGLU's two
GAP = 40
switches.register(__name__, "GAP", "MIN_BYTES")   # a change keys jit's shared cache apart
_LAYOUT = frozenset((P.broadcast_in_dim_p, P.reshape_p, P.convert_element_type_p))


def _cheap(e) -> bool:
    return e.prim.kind == "elementwise" or e.prim in _LAYOUT


def _chain(v, made, limit):
    """The equations (in program order) computing v through cheap equations only, and the
    leaves they start from (arguments, results of other equations); None past `limit`
    equations."""
    seen, order, leaves, stack = set(), [], set(), [v]
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        e = made.get(x)
        if e is None or not _cheap(e[1]):
            leaves.add(x)
            continue
        order.append(e)
        if len(order) > limit:
            return None
        stack += [y for y in e[1].inputs if isinstance(y, Var)]
    order.sort(key=lambda ie: ie[0])
    return [e for _, e in order], leaves


def _reach(x, v, users, last, limit=256) -> int:
    """The last reader of x or of a result computed from x by cheap equations, not through v
    (a jit plan's fused kernels recompute such results from x where they are read, so x lives
    that long); -1 past `limit` results."""
    best, seen, stack = -1, set(), [x]
    while stack:
        y = stack.pop()
        if y in seen:
            continue
        seen.add(y)
        if len(seen) > limit:
            return -1
        best = max(best, last.get(y, -1))
        stack += [e.out for e in users.get(y, ()) if e.out is not v]
    return best


def rewrite(expr: Expr, consts: list, min_bytes: int | None = None) -> tuple[Expr, list]:
    """Each matching result's late readers read a recomputed copy (see the module docstring)."""
    min_bytes = MIN_BYTES if min_bytes is None else min_bytes
    if min_bytes <= 0:
        return expr, consts
    eqns = expr.eqns
    made, readers = {}, {}
    for i, e in enumerate(eqns):
        made[e.out] = (i, e)
        for x in e.inputs:
            if isinstance(x, Var):
                readers.setdefault(x, []).append(i)
    outs = {o for o in expr.outs if isinstance(o, Var)}
    last = {x: r[-1] for x, r in readers.items()}
    users = {}     # var -> the cheap equations reading it
    for e in eqns:
        if _cheap(e):
            for x in e.inputs:
                if isinstance(x, Var):
                    users.setdefault(x, []).append(e)
    args = set(expr.in_binders)
    plans = []     # (first late reader, the var, its chain, late reader indices)
    for i, e in enumerate(eqns):
        v = e.out
        if (v in outs or v not in readers or e.prim.kind != "elementwise"
                or v.aval.size * v.aval.dtype.itemsize < min_bytes):
            continue
        pos = [i] + readers[v]
        gaps = [(pos[k + 1] - pos[k], k + 1) for k in range(len(pos) - 1)]
        gap, cut = max(gaps)
        if gap < GAP or cut == 1:
            continue     # no late readers, or no early ones (then nothing is saved)
        late = pos[cut:]
        found = _chain(v, made, MAX_CHAIN)
        if found is None:
            continue
        chain, leaves = found
        if sum(x not in args for x in leaves) > MAX_LEAVES:
            continue     # a sum of many results (a residual stream): not an activation
        if any(x not in args and _reach(x, v, users, last) < late[0] for x in leaves):
            continue     # recomputing would keep an operand alive longer
        plans.append((late[0], v, chain, late))
    if not plans:
        return expr, consts
    before, swap = {}, {}
    for first, v, chain, late in plans:
        env = {}
        copies = []
        for e in chain:
            out = Var(e.out.aval)
            env[e.out] = out
            ins = [env.get(x, x) if isinstance(x, Var) else x for x in e.inputs]
            copies.append(Eqn(e.prim, ins, e.params, out, e.src, "remat"))
        before.setdefault(first, []).extend(copies)
        for j in late:
            swap.setdefault(j, {})[v] = env[v]
    new = []
    for i, e in enumerate(eqns):
        new += before.get(i, [])
        s = swap.get(i)
        if s:
            e = Eqn(e.prim, [s.get(x, x) if isinstance(x, Var) else x for x in e.inputs],
                    e.params, e.out, e.src, e.tag)
        new.append(e)
    return Expr(expr.in_binders, new, expr.outs, expr.n_consts), consts

