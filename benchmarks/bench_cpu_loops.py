"""Loops in CPU jit plans: scalar loops and a jitted RNN scan, before and after compiled loops.

Scalar loops (`--workloads fori scan`, issue figures of the 2-core VM beside them): a jitted
`lax.fori_loop` of 100,000 steps of x = x * 0.9999 + i and a `lax.scan` over 1,000,000
float32 xs of c = c * 0.999 + x, y = 2c (carry and ys). Three engines: "numpy" runs the
loop's body equation by equation with the numpy impls (loops.run_np), "python" runs it as a
compiled program called from a generated Python loop (cpu_loops, the engine before drivers:
FUNCGRAD_CPU_LOOP_DRIVERS=0), "driver" runs the whole loop as one njit function
(funcgrad/backends/cpu/drivers.py). JAX-CPU runs beside them when jax is importable; else
the row gives the issue's JAX-CPU figures (1 ms and 0.1 s, 2-core VM, 2026-12-02) and says so.
Each engine's figure is the median of `--rounds` round medians (engines alternate in rounds
in one process; "numpy", seconds a call, in the first round only); `noise` is the spread of
the round medians (max / min - 1).

The RNN scan (`--workloads rnn`) is bench_loops.py's: h = tanh(h @ W + x), ys = sum(h), H=64,
B=32, 10 and 1,000 steps, float32, forward and value_and_grad (whose reverse pass is a
reversed scan). "before" runs the loops the way plans did before funcgrad/backends/cpu/loops.py:
the body's numpy impls equation by equation (loops.run_np), built by leaving the loop entries
out of cpu_steps.STEP_BUILDERS; "after" runs each body as a compiled CPU program (its tanh and
product keep it off the drivers). JAX-CPU's lax.scan runs beside them when jax is importable.
Usage: python benchmarks/bench_cpu_loops.py [--rounds 5] [--steps 10 1000]
       [--workloads fori scan rnn]
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


# the issue's JAX-CPU figures (0.10.2, 2-core VM, 2026-12-02), ms per call
ISSUE_JAX_MS = {"fori": 1.0, "scan": 100.0}
FORI_STEPS, SCAN_STEPS = 100_000, 1_000_000


def _scalar_program(np_, lax, kind):
    if kind == "fori":
        def f(x):
            return lax.fori_loop(0, FORI_STEPS, lambda i, x: x * np_.float32(0.9999) + i, x)
    else:
        def f(c, xs):
            def step(c, x):
                c = c * np_.float32(0.999) + x
                return c, c * np_.float32(2.0)
            return lax.scan(step, c, xs)
    return f


def _scalar_data(kind):
    if kind == "fori":
        return [np.float32(0.0)]
    xs = np.random.default_rng(0).standard_normal(SCAN_STEPS).astype(np.float32)
    return [np.float32(0.0), xs]


def _scalar_funcgrad(engine, kind):
    import funcgrad
    from funcgrad import lax
    os.environ["FUNCGRAD_CPU_LOOP_DRIVERS"] = "0" if engine == "python" else "1"
    jf = funcgrad.jit(_scalar_program(np, lax, kind))
    args = [funcgrad.device_put(a, "cpu") for a in _scalar_data(kind)]
    ctx = _numpy_loops() if engine == "numpy" else contextlib.nullcontext()
    with ctx:
        t = time.perf_counter()
        out = jf(*args)
        first = time.perf_counter() - t
        for _ in range(3):   # the third call fuses the plan (and builds the loop's driver)
            out = jf(*args)
    os.environ.pop("FUNCGRAD_CPU_LOOP_DRIVERS")
    if engine == "driver":
        from funcgrad.backends.cpu import steps as cpu_steps
        plan = jf.lower(*args).compile()
        (s,) = [s for s in plan.program.steps if s.eqn.prim.name == "loop_run"]
        bs = s.eqn.params["rec"].device_cache["cpu"][(True, cpu_steps.exact_only())]
        assert bs.driver is not None and bs.driver.runs >= 2, "the loop should be driven"

    def call():
        return _leaves(jf(*args))[0].block_until_ready()
    return call, first, out


def _scalar_jax(kind):
    import jax
    from jax import lax
    import jax.numpy as jnp
    jf = jax.jit(_scalar_program(jnp, lax, kind))
    args = [jax.device_put(a) for a in _scalar_data(kind)]
    t = time.perf_counter()
    out = jax.block_until_ready(jf(*args))
    first = time.perf_counter() - t

    def call():
        return jax.block_until_ready(jf(*args))
    return call, first, out


def scalar_loops(kinds, rounds, have_jax):
    """One JSON row per scalar workload: ms per call of each engine, its noise, the ratios."""
    for kind in kinds:
        runs = {e: _scalar_funcgrad(e, kind) for e in ("numpy", "python", "driver")}
        if have_jax:
            runs["jax"] = _scalar_jax(kind)
        ref = [np.asarray(v) for v in _leaves(runs["numpy"][2])]
        for e in ("python", "driver"):   # bit for bit the numpy interpreter's
            for x, y in zip(ref, [np.asarray(v) for v in _leaves(runs[e][2])]):
                np.testing.assert_array_equal(x, y)
        times = {e: [] for e in runs}
        for r in range(rounds):
            for e, (call, _, _) in runs.items():
                if e == "numpy" and r:   # seconds a call: timed in the first round only
                    continue
                times[e].append(_median_call(call, 3 if e == "python" else 15))
        row = {"workload": kind, "steps": FORI_STEPS if kind == "fori" else SCAN_STEPS,
               "rounds": rounds}
        for e, ts in times.items():
            row[f"{e}_ms"] = round(float(np.median(ts)) * 1e3, 3)
            row[f"{e}_noise"] = round(max(ts) / min(ts) - 1, 2)
            row[f"{e}_first_s"] = round(runs[e][1], 3)
        row["driver_ns_per_step"] = round(row["driver_ms"] * 1e6 / row["steps"], 1)
        row["driver_speedup_vs_python"] = round(row["python_ms"] / row["driver_ms"], 1)
        if have_jax:
            row["driver_over_jax"] = round(row["driver_ms"] / row["jax_ms"], 2)
        else:
            row["jax_ms_from_issue"] = ISSUE_JAX_MS[kind]
            row["driver_over_issue_jax"] = round(row["driver_ms"] / ISSUE_JAX_MS[kind], 2)
        print(json.dumps(row), flush=True)


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
    ap.add_argument("--workloads", nargs="+", default=["fori", "scan", "rnn"],
                    choices=["fori", "scan", "rnn"])
    a = ap.parse_args()
    try:
        import jax  # noqa: F401
        have_jax = True
    except ImportError:
        have_jax = False
    scalar_loops([k for k in a.workloads if k != "rnn"], a.rounds, have_jax)
    if "rnn" not in a.workloads:
        return
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
