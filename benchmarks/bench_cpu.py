"""funcgrad's side of the CPU workloads C1/C2 (WORKLOADS.md): one jitted Adam step of an MLP.

`python benchmarks/bench_cpu.py` prints one JSON line per figure; run beside peers_cpu.py on the
same machine and combine with report.py. `--pair N` runs N rounds, each one funcgrad process and
one JAX-CPU process (peers_cpu.py --only jax, the order alternating by round), and prints every
round's figures, the ratios and their spread: on a shared machine one pair is not a result.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = {"C1": ([64, 128, 128, 10], 128), "C2": ([784, 512, 512, 10], 256)}


def run_funcgrad(reps):
    import funcgrad
    sys.path.insert(0, HERE)
    from workloads import MlpAdam, median_seconds
    funcgrad.config.update("default_device", "cpu")
    for name, (sizes, batch) in SIZES.items():
        step = MlpAdam(sizes, batch, scale=0.05)
        ms = median_seconds(step, warm=5, reps=reps) * 1e3
        print(json.dumps({"what": f"{name}_step_ms", "impl": "funcgrad_jit_cpu", "value": ms}),
              flush=True)


def _figures(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rows = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    return {r["what"]: r["value"] for r in rows}


def pair(rounds, reps):
    ours = [sys.executable, os.path.abspath(__file__), "--reps", str(reps)]
    jax = [sys.executable, os.path.join(HERE, "peers_cpu.py"), "--only", "jax",
           "--reps", str(reps)]
    got = {"funcgrad": [], "jax": []}
    for r in range(rounds):
        order = [("funcgrad", ours), ("jax", jax)]
        for who, cmd in (order if r % 2 == 0 else order[::-1]):
            got[who].append(_figures(cmd))
        print(json.dumps({"round": r, "funcgrad": got["funcgrad"][-1], "jax": got["jax"][-1]}),
              flush=True)
    for what in sorted(got["funcgrad"][0]):
        f = [g[what] for g in got["funcgrad"]]
        j = [g[what] for g in got["jax"]]
        ratio = [a / b for a, b in zip(f, j)]
        print(json.dumps({"what": what, "funcgrad_ms": f, "jax_cpu_ms": j, "ratio": ratio,
                          "median_ratio": statistics.median(ratio),
                          "funcgrad_median": statistics.median(f),
                          "jax_median": statistics.median(j)}), flush=True)
        print(f"{what}: funcgrad {statistics.median(f):.3f} ms (min {min(f):.3f}, "
              f"max {max(f):.3f}), JAX-CPU {statistics.median(j):.3f} ms (min {min(j):.3f}, "
              f"max {max(j):.3f}); ratio per round {', '.join(f'{x:.2f}' for x in ratio)}; "
              f"median {statistics.median(ratio):.2f}x", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", type=int, default=0, metavar="N",
                    help="N interleaved rounds of funcgrad and JAX-CPU processes")
    ap.add_argument("--reps", type=int, default=50, help="timed steps per figure")
    a = ap.parse_args()
    if a.pair:
        pair(a.pair, a.reps)
    else:
        run_funcgrad(a.reps)


if __name__ == "__main__":
    main()
