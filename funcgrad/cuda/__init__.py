"""funcgrad's CUDA backend: numba.cuda kernels for every primitive, pooled device memory.

numba is imported lazily (only here, in funcgrad.cuda), so CPU use never needs a GPU or a CUDA
toolkit. is_available() is True for a real NVIDIA GPU, which makes "cuda" the default device.
Under numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1, for tests on machines without a GPU)
device "cuda" can still be asked for explicitly; it is never the default there.

Example:
    >>> import funcgrad, funcgrad.cuda
    >>> if funcgrad.cuda.is_available():                                 # doctest: +SKIP
    ...     x = funcgrad.device_put([1.0, 2.0], "cuda")
    ...     print(funcgrad.cuda.memory_stats()["in_use"])
"""
from __future__ import annotations

import os

from funcgrad.cuda import runtime

__all__ = [
    "CudaBackend",
    "CudaOutOfMemoryError",
    "empty_cache",
    "gemm_backend",
    "gpu_available",
    "is_available",
    "memory_stats",
    "set_memory_limit",
    "simulator_active",
    "unavailable_reason",
    "usable",
]

_status: dict = {}


def _no_device_nodes() -> bool:
    """Linux without /dev/nvidia* (or WSL's /dev/dxg): skip importing numba to find no GPU."""
    import glob
    import sys
    return (sys.platform.startswith("linux") and not glob.glob("/dev/nvidia*")
            and not os.path.exists("/dev/dxg"))


def _probe() -> tuple[bool, bool, str]:
    """(usable, real_gpu, reason), computed once."""
    if "v" in _status:
        return _status["v"]
    if runtime.NUMPY_TOO_NEW:
        res = (False, False, runtime.NUMPY_MSG)
    elif not runtime.sim_requested() and _no_device_nodes():
        res = (False, False, "no NVIDIA device nodes (/dev/nvidia*) found")
    else:
        try:
            cuda = runtime.load()
        except ImportError as e:
            res = (False, False, f"numba-cuda could not be imported: {e}")
        else:
            if runtime.SIM:
                res = (True, False, "numba's CUDA simulator is active (NUMBA_ENABLE_CUDASIM=1): "
                       "device 'cuda' works, slowly, but is never the default")
            else:
                try:
                    ok = bool(cuda.is_available())
                except Exception as e:   # driver errors
                    ok, why = False, str(e)
                else:
                    why = "" if ok else "no CUDA driver or GPU was found"
                res = (ok, ok, why)
    _status["v"] = res
    return res


def is_available() -> bool:
    """True only for a real, usable NVIDIA GPU (what makes "cuda" the default device).

    Under numba's simulator this is False, yet device "cuda" can still be used explicitly
    (`funcgrad.device_put(x, "cuda")`): see simulator_active().
    """
    if runtime.sim_requested():
        return False
    return _probe()[1]


def gpu_available() -> bool:
    """Alias of is_available()."""
    return is_available()


def usable() -> bool:
    """True when device "cuda" can be used explicitly: a real GPU or the active simulator."""
    return _probe()[0]


def simulator_active() -> bool:
    """True when numba's CUDA simulator runs the kernels (NUMBA_ENABLE_CUDASIM=1)."""
    return runtime.sim_requested() and not runtime.NUMPY_TOO_NEW


def unavailable_reason() -> str:
    """Why there is no real GPU ("" when there is one)."""
    usable, real, why = _probe()
    return "" if real else why


def memory_stats() -> dict:
    """Device memory held by funcgrad's pool, in bytes.

    Keys: in_use (blocks backing live arrays), peak (most in_use ever), pool (free blocks cached
    for reuse), driver_allocs / driver_bytes (allocations held from the driver), limit.
    """
    from funcgrad.cuda.arrays import pool
    return pool().stats()


def empty_cache() -> None:
    """Return every cached (unused) block to the driver."""
    from funcgrad.cuda.arrays import pool
    pool().empty_cache()


def set_memory_limit(nbytes: int | None) -> None:
    """Cap the bytes funcgrad holds from the driver (None: no cap); beyond it, allocations raise
    CudaOutOfMemoryError after emptying the cache."""
    from funcgrad.cuda.arrays import pool
    pool().limit = None if nbytes is None else int(nbytes)


def __getattr__(name):
    if name == "CudaBackend":
        from funcgrad.cuda.backend import CudaBackend
        return CudaBackend
    if name == "gemm_backend":   # which GEMM dot_general runs (cuBLAS or numba) and why
        from funcgrad.cuda.blas import gemm_backend
        return gemm_backend
    if name == "CudaOutOfMemoryError":
        from funcgrad.cuda.arrays import CudaOutOfMemoryError
        return CudaOutOfMemoryError
    raise AttributeError(f"module 'funcgrad.cuda' has no attribute {name!r}")
