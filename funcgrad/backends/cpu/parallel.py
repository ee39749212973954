"""Two-way parallelism that survives a busy core: the caller and one helper thread take chunks
of a task from a shared counter until none is left, so the caller never waits for a chunk the
helper has not started, only for the one it is running.

Fork-join pools that split work over every core (OpenBLAS's, OpenMP's) wait for each part; on a
machine whose cores are shared, a part whose thread is descheduled stalls the whole call for a
scheduler tick or more: a 205-MFLOP product took 1.2 ms on two idle cores and ~90 ms with another
process on one of them (development VM). Here the worst case is the serial time plus one chunk
and a wake-up (~10-30 us). Used for the row blocks of large products (cpu_blas), the jobs of
the fused attention kernels (cpu_attention), and large fused kernels (which run without the
GIL) when FUNCGRAD_CPU_SPLIT_WORK asks for it.
"""
from __future__ import annotations

import itertools
import os
import threading

from funcgrad.compile import switches


class _Task:
    __slots__ = ("fns", "next", "left", "lock", "done", "error")

    def __init__(self, fns):
        self.fns = fns
        self.next = itertools.count().__next__   # atomic under the GIL
        self.left = len(fns)
        self.lock = threading.Lock()
        self.done = threading.Lock()
        self.done.acquire()
        self.error = None

    def work(self):
        """Runs chunks until none is left to take."""
        n = len(self.fns)
        while True:
            i = self.next()
            if i >= n:
                return
            try:
                self.fns[i]()
            except BaseException as e:   # handed to the caller, which raises it
                self.error = self.error or e
            with self.lock:
                self.left -= 1
                if self.left == 0:
                    self.done.release()


class Pair:
    """run(fns): every fns[i]() once, by the caller and a helper thread together."""

    def __init__(self):
        self._busy = threading.Lock()
        self._go = threading.Semaphore(0)
        self._task = None
        self._pid = None

    def _start(self):
        self._pid = os.getpid()
        threading.Thread(target=self._loop, name="funcgrad-cpu-helper", daemon=True).start()

    def _loop(self):
        while True:
            self._go.acquire()
            t = self._task
            if t is not None:
                t.work()

    def run(self, fns):
        if not self._busy.acquire(blocking=False):   # another thread is splitting: run inline
            for f in fns:
                f()
            return
        try:
            if self._pid != os.getpid():   # first use, or a forked child (threads are gone)
                self._start()
            t = self._task = _Task(fns)
            self._go.release()
            t.work()
            t.done.acquire()   # at most the chunk the helper is running
            self._task = None
            if t.error is not None:
                raise t.error
        finally:
            self._busy.release()


_pair = Pair()


def split_min_work() -> int | None:
    """Elements times ops of a fused kernel from which it runs in chunks on two threads;
    None (the default): never. Set with FUNCGRAD_CPU_SPLIT_WORK (e.g. 2097152).

    Off by default because it did not pay on the development VM (2 vCPUs that behave like
    one core's two hyperthreads: two single-thread products ran no faster side by side than
    one after the other, and a C2 step took 5.0-5.1 ms with serial kernels against 5.1-6.2 ms
    with Adam's kernels split). Re-measured 2026-11-25 (same VM, now two real cores: two
    one-thread products side by side ran in 1.47 ms against 1.40 for one): Adam's kernel is
    bound by its 3 divisions and square root (8-lane vectors, ~2.6 cycles an element: 0.37 ms
    for C2's 401,408-element weight on one thread), not by memory, so two cores could halve
    it; but the helper, asleep between tasks, wakes late on this VM: split in 2, 4 or 8
    chunks the kernel took 0.27 ms at best and 0.40 ms by the median. A product split by
    rows over the pair (one BLAS thread each) lost to OpenBLAS's pool on an idle machine
    (1.07-1.22 against 0.95 ms for 256x784x512) and to one thread on a busy one.
    """
    v = os.environ.get("FUNCGRAD_CPU_SPLIT_WORK")
    return int(v) if v and os.cpu_count() != 1 else None


# per split task: a late helper costs the caller at most 1/CHUNKS of the work
CHUNKS = int(os.environ.get("FUNCGRAD_CPU_CHUNKS", "4"))
switches.register(__name__, "CHUNKS")   # a change keys jit's shared cache apart


def bounds(n: int, chunks: int = CHUNKS) -> list:
    """[(lo, hi), ...]: [0, n) in up to `chunks` near-equal parts."""
    k = max(1, min(chunks, n))
    cut = [n * j // k for j in range(k + 1)]
    return [(a, b) for a, b in zip(cut, cut[1:]) if b > a]


def run_chunks(fns):
    """Every fns[i]() once, concurrently where a second core is free."""
    _pair.run(fns)
