"""The compile worker (funcgrad/cuda/compile_worker.py) imports numba but not funcgrad, speaks
its stdin/stdout protocol, and compiles a group of a kernel module given by path."""
from __future__ import annotations

import ast
import os
import pickle
import struct
import subprocess
import sys

import funcgrad.cuda.compile_worker as W

SOURCE = W.__file__


def _source() -> str:
    with open(SOURCE) as f:
        return f.read()


def test_worker_imports_no_funcgrad_module():
    tree = ast.parse(_source())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert names and not any(m.startswith(("funcgrad", ".")) for m in names), names


def test_worker_protocol_under_the_simulator(tmp_path):
    """ready, then one compiled group ("seconds:module.attr"), then a zero length ends it;
    funcgrad stays unimported unless a group needs it."""
    mod = tmp_path / "fgk_worker_test.py"
    mod.write_text("from numba import cuda\n\n\n@cuda.jit\ndef kernel(x):\n    x[0] = 1\n")
    probe = "import sys; print('funcgrad' in sys.modules, flush=True)\n"
    code = _source().replace('if __name__ == "__main__":',
                                       probe + 'if __name__ == "__main__":')
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    group = pickle.dumps(("fgk_worker_test", str(mod), "kernel", []))
    feed = struct.pack("<I", len(group)) + group + struct.pack("<I", 0)
    out = subprocess.run([sys.executable, "-c", code], input=feed, capture_output=True,
                         env=env, timeout=120, check=False)
    lines = out.stdout.decode().split()
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    assert lines[0] == "False" and lines[1] == "ready", lines
    secs, _, what = lines[2].partition(":")
    assert float(secs) >= 0 and what == "fgk_worker_test.kernel"


def test_compile_group_imports_a_module_by_path(tmp_path):
    mod = tmp_path / "fgk_worker_path.py"
    mod.write_text("class K:\n    calls = []\n\n    def compile(self, t):\n"
                   "        K.calls.append(t)\n\n\nkernel = K()\n")
    assert W.compile_group(("fgk_worker_path", str(mod), "kernel", [("a",), ("b",)])) >= 0
    assert sys.modules["fgk_worker_path"].K.calls == [("a",), ("b",)]
