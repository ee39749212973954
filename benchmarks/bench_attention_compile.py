"""Compile time of one SIMT attention kernel (default: the merged backward at W2's head dim), split
into numba's typing and lowering plus NVVM (source to PTX) and ptxas (PTX to an sm_90 cubin).

Each variant compiles in a fresh process (numba's first compile in a process also pays its own
set-up: a small kernel compiles first, untimed). Runs without a GPU: numba-cuda's compile_ptx
needs only libNVVM, ptxas is the CUDA toolkit's (PTXAS or ptxas on PATH; skipped when absent).
The GPU's own cold compile of a kernel (NVVM plus the driver's JIT link) is bench_attention_simt's
first_call_s. One JSON line per variant.

Usage: python benchmarks/bench_attention_compile.py [--mode bwd] [--d 64]
       [--config 32,32,8,16,1,4,0,0,4 ...] [--no-fn] [--reps 1]
(--no-fn: the merged backward's products written out in the kernel instead of the device
functions numba types once)
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _types(src):
    """numba argument types of the generated kernel's parameters (arrays: capitalized names
    other than the sizes)."""
    from numba.cuda import types
    params = [p.strip() for p in re.search(r"def kernel\(([^)]*)\)", src).group(1).split(",")]
    arr = types.Array(types.float32, 1, "C")
    sizes = {"T", "S", "N", "G", "H", "HV", "J"}
    return tuple(arr if p[0].isupper() and p not in sizes else types.float64
                 if p == "scale_" else types.int64 for p in params)


def one(mode, d, cfg, fn):
    """(CPU seconds source -> PTX, CPU seconds of ptxas, PTX lines) of one kernel, in this
    process (CPU time: steadier than wall time on a busy host)."""
    sys.path.insert(0, os.path.join(HERE, ".."))
    import numpy as np
    from numba import cuda

    from funcgrad.cuda import attention_src as AS
    from funcgrad.cuda import runtime

    @cuda.jit(device=True)
    def _warm(x):
        return x + 1
    from numba.cuda import dispatcher, types
    if not cuda.is_available():   # device functions ask the current device for its cc
        class _Dev:
            compute_capability = (9, 0)
        dispatcher.get_current_device = _Dev
    cuda.compile_ptx(_warm.py_func, (types.float32,), device=True, cc=(9, 0))
    if not fn:   # the products inline: the generator's pre-device-function form
        orig = AS._Gen.device_fns
        AS._Gen.device_fns = lambda self: setattr(self, "fn", False)
    src = AS.source(mode, np.dtype(np.float32), np.dtype(np.float32), d, cfg, False,
                    "cache=False", 384)
    if not fn:
        AS._Gen.device_fns = orig
    mod = runtime.module_from_source(src)
    t0 = time.process_time()
    ptx, _ = cuda.compile_ptx(mod.kernel.py_func, _types(src), cc=(9, 0))
    t_ptx = time.process_time() - t0
    ptxas = os.environ.get("PTXAS") or shutil.which("ptxas")
    t_as = None
    if ptxas:
        with tempfile.TemporaryDirectory() as tmp:
            p = os.path.join(tmp, "k.ptx")
            with open(p, "w") as f:
                f.write(ptx)
            t0 = os.times()
            subprocess.run([ptxas, "-arch=sm_90", "-O3", p, "-o", os.path.join(tmp, "k.cubin")],
                           check=True)
            t1 = os.times()
            t_as = t1.children_user + t1.children_system - t0.children_user - t0.children_system
    return t_ptx, t_as, ptx.count("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="bwd")
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--config", action="append", default=None)
    ap.add_argument("--no-fn", action="store_true")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--child", default=None)
    a = ap.parse_args()
    if a.child:   # one variant, in this fresh process
        cfg = tuple(int(x) for x in a.child.split(","))
        print(json.dumps(one(a.mode, a.d, cfg, not a.no_fn)))
        return
    sys.path.insert(0, os.path.join(HERE, ".."))
    from funcgrad.cuda import attention_src as AS
    configs = a.config or [",".join(map(str, AS.GPU_CONFIGS[a.mode][0]))]
    for c in configs:
        for _ in range(a.reps):
            env = dict(os.environ, FUNCGRAD_CACHE_DIR=tempfile.mkdtemp())
            cmd = [sys.executable, __file__, "--mode", a.mode, "--d", str(a.d), "--child", c]
            out = subprocess.run(cmd + (["--no-fn"] if a.no_fn else []), env=env, check=True,
                                 capture_output=True, text=True).stdout.splitlines()[-1]
            t_ptx, t_as, lines = json.loads(out)
            print(json.dumps({"what": "compile", "mode": a.mode, "d": a.d, "config": c,
                              "fn": not a.no_fn, "to_ptx_cpu_s": round(t_ptx, 3),
                              "ptxas_cpu_s": None if t_as is None else round(t_as, 3),
                              "ptx_lines": lines}), flush=True)


if __name__ == "__main__":
    main()
