"""Complex-number primitives: real, imag, conj and complex (all linear maps over R).

Transposes follow JAX's convention (the vjp is the transpose of the R-linear tangent map, never
a Hermitian adjoint): real^T t = t + 0i, imag^T t = -i t, conj^T t = conj t, complex^T t =
(re t, -im t). With these, grad of a real function of complex z is df/dx - i df/dy.
"""
from __future__ import annotations

import numpy as np

from funcgrad.core import ShapedArray, bind, defprim, real_dtype, type_error
from funcgrad.core.dtypes import dtype_kind
from funcgrad.prims import batch_elementwise, convert, full_like, mul, neg

_COMPLEX_OF = {np.dtype(np.float32): np.dtype(np.complex64),
               np.dtype(np.float64): np.dtype(np.complex128)}


def real(x): return bind(real_p, x)
def imag(x): return bind(imag_p, x)
def conj(x): return bind(conj_p, x)
def complex_(x, y): return bind(complex_p, x, y)


def _complex_part_shape(name):
    def rule(x):
        if dtype_kind(x.dtype) != "c":
            raise type_error(name, f"operand must be complex, got {x.dtype.name}", (x,))
        return ShapedArray(x.shape, real_dtype(x.dtype))
    return rule


def _conj_shape(x):
    if dtype_kind(x.dtype) not in "fc":
        raise type_error("conj", f"operand must be float or complex, got {x.dtype.name}", (x,))
    return ShapedArray(x.shape, x.dtype)


def _complex_shape(x, y):
    if x.shape != y.shape or x.dtype != y.dtype or x.dtype not in _COMPLEX_OF:
        raise type_error("complex", "operands must be float32 or float64 of equal shapes and "
                         "dtypes", (x, y))
    return ShapedArray(x.shape, _COMPLEX_OF[x.dtype])


def _complex_impl(x, y):
    """x + iy by parts (x + 1j * y would turn y = inf into nan + inf j and lose -0)."""
    out = np.empty(np.shape(x), _COMPLEX_OF[np.dtype(x.dtype)])
    out.real, out.imag = x, y
    return out


def _linear(prim, vjp):
    prim.jvp = lambda ts, xs, *, out, **p: (
        None if all(t is None for t in ts) else bind(
            prim, *[t if t is not None else full_like(x, 0) for t, x in zip(ts, xs)], **p))
    prim.vjp = vjp
    prim.batch = batch_elementwise(prim)
    return prim


def _i_times(t, sign):
    """(sign * i) t for a real t, as a complex array."""
    z = full_like(t, 0)
    return complex_(z, t if sign > 0 else neg(t))


# real(x + iy) = x; transpose: t -> t + 0i
real_p = _linear(defprim("real", _complex_part_shape("real"), np.real, kind="elementwise"),
                 lambda ct, x, *, out: (complex_(ct, full_like(ct, 0)),))
# imag(x + iy) = y; transpose: t -> -i t
imag_p = _linear(defprim("imag", _complex_part_shape("imag"), np.imag, kind="elementwise"),
                 lambda ct, x, *, out: (_i_times(ct, -1),))
# conj(x + iy) = x - iy; its own transpose
conj_p = _linear(defprim("conj", _conj_shape, np.conjugate, kind="elementwise"),
                 lambda ct, x, *, out: (conj(ct),))
# complex(x, y) = x + iy; transpose: t -> (re t, -im t)
complex_p = _linear(
    defprim("complex", _complex_shape, lambda x, y: _complex_impl(x, y), kind="elementwise"),
    lambda ct, x, y, *, out: (real(ct), neg(imag(ct))))


def as_complex(x):
    """x (float or complex) as the complex dtype holding it."""
    return x if dtype_kind(x.dtype) == "c" else convert(x, _COMPLEX_OF[np.dtype(x.dtype)])


def mul_i(x):
    """i x for a complex x."""
    return mul(x, full_like(x, 1j))


# fft(x; axis, inverse): the unnormalized DFT along `axis`, sum_j x_j exp(-+2 pi i jk / n).
# The DFT matrix is symmetric, so the transpose (vjp) is the same transform.
def _fft_shape(x, *, axis, inverse):
    if dtype_kind(x.dtype) != "c":
        raise type_error("fft", f"operand must be complex, got {x.dtype.name}", (x,))
    if not 0 <= axis < x.ndim:
        raise type_error("fft", f"axis {axis} is out of range for rank {x.ndim}", (x,))
    return ShapedArray(x.shape, x.dtype)


def _fft_impl(x, *, axis, inverse):
    if x.shape[axis] == 0:
        return x.copy()
    out = np.fft.ifft(x, axis=axis) * x.shape[axis] if inverse else np.fft.fft(x, axis=axis)
    return out.astype(x.dtype)


fft_p = defprim("fft", _fft_shape, _fft_impl)
fft_p.vjp = lambda ct, x, *, out, axis, inverse: (bind(fft_p, ct, axis=axis, inverse=inverse),)
fft_p.jvp = lambda ts, xs, *, out, axis, inverse: None if ts[0] is None else bind(
    fft_p, ts[0], axis=axis, inverse=inverse)
fft_p.batch = lambda args, dims, *, axis, inverse: (
    bind(fft_p, args[0], axis=axis + 1, inverse=inverse), 0)
