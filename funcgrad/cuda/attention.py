"""Flash-attention kernels for funcgrad/prims/attention.py: forward, stats, dq and dkv launches.

One block per (row tile, head, batch): the rows are queries (forward, stats, dq) or keys (dkv),
the other side streams through shared memory; every product is a register-tiled GEMM from shared
memory (the generator and its layout: attention_src.py). The backward recomputes the
probabilities from the saved logsumexp (FlashAttention-2): no T x S buffer anywhere. q/k/v/o/do
are read through their strides (heads split out of a fused qkv projection need no copy); outputs
are C-contiguous, except the backward's dq / dk / dv rows, stored through runtime row and head
strides (attention_bwd's packed layout: the fused projection's gradient, no copy).
Accumulation is in float32 for float16 and float32 operands, float64 for float64; summation
orders are fixed, so results are deterministic.
"""
from __future__ import annotations

import math

import numpy as np

from funcgrad.compile import switches
from funcgrad.cuda import attention_bfl as ABL
from funcgrad.cuda import attention_src as AS
from funcgrad.cuda import attention_tc as ATC
from funcgrad.cuda import cudnn_attn
from funcgrad.cuda import runtime
from funcgrad.cuda.arrays import DeviceBuffer, from_host, pool, to_host
from funcgrad.cuda.elementwise import compute_t, contiguous, fill, run


def _pad_dim(h, hv):
    """The padded head dim D baked into a kernel (its output registers): a power of two >= 16
    on the GPU, under the simulator the next multiple of the lane count and of the k-loop step
    (UK)."""
    m = max(h, hv, 1)
    if runtime.SIM:
        cfg = AS.full_config(AS.SIM_CONFIG)
        tx = math.lcm(cfg[3], cfg[8])
        return -(-m // tx) * tx
    d = 16
    while d < m:
        d *= 2
    return d


def _args(x: DeviceBuffer):
    return [x.arr(), x.offset, *x.strides]


def _tc_config(mode, q, h, hv, precision, limit=None):
    """(padded head dim, (warps, streamed rows)) of the TF32 tensor-core kernel for this
    launch, or None: the SIMT kernels (exact float32, other dtypes, modes, or no fit).
    limit: the shared memory a block may take (default: the device's opt-in limit)."""
    if precision != "tensorfloat32" or q.dtype != np.float32 or mode not in ATC.MODES:
        return None
    m = max(h, hv, 1)
    d = -(-m // 8) * 8 if runtime.SIM else _pad_dim(h, hv)
    cfg = ATC.pick_config(mode, d, runtime.SIM, smem_limit() if limit is None else limit)
    return None if cfg is None else (d, cfg)


_smem_limit = None


def smem_limit():
    """The most dynamic shared memory one block may opt in to on this device (bytes); 48 KB
    once an opt-in has failed (_opt_in), so configurations that need none are picked."""
    global _smem_limit
    if _smem_limit is None:
        lim = ATC.SMEM_BYTES
        if not runtime.SIM:
            try:
                lim = int(runtime.load().get_current_device()
                          .MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            except Exception:   # noqa: BLE001 (an attribute numba does not know: the default)
                lim = ATC.DEFAULT_SMEM
        _smem_limit = min(lim, ATC.SMEM_BYTES)
    return _smem_limit


_opted: dict = {}   # (id(dispatcher), device id) -> (dispatcher, overloads opted in, bytes)


def _opt_in(kern, args, nbytes, force=False):
    """Let kern's overload for `args` launch with nbytes of dynamic shared memory over 48 KB.

    numba-cuda 0.30.4 has no API for it (NVIDIA/numba-cuda#94): the overload's library kernel
    (`_codelibrary.get_cufunc()`, loaded for the current device) gets the driver's
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES through cuKernelSetAttribute, the call
    numba-cuda's own `set_shared_memory_carveout` makes for its carveout attribute. Done once
    per overload and device, before the first launch (a jit plan's first call runs its
    launches uncaptured, so graph captures find the attribute set). False when the driver
    refused (the caller then picks a configuration under 48 KB). The shared-memory carveout
    is set to its maximum too, so that two such blocks fit an SM."""
    cuda = runtime.load()
    dev = cuda.get_current_device().id
    key = (id(kern), dev)
    done = _opted.get(key)
    if (not force and done is not None and done[1] == len(kern.overloads)
            and done[2] >= nbytes):
        return True
    try:
        from numba.cuda.cudadrv.driver import binding, driver
        ov = kern.compile(tuple(kern.typeof_pyval(a) for a in args))
        attrs = binding.CUfunction_attribute
        for k in [ov, *(x for x in kern.overloads.values() if x is not ov)]:
            f = k._codelibrary.get_cufunc()
            driver.cuKernelSetAttribute(attrs.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        int(nbytes), f.handle, dev)
            driver.cuKernelSetAttribute(
                attrs.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100, f.handle, dev)
    except Exception as e:   # noqa: BLE001 (any driver or numba failure: the 48 KB configs)
        global _smem_limit
        import warnings
        warnings.warn(f"funcgrad: opting in to {nbytes} bytes of shared memory failed ({e!r});"
                      " TF32 attention falls back to configurations under 48 KB",
                      RuntimeWarning, stacklevel=3)
        _smem_limit = ATC.DEFAULT_SMEM
        return False
    _opted[key] = (kern, len(kern.overloads), max(nbytes, done[2] if done else 0))
    return True


def _simt_config(mode, q, h, hv):
    """(padded head dim, configuration) of the SIMT kernel for `mode`."""
    ct_size = 4 if compute_t(q.dtype) == "float32" else q.dtype.itemsize
    d = _pad_dim(h, hv)
    return d, AS.pick_config(mode, d, ct_size, runtime.SIM)


def _vec_ok(ops):
    """Every operand's rows start 16-byte aligned, columns contiguous, widths multiples of 4:
    the tensor-core kernels then load tiles as float4s (attention_tc `vec`)."""
    for x in ops:
        if x.shape[3] % 4 or x.offset % 4 or (x.shape[3] > 1 and x.strides[3] != 1):
            return False
        if any(st % 4 for n, st in zip(x.shape[:3], x.strides[:3]) if n > 1):
            return False
        if not runtime.SIM and (x.block.ptr() + 4 * x.offset) % 16:
            return False   # (the simulator's stand-ins need only the offsets)
    return True


def _tc_launch(mode, tc, ops, args, tail_of, b, rows, heads):
    """Launch the tensor-core kernel of `mode` at tc = (d, (w, bc)); tail_of(br) gives the
    arguments after the common ones (dkv's split). Opts in to the shared memory the
    configuration needs; where the driver refuses, relaunches under a 48 KB configuration."""
    d, (w, bc) = tc
    vec = _vec_ok(ops)
    kern = runtime.kernel(("attention_tc", mode, d, w, bc, vec, ATC.FAST_LOADS, ATC.PREFETCH),
                          lambda: ATC.source(mode, d, (w, bc), runtime.SIM, runtime.jit_opts(),
                                             vec))
    nbytes = ATC.smem_bytes(mode, d, (w, bc))
    br = 16 * w
    full = [*args, *tail_of(br)]
    if (nbytes > ATC.DEFAULT_SMEM and not runtime.SIM and not runtime.dry_run
            and not _opt_in(kern, full, nbytes)):
        cfg = ATC.pick_config(mode, d, False, ATC.DEFAULT_SMEM)
        if cfg is None:
            raise RuntimeError(f"attention_tc {mode}: no configuration fits 48 KB at D = {d}")
        return _tc_launch(mode, (d, cfg), ops, args, tail_of, b, rows, heads)
    grid = (b * heads, -(-rows // br), 1)
    if mode == "dkv":   # its tail ends (GS, PS): GS blocks a key head
        grid = (grid[0] * full[-2], grid[1], 1)
    try:
        kern[grid, 32 * w, runtime.stream(), nbytes](*full)
    except Exception:   # an overload compiled at the launch itself, not yet opted in: once more
        if nbytes <= ATC.DEFAULT_SMEM or runtime.SIM or runtime.dry_run or not _opt_in(
                kern, full, nbytes, force=True):
            raise
        kern[grid, 32 * w, runtime.stream(), nbytes](*full)


def _dkv_split(b, s, kh, g, br):
    """GS of the tensor-core dkv at row tile br (attention_tc.dkv_splits; DKV_SPLIT forces)."""
    if DKV_SPLIT is not None:
        return DKV_SPLIT if g % DKV_SPLIT == 0 else 1
    return ATC.dkv_splits(b * kh * -(-s // br), g, runtime.SIM)


DKV_SPLIT = None   # tests and benchmarks: force the dkv split (a divisor of G)
switches.register(__name__, "DKV_SPLIT")   # a change keys jit's shared cache apart


def _launch(mode, ops, extra, out, q, k, v_dim, scale, causal, st_dtype, precision=None,
            dkv_to=None):
    """Launch `mode`'s kernel; dkv_to: the SIMT dkv / bwd kernels' (dv offset, row stride, head
    stride) of out (None: attention_dkv's C-contiguous [B, S, K, H + Hv] at out.offset)."""
    b, t, n, h = q.shape
    s, kh = k.shape[1], k.shape[2]
    tc = _tc_config(mode, q, h, v_dim, precision)
    rows, heads = (s, kh) if mode in ("dkv", "bwd") else (t, n)
    args = [a for x in ops for a in _args(x)]
    extra = [a for e in extra for a in (e.arr(), e.offset)]
    common = (t, s, n, n // kh, h, v_dim, int(bool(causal)), float(scale))
    if tc is not None:
        if mode != "dkv":
            _tc_launch(mode, tc, ops, [*args, *extra, out.arr(), out.offset, *common],
                       lambda br: (), b, rows, heads)
            return out
        # dkv: a key head's query heads over GS blocks, partials [GS, B, S, K, H + Hv] summed
        # in order by a second kernel (deterministic); the split follows the row tile
        m = b * s * kh * (h + v_dim)
        picked = {}

        def tail(br):
            gs = picked["gs"] = _dkv_split(b, s, kh, n // kh, br)
            dst = picked["dst"] = out if gs == 1 else pool().empty((gs * m,), out.dtype)
            return (dst.arr(), dst.offset, *common, gs, m)
        _tc_launch(mode, tc, ops, [*args, *extra], tail, b, rows, heads)
        if picked["gs"] > 1:
            part = picked["dst"]
            kern = runtime.kernel(("attention_tc", "dkvsum"),
                                  lambda: ATC.sum_source(runtime.jit_opts()))
            blocks, threads = runtime.grid_1d(m)
            kern[blocks, threads, runtime.stream()](part.arr(), part.offset, out.arr(),
                                                    out.offset, m, picked["gs"])
        return out
    d, cfg = _simt_config(mode, q, h, v_dim)
    key = ("attention2", mode, q.dtype.name, np.dtype(st_dtype).name, d, cfg)
    kern = runtime.kernel(key, lambda: AS.source(mode, q.dtype, st_dtype, d, cfg,
                                                runtime.SIM, runtime.jit_opts()))
    br, threads = cfg[0], cfg[2] * cfg[3]
    extra_out = ()
    if mode in ("dkv", "bwd"):
        extra_out = dkv_to or (out.offset + h, kh * (h + v_dim), h + v_dim)
    grid = (b * heads, -(-rows // br), 1)
    kern[grid, threads, runtime.stream()](*args, *extra, out.arr(), out.offset, *extra_out,
                                          *common)
    return out


def _empty(shape, dtype, zero):
    out = pool().empty(shape, dtype)
    return fill(out, 0) if zero and out.size else out


def attention(q, k, v, scale, causal, aval, precision=None):
    out = pool().empty(aval.shape, aval.dtype)
    if out.size == 0:
        return out
    if cudnn_attn.forward(q, k, v, out, scale, causal):   # 16-bit, where cuDNN takes it
        return out
    if ABL.is_bf16(q):   # (no keys: the kernel's rows are zero)
        return ABL.fwd(q, k, v, scale, causal, out)
    if k.shape[1] == 0:   # no keys: every row is zero (the composed softmax . v)
        return fill(out, 0)
    return _launch("fwd", [q, k, v], [], out, q, k, v.shape[3], scale, causal, None,
                   precision)


def stats(q, k, o, do, scale, causal, aval):
    out = pool().empty(aval.shape, aval.dtype)
    if out.size == 0:
        return out
    if k.shape[1] == 0:
        st = np.zeros(aval.shape, aval.dtype)
        st[..., 0] = -np.inf
        return from_host(st)
    if ABL.is_bf16(q):
        return ABL.stats(q, k, o, do, scale, causal, out)
    return _launch("stats", [q, k, o, do], [], out, q, k, o.shape[3], scale, causal,
                   aval.dtype)


def _dq_into(out, q, k, v, do, st, scale, causal, precision=None):
    if out.size == 0:
        return out
    if ABL.is_bf16(q):   # (no keys: the kernel's rows are zero)
        return ABL.dq(q, k, v, do, contiguous(st), scale, causal, out)
    if k.shape[1] == 0:
        return fill(out, 0)
    return _launch("dq", [q, k, v, do], [contiguous(st)], out, q, k, v.shape[3], scale,
                   causal, st.dtype, precision)


def _dkv_into(out, q, k, v, do, st, scale, causal, precision=None):
    if out.size == 0:
        return out
    if ABL.is_bf16(q):   # (no queries: the partials are zero)
        h = k.shape[3]
        ABL.dkv(q, k, v, do, contiguous(st), scale, causal,
                out.view(k.shape, out.strides, out.offset),
                out.view(v.shape, out.strides, out.offset + h))
        return out
    if q.shape[1] == 0 or q.shape[0] == 0:
        return fill(out, 0)
    return _launch("dkv", [q, k, v, do], [contiguous(st)], out, q, k, v.shape[3], scale,
                   causal, st.dtype, precision)


def dq(q, k, v, do, st, scale, causal, aval, precision=None):
    return _dq_into(pool().empty(aval.shape, aval.dtype), q, k, v, do, st, scale, causal,
                    precision)


def dkv(q, k, v, do, st, scale, causal, aval, precision=None):
    return _dkv_into(pool().empty(aval.shape, aval.dtype), q, k, v, do, st, scale, causal,
                     precision)


def _c_view(out, shape, offset):
    """The C-contiguous view of `shape` at element `offset` of out's block."""
    strides, m = [], 1
    for x in reversed(shape):
        strides.append(m)
        m *= x
    return out.view(tuple(shape), tuple(reversed(strides)), offset)


def partial_rows(t, s, br, bc, causal):
    """(key tiles, rows of dQ partials over all of them): key tile j writes the query rows from
    the first query tile it streams, ((j * br) // bc) * bc when causal, 0 otherwise."""
    tiles = -(-s // br)
    if not causal:
        return tiles, tiles * t
    return tiles, sum(max(0, t - (j * br // bc) * bc) for j in range(tiles))


def _bwd_views(out, q, k, v, packed):
    """(dq [B, T, N, H], dk [B, S, K, H], dv [B, S, K, Hv]) views of attention_bwd's result:
    dq then attention_dkv's [B, S, K, H + Hv], or packed rows [B, T, N + 2K, H]."""
    b, t, n, h = q.shape
    s, kh, hv = k.shape[1], k.shape[2], v.shape[3]
    o = out.offset
    if packed:
        rs = (n + 2 * kh) * h
        st = (t * rs, rs, h, 1)
        return (out.view((b, t, n, h), st, o), out.view((b, s, kh, h), st, o + n * h),
                out.view((b, s, kh, hv), st, o + (n + kh) * h))
    dkv = _c_view(out, (b, s, kh, h + hv), o + b * t * n * h)
    return (_c_view(out, (b, t, n, h), o), dkv.view((b, s, kh, h), dkv.strides, dkv.offset),
            dkv.view((b, s, kh, hv), dkv.strides, dkv.offset + h))


def bwd(q, k, v, do, st, scale, causal, aval, precision=None, packed=False):
    """attention_bwd: dq (C order) then dk | dv in one flat buffer, or (packed) the rows
    [B, T, N + 2K, H] of dq, dk and dv heads.

    The merged SIMT kernel (one block per key tile computes S, P, dP and dS once: dK and dV in
    registers, its dQ partial dS K per query tile into a [key tile, B, rows, N, H] buffer, rows
    from the tile's first streamed query row: about (T / BR + 1) / 2 dq-sized slices when
    causal) and a kernel that sums the partials in key-tile order, so dq is bit-reproducible
    without atomics; both store through the layout's row and head strides. It beat dq + dkv at
    every shape class measured (H200, 2026-11-24, bench_attention_simt.py --compare, GPU us):
    W2 (B16 N6 T256 H64 causal) 159 vs 222, non-causal 258 vs 354, T1024 521 vs 767, T2048 863
    vs 1206, T64 66 vs 91, H128 271 vs 412, H32 164 vs 220, 8 query heads on 2 key heads 329
    vs 364, B1 N2 T128 38 vs 55; so the two kernels run here only for TF32 (the tensor-core dq
    and dkv), configurations with BR != BC and empty operands (packed: into C-contiguous
    temporaries, then copied into the layout's views).
    """
    out = pool().empty(aval.shape, aval.dtype)
    b, t, n, h = q.shape
    s, kh, hv = k.shape[1], k.shape[2], v.shape[3]
    n_q = b * t * n * h
    dqv, dkv_, dvv = _bwd_views(out, q, k, v, packed)
    if ABL.is_bf16(q):   # the tensor-core dq and dkv, storing into the layout's views
        _dq_into(dqv, q, k, v, do, st, scale, causal)
        if dkv_.size + dvv.size:
            ABL.dkv(q, k, v, do, contiguous(st), scale, causal, dkv_, dvv)
        return out
    d, cfg = _simt_config("bwd", q, h, hv)
    if (n_q == 0 or b * s * kh * (h + hv) == 0 or cfg[0] != cfg[1]
            or _tc_config("dq", q, h, hv, precision) is not None):
        if not packed:
            _dq_into(dqv, q, k, v, do, st, scale, causal, precision)
            _dkv_into(_c_view(out, (b, s, kh, h + hv), out.offset + n_q), q, k, v, do, st,
                      scale, causal, precision)
            return out
        dqc = _dq_into(pool().empty(q.shape, q.dtype), q, k, v, do, st, scale, causal,
                       precision)
        dkvc = _dkv_into(pool().empty((b, s, kh, h + hv), q.dtype), q, k, v, do, st, scale,
                         causal, precision)
        for src, dst, lo in ((dqc, dqv, None), (dkvc, dkv_, 0), (dkvc, dvv, h)):
            if lo is not None:
                src = src.view(dst.shape, src.strides, src.offset + lo)
            run("copy", [src], q.dtype, out=dst)
        return out
    br, bc = cfg[0], cfg[1]
    tiles, rows = partial_rows(t, s, br, bc, causal)
    part = pool().empty((b * rows * n * h,), np.dtype(compute_t(q.dtype)))
    _launch("bwd", [q, k, v, do], [contiguous(st), part], dkv_, q, k, hv, scale, causal,
            st.dtype, dkv_to=(dvv.offset, dkv_.strides[1], dkv_.strides[2]))
    threads, e = AS.dqsum_shape(n * h, runtime.SIM)
    kern = runtime.kernel(("attention2", "dqsum", q.dtype.name, br, bc, threads, e),
                          lambda: AS.source("dqsum", q.dtype, st.dtype, d, cfg, runtime.SIM,
                                            runtime.jit_opts(), n * h))
    kern[(b * t, 1, 1), threads, runtime.stream()](part.arr(), part.offset, dqv.arr(),
                                                    dqv.offset, dqv.strides[1], t, n, h,
                                                    tiles, int(bool(causal)), float(scale))
    return out


def fwdl(q, k, v, scale, causal, aval, precision=None):
    """attention_fwdl: o (C order) then the rows' logsumexp, in one flat buffer."""
    out = pool().empty(aval.shape, aval.dtype)
    b, t, n, _ = q.shape
    hv = v.shape[3]
    n_o = b * t * n * hv
    o = out.view((b, t, n, hv), (t * n * hv, n * hv, hv, 1), out.offset)
    lse = out.view((b * n * t,), (1,), out.offset + n_o)
    if out.size == 0:
        return out
    if k.shape[1] == 0:   # no keys: zero rows, logsumexp -inf
        if o.size:
            fill(o, 0)
        fill(lse, -np.inf)
        return out
    if n_o == 0:
        return out
    _launch("fwdl", [q, k, v], [lse], o, q, k, hv, scale, causal, aval.dtype, precision)
    return out


def delta(o, do, lse, aval):
    """attention_delta: (lse, sum(o * do) over Hv) per row, from the forward's logsumexp."""
    out = pool().empty(aval.shape, aval.dtype)
    if out.size == 0:
        return out
    if o.shape[3] == 0:   # no value dims: delta is 0
        host = np.zeros(aval.shape, aval.dtype)
        host[..., 0] = to_host(contiguous(lse))
        return from_host(host)
    return _launch("delta", [o, do], [contiguous(lse)], out, o, o, o.shape[3], 1.0, False,
                   aval.dtype)


def _lowerings():
    from funcgrad.prims import attention as A
    from funcgrad.prims import attention_bwd as AB
    from funcgrad.prims import attention_lse as AL

    def prm(params):
        return params["scale"], params["causal"]

    def tc(f):   # the kernels that have a TF32 tensor-core form take the precision param
        return lambda bufs, params, aval: f(*bufs, *prm(params), aval,
                                            params.get("precision"))
    return {
        A.attention_p: tc(attention),
        A.attention_stats_p: lambda bufs, params, aval: stats(*bufs, *prm(params), aval),
        A.attention_dq_p: tc(dq),
        A.attention_dkv_p: tc(dkv),
        AB.attention_bwd_p: lambda bufs, params, aval: bwd(
            *bufs, *prm(params), aval, params.get("precision"), params.get("packed", False)),
        AL.attention_fwdl_p: tc(fwdl),
        AL.attention_delta_p: lambda bufs, params, aval: delta(*bufs, aval),
    }


LOWERINGS = _lowerings()
ABL.HOOKS.update(opt_in=_opt_in, smem_limit=smem_limit, dkv_split=_dkv_split)
