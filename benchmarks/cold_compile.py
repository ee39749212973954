"""W2's first call on a cold kernel cache, split into before the compile phase (trace, passes,
plan), the compile phase (compile.prewarm: dry run and parallel compiles) and after it (loading
the kernels, the planned run). One JSON line; set FUNCGRAD_CACHE_DIR to an empty folder first.

Usage: FUNCGRAD_CACHE_DIR=$(mktemp -d) python benchmarks/cold_compile.py [--timeline]
"""
from __future__ import annotations

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "examples")]


def main() -> None:
    import gpt
    from workloads import gpt_step

    import funcgrad
    from funcgrad.cuda import compile as fcompile
    spans = []
    orig = fcompile.prewarm

    def timed(*args, **kwargs):
        t = time.perf_counter()
        try:
            return orig(*args, **kwargs)
        finally:
            spans.append((t, time.perf_counter()))
    fcompile.prewarm = timed
    params = funcgrad.device_put(gpt.init_params(gpt.W2))
    step, opt, idx, tgt = gpt_step(gpt.W2, 16, True)
    state = [params, opt.init(params)]
    t0 = time.perf_counter()
    state[0], state[1], val = step(state[0], state[1], idx, tgt)
    val.block_until_ready()
    t1 = time.perf_counter()
    state[0], state[1], val = step(state[0], state[1], idx, tgt)
    val.block_until_ready()
    second = time.perf_counter() - t1
    info = dict(step.lower(state[0], state[1], idx, tgt).compile().compile_info)
    if "--timeline" not in sys.argv:
        info.pop("timeline", None)
    info["errors"] = [e[-200:] for e in info.get("errors", [])]
    (a, b), = spans or [(t0, t0)]
    print(json.dumps({"what": "W2_cold_first_call", "first_call_s": round(t1 - t0, 3),
                      "before_prewarm_s": round(a - t0, 3), "prewarm_s": round(b - a, 3),
                      "after_prewarm_s": round(t1 - b, 3), "second_call_s": round(second, 3),
                      "compile_info": info}, default=str), flush=True)


if __name__ == "__main__":
    main()
