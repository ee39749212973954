"""Flash attention kernel times across sizes: the TF32 kernels (streamed-tile prefetch on and
off, tile configurations) and the bf16 tensor-core kernels, beside torch's SDPA (flash /
efficient backends, fp32 and bf16) in one process. GPU time per call from torch's CUDA
profiler (kernels only); kernels are compiled first by parallel worker processes (numba's
disk cache), so one call measures dozens of variants. One JSON line per figure.

Usage: python benchmarks/bench_attention_bf16.py [--workers N] [--only tf32|bf16]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# (name, B, T, N, K, H): S2's attention (Llama-style GQA), S1's (GPT-2 small), T 4096 and 1024
SHAPES = [("S2", 4, 2048, 8, 2, 128), ("S1", 8, 1024, 12, 12, 64),
          ("T4096", 1, 4096, 8, 2, 128), ("T1024", 4, 1024, 8, 2, 128)]
SWEEP = ("S2", "S1")   # every variant at these shapes; the others time the first prefetched one
# (kind, mode, D, (warps, rows), prefetch): the variants compiled and timed
TF32 = ([("tf32", "fwdl", 128, c, p) for c, p in (((8, 32), False), ((8, 32), True))]
        + [("tf32", "dq", 128, c, p) for c, p in (((4, 32), False), ((4, 32), True),
                                                   ((4, 16), True))]
        + [("tf32", "dkv", 128, c, p) for c, p in (((4, 32), False), ((4, 16), False),
                                                    ((4, 16), True))]
        + [("tf32", m, 64, c, p) for m, c in (("fwdl", (4, 32)), ("dq", (4, 16)),
                                               ("dkv", (4, 16))) for p in (False, True)])
BF16 = ([("bf16", "fwd", 128, c, True) for c in ((4, 64), (4, 32))]
        + [("bf16", "stats", 128, (4, 64), True)]
        + [("bf16", "dq", 128, c, True) for c in ((4, 64), (4, 32))]
        + [("bf16", "dkv", 128, c, True) for c in ((4, 32), (4, 16))]
        + [("bf16", m, 64, c, True) for m, c in (("fwd", (4, 64)), ("stats", (4, 64)),
                                                  ("dq", (4, 64)), ("dkv", (4, 32)))])
UNITS = {"fwd": 2, "fwdl": 2, "stats": 1, "dq": 3, "dkv": 4}   # GEMMs of T x S x H each


def emit(**kw):
    print(json.dumps(kw), flush=True)


def _force(var):
    """Make `var` the only configuration of its mode and set its prefetch switch."""
    from funcgrad.cuda import attention_bf as AB
    from funcgrad.cuda import attention_tc as ATC
    kind, mode, d, cfg, pf = var
    if kind == "tf32":
        ATC.BY_DIM[(mode, d)] = [cfg]
        if mode == "fwdl":
            ATC.BY_DIM[("fwd", d)] = [cfg]
        ATC.PREFETCH = pf
    else:
        AB.BY_DIM[(mode, d)] = [cfg]
        AB.PREFETCH = pf


def _operands(b, t, n, kh, h, dtype, seed=0):
    import funcgrad
    from funcgrad.prims import attention as A
    rng = np.random.default_rng(seed)
    q, do = (rng.standard_normal((b, t, n, h)).astype(np.float32) for _ in range(2))
    k, v = (rng.standard_normal((b, t, kh, h)).astype(np.float32) for _ in range(2))
    if dtype != np.float32:
        q, k, v, do = (x.astype(dtype) for x in (q, k, v, do))
    st = np.zeros((b, n, t, 2), np.float32)   # lse 0-ish rows: the kernels' work is the same
    st[..., 0] = np.log(np.arange(1, t + 1, dtype=np.float32))[None, None, :]
    dev = [funcgrad.device_put(x, "cuda") for x in (q, k, v, do, st)]
    return dev, A


def _call(var, ops, scale):
    """A closure launching var's kernel once on ops (device arrays)."""
    from funcgrad.core import bind
    from funcgrad.prims import attention_lse as AL
    kind, mode, _, _, _ = var
    q, k, v, do, st = ops
    prm = {"scale": scale, "causal": True}
    from funcgrad.prims import attention as A
    if kind == "tf32":
        prm["precision"] = "tensorfloat32"
    prim, args = {"fwdl": (AL.attention_fwdl_p, (q, k, v)), "fwd": (A.attention_p, (q, k, v)),
                  "stats": (A.attention_stats_p, (q, k, q, do)),
                  "dq": (A.attention_dq_p, (q, k, v, do, st)),
                  "dkv": (A.attention_dkv_p, (q, k, v, do, st))}[mode]
    return lambda: bind(prim, *args, **prm)


def _compile(var):
    """Worker: compile var's kernel (a tiny launch of the same types) into the disk cache."""
    t0 = time.time()
    try:
        _force(var)
        import ml_dtypes
        dt = np.float32 if var[0] == "tf32" else ml_dtypes.bfloat16
        ops, _ = _operands(1, 64, 4, 2, var[2], dt)
        out = _call(var, ops, 0.1)()
        np.asarray(out)
        return var, time.time() - t0, None
    except Exception as e:   # noqa: BLE001 (reported, the others go on)
        return var, time.time() - t0, repr(e)[:300]


def _prefetched(var):
    """Whether var's kernel prefetches (PREFETCH on and its registers within PREFETCH_REGS)."""
    from funcgrad.cuda import attention_bf as AB
    from funcgrad.cuda import attention_tc as ATC
    kind, mode, d, cfg, pf = var
    gen = ATC._Gen(mode, d, cfg, False, True) if kind == "tf32" else AB._Gen(mode, d, cfg, False,
                                                                            True)
    return pf and gen.prefetches()


def _gpu_ms(call, reps):
    from numba import cuda
    from torch.profiler import ProfilerActivity, profile
    call()
    cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            call()
        cuda.synchronize()
    us = sum(getattr(e, "self_device_time_total", 0) for e in prof.key_averages())
    return us / reps / 1e3


def _flop(b, t, n, h):
    return 2 * b * n * t * t * h / 2   # one causal T x T x H GEMM


def ours(variants, shapes, reps):
    import ml_dtypes
    base = {}
    for name, b, t, n, kh, h in shapes:
        for kind in ("tf32", "bf16"):
            vs = [v for v in variants if v[0] == kind and v[2] == max(64, h)]
            if name not in SWEEP:   # the first prefetched variant of each mode
                vs = [v for i, v in enumerate(vs) if v[4]
                      and not any(u[1] == v[1] and u[4] for u in vs[:i])]
            if not vs:
                continue
            dt = np.float32 if kind == "tf32" else ml_dtypes.bfloat16
            ops, _ = _operands(b, t, n, kh, h, dt)
            for var in vs:
                _force(var)
                call = _call(var, ops, float(1 / np.sqrt(h)))
                try:
                    ms = _gpu_ms(call, reps)
                    out = np.asarray(call())
                except Exception as e:   # noqa: BLE001
                    emit(what="error", shape=name, var=str(var), error=repr(e)[:300])
                    continue
                key = (name, kind, var[1], var[3])
                same = None   # prefetch on: the same bits as off (its first variant)
                if key in base:
                    same = bool(np.array_equal(out.view(np.uint8), base[key].view(np.uint8)))
                base.setdefault(key, out)
                emit(what="kernel_ms", shape=name, kind=kind, mode=var[1], config=var[3],
                     prefetch=var[4], prefetched=_prefetched(var), ms=round(ms, 4),
                     bit_equal=same,
                     tflops=round(UNITS[var[1]] * _flop(b, t, n, h) / ms / 1e9, 1))


def torch_sdpa(shapes, reps):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    torch.backends.cuda.matmul.allow_tf32 = True
    F = torch.nn.functional
    for name, b, t, n, kh, h in shapes:
        for dt in (torch.float32, torch.bfloat16):
            for be in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
                g = torch.Generator(device="cuda").manual_seed(0)
                q = torch.randn(b, n, t, h, device="cuda", dtype=dt, generator=g,
                                requires_grad=True)
                k, v = (torch.randn(b, kh, t, h, device="cuda", dtype=dt, generator=g,
                                    requires_grad=True) for _ in range(2))
                do = torch.randn(b, n, t, h, device="cuda", dtype=dt, generator=g)
                kk, vv = k, v
                if kh != n:   # the backends' GQA support varies: expanded heads
                    kk, vv = (x.repeat_interleave(n // kh, dim=1).detach().requires_grad_()
                              for x in (k, v))
                try:
                    with sdpa_kernel(be):
                        fwd, tot = _sdpa_ms(F, q, kk, vv, do, reps)
                except Exception as e:   # noqa: BLE001
                    emit(what="torch_error", shape=name, dtype=str(dt), backend=str(be),
                         error=repr(e)[:200])
                    continue
                fl = _flop(b, t, n, h)
                emit(what="torch_ms", shape=name, dtype=str(dt), backend=str(be),
                     fwd_ms=round(fwd, 4), bwd_ms=round(tot - fwd, 4),
                     fwd_tflops=round(2 * fl / fwd / 1e9, 1),
                     bwd_tflops=round(5 * fl / (tot - fwd) / 1e9, 1) if tot > fwd else None)


def _sdpa_ms(F, q, k, v, do, reps):
    """(forward ms, forward + backward ms) of causal SDPA on q, k, v."""
    def both():
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(do)
    return (_torch_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), reps),
            _torch_ms(both, reps))


def _torch_ms(call, reps):
    import torch
    from torch.profiler import ProfilerActivity, profile
    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            call()
        torch.cuda.synchronize()
    us = sum(getattr(e, "self_device_time_total", 0) for e in prof.key_averages())
    return us / reps / 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=12)
    ap.add_argument("--only", default="")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--no-torch", action="store_true")
    a = ap.parse_args()
    variants = [v for v in TF32 + BF16 if not a.only or v[0] == a.only]
    t0 = time.time()
    with mp.get_context("spawn").Pool(a.workers) as pool:
        for var, sec, err in pool.imap_unordered(_compile, variants):
            emit(what="compile", var=str(var), seconds=round(sec, 1), error=err)
    emit(what="compile_all", seconds=round(time.time() - t0, 1))
    ours(variants, SHAPES, a.reps)
    if not a.no_torch:
        torch_sdpa([x for x in SHAPES if x[0] != "T1024"], a.reps)
    emit(what="done", seconds=round(time.time() - t0, 1))


if __name__ == "__main__":
    main()
