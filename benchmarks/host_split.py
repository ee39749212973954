"""Where a replayed step's wall time goes on the host: Python before the graph launch, the launch
call itself, Python after it (results, donation, unflatten), and the wait for the GPU, as medians
over synchronized calls of W5, W1 and W2 (GPU). One JSON line per workload.

Usage: python benchmarks/host_split.py [W5 W1 W2] [--reps N]   (N calls timed, default 200)
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "examples")]

from bench_gpu import emit  # noqa: E402
from host_profile import _Gpt  # noqa: E402
from workloads import MlpAdam  # noqa: E402


def split(step, reps=200):
    """Medians (µs) of: call start -> launch, the launch call, launch return -> call return,
    call return -> GPU done; the GraphSet's launch is wrapped to time it."""
    plan = step.step.lower(step.params, step.state, step.x, step.y).compile()
    gs = plan.graphs
    marks = []
    orig = gs._launch

    def launch(handle, stream):
        marks.append(time.perf_counter())
        err = orig(handle, stream)
        marks.append(time.perf_counter())
        return err
    gs._launch = launch
    rows = []
    try:
        for _ in range(reps):
            marks.clear()
            t0 = time.perf_counter()
            step.params, step.state, v = step.step(step.params, step.state, step.x, step.y)
            t1 = time.perf_counter()
            v.block_until_ready()
            t2 = time.perf_counter()
            if len(marks) == 2:
                rows.append((marks[0] - t0, marks[1] - marks[0], t1 - marks[1], t2 - t1,
                             t2 - t0))
    finally:
        gs._launch = orig
    med = np.median(np.array(rows), axis=0) * 1e6
    return dict(zip(("pre_launch_us", "launch_us", "post_launch_us", "wait_us", "wall_us"),
                    (round(float(x), 1) for x in med)), calls=len(rows))


def main(which, reps=200):
    for w in which:
        if w == "W2":
            step = _Gpt()
        else:
            sizes, batch = ([64, 64, 2], 32) if w == "W5" else ([784, 1024, 1024, 10], 512)
            step = MlpAdam(sizes, batch)
        for _ in range(30):
            step()
        emit(what="host_split", workload=w, **split(step, reps))


if __name__ == "__main__":
    args = sys.argv[1:]
    n = 200
    if "--reps" in args:
        k = args.index("--reps")
        n, args = int(args[k + 1]), args[:k] + args[k + 2:]
    main(args or ["W5", "W1", "W2"], n)
