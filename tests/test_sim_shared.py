"""numba's simulator: every simulated thread of a block gets the same cuda.shared.array."""
from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

import funcgrad.cuda as fcuda


def _grab(shared, out, i, barrier):
    barrier.wait()
    out[i] = shared.array(16, np.float32)   # one call site: one array for the block


@pytest.mark.skipif(not fcuda.simulator_active(), reason="NUMBA_ENABLE_CUDASIM=1 only")
def test_threads_of_a_block_share_one_array():
    from funcgrad.cuda import runtime
    runtime.load()
    from numba.cuda.simulator.kernelapi import FakeCUDAShared
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(200):
            shared, n = FakeCUDAShared(0), 16
            out, barrier = [None] * n, threading.Barrier(n)
            threads = [threading.Thread(target=_grab, args=(shared, out, i, barrier))
                       for i in range(n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert all(a is out[0] for a in out)
    finally:
        sys.setswitchinterval(old)
