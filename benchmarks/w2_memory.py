"""The pool through the donated W2 step: in_use/peak after each stage, and the plan's figures.

Usage: python benchmarks/w2_memory.py (on a GPU)
"""
import sys

import numpy as np
sys.path[:0] = ["benchmarks", "examples"]
import funcgrad, gpt
from funcgrad import optim
from funcgrad import cuda as fcuda
from funcgrad.cuda import arrays
cfg, B = gpt.W2, 16
pool = arrays.pool()
def mib(x): return round(x / 2**20, 1)
def stats(tag):
    s = fcuda.memory_stats()
    print(f"{tag:28s} in_use {mib(s['in_use'] - base)} peak {mib(s['peak_bytes'] - base)}", flush=True)
fcuda.empty_cache(); base = fcuda.memory_stats()["in_use"]; pool.peak = pool.in_use
params = funcgrad.device_put(gpt.init_params(cfg)); stats("params")
opt = optim.adamw(3e-4); st = opt.init(params); stats("opt.init")
leaves = funcgrad.tree_util.tree_leaves(st)
print("state leaves:", len(leaves), "contiguous:", sum(l.buf.is_contiguous() for l in leaves if hasattr(l.buf, "is_contiguous")), "devices", {l.device for l in leaves})
def step(p, s, idx, tgt):
    val, g = funcgrad.value_and_grad(gpt.loss_fn)(p, idx, tgt, cfg)
    u, s = opt.update(g, s, p)
    return optim.apply_updates(p, u), s, val
step = funcgrad.jit(step, donate_argnums=(0, 1))
rng = np.random.default_rng(0)
idx = funcgrad.device_put(rng.integers(0, cfg.vocab, (B, cfg.ctx)).astype(np.int32))
tgt = funcgrad.device_put(rng.integers(0, cfg.vocab, (B, cfg.ctx)).astype(np.int32))
stats("batch")
low = step.lower(params, st, idx, tgt)
params, st, v = step(params, st, idx, tgt); v.block_until_ready(); stats("call 1")
params, st, v = step(params, st, idx, tgt); v.block_until_ready(); stats("call 2")
params, st, v = step(params, st, idx, tgt); v.block_until_ready(); stats("call 3")
plan = low.compile()
print("planned MiB", mib(low.peak_bytes()), {k: mib(v) for k, v in plan.planned_bytes().items()})
