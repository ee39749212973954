"""Eager (op-by-op) CUDA figures for W3 and W4 of WORKLOADS.md, beside PyTorch eager in the same
process, plus a few diagnostics of the eager backend. One JSON line per figure.

Usage: python benchmarks/bench_eager.py [W3 W4 diag]
Shapes copied from the peers' script (../shared/bench/peers.py): W3 y = gelu_tanh(x * a + b) on
2^26 float32 values each; W4 4096 x 4096 x 4096 float32 matmul (torch with TF32 off).
"""
from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time

import numpy as np

import funcgrad
import funcgrad.cuda as fcuda
import funcgrad.numpy as fnp
from funcgrad import nn


def emit(**kw):
    print(json.dumps(kw), flush=True)


def timeit(fn, sync, warm=3, reps=20):
    for _ in range(warm):
        fn()
    sync()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def fsync():
    funcgrad.core.get_backend("cuda").synchronize()


def main(which):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    tsync = torch.cuda.synchronize
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    emit(what="versions", gpu=torch.cuda.get_device_name(0), torch=torch.__version__,
         numpy=np.__version__, date=datetime.date.today().isoformat(), commit=commit,
         python=sys.version.split()[0])
    rng = np.random.default_rng(0)
    if "W3" in which:
        n = 2 ** 26
        hx, ha, hb = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
        x, a, b = (funcgrad.device_put(h, "cuda") for h in (hx, ha, hb))
        t = timeit(lambda: nn.gelu(x * a + b), fsync)
        emit(what="W3_elementwise_ms", impl="funcgrad_eager", value=t * 1e3,
             GBps_min_traffic=4 * n * 4 / t / 1e9)
        got = np.asarray(nn.gelu(x * a + b))
        tx, ta, tb = (torch.from_numpy(h).cuda() for h in (hx, ha, hb))
        f = lambda: torch.nn.functional.gelu(tx * ta + tb, approximate="tanh")  # noqa: E731
        t = timeit(f, tsync)
        emit(what="W3_elementwise_ms", impl="torch_eager", value=t * 1e3)
        emit(what="W3_max_abs_diff_vs_torch", value=float(np.max(np.abs(got - f().cpu().numpy()))))
        del x, a, b, tx, ta, tb, got
    if "W4" in which:
        N = 4096
        ha, hb = (rng.standard_normal((N, N)).astype(np.float32) for _ in range(2))
        a, b = funcgrad.device_put(ha, "cuda"), funcgrad.device_put(hb, "cuda")
        t = timeit(lambda: a @ b, fsync, reps=10)
        emit(what="W4_matmul4096_ms", impl="funcgrad_eager", value=t * 1e3,
             TFLOPs=2 * N ** 3 / t / 1e12)
        for shape in ((4096, 4096, 4096), (512, 784, 1024), (8192, 1024, 1024)):
            m, k, nn_ = shape
            pa = funcgrad.device_put(rng.standard_normal((m, k)).astype(np.float32), "cuda")
            pb = funcgrad.device_put(rng.standard_normal((k, nn_)).astype(np.float32), "cuda")
            tt = timeit(lambda: pa.T.T @ pb, fsync, reps=10)
            tn = timeit(lambda: fnp.transpose(fnp.transpose(pa) @ fnp.transpose(pb)), fsync,
                        reps=5) if shape[0] == 4096 else None
            emit(what="matmul_TFLOPs", impl="funcgrad_eager", shape=shape,
                 value=2 * m * k * nn_ / tt / 1e12,
                 transposed_operands_TFLOPs=None if tn is None else 2 * m * k * nn_ / tn / 1e12)
        ta, tb = torch.from_numpy(ha).cuda(), torch.from_numpy(hb).cuda()
        t = timeit(lambda: ta @ tb, tsync, reps=10)
        emit(what="W4_matmul4096_ms", impl="torch_fp32", value=t * 1e3,
             TFLOPs=2 * N ** 3 / t / 1e12)
        c = np.asarray(a @ b)
        ref = (ta.double() @ tb.double()).cpu().numpy()
        emit(what="W4_max_rel_err_vs_fp64", value=float(np.max(np.abs(c - ref)) /
                                                        np.max(np.abs(ref))))
        del a, b, ta, tb
    if "diag" in which:
        small = funcgrad.device_put(np.ones(1024, np.float32), "cuda")
        t = timeit(lambda: small + small, fsync, warm=20, reps=2000)
        emit(what="eager_small_add_us", value=t * 1e6)
        ts = torch.ones(1024, device="cuda")
        emit(what="eager_small_add_us", impl="torch", value=timeit(lambda: ts + ts, tsync,
                                                                   warm=20, reps=2000) * 1e6)
        big = funcgrad.device_put(rng.standard_normal(2 ** 26).astype(np.float32), "cuda")
        t = timeit(lambda: fnp.sum(big), fsync)
        emit(what="reduce_sum_2^26_GBps", value=4 * 2 ** 26 / t / 1e9)
        m = funcgrad.device_put(rng.standard_normal((8192, 4096)).astype(np.float32), "cuda")
        t = timeit(lambda: fnp.sum(m, axis=0), fsync)
        emit(what="reduce_sum_axis0_8192x4096_GBps", value=4 * m.size / t / 1e9)
        t = timeit(lambda: nn.softmax(m, axis=-1), fsync)
        emit(what="softmax_8192x4096_ms", impl="funcgrad_eager", value=t * 1e3)
        tm = torch.from_numpy(np.asarray(m)).cuda()
        emit(what="softmax_8192x4096_ms", impl="torch", value=timeit(
            lambda: torch.softmax(tm, -1), tsync) * 1e3)
        idx = funcgrad.device_put(rng.integers(0, 256, 16 * 256).astype(np.int32), "cuda")
        emb = funcgrad.device_put(rng.standard_normal((256, 384)).astype(np.float32), "cuda")
        g = funcgrad.grad(lambda e: fnp.sum(fnp.take(e, idx, axis=0) ** 2))
        t = timeit(lambda: g(emb), fsync)
        emit(what="embedding_grad_256x384_4096ids_ms", value=t * 1e3)
        emit(what="memory_stats", **fcuda.memory_stats())


if __name__ == "__main__":
    main(sys.argv[1:] or ["W3", "W4", "diag"])
