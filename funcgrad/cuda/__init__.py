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

from funcgrad.cuda import runtime  # noqa: F401

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

from funcgrad.cuda.probe import (  # noqa: F401
    _status,
    gpu_available,
    is_available,
    simulator_active,
    unavailable_reason,
    usable,
)


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
