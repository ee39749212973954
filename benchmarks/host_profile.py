"""Where a jitted step's host time goes: cProfile over many W5/W1/W2 calls (GPU), plus per-call
times.

Usage: python benchmarks/host_profile.py [W5|W1|W2] [calls]
"""
from __future__ import annotations

import cProfile
import os
import pstats
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "examples")]

from workloads import MlpAdam, gpt_step  # noqa: E402


class _Gpt:
    """W2's donated step with the MlpAdam interface used below (step(), .step, .params, ...)."""

    def __init__(self):
        import gpt

        import funcgrad
        self.step, opt, self.x, self.y = gpt_step(gpt.W2, 16)
        self.params = funcgrad.device_put(gpt.init_params(gpt.W2))
        self.state = opt.init(self.params)

    def __call__(self):
        self.params, self.state, v = self.step(self.params, self.state, self.x, self.y)
        v.block_until_ready()


def main(which="W5", calls=2000):
    if which == "W2":
        step = _Gpt()
    else:
        sizes, batch = ([64, 64, 2], 32) if which == "W5" else ([784, 1024, 1024, 10], 512)
        step = MlpAdam(sizes, batch)
    for _ in range(30):
        step()
    s = step.step

    def launch_only(n):
        p, st = step.params, step.state
        for _ in range(n):
            p, st, v = s(p, st, step.x, step.y)
        v.block_until_ready()
        step.params, step.state = p, st

    launch_only(50)
    t = time.perf_counter()
    launch_only(calls)
    per = (time.perf_counter() - t) / calls
    t = time.perf_counter()
    for _ in range(calls // 4):
        step()
    synced = (time.perf_counter() - t) / (calls // 4)
    print(f"{which}: {per * 1e6:.1f} us/call launched back to back (host-bound), "
          f"{synced * 1e6:.1f} us/call with a sync after each", flush=True)
    pr = cProfile.Profile()
    pr.enable()
    launch_only(calls)
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "W5",
         int(sys.argv[2]) if len(sys.argv) > 2 else 2000)
