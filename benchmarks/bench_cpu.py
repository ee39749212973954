"""funcgrad's side of the CPU workloads C1/C2 (WORKLOADS.md): one jitted Adam step of an MLP.

Prints one JSON line per figure; run beside peers_cpu.py on the same machine, combine with
report.py.
"""
from __future__ import annotations

import json
import time

import numpy as np

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import nn, optim

SIZES = {"C1": ([64, 128, 128, 10], 128), "C2": ([784, 512, 512, 10], 256)}


def med(fn, reps=50, warm=5):
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts)) * 1e3


def main():
    funcgrad.config.update("default_device", "cpu")
    rng = np.random.default_rng(0)
    for name, (sizes, batch) in SIZES.items():
        params = [{"w": rng.standard_normal((a, b)).astype(np.float32) * 0.05,
                   "b": np.zeros(b, np.float32)} for a, b in zip(sizes[:-1], sizes[1:])]
        x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
        y = rng.integers(0, sizes[-1], batch).astype(np.int32)

        def loss(p, x, y):
            h = x
            for i, layer in enumerate(p):
                h = h @ layer["w"] + layer["b"]
                if i < len(p) - 1:
                    h = nn.relu(h)
            return fnp.mean(nn.softmax_cross_entropy_with_integer_labels(h, y))

        opt = optim.adam(1e-3)

        @funcgrad.jit
        def step(p, s, x, y):
            val, g = funcgrad.value_and_grad(loss)(p, x, y)
            u, s = opt.update(g, s, p)
            return optim.apply_updates(p, u), s, val

        params = funcgrad.device_put(params)
        xs, ys = funcgrad.device_put((x, y))
        state = [params, opt.init(params)]

        def run():
            state[0], state[1], _ = step(state[0], state[1], xs, ys)
        print(json.dumps({"what": f"{name}_step_ms", "impl": "funcgrad_jit_cpu",
                          "value": med(run)}), flush=True)


if __name__ == "__main__":
    main()
