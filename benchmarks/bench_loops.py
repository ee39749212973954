"""Device-side loops: a jitted RNN scan of 10 / 1,000 / 10,000 steps, funcgrad beside JAX.

funcgrad captures the scan as one CUDA-graph conditional node (funcgrad/cuda/condgraph.py);
JAX runs lax.scan as an XLA while loop. Prints per call: the first call (trace + compile +
capture), the median synchronized call, and the time per iteration, one JSON line each.
Usage: python benchmarks/bench_loops.py [funcgrad|jax ...]
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np

H, B = 64, 32


def _data(n):
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((H, H)) / np.sqrt(H)).astype(np.float32)
    xs = rng.standard_normal((n, B, H)).astype(np.float32)
    return w, np.zeros((B, H), np.float32), xs


def _loss(np_, lax):
    """The benchmark's program over a numpy-like module and a lax module."""
    def f(w, h, xs):
        def cell(h, x):
            h = np_.tanh(h @ w + x)
            return h, np_.sum(h)
        h, ys = lax.scan(cell, h, xs)
        return np_.sum(h) + np_.sum(ys)
    return f


def _time(call, sync, reps=20):
    t0 = time.perf_counter()
    sync(call())
    first = time.perf_counter() - t0
    for _ in range(3):
        sync(call())
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        sync(call())
        ts.append(time.perf_counter() - t)
    return first, float(np.median(ts))


def run(lib, n):
    if lib == "funcgrad":
        import funcgrad
        from funcgrad import lax
        import funcgrad.numpy as np_

        def put(a):
            return funcgrad.device_put(a, "cuda")

        def sync(r):
            r.block_until_ready()
    else:
        import jax
        from jax import lax
        import jax.numpy as np_
        jax.config.update("jax_default_matmul_precision", "highest")

        def put(a):
            return jax.device_put(a)

        def sync(r):
            r.block_until_ready()

    jf = (funcgrad.jit if lib == "funcgrad" else jax.jit)(_loss(np_, lax))
    w, h, xs = (put(a) for a in _data(n))
    first, med = _time(lambda: jf(w, h, xs), sync)
    extra = {}
    if lib == "funcgrad":
        plan = jf.lower(w, h, xs).compile()
        extra = {"graph": plan.graphs is not None, "graph_error": plan.graph_error}
    print(json.dumps({"lib": lib, "steps": n, "first_s": round(first, 3),
                      "call_ms": round(med * 1e3, 3),
                      "per_step_us": round(med * 1e6 / n, 2), **extra}), flush=True)


if __name__ == "__main__":
    for lib in sys.argv[1:] or ["funcgrad", "jax"]:
        for n in (10, 1000, 10000):
            run(lib, n)
