"""Update primitives that write into their operand's memory: which results may do so.

dynamic_update_slice, scatter and scatter_add change part of their operand. Given a result
buffer that is the operand's own memory, their lowerings write only what changes (the
window, the scattered rows) and copy nothing else (dynamic.py, gather.scatter). Two places
hand them such a buffer:
- a jit plan (plan.Plan._aliases): a result planned into a donated argument (the memory
  plan's alias), when the operand is that argument;
- a loop body (loops._Body): a carry value written over the carry buffer it came from, so an
  iteration of a decode loop writes one position of each cache instead of copying the cache
  twice (into a fresh result, then back over the carry).
`update_results` says where that is safe: the operand is the argument (or a reshape of it),
nothing reads the argument or any view of it after the update (views launch nothing and
share its memory), no other operand of the update reads it, and the argument is no output.
"""
from __future__ import annotations

from funcgrad import prims as P
from funcgrad.core import Lit, Var

UPDATES = frozenset((P.dynamic_update_slice_p, P.scatter_p, P.scatter_add_p))
# primitives whose CUDA lowering is a view of operand 0 or operand 0 itself: they share its
# memory (convert_element_type is one when the dtype does not change)
VIEWS = frozenset(("broadcast_in_dim", "reshape", "transpose", "slice", "rev",
                   "stop_gradient", "convert_element_type"))


def step_reads(kind, s) -> list:
    """The variables a plan or body step reads (literals left out)."""
    if kind == "eqn":
        return [x for x in s.inputs if not isinstance(x, Lit)]
    if kind in ("gemm", "rows"):
        return list(s.inputs)
    from funcgrad.cuda.fusion import external_inputs
    return external_inputs(s)


def update_results(steps, expr, args=None) -> dict:
    """{result var: (step index, argument index)} for the results an update primitive
    (UPDATES) may write into the memory of an argument: `args` are the candidate argument
    binders (by default every non-constant input of `expr`); the result reaches an output
    through reshapes only and has the argument's type (see the module docstring)."""
    if args is None:
        args = expr.in_binders[expr.n_consts:]
    root = {x: i for i, x in enumerate(args)}   # var -> the argument whose memory it views
    last: dict = {}                              # argument -> the last step reading it
    for idx, (kind, s) in enumerate(steps):
        for x in step_reads(kind, s):
            if x in root:
                last[root[x]] = idx
        if kind == "eqn" and s.prim.name in VIEWS and s.inputs and s.inputs[0] in root:
            root[s.out] = root[s.inputs[0]]
    escaped = {root[o] for o in expr.outs if isinstance(o, Var) and o in root}
    made = {}
    for idx, (kind, s) in enumerate(steps):
        if kind != "eqn":
            continue
        if s.prim in UPDATES and isinstance(s.inputs[0], Var):
            i = root.get(s.inputs[0])
            if (i is not None and i not in escaped and last.get(i) == idx
                    and not any(root.get(x) == i for x in s.inputs[1:])):
                made[s.out] = (idx, i)
        elif s.prim.name == "reshape" and s.inputs[0] in made:
            made[s.out] = made[s.inputs[0]]
    return {v: w for v, w in made.items()
            if v in expr.outs and expr.outs.count(v) == 1 and args[w[1]].aval == v.aval}
