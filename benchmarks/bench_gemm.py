"""GEMM figures on a GPU: funcgrad's dot_general through cuBLAS (fp32, TF32) and through its
numba kernel, beside torch (allow_tf32 False/True) in the same process. One JSON line each.

W4 is 4096^3 float32 under funcgrad.jit; the other shapes are the W1/W2 products (MLP layers,
GPT projections, per-head attention scores) with transposed and batched operands.
Usage: python benchmarks/bench_gemm.py [--quick] [--w2] [--w4]
(--quick: no numba-kernel figures; --w2: only W2's GPT step, in fp32 then with TF32; --w4: only
W4's figures, quick.)
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from workloads import median_seconds  # noqa: E402

import funcgrad  # noqa: E402
import funcgrad.numpy as fnp  # noqa: E402
from funcgrad.cuda import blas  # noqa: E402


def emit(**kw):
    print(json.dumps(kw), flush=True)


class numba_only:
    """Within this block dot_general takes the numba kernel (as without a binding)."""

    def __enter__(self):
        blas._load()
        self.saved = dict(blas._state)
        blas._state.update(api=None, why="forced by bench_gemm")

    def __exit__(self, *exc):
        blas._state.clear()
        blas._state.update(self.saved)


class strided_only:
    """Within this block batch-1 products also take cublasGemmStridedBatchedEx (nvmath binding):
    what blas.py did before it called cublasGemmEx for them."""

    def __enter__(self):
        api = self.api = blas._state["api"]

        def gemm(stream, ws, nbytes, args):
            api.cb.set_stream(api.handle, stream)
            api.cb.set_workspace(api.handle, ws, nbytes)
            api.cb.gemm_strided_batched_ex(api.handle, *args)
        api.gemm = gemm

    def __exit__(self, *exc):
        del self.api.gemm


# (name, batch, M, N, K, dimension_numbers of x (B?, M, K) / y, x transposed?, y transposed?)
SHAPES = [
    ("W1 784->1024 fwd", 1, 512, 1024, 784, False, False),
    ("W1 1024->1024 dW (x^T dy)", 1, 1024, 1024, 512, True, False),
    ("W1 1024->1024 dx (dy W^T)", 1, 512, 1024, 1024, False, True),
    ("W2 qkv 4096x384->1152", 1, 4096, 1152, 384, False, False),
    ("W2 mlp 4096x1536->384", 1, 4096, 384, 1536, False, False),
    ("W2 scores 96x(256x64 @ 64x256)", 96, 256, 256, 64, False, True),
]


def _operands(rng, B, M, N, K, ta, tb):
    """x, y as stored (transposed operands stored as their transpose, read through strides)."""
    def mk(r, c, t):
        shape = (c, r) if t else (r, c)
        return funcgrad.device_put(rng.standard_normal(
            shape if B == 1 else (B,) + shape).astype(np.float32))
    return mk(M, K, ta), mk(K, N, tb)


def _product(ta, tb, precision):
    """jit(x, y -> x' @ y'), ' a transpose inside the plan (a strided view) when asked."""
    def t(a, yes):
        return fnp.swapaxes(a, -1, -2) if yes else a
    return funcgrad.jit(lambda a, b: fnp.matmul(t(a, ta), t(b, tb), precision=precision))


def _time(f, *args, reps=20):
    return median_seconds(lambda: f(*args).block_until_ready(), warm=3, reps=reps)


def torch_ms(M, N, K, B, ta, tb, tf32, reps=20):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = tf32
    g = torch.Generator(device="cuda").manual_seed(0)

    def mk(r, c, t):
        a = torch.randn((B, c, r) if t else (B, r, c), device="cuda", generator=g)
        return a.transpose(-1, -2) if t else a
    a, b = mk(M, K, ta), mk(K, N, tb)

    def run():
        a @ b
        torch.cuda.synchronize()
    ms = median_seconds(run, warm=3, reps=reps) * 1e3
    torch.backends.cuda.matmul.allow_tf32 = False
    return ms


def w4(rng, quick):
    n = 4096
    a, b = [funcgrad.device_put(rng.standard_normal((n, n)).astype(np.float32))
            for _ in range(2)]
    flops = 2 * n ** 3
    fp32 = funcgrad.jit(lambda a, b: a @ b)
    tf32 = funcgrad.jit(lambda a, b: fnp.matmul(a, b, precision="tensorfloat32"))
    for impl, f in (("funcgrad_jit_cublas_fp32", fp32), ("funcgrad_jit_cublas_tf32", tf32)):
        ms = _time(f, a, b, reps=10) * 1e3
        emit(what="W4_matmul4096_ms", impl=impl, value=ms, TFLOPs=flops / ms / 1e9)
    if type(blas._state.get("api")).__name__ == "_Nvmath":
        with strided_only():   # fresh jits: a plan replays the GEMM it captured
            for impl, prec in (("fp32", None), ("tf32", "tensorfloat32")):
                ms = _time(_product(False, False, prec), a, b, reps=10) * 1e3
                emit(what="W4_matmul4096_ms", impl=f"funcgrad_jit_cublas_strided1_{impl}",
                     value=ms, TFLOPs=flops / ms / 1e9)
    # the config switch: the same jitted function retraces with TF32
    funcgrad.config.update("default_matmul_precision", "tensorfloat32")
    ms = _time(fp32, a, b, reps=10) * 1e3
    funcgrad.config.update("default_matmul_precision", None)
    emit(what="W4_matmul4096_ms", impl="funcgrad_jit_config_tf32", value=ms,
         TFLOPs=flops / ms / 1e9, traces=fp32.stats()["traces"])
    if not quick:
        with numba_only():
            g = funcgrad.jit(lambda a, b: a @ b)
            ms = _time(g, a, b, reps=5) * 1e3
        emit(what="W4_matmul4096_ms", impl="funcgrad_jit_numba_fp32", value=ms,
             TFLOPs=flops / ms / 1e9)
    for tf in (False, True):
        ms = torch_ms(n, n, n, 1, False, False, tf, reps=10)
        emit(what="W4_matmul4096_ms", impl=f"torch_{'tf32' if tf else 'fp32'}", value=ms,
             TFLOPs=flops / ms / 1e9)
    # accuracy of the TF32 product against float64 (relative to |A||B|, the documented scale)
    an, bn = np.asarray(a)[:512].astype(np.float64), np.asarray(b).astype(np.float64)
    ex = an @ bn
    scale = np.abs(an) @ np.abs(bn)
    for impl, f in (("fp32", fp32), ("tf32", tf32)):
        got = np.asarray(f(a, b))[:512]
        emit(what="W4_error_vs_float64", impl=impl,
             max_rel_to_absAabsB=float(np.max(np.abs(got - ex) / scale)),
             max_rel=float(np.max(np.abs(got - ex)) / np.max(np.abs(ex))))


def shapes(rng, quick):
    for name, B, M, N, K, ta, tb in SHAPES:
        x, y = _operands(rng, B, M, N, K, ta, tb)
        flops = 2 * B * M * N * K
        row = {"what": "gemm_ms", "shape": name}
        for impl, prec in (("cublas_fp32", None), ("cublas_tf32", "tensorfloat32")):
            row[impl] = _time(_product(ta, tb, prec), x, y) * 1e3
        if B == 1 and type(blas._state.get("api")).__name__ == "_Nvmath":
            with strided_only():
                row["cublas_strided1_fp32"] = _time(_product(ta, tb, None), x, y) * 1e3
                row["cublas_strided1_tf32"] = _time(_product(ta, tb, "tensorfloat32"), x,
                                                    y) * 1e3
        if not quick:
            with numba_only():
                row["numba_fp32"] = _time(_product(ta, tb, None), x, y) * 1e3
        row["torch_fp32"] = torch_ms(M, N, K, B, ta, tb, False)
        row["torch_tf32"] = torch_ms(M, N, K, B, ta, tb, True)
        row["TFLOPs"] = {k: round(flops / v / 1e9, 1) for k, v in row.items()
                         if k.endswith(("fp32", "tf32"))}
        emit(**row)


def graph_check(rng):
    """A jitted step with several GEMMs replays as one CUDA graph (cuBLAS calls captured)."""
    x = funcgrad.device_put(rng.standard_normal((256, 512)).astype(np.float32))
    w = funcgrad.device_put(rng.standard_normal((512, 512)).astype(np.float32))

    @funcgrad.jit
    def step(x, w):
        return funcgrad.grad(lambda w: fnp.sum(fnp.tanh(x @ w) @ w))(w)
    want = np.asarray(step(x, w))
    step(x, w)
    plan = step.lower(x, w).compile()
    got = np.asarray(step(x, w))
    emit(what="graph_check", graph=getattr(plan, "graph", None) is not None,
         graph_error=getattr(plan, "graph_error", None),
         replay_equal=bool(np.array_equal(got, want)),
         ms=_time(step, x, w) * 1e3)


def main(argv):
    import torch
    quick = "--quick" in argv
    emit(what="versions", gpu=torch.cuda.get_device_name(0), torch=torch.__version__,
         gemm_backend=funcgrad.cuda.gemm_backend("float32"), date=time.strftime("%Y-%m-%d"))
    rng = np.random.default_rng(0)
    if "--w4" in argv:
        w4(rng, True)
    elif "--w2" not in argv:
        w4(rng, quick)
        graph_check(rng)
        shapes(rng, quick)
    else:   # the GPT step (bench_gpu.py W2) in fp32, then with TF32 by config
        import bench_gpu
        bench_gpu.w2_gpt()
        funcgrad.config.update("default_matmul_precision", "tensorfloat32")
        bench_gpu.emit = lambda **kw: emit(**dict(kw, default_matmul_precision="tensorfloat32"))
        bench_gpu.w2_gpt()


if __name__ == "__main__":
    main(sys.argv[1:])
