"""Backend-neutral elementwise clustering: group equations of one shape into fusible clusters.

A cluster is a set of elementwise equations (plus broadcasts of their operands and iotas) that
produce values of one shape, in an order that respects every dependency. Backends generate one
kernel per cluster (funcgrad.backends.cpu_kernels on the CPU). Imports no backend.
"""
from __future__ import annotations

from . import prims as P
from .core import Var


def fusible(e) -> bool:
    """Whether equation e may join an elementwise cluster."""
    return e.prim.kind == "elementwise" or e.prim in (P.broadcast_in_dim_p, P.iota_p)


class Cluster:
    """Equations fused into one kernel; `outputs` are the members used outside it."""

    def __init__(self, shape):
        self.shape = tuple(shape)
        self.eqns = []
        self.members = set()
        self.outputs = []

    def __repr__(self):
        return f"fused[{'+'.join(e.prim.name for e in self.eqns)}]{list(self.shape)}"


def is_view_bcast(e, members) -> bool:
    """A broadcast of an operand from outside the cluster: read through an index map."""
    return e.prim is P.broadcast_in_dim_p and not (
        isinstance(e.inputs[0], Var) and e.inputs[0] in members)


def plan_steps(expr, can_join=fusible):
    """Order the expression into steps: ("eqn", eqn) for equations of their own and
    ("fused", Cluster) for elementwise clusters, respecting dependencies. `can_join(e)` says
    which equations may join a cluster (a backend may keep some out).

    Example:
        >>> steps = plan_steps(expr)   # e.g. [("eqn", dot), ("fused", fused[add+max][4, 8])]
    """
    steps = []
    open_by_shape: dict[tuple, Cluster] = {}
    producer: dict[Var, Cluster] = {}

    def flush(c):
        if open_by_shape.get(c.shape) is c:
            del open_by_shape[c.shape]
            steps.append(("fused", c))

    def flush_inputs(e, keep=None):
        for x in e.inputs:
            c = producer.get(x) if isinstance(x, Var) else None
            if c is not None and c is not keep and open_by_shape.get(c.shape) is c:
                flush(c)

    for e in expr.eqns:
        if can_join(e) and e.out.aval.size > 0:
            shape = e.out.aval.shape
            c = open_by_shape.get(shape)
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
            s.outputs = [e.out for e in s.eqns if e.out in used_outside]
            # members only read through a broadcast need not be computed here
            s.eqns = _prune(s)
    return [(k, s) for k, s in steps if k == "eqn" or s.outputs]


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
