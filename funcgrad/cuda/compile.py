"""Parallel kernel compilation for a plan's first call on a real GPU.

numba compiles a kernel the first time it is launched with new argument types, one after the
other, ~0.2-0.5 s each: a GPT step's few hundred kernels took over a minute. Before a plan's
first call, `prewarm` runs the plan *dry*: every launch is recorded (kernel and argument
types) instead of executed, device checks and host reads are skipped. The kernels not yet
compiled are then compiled by a pool of worker processes (spawned, each with its own CUDA
context), which write them to numba's disk cache (every funcgrad kernel is `cache=True`); the
real first call then loads them from the cache. Kernels are grouped by function so that no two
workers write the same cache index.

Workers are plain `python -c` subprocesses running compile_worker.py's source (not
multiprocessing, whose spawn start method would re-run an unguarded user script; and without
importing funcgrad, which slowed their start-up) fed one pickled group at a time on stdin, the
longest expected first, each to whichever worker is free (a fixed split by expected cost left
one worker with two of the slowest kernels). FUNCGRAD_COMPILE_WORKERS sets their number
(default: CPU count, at most 16; 0 or 1 turns the pool off).
"""
from __future__ import annotations

import os
import sys
import time

from . import runtime

MIN_KERNELS = 6   # fewer new kernels than this: compiling in-process is as fast


def workers() -> int:
    env = os.environ.get("FUNCGRAD_COMPILE_WORKERS")
    if env is not None:
        return max(0, int(env))
    return min(16, os.cpu_count() or 1)


def _locate(disp):
    """(module name, file path or None, attribute) of a module-level kernel, else None."""
    fn = getattr(disp, "py_func", None)
    if fn is None or "<locals>" in fn.__qualname__ or "." in fn.__qualname__:
        return None
    mod = sys.modules.get(fn.__module__)
    if mod is None or getattr(mod, fn.__qualname__, None) is not disp:
        return None
    cache = getattr(disp, "_cache", None)
    if cache is None or type(cache).__name__ == "NullCache":
        return None
    path = getattr(mod, "__file__", None) if fn.__module__.startswith("funcgrad_kernels.") \
        else None
    return fn.__module__, path, fn.__qualname__


def dry_run(plan, bufs, pool=None) -> dict:
    """{(module, path, attr): set of argument-type tuples} of the launches plan makes
    (allocations go to `pool`: a memplan.Recorder records the step's memory plan)."""
    if runtime.SIM:   # the simulator's kernels: launches do nothing (nothing to compile)
        from numba.cuda.simulator.kernel import FakeCUDAKernel as CUDADispatcher

        def record(self, *args):
            if self._device:
                return orig(self, *args)
        orig = CUDADispatcher.__call__
        CUDADispatcher.__call__ = record
        try:
            return _dry(plan, bufs, pool, {})
        finally:
            CUDADispatcher.__call__ = orig
    from numba.cuda.dispatcher import CUDADispatcher
    seen: dict = {}
    orig = CUDADispatcher.call

    def record(self, args, launch_config):
        where = _locate(self)
        if where is None:
            return
        types = tuple(self.typeof_pyval(a) for a in args)
        if types in self.overloads:
            return
        if _cached_on_disk(self):   # load now, in this process (no worker start-up)
            self.compile(types)
            return
        seen.setdefault(where, set()).add(types)

    CUDADispatcher.call = record
    try:
        return _dry(plan, bufs, pool, seen)
    finally:
        CUDADispatcher.call = orig


def _dry(plan, bufs, pool, seen):
    """Run plan's steps in dry-run mode (launches already intercepted by the caller)."""
    from . import arrays
    runtime.dry_run, prev_def = True, runtime._deferred
    runtime._deferred = []
    try:
        if pool is None:
            plan._run(bufs)
        else:
            with arrays.using_pool(pool):
                outs = plan._run(bufs)
            pool.outs = outs
    finally:
        runtime.dry_run, runtime._deferred = False, prev_def
    return seen


def _cached_on_disk(disp) -> bool:
    """True when numba's disk cache has an index for this kernel (signatures usually hit)."""
    try:
        return os.path.exists(disp._cache._cache_file._index_path)
    except AttributeError:
        return False


def _cost(group) -> float:
    """A kernel group's expected compile time: its source's size (numba's front end scales with
    the statements) times its signatures; kernels of funcgrad's own modules count as average."""
    path, sigs = group[1], group[3]
    try:
        size = os.path.getsize(path) if path else 4000
    except OSError:
        size = 4000
    return size * len(sigs)


def _feed(procs, groups, t0) -> tuple[list, list, list]:
    """Hand `groups` (longest expected first) to whichever worker is free: (seconds, name,
    start, end) per compiled group (start/end: seconds since t0, as the parent saw them), the
    seconds since t0 at which each worker was ready, and the failed workers' messages."""
    import collections
    import pickle
    import struct
    import threading
    queue = collections.deque(groups)
    lock = threading.Lock()
    times, ready, errors = [], [], []

    def talk(p):   # one thread per worker
        try:
            if p.stdout.readline().decode().strip() != "ready":
                errors.append("a compile worker failed to start")
                return
            ready.append(time.perf_counter() - t0)
            while True:
                with lock:
                    g = queue.popleft() if queue else None
                if g is None:
                    break
                data = pickle.dumps(g)
                start = time.perf_counter() - t0
                p.stdin.write(struct.pack("<I", len(data)) + data)
                p.stdin.flush()
                line = p.stdout.readline().decode().strip()
                if not line:
                    errors.append(f"a worker stopped while compiling {g[0]}.{g[2]}")
                    return
                t, _, what = line.partition(":")
                times.append((float(t), what, start, time.perf_counter() - t0))
            p.stdin.write(struct.pack("<I", 0))
            p.stdin.flush()
        except OSError as e:
            errors.append(f"a compile worker's pipe failed: {e}")

    threads = [threading.Thread(target=talk, args=(p,)) for p in procs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return times, ready, errors


def prewarm(plan, bufs, rec=None) -> dict:
    """Dry-run plan's first call (recording its memory into `rec` when given) and compile its
    kernels in parallel; returns what it did."""
    n = workers()
    t0 = time.perf_counter()
    if rec is None and (runtime.SIM or n <= 1):
        return {}
    try:
        seen = dry_run(plan, bufs, rec)
    except Exception as e:  # noqa: BLE001 - the real run compiles lazily instead
        return {"error": repr(e)}
    if runtime.SIM or n <= 1:
        return {"recorded": True}
    groups = [(m, p, a, sorted(s, key=str)) for (m, p, a), s in seen.items()]
    count = sum(len(g[3]) for g in groups)
    if count < MIN_KERNELS:
        return {"kernels": count, "recorded": rec is not None}
    import subprocess
    import tempfile
    n = min(n, len(groups))
    groups.sort(key=lambda g: -_cost(g))   # longest first; a free worker takes the next
    sys.stderr.write(f"\rfuncgrad: compiling {count} CUDA kernels in {n} processes")
    sys.stderr.flush()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    with open(os.path.join(os.path.dirname(__file__), "compile_worker.py")) as f:
        code = f.read()   # run as -c source: the worker imports numba, not funcgrad
    logs = [tempfile.TemporaryFile() for _ in range(n)]   # stderr: never a full pipe
    t_spawn = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=log, env=env) for log in logs]
    times, ready, errors = [], [], []
    try:
        times, ready, errors = _feed(procs, groups, t_spawn)
    finally:
        for p, log in zip(procs, logs):
            for f in (p.stdin, p.stdout):
                try:
                    f.close()
                except OSError:
                    pass
            if p.wait() != 0:
                log.seek(0)
                errors.append(log.read().decode(errors="replace")[-400:])
            log.close()
    wall = time.perf_counter() - t0
    spent = sum(t for t, *_ in times)
    sys.stderr.write(f"\rfuncgrad: compiled {count} CUDA kernels in {wall:.1f} s "
                     f"({spent:.1f} s of compile time in {n} processes)\n")
    return {"kernels": count, "wall_s": wall, "compile_s": spent, "errors": errors,
            "recorded": rec is not None, "before_spawn_s": t_spawn - t0,
            "workers_ready_s": [min(ready), max(ready)] if ready else None,
            "last_compile_end_s": max((e for *_, e in times), default=None),
            "slowest": [x[:2] for x in sorted(times, reverse=True)[:8]],
            "timeline": sorted((round(s_, 2), round(e, 2), round(t, 2), what[-12:])
                               for t, what, s_, e in times)}
