"""Backend-neutral elementwise clustering: group equations of one shape into fusible clusters.

A cluster is a set of elementwise equations (plus broadcasts of their operands and iotas) that
produce values of one shape, in an order that respects every dependency. Backends generate one
kernel per cluster (funcgrad.backends.cpu.kernels on the CPU). Imports no backend.
"""
from __future__ import annotations

from funcgrad import prims as P
from funcgrad.core import Lit, Var

# equations per cluster: one kernel's compile time grows faster than its size (an optimizer
# update of every 384-wide parameter of a GPT was one 617-equation kernel that took ~20 s to
# compile, 7.8 s at 120); a full cluster is closed and the next equations start another
MAX_EQNS = 64


def fusible(e) -> bool:
    """Whether equation e may join an elementwise cluster."""
    return e.prim.kind == "elementwise" or e.prim in (P.broadcast_in_dim_p, P.iota_p)


class Cluster:
    """Equations fused into one kernel; `outputs` are the members used outside it."""

    def __init__(self, shape):
        self.shape = tuple(shape)
        self.eqns = []
        self.members = set()
        self.recomputed = set()   # members recomputed from another cluster's operands
        self.outputs = []

    def __repr__(self):
        return f"fused[{'+'.join(e.prim.name for e in self.eqns)}]{list(self.shape)}"


def is_view_bcast(e, members) -> bool:
    """A broadcast of an operand from outside the cluster: read through an index map."""
    return e.prim is P.broadcast_in_dim_p and not (
        isinstance(e.inputs[0], Var) and e.inputs[0] in members)


def plan_steps(expr, can_join=fusible, rematerialize=False, pack=False):
    """Order the expression into steps: ("eqn", eqn) for equations of their own and
    ("fused", Cluster) for elementwise clusters, respecting dependencies. `can_join(e)` says
    which equations may join a cluster (a backend may keep some out); `rematerialize` lets a
    later cluster recompute cheap values of an earlier one instead of reading them. Without
    `pack` a cluster is closed at MAX_EQNS equations; with it clusters grow without that cap
    and one larger than MAX_EQNS is cut into its independent parts (`split`), identical parts
    packed together: an optimizer's per-leaf updates become a few kernels of one source.

    Example:
        >>> steps = plan_steps(expr)   # e.g. [("eqn", dot), ("fused", fused[add+max][4, 8])]
    """
    steps = []
    open_by_shape: dict[tuple, Cluster] = {}
    producer: dict[Var, Cluster] = {}

    def flush(c):
        if open_by_shape.get(c.shape) is c:
            del open_by_shape[c.shape]
            steps.extend(("fused", p) for p in (split(c) if pack else [c]))

    def flush_inputs(e, keep=None):
        for x in e.inputs:
            c = producer.get(x) if isinstance(x, Var) else None
            if c is not None and c is not keep and open_by_shape.get(c.shape) is c:
                flush(c)

    for e in expr.eqns:
        if can_join(e) and e.out.aval.size > 0:
            shape = e.out.aval.shape
            c = open_by_shape.get(shape)
            if c is not None and not pack and len(c.eqns) >= MAX_EQNS:
                flush(c)
                c = None
            if c is None:
                c = open_by_shape[shape] = Cluster(shape)
            flush_inputs(e, keep=c)
            c.eqns.append(e)
            c.members.add(e.out)
            producer[e.out] = c
        else:
            flush_inputs(e)
            steps.append(("eqn", e))
    for c in list(open_by_shape.values()):
        flush(c)
    if rematerialize:
        _rematerialize(steps)
    # which members are needed outside their cluster
    used_outside = {o for o in expr.outs if isinstance(o, Var)}
    for kind, s in steps:
        eqns = [s] if kind == "eqn" else s.eqns
        for e in eqns:
            for x in e.inputs:
                if isinstance(x, Var) and (kind == "eqn" or x not in s.members):
                    used_outside.add(x)
    for kind, s in steps:
        if kind == "fused":
            s.outputs = [e.out for e in s.eqns if e.out in used_outside
                         and e.out not in s.recomputed]
            # members only read through a broadcast need not be computed here
            s.eqns = _prune(s)
    return [(k, s) for k, s in steps if k == "eqn" or s.outputs]


def split(c: Cluster) -> list[Cluster]:
    """Cluster c as clusters of at most MAX_EQNS equations (c itself when that small).

    A *part* is a set of members no other member reads (and that read no other member) but
    through broadcasts of outside operands and iotas, which are copied into every part that
    reads them: with no member of another part to wait for, the parts of c may run in any
    order, all where c would have. Parts of equal structure (`_part_key`: AdamW's update of
    every 384-wide parameter of a GPT) are packed MAX_EQNS // size at a time, component after
    component, so that every full pack has the same kernel source, compiled once (fusion.py's
    kernels take the shape as an argument); the rest are packed in program order, and a part
    longer than MAX_EQNS is cut in program order (a later piece reads the earlier's values)."""
    if len(c.eqns) <= MAX_EQNS:
        return [c]
    eqns = c.eqns
    pos = {e.out: i for i, e in enumerate(eqns)}
    leaf = [e.prim is P.iota_p or is_view_bcast(e, c.members) for e in eqns]
    root = list(range(len(eqns)))

    def find(i):
        while root[i] != i:
            root[i] = i = root[root[i]]
        return i

    reads = []   # member indices each equation reads
    for i, e in enumerate(eqns):
        reads.append([pos[x] for x in e.inputs if isinstance(x, Var) and x in pos])
        if not leaf[i]:
            for j in reads[i]:
                if not leaf[j]:
                    root[find(j)] = find(i)
    parts: dict[int, list[int]] = {}
    for i in range(len(eqns)):
        if not leaf[i]:
            parts.setdefault(find(i), []).append(i)
    used = {j for i in range(len(eqns)) if not leaf[i] for j in reads[i]}
    parts_list = [_with_leaves(p, leaf, reads) for p in parts.values()]
    parts_list += [[i] for i in range(len(eqns)) if leaf[i] and i not in used]
    parts_list.sort(key=lambda p: min((i for i in p if not leaf[i]), default=p[0]))
    groups: dict[tuple, list] = {}
    for p in parts_list:
        groups.setdefault(_part_key(eqns, p), []).append(p)
    packs, rest = [], []
    for ps in groups.values():
        k, taken = 0, set()   # parts per pack: as many as fit (a shared broadcast counts once)
        while k < len(ps) and len(taken | set(ps[k])) <= MAX_EQNS:
            taken |= set(ps[k])
            k += 1
        full = len(ps) // k * k if k else 0   # (k = 0: a part over the cap, cut below)
        packs += [[i for p in ps[j:j + k] for i in p] for j in range(0, full, k or 1)]
        rest += ps[full:]
    rest.sort(key=lambda p: min((i for i in p if not leaf[i]), default=p[0]))
    cur: list[int] = []
    for p in rest:
        if len(p) > MAX_EQNS:
            packs += _cut(p, leaf, reads)
        elif len(set(cur) | set(p)) > MAX_EQNS:
            packs.append(cur)
            cur = list(p)
        else:
            cur += p
    if cur:
        packs.append(cur)
    packs.sort(key=lambda q: min((i for i in q if not leaf[i]), default=q[0]))
    out, owned = [], set()
    for q in packs:
        d = Cluster(c.shape)
        for i in q:
            e = eqns[i]
            if e.out in d.members:   # a broadcast two parts of this pack share
                continue
            d.eqns.append(e)
            d.members.add(e.out)
            if i in owned:   # a copy: the first pack with it writes it when others need it
                d.recomputed.add(e.out)
            owned.add(i)
        out.append(d)
    return out


def _with_leaves(part, leaf, reads) -> list[int]:
    """A part's equations with each broadcast or iota it reads placed just before its first
    reader (the same order in every part, wherever the shared broadcasts were made)."""
    out, seen = [], set()
    for i in part:
        for j in reads[i]:
            if leaf[j] and j not in seen:
                seen.add(j)
                out.append(j)
        out.append(i)
    return out


def _part_key(eqns, part) -> tuple:
    """A part's structure: equal keys give equal kernel source (operands named by first use)."""
    local: dict = {}
    outside: dict = {}
    key = []
    for i in part:
        e = eqns[i]
        ins = []
        for x in e.inputs:
            if isinstance(x, Lit):
                ins.append(("l", repr(x.val.item()), x.val.dtype.str))
            elif x in local:
                ins.append(("m", local[x]))
            else:
                ins.append(("x", outside.setdefault(x, len(outside)), x.aval.shape,
                            x.aval.dtype.str))
        local[e.out] = len(local)
        key.append((e.prim.name, repr(sorted(e.params.items())), e.out.aval.dtype.str,
                    tuple(ins)))
    return tuple(key)


def _cut(part, leaf, reads) -> list[list[int]]:
    """A part longer than MAX_EQNS cut in program order into pieces of at most MAX_EQNS, each
    with the broadcasts and iotas it reads."""
    pieces, cur = [], []
    for i in part:
        if leaf[i]:
            continue
        new = [j for j in reads[i] if leaf[j] and j not in cur] + [i]
        if cur and len(cur) + len(new) > MAX_EQNS:
            pieces.append(cur)
            new = [j for j in reads[i] if leaf[j]] + [i]
            cur = []
        cur += new
    return pieces + [cur] if cur else pieces


MAX_CONE = 16   # elementwise equations a cluster may recompute instead of reading a value


def _cone(c, v, limit):
    """The member equations of cluster c that compute v from c's external values (in order),
    or None when there are more than `limit` of them."""
    by_out = {e.out: e for e in c.eqns}
    need, seen = [v], set()
    while need:
        x = need.pop()
        if x in seen or x not in by_out:
            continue
        seen.add(x)
        if len(seen) > limit:
            return None
        e = by_out[x]
        if not is_view_bcast(e, c.members):
            need.extend(y for y in e.inputs if isinstance(y, Var))
    return [e for e in c.eqns if e.out in seen]


def _rematerialize(steps):
    """Recompute cheap elementwise values in a later cluster instead of storing them.

    A backward cluster often reads several values a forward cluster of the same shape computed
    from one operand (gelu's tanh, x**2, 1 - t**2 from the pre-activation x). When the values a
    cluster D reads from an earlier cluster C can be recomputed from fewer external operands
    than D reads of them, D recomputes them in registers: C need not write them (memory held
    from the forward to the backward pass, and bandwidth)."""
    fused = [s for k, s in steps if k == "fused"]
    owner = {}
    for c in fused:
        for e in c.eqns:
            owner.setdefault(e.out, c)
    for d in fused:
        ext = external_inputs(d)
        by_src: dict = {}
        for v in ext:
            c = owner.get(v)
            if c is not None and c is not d and c.shape == d.shape:
                by_src.setdefault(id(c), (c, []))[1].append(v)
        for c, vs in by_src.values():
            cones = [_cone(c, v, MAX_CONE) for v in vs]
            if any(k is None for k in cones):
                continue
            eqns = {e.out: e for k in cones for e in k}
            members = set(eqns)
            new_in = set()
            for e in eqns.values():
                if e.prim is P.iota_p:
                    continue
                src = [e.inputs[0]] if is_view_bcast(e, c.members) else e.inputs
                new_in.update(y for y in src if isinstance(y, Var) and y not in members)
            new_in -= set(ext)
            if len(new_in) >= len(vs):
                continue
            dup = [e for e in c.eqns if e.out in members and e.out not in d.members]
            # the recomputed values go first; a broadcast they read may be d's own copy (split
            # copies a broadcast into every part that reads it): producers before readers
            d.eqns = _producers_first(dup + d.eqns)
            d.members.update(e.out for e in dup)
            d.recomputed.update(e.out for e in dup)   # written by c if needed elsewhere


def _producers_first(eqns) -> list:
    """`eqns` in their order but for equations moved before the first that reads them."""
    by_out = {e.out: e for e in eqns}
    out, done = [], set()

    def visit(e):
        if e.out in done:
            return
        done.add(e.out)
        for x in e.inputs:
            p = by_out.get(x) if isinstance(x, Var) else None
            if p is not None:
                visit(p)
        out.append(e)

    for e in eqns:
        visit(e)
    return out


def _prune(c):
    need = set(c.outputs)
    keep = []
    for e in reversed(c.eqns):
        if e.out in need:
            keep.append(e)
            if is_view_bcast(e, c.members):
                continue
            need.update(x for x in e.inputs if isinstance(x, Var))
    keep.reverse()
    return keep


def external_inputs(c: Cluster) -> list:
    """Variables the cluster reads from outside, in first-use order."""
    seen = []
    for e in c.eqns:
        if e.prim is P.iota_p:
            continue
        for x in e.inputs:
            if isinstance(x, Var) and x not in c.members and x not in seen:
                seen.append(x)
    return seen
