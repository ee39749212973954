"""The pool through the donated W2 step: in_use / peak after each stage, and the plan's figures.

Usage: python benchmarks/w2_memory.py (on a GPU)
"""
from __future__ import annotations

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "examples")]

import gpt  # noqa: E402

import funcgrad  # noqa: E402
from funcgrad import cuda as fcuda  # noqa: E402
from funcgrad import optim  # noqa: E402
from funcgrad.cuda import arrays  # noqa: E402


def mib(x) -> float:
    return round(x / 2**20, 1)


def main():
    cfg, B = gpt.W2, 16
    pool = arrays.pool()
    fcuda.empty_cache()
    base = fcuda.memory_stats()["in_use"]
    pool.peak = pool.in_use

    def stats(tag):
        s = fcuda.memory_stats()
        print(f"{tag:12s} in_use {mib(s['in_use'] - base)} MiB, peak "
              f"{mib(s['peak_bytes'] - base)} MiB", flush=True)

    params = funcgrad.device_put(gpt.init_params(cfg))
    stats("params")
    opt = optim.adamw(3e-4)
    st = opt.init(params)
    stats("opt.init")

    def step(p, s, idx, tgt):
        val, g = funcgrad.value_and_grad(gpt.loss_fn)(p, idx, tgt, cfg)
        u, s = opt.update(g, s, p)
        return optim.apply_updates(p, u), s, val

    step = funcgrad.jit(step, donate_argnums=(0, 1))
    rng = np.random.default_rng(0)
    idx = funcgrad.device_put(rng.integers(0, cfg.vocab, (B, cfg.ctx)).astype(np.int32))
    tgt = funcgrad.device_put(rng.integers(0, cfg.vocab, (B, cfg.ctx)).astype(np.int32))
    low = step.lower(params, st, idx, tgt)
    for i in range(3):
        params, st, v = step(params, st, idx, tgt)
        v.block_until_ready()
        stats(f"call {i + 1}")
    held = {k: mib(v) for k, v in low.compile().planned_bytes().items()}
    print(f"planned {mib(low.peak_bytes())} MiB: {held}")


if __name__ == "__main__":
    main()
