"""The CPU backend: eager ops run each primitive's numpy impl (the reference semantics); jit
runs a CpuPlan (cpu_plan: fused numba kernels, BLAS, numpy)."""
from __future__ import annotations

import ctypes
import os
import sys

import numpy as np

from funcgrad.backends.base import Backend
from funcgrad.core import FuncgradError, user_frame_src
from funcgrad.prims import IndexOutOfRange
from funcgrad.backends.cpu import loops as cpu_loops  # noqa: F401 (registers how plans run loops: compiled bodies)
from funcgrad.backends.cpu import attention as cpu_attention  # noqa: F401 (registers its kernels)
from funcgrad.backends.cpu import indexing as cpu_indexing  # noqa: F401 (registers its kernel)
from funcgrad.backends.cpu.plan import CpuPlan


def _keep_freed_memory_mapped() -> bool:
    """Ask glibc to serve arrays up to 32 MiB from its heap and keep freed memory mapped.

    By default glibc maps each array above ~128 KiB afresh and returns it on free, so every
    new multi-MB intermediate of a training step page-faults on first write: ~1 ms per 2 MB on
    the development VM, more than the arithmetic (a GPT step on the CPU ran 70 -> 51 ms/step,
    C2 9.7 -> 7.5 ms). Freed memory then stays with the process for reuse (the peak is kept).
    FUNCGRAD_MALLOPT=0 leaves glibc's defaults. Returns whether the settings took effect.
    """
    if os.environ.get("FUNCGRAD_MALLOPT", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):   # not glibc (e.g. musl): nothing to tune
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(mallopt(m_mmap_threshold, 32 << 20) and mallopt(m_trim_threshold, 512 << 20))


MALLOPT_APPLIED = _keep_freed_memory_mapped()


class CpuBackend(Backend):
    """Buffers are read-only numpy arrays; every primitive runs its numpy impl."""
    name = "cpu"

    def from_numpy(self, a: np.ndarray) -> np.ndarray:
        out = np.array(a, copy=True)
        out.flags.writeable = False
        return out

    def from_value(self, a: np.ndarray) -> np.ndarray:
        return a

    def to_numpy(self, buf: np.ndarray) -> np.ndarray:
        return buf

    def apply(self, prim, bufs, params, aval):
        try:
            with np.errstate(all="ignore"):
                out = prim.impl(*bufs, **params)
        except IndexOutOfRange as e:
            raise IndexError(f"{e}\n  at {user_frame_src()}") from None
        except ValueError as e:
            raise FuncgradError(f"{e}\n  at {user_frame_src()}") from None
        out = np.asarray(out)
        if out.dtype != aval.dtype:
            out = out.astype(aval.dtype)
        if out.shape != aval.shape:
            raise AssertionError(f"{prim.name}: impl returned {out.shape}, rule says {aval}")
        if out.flags.writeable:
            out.flags.writeable = False
        return out

    def compile(self, expr, consts, donate=()):
        return CpuPlan(expr, consts, donate)
