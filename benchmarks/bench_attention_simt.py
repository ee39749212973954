"""Exact-float32 (SIMT) flash-attention kernels at W2's shapes, one tile configuration at a time.

For each kernel W2 runs (fwdl, delta, dq, dkv) and each configuration given (the defaults of
attention_src.GPU_CONFIGS first, then candidates): seconds of the first call (compiling and
loading the kernel, on a cold cache), registers and local memory per thread, GPU time per call
(CUPTI, 20 calls), TFLOP/s on the causal work, and the largest difference from the first
configuration's result. One JSON line per figure.

Usage: python benchmarks/bench_attention_simt.py [B N T H]
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_attention import _gpu_ms, emit

import funcgrad

# candidates (BR, BC, TY, TX[, VEC, U[, PF]]) besides the defaults; see attention_src.py
CANDIDATES = {
    "fwdl": [(64, 32, 16, 8), (64, 32, 16, 8, 0, 8), (64, 32, 16, 8, 0, 16), (64, 32, 16, 8, 1, 8),
             (64, 32, 32, 8, 0, 8), (64, 32, 32, 8, 1, 8), (64, 32, 16, 16, 0, 8),
             (64, 32, 16, 16, 1, 8), (64, 32, 32, 16, 0, 8), (32, 32, 16, 8, 0, 8),
             (32, 32, 8, 16, 0, 8), (64, 32, 8, 8, 1, 8), (32, 64, 8, 8, 1, 8),
             (64, 32, 32, 8, 0, 8, 1), (64, 32, 16, 8, 0, 8, 1)],
    "delta": [(64, 32, 16, 8), (64, 32, 16, 8, 1, 8), (32, 32, 8, 8, 0, 8), (64, 32, 32, 8, 0, 8)],
    "dq": [(32, 32, 8, 8), (32, 32, 8, 8, 0, 8), (32, 32, 8, 8, 1, 8), (32, 32, 16, 8, 0, 8),
           (32, 32, 16, 8, 1, 8), (32, 32, 8, 16, 0, 8), (32, 32, 8, 16, 1, 8),
           (32, 32, 16, 16, 0, 8), (16, 32, 8, 8, 0, 8), (16, 32, 4, 16, 0, 8),
           (32, 32, 4, 8, 1, 8), (32, 32, 16, 8, 0, 8, 1), (32, 32, 16, 16, 0, 8, 1)],
    "dkv": [(32, 32, 8, 8), (32, 32, 8, 8, 0, 8), (32, 32, 8, 8, 1, 8), (32, 32, 16, 8, 0, 8),
            (32, 32, 16, 8, 1, 8), (32, 32, 8, 16, 0, 8), (32, 32, 8, 16, 1, 8),
            (32, 32, 16, 16, 0, 8), (16, 32, 8, 8, 0, 8), (16, 32, 4, 16, 0, 8),
            (32, 32, 4, 8, 1, 8), (32, 32, 16, 8, 0, 8, 1), (32, 32, 16, 16, 0, 8, 1)],
}


def _one(per_signature):
    """The value of a kernel's only compiled signature (numba answers a dict)."""
    return next(iter(per_signature.values())) if isinstance(per_signature, dict) \
        else per_signature


def sweep(q, k, v, w, fwd_flop, modes):
    from numba import cuda

    from funcgrad.attention_lse import _fwdl_impl
    from funcgrad.attention_prim import _stats_impl
    from funcgrad.core import ShapedArray
    from funcgrad.cuda import attention as CA
    from funcgrad.cuda import attention_src as AS
    from funcgrad.cuda import runtime
    from funcgrad.cuda.arrays import from_host, to_host
    b, t, n, h = q.shape
    scale = 1 / np.sqrt(h)
    flat = _fwdl_impl(q, k, v, scale=scale, causal=True)
    o = flat[:q.size].reshape(q.shape)
    lse = np.ascontiguousarray(flat[q.size:].reshape(b, n, t))
    st = _stats_impl(q, k, o, w, scale=scale, causal=True)
    qb, kb, vb, gb, ob, sb, lb = (from_host(x) for x in (q, k, v, w, o, st, lse))
    calls = {   # mode: (call, GEMM-sized products)
        "fwdl": (lambda: CA.fwdl(qb, kb, vb, scale, True, ShapedArray(flat.shape, q.dtype)), 2),
        "delta": (lambda: CA.delta(ob, gb, lb, ShapedArray(st.shape, q.dtype)), 0),
        "dq": (lambda: CA.dq(qb, kb, vb, gb, sb, scale, True, ShapedArray(q.shape, q.dtype)),
               3),
        "dkv": (lambda: CA.dkv(qb, kb, vb, gb, sb, scale, True,
                               ShapedArray((b, t, n, 2 * h), q.dtype)), 4)}
    default = {m: list(c) for m, c in AS.GPU_CONFIGS.items()}
    d = CA._pad_dim(h, h)
    for mode in modes:
        call, units = calls[mode]
        first = None
        for cfg in [default[mode][0]] + CANDIDATES.get(mode, []):
            if AS.config_words(mode, d, cfg) * 4 > AS.SMEM_WORDS_BYTES:
                emit(what="skipped", kernel=mode, config=cfg, why="shared memory")
                continue
            AS.GPU_CONFIGS[mode] = [cfg]
            cuda.synchronize()
            t0 = time.perf_counter()
            try:
                got = to_host(call())
            except Exception as e:  # noqa: BLE001  (a configuration that fails to compile)
                emit(what="failed", kernel=mode, config=cfg, error=repr(e)[:300])
                continue
            first_s = time.perf_counter() - t0
            used = AS.pick_config(mode, d, 4, runtime.SIM)
            kern = next(kv for key, kv in runtime._kernels.items()
                    if key[:2] == ("attention2", mode) and key[-1] == used)
            first = got if first is None else first
            ms = _gpu_ms(call, 20)
            emit(what="kernel", kernel=mode, config=list(used), value_ms=ms,
                 first_call_s=round(first_s, 3),
                 regs=None if runtime.SIM else _one(kern.get_regs_per_thread()),
                 local_bytes=None if runtime.SIM else _one(kern.get_local_mem_per_thread()),
                 tflops=units * fwd_flop / 2 / ms / 1e9 if ms and units else None,
                 max_diff_vs_first=float(np.abs(got - first).max()))
        AS.GPU_CONFIGS[mode] = default[mode]


def main(b=16, n=6, t=256, h=64):
    rng = np.random.default_rng(0)
    q, k, v, w = (rng.standard_normal((b, t, n, h)).astype(np.float32) for _ in range(4))
    fwd_flop = 4 * b * n * t * t * h / 2          # two GEMMs, causal half
    emit(what="shape", b=b, n=n, t=t, h=h, causal=True, dtype="float32")
    x = funcgrad.device_put(np.ones(4, np.float32), "cuda")   # context and compiler warm
    np.asarray(x + 1)
    sweep(q, k, v, w, fwd_flop, ("fwdl", "delta", "dq", "dkv"))


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:5]))
