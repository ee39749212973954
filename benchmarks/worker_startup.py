"""What a compile worker's start-up costs (GPU machine): importing funcgrad, importing numba.cuda,
creating the CUDA context, alone and as 16 processes at once. One JSON line per figure.

Usage: python benchmarks/worker_startup.py
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

CODE = """
import time, json
t0 = time.perf_counter()
import funcgrad
t1 = time.perf_counter()
from numba import cuda
t2 = time.perf_counter()
cuda.current_context()
t3 = time.perf_counter()
print(json.dumps({"import_funcgrad": t1 - t0, "import_numba_cuda": t2 - t1,
                  "context": t3 - t2}))
"""


def run(n):
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", CODE], stdout=subprocess.PIPE)
             for _ in range(n)]
    rows = [json.loads(p.communicate()[0]) for p in procs]
    wall = time.perf_counter() - t0
    parts = {k: round(max(r[k] for r in rows), 2) for k in rows[0]}
    print(json.dumps({"what": "worker_startup", "processes": n, "wall_s": round(wall, 2),
                      "slowest_parts_s": parts}), flush=True)


if __name__ == "__main__":
    run(1)
    run(16)
