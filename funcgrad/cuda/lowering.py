"""The lowering table: CUDA[prim] = fn(bufs, params, aval) -> DeviceBuffer, for every primitive.

Elementwise primitives come from the scalar-op table in elementwise.py; layout primitives
(broadcast_in_dim, transpose, slice, rev, contiguous reshape) are views that launch nothing;
the rest call the reduction, matmul and gather modules. A primitive without an entry here fails
the completeness test in tests/test_cuda_backend.py.
"""
from __future__ import annotations

import numpy as np

from funcgrad.prims import rows as FP
from funcgrad import prims as P
from funcgrad.core import PRIMITIVES, FuncgradError, user_frame_src
from funcgrad.cuda import elementwise as ew
from funcgrad.cuda import concat, fused, gather, matmul, reduce
from funcgrad.cuda.arrays import DeviceBuffer, c_strides, from_host, pool

CUDA: dict = {}


def _host_fallback(prim, bufs, params):
    """Run the numpy impl on empty operands (zero-size reductions: results or numpy's errors)."""
    try:
        with np.errstate(all="ignore"):
            res = prim.impl(*[np.empty(b.shape, b.dtype) for b in bufs], **params)
    except ValueError as e:
        raise FuncgradError(f"{e}\n  at {user_frame_src()}") from None
    return from_host(np.asarray(res))


# elementwise ----------------------------------------------------------------------------------

def _elementwise(name):
    def lower(bufs, params, aval):
        return ew.run(name, bufs, aval.dtype, params)
    return lower


for _name, _prim in PRIMITIVES.items():
    if _prim.kind == "elementwise" and _name in ew.OPS:
        CUDA[_prim] = _elementwise(_name)

CUDA[P.stop_gradient_p] = lambda bufs, params, aval: bufs[0]


def _convert(bufs, params, aval):
    x = bufs[0]
    if x.dtype == aval.dtype:
        return x
    return ew.run("convert_element_type", [x], aval.dtype)


CUDA[P.convert_element_type_p] = _convert


# layout: views -------------------------------------------------------------------------------

def _broadcast_in_dim(bufs, params, aval):
    x = bufs[0]
    shape, bd = params["shape"], params["broadcast_dimensions"]
    strides = [0] * len(shape)
    for i, d in enumerate(bd):
        if x.shape[i] == shape[d] and shape[d] != 1:
            strides[d] = x.strides[i]
    return x.view(shape, strides, x.offset)


def _reshape(bufs, params, aval):
    x = ew.contiguous(bufs[0])
    return x.view(aval.shape, c_strides(aval.shape), x.offset)


def _transpose(bufs, params, aval):
    x, perm = bufs[0], params["permutation"]
    return x.view([x.shape[p] for p in perm], [x.strides[p] for p in perm], x.offset)


def _slice(bufs, params, aval):
    x = bufs[0]
    off = x.offset + sum(s * st for s, st in zip(params["start_indices"], x.strides))
    strides = [st * k for st, k in zip(x.strides, params["strides"])]
    return x.view(aval.shape, strides, off)


def _rev(bufs, params, aval):
    x = bufs[0]
    strides, off = list(x.strides), x.offset
    for d in params["dimensions"]:
        if x.shape[d] > 0:
            off += (x.shape[d] - 1) * strides[d]
        strides[d] = -strides[d]
    return x.view(x.shape, strides, off)


CUDA[P.broadcast_in_dim_p] = _broadcast_in_dim
CUDA[P.reshape_p] = _reshape
CUDA[P.transpose_p] = _transpose
CUDA[P.slice_p] = _slice
CUDA[P.rev_p] = _rev


# layout: kernels -----------------------------------------------------------------------------

def _pad(bufs, params, aval):
    x, cfg = bufs[0], params["padding_config"]
    out = ew.fill(pool().empty(aval.shape, aval.dtype), params["value"])
    if x.size:
        off = sum(lo * st for (lo, _, _), st in zip(cfg, out.strides))
        strides = [st * (it + 1) for (_, _, it), st in zip(cfg, out.strides)]
        ew.run("copy", [x], x.dtype, out=out.view(x.shape, strides, off))
    return out


def _concatenate(bufs, params, aval):
    dim = params["dimension"]
    one = concat.concatenate(bufs, dim, aval)    # one launch when every piece is 3-D viewable
    if one is not None:
        return one
    out = pool().empty(aval.shape, aval.dtype)
    start = 0
    for x in bufs:
        if x.size:
            ew.run("copy", [x], x.dtype,
                   out=out.view(x.shape, out.strides, start * out.strides[dim]))
        start += x.shape[dim]
    return out


def _iota(bufs, params, aval):
    shape, dim = aval.shape, params["dimension"]
    line = ew.run("iota", [], aval.dtype, shape=(shape[dim],))
    strides = [0] * len(shape)
    strides[dim] = 1
    return line.view(shape, strides, line.offset)


CUDA[P.pad_p] = _pad
CUDA[P.concatenate_p] = _concatenate
CUDA[P.iota_p] = _iota


# reductions ----------------------------------------------------------------------------------

def _reduction(prim, kind):
    def lower(bufs, params, aval):
        x = bufs[0]
        if x.size == 0:
            return _host_fallback(prim, bufs, params)
        return reduce.reduce(kind, x, params["axes"], aval.dtype)
    return lower


def _arg_reduction(prim, kind):
    def lower(bufs, params, aval):
        x = bufs[0]
        if x.size == 0:
            return _host_fallback(prim, bufs, params)
        return reduce.arg_reduce(kind, x, params["axis"], aval.dtype)
    return lower


CUDA[P.reduce_sum_p] = _reduction(P.reduce_sum_p, "sum")
CUDA[P.reduce_prod_p] = _reduction(P.reduce_prod_p, "prod")
CUDA[P.reduce_max_p] = _reduction(P.reduce_max_p, "max")
CUDA[P.reduce_min_p] = _reduction(P.reduce_min_p, "min")
CUDA[P.argmax_p] = _arg_reduction(P.argmax_p, "argmax")
CUDA[P.argmin_p] = _arg_reduction(P.argmin_p, "argmin")


# gather / scatter / contraction --------------------------------------------------------------

CUDA[P.take_p] = lambda bufs, params, aval: gather.take(bufs[0], bufs[1], params["axis"], aval)
CUDA[P.scatter_add_p] = lambda bufs, params, aval: gather.scatter(*bufs, params["axis"], True)
CUDA[P.scatter_p] = lambda bufs, params, aval: gather.scatter(*bufs, params["axis"], False)


# dynamic slices: windows at device-side starts; an update written in place when planned so
from funcgrad.cuda import dynamic as _dynamic  # noqa: E402

CUDA.update(_dynamic.LOWERINGS)


def _dot_general(bufs, params, aval):
    x, y = bufs
    if x.size == 0 or y.size == 0:
        return ew.fill(pool().empty(aval.shape, aval.dtype), 0)
    return matmul.dot_general(x, y, params["dimension_numbers"], aval, params.get("precision"))


CUDA[P.dot_general_p] = _dot_general


# fused last-axis primitives (funcgrad/prims/rows.py): one block per row -------------------------

CUDA[FP.softmax_p] = lambda bufs, params, aval: fused.softmax(bufs[0])
CUDA[FP.log_softmax_p] = lambda bufs, params, aval: fused.softmax(bufs[0], log=True)
CUDA[FP.softmax_xent_p] = lambda bufs, params, aval: fused.softmax_xent(*bufs)
CUDA[FP.layer_norm_p] = lambda bufs, params, aval: fused.layer_norm(*bufs, params["eps"])
CUDA[FP.rms_norm_p] = lambda bufs, params, aval: fused.rms_norm(*bufs, params["eps"])
# their backward primitives (funcgrad/prims/rows_bwd.py): one warp per row (funcgrad/cuda/rows.py)
from funcgrad.prims import rows_bwd as _FB  # noqa: E402
from funcgrad.cuda import rows as _rows  # noqa: E402

for _p in _FB.BWD_PRIMITIVES:
    CUDA[_p] = (lambda name: lambda bufs, params, aval: _rows.run(
        name, bufs, aval.shape, aval.dtype, params.get("eps")))(_p.name)


# sorting primitives (funcgrad/prims/sorting.py): argsort ---------------------------------------

from funcgrad.cuda import sorting as _sorting  # noqa: E402

CUDA.update(_sorting.LOWERINGS)


# fused flash attention (funcgrad/prims/attention.py) ------------------------------------------

from funcgrad.cuda import attention as _attention  # noqa: E402

CUDA.update(_attention.LOWERINGS)

from funcgrad.cuda import attention_saved as _attention_saved  # noqa: E402

CUDA.update(_attention_saved.LOWERINGS)   # attention_fwdl (all dtypes) and attention_bwdl


# convolutions and windows (funcgrad/prims/conv.py, funcgrad/prims/windows.py) ------------------

from funcgrad.cuda import conv as _conv  # noqa: E402

CUDA.update(_conv.LOWERINGS)


# linalg factorizations (funcgrad/prims/linalg.py, funcgrad/prims/linalg_spectral.py) --------------

from funcgrad.cuda import linalg as _linalg  # noqa: E402

CUDA.update(_linalg.LOWERINGS)


# loops and branches (funcgrad/prims/loops.py): bodies run through this table per iteration --------

from funcgrad.cuda import loops as _loops  # noqa: E402

_loops.register(CUDA)


# complex operands: only lowerings with complex kernels see them; the rest raise --

from funcgrad.cuda import complex_ops as _complex_ops  # noqa: E402

_complex_ops.register(CUDA)


# bfloat16 reaches the kernels that take it, the rest run widened; float8 only moves --

from funcgrad.cuda import half_ops as _half_ops  # noqa: E402

_half_ops.register(CUDA)


def lower(prim, bufs, params, aval) -> DeviceBuffer:
    fn = CUDA.get(prim)
    if fn is None:
        raise NotImplementedError(f"the CUDA backend has no lowering for primitive {prim.name!r}")
    return fn(bufs, params, aval)
