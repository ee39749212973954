"""Matrix products on the CPU: np.matmul into planned buffers, small ones on one BLAS thread,
large ones on OpenBLAS's threads or in row blocks on one BLAS thread each, shared by the caller
and cpu_parallel's helper, whichever ran faster lately where both give the same bits
(FUNCGRAD_CPU_BLAS_SPLIT=0: the threads only; with funcgrad.config's "cpu_blas_adaptive", on
its threads or on one, whichever has been faster lately).

OpenBLAS splits every product above ~2^18 multiply-adds over all its threads. On a machine
whose cores are shared, a small product then waits for a descheduled thread: a 128^3 product
took 38 us with one core free and 5 ms when another process held it (development VM, 2 cores).
Products under `serial_flops()` run on one thread (barely slower when the machine is idle);
larger ones run on the pool or as row blocks (`_pool_or_rows`): a late helper costs one block
where a late pool thread stalls the product. The way is fixed by the product's shape, so
reruns of a program give the same bits: OpenBLAS's pool and one thread round differently
(26,110 of the 32,768 elements of a 128x784x256 float32 product differ, by up to 6e-5), and
choosing between them by measured times had made same-seed training runs end with different
parameters.
`config.update("cpu_blas_adaptive", True)` opts into that choice (`Adaptive`): faster where
the cores are shared and busy, not bit-reproducible. Where numpy's BLAS is not a loaded
OpenBLAS, nothing changes.
"""
from __future__ import annotations

import ctypes
import math
import os
import threading

import numpy as np

from funcgrad.config import config

_SYMBOLS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_", "openblas_set_num_threads")
_set_threads = None     # ctypes function, or False when there is none
_get_threads = None
# a lost try of the slower way waits REGRET times its extra cost (in calls of the best way)
REGRET = 32


def serial_flops() -> int:
    """Products of fewer flops (2 m n k) run on one BLAS thread (FUNCGRAD_CPU_BLAS_SERIAL)."""
    return int(os.environ.get("FUNCGRAD_CPU_BLAS_SERIAL", str(1 << 25)))


def _openblas_paths() -> list:
    """The loaded OpenBLAS libraries' paths, sorted (numpy.libs' before scipy.libs')."""
    try:
        with open("/proc/self/maps") as f:
            return sorted({ln.split()[-1] for ln in f if "openblas" in ln.lower() and ".so" in ln})
    except OSError:
        return []


def _openblas():
    """(set_num_threads, get_num_threads) of the OpenBLAS numpy loaded, or (None, None)."""
    global _set_threads, _get_threads
    if _set_threads is None:
        _set_threads = _get_threads = False
        for p in _openblas_paths():
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


def other_blas_serial(marker: str) -> bool:
    """Sets every loaded OpenBLAS whose path holds `marker` (SciPy's, which numba's np.dot
    calls) to one thread. Two OpenBLAS pools on two cores spin against each other: with
    SciPy's at its default, the numpy products of a CS step ran 16 -> 245 ms. Returns
    whether one was set."""
    done = False
    for p in _openblas_paths():
        if marker not in p:
            continue
        try:
            lib = ctypes.CDLL(p)
        except OSError:
            continue
        for s in _SYMBOLS:
            if hasattr(lib, s):
                fn = getattr(lib, s)
                fn.argtypes, fn.restype = [ctypes.c_int], None
                fn(1)
                done = True
                break
    return done


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


class Adaptive:
    """Runs one of two ways of doing the same thing, the one that was faster lately.

    Each way's time is an exponential average of its runs. The slower way is tried again
    after `explore` calls, an interval that doubles (to 4096) each time it loses again and
    resets when it wins, so a way that collapses under load is rarely retried while the load
    lasts. A try of the slower way counts as its time now (not blended into its history), so
    it wins back at once when it is fast again. A run over 4x its way's average counts at
    once (a sudden stall switches), and the way it stalled is tried again 8 calls later: a
    single preempted product on a busy machine had kept C2's products on one thread for
    hundreds of steps (~0.4 ms a step) while the stall's time decayed out of the average.
    Any switch looks back 8 calls later: a few slow runs of the pool (2-4x, blended into its
    average) had put a C2 product on one thread for the 128-512 calls the pool's long-grown
    interval asked for (+0.45 ms each; 8% of C2's products ran serial in 1,000 idle steps).
    A lost try also waits at least REGRET times its extra cost, counted in calls of the best
    way, so that exploring costs at most ~1/REGRET of the time: on a busy machine (load 2-7 on
    this 2-core VM, 2026-11-25) a try of the pool stalled 14-19 ms against ~1.7 ms on one
    thread, and the doubling interval alone had let 66 such tries into 100 C2 steps (~9 ms a
    step); a try 10x slower now waits ~290 calls.
    """

    def __init__(self, ways, clock=None):
        import time
        self.ways = ways
        self.clock = clock or time.perf_counter
        self.avg = [None, None]
        self.best, self.since, self.explore = 0, 0, 8

    def __call__(self, *args):
        other = 1 - self.best
        k = other if (self.avg[other] is None and self.avg[self.best] is not None
                      or self.since >= self.explore) else self.best
        t = self.clock()
        self.ways[k](*args)
        dt = self.clock() - t
        a = self.avg[k]
        if k != self.best:   # a try of the other way: its time now
            self.avg[k] = dt
            self.since = 0
            b = self.avg[self.best]
            self.explore = 8 if dt < b else min(
                max(2 * self.explore, math.ceil(REGRET * (dt - b) / max(b, 1e-9))), 4096)
        else:
            stall = a is not None and dt > 4 * a
            self.avg[k] = dt if a is None or stall else 0.7 * a + 0.3 * dt
            self.since += 1
        if self.avg[other] is not None and self.avg[other] < self.avg[self.best]:
            if k == self.best:   # the best way slowed down: look back at it soon
                self.since, self.explore = 0, 8
            self.best = other


def matmul_into(m: int, n: int, k: int, held: bool = False):
    """f(a, b, out): np.matmul(a, b, out=out) of an (m, k) by (k, n) product: on one BLAS
    thread when it is small; when it is large, on OpenBLAS's threads, or, while
    config.cpu_blas_adaptive is set, on its threads or on one, whichever ran faster lately
    (Adaptive): on an idle machine the threads win (0.75 against 0.95 ms for 256x784x512 on
    the development VM), on a busy one they can stall for tens of ms. The switch is read at
    each call, so it applies to plans built before it changed.
    held: the caller holds one_thread() around every call (a loop of small products), so a
    small product calls np.matmul directly (2.6 instead of 3.6 us for 32x64x64)."""
    one = one_thread()
    if one is None or held and 2 * m * n * k < serial_flops():
        def run(a, b, out):
            np.matmul(a, b, out=out)
        return run

    def run_serial(a, b, out):
        with one:
            np.matmul(a, b, out=out)
    if 2 * m * n * k < serial_flops():
        return run_serial

    def run_pool(a, b, out):
        np.matmul(a, b, out=out)
    adaptive = Adaptive((run_pool, run_serial))
    values = config.__dict__["_values"]
    plain = run_pool
    if split_rows() and m >= 4 * SPLIT_MIN_ROWS:
        plain = _pool_or_rows(one, m, run_pool)

    def run(a, b, out):
        if values["cpu_blas_adaptive"]:
            adaptive(a, b, out)
        else:
            plain(a, b, out)
    return run


# (m, n, k, layouts, dtype) -> whether OpenBLAS's pool gives one thread's bits for it
_SAME_BITS: dict = {}


def _layout(a) -> str:
    return "C" if a.flags.c_contiguous else "F" if a.flags.f_contiguous else "A"


def _pool_or_rows(one, m, run_pool):
    """f(a, b, out): the pool or row blocks (`_rows_split`), whichever ran faster lately
    (Adaptive), where the two give the same bits; the pool alone where they do not.

    On an idle machine the pool wins (C2's 256x512x512 in 0.73 against 0.92 ms in 4 row
    blocks: one packing of b, not four); on a busy one it stalls (CS's products 16 -> 80-365
    ms a step) where row blocks lose one block. Whether the pool rounds as one thread does
    depends on how it splits the product (256x784x512 float32: along k, most elements differ;
    CS's and C2's k = 128, 256, 512, 1024 products: by rows and columns, the same bits), so
    each shape and layout is tried once on random operands: the choice never changes a bit.
    """
    split = _rows_split(one, m)
    ways = {}

    def run(a, b, out):
        key = (a.shape, b.shape, _layout(a), _layout(b), a.dtype.str)
        way = ways.get(key)
        if way is None:
            same = _SAME_BITS.get(key)
            if same is None:
                same = _SAME_BITS[key] = _pool_is_serial(a, b, run_pool, split)
            way = ways[key] = Adaptive((run_pool, split)) if same else run_pool
        way(a, b, out)
    return run


def _pool_is_serial(a, b, run_pool, split) -> bool:
    """Whether the pool and row blocks give the same bits for operands shaped and laid out as
    a and b (random ones: equal bits by chance would need every element to round alike)."""
    rng = np.random.default_rng(0)

    def like(x):
        r = rng.standard_normal(x.shape).astype(x.dtype)
        return np.asfortranarray(r) if _layout(x) == "F" else r
    ra, rb = like(a), like(b)
    one, two = (np.empty((a.shape[0], b.shape[1]), np.result_type(a, b)) for _ in range(2))
    run_pool(ra, rb, one)
    split(ra, rb, two)
    return bool(np.array_equal(one, two))


# row blocks of a product have at least this many rows, and products of fewer than four such
# blocks stay on the pool: each block packs b again (C2's 256-784 row products ran 8-14%
# slower in blocks on an idle VM; CS's 1,024-row ones were no slower)
SPLIT_MIN_ROWS = 256


def split_rows() -> bool:
    """Whether large products run as row blocks on one BLAS thread each, shared by the caller
    and cpu_parallel's helper (FUNCGRAD_CPU_BLAS_SPLIT, default on; 0: OpenBLAS's pool)."""
    return os.environ.get("FUNCGRAD_CPU_BLAS_SPLIT", "1") != "0" and os.cpu_count() != 1


def _rows_split(one, m):
    """f(a, b, out): rows of a (m, k) by (k, n) product in blocks, each one a one-thread
    np.matmul, taken by the caller and the helper thread from a shared counter.

    Each row's arithmetic is the one-thread product's whichever thread and block computes it,
    so results are one thread's bits on every run (OpenBLAS's pool splits some products along
    k: 256x784x512 float32 differs from one thread in most elements). The pool waits for all
    its threads; a descheduled one (the dev VM's 2 cores are shared) stalled CS's products
    (~16 ms a step on an idle machine) to 80-190 ms a step; here a late helper costs one block.
    """
    from funcgrad.backends.cpu import parallel as cpu_parallel
    parts = cpu_parallel.bounds(m, min(cpu_parallel.CHUNKS, m // SPLIT_MIN_ROWS))

    def run(a, b, out):
        with one:
            cpu_parallel.run_chunks([lambda lo=lo, hi=hi: np.matmul(a[lo:hi], b, out=out[lo:hi])
                                     for lo, hi in parts])
    return run
