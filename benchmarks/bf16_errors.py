"""The bfloat16 error of each CUDA kernel family against a float64 reference (one JSON line each).

Every input is drawn in float32 and rounded to bfloat16 first, so the reference (numpy float64
on the same bf16 values) measures the kernel's own error: its float32 arithmetic and the one
rounding of its result. Errors are in units of bf16's epsilon (2^-7 = 0.0078): max |got - ref| /
(|ref| + 1) / eps (a result rounded once is within 0.5 of that unit). Runs on a GPU or under
the simulator (NUMBA_ENABLE_CUDASIM=1 with --small: the kernels are the same source).
Usage: python benchmarks/bf16_errors.py [--small]
"""
from __future__ import annotations

import argparse
import json

import ml_dtypes
import numpy as np

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import lax, nn
from funcgrad.core import bind
from funcgrad.prims import rows as FP

BF = ml_dtypes.bfloat16
EPS = 2.0 ** -7


def err(got, ref):
    got, ref = np.asarray(got).astype(np.float64), np.asarray(ref, np.float64)
    return float(np.max(np.abs(got - ref) / (np.abs(ref) + 1)) / EPS)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true")
    a = ap.parse_args()
    R, N, K = (16, 24, 40) if a.small else (1024, 768, 3072)
    rng = np.random.default_rng(0)

    def draw(*s, scale=1.0):
        x = (rng.standard_normal(s) * scale).astype(np.float32).astype(BF)
        return x, x.astype(np.float64)

    def cuda(x):
        return funcgrad.device_put(x, "cuda")

    x, xd = draw(R, N)
    y, yd = draw(R, N)
    w, wd = draw(N, K, scale=N ** -0.5)
    g, gd = draw(N)
    b, bd = draw(N)
    X, Y = cuda(x), cuda(y)
    rows = []
    rows.append(("elementwise x * y + 1", funcgrad.jit(lambda p, q: p * q + 1.0)(X, Y),
                 xd * yd + 1))
    rows.append(("elementwise gelu (fused, bf16 intermediates)",
                 funcgrad.jit(lambda p: nn.gelu(p, approximate=True))(X),
                 0.5 * xd * (1 + np.tanh(np.sqrt(2 / np.pi) * (xd + 0.044715 * xd ** 3)))))
    rows.append(("reduce_sum over rows", fnp.sum(X, axis=-1), xd.sum(-1)))
    rows.append(("reduce_sum over columns", fnp.sum(X, axis=0), xd.sum(0)))
    rows.append((f"dot_general {R}x{N}x{K} (cuBLAS on a GPU)", X @ cuda(w), xd @ wd))
    rows.append(("dot_general -> float32 (preferred_element_type)",
                 lax.dot_general(X, cuda(w), (((1,), (0,)), ((), ())),
                                 preferred_element_type=np.float32), xd @ wd))
    e = np.exp(xd - xd.max(-1, keepdims=True))
    rows.append(("softmax", bind(FP.softmax_p, X), e / e.sum(-1, keepdims=True)))
    rows.append(("log_softmax", bind(FP.log_softmax_p, X), np.log(e / e.sum(-1, keepdims=True))))
    mu = xd.mean(-1, keepdims=True)
    ln = (xd - mu) / np.sqrt(((xd - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * gd + bd
    rows.append(("layer_norm", bind(FP.layer_norm_p, X, cuda(g), cuda(b), eps=1e-5), ln))
    rms = xd / np.sqrt((xd * xd).mean(-1, keepdims=True) + 1e-6) * gd
    rows.append(("rms_norm", bind(FP.rms_norm_p, X, cuda(g), eps=1e-6), rms))
    lab = rng.integers(0, N, R).astype(np.int32)
    lse = np.log(np.exp(xd - xd.max(-1, keepdims=True)).sum(-1)) + xd.max(-1)
    rows.append(("softmax_xent", bind(FP.softmax_xent_p, X, cuda(lab)),
                 lse - xd[np.arange(R), lab]))
    idx = rng.integers(0, R, 4 * R).astype(np.int32)
    u, ud = draw(4 * R, N)
    want = xd.copy()
    np.add.at(want, idx, ud)
    rows.append(("scatter_add (4 updates a row)",
                 funcgrad.jit(lambda p, i, q: p.at[i].add(q))(X, cuda(idx), cuda(u)), want))
    q, qd = draw(1, 64 if not a.small else 8, 4, 16)
    qh = np.swapaxes(qd, 1, 2)                       # [B, H, T, D]
    sc = qh @ np.swapaxes(qh, -1, -2) / np.sqrt(qd.shape[-1])
    T = qd.shape[1]
    sc = np.where(np.tril(np.ones((T, T), bool)), sc, -np.inf)
    p = np.exp(sc - sc.max(-1, keepdims=True))
    att = np.swapaxes((p / p.sum(-1, keepdims=True)) @ qh, 1, 2)
    rows.append(("attention (widened: float32 TF32 kernels, rounded back)",
                 funcgrad.jit(lambda v: nn.dot_product_attention(v, v, v, is_causal=True))(
                     cuda(q)), att))
    for name, got, ref in rows:
        print(json.dumps({"family": name, "dtype": str(np.asarray(got).dtype),
                          "err_bf16_eps": round(err(got, ref), 3),
                          "shape": list(np.shape(ref))}), flush=True)


if __name__ == "__main__":
    main()
