"""funcgrad against JAX-CPU on the CPU GPT workloads: the CS training step and the D1 decode step.

CS is examples/gpt.py's SMALL GPT (d 128, 2 layers, 4 heads, T 64, V 256) at batch 16, one jitted
AdamW step; D1 is a GPT-2-style KV-cache greedy decode step (ms per token; `--tiny` sizes, as
`scale.py --work D1 --tiny --cpu`). Both run ../shared/bench/scale.py, the same program text for
funcgrad and JAX, one process per figure. Each round runs one funcgrad process and one JAX-CPU
process per workload, the order alternating by round (the machine is shared: one pair is not a
result); the script prints every figure as it comes, then per workload the medians, the ratio
per round and the median ratio.

Usage: python benchmarks/bench_cpu_gpt.py [--rounds 5] [--work CS D1] [--jax-python PATH]
(JAX in a venv of its own: `--jax-python /work/jaxenv/bin/python`, or FUNCGRAD_JAX_PYTHON).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# the harness beside the checkout (../shared/bench; a worktree's is one level further up)
SCALE = os.environ.get("FUNCGRAD_SCALE_PY") or next(
    (p for p in (os.path.join(HERE, *[".."] * up, "shared", "bench", "scale.py") for up in (2, 3))
     if os.path.exists(p)), "scale.py")
# workload -> (scale.py flags, the figure to read)
WORK = {"CS": (["--work", "CS", "--prec", "fp32"], "median_ms"),
        "D1": (["--work", "D1", "--tiny", "--prec", "fp32"], "ms_per_token")}


def _figure(python, impl, work, reps):
    flags, key = WORK[work]
    cmd = [python, SCALE, "--impl", impl, "--cpu", "--reps", str(reps), *flags]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900).stdout
    rows = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    if not rows or key not in rows[-1]:
        raise RuntimeError(f"{impl} {work}: no figure in {out[-600:]!r}")
    return rows[-1][key], rows[-1].get("loss_last")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20, help="timed steps per process")
    ap.add_argument("--work", nargs="+", default=["CS", "D1"], choices=sorted(WORK))
    ap.add_argument("--jax-python", default=os.environ.get("FUNCGRAD_JAX_PYTHON",
                                                           sys.executable))
    a = ap.parse_args()
    pythons = {"funcgrad": sys.executable, "jax": a.jax_python}
    got = {(w, who): [] for w in a.work for who in pythons}
    for r in range(a.rounds):
        order = list(pythons) if r % 2 == 0 else list(pythons)[::-1]
        for w in a.work:
            for who in order:
                ms, loss = _figure(pythons[who], who, w, a.reps)
                got[w, who].append(ms)
                print(json.dumps({"round": r, "work": w, "impl": who, "ms": ms, "loss": loss}),
                      flush=True)
    for w in a.work:
        f, j = got[w, "funcgrad"], got[w, "jax"]
        ratio = [x / y for x, y in zip(f, j)]
        print(f"{w}: funcgrad {statistics.median(f):.3f} ms (min {min(f):.3f}, max {max(f):.3f}),"
              f" JAX-CPU {statistics.median(j):.3f} ms (min {min(j):.3f}, max {max(j):.3f}); "
              f"ratio per round {', '.join(f'{x:.2f}' for x in ratio)}; median "
              f"{statistics.median(ratio):.2f}x over {len(ratio)} rounds", flush=True)


if __name__ == "__main__":
    main()
