"""Why W5 ran slower after W3/W4 in one process: W5's step timed fresh, right after W4, after a
pause, and after a full garbage collection, in one process. One JSON line per figure.

Usage: python benchmarks/w5_sequence.py
"""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gpu import emit, w4
from workloads import MlpAdam, median_seconds


def clocks() -> str:
    """SM clock and temperature (nvidia-smi), or '' without it."""
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,temperature.gpu,power.draw",
                               "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def main():
    step = MlpAdam([64, 64, 2], 32)
    step()

    def timed(label):
        ms = median_seconds(step, warm=20, reps=50) * 1e3
        emit(what="W5_tiny_step_ms", when=label, value=ms, gpu=clocks())
    timed("fresh")
    w4(eager=False)
    timed("right after W4")
    time.sleep(10)
    timed("10 s after W4")
    gc.collect()
    timed("after gc.collect")
    gc.freeze()
    timed("after gc.freeze")


if __name__ == "__main__":
    main()
