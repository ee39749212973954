"""W2's first call on a cold kernel cache, split into before the compile phase (trace, passes,
plan), the compile phase (compile.prewarm: dry run and parallel compiles) and after it (loading
the kernels, the planned run). One JSON line; set FUNCGRAD_CACHE_DIR to an empty folder first.

Usage: FUNCGRAD_CACHE_DIR=$(mktemp -d) python benchmarks/cold_compile.py [--timeline] [--early]
    [--profile] [--server-first]
(--early: compile.start_early() runs as tracing starts, as a one-line hook in jit would; jit
itself does so unless FUNCGRAD_COMPILE_EARLY=0. --profile: the first call under cProfile, its
top functions by cumulative time on stderr. --server-first: the compile server starts before the
parameters are put on the GPU, as a backend that started it when created would)
"""
from __future__ import annotations

import json
import os
import sys
import time

T_SCRIPT = time.perf_counter()   # the script's start: imports and set-up count in script_s
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "examples")]


def main() -> None:
    import gpt
    from workloads import gpt_step

    import funcgrad
    import funcgrad.compile.jit  # the module: funcgrad.jit is the function
    from funcgrad.cuda import backend as fbackend
    from funcgrad.cuda import compile as fcompile
    fjit = sys.modules["funcgrad.jit"]
    spent: dict = {}

    def timed(owner, attr, key, before=None):
        orig = getattr(owner, attr)

        def wrapper(*args, **kwargs):
            if before is not None:
                before()
            t = time.perf_counter()
            try:
                return orig(*args, **kwargs)
            finally:
                spent.setdefault(key, []).append((t, time.perf_counter()))
        setattr(owner, attr, wrapper)
    armed = []   # set at the first call: nothing before it starts the server

    def early_start():
        if armed:
            fcompile.start_early()
    early = early_start if "--early" in sys.argv else None
    timed(fjit, "trace_to_expr", "trace", early)   # --early: the server starts as tracing does
    timed(fjit, "optimize", "optimize")
    timed(fbackend.CudaBackend, "compile", "plan")
    timed(fcompile, "prewarm", "prewarm")
    timed(fcompile, "start_early", "start_early")
    if "--server-first" in sys.argv:   # as a backend that starts it when created would
        fcompile.start_early()
    params = funcgrad.device_put(gpt.init_params(gpt.W2))
    step, opt, idx, tgt = gpt_step(gpt.W2, 16, True)
    state = [params, opt.init(params)]
    armed.append(True)
    prof = None
    if "--profile" in sys.argv:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    t0 = time.perf_counter()
    state[0], state[1], val = step(state[0], state[1], idx, tgt)
    val.block_until_ready()
    t1 = time.perf_counter()
    if prof is not None:
        import pstats
        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(45)
    state[0], state[1], val = step(state[0], state[1], idx, tgt)
    val.block_until_ready()
    second = time.perf_counter() - t1
    info = dict(step.lower(state[0], state[1], idx, tgt).compile().compile_info)
    if "--timeline" not in sys.argv:
        info.pop("timeline", None)
    info["errors"] = [e[-200:] for e in info.get("errors", [])]
    a, b = spent.get("prewarm", [(t0, t0)])[0]
    print(json.dumps({"what": "W2_cold_first_call",
                      "server_start": "trace" if early else "dry run",
                      "first_call_s": round(t1 - t0, 3), "script_s": round(t1 - T_SCRIPT, 3),
                      "before_prewarm_s": round(a - t0, 3),
                      **{f"{k}_s": round(sum(e - s for s, e in v if s < t1), 3)
                         for k, v in spent.items() if k != "prewarm"},
                      "prewarm_s": round(b - a, 3), "after_prewarm_s": round(t1 - b, 3),
                      "second_call_s": round(second, 3), "compile_info": info},
                     default=str), flush=True)


if __name__ == "__main__":
    main()
