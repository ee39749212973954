"""jit on CUDA: a Plan of fused elementwise kernels and per-primitive kernels for one Expr.

The plan is built once per jitted signature. Steps run in dependency order: fused clusters
(fusion.py) and the remaining primitives through the lowering table (views launch nothing).
Each intermediate buffer goes back to the pool after its last use.
"""
from __future__ import annotations

import os
import time

import numpy as np

from ..core import Array, Lit
from . import arrays, fusion, runtime
from . import elementwise as ew
from .lowering import lower

# FUNCGRAD_PROFILE=1: plans run step by step with a synchronize around each step (no graphs) and
# add the seconds per step kind to PROFILE; profile_report() prints the largest.
PROFILE = {} if os.environ.get("FUNCGRAD_PROFILE") else None


def profile_report(top: int = 25) -> str:
    rows = sorted((PROFILE or {}).items(), key=lambda kv: -kv[1])[:top]
    total = sum((PROFILE or {}).values())
    return "\n".join([f"total {total * 1e3:.1f} ms"] + [f"{v * 1e3:9.2f} ms  {k}"
                                                         for k, v in rows])


class Plan:
    """Executable for one optimized expression on the "cuda" device."""

    def __init__(self, backend, expr, consts, donate=()):
        self.backend, self.expr = backend, expr
        self.consts = [c.buf if isinstance(c, Array) and c.device == "cuda"
                       else backend.from_numpy(np.asarray(c)) for c in consts]
        self.steps = fusion.plan_steps(expr)
        self.kernels: dict = {}  # (cluster index, layouts) -> compiled kernel
        # last use of every variable, to release buffers early
        last = {}
        for i, (kind, s) in enumerate(self.steps):
            for x in _reads(kind, s):
                last[x] = i
        for o in expr.outs:
            if not isinstance(o, Lit):
                last[o] = len(self.steps)
        self.free_after = [[] for _ in self.steps]
        for v, i in last.items():
            if i < len(self.steps):
                self.free_after[i].append(v)
        self.lits = {}
        self.calls = 0
        self.graph = None
        self.graph_error = None
        # graphs need a real GPU, and no host work (debug.print) in the middle of the plan
        self.graph_ok = not runtime.SIM and PROFILE is None and not any(
            kind == "eqn" and s.prim.call_impl is not None for kind, s in self.steps)

    def _lit(self, x):
        key = (x.val.dtype.str, x.val.item())
        b = self.lits.get(key)
        if b is None:
            b = self.lits[key] = self.backend.from_value(x.val)
        return b

    def __call__(self, args: list) -> list:
        if self.graph is not None:
            return self._replay(args)
        self.calls += 1
        if self.calls >= 2 and self.graph_ok and self._graph_pays(args):
            # first call compiled and warmed every kernel; capture the second, then replay
            try:
                self._capture(args)
            except Exception as e:  # noqa: BLE001 - fall back to launching step by step
                self.graph_ok, self.graph_error = False, repr(e)
            else:
                return self._replay(args)
        return [Array(b, o.aval, "cuda") for b, o in zip(self._run([a.buf for a in args]),
                                                         self.expr.outs)]

    def _run(self, arg_bufs: list) -> list:
        """Launch every step (on runtime.stream()); returns the output buffers."""
        env = {}
        expr = self.expr
        for v, b in zip(expr.in_binders, self.consts + list(arg_bufs)):
            env[v] = b

        def read(x):
            return self._lit(x) if isinstance(x, Lit) else env[x]

        prof = PROFILE if PROFILE is not None and runtime._deferred is None else None
        for i, (kind, s) in enumerate(self.steps):
            if prof is not None:
                runtime.load().synchronize()
                t0 = time.perf_counter()
            if kind == "eqn":
                if s.prim.call_impl is not None:  # effectful host calls (debug.print)
                    ins = [Array(read(x), x.aval, "cuda") for x in s.inputs]
                    res = s.prim.call_impl(*ins, **s.params)
                    env[s.out] = self.backend.from_numpy(np.asarray(res))
                else:
                    env[s.out] = lower(s.prim, [read(x) for x in s.inputs], s.params,
                                       s.out.aval)
            else:
                self._run_fused(i, s, env)
            if prof is not None:
                runtime.load().synchronize()
                name = s.prim.name if kind == "eqn" else "fused"
                out = s.out.aval if kind == "eqn" else None
                key = f"{name} {out.str_short() if out is not None else list(s.shape)}"
                prof[key] = prof.get(key, 0.0) + time.perf_counter() - t0
            for v in self.free_after[i]:
                if v not in expr.in_binders:
                    env.pop(v, None)
        return [read(o) for o in expr.outs]

    # CUDA graphs ---------------------------------------------------------------------------

    def _graph_pays(self, args) -> bool:
        """A replay copies inputs in and outputs out (~3 TB/s); it saves ~20 us of launch
        overhead per step. Big elementwise programs (W3) run faster launched directly."""
        nbytes = sum(a.aval.size * a.aval.dtype.itemsize for a in args) + sum(
            o.aval.size * o.aval.dtype.itemsize for o in self.expr.outs)
        return nbytes / 3e12 < 20e-6 * len(self.steps)

    def _capture(self, args):
        from cuda.bindings import driver as cb
        cuda = runtime.load()
        self.pool = arrays.SubPool(arrays.pool())
        with arrays.using_pool(self.pool):
            self.in_bufs = [self.pool.empty(a.aval.shape, a.aval.dtype) for a in args]
            for dst, a in zip(self.in_bufs, args):   # warm the copy kernels, fill the inputs
                ew.run("copy", [a.buf], a.aval.dtype, out=dst)
        # a non-blocking stream: capture may not touch the legacy default stream, so replays
        # order themselves against it with events instead
        self.handle = _ok(cb.cuStreamCreate(cb.CUstream_flags.CU_STREAM_NON_BLOCKING.value))
        self.stream = cuda.external_stream(int(self.handle))
        flags = cb.CUevent_flags.CU_EVENT_DISABLE_TIMING.value
        self.ev_in, self.ev_out = _ok(cb.cuEventCreate(flags)), _ok(cb.cuEventCreate(flags))
        cuda.synchronize()
        runtime._stream, runtime._deferred = self.stream, []
        handle = self.handle
        _ok(cb.cuStreamBeginCapture(handle, cb.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED))
        try:
            with arrays.using_pool(self.pool):
                outs = self._run(self.in_bufs)
        finally:
            err, graph = cb.cuStreamEndCapture(handle)
            self.deferred, runtime._stream, runtime._deferred = runtime._deferred, None, None
        _ok((err,))
        self.out_bufs = outs
        # replays copy through raw addresses: (address, bytes, shape) of the plan's own buffers
        ptr = self.backend.pointer
        self.in_addr = [(ptr(b), b.size * b.dtype.itemsize, b.shape) for b in self.in_bufs]
        self.out_addr = [(ptr(b), b.size * b.dtype.itemsize, b.is_contiguous())
                         for b in self.out_bufs]
        self.stream_int = int(self.handle)
        self._graph_obj = graph
        self.graph = _ok(cb.cuGraphInstantiate(graph, 0))

    def __del__(self):
        if getattr(self, "graph", None) is None:
            return
        try:
            from cuda.bindings import driver as cb
            cb.cuStreamSynchronize(self.handle)
            cb.cuGraphExecDestroy(self.graph)
            cb.cuGraphDestroy(self._graph_obj)
            cb.cuEventDestroy(self.ev_in)
            cb.cuEventDestroy(self.ev_out)
            cb.cuStreamDestroy(self.handle)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def _replay(self, args):
        from cuda.bindings import driver as cb
        runtime._stream = self.stream
        legacy = cb.CUstream(0)
        try:
            _ok(cb.cuEventRecord(self.ev_in, legacy))   # after the eager work queued so far
            _ok(cb.cuStreamWaitEvent(self.handle, self.ev_in, 0))
            copy, ptr, h = runtime.memcpy_dtod_async(), self.backend.pointer, self.stream_int
            for dst, (addr, n, shape), a in zip(self.in_bufs, self.in_addr, args):
                src = a.buf
                if n and src.shape == shape and src.is_contiguous():
                    _copy_ok(copy(addr, ptr(src), n, h), n)
                elif n:   # a strided view: the elementwise copy kernel, on the plan's stream
                    ew.run("copy", [src], dst.dtype, out=dst)
            _ok(cb.cuGraphLaunch(self.graph, self.handle))
            outs = []
            pool = arrays.pool()
            for b, (addr, n, contig), o in zip(self.out_bufs, self.out_addr, self.expr.outs):
                dst = pool.empty(o.aval.shape, o.aval.dtype)
                if n and contig:
                    _copy_ok(copy(ptr(dst), addr, n, h), n)
                elif n:
                    ew.run("copy", [b], dst.dtype, out=dst)
                outs.append(dst)
            _ok(cb.cuEventRecord(self.ev_out, self.handle))  # later eager work waits for us
            _ok(cb.cuStreamWaitEvent(legacy, self.ev_out, 0))
        finally:
            runtime._stream = None
        for err, raise_if_bad, src in self.deferred:
            from ..core import source_info
            with source_info(src):
                raise_if_bad(err)
        return [Array(b, o.aval, "cuda") for b, o in zip(outs, self.expr.outs)]

    def _run_fused(self, i, c, env):
        inputs = fusion.external_inputs(c)
        bufs = [env[v] for v in inputs]
        layout = tuple(fusion.layout_of(v, b, c.shape) for v, b in zip(inputs, bufs))
        key = (i, layout)
        k = self.kernels.get(key)
        if k is None:
            fk = fusion.FusedKernel(c, dict(zip(inputs, layout)))
            mod = runtime.module_from_source(fk.source.replace("{opts}", runtime.jit_opts()))
            k = self.kernels[key] = (fk, mod.kernel)
        fk, kern = k
        pool = arrays.pool()
        outs = [pool.empty(o.aval.shape, o.aval.dtype) for o in c.outputs]
        n = int(np.prod(c.shape))
        blocks, threads = runtime.grid_1d(n)
        kern[blocks, threads, runtime.stream()](*fk.args(bufs, outs))
        for o, b in zip(c.outputs, outs):
            env[o] = b

    def describe(self) -> str:
        """The kernels this plan launches, in order (views are listed as such)."""
        lines = ["kernels:"]
        for i, (kind, s) in enumerate(self.steps):
            if kind == "eqn":
                lines.append(f"  {s.prim.name} -> {s.out.aval.str_short()}")
            else:
                ops = "+".join(e.prim.name for e in s.eqns)
                lines.append(f"  fused[{ops}] {list(s.shape)}: "
                             f"{len(fusion.external_inputs(s))} in, {len(s.outputs)} out")
        return "\n".join(lines)


def _reads(kind, s):
    if kind == "eqn":
        return [x for x in s.inputs if not isinstance(x, Lit)]
    return fusion.external_inputs(s)


def _copy_ok(err: int, nbytes: int):
    if err:
        raise RuntimeError(f"cuMemcpyDtoDAsync of {nbytes} bytes in a graph replay failed "
                           f"(CUresult {err})")


def _ok(res):
    """Check a cuda.bindings (CUresult, *values) tuple; return the value."""
    if not isinstance(res, tuple):
        res = (res,)
    err = res[0]
    if int(err) != 0:
        raise RuntimeError(f"CUDA graph call failed: {err}")
    return res[1] if len(res) == 2 else res[1:]
