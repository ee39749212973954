"""CUDA lowerings of attention_fwdl and attention_bwdl (funcgrad/prims/attention_lse.py and
attention_bwd.py): the forward that keeps its logsumexp and the backward that reads it with the
forward's output.

float32 / float64: the numba kernels of attention.py (the forward writes its lse; the
statistics are attention_delta's read of o and do). float16 / bfloat16: cuDNN's fused SDPA
(cudnn_attn.py), the forward writing o and its float32 lse into the flat result (the lse as
pairs of 16-bit elements), the backward reading both; where cuDNN cannot (no frontend, a
geometry it refuses, an unaligned view) the tensor-core / SIMT kernels run instead: the
forward's lse from the statistics kernel, and the backward's statistics recomputed by it (the
saved lse is then not read).
"""
from __future__ import annotations

import numpy as np

from funcgrad.core import is_half
from funcgrad.cuda import attention as AT
from funcgrad.cuda import cudnn_attn
from funcgrad.cuda.arrays import DeviceBuffer, pool
from funcgrad.cuda.elementwise import fill, run

F32, U16 = np.dtype(np.float32), np.dtype(np.uint16)


def _saved_views(fl, q, v):
    """(o [B, T, N, Hv] C-contiguous, lse [B, N, T]) views of attention_fwdl's flat result:
    the lse in fl's dtype, or for 16-bit a float32 view of its bit pairs (None when the tail
    starts at an odd element)."""
    b, t, n, _ = q.shape
    hv = v.shape[3]
    n_o = b * t * n * hv
    o = AT._c_view(fl, (b, t, n, hv), fl.offset)
    at = fl.offset + n_o
    if not is_half(fl.dtype):
        return o, fl.view((b, n, t), (n * t, t, 1), at)
    lse = None if at % 2 else DeviceBuffer(fl.block, (b, n, t), (n * t, t, 1), at // 2, F32)
    return o, lse


def fwdl(q, k, v, scale, causal, aval, precision=None):
    """attention_fwdl: o (C order) then the rows' logsumexp (16-bit: its float32 bits)."""
    if not is_half(q.dtype):
        return AT.fwdl(q, k, v, scale, causal, aval, precision)
    out = pool().empty(aval.shape, aval.dtype)
    if out.size == 0:
        return out
    o, lse = _saved_views(out, q, v)
    if lse is not None and cudnn_attn.forward(q, k, v, o, scale, causal, lse):
        return out
    run("copy", [AT.attention(q, k, v, scale, causal, _Aval(o.shape, o.dtype), precision)],
        o.dtype, out=o)
    zeros = fill(pool().empty(o.shape, o.dtype), 0)   # the statistics kernel's lse column
    st = AT.stats(q, k, o, zeros, scale, causal, _Aval(_st_shape(q), F32))
    first = DeviceBuffer(st.block, st.shape[:3], st.strides[:3], st.offset, F32)
    flat = pool().empty(first.shape, F32)
    run("copy", [first], F32, out=flat)
    # the float32 lse's bits into the 16-bit tail, copied as uint16 (bit-exact)
    m = flat.size * 2
    src = DeviceBuffer(flat.block, (m,), (1,), flat.offset * 2, U16)
    dst = DeviceBuffer(out.block, (m,), (1,), out.offset + o.size, U16)
    run("copy", [src], U16, out=dst)
    return out


class _Aval:
    """The (shape, dtype) pair the attention.py lowerings read of an aval."""
    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)


def _st_shape(q):
    b, t, n, _ = q.shape
    return (b, n, t, 2)


def bwdl(q, k, v, do, fl, scale, causal, aval, precision=None, packed=False):
    """attention_bwdl: attention_bwd's flat result from attention_fwdl's o and lse."""
    if not is_half(q.dtype):
        o, lse = _saved_views(fl, q, v)
        st = AT.delta(o, do, lse, _Aval(_st_shape(q), q.dtype))
        return AT.bwd(q, k, v, do, st, scale, causal, aval, precision, packed)
    o, lse = _saved_views(fl, q, v)
    if lse is not None and q.size and k.size and v.size:
        out = pool().empty(aval.shape, aval.dtype)
        dq, dk, dv = AT._bwd_views(out, q, k, v, packed)
        if cudnn_attn.backward(q, k, v, o, do, lse, dq, dk, dv, scale, causal):
            return out
    st = AT.stats(q, k, o, do, scale, causal, _Aval(_st_shape(q), F32))
    return AT.bwd(q, k, v, do, st, scale, causal, aval, precision, packed)


def _lowerings():
    from funcgrad.prims import attention_bwd as AB
    from funcgrad.prims import attention_lse as AL
    return {
        AL.attention_fwdl_p: lambda bufs, params, aval: fwdl(
            *bufs, params["scale"], params["causal"], aval, params.get("precision")),
        AB.attention_bwdl_p: lambda bufs, params, aval: bwdl(
            *bufs, params["scale"], params["causal"], aval, params.get("precision"),
            params.get("packed", False)),
    }


LOWERINGS = _lowerings()
