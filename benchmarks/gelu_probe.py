"""Probe: what bounds W2's broadcast-bias GELU kernel (4096 x 1536 float32, bias over the last
axis): tanh, the coordinate arithmetic, or memory. Variants of the generated kernel, each timed
alone (CUDA events, 50 launches).

Usage: python benchmarks/gelu_probe.py
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, int64, uint32

R, N = 4096, 1536
A1, A3, A5, A7 = 4.89352455891786e-03, 6.37261928875436e-04, 1.48572235717979e-05, \
    5.12229709037114e-08
A9, A11, A13 = -8.60467152213735e-11, 2.00018790482477e-13, -2.76076847742355e-16
B0, B2, B4, B6 = 4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04, \
    1.19825839466702e-06


@cuda.jit(device=True, inline=True)
def rtanh(x):
    c = min(max(x, float32(-7.90531110763549805)), float32(7.90531110763549805))
    x2 = c * c
    p = float32(A13)
    p = p * x2 + float32(A11)
    p = p * x2 + float32(A9)
    p = p * x2 + float32(A7)
    p = p * x2 + float32(A5)
    p = p * x2 + float32(A3)
    p = p * x2 + float32(A1)
    p = p * c
    q = float32(B6)
    q = q * x2 + float32(B4)
    q = q * x2 + float32(B2)
    q = q * x2 + float32(B0)
    return x if abs(x) < float32(0.0004) else p / q


@cuda.jit(device=True, inline=True)
def gelu(a, th):
    u = float32(0.7978845834732056) * (a + float32(0.044714998453855515) * a * a * a)
    return float32(0.5) * a * (float32(1) + th(u))


def make(kind):
    """kind: (tanh: "lib" | "rat" | "none", index: "mod" | "const" | "flat")."""
    th, ix = kind
    tf = {"lib": math.tanh, "rat": rtanh}.get(th)

    @cuda.jit
    def k(n, s2, b, h, o):
        i = cuda.grid(1)
        step = cuda.gridsize(1)
        while i < n:
            if ix == "mod":
                c2 = int64(uint32(i) % uint32(s2))
            elif ix == "const":
                c2 = int64(uint32(i) % uint32(N))
            else:
                c2 = 0
            a = h[i] + b[c2]
            if th == "none":
                o[i] = a
            elif th == "lib":
                o[i] = gelu(a, math.tanh)
            else:
                o[i] = gelu(a, rtanh)
            i += step
    del tf
    return k


def timed(fn, reps=50):
    fn()
    cuda.synchronize()
    e0, e1 = cuda.event(), cuda.event()
    e0.record()
    for _ in range(reps):
        fn()
    e1.record()
    e1.synchronize()
    return cuda.event_elapsed_time(e0, e1) / reps * 1e3


def main():
    rng = np.random.default_rng(0)
    h = rng.standard_normal((R * N,)).astype(np.float32) * 2
    b = rng.standard_normal(N).astype(np.float32)
    dh, db, do = cuda.to_device(h), cuda.to_device(b), cuda.device_array(R * N, np.float32)
    a = (h.reshape(R, N) + b).ravel().astype(np.float64)
    want = 0.5 * a * (1 + np.tanh(0.7978845834732056 * (a + 0.044715 * a ** 3)))
    print(cuda.get_current_device().name, flush=True)
    for th in ("none", "lib", "rat"):
        for ix in ("flat", "const", "mod"):
            k = make((th, ix))
            for threads, cap in ((256, 65536), (256, 132 * 8), (512, 132 * 4)):
                blocks = min(cap, -(-R * N // threads))
                us = timed(lambda k=k, b_=blocks, t_=threads: k[b_, t_](R * N, N, db, dh, do))
                err = ""
                if th != "none" and ix != "flat":
                    got = do.copy_to_host().astype(np.float64)
                    err = f" max rel err {np.max(np.abs(got - want) / (np.abs(want) + 1e-30)):.1e}"
                    err += f" max abs err {np.max(np.abs(got - want)):.1e}"
                print(f"tanh={th:4s} index={ix:5s} grid {blocks}x{threads}: {us:6.1f} us "
                      f"({R * N * 8 / us / 1e3:.0f} GB/s){err}", flush=True)


if __name__ == "__main__":
    main()
