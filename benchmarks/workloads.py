"""funcgrad's MLP workloads (W1, W5, C1, C2 of WORKLOADS.md) and the timer, shared by benchmarks."""
from __future__ import annotations

import time

import numpy as np

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import lax, nn, optim


def median_seconds(fn, warm=3, reps=20) -> float:
    """Median wall time of fn() (which must block until its result is ready)."""
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def mlp_loss(params, x, y):
    """Softmax cross-entropy of an MLP with ReLU between its layers (the peers' loss)."""
    h = x
    for i, layer in enumerate(params):
        h = h @ layer["w"] + layer["b"]
        if i < len(params) - 1:
            h = nn.relu(h)
    return fnp.mean(nn.softmax_cross_entropy_with_integer_labels(h, y))


class MlpAdam:
    """One jitted Adam(1e-3) step of an MLP on a fixed random batch, on the default device.

    Calling the object runs one call and waits for its loss; with steps_per_call=k the call runs
    k steps (a lax.fori_loop inside the jitted function); with donate=True the parameters and
    the optimizer state are donated to the step (donate_argnums=(0, 1)).
    """

    def __init__(self, sizes, batch, scale=0.02, seed=0, steps_per_call=1, donate=False):
        rng = np.random.default_rng(seed)
        params = funcgrad.device_put([
            {"w": (rng.standard_normal((a, b)) * scale).astype(np.float32),
             "b": np.zeros(b, np.float32)} for a, b in zip(sizes[:-1], sizes[1:])])
        opt = optim.adam(1e-3)

        def one(p, s, x, y):
            val, g = funcgrad.value_and_grad(mlp_loss)(p, x, y)
            u, s = opt.update(g, s, p)
            return optim.apply_updates(p, u), s, val

        def step(p, s, x, y):
            if steps_per_call == 1:
                return one(p, s, x, y)
            return lax.fori_loop(0, steps_per_call, lambda i, c: one(c[0], c[1], x, y),
                                 (p, s, np.float32(0)))

        step = funcgrad.jit(step, donate_argnums=(0, 1) if donate else ())
        self.step, self.params, self.state = step, params, opt.init(params)
        self.x = funcgrad.device_put(rng.standard_normal((batch, sizes[0])).astype(np.float32))
        self.y = funcgrad.device_put(rng.integers(0, sizes[-1], batch).astype(np.int32))

    def __call__(self):
        self.params, self.state, val = self.step(self.params, self.state, self.x, self.y)
        val.block_until_ready()

    def plan(self):
        """The compiled executable of the step (a CUDA Plan on the GPU)."""
        return self.step.lower(self.params, self.state, self.x, self.y).compile()


def gpt_step(cfg, batch, donate=True, seed=0):
    """W2's jitted AdamW(3e-4) step of examples/gpt.py's model (examples/ must be on sys.path),
    its optimizer, and a fixed random token batch (idx, tgt) on the default device."""
    import gpt
    opt = optim.adamw(3e-4)

    def step(p, s, idx, tgt):
        val, g = funcgrad.value_and_grad(gpt.loss_fn)(p, idx, tgt, cfg)
        u, s = opt.update(g, s, p)
        return optim.apply_updates(p, u), s, val

    rng = np.random.default_rng(seed)
    idx, tgt = (funcgrad.device_put(rng.integers(0, cfg.vocab, (batch, cfg.ctx))
                                    .astype(np.int32)) for _ in range(2))
    return funcgrad.jit(step, donate_argnums=(0, 1) if donate else ()), opt, idx, tgt
