"""Shared by the CUDA attention tests: whether a GPU or the simulator runs them, device copies,
and the drawn operands (query heads also at an offset in a wider array, for strided reads)."""
from __future__ import annotations

import numpy as np

import funcgrad


def usable() -> bool:
    try:
        from funcgrad import cuda
    except ImportError:
        return False
    return cuda.usable()


def sim() -> bool:
    try:
        from funcgrad.cuda import runtime
    except ImportError:
        return True
    return runtime.sim_requested()


def dev(*xs):
    return [funcgrad.device_put(x, "cuda") for x in xs]


def operands(b, t, s, kh, g, h, hv):
    """(qf, q, k, v, do) float32, seeded by the shape: q = qf[..., 1:] made contiguous, qf
    [b, t, n, h + 1] the wider array strided tests read q from; n = kh * g query heads."""
    rng = np.random.default_rng(b + 7 * t + 31 * s + h)
    n = kh * g
    qf = rng.standard_normal((b, t, n, h + 1)).astype(np.float32)
    q = np.ascontiguousarray(qf[..., 1:])
    k, v = (rng.standard_normal(sh).astype(np.float32) for sh in ((b, s, kh, h), (b, s, kh, hv)))
    do = rng.standard_normal((b, t, n, hv)).astype(np.float32)
    return qf, q, k, v, do


def unpacked_to_packed(flat, b, t, n, kh, h):
    """The packed [B, T, N + 2K, H] rows (dq, dk, dv heads) of attention_bwd's unpacked flat
    result (dq, then dkv [B, T, K, 2H]; S == T, H == Hv)."""
    n_q = b * t * n * h
    dq = flat[:n_q].reshape(b, t, n, h)
    dkv = flat[n_q:].reshape(b, t, kh, 2 * h)
    return np.concatenate([dq, dkv[..., :h], dkv[..., h:]], axis=2)
