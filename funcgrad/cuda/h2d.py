"""Host-to-device copies that do not wait for the GPU: small arrays go through pinned memory.

A copy from pageable host memory (cuMemcpyHtoD) returns only when the copy is done, and on the
legacy stream that means after every kernel and graph queued before it: a training loop that
hands numpy batches to a jitted step (or device_puts them) would wait for each step before it
could queue the next, so host and GPU never overlap. Arrays of up to SLOT bytes are copied
instead into one slot of a ring of pinned host buffers and from there with cuMemcpyHtoDAsync
on the legacy stream (ordered before everything queued after it, like the synchronous copy);
the host returns at once, and the numpy array may change right away (its bytes are in the
slot). A slot is written again only after the event recorded behind its last copy has passed.

Larger arrays, graph captures, the simulator and machines where libcuda cannot be reached by
ctypes keep the synchronous copy (numba's copy_to_device).
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

SLOT = 1 << 20     # bytes per slot: batches of token ids or small images
SLOTS = 16

_state: dict = {}
_lock = threading.Lock()


class _Ring:
    """SLOTS pinned buffers of SLOT bytes, each with the event of its last copy."""

    def __init__(self, cuda, lib):
        self.host = cuda.pinned_array(SLOTS * SLOT, dtype=np.uint8)
        self.base = self.host.ctypes.data
        self.lib = lib
        self.events = []
        for _ in range(SLOTS):
            ev = ctypes.c_void_p()
            if lib.cuEventCreate(ctypes.byref(ev), 2):   # CU_EVENT_DISABLE_TIMING
                raise RuntimeError("cuEventCreate failed")
            self.events.append(ev)
        self.used = [False] * SLOTS
        self.next = 0

    def put(self, dst: int, a: np.ndarray) -> bool:
        """Queue the copy of contiguous `a` to device address dst; False if it failed."""
        lib, k = self.lib, self.next
        self.next = (k + 1) % SLOTS
        ev = self.events[k]
        if self.used[k] and lib.cuEventSynchronize(ev):   # the slot's last copy has passed
            return False
        n = a.nbytes
        src = self.base + k * SLOT
        np.copyto(self.host[k * SLOT:k * SLOT + n], a.reshape(-1).view(np.uint8))
        if lib.cuMemcpyHtoDAsync_v2(ctypes.c_uint64(dst), ctypes.c_void_p(src),
                                    ctypes.c_size_t(n), None):
            return False
        if lib.cuEventRecord(ev, None):
            return False
        self.used[k] = True
        return True


def _ring(cuda):
    """The process's ring, made on first use (None when libcuda has no ctypes entry points)."""
    if "ring" not in _state:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            for f in (lib.cuEventCreate, lib.cuEventSynchronize, lib.cuEventRecord,
                      lib.cuMemcpyHtoDAsync_v2):
                f.restype = ctypes.c_int
            lib.cuEventSynchronize.argtypes = [ctypes.c_void_p]
            lib.cuEventRecord.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
            _state["ring"] = _Ring(cuda, lib)
        except Exception:  # noqa: BLE001 - no libcuda through ctypes: synchronous copies
            _state["ring"] = None
    return _state["ring"]


def put_async(cuda, dst: int, a: np.ndarray) -> bool:
    """Copy C-contiguous host array `a` to device address dst without waiting for the GPU;
    False when this copy must go the synchronous way (too large, or no ring)."""
    if not 0 < a.nbytes <= SLOT:
        return False
    with _lock:
        ring = _ring(cuda)
        return ring is not None and ring.put(dst, a)
