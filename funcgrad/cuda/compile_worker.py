"""The compile server process (compile.py starts it with this file's source): imports numba only.

One server per funcgrad process, kept for its later plans. It never creates a CUDA context: the
parent passes its device's compute capability, the server patches the four places where
numba-cuda asks the driver for it (the kernel's target arch, the code library's arch, the disk
cache's index key, binding the kernel to a context) and compiles to a cubin with NVVM and
nvJitLink, neither of which needs a device; the cache entry it writes (index key, pickled kernel
with its cubin) is the one numba writes in a process with a context, so the parent loads it.
(A worker's context took 0.4 s alone and 2.2 s with 16 at once on an H200 host: the contexts
queue.) After importing numba it compiles a tiny kernel (typing, libdevice, NVVM and nvJitLink
loaded once), then forks one child per kernel group: every child starts warm, in milliseconds,
with no import of its own.

`share_compiles` (installed here and by funcgrad.cuda.runtime in every process with a GPU) makes
processes that share the kernel cache compile each kernel signature once: a per-signature file
lock beside numba's cache index is held while compiling, and a process that finds it taken
waits, then loads the entry the other wrote (16 pytest workers, or the ranks of a host, would
otherwise each compile the same kernels at the same time).

Protocol (stdin: length-prefixed pickles; stdout: one JSON object a line, children's lines
written with one os.write each, which a pipe keeps whole): the server prints {"ready": seconds}
once warm, then reads batches {"slots": k, "groups": [(module name, file path or None,
attribute, signatures), ...]} and compiles each group into numba's disk cache in a child, at
most k at once, longest first as given; each group answers {"name", "s", "start", "end", "nvvm",
"link"} (seconds; start/end as time.time()) or {"name", "error"}. End of input ends it. Without
os.fork (Windows), with k = 1, or with a context (no nvJitLink: the driver's linker needs one, and
a forked child cannot use its parent's) the server compiles the groups itself, one by one.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import math
import os
import pickle
import select
import struct
import sys
import time
import traceback

PHASES = {"nvvm": 0.0, "link": 0.0}   # this process's seconds in NVVM and in the linker
LOCK_WAIT = 300.0   # seconds a process waits for another's compile before compiling it itself


def _lock_path(disp, sig):
    """The lock file of one signature of a disk-cached kernel (beside numba's cache index), or
    None (not disk-cached, already compiled here, a specialized kernel)."""
    if getattr(disp, "specialized", False) or (isinstance(sig, tuple)
                                               and sig in disp.overloads):
        return None
    try:
        index = disp._cache._cache_file._index_path
    except AttributeError:   # numba's NullCache: nothing shared on disk
        return None
    import hashlib
    return f"{index}.{hashlib.sha1(str(sig).encode()).hexdigest()[:16]}.lock"


def _acquire(fd) -> None:
    """Take the exclusive lock on `fd`, polling, for at most LOCK_WAIT seconds."""
    import fcntl
    deadline, pause = time.monotonic() + LOCK_WAIT, 0.002
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                return   # a compile that never ends elsewhere: compile here regardless
            time.sleep(pause)
            pause = min(0.02, pause * 2)


def shared(compile_fn):
    """`compile_fn` (CUDADispatcher.compile) made to hold a per-signature file lock across
    processes: of the processes that share a kernel cache and need one kernel signature at the
    same time (test workers, the ranks of a host, a compile server's children), one compiles it
    and writes numba's cache entry while the others wait, then load that entry. The lock is
    released with its file descriptor, so a process that dies releases it too."""
    if getattr(compile_fn, "_funcgrad_shared", False):
        return compile_fn

    def compile(self, sig):
        path = _lock_path(self, sig)
        if path is None:
            return compile_fn(self, sig)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:   # a read-only cache directory: numba will not write there either
            return compile_fn(self, sig)
        try:
            _acquire(fd)
            return compile_fn(self, sig)
        finally:
            os.close(fd)
    compile._funcgrad_shared = True
    compile.__doc__ = compile_fn.__doc__
    return compile


def share_compiles() -> None:
    """Make numba-cuda's kernels compile each disk-cached signature once across the processes
    of a host (`shared`); without fcntl (Windows) or under the simulator, nothing changes."""
    try:
        import fcntl  # noqa: F401
    except ImportError:
        return
    from numba.cuda.core import config
    if config.ENABLE_CUDASIM:
        return
    from numba.cuda.dispatcher import CUDADispatcher
    if not CUDADispatcher.__dict__.get("_funcgrad_shared"):   # once, whoever wraps it later
        CUDADispatcher.compile = shared(CUDADispatcher.compile)
        CUDADispatcher._funcgrad_shared = True


def _timed(fn, phase):
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            PHASES[phase] += time.perf_counter() - t0
    return wrapper


def no_context(cc) -> bool:
    """Patch numba-cuda to compile for compute capability `cc` (major, minor) without a CUDA
    context: the same arch, cubin and cache index key that a process with a context gets.
    False (nothing patched) without nvJitLink: the driver's linker needs a context."""
    from numba.cuda import codegen, dispatcher
    from numba.cuda.cudadrv import driver
    from numba.cuda.cudadrv import runtime as cuda_runtime
    if not driver._have_nvjitlink():
        return False
    cc = (int(cc[0]), int(cc[1]))
    arch = (cc[0], cc[1], "a" if cc >= (9, 0) else "")   # as CUDACodeLibrary._ensure_cc
    magic = (cuda_runtime.runtime.get_version(), cc)      # as JITCUDACodegen.magic_tuple

    class Device:
        compute_capability = cc

    dispatcher.get_current_device = lambda: Device
    codegen.CUDACodeLibrary._ensure_cc = lambda self, c: arch if c is None else c
    codegen.JITCUDACodegen.magic_tuple = lambda self: magic
    # numba binds a new kernel to the context "to force codegen, so that there is a cubin to
    # cache": the cubin is what it needs
    dispatcher._Kernel.bind = lambda self: self._codelibrary.get_cubin()
    lib = codegen.CUDACodeLibrary
    lib.get_asm_strs = _timed(lib.get_asm_strs, "nvvm")
    driver._Linker.complete = _timed(driver._Linker.complete, "link")
    return True


def warm_up() -> float:
    """Compile a tiny kernel (not cached) so that forked children start with numba's typing,
    libdevice, NVVM and the linker loaded; returns the seconds."""
    from numba import cuda, types
    t0 = time.perf_counter()

    def warm(x):
        i = cuda.grid(1)
        if i < x.size:
            x[i] = math.exp(x[i]) + i

    cuda.jit(warm).compile((types.float32[::1],))
    return time.perf_counter() - t0


def compile_group(item) -> float:
    """Compile one kernel's signatures (written to numba's disk cache); returns the seconds."""
    modname, path, attr, sigs = item
    t0 = time.perf_counter()
    mod = sys.modules.get(modname)
    if mod is None:
        if path is not None:
            spec = importlib.util.spec_from_file_location(modname, path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[modname] = mod
            spec.loader.exec_module(mod)
        else:
            mod = importlib.import_module(modname)
    disp = getattr(mod, attr)
    for types in sigs:
        disp.compile(types)
    return time.perf_counter() - t0


def _say(obj) -> None:
    os.write(1, (json.dumps(obj) + "\n").encode())


def _run(group) -> dict:
    """Compile `group` here; its answer line."""
    name = f"{group[0]}.{group[2]}"
    before = dict(PHASES)
    start = time.time()
    try:
        secs = compile_group(group)
    except Exception:  # noqa: BLE001 - reported to the parent, which compiles it itself
        traceback.print_exc()
        return {"name": name, "error": traceback.format_exc(limit=2)[-300:]}
    return {"name": name, "s": secs, "start": start, "end": time.time(),
            **{k: PHASES[k] - before[k] for k in PHASES}}


class Server:
    """Reads batches from fd 0 and answers each group on fd 1, forking up to `slots` children."""

    def __init__(self):
        self.buf = b""
        self.eof = False
        self.queue: list = []
        self.slots = 1
        self.children: dict = {}   # pid -> group name
        self.fork = hasattr(os, "fork")
        self.wake = None           # read end of a pipe written on SIGCHLD
        if self.fork:
            import signal
            self.wake, w = os.pipe()
            os.set_blocking(w, False)
            signal.signal(signal.SIGCHLD, lambda *_: None)
            signal.set_wakeup_fd(w)

    def _read(self) -> None:
        """Take what stdin has into the queue (a zero-length read: end of input)."""
        data = os.read(0, 1 << 16)
        if not data:
            self.eof = True
            return
        self.buf += data
        while len(self.buf) >= 4:
            n = struct.unpack("<I", self.buf[:4])[0]
            if len(self.buf) < 4 + n:
                break
            batch = pickle.loads(self.buf[4:4 + n])
            self.buf = self.buf[4 + n:]
            self.slots = max(1, int(batch["slots"]))
            self.queue.extend(batch["groups"])

    def _reap(self) -> None:
        os.read(self.wake, 1 << 12)
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            name = self.children.pop(pid, None)
            if name is not None and status != 0:
                _say({"name": name, "error": f"compile child ended with status {status}"})

    def _start(self, group) -> None:
        """Compile `group` in a forked child (or here, without fork or with one slot)."""
        if not self.fork or self.slots == 1:
            _say(_run(group))
            return
        pid = os.fork()
        if pid == 0:   # the child: compile, answer, leave without Python's clean-up
            code = 1
            try:
                import signal
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                answer = _run(group)
                _say(answer)
                code = 0 if "error" not in answer else 2
            finally:
                sys.stderr.flush()
                os._exit(code)
        self.children[pid] = f"{group[0]}.{group[2]}"

    def serve(self) -> None:
        while True:
            while self.queue and len(self.children) < self.slots:
                self._start(self.queue.pop(0))
            fds = [] if self.eof else [0]
            if self.children:
                fds.append(self.wake)
            if not fds:
                return
            ready = select.select(fds, [], [])[0]
            if 0 in ready:
                self._read()
            if self.wake in ready:
                self._reap()


class NoScipy:
    """An import hook that hides scipy. numba-cuda imports scipy.linalg when it loads its
    numpy-array typing (0.3 s of the server's ~1.7 s start-up on a test host) only to learn
    whether a host BLAS exists for np.dot-based code; funcgrad's kernels never call it and the
    disk-cache entries do not depend on it, so the server skips the import."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "scipy" or name.startswith("scipy."):
            raise ImportError("the compile server does not import scipy")


def main() -> None:
    t0 = time.perf_counter()
    sys.meta_path.insert(0, NoScipy)
    from numba import cuda
    from numba.cuda.core import config
    config.CUDA_LOW_OCCUPANCY_WARNINGS = 0
    t1 = time.perf_counter()
    opts = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    warm, context = 0.0, False
    if not config.ENABLE_CUDASIM:
        share_compiles()
        if not (opts.get("cc") and no_context(opts["cc"])):
            cuda.current_context()   # numba asks the driver, as in any process
            context = True
        warm = warm_up()
    sys.stdout.flush()
    sys.stdout = sys.stderr   # fd 1 carries the protocol only (a stray print goes to the log)
    _say({"ready": time.perf_counter() - t0, "import": t1 - t0, "warm_up": warm,
          "context": context})
    server = Server()
    server.fork = server.fork and not context   # a forked child cannot use its parent's context
    server.serve()


if __name__ == "__main__":
    main()
