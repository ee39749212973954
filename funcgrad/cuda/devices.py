"""How many GPUs numba-cuda sees (the "cuda" devices of funcgrad.devices and pmap)."""
from __future__ import annotations

from funcgrad.cuda import runtime


def gpu_count() -> int:
    """The number of usable GPUs: 0 without one, 1 under numba's CUDA simulator."""
    from funcgrad.cuda import usable
    if not usable():
        return 0
    cuda = runtime.load()
    if runtime.SIM:
        return 1
    return len(cuda.gpus)
