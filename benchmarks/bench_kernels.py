"""Micro-benchmark of funcgrad's reduction and fused-backward kernels beside torch (same run).

Usage (GPU): python benchmarks/bench_kernels.py
Each op is launched `REPS` times inside one CUDA graph (torch's capture stream, so neither
side pays Python launch overhead) and timed with CUDA events; GB/s counts the bytes each op
must move (inputs read once, outputs written once).
"""
from __future__ import annotations

import json
import sys

import numpy as np
import torch

import funcgrad
from funcgrad.cuda import reduce as R
from funcgrad.cuda import rows, runtime

REPS = 50


def graph_ms(fn):
    """Milliseconds per call of fn() (GPU time, launches replayed from a CUDA graph)."""
    fn()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    g = torch.cuda.CUDAGraph()
    cuda = runtime.load()
    with torch.cuda.stream(s):
        runtime._stream = cuda.external_stream(s.cuda_stream)
        try:
            fn()                        # warm on the side stream
            torch.cuda.synchronize()
            # thread-local capture: a background loader or compile thread's CUDA call must
            # not invalidate this capture (a cold-cache closing call lost it at op 2)
            with torch.cuda.graph(g, stream=s, capture_error_mode="thread_local"):
                for _ in range(REPS):
                    fn()
        finally:
            runtime._stream = None
    g.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(5):
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / REPS)
    return float(np.median(ts))


def dev(x):
    return funcgrad.device_put(np.ascontiguousarray(x), "cuda").buf


def row(name, nbytes, fg_ms, th_ms):
    r = {"op": name, "MB": round(nbytes / 1e6, 2), "funcgrad_us": round(fg_ms * 1e3, 2),
         "funcgrad_GBs": round(nbytes / fg_ms / 1e6), "torch_us": round(th_ms * 1e3, 2),
         "torch_GBs": round(nbytes / th_ms / 1e6)}
    print(json.dumps(r), flush=True)
    return r


def main():
    rng = np.random.default_rng(0)
    f32 = np.float32
    big = torch.empty(2 ** 26, device="cuda")
    # ~1 s of copies first: an idle GPU clocks up over the first replays (a column sum timed
    # first read 19.9, 14.4, 11.7, 9.1, 5.0, 4.6 us in six back-to-back calls, H200 2026-11-25)
    for _ in range(300):
        big.clone()
    torch.cuda.synchronize()
    copy_ms = graph_ms(lambda: big.clone())
    print(json.dumps({"copy_GBs": round(2 * big.numel() * 4 / copy_ms / 1e6),
                      "gpu": torch.cuda.get_device_name()}), flush=True)
    # the copy at W2's reduction sizes: what a kernel reading a few MB reaches in a graph
    for shape in ((4096, 384), (4096, 1536)):
        small = torch.empty(shape, device="cuda")
        ms = graph_ms(lambda: small.clone())
        print(json.dumps({"copy_shape": list(shape), "copy_us": round(ms * 1e3, 2),
                          "copy_GBs": round(2 * small.numel() * 4 / ms / 1e6)}), flush=True)
    cases = [("sum axis0 4096x384", (4096, 384), (0,)), ("sum axis1 4096x384", (4096, 384), (1,)),
             ("sum axis0 4096x1536", (4096, 1536), (0,)),
             ("sum axis1 4096x1536", (4096, 1536), (1,)),
             ("sum axis1 16x256x384", (16, 256, 384), (1,)),
             ("sum axes01 16x256x384", (16, 256, 384), (0, 1)),
             ("sum axis2 16x256x384", (16, 256, 384), (2,)),
             ("max axis1 4096x384", (4096, 384), (1,)),
             ("sum all 2^24", (2 ** 24,), (0,)),
             ("sum axis0 8192x4096", (8192, 4096), (0,))]
    for name, shape, axes in cases:
        x = rng.standard_normal(shape).astype(f32)
        xb, xt = dev(x), torch.from_numpy(x).cuda()
        kind = name.split()[0]
        out_n = x.size // int(np.prod([shape[a] for a in axes]))
        fg = graph_ms(lambda: R.reduce(kind, xb, axes, np.dtype(f32)))
        th = graph_ms(lambda: xt.sum(axes) if kind == "sum" else xt.amax(axes))
        row(name, (x.size + out_n) * 4, fg, th)
    # fused backward kernels (W2 shapes)
    n, rws = 384, 4096
    x = rng.standard_normal((rws, n)).astype(f32)
    dy = rng.standard_normal((rws, n)).astype(f32)
    sc = rng.standard_normal(n).astype(f32)
    xb, dyb, scb = dev(x), dev(dy), dev(sc)
    fg = graph_ms(lambda: rows.run("layer_norm_bwd", [xb, scb, dyb], (rws + 2, n),
                                   np.dtype(f32), 1e-5))
    xt, dyt, sct = (torch.from_numpy(a).cuda() for a in (x, dy, sc))
    mean = xt.mean(1, keepdim=True)
    rstd = torch.rsqrt(xt.var(1, unbiased=False, keepdim=True) + 1e-5)
    bias = torch.zeros_like(sct)
    th = graph_ms(lambda: torch.ops.aten.native_layer_norm_backward(
        dyt, xt, [n], mean, rstd, sct, bias, [True, True, True]))
    row("layer_norm_bwd 4096x384 (dx, dscale, dbias)", 3 * x.nbytes, fg, th)
    bi = rng.standard_normal(n).astype(f32)
    bib, bit = dev(bi), torch.from_numpy(bi).cuda()
    fg = graph_ms(lambda: rows.run("layer_norm", [xb, scb, bib], x.shape, np.dtype(f32), 1e-5))
    th = graph_ms(lambda: torch.nn.functional.layer_norm(xt, [n], sct, bit, 1e-5))
    row("layer_norm 4096x384 (forward)", 2 * x.nbytes, fg, th)
    s = rng.standard_normal((16 * 6 * 256, 256)).astype(f32)
    y = np.exp(s - s.max(1, keepdims=True))
    y /= y.sum(1, keepdims=True)
    yb, cb = dev(y), dev(s)
    yt, ctt = torch.from_numpy(y).cuda(), torch.from_numpy(s).cuda()
    fg = graph_ms(lambda: rows.run("softmax_bwd", [yb, cb], y.shape, np.dtype(f32)))
    th = graph_ms(lambda: torch._softmax_backward_data(ctt, yt, 1, torch.float32))
    row("softmax_bwd 24576x256", 3 * y.nbytes, fg, th)
    logits = rng.standard_normal((4096, 256)).astype(f32)
    lab = rng.integers(0, 256, 4096).astype(np.int32)
    ct = np.full(4096, 1 / 4096, f32)
    lb, lab_b, ctb = dev(logits), dev(lab), dev(ct)
    fg = graph_ms(lambda: rows.run("softmax_xent_bwd", [lb, lab_b, ctb], logits.shape,
                                   np.dtype(f32)))
    lt = torch.from_numpy(logits).cuda()
    lsm = torch.log_softmax(lt, 1)
    g = torch.full_like(lt, 1 / 4096)
    th = graph_ms(lambda: torch._log_softmax_backward_data(g, lsm, 1, torch.float32))
    row("softmax_xent_bwd 4096x256 (torch: log_softmax bwd)", 2 * logits.nbytes, fg, th)


if __name__ == "__main__":
    sys.exit(main())
