"""A GraphSet for the CUDA simulator: the driver calls stubbed, a "graph" re-runs the plan's steps.

The simulator has no CUDA graphs, so plans there never replay through graphs.GraphSet; this
stand-in keeps all of GraphSet's per-call logic (keys, staging, output sets, the loop memo of
replay.py) and replaces capture and launch: capturing runs the steps once into the chosen
output set (that run is the first launch's), a launch runs them again on the captured inputs.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from funcgrad.cuda import arrays, graphs, memplan
from funcgrad.cuda.arrays import DeviceBuffer


class SimGraphSet(graphs.GraphSet):
    """graphs.GraphSet with capture and launch done by running the plan's steps."""

    def __init__(self, plan):   # no driver: GraphSet's fields set by hand
        self.plan = plan
        self.avals = [o.aval for o in plan.expr.outs]
        self.entries = OrderedDict()
        self.last, self.varies, self.staging = [], [], {}
        self.sticky = np.zeros((16 * graphs.MAX_GRAPHS, 2), np.int64)
        self.counts = self.sticky[:, 0]
        self.used = self.counts[:0]
        self.has_checks, self.rewired = False, None
        self.free_slots = list(range(graphs.MAX_GRAPHS))
        self.gemm_policy, self.gemm_ab, self.memo = "ordered", {}, None
        self.runs: dict = {}
        self.skip = None
        self.launches = self.captures = 0
        self._launch = self._run_graph

    def __call__(self, bufs, args=None):
        self._bufs = bufs     # what a capture's run must read (the staging copies' sources)
        try:
            return super().__call__(bufs, args)
        finally:
            self._bufs = None   # not kept: a donated argument's block must have no other owner

    def _record(self, key, ins, s, policy):
        plan = self.plan
        # this run is the first launch's: what precedes a launch comes first (results still
        # held moved out of set s, arguments copied into their staging buffers)
        plan.release_set(s, 0)
        staged = [(i, None) for i, k in enumerate(key[1]) if k is None]
        self._copy_in(staged, self._bufs.__getitem__, ins.__getitem__)
        donated = {i: ins[i] for i in plan.donate if key[1][i] is not None}
        full = len(donated) < len(plan.donate)

        # a graph reads and writes the addresses it was captured with: bind to the memory,
        # not to the blocks (a block still held when its set is rewritten moves to new memory)
        ins = [DeviceBuffer.make(memplan.PlanBlock(b.block.raw), b.shape, b.strides, b.offset,
                                 b.dtype, b._contiguous) for b in ins]
        bound = {i: ins[i] for i in donated}
        first = [donated]   # dropped after the capture: no view of an argument is kept

        def run():
            # (the capture's results are written into the arguments' blocks: the templates
            # name which argument each in-place result is)
            pool = memplan.ArenaPool(plan.layout, plan._arena(), plan.out_set(s, full), plan,
                                     s, first.pop() if first else bound)
            with arrays.using_pool(pool):
                return plan._run(ins), pool

        del donated
        outs, pool = run()
        self.captures += 1
        e = graphs._Entry()
        e.graph = e.exec = None
        e.handle = self.skip = self.captures    # the capture's run is its first launch
        self.runs[e.handle] = run
        e.slot, e.row, e.deferred, e.keep = self.free_slots.pop(), 0, [], []
        e.large, e.alt, e.ab = 0, None, None
        return e, outs, pool

    def _run_graph(self, handle, stream):
        self.launches += 1
        if handle == self.skip:
            self.skip = None
        else:
            self.runs[handle]()
        return 0

    def _stage(self, entry, buf_of):
        self._copy_in(entry.staged, buf_of, self.staging.__getitem__)

    @staticmethod
    def _copy_in(staged, buf_of, dst_of):
        for i, _ in staged:
            b, dst = buf_of(i), dst_of(i)
            n, k = b.size * b.dtype.itemsize, b.dtype.itemsize
            if n:
                src = b.block.raw.dev[b.offset * k:b.offset * k + n]
                dst.block.raw.dev[dst.offset * k:dst.offset * k + n].copy_to_device(src)

    def _destroy(self, e):
        self.memo = None
        self.free_slots.append(e.slot)
        self.runs.pop(e.handle, None)

    def __del__(self):
        pass


def install(plan) -> SimGraphSet:
    """Make `plan` (planned already: called twice) replay through a SimGraphSet."""
    assert plan.layout is not None, "call the jitted function twice first"
    plan.graphs = SimGraphSet(plan)
    return plan.graphs
