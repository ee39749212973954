"""The pool through the donated W2 step: in_use / peak after each stage, and the plan's figures.

Usage: python benchmarks/w2_memory.py (on a GPU)
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "examples")]

import gpt  # noqa: E402
from workloads import gpt_step  # noqa: E402

import funcgrad  # noqa: E402
from funcgrad import cuda as fcuda  # noqa: E402
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
    step, opt, idx, tgt = gpt_step(cfg, B)
    st = opt.init(params)
    stats("opt.init")
    low = step.lower(params, st, idx, tgt)
    for i in range(3):
        params, st, v = step(params, st, idx, tgt)
        v.block_until_ready()
        stats(f"call {i + 1}")
    held = {k: mib(v) for k, v in low.compile().planned_bytes().items()}
    print(f"planned {mib(low.peak_bytes())} MiB: {held}")


if __name__ == "__main__":
    main()
