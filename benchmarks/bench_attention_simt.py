"""Exact-float32 (SIMT) flash-attention kernels at W2's shapes, one tile configuration at a time.

For each kernel W2 runs (fwdl, delta, dq, dkv; bwd: the merged backward with its dQ-partials
sum, which replaces dq + dkv) and each configuration given (the defaults of
attention_src.GPU_CONFIGS first, then candidates): seconds of the first call (compiling and
loading the kernel, on a cold cache), registers and local memory per thread, GPU time per call
(CUPTI, 20 calls), TFLOP/s on the causal work, and the largest difference from the first
configuration's result. --compare times dq + dkv against bwd (default configurations) over
shape classes (causal or not, long rows, head dims 32-128, grouped-query heads, few blocks).
--peers: in the same process, cuBLAS fp32 GEMM rates (torch, TF32 off: attention's own product
shape, W2's MLP product, a large square) and torch's fp32 SDPA (math and memory-efficient
backends) forward and forward + backward at the same shape, by the same CUPTI clock.
FLOPs count the causal half of each T x S product: 2 * B * N * T * S * H / 2 per GEMM-sized
product (forward 2 products, backward 5), diagonal tiles' masked half not counted.
One JSON line per figure.

Usage: python benchmarks/bench_attention_simt.py [B N T H] [--modes fwdl,delta,dq,dkv,bwd]
       [--candidates MODES (the modes whose candidates run; default all)] [--compare] [--peers]
       [--config 32,32,8,16,1,4 ... (these candidates instead of the lists below)]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_attention import _gpu_ms, emit

import funcgrad

# candidates (BR, BC, TY, TX[, VEC, U[, PF]]) besides the defaults; see attention_src.py
CANDIDATES = {
    "fwdl": [(64, 32, 32, 8, 0, 8, 1), (64, 32, 16, 8, 2, 8, 0, 0, 4),
             (64, 32, 16, 8, 2, 8, 1, 0, 2), (64, 32, 16, 8, 2, 8, 1, 0, 8),
             (64, 32, 16, 8, 2, 8, 1, 4, 4), (64, 32, 32, 4, 2, 8, 0, 0, 4),
             (32, 32, 8, 8, 2, 8, 0, 0, 4)],
    "delta": [(32, 32, 8, 32, 2, 0), (64, 32, 32, 8, 0, 8)],
    "dq": [(32, 32, 8, 16, 0, 8), (32, 32, 8, 8, 1, 8), (32, 32, 16, 8, 1, 8)],
    "dkv": [(32, 32, 16, 8, 1, 8), (32, 32, 8, 8, 1, 8), (32, 32, 8, 16, 1, 8)],
    "bwd": [(32, 32, 8, 16, 1, 4, 0, 0, 4), (32, 32, 8, 16, 1, 8, 0, 0, 4),
            (32, 32, 8, 16, 1, 8, 1, 0, 4), (32, 32, 8, 16, 2, 8, 0, 0, 4),
            (32, 32, 8, 16, 1, 4, 1, 4, 4), (16, 16, 8, 16, 1, 4, 0, 0, 4)],
}


def _one(per_signature):
    """The value of a kernel's only compiled signature (numba answers a dict)."""
    return next(iter(per_signature.values())) if isinstance(per_signature, dict) \
        else per_signature


def _gpu_split(call, reps):
    """GPU ms per call of each kernel (CUPTI through torch's profiler), largest first."""
    from numba import cuda
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            call()
        cuda.synchronize()
    got = [(getattr(e, "self_device_time_total", 0) or getattr(e, "self_cuda_time_total", 0))
           / reps / 1e3 for e in prof.key_averages()]
    return sorted((round(x, 4) for x in got if x), reverse=True)


def sweep(q, k, v, w, fwd_flop, modes, candidates=None):
    from numba import cuda

    from funcgrad.prims.attention_lse import _fwdl_impl
    from funcgrad.prims.attention import _stats_impl
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
                               ShapedArray((b, t, n, 2 * h), q.dtype)), 4),
        "bwd": (lambda: CA.bwd(qb, kb, vb, gb, sb, scale, True,
                               ShapedArray((3 * q.size,), q.dtype)), 5)}
    default = {m: list(c) for m, c in AS.GPU_CONFIGS.items()}
    d = CA._pad_dim(h, h)
    for mode in modes:
        call, units = calls[mode]
        first = None
        more = candidates is None or mode in candidates
        for cfg in [default[mode][0]] + (CANDIDATES.get(mode, []) if more else []):
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
                 max_diff_vs_first=float(np.abs(got - first).max()),
                 per_kernel_ms=_gpu_split(call, 20) if mode == "bwd" else None)
        AS.GPU_CONFIGS[mode] = default[mode]


# (B, N, K, T, S, H, causal): W2, then other classes
SHAPES = [(16, 6, 6, 256, 256, 64, True), (16, 6, 6, 256, 256, 64, False),
          (4, 6, 6, 1024, 1024, 64, True), (64, 6, 6, 64, 64, 64, True),
          (16, 3, 3, 256, 256, 128, True), (16, 12, 12, 256, 256, 32, True),
          (16, 8, 2, 256, 256, 64, True), (1, 2, 2, 128, 128, 64, True),
          (2, 4, 4, 2048, 2048, 64, True)]


def compare(shapes=SHAPES):
    """GPU us of dq + dkv against the merged bwd (+ its dQ sum) per shape class, the merged
    kernel's partials (MiB) and the largest difference between the two results."""
    for shape in shapes:
        _compare_one(*shape)


def _compare_one(b, n, kh, t, s, h, causal):
    from funcgrad.core import ShapedArray
    from funcgrad.cuda import attention as CA
    from funcgrad.cuda.arrays import from_host, to_host
    rng = np.random.default_rng(0)
    q, w = (rng.standard_normal((b, t, n, h)).astype(np.float32) for _ in range(2))
    k, v = (rng.standard_normal((b, s, kh, h)).astype(np.float32) for _ in range(2))
    scale = 1 / np.sqrt(h)
    st = _stats(q, k, v, w, scale, causal)
    qb, kb, vb, gb, sb = (from_host(x) for x in (q, k, v, w, st))
    ops = (qb, kb, vb, gb, sb, scale, causal)
    calls = {"dq": lambda: CA.dq(*ops, ShapedArray(q.shape, q.dtype)),
             "dkv": lambda: CA.dkv(*ops, ShapedArray((b, s, kh, 2 * h), q.dtype)),
             "bwd": lambda: CA.bwd(*ops, ShapedArray((q.size + b * s * kh * 2 * h,), q.dtype))}
    got = {m: to_host(c()) for m, c in calls.items()}
    two = np.concatenate([got["dq"].ravel(), got["dkv"].ravel()])
    us = {m: round(_gpu_ms(c, 20) * 1e3, 1) for m, c in calls.items()}
    cfg = CA._simt_config("bwd", qb, h, h)[1]
    rows = CA.partial_rows(t, s, cfg[0], cfg[1], causal)[1]
    emit(what="compare", shape=[b, n, kh, t, s, h], causal=causal, dq_us=us["dq"],
         dkv_us=us["dkv"], two_kernels_us=round(us["dq"] + us["dkv"], 1),
         merged_us=us["bwd"], merged_split_ms=_gpu_split(calls["bwd"], 20),
         partials_MiB=round(b * rows * n * h * 4 / 2**20, 2),
         max_diff=float(np.abs(got["bwd"] - two).max()))


def _stats(q, k, v, w, scale, causal):
    from funcgrad.prims.attention_lse import _fwdl_impl
    from funcgrad.prims.attention import _stats_impl
    flat = _fwdl_impl(q, k, v, scale=scale, causal=causal)
    return _stats_impl(q, k, flat[:q.size].reshape(q.shape), w, scale=scale, causal=causal)


def peers(b, n, t, h, fwd_flop):
    """cuBLAS fp32 GEMM rates and torch's fp32 SDPA at attention's shape (GPU time, CUPTI)."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    emit(what="device", name=torch.cuda.get_device_name(),
         utc=time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), torch=torch.__version__)
    gen = torch.Generator("cuda").manual_seed(0)

    def rnd(*shape):
        return torch.randn(*shape, device="cuda", generator=gen)
    for name, (bb, m, kk, nn) in {"bmm_qk_shape": (b * n, t, h, t),
                                  "bmm_pv_shape": (b * n, t, t, h),
                                  "w2_mlp": (1, b * t, 384, 1536),
                                  "w2_qkv": (1, b * t, 384, 1152),
                                  "square_4096": (1, 4096, 4096, 4096)}.items():
        x, y = rnd(bb, m, kk), rnd(bb, kk, nn)
        ms = _gpu_ms(lambda x=x, y=y: torch.bmm(x, y), 20)
        emit(what="sgemm", shape=[bb, m, kk, nn], name=name, value_ms=ms,
             tflops=2 * bb * m * kk * nn / ms / 1e9)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q, k, v, w = (rnd(b, n, t, h) for _ in range(4))
    qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
    for be in (SDPBackend.MATH, SDPBackend.EFFICIENT_ATTENTION):
        with sdpa_kernel(be):
            def fwd():
                with torch.no_grad():
                    sdpa(q, k, v, is_causal=True)

            def step():
                qg.grad = kg.grad = vg.grad = None
                (sdpa(qg, kg, vg, is_causal=True) * w).sum().backward()
            try:
                fwd(), step()
                ms_f, ms_s = _gpu_ms(fwd, 20), _gpu_ms(step, 20)
            except RuntimeError as e:
                emit(what="torch_sdpa", backend=be.name, error=repr(e)[:200])
                continue
        emit(what="torch_sdpa", backend=be.name, fwd_ms=ms_f, fwd_bwd_ms=ms_s,
             bwd_ms=ms_s - ms_f, fwd_tflops=2 * fwd_flop / 2 / ms_f / 1e9,
             bwd_tflops=5 * fwd_flop / 2 / (ms_s - ms_f) / 1e9)


def main(b=16, n=6, t=256, h=64, modes=("fwdl", "delta", "dq", "dkv", "bwd"),
         candidates=None, shapes=False, with_peers=False):
    rng = np.random.default_rng(0)
    q, k, v, w = (rng.standard_normal((b, t, n, h)).astype(np.float32) for _ in range(4))
    fwd_flop = 4 * b * n * t * t * h / 2          # two GEMMs, causal half
    emit(what="shape", b=b, n=n, t=t, h=h, causal=True, dtype="float32")
    x = funcgrad.device_put(np.ones(4, np.float32), "cuda")   # context and compiler warm
    np.asarray(x + 1)
    sweep(q, k, v, w, fwd_flop, modes, candidates)
    if with_peers:
        peers(b, n, t, h, fwd_flop)
    if shapes:
        compare()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("dims", nargs="*", type=int, help="B N T H")
    ap.add_argument("--modes", default="fwdl,delta,dq,dkv,bwd")
    ap.add_argument("--candidates", default=None)
    ap.add_argument("--compare", action="store_true")
    ap.add_argument("--peers", action="store_true")
    ap.add_argument("--config", action="append", default=None,
                    help="a candidate (comma-separated ints) replacing --candidates' lists")
    a = ap.parse_args()
    if a.config:
        for m in (a.candidates or a.modes).split(","):
            CANDIDATES[m] = [tuple(int(x) for x in c.split(",")) for c in a.config]
    main(*a.dims, modes=a.modes.split(","), shapes=a.compare, with_peers=a.peers,
         candidates=None if a.candidates is None else a.candidates.split(","))
