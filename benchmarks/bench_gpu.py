"""funcgrad's side of the GPU workloads W1-W5 (WORKLOADS.md): one JSON line per figure.

Run beside peers_gpu.py / peers_graphs.py in the same session and combine with report.py.
Usage: python benchmarks/bench_gpu.py [W1 W2 W3 W4 W5 eager]
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "examples")]

from workloads import MlpAdam, gpt_step, median_seconds

import funcgrad
from funcgrad import nn


def emit(**kw):
    print(json.dumps(kw), flush=True)


def mlp_step_ms(batch, sizes, reps=20, steps_per_call=1):
    """Median ms per training step (a call runs steps_per_call steps) and the first call's s."""
    step = MlpAdam(sizes, batch, steps_per_call=steps_per_call)
    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    # warm-up past the first replays (a graph's capture, and the GEMM policy's A/B launches)
    ms = median_seconds(step, warm=20, reps=reps) * 1e3 / steps_per_call
    graph_info(step.plan())
    return ms, first


def graph_info(plan):
    """Whether the plan replays as a CUDA graph (and why not)."""
    g = getattr(plan, "graphs", None)
    emit(what="plan", graph=getattr(plan, "graph", None) is not None,
         graph_error=getattr(plan, "graph_error", None), steps=len(getattr(plan, "steps", [])),
         rewired=getattr(g, "rewired", None), gemm_policy=getattr(g, "gemm_policy", None),
         gemm_ab=getattr(g, "gemm_ab", None))


def w2_gpt(donate=False):
    """W2's AdamW step; donate=True passes donate_argnums=(0, 1) (updates in place)."""
    import gpt
    cfg = gpt.W2
    B = 16
    from funcgrad import cuda as fcuda
    fcuda.empty_cache()
    base = fcuda.memory_stats()["in_use"]
    pool = __import__("funcgrad.cuda.arrays", fromlist=["x"]).pool()
    pool.peak = pool.in_use     # measure this variant's peak from here
    params = funcgrad.device_put(gpt.init_params(cfg))
    step, opt, idx, tgt = gpt_step(cfg, B, donate)
    state = [params, opt.init(params)]

    def run():
        state[0], state[1], val = step(state[0], state[1], idx, tgt)
        val.block_until_ready()
    t0 = time.perf_counter()
    run()
    first = time.perf_counter() - t0
    from funcgrad.cuda import plan as fplan
    if fplan.PROFILE is not None:
        run()
        fplan.PROFILE.clear()  # profile steady-state steps, not compilation
        run()
        print(fplan.profile_report(), flush=True)
        return
    ms = median_seconds(run, warm=20, reps=10) * 1e3
    plan = step.lower(state[0], state[1], idx, tgt).compile()
    graph_info(plan)
    emit(what="W2_compile", **{k: v for k, v in plan.compile_info.items() if k != "errors"},
         errors=len(plan.compile_info.get("errors", [])))
    tag = "_donated" if donate else ""
    emit(what="W2_memory_plan_MiB" + tag, planned=step.lower(state[0], state[1], idx, tgt)
         .peak_bytes() / 2**20, **{k: v / 2**20 for k, v in plan.planned_bytes().items()})
    emit(what="W2_gpt_step_ms" + tag, impl="funcgrad_jit", value=ms, first_call_s=first,
         peak_MiB=(fcuda.memory_stats()["peak_bytes"] - base) / 2**20)
    del state[:], plan, step


def w3(eager: bool):
    n = 2 ** 26
    rng = np.random.default_rng(0)
    x, a, b = [funcgrad.device_put(rng.standard_normal(n).astype(np.float32)) for _ in range(3)]

    def f(x, a, b):
        return nn.gelu(x * a + b)
    g = f if eager else funcgrad.jit(f)
    ms = median_seconds(lambda: g(x, a, b).block_until_ready()) * 1e3
    emit(what="W3_elementwise_ms", impl="funcgrad_eager" if eager else "funcgrad_jit", value=ms,
         min_bytes=4 * n * 4)


def w4(eager: bool):
    rng = np.random.default_rng(0)
    a, b = [funcgrad.device_put(rng.standard_normal((4096, 4096)).astype(np.float32))
            for _ in range(2)]
    g = (lambda a, b: a @ b) if eager else funcgrad.jit(lambda a, b: a @ b)
    ms = median_seconds(lambda: g(a, b).block_until_ready(), reps=10) * 1e3
    emit(what="W4_matmul4096_ms", impl="funcgrad_eager" if eager else "funcgrad_jit", value=ms,
         TFLOPs=2 * 4096 ** 3 / ms / 1e9)


def main(which):
    import torch
    emit(what="versions", funcgrad=funcgrad.__version__, backend=funcgrad.default_backend(),
         gpu=torch.cuda.get_device_name(0))
    if "W3" in which:
        w3(eager=True)
        w3(eager=False)
    if "W4" in which:
        w4(eager=True)
        w4(eager=False)
    if "W5" in which:
        ms, first = mlp_step_ms(32, [64, 64, 2], reps=50)
        emit(what="W5_tiny_step_ms", impl="funcgrad_jit", value=ms, first_call_s=first)
        # not W5 as defined (one step per call): ten steps per jitted call, per step
        ms, first = mlp_step_ms(32, [64, 64, 2], reps=20, steps_per_call=10)
        emit(what="W5_tiny_step_ms_10_per_call", impl="funcgrad_jit", value=ms,
             first_call_s=first)
    if "W1" in which:
        ms, first = mlp_step_ms(512, [784, 1024, 1024, 10])
        emit(what="W1_mlp_step_ms", impl="funcgrad_jit", value=ms, first_call_s=first)
    if "W2" in which:
        w2_gpt()
        import gc
        gc.collect()
        w2_gpt(donate=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["W1", "W2", "W3", "W4", "W5"])
