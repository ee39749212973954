"""bfloat16 GEMM figures on a GPU: W4's 4096^3 product in bf16 under funcgrad.jit (bf16 result,
and float32 through preferred_element_type), torch's bf16 matmul beside it. One JSON line each.

Each figure: `reps` back-to-back calls (graph replays queue without waiting), one wait at the
end, time / reps, after a warm-up; the median of 5 such runs.
Usage: python benchmarks/bench_bf16.py [--n 4096] [--reps 50]
"""
from __future__ import annotations

import argparse
import json
import time

import ml_dtypes
import numpy as np

import funcgrad
from funcgrad import lax


def emit(**kw):
    print(json.dumps(kw), flush=True)


def per_call(fn, reps):
    fn().block_until_ready()
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps - 1):
            fn()
        fn().block_until_ready()
        runs.append((time.perf_counter() - t0) / reps)
    return float(np.median(runs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=50)
    a = ap.parse_args()
    n, flops = a.n, 2 * a.n ** 3
    from funcgrad.cuda import gemm_backend
    rng = np.random.default_rng(0)
    x, y = (funcgrad.device_put(rng.standard_normal((n, n)).astype(ml_dtypes.bfloat16))
            for _ in range(2))
    mm = funcgrad.jit(lambda a, b: a @ b)
    mm32 = funcgrad.jit(lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())),
                                                     preferred_element_type=np.float32))
    for impl, f in (("funcgrad_jit_bf16", mm), ("funcgrad_jit_bf16_to_f32", mm32)):
        s = per_call(lambda f=f: f(x, y), a.reps)
        emit(work=f"W4 bf16 {n}^3", impl=impl, ms=s * 1e3, tflops=flops / s / 1e12,
             backend=gemm_backend("bfloat16"))
    ref = np.asarray(mm(x, y)).astype(np.float32)[:64]
    want = np.asarray(x).astype(np.float32)[:64] @ np.asarray(y).astype(np.float32)
    emit(check="W4 bf16 rows 0-63 vs float32", max_rel=float(
        np.max(np.abs(ref - want)) / np.max(np.abs(want))))
    try:
        import torch
    except ImportError:
        return
    ta, tb = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))

    class T:
        def __init__(self):
            self.r = None

        def __call__(self):
            self.r = ta @ tb
            return self

        def block_until_ready(self):
            torch.cuda.synchronize()
    s = per_call(T(), a.reps)
    emit(work=f"W4 bf16 {n}^3", impl="torch_bf16", ms=s * 1e3, tflops=flops / s / 1e12,
         version=torch.__version__)


if __name__ == "__main__":
    main()
