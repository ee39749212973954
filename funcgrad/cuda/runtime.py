"""Loading numba.cuda, launch geometry, and the content-addressed kernel-source cache.

Every generated kernel is Python source written once to `<cache>/kernels/fgk_<sha>.py` and
imported from there, so numba's `cache=True` can keep its compiled code on disk across processes
(functions made by `exec` have no source file and cannot be disk-cached).
"""
from __future__ import annotations

import os
import sys
import threading
import traceback

import numpy as np

from funcgrad.backends import kernel_files

_lock = threading.Lock()
_cuda = None          # the numba.cuda module once loaded
SIM = False           # numba's CUDA simulator is active
_modules: dict[str, object] = {}
_kernels: dict[tuple, object] = {}

NUMPY_TOO_NEW = tuple(int(p) for p in np.__version__.split(".")[:2]) >= (2, 5)
NUMPY_MSG = (f"numpy {np.__version__} is too new for numba-cuda 0.30 (it calls np.row_stack, "
             "which numpy 2.5 removed); install 'numpy<2.5' to use the CUDA backend")


def load():
    """Import numba.cuda (once), silence its low-occupancy warning, note simulator mode."""
    global _cuda, SIM
    if _cuda is not None:
        return _cuda
    with _lock:
        if _cuda is not None:
            return _cuda
        if NUMPY_TOO_NEW:
            raise ImportError(NUMPY_MSG)
        from numba import cuda
        from numba.cuda.core import config
        config.CUDA_LOW_OCCUPANCY_WARNINGS = 0   # small eager ops are normal, not a mistake
        SIM = bool(config.ENABLE_CUDASIM)
        if SIM:
            _lock_simulated_shared_arrays()
        else:   # processes sharing the kernel cache compile each kernel signature once
            from funcgrad.cuda.compile_worker import share_compiles
            share_compiles()
            _numpy_typing_without_scipy()
        _cuda = cuda
    return _cuda


def _numpy_typing_without_scipy():
    """Load numba-cuda's numpy-array typing now, hiding scipy.linalg if not imported yet.

    numba-cuda loads it with the first kernel it compiles or loads from disk, and it imports
    scipy.linalg then only to learn whether a host BLAS exists for np.dot-style code (0.46 s of
    W2's 2.1 s first call on a warm kernel cache, H200 host, 2026-11-24). funcgrad's kernels
    never use it and the disk cache does not depend on it (the compile server skips it the same
    way); scipy stays importable afterwards."""
    if "scipy.linalg.cython_blas" in sys.modules or "numba.cuda.np.arraymath" in sys.modules:
        return   # nothing to save (numba's CPU typing may have imported scipy's top already)
    from funcgrad.cuda.compile_worker import NoScipy
    sys.meta_path.insert(0, NoScipy)
    try:
        import numba.cuda.np.arraymath  # noqa: F401
    except ImportError:   # a numba-cuda laid out otherwise: it loads what it needs later
        pass
    finally:
        sys.meta_path.remove(NoScipy)


def _lock_simulated_shared_arrays():
    """numba-cuda's simulator gives each block's `cuda.shared.array` call sites one array, made
    by an unlocked check-then-insert that every simulated thread runs: two threads arriving
    together could each make an array, and one thread then read and wrote memory the others
    never saw (rare wrong results in funcgrad's reductions and GEMM under the simulator). The
    call is made atomic here; on a GPU nothing changes."""
    from numba.cuda.simulator import kernelapi
    shared = kernelapi.FakeCUDAShared
    if getattr(shared.array, "_funcgrad_locked", False):
        return
    unlocked, lock = shared.array, threading.Lock()

    def array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None:   # dynamic shared memory, errors: as before
            return unlocked(self, shape, dtype, alignment)
        if isinstance(dtype, kernelapi.types.Type):
            dtype = kernelapi.numpy_support.as_dtype(dtype)
        caller = traceback.extract_stack(sys._getframe())[-2][0:2]   # the kernel's line
        with lock:
            res = self._allocations.get(caller)
            if res is None:
                res = self._allocations[caller] = np.empty(shape, dtype)
        return res
    array._funcgrad_locked = True
    shared.array = array


_memcpy_dtod = None


def memcpy_dtod_async():
    """copy(dst_address, src_address, nbytes, stream_handle) -> CUresult as an int.

    Straight through ctypes to libcuda when it can be loaded (a jit replay issues one per
    argument and result, so per-call conversion costs add up), else through cuda.bindings.
    """
    global _memcpy_dtod
    if _memcpy_dtod is None:
        import ctypes
        try:
            f = ctypes.CDLL("libcuda.so.1").cuMemcpyDtoDAsync_v2
        except (OSError, AttributeError):
            from cuda.bindings import driver as cb

            def f(dst, src, n, stream):
                return int(cb.cuMemcpyDtoDAsync(dst, src, n, stream)[0])
        else:
            f.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
            f.restype = ctypes.c_int
        _memcpy_dtod = f
    return _memcpy_dtod


def cu_ok(res, what: str = "CUDA driver call"):
    """Check a cuda.bindings result, (CUresult, *values) or a bare CUresult: raise naming
    `what` on an error; return the one value, or the tuple of values."""
    if not isinstance(res, tuple):
        res = (res,)
    if int(res[0]) != 0:
        raise RuntimeError(f"{what} failed: {res[0]}")
    return res[1] if len(res) == 2 else res[1:]


_graph_launch = None


def graph_launch():
    """launch(graph_exec_handle, stream_handle) -> CUresult as an int (ctypes to libcuda)."""
    global _graph_launch
    if _graph_launch is None:
        import ctypes
        try:
            f = ctypes.CDLL("libcuda.so.1").cuGraphLaunch
        except (OSError, AttributeError):
            from cuda.bindings import driver as cb

            def f(g, stream):
                return int(cb.cuGraphLaunch(g, stream)[0])
        else:
            f.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
            f.restype = ctypes.c_int
        _graph_launch = f
    return _graph_launch


def sim_requested() -> bool:
    """True when NUMBA_ENABLE_CUDASIM=1 (numba reads it once, at import)."""
    if _cuda is not None:
        return SIM
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0").strip() not in ("", "0")


# ---------------------------------------------------------------------------------------------
# launch geometry: real GPUs get wide grids; the simulator (one Python thread per CUDA thread)
# gets a handful of threads that stride over the work
# ---------------------------------------------------------------------------------------------

def threads_1d() -> int:
    return 8 if SIM else 256


def grid_1d(n: int) -> tuple[int, int]:
    """(blocks, threads) for a grid-stride loop over n items."""
    t = threads_1d()
    # a cap of 65536 blocks: W3 (2^26 elements, two per thread) 0.280 ms on an H200 against
    # 0.299 with 8192 (grid-stride iterations cost), 0.305 with 1056 (2026-11-24)
    cap = 2 if SIM else 65536
    return max(1, min(cap, -(-n // t))), t


def reduce_threads() -> int:
    """Threads per block of a block-per-row reduction (a power of two)."""
    return 8 if SIM else 256


# ---------------------------------------------------------------------------------------------
# kernel source cache
# ---------------------------------------------------------------------------------------------

HEADER = """\
# generated by funcgrad.cuda: do not edit (content-addressed; a new source gets a new file)
import cmath
import math
from numba import cuda
from numba.cuda.types import (float16, float32, float64, int8, uint8, int16, uint16, int32,
                              uint32, int64, uint64, boolean, complex64, complex128)
"""


def cache_dir() -> str:
    return os.path.join(kernel_files.cache_root(), "kernels")


def module_from_source(src: str):
    """Import generated kernel source from its content-addressed file (written once)."""
    load()
    from funcgrad.cuda.half import import_line  # bfloat16's conversions, where used
    return kernel_files.import_source(HEADER + import_line(src) + src, "kernels", "fgk",
                                      "funcgrad_kernels")


def kernel(key: tuple, make_source, name: str = "kernel"):
    """The compiled kernel for `key` (generated by make_source() on first use)."""
    k = _kernels.get(key)
    if k is None:
        k = _kernels[key] = getattr(module_from_source(make_source()), name)
    return k


def fused_kernel(source: str):
    """The compiled kernel of a fused cluster's generated source (shared by equal sources)."""
    return module_from_source(source.replace("{opts}", jit_opts())).kernel


def jit_opts() -> str:
    """Decorator options for generated kernels (the simulator rejects some)."""
    return "cache=True"


# ---------------------------------------------------------------------------------------------
# the launch stream and deferred device checks (a jit plan being captured as a CUDA graph)
# ---------------------------------------------------------------------------------------------

_stream = None     # numba Stream of the plan being captured or replayed; None: legacy default
_deferred = None   # list while capturing: device error flags to read back after each replay
_on_defer = None   # while a graph is captured: called with each deferred flag buffer
_keep = None       # list while a graph is captured: objects its nodes need alive (loop bodies)
_tracker = None    # concurrent.Tracker while a graph is captured: each step's memory
_step = None       # index of the plan step running (memplan.Recorder notes it)
_writes = None     # list while a captured step runs: device ranges it allocated or wrote


def note_write(ptr: int, nbytes: int) -> None:
    """Record that the step being captured writes [ptr, ptr + nbytes) (concurrent.py)."""
    if _writes is not None:
        _writes.append((ptr, ptr + nbytes))
dry_run = False    # compile.dry_run: launches are recorded, host reads return zeros
after_sync: list = []   # called after the host waited for the device (deferred graph checks)


def stream():
    """The stream kernels launch on: 0 (the legacy default stream) outside graph capture."""
    return _stream if _stream is not None else 0


def capturing() -> bool:
    return _deferred is not None


def host_call(e, read):
    """Run a host-call equation's callback (debug.print, pure_callback) on its operands and
    return its numpy result; in a first call's dry run nothing executes, so neither does the
    callback: zeros of its result stand in."""
    from funcgrad.core import Array
    if dry_run:
        return np.zeros(e.out.aval.shape, e.out.aval.dtype)
    ins = [Array(read(x), x.aval, "cuda") for x in e.inputs]
    return np.asarray(e.prim.call_impl(*ins, **e.params))


def check_now_or_later(err, raise_if_bad):
    """Run raise_if_bad(err) now, or, while a plan is captured, after each replay (the user's
    line is remembered now)."""
    if _deferred is None:
        raise_if_bad(err)
        return
    from funcgrad.core import user_frame_src
    _deferred.append((err, raise_if_bad, user_frame_src()))
    if _on_defer is not None:
        _on_defer(err)
