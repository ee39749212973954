"""Per-step wall times of examples/train_gpt.py's jitted step (W2 model, numpy batches each step,
donated parameters, the example's optimizer), and how the plan replays (graphs captured).

Usage: python benchmarks/gpt_steps.py [steps]
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "examples")]

import gpt  # noqa: E402
import train_gpt  # noqa: E402

import funcgrad  # noqa: E402


def main(steps=40):
    cfg, batch = gpt.W2, 16
    data = np.frombuffer(open(os.path.join(HERE, "..", "data", "tinyshakespeare.txt"),
                              "rb").read(), np.uint8)
    params = funcgrad.device_put(gpt.init_params(cfg))
    opt = train_gpt.make_optimizer(1000, 1e-3, 100)
    opt_state = opt.init(params)

    step_fn = funcgrad.jit(train_gpt.make_train_step(cfg, opt), donate_argnums=(0, 1))
    it = train_gpt.batches(data, batch, cfg.ctx, np.random.default_rng(0))
    times = []
    for i in range(steps):
        x, y = next(it)
        t = time.perf_counter()
        params, opt_state, loss = step_fn(params, opt_state, x, y)
        loss.block_until_ready()
        times.append(time.perf_counter() - t)
    plan = step_fn.lower(params, opt_state, x, y).compile()
    g = getattr(plan, "graphs", None)
    print(f"first {times[0]:.2f} s; then ms per step:",
          " ".join(f"{1e3 * t:.1f}" for t in times[1:]))
    print(f"median of the last {steps // 2}: {1e3 * np.median(times[steps // 2:]):.2f} ms; "
          f"graphs cached {len(g.entries) if g else 0}, graph_error {plan.graph_error}, "
          f"static_error {getattr(plan, 'static_error', None)}, stats {step_fn.stats()}")
    if g:   # what differs between the graphs' keys (set, then argument addresses)
        keys = list(g.entries)
        for a, b in zip(keys, keys[1:]):
            diff = [(j, a[1][j], b[1][j]) for j in range(len(a[1])) if a[1][j] != b[1][j]]
            print(f"set {a[0]} -> {b[0]}: {len(diff)} arguments differ, e.g. {diff[:4]}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
