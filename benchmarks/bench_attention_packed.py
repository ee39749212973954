"""attention_bwd's packed layout at W2: the kernels' GPU time with the packed [B, T, 3N, H] stores
against the unpacked layout plus the concatenate it needed, and W2's AdamW step with the
`pack` rewrite against the same step without it (rounds interleaved, one process).

Usage: python benchmarks/bench_attention_packed.py [--rounds 5] [--reps 20] [--dims B N T H]
       [--no-w2]
One JSON line per figure (GPU times by CUPTI through torch's profiler, as bench_attention.py; a
step's kernel_sum_ms adds every kernel's time, so kernels on concurrent graph branches count
each: it can exceed the step's wall time).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "examples")]
from bench_attention import _gpu_ms, emit

import funcgrad


def kernels(b=16, n=6, t=256, h=64, reps=20):
    """GPU us of attention_bwd at W2's shape (q, k, v strided heads of one qkv buffer):
    unpacked, unpacked + the concatenate of dq, dk, dv along the heads, packed."""
    from funcgrad.prims.attention_lse import _fwdl_impl
    from funcgrad.prims.attention import _stats_impl
    from funcgrad.core import ShapedArray
    from funcgrad.cuda import attention as CA
    from funcgrad.cuda import concat
    from funcgrad.cuda.arrays import from_host, to_host
    rng = np.random.default_rng(0)
    qkv = rng.standard_normal((b, t, 3 * n, h)).astype(np.float32)
    w = rng.standard_normal((b, t, n, h)).astype(np.float32)
    q, k, v = (np.ascontiguousarray(qkv[:, :, i * n:(i + 1) * n]) for i in range(3))
    scale = 1 / np.sqrt(h)
    o = _fwdl_impl(q, k, v, scale=scale, causal=True)[:q.size].reshape(q.shape)
    st = _stats_impl(q, k, o, w, scale=scale, causal=True)
    qkvb = from_host(qkv)
    qb, kb, vb = (qkvb.view((b, t, n, h), qkvb.strides, qkvb.offset + i * n * h)
                  for i in range(3))
    gb, sb = from_host(w), from_host(st)
    aval = ShapedArray((3 * q.size,), q.dtype)

    def unpacked():
        return CA.bwd(qb, kb, vb, gb, sb, scale, True, aval)

    def with_concat():
        flat = unpacked()
        dq = flat.view((b, t, n, h), (t * n * h, n * h, h, 1), flat.offset)
        st_ = (t * n * 2 * h, n * 2 * h, 2 * h, 1)
        dk = flat.view((b, t, n, h), st_, flat.offset + q.size)
        dv = flat.view((b, t, n, h), st_, flat.offset + q.size + h)
        out = concat.concatenate([dq, dk, dv], 2, ShapedArray((b, t, 3 * n, h), q.dtype))
        assert out is not None   # one launch, as W2's plan had it
        return out

    def packed():
        return CA.bwd(qb, kb, vb, gb, sb, scale, True, aval, packed=True)
    a, c = to_host(with_concat()), to_host(packed())
    emit(what="packed_bits_equal", value=bool(np.array_equal(a.ravel(), c.ravel())))
    for name, call in (("unpacked", unpacked), ("unpacked_concat", with_concat),
                       ("packed", packed)):
        ms = _gpu_ms(call, reps)
        emit(what="attention_bwd_us", layout=name, value=None if ms is None else round(ms * 1e3, 1))


def w2(rounds, reps):
    """W2's step (donated) with and without the pack rewrite, median ms per round."""
    import gpt
    from workloads import gpt_step

    from funcgrad.compile.rewrites import attention_bwd as RB
    from funcgrad.compile import passes
    steps = {}
    for packed in (True, False):
        if not packed:
            passes.POST_REWRITES.remove(RB.pack)
        try:
            params = funcgrad.device_put(gpt.init_params(gpt.W2))
            step, opt, idx, tgt = gpt_step(gpt.W2, 16, donate=True)
            state = [params, opt.init(params)]
            t0 = time.perf_counter()
            state[0], state[1], val = step(state[0], state[1], idx, tgt)
            val.block_until_ready()
            first = time.perf_counter() - t0
            expr = step.lower(state[0], state[1], idx, tgt).expr
        finally:
            if not packed:
                passes.POST_REWRITES.insert(passes.POST_REWRITES.index(RB.rewrite) + 1, RB.pack)
        n_cat = sum(e.prim.name == "concatenate" for e in expr.eqns)
        emit(what="W2_program", packed=packed, concatenates=n_cat, first_call_s=round(first, 2))
        steps[packed] = (step, state, idx, tgt)

    def run(packed):
        step, state, idx, tgt = steps[packed]
        state[0], state[1], val = step(state[0], state[1], idx, tgt)
        val.block_until_ready()
    for packed in (True, False):
        for _ in range(20):
            run(packed)
    ms = {True: [], False: []}
    for _ in range(rounds):
        for packed in (True, False):
            ts = []
            for _ in range(reps):
                t0 = time.perf_counter()
                run(packed)
                ts.append(time.perf_counter() - t0)
            ms[packed].append(float(np.median(ts)) * 1e3)
    for packed in (True, False):
        gpu = _gpu_ms(lambda p=packed: run(p), reps)
        emit(what="W2_gpt_step_ms_donated", packed=packed,
             rounds=[round(x, 3) for x in ms[packed]],
             median=round(float(np.median(ms[packed])), 3),
             kernel_sum_ms=None if gpu is None else round(gpu, 3))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--dims", type=int, nargs=4, default=(16, 6, 256, 64), help="B N T H")
    ap.add_argument("--no-w2", action="store_true")
    a = ap.parse_args()
    from numba import cuda
    emit(what="device", name=str(getattr(cuda.get_current_device(), "name", "simulator")),
         utc=time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()))
    kernels(*a.dims, reps=a.reps)
    if not a.no_w2:
        w2(a.rounds, a.reps)


if __name__ == "__main__":
    main()
