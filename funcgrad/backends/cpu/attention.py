"""Fused attention on the CPU: one njit kernel per (batch, key/value head) block over BLAS tiles.

The numpy impls of funcgrad/prims/attention*.py are the spec; they build [B, N, tc, S] logits
with einsum (numpy's own loops, not BLAS) and spent 93 of a CS step's 124 ms there (examples/
gpt.py's SMALL at batch 16, 2-core dev VM). Here a job is one batch row and one key/value head:
its key and value rows are copied once into contiguous tiles, then for each of its N // K query
heads (grouped-query attention) and each block of BLOCK query rows, the scores come from one
BLAS product (numba's np.dot, through SciPy's BLAS), the causal rows are cut at the diagonal (keys
past the block's last row are never multiplied), the softmax runs in the kernel, and a second
product gives the block's output. The backward (FlashAttention-2's, from the saved logsumexp)
recomputes the probabilities per block and takes dV, dP, dQ and dK from four products, dK and
dV summed over the group's heads in a tile of the job's own, so no two jobs write one element.

Jobs go to the caller and cpu_parallel's helper thread in chunks (above SPLIT_FLOPS); every
job computes the same way whichever thread runs it, so results are the same bits on every run
and with or without the helper. They differ from the numpy impls by rounding only (another
summation order, exp(x - m) / l instead of exp(x - lse)): tests/test_cpu_attention.py holds them
to 2e-6 (float32) and 1e-12 (float64) relative to the largest output.

float32 and float64 operands only (16-bit ones keep the numpy impls, which widen them), and only
where numba has SciPy's BLAS to call (without SciPy the plans keep the numpy impls).
"""
from __future__ import annotations

import functools
import math
import os
import warnings

import numpy as np

from funcgrad.backends.cpu import (
    blas as cpu_blas,
    kernels as cpu_kernels,
    parallel as cpu_parallel,
)
from funcgrad.backends.cpu.steps import STEP_BUILDERS
from funcgrad.prims import attention as A, attention_bwd as AB, attention_lse as AL

BLOCK = 64   # query rows per score tile (a 64 x S tile of float32 stays in L2 up to S ~ 4096)

SOURCE = """
@njit(cache=True, nogil=True, error_model="numpy")
def _tiles(k, v, b, j, kt, vt):
    for s in range(k.shape[1]):
        for d in range(k.shape[3]):
            kt[s, d] = k[b, s, j, d]
        for d in range(v.shape[3]):
            vt[s, d] = v[b, s, j, d]


@njit(cache=True, nogil=True, error_model="numpy")
def _rows(x, b, t0, tc, n, xt):
    for i in range(tc):
        for d in range(x.shape[3]):
            xt[i, d] = x[b, t0 + i, n, d]


@njit(cache=True, nogil=True, error_model="numpy")
def _scores(qb, kt, sm):
    # qb . kt[:sm]^T, zeros when the head dim is 0 (BLAS takes no empty operand)
    if qb.shape[1] == 0:
        return np.zeros((qb.shape[0], sm), qb.dtype)
    return np.dot(qb, kt[:sm].T)


@njit(cache=True, nogil=True, error_model="numpy")
def _product(a, b):
    # a . b, zeros when the contracted dim is 0
    if a.shape[1] == 0 or b.shape[1] == 0:
        return np.zeros((a.shape[0], b.shape[1]), a.dtype)
    return np.dot(a, b)


@njit(cache=True, nogil=True, error_model="numpy")
def fwd(q, k, v, o, lse, scale, causal, lo, hi):
    # o [B, T, N, Hv] = softmax(scale q k^T, causal) v; lse [B, N, T] (or [0, 0, 0]: not kept)
    nb, t, n, h = q.shape
    s, kh, hv = k.shape[1], k.shape[2], v.shape[3]
    g = n // kh
    bt = max(1, min(t, BLOCK))
    kt = np.empty((s, h), q.dtype)
    vt = np.empty((s, hv), q.dtype)
    qt = np.empty((bt, h), q.dtype)
    keep = lse.shape[0] > 0
    for job in range(lo, hi):
        b, j = job // kh, job % kh
        _tiles(k, v, b, j, kt, vt)
        for hd in range(j * g, j * g + g):
            for t0 in range(0, t, bt):
                tc = min(t, t0 + bt) - t0
                sm = min(s, t0 + tc) if causal else s
                _rows(q, b, t0, tc, hd, qt)
                sc = _scores(qt[:tc], kt, sm)
                tot = np.empty(tc, q.dtype)
                top = np.empty(tc, q.dtype)
                for i in range(tc):
                    lim = min(sm, t0 + i + 1) if causal else sm
                    m = -np.inf
                    for c in range(lim):
                        x = sc[i, c] * scale
                        sc[i, c] = x
                        if x > m or x != x:
                            m = x
                    if not math.isfinite(m):   # as the numpy impl: an all -inf (or empty) row
                        m = 0.0
                    acc = 0.0
                    for c in range(lim):
                        e = math.exp(sc[i, c] - m)
                        sc[i, c] = e
                        acc += e
                    for c in range(lim, sm):
                        sc[i, c] = 0.0
                    tot[i] = acc
                    top[i] = m
                ob = _product(sc, vt[:sm])
                for i in range(tc):
                    r = tot[i]
                    for d in range(hv):   # a row with no key (S == 0) is 0, as in numpy
                        o[b, t0 + i, hd, d] = ob[i, d] / r if sm > 0 else 0.0
                    if keep:
                        lse[b, hd, t0 + i] = math.log(r) + top[i]


@njit(cache=True, nogil=True, error_model="numpy")
def bwd(q, k, v, do, stats, dq, dk, dv, scale, causal, lo, hi):
    # dq [B, T, N, H], dk [B, S, K, H], dv [B, S, K, Hv] (views of the result) from the
    # forward's stats [B, N, T, 2] (logsumexp, delta = sum(o * do) over Hv)
    nb, t, n, h = q.shape
    s, kh, hv = k.shape[1], k.shape[2], v.shape[3]
    g = n // kh
    bt = max(1, min(t, BLOCK))
    kt = np.empty((s, h), q.dtype)
    vt = np.empty((s, hv), q.dtype)
    qt = np.empty((bt, h), q.dtype)
    dot_ = np.empty((bt, hv), q.dtype)
    for job in range(lo, hi):
        b, j = job // kh, job % kh
        _tiles(k, v, b, j, kt, vt)
        dkt = np.zeros((s, h), q.dtype)
        dvt = np.zeros((s, hv), q.dtype)
        for hd in range(j * g, j * g + g):
            for t0 in range(0, t, bt):
                tc = min(t, t0 + bt) - t0
                sm = min(s, t0 + tc) if causal else s
                _rows(q, b, t0, tc, hd, qt)
                _rows(do, b, t0, tc, hd, dot_)
                qb, dob = qt[:tc], dot_[:tc]
                p = _scores(qb, kt, sm)
                for i in range(tc):
                    lim = min(sm, t0 + i + 1) if causal else sm
                    ls = stats[b, hd, t0 + i, 0]
                    if not math.isfinite(ls):
                        lim = 0
                    for c in range(lim):
                        p[i, c] = math.exp(p[i, c] * scale - ls)
                    for c in range(lim, sm):
                        p[i, c] = 0.0
                if sm == 0:
                    for i in range(tc):
                        for d in range(h):
                            dq[b, t0 + i, hd, d] = 0.0
                    continue
                dvt[:sm] += _product(p.T, dob)
                ds = _scores(dob, vt, sm)
                for i in range(tc):
                    dl = stats[b, hd, t0 + i, 1]
                    for c in range(sm):
                        ds[i, c] = p[i, c] * (ds[i, c] - dl)
                dqb = _product(ds, kt[:sm])
                for i in range(tc):
                    for d in range(h):
                        dq[b, t0 + i, hd, d] = dqb[i, d] * scale
                dkt[:sm] += _product(ds.T, qb)
        for r in range(s):
            for d in range(h):
                dk[b, r, j, d] = dkt[r, d] * scale
            for d in range(hv):
                dv[b, r, j, d] = dvt[r, d]
"""

# jobs of at least this many multiply-adds (all of a call's) are shared with the helper thread
SPLIT_FLOPS = int(os.environ.get("FUNCGRAD_CPU_ATTN_SPLIT", str(1 << 22)))


@functools.lru_cache(maxsize=1)
def _module():
    """The kernels, or None where numba cannot call BLAS (no SciPy)."""
    try:
        import scipy.linalg.cython_blas  # noqa: F401 (numba's np.dot calls its BLAS)
    except ImportError:
        return None
    cpu_blas.other_blas_serial("scipy.libs")   # tiles are small; the jobs are the threads
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cpu_kernels.module_from_source(SOURCE.replace("BLOCK", str(BLOCK)))


def _ok(e) -> bool:
    q = e.inputs[0].aval
    return (q.dtype in (np.float32, np.float64) and e.params.get("precision") is None
            and _module() is not None)


def _madds(qs, ks, vs, causal) -> int:
    """Multiply-adds of the two products of a forward over these shapes."""
    b, t, n, h = qs
    s, hv = ks[1], vs[3]
    pairs = t * s if not causal else sum(min(s, t0 + 1) for t0 in range(t))
    return b * n * pairs * (h + hv)


def _run(kernel, jobs, work, *args):
    """kernel(*args, lo, hi) over jobs [0, jobs), shared with the helper thread when large."""
    if work >= SPLIT_FLOPS and jobs >= 2 and os.cpu_count() != 1:
        cpu_parallel.run_chunks([lambda lo=lo, hi=hi: kernel(*args, lo, hi)
                                 for lo, hi in cpu_parallel.bounds(jobs)])
    elif jobs:
        kernel(*args, 0, jobs)


def forward(q, k, v, *, scale, causal, with_lse):
    """(o [B, T, N, Hv], lse [B, N, T] or None) of the fused kernel."""
    m = _module()
    b, t, n, _ = q.shape
    kh, hv = k.shape[2], v.shape[3]
    size = b * t * n * hv
    flat = np.empty(size + (b * n * t if with_lse else 0), q.dtype)
    o = flat[:size].reshape(b, t, n, hv)
    lse = flat[size:].reshape(b, n, t) if with_lse else np.empty((0, 0, 0), q.dtype)
    _run(m.fwd, b * kh, _madds(q.shape, k.shape, v.shape, causal), q, k, v, o, lse,
         q.dtype.type(scale), causal)
    return flat, o, (lse if with_lse else None)


def backward(q, k, v, do, stats, *, scale, causal, packed=False):
    """attention_bwd's flat result (either layout), from the fused kernel."""
    m = _module()
    b, t, n, h = q.shape
    s, kh, hv = k.shape[1], k.shape[2], v.shape[3]
    flat = np.empty(q.size + b * s * kh * (h + hv), q.dtype)
    if packed:
        o4 = flat.reshape(b, t, n + 2 * kh, h)
        dq, dk, dv = o4[:, :, :n], o4[:, :, n:n + kh], o4[:, :, n + kh:]
    else:
        dq = flat[:q.size].reshape(q.shape)
        dkv = flat[q.size:].reshape(b, s, kh, h + hv)
        dk, dv = dkv[..., :h], dkv[..., h:]
    _run(m.bwd, b * kh, 2 * _madds(q.shape, k.shape, v.shape, causal) + _madds(
        q.shape, k.shape, k.shape, causal), q, k, v, do, stats.astype(q.dtype, copy=False),
        dq, dk, dv, q.dtype.type(scale), causal)
    return flat


def _attention(q, k, v, *, scale, causal, precision=None):
    return forward(q, k, v, scale=scale, causal=causal, with_lse=False)[1]


def _fwdl(q, k, v, *, scale, causal, precision=None):
    return forward(q, k, v, scale=scale, causal=causal, with_lse=True)[0]


def _stats(q, k, o, do, *, scale, causal, precision=None):
    _, _, lse = forward(q, k, k[..., :0], scale=scale, causal=causal, with_lse=True)
    return AL._delta_impl(o, do, lse)


def _dq(q, k, v, do, stats, *, scale, causal, precision=None):
    return backward(q, k, v, do, stats, scale=scale, causal=causal)[:q.size].reshape(q.shape)


def _dkv(q, k, v, do, stats, *, scale, causal, precision=None):
    b, s, kh, h = k.shape
    flat = backward(q, k, v, do, stats, scale=scale, causal=causal)
    return flat[q.size:].reshape(b, s, kh, h + v.shape[3])


KERNELS = {A.attention_p: _attention, AL.attention_fwdl_p: _fwdl, A.attention_stats_p: _stats,
           A.attention_dq_p: _dq, A.attention_dkv_p: _dkv, AB.attention_bwd_p: backward}


def _build(e, fuse: bool):
    """The plan's function for an attention equation: the fused kernel when the plan fuses and
    the operands are float32/float64, else the numpy impl."""
    if fuse and _ok(e):
        fn = functools.partial(KERNELS[e.prim], **e.params)
        fn.kernels = 1
        fn.fresh = True
        return fn
    return functools.partial(e.prim.impl, **e.params)


def register(table: dict) -> None:
    """Add the attention primitives' plan steps to cpu_steps' table (STEP_BUILDERS)."""
    for prim in KERNELS:
        table[prim] = _build


register(STEP_BUILDERS)
