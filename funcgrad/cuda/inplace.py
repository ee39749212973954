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

_PURE_VIEWS = frozenset(("broadcast_in_dim", "transpose", "slice", "rev", "stop_gradient"))
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


def _region(eqn, regions):
    """(argument, element offset) of the C-contiguous run of an argument's memory that a slice
    or reshape of a region var `eqn.inputs[0]` views, or None."""
    src = regions.get(eqn.inputs[0])
    if src is None:
        return None
    if eqn.prim.name == "reshape":
        return src
    shape = eqn.inputs[0].aval.shape
    st = eqn.params.get("strides") or (1,) * len(shape)
    lo, hi = eqn.params["start_indices"], eqn.params["limit_indices"]
    if any(s != 1 for s in st):
        return None
    ext = [h - lo_ for lo_, h in zip(lo, hi)]
    # one C-contiguous run: extent 1 before the first dim k of another extent, full after k
    k = next((d for d, e in enumerate(ext) if e != 1), len(ext))
    if any(ext[d] != shape[d] for d in range(k + 1, len(shape))):
        return None
    off, acc = 0, 1
    for d in reversed(range(len(shape))):
        off += lo[d] * acc
        acc *= shape[d]
    return src[0], src[1] + off


def size_of(x) -> int:
    """Elements of variable x."""
    n = 1
    for d in x.aval.shape:
        n *= d
    return n


def stacked_results(steps, expr, args=None) -> dict:
    """{concatenate result: (its step, argument index, [(step of a dynamic_update_slice or
    None, element offset)])} for stacks that may be written in place into an argument's
    memory: a KV-cache step that updates each layer's slice of a stacked [layers, ...] cache
    and stacks the slices again (`jnp.stack([lax.dynamic_update_slice(ck[i], k_i, ...)])`).

    The result is the argument's type and an output (once), concatenated along a dim with
    only dims of size 1 before it, so that piece j is one C-contiguous run of the argument's
    memory; piece j is (through reshapes) the unchanged slice of the argument that it
    replaces, or a dynamic_update_slice whose operand is that slice. The argument is no
    output, and any step reading its memory (a view of it) other than further views, a
    piece's update (as its operand) and the concatenate runs before every update of the
    bytes it reads: then each update writes its window into the argument's memory, the
    stack moves no byte, and nothing reads a value overwritten (a concurrent graph orders
    such a read before the write by the bytes both touch)."""
    if args is None:
        args = expr.in_binders[expr.n_consts:]
    regions = {x: (i, 0) for i, x in enumerate(args)}   # var -> (argument, element offset)
    # var -> (argument, lo, hi): the element range of an argument that a view of it may read
    backed = {x: (i, 0, size_of(x)) for i, x in enumerate(args)}
    view_eqn, made, pure = {}, {}, set()
    for idx, (kind, s) in enumerate(steps):
        if kind != "eqn":
            continue
        made[s.out] = (idx, s)
        src = s.inputs[0] if s.inputs and isinstance(s.inputs[0], Var) else None
        if s.prim.name in ("slice", "reshape") and src in regions:
            r = _region(s, regions)
            if r is not None:
                regions[s.out] = r
                backed[s.out] = (r[0], r[1], r[1] + size_of(s.out))
                view_eqn[s.out] = idx
                continue
        if s.prim.name in VIEWS and src in backed:
            backed[s.out] = backed[src]     # (conservatively) the range of its operand
            if s.prim.name in _PURE_VIEWS:  # launches nothing: its readers read the memory
                pure.add(idx)
    out = {}
    for idx, (kind, s) in enumerate(steps):
        if kind != "eqn" or s.prim.name != "concatenate" or expr.outs.count(s.out) != 1:
            continue
        found = _stack_pieces(s, regions, made, args)
        if found is not None:
            out[s.out] = (idx, found[0], found[1])
    if not out:
        return {}
    # the readers of every view of the chosen arguments: views, their updates, the stack
    views = set(view_eqn.values()) | pure
    per_arg: dict = {}
    for w in out.values():
        per_arg[w[1]] = per_arg.get(w[1], 0) + 1
    for v, (idx, i, pieces) in list(out.items()):
        ok_dus = {d for d, _ in pieces if d is not None}
        if per_arg[i] > 1 or any(backed.get(o, (None,))[0] == i for o in expr.outs
                                 if isinstance(o, Var) and o is not v):
            del out[v]
            continue
        written = [(d, off, off + size_of(steps[d][1].out)) for d, off in pieces
                   if d is not None]
        for j, (kind, s) in enumerate(steps):
            reads = [x for x in step_reads(kind, s) if backed.get(x, (None,))[0] == i]
            if not reads or j == idx or j in views:
                continue
            if (kind == "eqn" and j in ok_dus and s.inputs[0] in regions
                    and all(backed.get(x, (None,))[0] != i for x in s.inputs[1:]
                            if isinstance(x, Var))):
                continue
            # any other reader of the argument's memory runs before each update of it
            if all(j < d for x in reads for d, lo, hi in written
                   if backed[x][1] < hi and lo < backed[x][2]):
                continue
            del out[v]
            break
    return out


def stack_plan(steps, expr, donate) -> tuple[dict, dict]:
    """(stacked_results limited to the donated arguments, {update step: None}: the steps
    whose recorded allocation a plan notes, to place each in its run of the argument)."""
    if not donate:
        return {}, {}
    stacks = {v: w for v, w in stacked_results(steps, expr).items() if w[1] in donate}
    return stacks, {d: None for w in stacks.values() for d, _ in w[2] if d is not None}


def stack_alias(stack, watch, taken, regions, in_place) -> int | None:
    """The argument that `stack` (a stacked_results value) is written into, or None: adds its
    updates' allocations (watch: step -> recorded allocation) to `regions` ({allocation:
    (argument, element offset)}) and the steps to `in_place` ({step: argument})."""
    idx, i, pieces = stack
    if i in taken or any(watch.get(d) is None for d, _ in pieces if d is not None):
        return None
    taken.add(i)
    in_place[idx] = i
    for d, off in pieces:
        if d is not None:
            regions[watch[d]] = (i, off)
            in_place[d] = i
    return i


def _stack_pieces(eqn, regions, made, args):
    """(argument, [(update step or None, element offset)]) when every piece of concatenate
    `eqn` is its own run of one argument (unchanged, or updated), else None."""
    out_aval = eqn.out.aval
    d = eqn.params["dimension"]
    if any(n != 1 for n in out_aval.shape[:d]):
        return None
    inner = 1
    for n in out_aval.shape[d + 1:]:
        inner *= n
    cands = [i for i, x in enumerate(args) if x.aval == out_aval]
    pieces, arg, start = [], None, 0
    for p in eqn.inputs:
        if not isinstance(p, Var):
            return None
        m = p.aval.shape[d]
        while p not in regions and p in made and made[p][1].prim.name == "reshape":
            p = made[p][1].inputs[0]
        dus = None
        if p not in regions:
            if p not in made or made[p][1].prim is not P.dynamic_update_slice_p:
                return None
            dus, s = made[p]
            p = s.inputs[0]
        r = regions.get(p)
        if r is None or r[0] not in cands or (arg is not None and r[0] != arg):
            return None
        arg = r[0]
        if r[1] != start * inner:
            return None
        pieces.append((dus, start * inner))
        start += m
    if arg is None or start != out_aval.shape[d]:
        return None
    return arg, pieces
