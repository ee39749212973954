"""bfloat16 flash attention on tensor cores: the launches of attention_bf.py's kernels.

attention.py routes every bfloat16 attention primitive here (attention, attention_stats,
attention_dq, attention_dkv and attention_bwd, packed or not): the forward and dq store bf16
rows through a row and a head stride (attention_bwd's packed layout needs no copy), dkv writes
float32 partials that a second kernel sums in head order into the dk and dv views, and the
statistics (lse, delta) are float32 ([B, N, T, 2], attention_stats' layout). q / k / v / do are
read through their strides: as 16-byte quads of pairs when every row starts 16-byte aligned
with unit column stride and a width that is a multiple of 8, else as 16-bit elements.
"""
from __future__ import annotations

import numpy as np

from funcgrad.core.dtypes import bfloat16
from funcgrad.cuda import attention_bf as AB
from funcgrad.cuda import runtime
from funcgrad.cuda.arrays import DeviceBuffer, pool

U16, U32, F32 = np.dtype(np.uint16), np.dtype(np.uint32), np.dtype(np.float32)
# attention.py's shared-memory opt-in, its device limit and dkv's head split (set by it when it
# imports this module: opt_in(kern, args, nbytes, force=False), smem_limit(), dkv_split(b, s,
# kh, g, br)), so that this module imports nothing of it
HOOKS: dict = {}


def is_bf16(x) -> bool:
    return x.dtype == bfloat16


def pad_dim(h, hv):
    """The padded head dim D of a kernel: a multiple of 16 (the mma's k) in the simulator, a
    power of two >= 16 on a GPU."""
    m = max(h, hv, 1)
    if runtime.SIM:
        return -(-m // 16) * 16
    return max(16, 1 << (m - 1).bit_length())


def _quad_ok(x: DeviceBuffer):
    """Rows start 16-byte aligned with unit column stride and a width that is a multiple of
    8: tiles load as 16-byte quads of pairs."""
    if x.shape[3] % 8 or x.offset % 8 or (x.shape[3] > 1 and x.strides[3] != 1):
        return False
    if any(st % 8 for n, st in zip(x.shape[:3], x.strides[:3]) if n > 1):
        return False
    return runtime.SIM or (x.block.ptr() + 2 * x.offset) % 16 == 0


def _typed(x, dtype):
    try:
        return x.block.typed(dtype)
    except (ValueError, TypeError):   # a block whose bytes do not divide into dtype's size
        return None


def _op_args(ops, pair):
    """The kernel arguments of each operand (array, offset, four strides) and whether they
    are quads of pairs (uint32, offsets and strides halved) or elements (uint16)."""
    if pair and all(_quad_ok(x) for x in ops):
        arrs = [_typed(x, U32) for x in ops]
        if all(a is not None for a in arrs):
            return [v for x, a in zip(ops, arrs)
                    for v in (a, x.offset // 2, *(s // 2 for s in x.strides[:3]), 1)], True
    return [v for x in ops for v in (x.block.typed(U16), x.offset, *x.strides)], False


def _run(mode, d, cfg, pair, full, grid):
    """Launch `mode`'s kernel at (d, cfg), opting in to its shared memory over 48 KB (a
    refusal: the best configuration under 48 KB)."""
    opt_in = HOOKS["opt_in"]
    kern = runtime.kernel(("attention_bf", mode, d, cfg, pair, AB.PREFETCH),
                          lambda: AB.source(mode, d, cfg, runtime.SIM, runtime.jit_opts(), pair))
    nbytes = AB.smem_bytes(mode, d, cfg)
    big = nbytes > AB.DEFAULT_SMEM and not runtime.SIM and not runtime.dry_run
    if big and not opt_in(kern, full, nbytes):
        small = AB.pick_config(mode, d, False, AB.DEFAULT_SMEM)
        if small is None:
            raise RuntimeError(f"attention_bf {mode}: no configuration fits 48 KB at D = {d}")
        return small
    threads = 32 * cfg[0]
    try:
        kern[grid, threads, runtime.stream(), nbytes](*full)
    except Exception:   # an overload compiled at the launch itself, not yet opted in: once more
        if not big or not opt_in(kern, full, nbytes, force=True):
            raise
        kern[grid, threads, runtime.stream(), nbytes](*full)
    return None


def _launch(mode, q, k, rows, heads, d, make_args):
    """Pick the configuration and launch; make_args(cfg) -> (arguments, pair, grid z-split)."""
    cfg = AB.pick_config(mode, d, runtime.SIM, HOOKS["smem_limit"]())
    if cfg is None:
        raise RuntimeError(f"attention_bf {mode}: no configuration fits at D = {d}")
    for _ in range(2):
        full, pair, split = make_args(cfg)
        grid = (q.shape[0] * heads * split, -(-rows // (16 * cfg[0])), 1)
        cfg = _run(mode, d, cfg, pair, full, grid)
        if cfg is None:
            return
    raise RuntimeError(f"attention_bf {mode}: launch failed")


def _common(q, k, v_dim, scale, causal):
    _, t, n, h = q.shape
    s, kh = k.shape[1], k.shape[2]
    return (t, s, n, n // kh, h, v_dim, int(bool(causal)), float(scale))


def _out16(out: DeviceBuffer):
    """(array, offset, row stride, head stride) of a bf16 [B, T, N, X] output whose batch
    stride is T row strides and whose columns are contiguous."""
    b, t, _, x = out.shape
    if (b > 1 and out.strides[0] != t * out.strides[1]) or (x > 1 and out.strides[3] != 1):
        raise ValueError(f"attention_bf: output layout {out} is not [B, T] rows of heads")
    return [out.block.typed(U16), out.offset, out.strides[1], out.strides[2]]


def fwd(q, k, v, scale, causal, out):
    """o = attention(q, k, v) into out (bf16 [B, T, N, Hv])."""
    d = pad_dim(q.shape[3], v.shape[3])
    common = _common(q, k, v.shape[3], scale, causal)

    def args(cfg):
        ops, pair = _op_args([q, k, v], True)
        return [*ops, *_out16(out), *common], pair, 1
    _launch("fwd", q, k, q.shape[1], q.shape[2], d, args)
    return out


def stats(q, k, o, do, scale, causal, out):
    """attention_stats: (lse, delta) float32 rows [B, N, T, 2] into out (C order)."""
    d = pad_dim(q.shape[3], o.shape[3])
    common = _common(q, k, o.shape[3], scale, causal)

    def args(cfg):
        ops, pair = _op_args([q, k], True)
        rest, _ = _op_args([o, do], False)
        return [*ops, *rest, out.arr(), out.offset, *common], pair, 1
    _launch("stats", q, k, q.shape[1], q.shape[2], d, args)
    return out


def dq(q, k, v, do, st, scale, causal, out):
    """dq (bf16, out's rows) from the float32 stats st (C order)."""
    d = pad_dim(q.shape[3], v.shape[3])
    common = _common(q, k, v.shape[3], scale, causal)

    def args(cfg):
        ops, pair = _op_args([q, k, v, do], True)
        return [*ops, st.arr(), st.offset, *_out16(out), *common], pair, 1
    _launch("dq", q, k, q.shape[1], q.shape[2], d, args)
    return out


def dkv(q, k, v, do, st, scale, causal, dk, dv):
    """dk, dv (bf16 views [B, S, K, H] / [B, S, K, Hv] of one row layout): float32 partials
    over GS splits of a key head's query heads, summed in head order and rounded once."""
    b, _, n, h = q.shape
    s, kh, hv = k.shape[1], k.shape[2], v.shape[3]
    d = pad_dim(h, hv)
    common = _common(q, k, hv, scale, causal)
    m = b * s * kh * (h + hv)
    picked = {}

    def args(cfg):
        br = 16 * cfg[0]
        gs = HOOKS["dkv_split"](b, s, kh, n // kh, br)
        part = picked["part"] = pool().empty((gs * m,), F32)
        picked["gs"] = gs
        ops, pair = _op_args([q, k, v, do], True)
        return [*ops, st.arr(), st.offset, part.arr(), part.offset, *common, gs, m], pair, gs
    _launch("dkv", k, k, s, kh, d, args)
    part, gs = picked["part"], picked["gs"]
    kd, ko, rs, hs = _out16(dk)
    if dv.strides[:3] != dk.strides[:3] or dv.block is not dk.block:
        raise ValueError(f"attention_bf: dk {dk} and dv {dv} do not share one row layout")
    kern = runtime.kernel(("attention_bf", "dkvsum"),
                          lambda: AB.sum_source(runtime.jit_opts(), runtime.SIM))
    blocks, threads = runtime.grid_1d(m)
    kern[blocks, threads, runtime.stream()](part.arr(), part.offset, kd, ko, dv.offset, rs, hs,
                                            kh, h, hv, m, gs)

