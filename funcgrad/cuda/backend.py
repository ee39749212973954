"""CudaBackend: the interface core.eval_prim calls (from_numpy, from_value, to_numpy, apply,
synchronize), plus exports for __cuda_array_interface__ and DLPack."""
from __future__ import annotations

import atexit
import os
import threading

import numpy as np

from funcgrad.backends.base import Backend
from funcgrad.cuda import arrays, blas, runtime
from funcgrad.cuda.arrays import DeviceBuffer, c_strides
from funcgrad.cuda.elementwise import contiguous
from funcgrad.cuda.lowering import lower

_warming = []   # the background warm-up thread, once started


def warm_up_in_background() -> None:
    """Start loading, on a daemon thread, what a first jit call on the GPU would otherwise load
    on its own path: numba-cuda's typing and lowering registries (done at the first kernel it
    compiles or loads from disk) and the cuBLAS bindings (nvmath-python's import). Called when
    the CUDA backend starts, so a script's set-up (data, parameters) overlaps it; on W2 the two
    took ~0.35 and ~0.33 s of the first call on a warm kernel cache (H200 host, 2026-11-24).
    Both happen under the locks their first use takes (numba's compiler lock, blas._load's),
    so a first call arriving meanwhile waits for them instead of doing them twice. A failure
    here is left for that first use to meet and report."""
    if runtime.SIM or _warming:
        return

    def work():
        try:
            from numba.cuda.core.compiler_lock import global_compiler_lock
            from numba.cuda.descriptor import cuda_target
            with global_compiler_lock:
                cuda_target.typing_context.refresh()
                cuda_target.target_context.refresh()
        except Exception:   # noqa: BLE001, S110 - the first kernel load meets it again
            pass
        try:
            blas.available(np.float32)
        except Exception:   # noqa: BLE001, S110 - blas._load reports it where it is used
            pass

    t = threading.Thread(target=work, name="funcgrad-cuda-warm-up", daemon=True)
    _warming.append(t)
    t.start()
    atexit.register(t.join, 10.0)   # a script that ends at once lets the imports finish first


class CudaBackend(Backend):
    """Eager execution on an NVIDIA GPU (or numba's simulator): one kernel per primitive."""
    name = "cuda"

    def __init__(self):
        cuda = runtime.load()
        if not runtime.SIM and not cuda.is_available():
            from funcgrad.cuda.probe import unavailable_reason
            raise RuntimeError("the CUDA backend needs a usable NVIDIA GPU: "
                               + unavailable_reason())
        self._cuda = cuda
        self.pool = arrays.pool()
        warm_up_in_background()

    # host <-> device ------------------------------------------------------------------------

    def from_numpy(self, a) -> DeviceBuffer:
        return arrays.from_host(np.asarray(a))

    def from_value(self, a) -> DeviceBuffer:
        """Small host values (literals, scalars, broadcast constants) hit a constant cache."""
        a = np.asarray(a)
        if a.size and all(s == 0 or n == 1 for s, n in zip(a.strides, a.shape)):
            c = arrays.const(a.reshape(-1)[0], a.dtype)
            return c.view(a.shape, (0,) * a.ndim, c.offset)
        return arrays.from_host(a)

    def to_numpy(self, buf: DeviceBuffer) -> np.ndarray:
        return arrays.to_host(contiguous(buf))

    # execution ------------------------------------------------------------------------------

    def apply(self, prim, bufs, params, aval) -> DeviceBuffer:
        out = lower(prim, bufs, params, aval)
        if out.shape != tuple(aval.shape) or out.dtype != aval.dtype:
            raise AssertionError(f"{prim.name}: CUDA lowering returned {out}, rule says {aval}")
        return out

    def synchronize(self):
        self._cuda.synchronize()
        for check in runtime.after_sync:   # device checks of replayed graphs, now complete
            check()

    # jit ------------------------------------------------------------------------------------

    def before_trace(self):
        """jit is about to trace for the GPU: start the compile server now (compile.start_early)
        so that its start-up overlaps tracing; FUNCGRAD_COMPILE_EARLY=0 leaves it to the dry
        run's first uncompiled kernel."""
        if os.environ.get("FUNCGRAD_COMPILE_EARLY", "1") != "0":
            from funcgrad.cuda.compile import start_early
            start_early()

    def compile(self, expr, consts, donate=()):
        """A Plan (fused kernels + lowered primitives) for an optimized jit expression."""
        from funcgrad.cuda.plan import Plan
        return Plan(self, expr, consts, donate)

    def planned_peak(self, compile_plan, avals) -> int:
        """The plan's static peak (planning it on zero-filled arguments if not yet planned)."""
        plan = compile_plan()
        if plan.layout is None and plan.static_ok:
            from funcgrad.core import Array
            from funcgrad.cuda.elementwise import fill
            args = [Array(fill(self.pool.empty(a.shape, a.dtype), 0), a, "cuda") for a in avals]
            while plan.layout is None and plan.static_ok:
                plan(args)
        return plan.peak_bytes(avals)

    def describe(self, compile_plan) -> str:
        return compile_plan().describe()

    # interop --------------------------------------------------------------------------------

    def export(self, buf: DeviceBuffer) -> DeviceBuffer:
        """A buffer laid out for export (C-contiguous), everything queued on it finished."""
        buf = contiguous(buf)
        self.synchronize()
        return buf

    def pointer(self, buf: DeviceBuffer) -> int:
        return buf.block.ptr() + buf.offset * buf.dtype.itemsize

    def cuda_array_interface(self, buf: DeviceBuffer) -> tuple[DeviceBuffer, dict]:
        buf = self.export(buf)
        return buf, {"shape": tuple(buf.shape), "typestr": buf.dtype.str, "strides": None,
                     "data": (self.pointer(buf) if buf.size else 0, False), "version": 3,
                     "stream": None}

    def dlpack_device(self) -> tuple[int, int]:
        if runtime.SIM:      # simulated device memory is host memory
            return (1, 0)
        return (2, self._cuda.get_current_device().id)

    def wrap_external(self, ptr, shape, strides, dtype, owner) -> DeviceBuffer:
        """A DeviceBuffer over foreign device memory (strides in elements; owner kept alive)."""
        dtype = np.dtype(dtype)
        strides = tuple(strides) if strides is not None else c_strides(shape)
        lo = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0 and n > 0)
        hi = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0 and n > 0)
        extent = (hi - lo + 1) if all(shape) else 0
        base = ptr + lo * dtype.itemsize
        cuda = self._cuda

        def make(dt):
            dt = np.dtype(dt)
            n = extent * dtype.itemsize // dt.itemsize
            return cuda.from_cuda_array_interface(
                {"shape": (n,), "typestr": dt.str, "data": (base, False), "version": 3,
                 "strides": None}, owner=owner, sync=False)

        blk = arrays.ExternalBlock(make, owner, base)
        return DeviceBuffer(blk, shape, strides, -lo, dtype)
