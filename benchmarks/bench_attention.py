"""Attention forward + backward at W2's shapes (batch 16, 6 heads, T 256, head dim 64, causal,
fp32): funcgrad's fused flash attention vs the composed funcgrad path vs torch's
scaled_dot_product_attention, in one process. One JSON line per figure.

Usage: python benchmarks/bench_attention.py [B N T H]
"""
from __future__ import annotations

import json
import os
import sys

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


def main(b=16, n=6, t=256, h=64):
    rng = np.random.default_rng(0)
    q, k, v, w = (rng.standard_normal((b, t, n, h)).astype(np.float32) for _ in range(4))
    fwd_flop = 4 * b * n * t * t * h / 2          # two GEMMs, causal half
    total_flop = 3.5 * fwd_flop                   # + five GEMM-sized products backward
    dq, dk, dv, dw = (funcgrad.device_put(x, "cuda") for x in (q, k, v, w))
    emit(what="shape", b=b, n=n, t=t, h=h, causal=True, dtype="float32")
    outs = {}
    for name, att in (("funcgrad_fused", fused), ("funcgrad_composed", composed)):
        fwd = funcgrad.jit(att)
        step = funcgrad.jit(funcgrad.value_and_grad(
            lambda q, k, v, att=att: fnp.sum(att(q, k, v) * dw), argnums=(0, 1, 2)))
        outs[name] = (np.asarray(fwd(dq, dk, dv)), [np.asarray(g) for g in
                                                     step(dq, dk, dv)[1]])
        ms_f = median_seconds(lambda: fwd(dq, dk, dv).block_until_ready()) * 1e3
        ms_b = median_seconds(lambda: step(dq, dk, dv)[1][2].block_until_ready()) * 1e3
        emit(what="attention_fwd_ms", impl=name, value=ms_f, tflops=fwd_flop / ms_f / 1e9)
        emit(what="attention_fwd_bwd_ms", impl=name, value=ms_b,
             tflops=total_flop / ms_b / 1e9)
    from funcgrad.cuda import attention as cuda_attention
    default = cuda_attention.GPU_GEOMETRY
    for geom in ((16, 4), (64, 2)):   # rows per block, lanes per row
        cuda_attention.GPU_GEOMETRY = geom
        step = funcgrad.jit(funcgrad.value_and_grad(
            lambda q, k, v: fnp.sum(fused(q, k, v) * dw), argnums=(0, 1, 2)))
        fwd = funcgrad.jit(fused)
        ms_f = median_seconds(lambda: fwd(dq, dk, dv).block_until_ready()) * 1e3
        ms_b = median_seconds(lambda: step(dq, dk, dv)[1][2].block_until_ready()) * 1e3
        err = max(float(np.abs(np.asarray(a) - b).max())
                  for a, b in zip(step(dq, dk, dv)[1], outs["funcgrad_fused"][1]))
        emit(what="fused_geometry", rows_lanes=geom, fwd_ms=ms_f, fwd_bwd_ms=ms_b,
             max_abs_grad_diff=err)
    cuda_attention.GPU_GEOMETRY = default
    (o1, g1), (o2, g2) = outs["funcgrad_fused"], outs["funcgrad_composed"]
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
