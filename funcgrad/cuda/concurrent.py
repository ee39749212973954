"""Concurrent CUDA graphs: a captured step's chain of nodes rewired by the memory each step uses.

Stream capture records a plan's steps as one chain: every kernel waits for the one before, so
small kernels (bias and norm gradients, optimizer updates, the second GEMM of a backward pass)
never overlap and every node pays the launch gap. While a plan is captured, a `Tracker` notes
per step the graph node it ended on and the device address ranges it read (its operands) and
wrote (its results and every allocation it made: the arena places buffers of disjoint
lifetimes at the same addresses, so reuse is a write too). `rewire` then keeps each step's own
nodes in order and makes a step wait only for the earlier steps it conflicts with (read after
write, write after read, write after write on overlapping bytes), skipping those already
ordered through others; the instantiated graph runs independent steps side by side.
"""
from __future__ import annotations

import os

from funcgrad.compile import switches
from funcgrad.cuda import runtime

# independent steps run side by side; FUNCGRAD_CONCURRENT_GRAPHS=0 keeps capture's one chain
CONCURRENT = os.environ.get("FUNCGRAD_CONCURRENT_GRAPHS", "1") != "0"
switches.register(__name__, "CONCURRENT")   # a change keys jit's shared cache apart


def extent(buf):
    """[lo, hi) device bytes a strided view spans, or None when it is empty."""
    if not buf.size:
        return None
    lo = hi = buf.offset
    for n, st in zip(buf.shape, buf.strides):
        if st > 0:
            hi += (n - 1) * st
        else:
            lo += (n - 1) * st
    base, isz = buf.block.ptr(), buf.dtype.itemsize
    return base + lo * isz, base + (hi + 1) * isz


class Tracker:
    """Per step of a plan being captured: (last node, reads, writes)."""

    def __init__(self, stream_handle):
        from cuda.bindings import driver as cb
        self.cb, self.stream = cb, cb.CUstream(int(stream_handle))
        self.steps: list = []

    def begin(self):
        runtime._writes = []

    def end(self, reads, writes):
        info = self.cb.cuStreamGetCaptureInfo(self.stream)
        deps = info[4] if int(info[0]) == 0 else None
        last = int(deps[-1]) if deps else 0
        w = runtime._writes
        runtime._writes = None
        w.extend(e for e in map(extent, writes) if e is not None)
        self.steps.append((last, [e for e in map(extent, reads) if e is not None], w))


def _overlap(a, b) -> bool:
    return any(x0 < y1 and y0 < x1 for x0, x1 in a for y0, y1 in b)


def step_deps(steps) -> list[list[int]]:
    """For steps [(reads, writes)] in program order: the earlier steps each must wait for
    (a conflict on overlapping bytes), leaving out those already ordered through others."""
    deps, anc = [], []
    for j, (rj, wj) in enumerate(steps):
        mask, mine = 0, []
        for i in range(j - 1, -1, -1):
            if mask >> i & 1:
                continue
            ri, wi = steps[i]
            # read after write, write after write, write after read
            if _overlap(wi, rj) or _overlap(wi, wj) or _overlap(ri, wj):
                mine.append(i)
                mask |= anc[i] | (1 << i)
        deps.append(mine)
        anc.append(mask)
    return deps


def rewire(graph, steps) -> dict:
    """Replace the chain between steps by their memory conflicts; returns what it did (or why
    it left the graph a chain)."""
    from cuda.bindings import driver as cb

    def ok(res):
        if int(res[0]) != 0:
            raise RuntimeError(f"graph rewiring failed: {res[0]}")
        return res[1:]

    n_nodes = ok(cb.cuGraphGetNodes(graph, 0))[-1]
    n_edges = ok(cb.cuGraphGetEdges(graph, 0))[-1]
    if n_nodes < 2:
        return {"nodes": n_nodes, "edges": n_edges}
    nodes = ok(cb.cuGraphGetNodes(graph, n_nodes))[0]
    src, dst = ok(cb.cuGraphGetEdges(graph, n_edges))[:2]
    nxt, has_in = {}, set()
    for a, b in zip(src, dst):
        a, b = int(a), int(b)
        if a in nxt or b in has_in:
            return {"nodes": n_nodes, "edges": n_edges, "why": "not a chain"}
        nxt[a] = b
        has_in.add(b)
    by_id = {int(v): v for v in nodes}
    roots = [k for k in by_id if k not in has_in]
    if len(roots) != 1:
        return {"nodes": n_nodes, "edges": n_edges, "why": "not a chain"}
    order, k = [], roots[0]
    while k is not None:
        order.append(k)
        k = nxt.get(k)
    pos = {k: i for i, k in enumerate(order)}
    groups, start = [], 0        # (first node, last node, reads, writes) of steps with nodes
    for last, reads, writes in steps:
        if last == 0 or last not in pos or pos[last] < start:
            continue
        groups.append((order[start], last, reads, writes))
        start = pos[last] + 1
    if start != len(order):
        return {"nodes": n_nodes, "edges": n_edges, "why": "nodes outside the steps"}
    cut = [(g[1], h[0]) for g, h in zip(groups, groups[1:])]
    deps = step_deps([(g[2], g[3]) for g in groups])
    add = [(groups[i][1], groups[j][0]) for j, ds in enumerate(deps) for i in ds]
    if cut:
        ok(cb.cuGraphRemoveDependencies(graph, [by_id[a] for a, _ in cut],
                                        [by_id[b] for _, b in cut], None, len(cut)))
    if add:
        ok(cb.cuGraphAddDependencies(graph, [by_id[a] for a, _ in add],
                                     [by_id[b] for _, b in add], None, len(add)))
    roots = sum(1 for ds in deps if not ds)
    return {"nodes": n_nodes, "steps": len(groups), "edges": len(add), "roots": roots}
