"""Parallel kernel compilation for a plan's first call on a real GPU.

numba compiles a kernel the first time it is launched with new argument types, one after the
other, ~0.2-0.5 s each: a GPT step's few hundred kernels took over a minute. Before a plan's
first call, `prewarm` runs the plan *dry*: every launch is recorded (kernel and argument
types) instead of executed, device checks and host reads are skipped. The kernels not yet
compiled are then compiled in parallel into numba's disk cache (every funcgrad kernel is
`cache=True`); the real first call then loads them from the cache. Kernels are grouped by
function so that no two processes write the same cache index.

The compiling is done by one compile server per process (compile_worker.py's source run by
`python -c`: not multiprocessing, whose spawn start method would re-run an unguarded user
script; importing numba only, not funcgrad). The first kernel of a dry run that needs compiling
starts it, so its start-up (numba's import, a warm-up compile; no CUDA context: it compiles for
the compute capability the parent passes) overlaps the rest of the dry run; later plans reuse
it. It forks one warm child per kernel group, longest expected first, as many at once as there
are idle CPUs (`slots`), up to FUNCGRAD_COMPILE_WORKERS (default: CPU count, at most 16; 0 or 1
compiles in-process); this process loads each group from the disk cache as soon as the server
answers for it (`_Loader`), while the others still compile. No server is started while every
CPU is busy (`_idle_cpus`): prewarm then compiles in-process. Before the server, every plan
started up to 16 worker processes, each importing numba and creating a CUDA context: on an
H200 host they were ready 1.7-3.7 s after their spawn (contexts queue), and a test suite's 16
processes started 16 workers per plan each. Processes sharing the kernel cache compile each
kernel signature once (compile_worker.share_compiles: a file lock per signature).
"""
from __future__ import annotations

import os
import sys
import threading
import time

from funcgrad.cuda import runtime

MIN_KERNELS = 6   # fewer new kernels: compiled in-process unless the server is ready already


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


def dry_run(plan, bufs, pool=None, start_server=False, disps=None) -> dict:
    """{(module, path, attr): set of argument-type tuples} of the launches plan makes
    (allocations go to `pool`: a memplan.Recorder records the step's memory plan); with
    `start_server`, the first kernel that needs compiling starts the compile server; `disps`
    (a dict) gets the dispatcher of each (module, path, attr)."""
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
        if start_server and not seen:
            _start_server()   # its start-up overlaps the rest of the dry run
        seen.setdefault(where, set()).add(types)
        if disps is not None:
            disps[where] = self

    CUDADispatcher.call = record
    try:
        return _dry(plan, bufs, pool, seen)
    finally:
        CUDADispatcher.call = orig


def _dry(plan, bufs, pool, seen):
    """Run plan's steps in dry-run mode (launches already intercepted by the caller)."""
    from funcgrad.cuda import arrays
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


class _Server:
    """The compile server process (compile_worker.py's source run by `python -c`)."""

    def __init__(self, cc):
        import json
        import subprocess
        import tempfile
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        with open(os.path.join(os.path.dirname(__file__), "compile_worker.py")) as f:
            code = f.read()   # run as -c source: the server imports numba, not funcgrad
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - the server's stderr, for its life
        self.spawned = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, json.dumps({"cc": list(cc) if cc else None})],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=env)
        self.ready_at = None   # perf_counter() when it said ready
        self.startup: dict = {}
        self.error = None

    def alive(self) -> bool:
        return self.error is None and self.proc.poll() is None

    def _fail(self, what: str) -> None:
        self.log.seek(0)
        self.error = f"{what}: {self.log.read().decode(errors='replace')[-400:]}"
        self.close()

    def _line(self):
        import json
        while True:
            line = self.proc.stdout.readline()
            if not line:
                return None
            try:
                return json.loads(line)
            except ValueError:   # not a protocol line (the server's stdout is its log)
                continue

    def ready(self, wait: bool = True) -> bool:
        """True once the server has said it is ready (waiting for that when `wait`)."""
        if self.ready_at is None and self.alive():
            if not wait:
                import select
                if not select.select([self.proc.stdout], [], [], 0)[0]:
                    return False
            msg = self._line()
            if not msg or "ready" not in msg:
                self._fail("the compile server failed to start")
                return False
            self.ready_at, self.startup = time.perf_counter(), msg
        return self.ready_at is not None and self.alive()

    def compile(self, groups, slots, on_done=None) -> tuple[list, list]:
        """Compile `groups` (longest first) with at most `slots` at once: the answers of the
        groups compiled, and error messages; on_done(answer) runs as each group is compiled."""
        import pickle
        import struct
        data = pickle.dumps({"slots": slots, "groups": groups})
        try:
            self.proc.stdin.write(struct.pack("<I", len(data)) + data)
            self.proc.stdin.flush()
        except OSError as e:
            self._fail(f"the compile server's pipe failed ({e})")
            return [], [self.error]
        done, errors = [], []
        for _ in groups:
            msg = self._line()
            if msg is None:
                self._fail("the compile server stopped")
                errors.append(self.error)
                break
            (errors if "error" in msg else done).append(msg)
            if on_done is not None and "error" not in msg:
                on_done(msg)
        return done, errors

    def close(self, kill: bool = False) -> None:
        """End the server (it finishes the children it has started, unless `kill`); closing
        twice is fine."""
        if self.log.closed:
            return
        if kill:
            self.proc.kill()
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except Exception:  # noqa: BLE001 - a server that hangs on exit is killed
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.log.close()


_server: _Server | None = None
_lock = threading.RLock()   # one plan at a time talks to the server
_early: _Server | None = None   # the server start_early() started, until a plan uses it
_warm = False   # a plan of this process found all its kernels compiled: no early start


def _start_server() -> None:
    """Start this process's compile server, unless one is running (it is kept for later
    plans; the interpreter's exit ends it)."""
    global _server
    with _lock:
        if _server is not None and _server.alive():
            return
        import atexit
        if _server is None:
            atexit.register(_stop_server)
        else:   # it stopped: close its pipes and log before starting another
            _server.close()
        _server = _Server(_capability())


def start_early() -> None:
    """Start the compile server now, when kernels may soon need compiling (a function being
    traced for the GPU), so that its start-up (~1-2 s) overlaps tracing, the passes and the
    plan; not in a process whose kernels were all compiled already (a warm disk cache).

    jit calls it (CudaBackend.before_trace) as it starts tracing for the GPU, unless
    FUNCGRAD_COMPILE_EARLY=0. On an H200 host, W2's cold first call took 6.25 / 6.43 s with it
    called as tracing starts against 7.38 / 7.41 s without (benchmarks/cold_compile.py --early,
    2026-11-24 19:09 UTC); called when the backend builds the plan (0.6 s before the dry run)
    it gave 5.18 / 5.68 s against 5.18 / 4.89 s (19:13 UTC): no gain there."""
    global _early
    if _warm or workers() <= 1 or runtime.sim_requested() or not _idle_cpus():
        return
    runtime.load()
    with _lock:
        if _server is None or not _server.alive():
            _start_server()
            _early = _server


def _capability():
    """The current device's compute capability (major, minor), or None (the server then asks
    the driver through a context of its own)."""
    try:
        return tuple(runtime.load().get_current_device().compute_capability)
    except Exception:  # noqa: BLE001 - any failure: let the server find out
        return None


def _stop_server(kill: bool = False) -> None:
    global _server
    if _server is not None:
        _server.close(kill)
        _server = None


def _idle_cpus() -> bool:
    """True when a compile server could compile in two slots or more now. With every CPU busy
    (16 pytest workers on 16 cores) prewarm compiles in this process instead, and a server
    started then costs its start-up (numba's import, a warm-up compile: ~1.7 s of CPU) for
    nothing: on an H200 host a cold `pytest -m cuda -n 16` started 13 to 16 servers, and 4 of
    its 62 compiling prewarms used one (2026-11-24)."""
    return slots(workers()) >= 2


def slots(n: int) -> int:
    """How many kernels to compile at once: `n`, less the CPUs that other runnable tasks hold
    now (Linux: /proc/loadavg), so that 16 test processes on 16 cores do not each start 16."""
    try:
        with open("/proc/loadavg") as f:
            running = int(f.read().split()[3].split("/")[0])
        cpus = len(os.sched_getaffinity(0))
    except (OSError, ValueError, IndexError, AttributeError):
        return n
    return max(1, min(n, cpus + 1 - running))


class _Loader:
    """Loads each group's kernels from the disk cache into this process as the server answers
    that it compiled them, so that the loading overlaps the compiles still running instead of
    following the last one (on an H200 host the first load, which sets up numba's typing in
    this process, took ~0.8 s; later ones milliseconds)."""

    def __init__(self, groups: dict):
        self.groups = groups   # "module.attr" -> (dispatcher or None, signatures)
        self.spent = 0.0
        self.after_last = 0.0  # the seconds spent loading the last group answered
        self.left = len(groups)

    def __call__(self, answer) -> None:
        disp, sigs = self.groups.get(answer.get("name"), (None, ()))
        t = time.perf_counter()
        for types in sigs if disp is not None else ():
            try:
                disp.compile(types)
            except Exception:  # noqa: BLE001 - the planned run compiles it itself
                break
        self.left -= 1
        dt = time.perf_counter() - t
        self.spent += dt
        if self.left == 0:
            self.after_last = dt


def prewarm(plan, bufs, rec=None) -> dict:
    """Dry-run plan's first call (recording its memory into `rec` when given) and compile its
    kernels in parallel; returns what it did."""
    n = workers()
    t0, w0 = time.perf_counter(), time.time()
    if rec is None and (runtime.SIM or n <= 1):
        return {}
    disps: dict = {}
    try:
        seen = dry_run(plan, bufs, rec, disps=disps,
                       start_server=not runtime.SIM and n > 1 and _idle_cpus())
    except Exception as e:  # noqa: BLE001 - the real run compiles lazily instead
        return {"error": repr(e)}
    dry = time.perf_counter() - t0
    if runtime.SIM or n <= 1:
        return {"recorded": True}
    groups = [(m, p, a, sorted(s, key=str)) for (m, p, a), s in seen.items()]
    count = sum(len(g[3]) for g in groups)
    global _early, _warm
    with _lock:
        if count == 0 and _early is not None:   # started early for nothing: a warm cache
            _warm = True
            _stop_server(kill=True)
        _early = None
        server = _server
        if count < 2 or server is None or not server.ready(wait=count >= MIN_KERNELS):
            return {"kernels": count, "recorded": rec is not None}
        k = min(slots(n), len(groups))   # the server, ready, is idle: not counted as running
        if server.startup.get("context"):   # no nvJitLink: it compiles one by one, as we would
            k = 1
        if k < 2:
            return {"kernels": count, "recorded": rec is not None, "slots": k}
        groups.sort(key=lambda g: -_cost(g))   # longest first; a free slot takes the next
        sys.stderr.write(f"\rfuncgrad: compiling {count} CUDA kernels in {k} processes")
        sys.stderr.flush()
        loader = _Loader({f"{m}.{a}": (disps.get((m, p, a)), sigs) for m, p, a, sigs in groups})
        done, errors = server.compile(groups, k, loader)
    wall = time.perf_counter() - t0
    spent = sum(d["s"] for d in done)
    sys.stderr.write(f"\rfuncgrad: compiled {count} CUDA kernels in {wall:.1f} s "
                     f"({spent:.1f} s of compile time in {k} processes)\n")
    return {"kernels": count, "wall_s": wall, "dry_run_s": dry, "compile_s": spent,
            "errors": errors,
            "recorded": rec is not None, "slots": k,
            "server_spawn_s": server.spawned - t0, "server_ready_s": server.ready_at - t0,
            "server_startup": server.startup,
            "first_compile_start_s": min((d["start"] - w0 for d in done), default=None),
            "last_compile_end_s": max((d["end"] - w0 for d in done), default=None),
            "nvvm_s": sum(d["nvvm"] for d in done), "link_s": sum(d["link"] for d in done),
            "load_s": loader.spent, "loaded_after_last_s": loader.after_last,
            "slowest": [(d["s"], d["name"]) for d in
                        sorted(done, key=lambda d: -d["s"])[:8]],
            "timeline": sorted((round(d["start"] - w0, 2), round(d["end"] - w0, 2),
                                round(d["s"], 2), round(d["nvvm"], 2), round(d["link"], 2),
                                d["name"][-12:]) for d in done)}
