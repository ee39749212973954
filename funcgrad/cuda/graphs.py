"""CUDA-graph replay of a planned step, bound to where its arguments are.

A `GraphSet` keeps a few instantiated graphs of one Plan, keyed by the output set they write and
by the address of every argument read in place. An argument is read in place ("direct") when it
is a result of this plan held in the other output set, or when it sits at the same address as
in every call so far (an unchanged batch, a constant); an argument whose address has changed
once is copied into a staging buffer of the plan from then on (one device copy). A training
loop that feeds a step's results back therefore alternates between two graphs and copies
nothing but its new batches.

A graph with two or more large cuBLAS GEMMs is captured under both workspace policies of
blas.py ("ordered", "spread") while the GraphSet's policy is undecided; its next calls
alternate and time the two (graph_ab.py), keep the faster, and later captures take only that
one (FUNCGRAD_GEMM_POLICY=ordered|spread: no measurement).

Device checks (index bounds) inside a graph add their flags into a small mapped (host-visible)
array right after they run; the host reads it at the start of the next call of the plan and
when results are read (`to_host`, `block_until_ready`), and raises there: no per-call
synchronization.
"""
from __future__ import annotations

import gc
import weakref
from collections import OrderedDict

import numpy as np

from funcgrad.core import Array, source_info
from funcgrad.cuda import (
    arrays,
    blas,
    concurrent,
    graph_ab,
    memplan,
    replay,
    replay_inplace,
    runtime,
)
from funcgrad.cuda.arrays import DeviceBuffer

MAX_GRAPHS = 6
BIG = np.iinfo(np.int64).max
_plans_with_checks: weakref.WeakSet = weakref.WeakSet()

_ACCUMULATE = """
@cuda.jit(cache=True)
def kernel(err, off, sticky, j):
    if cuda.grid(1) == 0:
        c = err[off]
        if c != 0:
            sticky[j, 0] += c
            if err[off + 1] < sticky[j, 1]:
                sticky[j, 1] = err[off + 1]
"""


def _accumulate():
    return runtime.kernel(("graph_accumulate",), lambda: _ACCUMULATE)


class _Entry:
    # alt: the same key captured under the other GEMM policy while `ab` (graph_ab.Timing)
    # times the two; large: large GEMMs the capture saw
    __slots__ = ("ab", "alt", "deferred", "exec", "graph", "handle", "keep", "large", "row",
                 "slot", "staged", "templates")


class GraphSet:
    """The graphs of one Plan (real GPUs only)."""

    def __init__(self, plan):
        from cuda.bindings import driver as cb
        self.plan = plan
        self.avals = [o.aval for o in plan.expr.outs]
        self.entries: OrderedDict = OrderedDict()
        self.last: list = []
        self.varies: list = []
        self.staging: dict = {}
        # captured on a stream of its own (capture may not use the legacy stream), replayed on
        # the legacy stream: ordered after eager work queued before and before eager work after
        self.handle = _ok(cb.cuStreamCreate(cb.CUstream_flags.CU_STREAM_NON_BLOCKING.value))
        self.stream = runtime.load().external_stream(int(self.handle))
        self._cb = cb
        self._copy = runtime.memcpy_dtod_async()
        self._launch = runtime.graph_launch()
        # device-check flags of every graph, host-visible: rows [16 k, 16 k + 16) of graph slot k
        self.sticky = runtime.load().mapped_array((16 * MAX_GRAPHS, 2), np.int64)
        self.sticky[:, 0], self.sticky[:, 1] = 0, BIG
        self.counts = self.sticky[:, 0]
        self.used = self.counts[:0]  # the rows of the slots whose graphs have device checks
        self.has_checks = False     # any graph with device checks (else counts stays zero)
        self.rewired = None         # what concurrent.rewire did to the last captured graph
        self.free_slots = list(range(MAX_GRAPHS))
        self.memo = None            # replay.Memo: the next call predicted from the last
        setting = blas.policy_setting()
        # the GEMM workspace policy captures take; None until measured (graph_ab.py)
        self.gemm_policy = None if setting == "measure" else setting
        self.gemm_ab: dict = {"setting": setting}   # why: large GEMMs, medians in ms

    # the call -------------------------------------------------------------------------------

    def __call__(self, bufs, args=None):
        """Replay for argument buffers `bufs` (contiguous; of the Arrays `args` when given: the
        loop memo learns from them); returns the result Arrays."""
        plan = self.plan
        s = plan.choose_set(bufs)
        feed = replay.feed_of(self.memo, args, plan)
        kept = None if plan.donate else replay.carry(self.memo, feed, s)
        self.memo = None    # no reference into set s is left before release_set(s)
        last, varies = self.last, self.varies
        if len(last) != len(bufs):
            last = self.last = [None] * len(bufs)
            varies = self.varies = [False] * len(bufs)
        key = []
        for i, b in enumerate(bufs):
            blk = b.block
            if type(blk) is memplan.PlanBlock and blk.owner is plan:
                addr = (id(blk.raw), b.offset)
                key.append(addr if blk.set_id != s else None)
            else:
                # read in place until its address changes once, then always copied in (a new
                # batch that the pool sometimes puts back at the last address would otherwise
                # capture a graph per address)
                addr = (blk.ptr(), b.offset)
                if last[i] is not None and addr != last[i]:
                    varies[i] = True
                key.append(None if varies[i] else addr)
            last[i] = addr
        key = (s, tuple(key))
        entry = self.entries.get(key)
        if entry is None:
            entry = self._capture(key, bufs, s)
        else:
            self.entries.move_to_end(key)
        plan.release_set(s, 0)
        self._stage(entry, bufs.__getitem__)
        ab = entry.ab
        err = self._launch(entry.handle, 0) if ab is None else ab.launch(self._launch)
        if err:
            raise RuntimeError(f"cuGraphLaunch failed (CUresult {err})")
        if ab is not None and ab.due():
            graph_ab.decide(self, ab)
        outs = self._results(entry, bufs, s)
        if feed is not None:
            learn = replay_inplace.learn if plan.donate else replay.learn
            self.memo = learn(self, args, bufs, feed, s, key, entry, outs, kept)
        return outs

    def _stage(self, entry, buf_of):
        """Copy the arguments `entry` reads from staging buffers (buf_of(i): argument i's)."""
        for i, dst in entry.staged:
            b = buf_of(i)
            n = b.size * b.dtype.itemsize
            if n:
                err = self._copy(dst, b.block.ptr() + b.offset * b.dtype.itemsize, n, 0)
                if err:
                    raise RuntimeError(f"staging copy of {n} bytes failed (CUresult {err})")

    def _results(self, entry, bufs, s, which=None):
        """The call's result Arrays, from templates made at capture (no per-call checks);
        only results `which` (indices) when given."""
        plan = self.plan
        raws = plan.out_sets[s][1]
        blocks, outs = {}, []
        make, PlanBlock = DeviceBuffer.make, memplan.PlanBlock
        append = outs.append
        tpl = entry.templates if which is None else [entry.templates[j] for j in which]
        for kind, a, shape, strides, offset, dtype, contig, aval in tpl:
            if kind == 0:     # a result slot of set s
                blk = blocks.get(a)
                if blk is None:
                    blk = blocks[a] = PlanBlock(raws[a], plan, s)
                append(Array(make(blk, shape, strides, offset, dtype, contig), aval, "cuda"))
            elif kind == 1:   # written in place into argument a
                i = bufs[a]
                append(Array(make(i.block, shape, strides, i.offset + offset, dtype, contig),
                             aval, "cuda"))
            else:             # a constant or literal of the plan
                append(Array(a, aval, "cuda"))
        plan.live[s] = [weakref.ref(b) for b in blocks.values()]
        return outs

    # capture --------------------------------------------------------------------------------

    def _staging(self, i, b) -> DeviceBuffer:
        st = self.staging.get(i)
        if st is None or st.shape != b.shape or st.dtype != b.dtype:
            st = self.staging[i] = arrays.pool().empty(b.shape, b.dtype)
        return st

    def staging_bytes(self) -> int:
        return sum(b.block.raw.nbytes for b in self.staging.values())

    def _capture(self, key, bufs, s):
        ins = [b if k is not None else self._staging(i, b) for i, (b, k) in
               enumerate(zip(bufs, key[1]))]
        while len(self.entries) >= MAX_GRAPHS or not self.free_slots:
            _, old = self.entries.popitem(last=False)
            self._destroy(old)
        e, outs, pool = self._record(key, ins, s, self.gemm_policy or "ordered")
        e.staged = [(i, ins[i].block.ptr() + ins[i].offset * ins[i].dtype.itemsize)
                    for i, k in enumerate(key[1]) if k is None]
        e.templates = self._templates(outs, ins, pool, s)
        if self.gemm_policy is None:
            graph_ab.start(self, e, key, ins, s)
        self.entries[key] = e
        return e

    def _record(self, key, ins, s, policy):
        """Capture the plan on inputs `ins` into result set s with GEMM workspace `policy`, in
        a sticky slot of its own: (_Entry with the graph's fields, outs, the arena pool)."""
        cb, plan = self._cb, self.plan
        cuda = runtime.load()
        acc = _accumulate()
        slot = self.free_slots.pop()
        row = 16 * slot
        sticky = self.sticky
        tmp = arrays.pool().empty((2,), np.int64)
        acc[1, 1](tmp.arr(), tmp.offset, sticky, row)   # compiled and loaded before the capture
        donated = {i: ins[i] for i in plan.donate if key[1][i] is not None}   # read in place
        full = len(donated) < len(plan.donate)     # a donated argument copied in: no in place
        pool = memplan.ArenaPool(plan.layout, plan._arena(), plan.out_set(s, full), plan, s,
                                 donated)
        cuda.synchronize()
        sticky[row:row + 16, 0], sticky[row:row + 16, 1] = 0, BIG
        deferred = []

        def on_defer(err):
            if len(deferred) >= 16:
                raise RuntimeError("more than 16 device checks in one step")
            # on the current capture stream: inside a loop body, once per iteration
            acc[1, 1, runtime.stream()](err.arr(), err.offset, sticky, row + len(deferred))
            deferred.append(err)

        tracker = concurrent.Tracker(self.handle) if concurrent.CONCURRENT else None
        # no cuMemFree while capturing (it synchronizes and invalidates the capture): numba's
        # frees are deferred and the cycle collector (which may free device memory) waits
        gc_was = gc.isenabled()
        try:
            _ok(cb.cuStreamBeginCapture(self.handle,
                                        cb.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED))
            runtime._stream, runtime._deferred, runtime._on_defer = self.stream, [], on_defer
            runtime._keep = keep = []
            runtime._tracker = tracker
            gc.disable()
            try:
                with blas.workspace_policy(policy), arrays.using_pool(pool), \
                        cuda.defer_cleanup():
                    outs = plan._run(ins)
            finally:
                if gc_was:
                    gc.enable()
                err, graph = cb.cuStreamEndCapture(self.handle)
                checks = runtime._deferred
                runtime._stream, runtime._deferred, runtime._on_defer = None, None, None
                runtime._keep = runtime._tracker = runtime._writes = None
            _ok((err,))
            if tracker is not None:
                self.rewired = concurrent.rewire(graph, tracker.steps)
            if pool.k != len(plan.layout.sizes):
                raise memplan.PlanMismatch(f"{pool.k} allocations, recorded "
                                           f"{len(plan.layout.sizes)}")
            exe = _ok(cb.cuGraphInstantiate(graph, 0))
        except BaseException:
            self.free_slots.append(slot)   # the slot only: a failed capture is not kept
            raise
        e = _Entry()
        e.graph, e.exec, e.handle = graph, exe, int(exe)
        e.slot, e.row, e.deferred, e.keep = slot, row, checks, keep
        e.large, e.alt, e.ab = blas.large_gemms(), None, None
        if checks:
            self.has_checks = True
            self.used = self.counts[:max(self.used.size, row + 16)]
            _plans_with_checks.add(self)
        return e, outs, pool

    def _templates(self, outs, ins, pool, s):
        """Per result: (0 slot | 1 argument | 2 fixed, which, shape, strides, offset, dtype,
        contiguous, aval)."""
        slot_of = {id(b): j for j, b in pool.out_blocks.items()}
        in_of = {id(b.block): i for i, b in enumerate(ins)}
        tpl = []
        for o, aval in zip(outs, self.avals):
            blk = o.block
            c = o.is_contiguous()
            if id(blk) in slot_of and blk.set_id == s:
                tpl.append((0, slot_of[id(blk)], o.shape, o.strides, o.offset, o.dtype, c,
                            aval))
            elif id(blk) in in_of:
                i = in_of[id(blk)]
                tpl.append((1, i, o.shape, o.strides, o.offset - ins[i].offset, o.dtype, c,
                            aval))
            else:      # constants and literals of the plan: immutable
                tpl.append((2, o, None, None, None, None, None, aval))
        return tpl

    # device checks --------------------------------------------------------------------------

    def failed(self) -> bool:
        """Whether a device check of an earlier replay failed: asked before every replay, so
        only the rows of slots with checks are read, by np.count_nonzero (W1 on an H200: 5.3 us
        a call in ndarray.any over every slot's row; count_nonzero on 16 rows takes ~0.3 us on
        the development VM against ~1.6 for any() over all of them)."""
        return self.has_checks and np.count_nonzero(self.used) > 0

    def check(self):
        """Raise for any device check that failed in an earlier replay."""
        bad = np.flatnonzero(self.counts)
        if not bad.size:
            return
        r = int(bad[0])
        flags = np.array(self.sticky[r])
        self.sticky[:, 0], self.sticky[:, 1] = 0, BIG
        for g in [g for e in self.entries.values() for g in (e, e.alt) if g is not None]:
            if g.row <= r < g.row + len(g.deferred):
                _, raise_if_bad, src = g.deferred[r - g.row]
                with source_info(src):
                    raise_if_bad(arrays.from_host(flags))
        raise RuntimeError(f"a device check of a replayed step failed: {flags.tolist()}")

    def _destroy(self, e):
        """Free e's graphs (its alternative's too), sticky slots and A/B events."""
        self.memo = None
        if e.ab is not None:
            e.ab.close()
        if e.alt is not None:
            self._destroy(e.alt)
        self.free_slots.append(e.slot)
        try:
            self._cb.cuGraphExecDestroy(e.exec)
            self._cb.cuGraphDestroy(e.graph)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __del__(self):
        try:
            cb = self._cb
            cb.cuCtxSynchronize()
            for e in self.entries.values():
                self._destroy(e)
            cb.cuStreamDestroy(self.handle)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def check_all():
    """Raise for failed device checks of any plan's earlier replays (after a synchronize)."""
    for g in list(_plans_with_checks):
        g.check()


runtime.after_sync.append(check_all)


def _ok(res):
    return runtime.cu_ok(res, "CUDA graph call")
