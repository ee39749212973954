"""Elementwise fusion for jit on CUDA: cluster equations and generate one kernel per cluster.

A cluster is a set of elementwise equations (plus broadcasts of their operands and iotas) that
produce values of one shape. Its kernel reads each external operand once per element — full,
broadcast (through the broadcast_in_dim's index map) or a baked-in scalar literal — computes
every member in registers and writes only the values needed outside the cluster. Shapes are
kernel arguments, so clusters of the same structure (every layer of a network) share one
compiled kernel.
"""
from __future__ import annotations

import numpy as np

from .. import prims as P
from ..core import Lit, Var
from .elementwise import compute_t, helper_source, nbt, scalar

# ---------------------------------------------------------------------------------------------
# clustering
# ---------------------------------------------------------------------------------------------


def fusible(e) -> bool:
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


def _is_view_bcast(e, members):
    """A broadcast of an operand from outside the cluster: read through an index map."""
    return e.prim is P.broadcast_in_dim_p and not (
        isinstance(e.inputs[0], Var) and e.inputs[0] in members)


def plan_steps(expr):
    """Order the expression into steps: ("eqn", eqn) for kernels of their own and
    ("fused", Cluster) for fused elementwise clusters, respecting dependencies."""
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
        if fusible(e) and e.out.aval.size > 0:
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
        if not _is_view_bcast(e, c.members):
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
                src = [e.inputs[0]] if _is_view_bcast(e, c.members) else e.inputs
                new_in.update(y for y in src if isinstance(y, Var) and y not in members)
            new_in -= set(ext)
            if len(new_in) >= len(vs):
                continue
            dup = [e for e in c.eqns if e.out in members and e.out not in d.members]
            d.eqns[:0] = dup
            d.members.update(e.out for e in dup)
            d.recomputed.update(e.out for e in dup)   # written by c if needed elsewhere


def _prune(c):
    need = set(c.outputs)
    keep = []
    for e in reversed(c.eqns):
        if e.out in need:
            keep.append(e)
            if _is_view_bcast(e, c.members):
                continue
            need.update(x for x in e.inputs if isinstance(x, Var))
    keep.reverse()
    return keep


# ---------------------------------------------------------------------------------------------
# code generation
# ---------------------------------------------------------------------------------------------

def _lit(val, dtype):
    """A literal operand in the compute type of `dtype`."""
    v = np.asarray(val).astype(dtype).item()
    if dtype == np.bool_:
        return "True" if v else "False"
    ct = compute_t(dtype)
    if dtype.kind == "f":
        if v != v:
            return f"{ct}(math.nan)"
        if v in (float("inf"), float("-inf")):
            return f"{ct}({'-' if v < 0 else ''}math.inf)"
        return f"{ct}({v!r})"
    return f"{ct}({v})"


class FusedKernel:
    """Generated source for one cluster and one layout of its operands.

    Each external operand is read as "flat" (C-contiguous with the cluster's shape: index i),
    "scalar" (one element) or "strided" (through output coordinates and the buffer's own
    strides: broadcasts, transposes and other views are read in place, never copied).
    """

    def __init__(self, cluster: Cluster, layout: dict):
        self.cluster = cluster
        self.inputs = external_inputs(cluster)
        self.layout = layout  # var -> "flat" | "strided" | "scalar"
        self.source = self._generate()

    def _generate(self):
        c = self.cluster
        rank = len(c.shape)
        pname = {v: f"in{k}" for k, v in enumerate(self.inputs)}
        need_coords = any(self.layout[v] == "strided" for v in self.inputs) or any(
            e.prim is P.iota_p for e in c.eqns)
        names = {}
        body = []
        helpers = set()

        def read(v, dims_map):
            p = pname[v]
            mode = self.layout[v]
            if mode == "flat":
                at = f"{p}_o + i"
            elif mode == "scalar":
                at = f"{p}_o"
            else:
                at = " + ".join([p + "_o"] + [f"c{d} * {p}_s{j}" for j, d in enumerate(dims_map)
                                              if v.aval.shape[j] != 1])
            return f"{compute_t(v.aval.dtype)}({p}[{at}])"

        for k, e in enumerate(c.eqns):
            dt = e.out.aval.dtype
            out = f"t{k}"
            if e.prim is P.iota_p:
                body.append(f"{out} = {compute_t(dt)}(c{e.params['dimension']})")
            elif _is_view_bcast(e, c.members):
                x = e.inputs[0]
                if not isinstance(x, Var):
                    body.append(f"{out} = {_lit(x.val, dt)}")
                else:
                    body.append(f"{out} = {read(x, e.params['broadcast_dimensions'])}")
            else:
                args = []
                for x in e.inputs:
                    if isinstance(x, Lit):
                        args.append(_lit(x.val, x.aval.dtype))
                    elif x in names:
                        args.append(names[x])
                    else:
                        args.append(read(x, tuple(range(rank))))
                src_dt = e.inputs[0].aval.dtype if e.inputs else dt
                expr, used = scalar(e.prim.name, args, src_dt, dt, e.params)
                helpers |= used
                # each value is cast to its compute type (its dtype; float16 computes in
                # float32), so integers wrap at every step as in numpy, not only when stored
                body.append(f"{out} = {compute_t(dt)}({expr})")
            names[e.out] = out
        for j, o in enumerate(c.outputs):
            body.append(f"out{j}[out{j}_o + i] = {nbt(o.aval.dtype)}({names[o]})")
        sig = ["n"] + [f"s{d}" for d in range(rank)]
        for v in self.inputs:
            p = pname[v]
            sig += [p, f"{p}_o"]
            if self.layout[v] == "strided":
                sig += [f"{p}_s{j}" for j in range(v.aval.ndim)]
        for j in range(len(c.outputs)):
            sig += [f"out{j}", f"out{j}_o"]
        lines = [f"@cuda.jit({{opts}})\ndef kernel({', '.join(sig)}):",
                 "    i = cuda.grid(1)", "    step = cuda.gridsize(1)", "    while i < n:"]
        if need_coords:
            lines.append("        r = i")
            for d in reversed(range(rank)):
                lines += [f"        c{d} = r % s{d}", f"        r = r // s{d}"]
        lines += [f"        {b}" for b in body]
        lines.append("        i += step")
        return helper_source(helpers, "{opts}") + "\n\n" + "\n".join(lines) + "\n"

    def args(self, bufs: list, outs: list) -> list:
        """Kernel arguments for operand buffers (aligned with self.inputs) and outputs."""
        c = self.cluster
        a = [int(np.prod(c.shape))] + list(c.shape)
        for v, b in zip(self.inputs, bufs):
            a += [b.arr(), b.offset]
            if self.layout[v] == "strided":
                a += list(b.strides)
        for o in outs:
            a += [o.arr(), o.offset]
        return a


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


def layout_of(v, buf, shape) -> str:
    if buf.size == 1:
        return "scalar"
    if tuple(buf.shape) == tuple(shape) and buf.is_contiguous():
        return "flat"
    return "strided"
