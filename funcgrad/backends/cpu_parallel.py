"""Two-way parallelism that survives a busy core: one helper thread, and the caller steals back
the helper's half when the helper has not started it by the time the caller's half is done.

Fork-join pools that split work over every core (OpenBLAS's, OpenMP's) wait for each part; on a
machine whose cores are shared, a part whose thread is descheduled stalls the whole call for a
scheduler tick or more: a 205-MFLOP product took 1.2 ms on two idle cores and ~90 ms with another
process on one of them (development VM). Here nothing waits for a thread that never ran: the
worst case is the serial time plus a wake-up (~10-30 us), so only work of a millisecond or so is
split (matrix products, large fused kernels; both run without the GIL).
"""
from __future__ import annotations

import os
import threading


class _Task:
    __slots__ = ("fn", "claim", "done", "error")

    def __init__(self, fn):
        self.fn = fn
        self.claim = threading.Lock()
        self.done = threading.Lock()
        self.done.acquire()
        self.error = None


class Pair:
    """run(fa, fb): fa() here, fb() on the helper thread, or here too if the helper is late."""

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
            if t.claim.acquire(blocking=False):
                try:
                    t.fn()
                except BaseException as e:   # handed to the caller, which raises it
                    t.error = e
                t.done.release()

    def run(self, fa, fb):
        if not self._busy.acquire(blocking=False):   # another thread is splitting: run inline
            fa()
            fb()
            return
        try:
            if self._pid != os.getpid():   # first use, or a forked child (threads are gone)
                self._start()
            t = self._task = _Task(fb)
            self._go.release()
            try:
                fa()
            finally:
                if t.claim.acquire(blocking=False):   # the helper never started: steal it
                    t.fn()
                else:
                    t.done.acquire()
                    if t.error is not None:
                        raise t.error
        finally:
            self._busy.release()


_pair = Pair()


def split_min_flops() -> int | None:
    """Work (flops) from which a product or kernel is split in two; None: never
    (FUNCGRAD_CPU_SPLIT=0). Set with FUNCGRAD_CPU_SPLIT_FLOPS."""
    if os.environ.get("FUNCGRAD_CPU_SPLIT", "1") == "0" or os.cpu_count() == 1:
        return None
    return int(os.environ.get("FUNCGRAD_CPU_SPLIT_FLOPS", str(1 << 25)))


def split_min_work() -> int | None:
    """Elements times ops of a fused kernel from which it is split in two (~0.2 ms of work);
    None: never. Set with FUNCGRAD_CPU_SPLIT_WORK."""
    if split_min_flops() is None:
        return None
    return int(os.environ.get("FUNCGRAD_CPU_SPLIT_WORK", str(1 << 21)))


def run_pair(fa, fb):
    """fa() and fb(), concurrently where a second core is free."""
    _pair.run(fa, fb)
