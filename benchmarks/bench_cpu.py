"""funcgrad's side of the CPU workloads C1/C2 (WORKLOADS.md): one jitted Adam step of an MLP.

`python benchmarks/bench_cpu.py` prints one JSON line per figure; run beside peers_cpu.py on the
same machine and combine with report.py. `--pair N` runs N rounds, each one funcgrad process and
one JAX-CPU process (peers_cpu.py --only jax, the order alternating by round), and prints every
round's figures, the ratios and their spread: on a shared machine one pair is not a result.
`--base DIR` adds a third process per round running the funcgrad found in DIR (e.g. a `git
worktree add DIR <commit>` of an earlier commit), for before/after figures from the same run.
Both sides donate the parameters and the optimizer state to the step (donate_argnums=(0, 1),
as a training loop does); `--no-donate` times both without.
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


def run_funcgrad(reps, donate=True):
    import funcgrad
    sys.path.insert(0, HERE)
    from workloads import MlpAdam, median_seconds
    funcgrad.config.update("default_device", "cpu")
    for name, (sizes, batch) in SIZES.items():
        step = MlpAdam(sizes, batch, scale=0.05, donate=donate)
        ms = median_seconds(step, warm=5, reps=reps) * 1e3
        print(json.dumps({"what": f"{name}_step_ms", "impl": "funcgrad_jit_cpu", "value": ms}),
              flush=True)


def _figures(cmd, env=None):
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
    rows = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    return {r["what"]: r["value"] for r in rows}


def pair(rounds, reps, base=None, donate=True):
    flags = ["--reps", str(reps)] + ([] if donate else ["--no-donate"])
    ours = [sys.executable, os.path.abspath(__file__), *flags]
    jax = [sys.executable, os.path.join(HERE, "peers_cpu.py"), "--only", "jax", *flags]
    procs = [("funcgrad", ours, None), ("jax", jax, None)]
    if base:
        env = dict(os.environ, PYTHONPATH=os.path.abspath(base))
        procs.append(("base", ours, env))
    got = {who: [] for who, _, _ in procs}
    for r in range(rounds):
        for who, cmd, env in (procs if r % 2 == 0 else procs[::-1]):
            got[who].append(_figures(cmd, env))
        print(json.dumps({"round": r, **{who: got[who][-1] for who in got}}), flush=True)
    for what in sorted(got["funcgrad"][0]):
        for who in [w for w in got if w != "jax"]:
            f = [g[what] for g in got[who]]
            j = [g[what] for g in got["jax"]]
            ratio = [a / b for a, b in zip(f, j)]
            name = "funcgrad" if who == "funcgrad" else f"funcgrad at {base}"
            print(json.dumps({"what": what, "who": who, "funcgrad_ms": f, "jax_cpu_ms": j,
                              "ratio": ratio, "median_ratio": statistics.median(ratio),
                              "funcgrad_median": statistics.median(f),
                              "jax_median": statistics.median(j)}), flush=True)
            print(f"{what}: {name} {statistics.median(f):.3f} ms (min {min(f):.3f}, "
                  f"max {max(f):.3f}), JAX-CPU {statistics.median(j):.3f} ms "
                  f"(min {min(j):.3f}, max {max(j):.3f}); ratio per round "
                  f"{', '.join(f'{x:.2f}' for x in ratio)}; median {statistics.median(ratio):.2f}x",
                  flush=True)
        if base:
            ratio = [g[what] / b[what] for g, b in zip(got["funcgrad"], got["base"])]
            print(f"{what}: funcgrad / base per round {', '.join(f'{x:.2f}' for x in ratio)}; "
                  f"median {statistics.median(ratio):.3f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", type=int, default=0, metavar="N",
                    help="N interleaved rounds of funcgrad and JAX-CPU processes")
    ap.add_argument("--reps", type=int, default=50, help="timed steps per figure")
    ap.add_argument("--base", metavar="DIR", help="with --pair: also time the funcgrad in DIR")
    ap.add_argument("--no-donate", dest="donate", action="store_false",
                    help="steps without donated parameters and optimizer state (both sides)")
    a = ap.parse_args()
    if a.pair:
        pair(a.pair, a.reps, a.base, a.donate)
    else:
        run_funcgrad(a.reps, a.donate)


if __name__ == "__main__":
    main()
