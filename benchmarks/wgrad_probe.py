"""Probe: W2's exact-fp32 weight-gradient GEMMs (dW = x^T dy over 4096 tokens) on cuBLAS, alone
on the GPU: cublasGemmEx against every cuBLASLt heuristic candidate, cuBLASLt's split-K forced on
its first candidate, and a split-K by hand (one strided-batched GEMM into s partial products,
then their sum).

Usage: python benchmarks/wgrad_probe.py
"""
from __future__ import annotations

import os
import sys

import numpy as np
import torch
from nvmath.bindings import cublas
from nvmath.bindings import cublasLt as lt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# its handles, workspace and cuBLASLt helpers
from lt_epilogue_probe import ONE, WS, ZERO, H, _set, algo_ptr, lt_plan, run_lt, timed

WSB = WS.numel()
CAND = 32


def gemm_ex(ta, tb, m, n, k, A, lda, sa, B, ldb, sb, C, ldc, sc, batch=1):
    cublas.set_stream(H, 0)
    cublas.set_workspace(H, WS.data_ptr(), WSB)
    if batch == 1:
        cublas.gemm_ex(H, ta, tb, m, n, k, ONE.ctypes.data, A.data_ptr(), 0, lda, B.data_ptr(),
                       0, ldb, ZERO.ctypes.data, C.data_ptr(), 0, ldc, 68, -1)
    else:
        cublas.gemm_strided_batched_ex(H, ta, tb, m, n, k, ONE.ctypes.data, A.data_ptr(), 0, lda,
                                       sa, B.data_ptr(), 0, ldb, sb, ZERO.ctypes.data,
                                       C.data_ptr(), 0, ldc, sc, batch, 68, -1)


def cfg(res, i, attr):
    v = np.zeros(1, np.int32)
    w = np.zeros(1, np.uint64)
    try:
        lt.matmul_algo_config_get_attribute(algo_ptr(res, i), attr, v.ctypes.data, 4, w.ctypes.data)
    except Exception:   # noqa: BLE001
        return -1
    return int(v[0])


def wgrad(K_in, N_out, T=4096):
    """Row-major dW[K_in, N_out] = x^T dy: column-major m = N_out (A = dy, OP_N, ld N_out),
    n = K_in (B = x as k x n, OP_T, ld K_in)."""
    x, dy = torch.randn(T, K_in, device="cuda"), torch.randn(T, N_out, device="cuda")
    ref = x.T @ dy
    out = torch.empty(K_in, N_out, device="cuda")
    flop = 2 * T * K_in * N_out

    def err():
        return float((out - ref).abs().max() / ref.abs().max())

    t_ex = timed(lambda: gemm_ex(0, 1, N_out, K_in, T, dy, N_out, 0, x, K_in, 0, out, N_out, 0))
    line = [f"wgrad {K_in}x{N_out} (T {T}): gemmEx {t_ex:.1f} us ({flop / t_ex / 1e6:.1f} TF/s)"]
    p, _ = lt_plan(0, 1, N_out, K_in, T, N_out, K_in, N_out, cand=CAND)
    S = lt.MatmulAlgoConfigAttribute
    ts = []
    for i in range(len(p[2])):
        try:
            t = timed(lambda i=i: run_lt(p, i, dy, x, out))
            e = err()
        except Exception as ex:   # noqa: BLE001
            t, e = float("inf"), str(ex)[:30]
        ts.append((t, i, cfg(p[2], i, S.SPLITK_NUM), cfg(p[2], i, S.TILE_ID), e))
    ts.sort()
    line.append("lt best: " + ", ".join(f"#{i} {t:.1f}us sk{sk} tile{tile}"
                                        for t, i, sk, tile, e in ts[:5]))
    line.append(f"lt first #0: {next(r for r in ts if r[1] == 0)[0]:.1f} us of {len(ts)}")
    print("; ".join(line), flush=True)
    # cuBLASLt split-K forced on candidate 0 (and the best one)
    for base in sorted({0, ts[0][1]}):
        row = []
        for s in (2, 3, 4, 6, 8):
            res = p[2].copy()
            q = (p[0], p[1], res)
            try:
                _set(lt.matmul_algo_config_set_attribute, algo_ptr(res, base), S.SPLITK_NUM, s,
                     np.int32)
                t = timed(lambda q=q, base=base: run_lt(q, base, dy, x, out))
                row.append(f"sk{s} {t:.1f}us (err {err():.0e})")
            except Exception as ex:   # noqa: BLE001
                row.append(f"sk{s} fail {str(ex)[:40]}")
        print(f"  lt #{base} forced split-K: " + ", ".join(row), flush=True)
    # by hand: s partial products in one strided-batched call, then their sum
    row = []
    for s in (2, 3, 4, 6, 8):
        if T % s:
            continue
        ks = T // s
        part = torch.empty(s, K_in, N_out, device="cuda")
        t_b = timed(lambda ks=ks, part=part, s=s: gemm_ex(
            0, 1, N_out, K_in, ks, dy, N_out, ks * N_out, x, K_in, ks * K_in, part, N_out,
            K_in * N_out, batch=s))
        t_s = timed(lambda part=part: torch.sum(part, 0, out=out))
        row.append(f"s{s}: batched {t_b:.1f} + sum {t_s:.1f} = {t_b + t_s:.1f} us "
                   f"(err {err():.0e})")
    print("  by hand: " + "; ".join(row), flush=True)


def forward(M, N, K):
    """Row-major out[M, N] = x[M, K] w[K, N] and the input gradient shapes: gemmEx vs Lt."""
    x, w = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    out = torch.empty(M, N, device="cuda")
    t_ex = timed(lambda: gemm_ex(0, 0, N, M, K, w, N, 0, x, K, 0, out, N, 0))
    p, _ = lt_plan(0, 0, N, M, K, N, K, N, cand=CAND)
    ts = sorted((timed(lambda i=i: run_lt(p, i, w, x, out)), i) for i in range(len(p[2])))
    print(f"fwd {M}x{N}x{K}: gemmEx {t_ex:.1f} us ({2 * M * N * K / t_ex / 1e6:.1f} TF/s); lt "
          f"best #{ts[0][1]} {ts[0][0]:.1f}, #0 {next(t for t, i in ts if i == 0):.1f} us",
          flush=True)


if __name__ == "__main__":
    torch.backends.cuda.matmul.allow_tf32 = False
    print(torch.cuda.get_device_name(), flush=True)
    for s in ((384, 1152), (384, 384), (384, 1536), (1536, 384), (384, 256)):
        wgrad(*s)
    for s in ((4096, 1152, 384), (4096, 384, 384), (4096, 1536, 384), (4096, 384, 1536),
              (4096, 384, 1152), (4096, 256, 384), (4096, 384, 256)):
        forward(*s)
