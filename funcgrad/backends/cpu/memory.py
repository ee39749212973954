"""The CPU plan's memory: one arena per plan, each intermediate at an offset chosen by liveness.

Values written by fused kernels and matrix products (and not returned to the caller) get
arena space; a value's space is free again after the last step that reads it or any view of
it (a numpy step's result may be a view of its operands, so it keeps their space alive,
unless the step is a ufunc or marked `fresh`: those return new arrays).
Results handed to the caller are never arena memory: they are fresh arrays, or copied out
when they could be a view into the arena.
"""
from __future__ import annotations

import numpy as np

from funcgrad.core import Var

ALIGN = 64


def _nbytes(aval) -> int:
    return int(np.prod(aval.shape, dtype=np.int64)) * np.dtype(aval.dtype).itemsize


class MemoryPlan:
    """offsets: arena var -> byte offset; index: arena var -> position in a buffer list;
    may_alias_arena: results that may be views into the arena; peak: arena bytes."""

    def __init__(self):
        self.offsets, self.index = {}, {}
        self.may_alias_arena = set()
        self.peak = 0
        self.avals = []

    def new_buffers(self) -> list:
        """Views of a fresh arena, one per arena var in `index` order, then the arena."""
        raw = np.empty(self.peak + ALIGN, np.uint8)
        start = (-raw.ctypes.data) % ALIGN
        arena = raw[start:start + self.peak]
        views = []
        for (off, aval) in self.avals:
            n = _nbytes(aval)
            views.append(arena[off:off + n].view(aval.dtype).reshape(aval.shape))
        return views + [arena]


def plan(steps, outs, keep) -> MemoryPlan:
    """Give every value written by an "into" or "kernel" step (not in `keep`) an arena offset.

    Example:
        >>> mem = plan(steps, expr.outs, keep)   # mem.peak bytes, mem.offsets[v] per value
    """
    m = MemoryPlan()
    end = len(steps)
    last = {}
    for i, s in enumerate(steps):
        for x in s.ins:
            if isinstance(x, Var):
                last[x] = i
    for o in outs:
        if isinstance(o, Var):
            last[o] = end
    roots = {}       # var -> arena vars whose memory it may use
    arena_vars = []  # (var, defining step)
    for i, s in enumerate(steps):
        if s.kind in ("into", "kernel"):
            for v in s.outs:
                if v in keep:
                    roots[v] = frozenset()
                else:
                    roots[v] = frozenset([v])
                    arena_vars.append((v, i))
        else:
            if isinstance(s.fn, np.ufunc) or getattr(s.fn, "fresh", False):
                r = frozenset()   # a new array (a ufunc's result, a reduction), never a view
            else:
                r = frozenset().union(*[roots.get(x, frozenset()) for x in s.ins
                                        if isinstance(x, Var)])
            for v in s.outs:
                roots[v] = r
    release = {v: i for v, i in arena_vars}
    for w, r in roots.items():
        for b in r:
            release[b] = max(release[b], last.get(w, -1))
    m.may_alias_arena = {o for o in outs if isinstance(o, Var) and roots.get(o)}
    live = []   # (offset, end, release step)
    for v, i in arena_vars:
        live = [blk for blk in live if blk[2] >= i]
        size = -(-_nbytes(v.aval) // ALIGN) * ALIGN
        off = 0
        for lo, hi, _ in sorted(live):
            if off + size <= lo:
                break
            off = max(off, hi)
        live.append((off, off + size, release[v]))
        m.offsets[v] = off
        m.index[v] = len(m.avals)
        m.avals.append((off, v.aval))
        m.peak = max(m.peak, off + size)
    return m
