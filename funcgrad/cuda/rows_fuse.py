"""jit: a norm backward and the residual add of its dx as one row kernel (plan steps "rows").

In a pre-norm transformer block `x + f(norm(x))` the cotangent of x is the residual stream's
cotangent r plus the norm backward's dx. layer_norm_bwd / rms_norm_bwd (funcgrad/prims/rows_bwd.py)
write dx as the first R rows of a packed [R + k, N] array (the per-column gradients below it),
a slice and a reshape view those rows, and an elementwise cluster of one `add` makes dx + r:
one more kernel that reads 2 and writes 1 array of the activations' size. `fuse` gives the norm
backward step r as an accumulator instead: its row kernel (funcgrad/cuda/rows.py, `acc`) stores
dx + r into those rows, the add's result is a view of them, and the cluster and the views are
dropped. The sum is the add's own (dx rounded to its dtype, then dx + r in the compute type:
float addition commutes), so results are those of the unfused plan, bit for bit where the row
kernel takes the same layout (rows.py picks 16-byte runs only when every operand, r included,
is aligned; the other layout adds a row's sums in another order). W2 (a 6-layer GPT): 12
launches of 4096 x 384 adds fewer a step; its step time did not move measurably (H200,
2026-11-25: 8.74-8.86 ms with the fusion, 8.71-8.83 without, alternated in one call).

Matched only when r exists before the norm backward runs (a residual cotangent always does),
when dx's rows, their views and the add's operand are read by nothing else, and when no
result of the pair is an output of the plan. FUNCGRAD_ROWS_ACC=0 turns the matching off.
"""
from __future__ import annotations

import os

from funcgrad import prims as P
from funcgrad.compile import switches
from funcgrad.core import Var
from funcgrad.cuda import rows
from funcgrad.cuda.arrays import c_strides
from funcgrad.cuda.epilogue import _readers
from funcgrad.prims import rows_bwd as FB

ENABLED = os.environ.get("FUNCGRAD_ROWS_ACC", "1") != "0"
switches.register(__name__, "ENABLED")   # a change keys jit's shared cache apart
_NORMS = {FB.layer_norm_bwd_p: "layer_norm_bwd", FB.rms_norm_bwd_p: "rms_norm_bwd"}


class RowsAcc:
    """A plan step: the norm backward eqn `eqn` whose dx rows get `acc` added, giving `out`
    (the dropped add cluster's result) as a view of those rows."""

    def __init__(self, eqn, acc: Var, out: Var):
        self.eqn, self.acc, self.out = eqn, acc, out
        self.outputs = [eqn.out, out]
        self.inputs = [x for x in eqn.inputs if isinstance(x, Var)] + [acc]

    def describe(self) -> str:
        return f"{self.eqn.prim.name} + residual -> {self.out.aval.str_short()}"

    def run(self, env: dict, read) -> None:
        """Launch the row kernel; env gets the packed array and the add's result (a view)."""
        e, aval = self.eqn, self.eqn.out.aval
        packed = rows.run(_NORMS[e.prim], [read(x) for x in e.inputs], aval.shape, aval.dtype,
                          e.params.get("eps"), acc=read(self.acc))
        shape = self.out.aval.shape
        env[e.out] = packed
        env[self.out] = packed.view(shape, c_strides(shape), packed.offset)


def _producers(steps, in_binders) -> dict:
    """Var -> index of the step that makes it (-1: an argument or constant of the plan)."""
    made = {v: -1 for v in in_binders}
    for i, (kind, s) in enumerate(steps):
        for o in ([s.out] if kind == "eqn" else s.outputs):
            made.setdefault(o, i)
    return made


def _dx_rows(e, steps, readers, outs):
    """(indices of the slice and reshape steps, the last view of dx's rows) of norm backward
    eqn e when that chain is the only reader of dx's rows, else None."""
    packed = e.out
    N = packed.aval.shape[1]
    R = packed.aval.shape[0] - rows.PARTIALS[_NORMS[e.prim]]
    for j in sorted(readers.get(packed, ())):
        kind, s = steps[j]
        if not (kind == "eqn" and s.prim is P.slice_p
                and tuple(s.params["start_indices"]) == (0, 0)
                and tuple(s.params["limit_indices"]) == (R, N)
                and tuple(s.params.get("strides") or (1, 1)) == (1, 1)):
            continue
        v, chain = s.out, [j]
        while len(readers.get(v, ())) == 1 and v not in outs:
            k = next(iter(readers[v]))
            if steps[k][0] != "eqn" or steps[k][1].prim is not P.reshape_p:
                return chain, v
            chain.append(k)
            v = steps[k][1].out
        return None
    return None


def _add_of(c, a):
    """(the other operand r, the result) when cluster c is exactly `a + r` (either order)."""
    if (len(c.eqns) != 1 or c.eqns[0].prim is not P.add_p or c.recomputed
            or len(c.outputs) != 1):
        return None
    x, y = c.eqns[0].inputs
    r = y if x is a else x if y is a else None
    if (not isinstance(r, Var) or r is a or r.aval.shape != a.aval.shape
            or r.aval.dtype != a.aval.dtype):
        return None
    return r, c.outputs[0]


def fuse(steps: list, expr) -> list:
    """steps with each norm backward whose dx rows feed only a residual add made one ("rows",
    RowsAcc) step at the norm backward's place (the views and the add cluster dropped)."""
    if not ENABLED:
        return steps
    readers, made = _readers(steps), _producers(steps, expr.in_binders)
    outs = {o for o in expr.outs if isinstance(o, Var)}
    drop, put = set(), {}
    for i, (kind, e) in enumerate(steps):
        if kind != "eqn" or e.prim not in _NORMS or e.out in outs:
            continue
        found = _dx_rows(e, steps, readers, outs)
        if found is None:
            continue
        chain, a = found
        rd = readers.get(a, ())
        if len(rd) != 1 or a in outs:
            continue
        j = next(iter(rd))
        if steps[j][0] != "fused" or j in drop:
            continue
        m = _add_of(steps[j][1], a)
        if m is None or m[1] in outs or made.get(m[0], len(steps)) >= i:
            continue
        put[i] = ("rows", RowsAcc(e, m[0], m[1]))
        drop.update(chain + [j])
    return [put.get(i, st) for i, st in enumerate(steps) if i not in drop]
