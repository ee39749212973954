"""A compile worker process (compile.py starts it with this file's source): imports numba only.

Not importing funcgrad saves each worker 0.7 s alone and 1.25 s when 16 start at once (H200 host,
benchmarks/worker_startup.py, 2026-11-24); a kernel of funcgrad's own modules imports it when
its group arrives. Protocol: the worker prints "ready" once numba and its CUDA context are up,
then reads length-prefixed pickled groups (module name, file path or None, attribute,
signatures) from stdin, one at a time, and prints "seconds:module.attribute" after compiling
each into numba's disk cache; a zero length ends it.
"""
from __future__ import annotations

import importlib
import importlib.util
import pickle
import struct
import sys
import time


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


def main() -> None:
    from numba import cuda
    from numba.cuda.core import config
    config.CUDA_LOW_OCCUPANCY_WARNINGS = 0
    cuda.current_context()
    print("ready", flush=True)   # imports and the CUDA context done: the parent notes when
    inp = sys.stdin.buffer
    while True:
        head = inp.read(4)
        n = struct.unpack("<I", head)[0] if len(head) == 4 else 0
        if not n:
            return
        g = pickle.loads(inp.read(n))
        print(f"{compile_group(g):.3f}:{g[0]}.{g[2]}", flush=True)


if __name__ == "__main__":
    main()
