"""Loops in CPU jit plans: a jitted RNN scan, bodies as numpy calls (before) vs compiled (after).

The scan is bench_loops.py's: h = tanh(h @ W + x), ys = sum(h), H=64, B=32, 10 and 1,000 steps,
float32, forward and value_and_grad (whose reverse pass is a reversed scan). "before" runs the
loops the way plans did before funcgrad/backends/cpu/loops.py: the body's numpy impls equation
by equation (loops.run_np), built by leaving the loop entries out of cpu_steps.STEP_BUILDERS;
"after" runs each body as a compiled CPU program. JAX-CPU's lax.scan runs beside them when jax
is importable. The three alternate in rounds in one process; each figure is the median call.
Usage: python benchmarks/bench_cpu_loops.py [--rounds 5] [--steps 10 1000]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_loops import _data, _loss


@contextlib.contextmanager
def _numpy_loops():
    """Plans built inside run their loops through the numpy impls (the engine before)."""
    from funcgrad.backends.cpu import steps as cpu_steps
    from funcgrad.prims.loops import EXEC_PRIMS
    saved = {p: cpu_steps.STEP_BUILDERS.pop(p) for p in EXEC_PRIMS if p in cpu_steps.STEP_BUILDERS}
    try:
        yield
    finally:
        cpu_steps.STEP_BUILDERS.update(saved)


def _funcgrad(mode, kind, n):
    import funcgrad
    import funcgrad.numpy as fnp
    from funcgrad import lax
    f = _loss(fnp, lax)
    jf = funcgrad.jit(f if kind == "fwd" else funcgrad.value_and_grad(f))
    args = [funcgrad.device_put(a, "cpu") for a in _data(n)]   # as JAX's: no copy per call
    ctx = _numpy_loops() if mode == "before" else contextlib.nullcontext()
    with ctx:   # plans are built on the first calls and when they fuse (third call)
        t = time.perf_counter()
        out = jf(*args)
        first = time.perf_counter() - t
        for _ in range(4):
            out = jf(*args)
    plan = jf.lower(*args).compile()
    assert plan.calls >= 5 and not plan._after, "the plan should have fused by now"

    def call():
        return jf(*args)
    return call, first, out


def _jax(kind, n):
    import jax
    import jax.numpy as jnp
    from jax import lax
    jax.config.update("jax_default_matmul_precision", "highest")
    f = _loss(jnp, lax)
    jf = jax.jit(f if kind == "fwd" else jax.value_and_grad(f))
    args = [jax.device_put(a) for a in _data(n)]
    t = time.perf_counter()
    out = jax.block_until_ready(jf(*args))
    first = time.perf_counter() - t

    def call():
        return jax.block_until_ready(jf(*args))
    return call, first, out


def _median_call(call, reps):
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        call()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, nargs="+", default=[10, 1000])
    a = ap.parse_args()
    try:
        import jax  # noqa: F401
        have_jax = True
    except ImportError:
        have_jax = False
    for kind in ("fwd", "grad"):
        for n in a.steps:
            runs = {m: _funcgrad(m, kind, n) for m in ("before", "after")}
            if have_jax:
                runs["jax"] = _jax(kind, n)
            ref = [np.asarray(v) for v in _leaves(runs["before"][2])]
            for m in ("after", "jax"):   # the numpy path's numbers (bit for bit for "after")
                if m in runs:
                    got = [np.asarray(v) for v in _leaves(runs[m][2])]
                    for x, y in zip(ref, got):
                        if m == "after":
                            np.testing.assert_array_equal(x, y)
                        else:
                            np.testing.assert_allclose(x, y, rtol=1e-3, atol=1e-3)
            reps = max(5, min(200, 20000 // n))
            times = {m: [] for m in runs}
            for _ in range(a.rounds):
                for m, (call, _, _) in runs.items():
                    times[m].append(_median_call(call, reps))
            row = {"kind": kind, "steps": n, "reps": reps, "rounds": a.rounds}
            for m, ts in times.items():
                row[f"{m}_ms"] = round(float(np.median(ts)) * 1e3, 3)
                row[f"{m}_first_s"] = round(runs[m][1], 3)
            row["after_per_step_us"] = round(row["after_ms"] * 1e3 / n, 2)
            row["speedup_vs_before"] = round(row["before_ms"] / row["after_ms"], 2)
            if have_jax:
                row["after_over_jax"] = round(row["after_ms"] / row["jax_ms"], 2)
            print(json.dumps(row), flush=True)


def _leaves(x):
    if isinstance(x, (tuple, list)):
        return [y for v in x for y in _leaves(v)]
    return [x]


if __name__ == "__main__":
    main()
