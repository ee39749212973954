"""jit on CUDA: a Plan of fused elementwise kernels and per-primitive kernels for one Expr.

The plan is built once per jitted signature. Steps run in dependency order: fused clusters
(fusion.py) and the remaining primitives through the lowering table (views launch nothing).

Calls: the first runs the steps eagerly (compiling and warming every kernel); the second runs
them under a `memplan.Recorder` and packs every intermediate into one arena by liveness; from
then on every call is *planned*: intermediates at their fixed arena offsets, results in one of
two plan-owned output sets (the set not holding any argument), so a training loop that feeds a
step's results to the next step neither allocates nor copies. On a GPU a planned call replays a
CUDA graph (graphs.py) bound to the arguments' addresses; under the simulator it runs the steps.
A result the user still holds when its set is about to be rewritten is first moved to memory of
its own (a copy only in that case).
"""
from __future__ import annotations

import logging
import os
import sys
import time
import weakref

import numpy as np

from funcgrad.compile import switches
from funcgrad.core import Array, Lit, Var, source_info
from funcgrad.cuda import (
    arrays,
    cast_gemm,
    concurrent,
    decode_attn,
    dynamic,
    epilogue,
    fusion,
    inplace,
    memplan,
    rows_fuse,
    rows_inplace,
    runtime,
)
from funcgrad.cuda.lowering import lower

_log = logging.getLogger("funcgrad")
_said: set = set()


def say_uncaptured(why: str) -> None:
    """Log once per reason that a plan runs its kernels one by one instead of replaying a CUDA
    graph (often 10-20x slower for a training step), with what fixes it."""
    key = why.split(":")[0][:120]
    if key in _said:
        return
    _said.add(key)
    hint = ""
    if "cuBLAS" in why or "cublas" in why:
        from funcgrad.cuda.blas import gemm_backend
        hint = (f" (GEMMs: {gemm_backend()}; nvmath-python's cuBLAS binding is capture-safe: "
                f"pip install nvmath-python)")
    _log.warning("funcgrad.cuda: a jitted plan could not be captured as a CUDA graph, so it "
                 "launches its kernels one by one: %s%s", why, hint)

# FUNCGRAD_PROFILE=1: plans run step by step with a synchronize around each step (no graphs) and
# add the seconds per step kind to PROFILE; profile_report() prints the largest.
PROFILE = {} if os.environ.get("FUNCGRAD_PROFILE") else None
switches.register(__name__, "PROFILE")   # a change keys jit's shared cache apart
# STEP_RANGES: None, or a function of a step's profile key returning a context manager that
# each step's launches run inside (no synchronizes, no graph), e.g. torch.profiler's
# record_function, so that a CUPTI profile puts each kernel's device time under its step's name
STEP_RANGES = None


def profile_report(top: int = 25) -> str:
    rows = sorted((PROFILE or {}).items(), key=lambda kv: -kv[1])[:top]
    total = sum((PROFILE or {}).values())
    return "\n".join([f"total {total * 1e3:.1f} ms"] + [f"{v * 1e3:9.2f} ms  {k}"
                                                         for k, v in rows])


class Plan:
    """Executable for one optimized expression on the "cuda" device."""

    def __init__(self, backend, expr, consts, donate=()):
        from funcgrad.compile.rewrites import attention_lse, dot_transpose
        from funcgrad.cuda import cudnn_attn
        expr = dot_transpose.rewrite(expr, consts)[0]   # (x . y)^T made as y . x
        # 16-bit training attention as cuDNN's pair: the backward reads the forward's o and lse
        expr = attention_lse.rewrite_saved(expr, consts, cudnn_attn.supports)[0]
        self.backend, self.expr, self.donate = backend, expr, tuple(donate)
        self.consts = [c.buf if isinstance(c, Array) and c.device == "cuda"
                       else backend.from_numpy(np.asarray(c)) for c in consts]
        self.steps = decode_attn.fuse(rows_inplace.fuse(cast_gemm.fuse(
            rows_fuse.fuse(epilogue.fuse(fusion.plan_steps(expr), expr), expr), expr), expr),
            expr)
        # stacked caches written in place: the stack's step copies only pieces not in place,
        # and the allocation of each update is noted when recorded (inplace.stacked_results)
        self.stacks, self.watch = inplace.stack_plan(self.steps, expr, self.donate)
        self.overrides = {w[0]: dynamic.stack_into for w in self.stacks.values()}
        self.kernels: dict = {}  # (fused source, layouts) -> compiled kernel
        last = {}   # last use of every variable, to release buffers early
        for i, (kind, s) in enumerate(self.steps):
            for x in _reads(kind, s):
                last[x] = i
        for o in expr.outs:
            if not isinstance(o, Lit):
                last[o] = len(self.steps)
        self.last_use = last
        self.free_after = [[] for _ in self.steps]
        for v, i in last.items():
            if i < len(self.steps):
                self.free_after[i].append(v)
        self.lits = {}
        self.calls = 0
        self.layout = None          # memplan.Layout once recorded
        self.static_ok = PROFILE is None and STEP_RANGES is None and not any(
            kind == "eqn" and s.prim.call_impl is not None for kind, s in self.steps)
        self.static_error = None
        self.graphs = None          # graphs.GraphSet on a real GPU
        self.graph_error = None
        self.compile_info = {}
        self.arena_raws = None
        self.out_sets = [None, None]
        self.live = [[], []]        # weak references to the result blocks of each set

    graph = property(lambda self: self.graphs if self.graphs and self.graphs.entries else None)

    def _lit(self, x):
        key = (x.val.dtype.str, x.val.item())
        b = self.lits.get(key)
        if b is None:
            b = self.lits[key] = self.backend.from_value(x.val)
        return b

    # calls ----------------------------------------------------------------------------------

    def __call__(self, args: list) -> list:
        g = self.graphs
        if g is not None:   # the steady state: replay a graph (kept short: it is per call)
            bufs = [a.buf for a in args]
            if self.layout.alias:
                if g.memo is not None:
                    g.memo.unhold()
                self._own_donated(bufs)
            if all(b.is_contiguous() for b in bufs):
                if g.failed():
                    g.check()
                try:
                    return g(bufs, args)
                except memplan.PlanMismatch as e:
                    self.static_ok, self.static_error, self.graphs = False, str(e), None
                except Exception as e:  # noqa: BLE001 - fall back to launching step by step
                    self.graph_error, self.graphs = repr(e), None
                    say_uncaptured(self.graph_error)
        self.calls += 1
        bufs = [a.buf for a in args]
        if not self.static_ok:
            if self.calls == 1:   # compiles every kernel: a progress line when that is slow
                from funcgrad.cuda.compile import prewarm
                self.compile_info = prewarm(self, bufs)
                return self._wrap(self._run(bufs, progress=_Progress(len(self.steps))))
            return self._wrap(self._run(bufs))
        bufs = [b if b.is_contiguous() else _contiguous(b) for b in bufs]
        if self.calls == 1:   # dry run: the memory plan and the kernels, nothing executed
            self._plan_dry(bufs)
        elif self.layout is None:   # the dry run failed: record a real run instead
            outs = self._record(bufs)
            if runtime.SIM:
                return self._wrap(outs)
            # run the step once more as planned, so that the results live in an output set
            # and the next call reads them in place (no staging copies of the parameters)
            del outs
            arrays.pool().empty_cache()    # the recording's blocks: the arena replaces them
        if self.layout is None:
            return self._wrap(self._run(bufs, progress=_Progress(len(self.steps))))
        if self.layout.alias:
            self._own_donated(bufs)
        try:
            return self._planned(bufs)
        except memplan.PlanMismatch as e:
            self.static_ok, self.static_error = False, str(e)
            return self._wrap(self._run(bufs))

    def replay(self, args: list, name: str = "") -> list | None:
        """The results of a call its graphs' loop memo predicted (replay.py, replay_inplace.py
        when arguments are donated: `name` names the jitted function in their deletion
        message), else None."""
        g = self.graphs
        m = None if g is None else g.memo
        return None if m is None else m.replay(g, args, name)

    def _own_donated(self, bufs):
        """Results are written in place only into memory nothing else can see: a donated
        argument whose block another view shares (a cached constant such as zeros(), an
        array's reshape, the same array passed twice) is copied first, in `bufs`."""
        seen: dict = {}     # id(block) -> how many arguments use it (one pass: W2 has ~230)
        for b in bufs:
            k = id(b.block)
            seen[k] = seen.get(k, 0) + 1
        for i in self.donate:
            b = bufs[i]
            blk = b.block
            # the DeviceBuffer, `blk` and getrefcount's argument: nothing else holds the block
            if sys.getrefcount(blk) > 3 or seen[id(blk)] > 1:
                bufs[i] = _contiguous(b, copy=True)

    def _wrap(self, outs):
        return [Array(b, o.aval, "cuda") for b, o in zip(outs, self.expr.outs)]

    def _plan_dry(self, bufs):
        """Record the step's allocations in a dry run (no memory, no launches) and compile its
        kernels in parallel (compile.py); sets self.layout unless the dry run failed."""
        from funcgrad.cuda.compile import prewarm
        rec = memplan.Recorder(arrays.pool(), fake=True)
        self.compile_info = prewarm(self, bufs, rec)
        outs = getattr(rec, "outs", None)
        if outs is not None and self.compile_info.get("recorded"):
            self._set_layout(rec, outs)

    def _set_layout(self, rec, outs):
        """The arena layout of recorder `rec` whose run returned `outs`, in-place results too."""
        anc = self._ancestors() if concurrent.CONCURRENT else None
        self.layout = memplan.pack(rec, [o.block for o in outs], anc)
        self.layout.alias = self._aliases(outs)

    def _record(self, bufs):
        """Run once under a Recorder and pack the arena (device checks deferred, as in a
        captured graph, so that buffer lifetimes match the later planned calls)."""
        rec = memplan.Recorder(arrays.pool())
        runtime._deferred = []
        try:
            with arrays.using_pool(rec):
                outs = self._run(bufs)
        finally:
            deferred, runtime._deferred = runtime._deferred, None
        self._set_layout(rec, outs)
        _raise_deferred(deferred)
        return outs

    def _ancestors(self) -> list[int]:
        """Per step, the steps it depends on through its operands (bit masks)."""
        made, anc = {}, []
        for i, (kind, s) in enumerate(self.steps):
            m = 0
            for x in _reads(kind, s):
                j = made.get(x)
                if j is not None:
                    m |= anc[j] | (1 << j)
            anc.append(m)
            for o in ([s.out] if kind == "eqn" else s.outputs):
                made[o] = i
        return anc

    def _aliases(self, outs) -> dict:
        """{allocation: donated argument} for results written in place into a donated argument:
        same shape and dtype, produced by a fused kernel that is the argument's last reader and
        reads it element for element (or read earlier only), or by an update primitive
        (inplace.py: dynamic_update_slice, scatter) whose operand is the argument (or a
        reshape of it) and which is the last step to read the argument or any view of it."""
        self.in_place_steps = {}
        if not self.donate:
            return {}
        expr, n_consts = self.expr, len(self.consts)
        made_by = {}
        for idx, (kind, s) in enumerate(self.steps):
            if kind == "fused":
                for o in s.outputs:
                    made_by[o] = (idx, s)
        updates = inplace.update_results(self.steps, expr)
        regions = {}
        counts: dict = {}
        for b in outs:
            if isinstance(b.block, memplan._RecBlock):
                counts[b.block.k] = counts.get(b.block.k, 0) + 1
        alias, taken = {}, set()
        for v, b in zip(expr.outs, outs):
            blk = b.block
            if (not isinstance(v, Var) or expr.outs.count(v) != 1
                    or not isinstance(blk, memplan._RecBlock) or counts[blk.k] != 1
                    or b.offset or not b.is_contiguous()):
                continue
            if v in self.stacks:   # a stack of updated runs of the argument (inplace.py)
                i = inplace.stack_alias(self.stacks[v], self.watch, taken, regions,
                                        self.in_place_steps)
                if i is not None:
                    alias[blk.k] = i
                continue
            if v in updates:   # an update primitive's result, through reshapes
                idx, i = updates[v]
                if i not in taken and i in self.donate:
                    alias[blk.k] = i
                    taken.add(i)
                    self.in_place_steps[idx] = i
                continue
            if v not in made_by:
                continue
            idx, c = made_by[v]
            for i in self.donate:
                x = expr.in_binders[n_consts + i]
                if (i in taken or x.aval != v.aval or x in expr.outs
                        or self.last_use.get(x, -1) > idx):
                    continue
                if self.last_use.get(x, -1) == idx and not _reads_flat(c, x):
                    continue
                alias[blk.k] = i
                taken.add(i)
                break
        self.layout.regions = regions
        return alias

    def _arena(self):
        """The arena's per-allocation views and the two output sets (made once, on demand)."""
        lay = self.layout
        if self.arena_raws is None:
            pool = arrays.pool()
            self.arena_block = pool.alloc(max(lay.arena_bytes, 1))
            base = self.arena_block.raw
            self.arena_raws = [memplan.sub_raw(base, p[1], n) if p[0] == "arena" else None
                               for p, n in zip(lay.places, lay.sizes)]
        return self.arena_raws

    def out_set(self, s: int, full: bool = False) -> list:
        """Result set s's memory per result slot; the slots of results planned in place into a
        donated argument stay None unless `full` (an argument that had to be copied in)."""
        lay = self.layout
        if self.out_sets[s] is None:
            self.out_sets[s] = ([None] * len(lay.out_sizes), [None] * len(lay.out_sizes))
        blocks, raws = self.out_sets[s]
        for j, n in enumerate(lay.out_sizes):
            if raws[j] is None and (full or j not in lay.in_place):
                blocks[j] = arrays.base_pool().alloc(n)
                raws[j] = blocks[j].raw
        return raws

    def choose_set(self, bufs) -> int:
        """The output set to write: one that holds no argument (0 if neither does)."""
        used = {b.block.set_id for b in bufs
                if type(b.block) is memplan.PlanBlock and b.block.owner is self}
        return 1 if 0 in used and 1 not in used else 0

    def release_set(self, s: int, stream_handle=0):
        """Before set s is written again: move results the user still holds out of it."""
        for ref in self.live[s]:
            blk = ref()
            if blk is not None and blk.owner is self and blk.set_id == s:
                blk.detach(arrays.pool(), lambda dst, src: _copy_raw(dst, src, stream_handle))
        self.live[s] = []

    def _planned(self, bufs):
        # graphs from the second call on: the first compiles and loads what the dry run left
        if (self.graphs is None and not runtime.SIM and self.graph_error is None
                and self.calls >= 2):
            from funcgrad.cuda.graphs import GraphSet
            self.graphs = GraphSet(self)
        if self.graphs is not None:
            if self.graphs.failed():
                self.graphs.check()
            try:
                return self.graphs(bufs)
            except memplan.PlanMismatch:
                raise
            except Exception as e:  # noqa: BLE001 - fall back to launching step by step
                self.graph_error, self.graphs = repr(e), None
                say_uncaptured(self.graph_error)
        s = self.choose_set(bufs)
        if any(type(b.block) is memplan.PlanBlock and b.block.owner is self
               and b.block.set_id == s for b in bufs):   # mixed sets: stage those in s
            bufs = [_contiguous(b, copy=True) if getattr(b.block, "set_id", None) == s else b
                    for b in bufs]
        self.release_set(s)
        pool = memplan.ArenaPool(self.layout, self._arena(), self.out_set(s), self, s,
                                 {i: bufs[i] for i in self.donate})
        runtime._deferred = []
        try:
            with arrays.using_pool(pool):
                outs = self._run(bufs)
        finally:
            deferred, runtime._deferred = runtime._deferred, None
        if pool.k != len(self.layout.sizes):
            raise memplan.PlanMismatch(f"{pool.k} allocations, the plan recorded "
                                       f"{len(self.layout.sizes)}")
        self.live[s] = [weakref.ref(b) for b in pool.out_blocks.values()]
        _raise_deferred(deferred)
        return self._wrap(outs)

    def peak_bytes(self, avals) -> int:
        """Arguments + constants + the arena + one result set: a planned call's peak."""
        from funcgrad.cuda.memplan import _align
        args = sum(_align(a.size * a.dtype.itemsize) for a in avals)
        consts = sum(_align(c.size * c.dtype.itemsize) for c in self.consts)
        if self.layout is None:      # not planned (host calls inside): no static figure
            return args + consts
        return args + consts + self.layout.arena_bytes + sum(
            n for j, n in enumerate(self.layout.out_sizes) if j not in self.layout.in_place)

    def planned_bytes(self) -> dict:
        """Device memory this plan holds: the arena, output sets, and graph staging buffers."""
        lay = self.layout
        if lay is None:
            return {}
        held = sum(r.nbytes for s in self.out_sets if s is not None for r in s[1]
                   if r is not None)
        staging = self.graphs.staging_bytes() if self.graphs is not None else 0
        return {"arena": lay.arena_bytes, "outputs": held, "staging": staging}

    # the steps ------------------------------------------------------------------------------

    def _run(self, arg_bufs: list, progress=None) -> list:
        """Launch every step (on runtime.stream()); returns the output buffers."""
        env = {}
        expr = self.expr
        for v, b in zip(expr.in_binders, self.consts + list(arg_bufs)):
            env[v] = b

        def read(x):
            return self._lit(x) if isinstance(x, Lit) else env[x]

        prof = PROFILE if PROFILE is not None and runtime._deferred is None else None
        tr = runtime._tracker
        for i, (kind, s) in enumerate(self.steps):
            if prof is not None:
                runtime.load().synchronize()
                t0 = time.perf_counter()
            rng = STEP_RANGES(_step_key(kind, s)) if STEP_RANGES is not None else None
            if rng is not None:
                rng.__enter__()
            runtime._step = i
            if tr is not None:
                tr.begin()
            if kind == "eqn":
                if s.prim.call_impl is not None:  # host calls (debug.print, pure_callback)
                    env[s.out] = self.backend.from_numpy(runtime.host_call(s, read))
                else:
                    fn = self.overrides.get(i) if self.overrides else None
                    ins = [read(x) for x in s.inputs]
                    env[s.out] = (lower(s.prim, ins, s.params, s.out.aval) if fn is None
                                  else fn(ins, s.params, s.out.aval))
                    if i in self.watch:   # the recorded allocation of a stacked update
                        blk = env[s.out].block
                        if isinstance(blk, memplan._RecBlock):
                            self.watch[i] = blk.k
            elif kind == "gemm":
                epilogue.run(s, env, read, self.kernels)
            elif kind == "rows":
                s.run(env, read)
            else:
                self._run_fused(s, env)
            if tr is not None:
                tr.end([read(x) for x in _reads(kind, s)],
                       [env[s.out]] if kind == "eqn" else [env[o] for o in s.outputs])
            if rng is not None:
                rng.__exit__(None, None, None)
            if prof is not None:
                runtime.load().synchronize()
                key = _step_key(kind, s)
                prof[key] = prof.get(key, 0.0) + time.perf_counter() - t0
            for v in self.free_after[i]:
                if v not in expr.in_binders:
                    env.pop(v, None)
            if progress is not None:
                progress(i + 1)
        if progress is not None:
            progress.done()
        runtime._step = None
        return [read(o) for o in expr.outs]

    def _run_fused(self, c, env):
        fusion.run_cluster(self.kernels, c, env)

    def describe(self) -> str:
        """The kernels this plan launches, in order (views are listed as such); once the
        memory plan is made, an update written into a donated argument says so."""
        lines = ["kernels:"]
        in_place = getattr(self, "in_place_steps", {})
        for i, (kind, s) in enumerate(self.steps):
            if kind == "eqn":
                where = (f" (in place: donated argument {in_place[i]})" if i in in_place
                         else "")
                lines.append(f"  {s.prim.name} -> {s.out.aval.str_short()}{where}")
            elif kind in ("gemm", "rows"):
                lines.append(f"  {s.describe()}")
            else:
                ops = "+".join(e.prim.name for e in s.eqns)
                lines.append(f"  fused[{ops}] {list(s.shape)}: "
                             f"{len(fusion.external_inputs(s))} in, {len(s.outputs)} out")
        return "\n".join(lines)


class _Progress:
    """A one-line progress report on stderr, shown once a first call has run for 1 s."""

    def __init__(self, total: int):
        self.total, self.t0, self.shown, self.last = total, time.perf_counter(), False, 0.0

    def __call__(self, i: int):
        now = time.perf_counter() - self.t0
        if now > 1.0 and now - self.last > 0.5:
            self.last, self.shown = now, True
            import sys
            sys.stderr.write(f"\rfuncgrad: compiling CUDA kernels, step {i}/{self.total} "
                             f"({now:.0f} s)")
            sys.stderr.flush()

    def done(self):
        if self.shown:
            import sys
            sys.stderr.write(f"\rfuncgrad: compiled {self.total} steps in "
                             f"{time.perf_counter() - self.t0:.1f} s\n")


def _step_key(kind, s) -> str:
    """A step's name in profiles: the primitive, the gemm/rows step's description or the fused
    cluster's operations, with the first result's type (a cluster: its shape)."""
    name = (s.prim.name if kind == "eqn" else s.describe()[:60] if kind in ("gemm", "rows")
            else "fused[" + "+".join(e.prim.name for e in s.eqns)[:150] + "]")
    out = (s.out.aval if kind == "eqn" else s.outputs[0].aval if kind in ("gemm", "rows")
           else None)
    return f"{name} {out.str_short() if out is not None else list(s.shape)}"


def _reads_flat(c, x) -> bool:
    """Cluster c reads x only element for element (never through a broadcast view)."""
    direct = bcast = False
    for e in c.eqns:
        if x in e.inputs:
            if fusion.is_view_bcast(e, c.members):
                bcast = True
            else:
                direct = True
    return direct and not bcast


def _reads(kind, s):
    if kind == "eqn":
        return [x for x in s.inputs if not isinstance(x, Lit)]
    if kind in ("gemm", "rows"):
        return s.inputs
    return fusion.external_inputs(s)


def _contiguous(buf, copy=False):
    """A C-contiguous buffer equal to buf (a copy when strided, or when copy=True)."""
    from funcgrad.cuda import elementwise as ew
    if copy:
        return ew.run("copy", [buf], buf.dtype)
    return ew.contiguous(buf)


def _copy_raw(dst, src, stream_handle=0):
    """Copy src's bytes into dst (both memplan/pool Raws) on the given stream."""
    n = min(dst.nbytes, src.nbytes)
    if runtime.SIM:
        dst.dev[:n].copy_to_device(src.dev[:n])
        return
    err = runtime.memcpy_dtod_async()(dst.ptr(), src.ptr(), n, stream_handle)
    if err:
        raise RuntimeError(f"cuMemcpyDtoDAsync of {n} bytes failed (CUresult {err})")


def _raise_deferred(deferred):
    for err, raise_if_bad, src in deferred:
        with source_info(src):
            raise_if_bad(err)
