"""Attention forward + backward at W2's shapes (batch 16, 6 heads, T 256, head dim 64, causal,
fp32): funcgrad's fused flash attention vs the composed funcgrad path vs torch's
scaled_dot_product_attention, in one process; each kernel's compile time and time alone for
several tile configurations. One JSON line per figure.

Usage: python benchmarks/bench_attention.py [B N T H]
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workloads import median_seconds  # noqa: E402

import funcgrad  # noqa: E402
import funcgrad.numpy as fnp  # noqa: E402
from funcgrad import nn  # noqa: E402


def emit(**kw):
    print(json.dumps(kw), flush=True)


def composed(q, k, v):
    """softmax(where(tril, q k^T / sqrt(h), -inf)) v, [B, T, N, H] in and out."""
    q, k, v = (fnp.transpose(x, (0, 2, 1, 3)) for x in (q, k, v))
    t = q.shape[2]
    att = q @ fnp.swapaxes(k, -1, -2) * (1 / np.sqrt(q.shape[-1]))
    att = fnp.where(fnp.tril(fnp.ones((t, t), bool)), att, -np.inf)
    return fnp.transpose(nn.softmax(att, axis=-1) @ v, (0, 2, 1, 3))


def fused(q, k, v):
    return nn.dot_product_attention(q, k, v, is_causal=True)


def compile_times(h):
    """Seconds to compile each kernel (Python source -> PTX, numba + NVVM) at head dim h."""
    from numba import cuda, types

    from funcgrad.cuda import attention as CA
    from funcgrad.cuda import attention_src as AS
    from funcgrad.cuda import runtime
    runtime.load()
    arr, i64 = types.float32[::1], types.int64
    d = CA._pad_dim(h, h)
    for mode in ("fwd", "stats", "dq", "dkv"):
        cfg = AS.pick_config(mode, d, 4, False)
        ns: dict = {}
        exec(runtime.HEADER + AS.source(mode, np.dtype("float32"), np.dtype("float32"), d, cfg,
                                        False, ""), ns)
        nops = 3 if mode == "fwd" else 4
        sig = ((arr,) + (i64,) * 5) * nops + ((arr, i64) if mode in ("dq", "dkv") else ()) + (
            arr, i64) + (i64,) * 7 + (types.float64,)
        t0 = time.perf_counter()
        cuda.compile_ptx(ns["kernel"].py_func, sig, cc=(9, 0))
        emit(what="compile_s", kernel=mode, config=cfg, value=time.perf_counter() - t0)


def kernel_times(q, k, v, w, fwd_flop, reps=20):
    """Each kernel alone (20 launches back to back), for every tile configuration tried."""
    from numba import cuda

    from funcgrad.prims.attention import _attn_impl, _stats_impl
    from funcgrad.core import ShapedArray
    from funcgrad.cuda import attention as CA
    from funcgrad.cuda import attention_src as AS
    from funcgrad.cuda.arrays import from_host
    scale = 1 / np.sqrt(q.shape[-1])
    o = _attn_impl(q, k, v, scale=scale, causal=True)
    st = _stats_impl(q, k, o, w, scale=scale, causal=True)
    qb, kb, vb, ob, gb, sb = (from_host(x) for x in (q, k, v, o, w, st))
    b, t, n, h = q.shape
    calls = {"fwd": (lambda: CA.attention(qb, kb, vb, scale, True,
                                          ShapedArray(o.shape, o.dtype)), 2),
             "stats": (lambda: CA.stats(qb, kb, ob, gb, scale, True,
                                        ShapedArray(st.shape, st.dtype)), 1),
             "dq": (lambda: CA.dq(qb, kb, vb, gb, sb, scale, True,
                                  ShapedArray(q.shape, q.dtype)), 3),
             "dkv": (lambda: CA.dkv(qb, kb, vb, gb, sb, scale, True,
                                    ShapedArray((b, t, n, 2 * h), q.dtype)), 4)}
    default = {m: list(c) for m, c in AS.GPU_CONFIGS.items()}
    for mode, (call, units) in calls.items():
        for cfg in [c for c in default[mode]
                    if AS.config_words(mode, 64, c) * 4 <= AS.SMEM_WORDS_BYTES][:3] + \
                EXTRA_CONFIGS.get(mode, []):
            AS.GPU_CONFIGS[mode] = [cfg]
            call()
            cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(reps):
                call()
            cuda.synchronize()
            wall = (time.perf_counter() - t0) / reps * 1e3
            ms = _gpu_ms(call, reps)
            emit(what="kernel_ms", kernel=mode, config=cfg, value=ms, wall_ms_per_call=wall,
                 tflops=units * fwd_flop / 2 / ms / 1e9 if ms else None)
        AS.GPU_CONFIGS[mode] = default[mode]


def _gpu_ms(call, reps):
    """GPU time per call (ms) from torch's CUDA profiler (kernels only, host overhead excluded),
    or None without torch."""
    try:
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        return None
    from numba import cuda
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            call()
        cuda.synchronize()
    us = sum(getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
             for e in prof.key_averages())
    return us / reps / 1e3


EXTRA_CONFIGS = {"dq": [(16, 32, 4, 8)], "dkv": [(16, 32, 4, 8)]}


def main(b=16, n=6, t=256, h=64):
    compile_times(h)
    rng = np.random.default_rng(0)
    q, k, v, w = (rng.standard_normal((b, t, n, h)).astype(np.float32) for _ in range(4))
    fwd_flop = 4 * b * n * t * t * h / 2          # two GEMMs, causal half
    total_flop = 3.5 * fwd_flop                   # + five GEMM-sized products backward
    dq, dk, dv, dw = (funcgrad.device_put(x, "cuda") for x in (q, k, v, w))
    emit(what="shape", b=b, n=n, t=t, h=h, causal=True, dtype="float32")
    outs = {}
    impls = [("funcgrad_fused", fused), ("funcgrad_composed", composed)]
    if os.environ.get("BENCH_COMPOSED", "1") == "0":
        impls = impls[:1]
    for name, att in impls:
        fwd = funcgrad.jit(att)
        step = funcgrad.jit(funcgrad.value_and_grad(
            lambda q, k, v, att=att: fnp.sum(att(q, k, v) * dw), argnums=(0, 1, 2)))
        t0 = time.perf_counter()
        o = np.asarray(fwd(dq, dk, dv))
        t1 = time.perf_counter()
        outs[name] = (o, [np.asarray(g) for g in step(dq, dk, dv)[1]])
        emit(what="first_call_s", impl=name, fwd=t1 - t0, step=time.perf_counter() - t1)
        ms_f = median_seconds(lambda: fwd(dq, dk, dv).block_until_ready()) * 1e3
        ms_b = median_seconds(lambda: step(dq, dk, dv)[1][2].block_until_ready()) * 1e3
        emit(what="attention_fwd_ms", impl=name, value=ms_f, tflops=fwd_flop / ms_f / 1e9)
        emit(what="attention_fwd_bwd_ms", impl=name, value=ms_b,
             tflops=total_flop / ms_b / 1e9)
    kernel_times(q, k, v, w, fwd_flop)
    o1, g1 = outs["funcgrad_fused"]
    if "funcgrad_composed" in outs:
        o2, g2 = outs["funcgrad_composed"]
        emit(what="fused_vs_composed_max_abs", out=float(np.abs(o1 - o2).max()),
             grads=[float(np.abs(a - c).max()) for a, c in zip(g1, g2)])
    try:
        import torch
    except ImportError:
        emit(what="torch", error="not installed")
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"
    tq, tk, tv = (torch.tensor(x.transpose(0, 2, 1, 3).copy(), device=dev, requires_grad=True)
                  for x in (q, k, v))
    tw = torch.tensor(w.transpose(0, 2, 1, 3).copy(), device=dev)
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def tfwd():
        with torch.no_grad():
            sdpa(tq, tk, tv, is_causal=True)
        torch.cuda.synchronize()

    def tstep():
        tq.grad = tk.grad = tv.grad = None
        (sdpa(tq, tk, tv, is_causal=True) * tw).sum().backward()
        torch.cuda.synchronize()
    tstep()
    err = max(float(np.abs(tg.grad.cpu().numpy().transpose(0, 2, 1, 3) - g).max())
              for tg, g in zip((tq, tk, tv), g1))
    ms_f = median_seconds(tfwd) * 1e3
    ms_b = median_seconds(tstep) * 1e3
    emit(what="attention_fwd_ms", impl="torch_sdpa", value=ms_f, tflops=fwd_flop / ms_f / 1e9)
    emit(what="attention_fwd_bwd_ms", impl="torch_sdpa", value=ms_b,
         tflops=total_flop / ms_b / 1e9, max_abs_grad_diff_vs_fused=err)
    a = torch.randn(b * n, t, h, device=dev)
    bm = torch.randn(b * n, h, t, device=dev)

    def gemm():
        torch.bmm(a, bm)
        torch.cuda.synchronize()
    ms = median_seconds(gemm, reps=50) * 1e3
    emit(what="gemm_fp32_rate_same_shapes", impl="torch_bmm", value=ms,
         tflops=2 * b * n * t * t * h / ms / 1e9)
    emit(what="device", name=torch.cuda.get_device_name())


if __name__ == "__main__":
    main(*[int(a) for a in sys.argv[1:]])
