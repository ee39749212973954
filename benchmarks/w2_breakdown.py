"""Per-kernel GPU time of the W2 GPT step as it really runs (replayed CUDA graph).

torch.profiler (CUPTI) records every kernel node of the replayed graph; kernels are grouped by
name (funcgrad's generated kernels are named after what they compute), with time, share of the
step and launches per step. Writes the table to stdout and, with --out DIR, the plan's kernel list.

Usage: python benchmarks/w2_breakdown.py [--tf32] [--steps 5] [--out DIR] [--workload W1]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "examples")]

import funcgrad  # noqa: E402


def build(tf32: bool):
    import gpt
    from workloads import gpt_step
    cfg, B = gpt.W2, 16
    if tf32:
        funcgrad.config.update("default_matmul_precision", "tensorfloat32")
    params = funcgrad.device_put(gpt.init_params(cfg))
    step, opt, idx, tgt = gpt_step(cfg, B)
    state = [params, opt.init(params)]

    def run():
        state[0], state[1], val = step(state[0], state[1], idx, tgt)
        return val

    return step, state, idx, tgt, run


def build_mlp(which: str):
    """W1 or W5 (benchmarks/workloads.py's MlpAdam) in build()'s shape."""
    from workloads import MlpAdam
    sizes, batch = ([784, 1024, 1024, 10], 512) if which == "W1" else ([64, 64, 2], 32)
    m = MlpAdam(sizes, batch)
    state = [m.params, m.state]

    def run():
        state[0], state[1], val = m.step(state[0], state[1], m.x, m.y)
        return val

    return m.step, state, m.x, m.y, run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="W2")
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    if a.tf32:
        funcgrad.config.update("default_matmul_precision", "tensorfloat32")
    step, state, idx, tgt, run = (build(a.tf32) if a.workload == "W2"
                                  else build_mlp(a.workload))
    t0 = time.perf_counter()
    run().block_until_ready()
    print(f"first call {time.perf_counter() - t0:.2f} s", flush=True)
    info = step.lower(state[0], state[1], idx, tgt).compile().compile_info
    print("slowest kernels to compile (s):", [(round(t, 1), w[-40:]) for t, w in
                                                info.get("slowest", [])[:5]], flush=True)
    for _ in range(5):
        run().block_until_ready()
    ts = []
    for _ in range(20):
        t = time.perf_counter()
        run().block_until_ready()
        ts.append(time.perf_counter() - t)
    wall = float(np.median(ts)) * 1e3
    host = []
    for _ in range(20):     # host time of a call (returns before the GPU is done)
        t = time.perf_counter()
        v = run()
        host.append(time.perf_counter() - t)
        v.block_until_ready()
    print(f"host time per call {float(np.median(host)) * 1e3:.3f} ms", flush=True)
    if os.environ.get("W2_CPROFILE"):
        import cProfile
        import pstats
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(20):
            run()
        pr.disable()
        funcgrad.block_until_ready(run())
        pstats.Stats(pr).sort_stats("tottime").print_stats(12)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(a.steps):
            run()
        torch.cuda.synchronize()
        funcgrad.block_until_ready(run())
    n = a.steps + 1
    rows: dict = {}
    t_lo, t_hi = float("inf"), 0.0
    for ev in prof.events():
        if ev.device_type.name != "CUDA":
            continue
        t_lo, t_hi = min(t_lo, ev.time_range.start), max(t_hi, ev.time_range.end)
        name = ev.name
        r = rows.setdefault(name, [0.0, 0])
        r[0] += ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
        r[1] += 1
    total = sum(r[0] for r in rows.values()) / n
    print(f"{a.workload} step{' (TF32)' if a.tf32 else ''}: wall {wall:.2f} ms, GPU kernel time "
          f"{total / 1e3:.2f} ms per step, {sum(r[1] for r in rows.values()) / n:.0f} "
          f"kernels per step; first kernel to last: {(t_hi - t_lo) / n / 1e3:.2f} ms per step",
          flush=True)
    print(f"{'us/step':>9} {'share':>6} {'n/step':>6}  kernel")
    for name, (us, cnt) in sorted(rows.items(), key=lambda kv: -kv[1][0])[:45]:
        print(f"{us / n:9.1f} {us / n / total:6.1%} {cnt / n:6.1f}  {name[:110]}")
    if a.out:
        plan = step.lower(state[0], state[1], idx, tgt).compile()
        with open(os.path.join(a.out, "w2_plan.txt"), "w") as f:
            f.write(plan.describe())
        _dump_sources(rows, n, os.path.join(a.out, "w2_kernels.txt"))


def _dump_sources(rows, n, path):
    """The generated source of each profiled kernel (its module's digest is in the name)."""
    import re

    from funcgrad.backends import kernel_files
    with open(path, "w") as f:
        for name, (us, cnt) in sorted(rows.items(), key=lambda kv: -kv[1][0])[:45]:
            m = re.search(r"fgk_([0-9a-f]{24})", name)
            mod = kernel_files._modules.get(f"funcgrad_kernels.{m.group(1)}") if m else None
            f.write(f"=== {us / n:.1f} us/step, {cnt / n:.1f}/step: {name}\n")
            if mod is not None:
                f.write(open(mod.__file__).read().split('"""', 2)[-1][-4000:] + "\n")


if __name__ == "__main__":
    main()
