"""The compile server (funcgrad/cuda/compile_worker.py) imports numba but not funcgrad, speaks its
stdin/stdout protocol, compiles a group of a kernel module given by path, and (on a GPU) writes
cache entries that a process with a CUDA context loads without compiling."""
from __future__ import annotations

import ast
import json
import os
import pickle
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import funcgrad.cuda.compile_worker as W
from funcgrad import cuda as fcuda
from funcgrad.cuda import compile as C

SOURCE = W.__file__


def _source() -> str:
    with open(SOURCE) as f:
        return f.read()


def _batch(slots, groups) -> bytes:
    data = pickle.dumps({"slots": slots, "groups": groups})
    return struct.pack("<I", len(data)) + data


def test_worker_imports_no_funcgrad_module():
    tree = ast.parse(_source())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert names and not any(m.startswith(("funcgrad", ".")) for m in names), names


def test_server_protocol_under_the_simulator(tmp_path):
    """{"ready"}, then one answer per group of each batch (forked children when slots > 1, in
    the server itself with one slot), an error answer for a group that fails; end of input ends
    it; funcgrad stays unimported unless a group needs it."""
    mod = tmp_path / "fgk_worker_test.py"
    mod.write_text("from numba import cuda\n\n\n@cuda.jit\ndef kernel(x):\n    x[0] = 1\n\n\n"
                   "@cuda.jit\ndef other(x):\n    x[0] = 2\n")
    probe = "import sys; print('funcgrad' in sys.modules, file=sys.stderr, flush=True)\n"
    code = _source().replace('if __name__ == "__main__":', probe + 'if __name__ == "__main__":')
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    g = ("fgk_worker_test", str(mod))
    feed = (_batch(2, [(*g, "kernel", []), (*g, "other", []), (*g, "missing", [])])
            + _batch(1, [(*g, "kernel", [])]))
    out = subprocess.run([sys.executable, "-c", code, json.dumps({"cc": [9, 0]})], input=feed,
                         capture_output=True, env=env, timeout=120, check=False)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    assert out.stderr.decode().split()[0] == "False"
    lines = [json.loads(x) for x in out.stdout.decode().splitlines()]
    assert "ready" in lines[0] and len(lines) == 5, lines
    first = {m["name"]: m for m in lines[1:4]}
    assert sorted(first) == [f"fgk_worker_test.{a}" for a in ("kernel", "missing", "other")]
    assert "error" in first["fgk_worker_test.missing"]
    for m in (first["fgk_worker_test.kernel"], first["fgk_worker_test.other"], lines[4]):
        assert m["s"] >= 0 and m["end"] >= m["start"] and m["nvvm"] == m["link"] == 0, m


def test_compile_group_imports_a_module_by_path(tmp_path):
    mod = tmp_path / "fgk_worker_path.py"
    mod.write_text("class K:\n    calls = []\n\n    def compile(self, t):\n"
                   "        K.calls.append(t)\n\n\nkernel = K()\n")
    assert W.compile_group(("fgk_worker_path", str(mod), "kernel", [("a",), ("b",)])) >= 0
    assert sys.modules["fgk_worker_path"].K.calls == [("a",), ("b",)]


def test_slots_stay_between_one_and_the_cap():
    assert 1 <= C.slots(16) <= 16
    assert C.slots(1) == 1


@pytest.mark.cuda
@pytest.mark.skipif(not fcuda.is_available(), reason="needs a real GPU (NVVM, a context)")
def test_server_cache_entry_loads_where_there_is_a_context(tmp_path):
    """The server compiles without a CUDA context; this process (which has one) then loads the
    kernel from numba's disk cache, compiling nothing, and it runs."""
    import importlib.util

    from numba import cuda, types
    src = ("import math\nfrom numba import cuda\n\n\n@cuda.jit(cache=True)\ndef kernel(x, y):\n"
           "    i = cuda.grid(1)\n    if i < x.size:\n        y[i] = math.exp(x[i]) + i\n")
    path = tmp_path / "fgk_server_gpu.py"
    path.write_text(src)
    sig = (types.float32[::1], types.float32[::1])
    cc = list(cuda.get_current_device().compute_capability)
    out = subprocess.run([sys.executable, "-c", _source(), json.dumps({"cc": cc})],
                         input=_batch(2, [("fgk_server_gpu", str(path), "kernel", [sig])]),
                         capture_output=True, timeout=300, check=False,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    answer = json.loads(out.stdout.decode().splitlines()[1])
    assert "error" not in answer and answer["link"] > 0, answer
    spec = importlib.util.spec_from_file_location("fgk_server_gpu", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.kernel.compile(sig)
    assert mod.kernel._cache_hits[sig] == 1 and not mod.kernel._cache_misses[sig]
    x = np.linspace(-1, 1, 300, dtype=np.float32)
    y = cuda.device_array_like(x)
    mod.kernel[2, 256](cuda.to_device(x), y)
    np.testing.assert_allclose(y.copy_to_host(), np.exp(x) + np.arange(300), rtol=1e-6)


def test_an_early_server_is_ended_when_every_kernel_was_compiled(monkeypatch):
    """start_early() starts the server; a plan that needs no compile (a warm cache) ends it
    unused and no later start_early() starts another."""
    made = []

    class Fake:
        def __init__(self, cc):
            self.ended = None
            made.append(self)

        def alive(self):
            return self.ended is None

        def close(self, kill=False):
            self.ended = "killed" if kill else "closed"

    monkeypatch.setenv("FUNCGRAD_COMPILE_WORKERS", "4")
    monkeypatch.setattr(C.runtime, "sim_requested", lambda: False)
    monkeypatch.setattr(C.runtime, "load", lambda: None)
    monkeypatch.setattr(C.runtime, "SIM", False)
    monkeypatch.setattr(C, "_Server", Fake)
    monkeypatch.setattr(C, "_capability", lambda: (9, 0))
    monkeypatch.setattr(C, "slots", lambda n: n)   # idle CPUs, however busy this host is
    monkeypatch.setattr(C, "dry_run", lambda *a, **k: {})
    for name in ("_server", "_early"):
        monkeypatch.setattr(C, name, None)
    monkeypatch.setattr(C, "_warm", False)
    C.start_early()
    assert len(made) == 1 and C._early is C._server is made[0]
    assert C.prewarm(None, []) == {"kernels": 0, "recorded": False}
    assert made[0].ended == "killed" and C._server is None and C._warm
    C.start_early()
    assert len(made) == 1


def _fake_dispatcher(tmp_path, compiled):
    """A class shaped like numba-cuda's CUDADispatcher for `shared`: its compile loads the cache
    entry when one exists, else compiles (slowly) and writes it."""
    from types import SimpleNamespace
    entry = tmp_path / "kernel.entry"

    class Disp:
        specialized = False

        def __init__(self, cached=True):
            self.overloads = {}
            if cached:
                self._cache = SimpleNamespace(
                    _cache_file=SimpleNamespace(_index_path=str(tmp_path / "kernel.nbi")))

        def compile(self, sig):
            if entry.exists():
                return "loaded"
            time.sleep(0.2)
            compiled.append(sig)
            entry.write_text("cubin")
            return "compiled"
    Disp.compile = W.shared(Disp.compile)
    return Disp


def test_shared_compile_compiles_a_signature_once(tmp_path):
    """Four compiles of one signature at once (separate lock descriptors, as in separate
    processes): one compiles, the others wait for it and load its entry."""
    pytest.importorskip("fcntl")
    compiled: list = []
    Disp = _fake_dispatcher(tmp_path, compiled)
    assert W.shared(Disp.compile) is Disp.compile
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(Disp().compile(("f4",))))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert compiled == [("f4",)] and sorted(results) == ["compiled"] + ["loaded"] * 3
    assert len(list(tmp_path.glob("kernel.nbi.*.lock"))) == 1


def test_shared_compile_takes_no_lock_without_a_disk_cache(tmp_path):
    pytest.importorskip("fcntl")
    compiled: list = []
    Disp = _fake_dispatcher(tmp_path, compiled)
    d = Disp()
    d.overloads[("f4",)] = "kernel"   # compiled in this process already: numba returns it
    assert d.compile(("f4",)) == "compiled"
    assert Disp(cached=False).compile(("f8",)) == "loaded"
    assert not list(tmp_path.glob("*.lock"))


def test_no_server_starts_while_every_cpu_is_busy(monkeypatch):
    """start_early() starts nothing when a server could only compile in one slot."""
    monkeypatch.setenv("FUNCGRAD_COMPILE_WORKERS", "4")
    monkeypatch.setattr(C.runtime, "sim_requested", lambda: False)
    monkeypatch.setattr(C, "slots", lambda n: 1)
    monkeypatch.setattr(C, "_start_server", lambda: pytest.fail("a server was started"))
    monkeypatch.setattr(C, "_warm", False)
    C.start_early()
