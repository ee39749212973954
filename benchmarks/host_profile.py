"""Where a jitted step's host time goes: cProfile over many W5/W1/W2 calls (GPU), plus per-call
times; or, with --standin, the same per-call path on a machine without a GPU.

--standin runs W5's or W1's step (same pytrees, tiny layers) on numba's CUDA simulator with
the stand-in graph set of tests/sim_graphs.py, its launch stubbed out: what remains is the
host's Python per call (jit, the loop memo, the result pytree), split at the launch.

Usage: python benchmarks/host_profile.py [W5|W1|W2] [calls]
       python benchmarks/host_profile.py --standin [W5|W1] [calls] [--profile]
"""
from __future__ import annotations

import cProfile
import os
import pstats
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "examples")]
if "--standin" in sys.argv:   # before numba is imported
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    sys.path.insert(0, os.path.join(HERE, "..", "tests"))

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


def standin(which="W1", calls=20000, profile=False):
    """Median µs per call before the (stubbed) launch and after it, on the simulator."""
    import numpy as np
    from sim_graphs import install

    import funcgrad
    step = MlpAdam([6, 5, 3] if which == "W5" else [6, 5, 5, 3], 4)
    step.params, step.state, step.x, step.y = funcgrad.device_put(
        (step.params, step.state, step.x, step.y), "cuda")   # (the simulator's default: cpu)
    for _ in range(2):      # the dry run, then the recorded run: the plan's layout
        step()
    gs = install(step.plan())
    for _ in range(4):
        step()
    marks, clock = [], time.perf_counter

    def launch(handle, stream):
        marks.append(clock())
        return 0
    gs._launch = launch
    f, p, st, x, y = step.step, step.params, step.state, step.x, step.y
    rows = []
    for _ in range(calls):
        marks.clear()
        t0 = clock()
        p, st, _ = f(p, st, x, y)
        t1 = clock()
        rows.append((marks[0] - t0, t1 - marks[0], t1 - t0))
    med = np.median(np.array(rows[calls // 4:]), axis=0) * 1e6
    print(f"{which} stand-in: {med[0]:.2f} us before the launch, {med[1]:.2f} after, "
          f"{med[2]:.2f} per call (median of {calls - calls // 4})", flush=True)
    if profile:
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(calls):
            p, st, _ = f(p, st, x, y)
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    argv = [a for a in sys.argv[1:] if not a.startswith("--")]
    if "--standin" in sys.argv:
        standin(argv[0] if argv else "W1", int(argv[1]) if len(argv) > 1 else 20000,
                "--profile" in sys.argv)
    else:
        main(argv[0] if argv else "W5", int(argv[1]) if len(argv) > 1 else 2000)
