"""TF32 tensor-core attention against the exact SIMT kernels at W2's shapes (batch 16, 6 heads,
T 256, head dim 64, causal): each kernel's GPU time for every tile configuration that fits,
the jitted fwd+bwd step under each precision, errors against float64, and torch's SDPA with
TF32 allowed, in one process. One JSON line per figure.

Usage: python benchmarks/bench_attention_tc.py [B N T H]
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_attention import _gpu_ms, emit, fused  # noqa: E402
from workloads import median_seconds  # noqa: E402

import funcgrad  # noqa: E402
import funcgrad.numpy as fnp  # noqa: E402

funcgrad.config.update("jax_enable_x64", True)   # its float64 references need 64-bit types


def kernels(q, k, v, w, fwd_flop):
    """GPU ms of fwdl / dq / dkv: SIMT, then every tensor-core configuration that fits."""
    from funcgrad.prims.attention_lse import _fwdl_impl
    from funcgrad.prims.attention import _stats_impl
    from funcgrad.core import ShapedArray
    from funcgrad.cuda import attention as CA
    from funcgrad.cuda import attention_tc as ATC
    from funcgrad.cuda.arrays import from_host
    b, t, n, h = q.shape
    scale = 1 / np.sqrt(h)
    flat = _fwdl_impl(q, k, v, scale=scale, causal=True)
    o = flat[:q.size].reshape(q.shape)
    st = _stats_impl(q, k, o, w, scale=scale, causal=True)
    qb, kb, vb, gb, sb = (from_host(x) for x in (q, k, v, w, st))
    calls = {
        "fwdl": (lambda p: CA.fwdl(qb, kb, vb, scale, True, ShapedArray(flat.shape, q.dtype),
                                   p), 2),
        "dq": (lambda p: CA.dq(qb, kb, vb, gb, sb, scale, True, ShapedArray(q.shape, q.dtype),
                               p), 3),
        "dkv": (lambda p: CA.dkv(qb, kb, vb, gb, sb, scale, True,
                                 ShapedArray((b, t, n, 2 * h), q.dtype), p), 4)}
    default = {m: list(c) for m, c in ATC.GPU_CONFIGS.items()}
    for mode, (call, units) in calls.items():
        ms = _gpu_ms(lambda call=call: call(None), 20)
        emit(what="kernel_ms", kernel=mode, impl="simt", value=ms,
             tflops=units * fwd_flop / 2 / ms / 1e9 if ms else None)
        for cfg in default[mode]:
            if ATC.smem_words(mode, CA._pad_dim(h, h), *cfg) * 4 > ATC.SMEM_BYTES:
                continue
            ATC.GPU_CONFIGS[mode] = [cfg]
            call("tensorfloat32")
            ms = _gpu_ms(lambda call=call: call("tensorfloat32"), 20)
            emit(what="kernel_ms", kernel=mode, impl="tf32", config=cfg, value=ms,
                 tflops=units * fwd_flop / 2 / ms / 1e9 if ms else None)
        ATC.GPU_CONFIGS[mode] = default[mode]


def main(b=16, n=6, t=256, h=64):
    rng = np.random.default_rng(0)
    q, k, v, w = (rng.standard_normal((b, t, n, h)).astype(np.float32) for _ in range(4))
    fwd_flop = 4 * b * n * t * t * h / 2
    emit(what="shape", b=b, n=n, t=t, h=h, causal=True)
    kernels(q, k, v, w, fwd_flop)
    dq, dk, dv, dw = (funcgrad.device_put(x, "cuda") for x in (q, k, v, w))
    ref = funcgrad.value_and_grad(lambda q, k, v: fnp.sum(fused(q, k, v) * w.astype(np.float64)),
                                  argnums=(0, 1, 2))
    want = [np.asarray(g) for g in ref(*(x.astype(np.float64) for x in (q, k, v)))[1]]
    for prec in ("float32", "tensorfloat32"):
        with funcgrad.default_matmul_precision(prec):
            step = funcgrad.jit(funcgrad.value_and_grad(
                lambda q, k, v: fnp.sum(fused(q, k, v) * dw), argnums=(0, 1, 2)))
            got = [np.asarray(g) for g in step(dq, dk, dv)[1]]
            ms = median_seconds(
                lambda step=step: step(dq, dk, dv)[1][2].block_until_ready()) * 1e3
        emit(what="attention_fwd_bwd_ms", precision=prec, value=ms,
             tflops=3.5 * fwd_flop / ms / 1e9,
             max_abs_err_vs_f64=[float(np.abs(a - c).max()) for a, c in zip(got, want)],
             max_abs_grad=[float(np.abs(c).max()) for c in want])
    try:
        import torch
    except ImportError:
        return
    tq, tk, tv = (torch.tensor(x.transpose(0, 2, 1, 3).copy(), device="cuda",
                               requires_grad=True) for x in (q, k, v))
    tw = torch.tensor(w.transpose(0, 2, 1, 3).copy(), device="cuda")
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32

        def tstep():
            tq.grad = tk.grad = tv.grad = None
            (sdpa(tq, tk, tv, is_causal=True) * tw).sum().backward()
            torch.cuda.synchronize()
        tstep()
        ms = median_seconds(tstep) * 1e3
        emit(what="attention_fwd_bwd_ms", impl="torch_sdpa", allow_tf32=tf32, value=ms)
    emit(what="device", name=torch.cuda.get_device_name())


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:5]))
