"""Matrix products on the CPU: np.matmul into planned buffers, small ones on one BLAS thread,
large ones in blocks shared by two threads (cpu_parallel) rather than on OpenBLAS's pool.

OpenBLAS splits every product above ~2^18 multiply-adds over all its threads. On a machine
whose cores are shared, a small product then waits for a descheduled thread: a 128^3 product
took 38 us with one core free and 5 ms when another process held it (development VM, 2 cores).
Products under `serial_flops()` run on one thread (barely slower when the machine is idle);
larger ones are split in blocks that the caller and a helper thread take in turn
(cpu_parallel), so a descheduled helper delays the product by one block at most. Where numpy's BLAS is not a loaded OpenBLAS, nothing changes.
"""
from __future__ import annotations

import ctypes
import os
import threading

import numpy as np

from . import cpu_parallel

_SYMBOLS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_", "openblas_set_num_threads")
_set_threads = None     # ctypes function, or False when there is none
_get_threads = None


def serial_flops() -> int:
    """Products of fewer flops (2 m n k) run on one BLAS thread (FUNCGRAD_CPU_BLAS_SERIAL)."""
    return int(os.environ.get("FUNCGRAD_CPU_BLAS_SERIAL", str(1 << 25)))


def _openblas():
    """(set_num_threads, get_num_threads) of the OpenBLAS numpy loaded, or (None, None)."""
    global _set_threads, _get_threads
    if _set_threads is None:
        _set_threads = _get_threads = False
        try:
            with open("/proc/self/maps") as f:
                paths = {ln.split()[-1] for ln in f if "openblas" in ln.lower() and ".so" in ln}
        except OSError:
            paths = set()
        for p in sorted(paths):
            try:
                lib = ctypes.CDLL(p)
            except OSError:
                continue
            for s in _SYMBOLS:
                if hasattr(lib, s) and hasattr(lib, s.replace("set_", "get_")):
                    _set_threads = getattr(lib, s)
                    _get_threads = getattr(lib, s.replace("set_", "get_"))
                    _set_threads.argtypes, _set_threads.restype = [ctypes.c_int], None
                    _get_threads.argtypes, _get_threads.restype = [], ctypes.c_int
                    break
            if _set_threads:
                break
    return (_set_threads or None), (_get_threads or None)


class _OneThread:
    """Holds OpenBLAS at one thread while any caller (of any Python thread) is inside; the
    pool size it found comes back when the last one leaves."""

    def __init__(self, setn, getn):
        self.setn, self.getn = setn, getn
        self.lock = threading.Lock()
        self.depth = 0
        self.saved = 1

    def __enter__(self):
        with self.lock:
            if self.depth == 0:
                self.saved = self.getn()
                if self.saved != 1:
                    self.setn(1)
            self.depth += 1

    def __exit__(self, *exc):
        with self.lock:
            self.depth -= 1
            if self.depth == 0 and self.saved != 1:
                self.setn(self.saved)


_one_thread = None


def one_thread():
    """A context holding numpy's OpenBLAS at one thread, or None without OpenBLAS."""
    global _one_thread
    if _one_thread is None:
        setn, getn = _openblas()
        _one_thread = _OneThread(setn, getn) if setn is not None else False
    return _one_thread or None


def matmul_into(m: int, n: int, k: int):
    """f(a, b, out): np.matmul(a, b, out=out) of an (m, k) by (k, n) product: on one BLAS
    thread when it is small, in blocks over two threads with one BLAS thread each
    (cpu_parallel) when it is large, else on OpenBLAS's own threads."""
    flops = 2 * m * n * k
    split = cpu_parallel.split_min_flops()
    one = one_thread()
    if one is not None and split is not None and flops >= split and max(m, n) >= 32:
        return _split(m, n, one)
    if one is None or flops >= serial_flops():
        def run(a, b, out):
            np.matmul(a, b, out=out)
        return run

    def run_serial(a, b, out):
        with one:
            np.matmul(a, b, out=out)
    return run_serial


def _split(m, n, one):
    """Row blocks of the product (column blocks, when there are more columns) shared by two
    threads (cpu_parallel), each on one BLAS thread."""
    if m >= n:
        parts = cpu_parallel.bounds(m)

        def chunks(a, b, out):
            return [lambda lo=lo, hi=hi: np.matmul(a[lo:hi], b, out=out[lo:hi])
                    for lo, hi in parts]
    else:
        parts = cpu_parallel.bounds(n)

        def chunks(a, b, out):
            return [lambda lo=lo, hi=hi: np.matmul(a, b[:, lo:hi], out=out[:, lo:hi])
                    for lo, hi in parts]

    def run_split(a, b, out):
        with one:
            cpu_parallel.run_chunks(chunks(a, b, out))
    return run_split
