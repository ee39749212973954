"""funcgrad's side of the CPU workloads C1/C2 (WORKLOADS.md): one jitted Adam step of an MLP.

Prints one JSON line per figure; run beside peers_cpu.py on the same machine, combine with
report.py.
"""
from __future__ import annotations

import json
import os
import sys

import funcgrad

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workloads import MlpAdam, median_seconds

SIZES = {"C1": ([64, 128, 128, 10], 128), "C2": ([784, 512, 512, 10], 256)}


def main():
    funcgrad.config.update("default_device", "cpu")
    for name, (sizes, batch) in SIZES.items():
        step = MlpAdam(sizes, batch, scale=0.05)
        ms = median_seconds(step, warm=5, reps=50) * 1e3
        print(json.dumps({"what": f"{name}_step_ms", "impl": "funcgrad_jit_cpu", "value": ms}),
              flush=True)


if __name__ == "__main__":
    main()
