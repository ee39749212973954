"""Complex operands on the CUDA backend: which lowerings accept them, and complex reduce_sum.

Elementwise ops with complex rows in elementwise.OPS, layout views and gathers handle complex
buffers as they are; reduce_sum reduces the real and imaginary parts separately; dot_general
is four real products of the parts (cuBLAS when available); fft has no kernel yet and
round-trips through the host (numpy's FFT: correct, but a device sync and two
copies). Every other lowering raises NotImplementedError naming the primitive and dtype (never
a wrong result).
"""
from __future__ import annotations

import numpy as np

from funcgrad import prims as P
from funcgrad.backends import scalar_exprs as sx
from funcgrad.prims import complex as PC
from funcgrad.core import ShapedArray, real_dtype, user_frame_src
from funcgrad.cuda import elementwise as ew
from funcgrad.cuda import reduce
from funcgrad.cuda.arrays import from_host, to_host

_EW_COMPLEX = sx.COMPLEX
_LAYOUT = {"broadcast_in_dim", "reshape", "transpose", "slice", "rev", "pad", "concatenate",
           "take", "copy", "dynamic_slice", "dynamic_update_slice"}


def _complex_sum(bufs, params, aval):
    x = bufs[0]
    rd = real_dtype(x.dtype)
    parts = [reduce.reduce("sum", ew.run(name, [x], rd), params["axes"], rd)
             for name in ("real", "imag")]
    return ew.run("complex", parts, aval.dtype)


def _complex_dot(real_dot):
    """(a + ib)(c + id) = (ac - bd) + i(ad + bc): four real products of the parts."""
    def lower(bufs, params, aval):
        x, y = bufs
        rd = real_dtype(aval.dtype)
        # (dot_general's operands share its complex dtype)
        xr, xi, yr, yi = [ew.run(n, [b], rd) for b in (x, y) for n in ("real", "imag")]
        ra = ShapedArray(aval.shape, rd)

        def dot(a, b):
            return real_dot([a, b], params, ra)
        re = ew.run("sub", [dot(xr, yr), dot(xi, yi)], rd)
        im = ew.run("add", [dot(xr, yi), dot(xi, yr)], rd)
        return ew.run("complex", [re, im], aval.dtype)
    return lower


def _fft_via_host(bufs, params, aval):
    x = to_host(ew.contiguous(bufs[0]))
    return from_host(np.ascontiguousarray(PC.fft_p.impl(x, **params)))


def _guard(prim, fn):
    def lower(bufs, params, aval):
        if aval.dtype.kind == "c" or any(b.dtype.kind == "c" for b in bufs):
            dt = next(d for d in [aval.dtype] + [b.dtype for b in bufs] if d.kind == "c")
            raise NotImplementedError(
                f"the CUDA backend has no {np.dtype(dt).name} kernel for primitive "
                f"{prim.name!r} (run it on the CPU: funcgrad.device_put(x, 'cpu'))"
                f"\n  at {user_frame_src()}")
        return fn(bufs, params, aval)
    return lower


def register(table: dict) -> None:
    """Wrap table's lowerings: complex operands reach only the ones that handle them."""
    sum_lower = table[P.reduce_sum_p]

    def reduce_sum(bufs, params, aval):
        if aval.dtype.kind == "c" and bufs[0].size:
            return _complex_sum(bufs, params, aval)
        return sum_lower(bufs, params, aval)
    table[P.reduce_sum_p] = reduce_sum
    table[PC.fft_p] = _fft_via_host
    real_dot = table[P.dot_general_p]
    complex_dot = _complex_dot(real_dot)

    def dot_general(bufs, params, aval):
        if aval.dtype.kind == "c":
            return complex_dot(bufs, params, aval)
        return real_dot(bufs, params, aval)
    table[P.dot_general_p] = dot_general
    for prim, fn in list(table.items()):
        if prim.name not in _EW_COMPLEX | _LAYOUT | {"reduce_sum", "fft", "dot_general"}:
            table[prim] = _guard(prim, fn)
    assert all(p in table for p in (PC.real_p, PC.imag_p, PC.conj_p, PC.complex_p))
