"""Where examples/train_gpt.py's time per step goes: its own loop (numpy batches, the loss read
every --log-every steps) against the bare jitted step, on the GPU.

Variants, each for --steps steps after 20 warm-up steps, in one process (one compile):
  loop     the example's loop: next(batches), step_fn(params, opt_state, x, y) with numpy x, y,
           float(loss) every 10 steps
  device   the same with x, y put on the device first (funcgrad.device_put)
  bare     the same device batch every step, no loss read (the W2 step as bench_gpu times it)
Prints one JSON line per variant: ms per step (wall, synchronized at the end), and the median
host time of the step_fn call itself.

Usage: python benchmarks/train_loop.py [--steps 200]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "examples")]

import gpt
import train_gpt

import funcgrad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()
    cfg = gpt.W2
    train, _ = train_gpt.load_data()
    rng = np.random.default_rng(0)
    opt = train_gpt.make_optimizer(3000, 1e-3, 100)
    params = funcgrad.device_put(gpt.init_params(cfg, 0))
    opt_state = opt.init(params)

    step_fn = funcgrad.jit(train_gpt.make_train_step(cfg, opt), donate_argnums=(0, 1))
    it = train_gpt.batches(train, 16, cfg.ctx, rng)
    state = [params, opt_state]

    def run(variant, n):
        calls = []
        xd, yd = funcgrad.device_put(next(it))
        funcgrad.block_until_ready(state)
        t0 = time.perf_counter()
        for i in range(n):
            if variant == "bare":
                x, y = xd, yd
            else:
                x, y = next(it)
                if variant == "device":
                    x, y = funcgrad.device_put((x, y))
            c = time.perf_counter()
            state[0], state[1], loss = step_fn(state[0], state[1], x, y)
            calls.append(time.perf_counter() - c)
            if variant != "bare" and i % 10 == 0:
                float(loss)
        funcgrad.block_until_ready(state)
        wall = (time.perf_counter() - t0) / n * 1e3
        return wall, float(np.median(calls)) * 1e3

    for variant in ("loop", "device", "bare"):
        run(variant, 20)
    for variant in ("loop", "device", "bare", "loop"):
        wall, call = run(variant, args.steps)
        print(json.dumps({"what": "train_loop", "variant": variant, "ms_per_step": wall,
                          "step_fn_call_ms": call, "steps": args.steps}))


if __name__ == "__main__":
    main()
