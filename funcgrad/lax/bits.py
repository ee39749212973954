"""lax's bit-level ops as compositions: bitcast_convert_type, clz, reduce_precision."""
from __future__ import annotations

import numpy as np

from funcgrad import numpy as fnp
from funcgrad.core.dtypes import bfloat16, compute_dtype, dtype_kind, finfo
from funcgrad.transforms.custom import custom_jvp

_INT = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}
_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
_FLOAT = (np.dtype(np.float16), bfloat16, np.dtype(np.float32), np.dtype(np.float64))


def _exponent(ax, work):
    """floor(log2(ax)) exactly for finite ax > 0 (log2 corrected by one step each way)."""
    e = fnp.floor(fnp.log2(ax))
    e = fnp.where(fnp.power(work(2.0), e) > ax, e - 1.0, e)
    return fnp.where(fnp.power(work(2.0), e + 1.0) <= ax, e + 1.0, e)


def _format(dt):
    """(bit width, mantissa bits, exponent bias, working float type, signed integer type)
    of float dtype dt (float16 and bfloat16 are worked in float32 and int32)."""
    fi = finfo(dt)
    width = dt.itemsize * 8
    work = compute_dtype(dt).type
    return (width, int(fi.nmant), int(fi.maxexp) - 1, work,
            np.dtype(_INT[64] if width == 64 else _INT[32]))


def _float_to_bits(x):
    """The IEEE bits of float x as a signed integer of the same width (NaN: the quiet NaN)."""
    dt = x.dtype
    width, nmant, bias, work, itype = _format(dt)
    xw = fnp.asarray(x, work)
    ax = fnp.abs(xw)
    finite_nz = fnp.logical_and(fnp.isfinite(xw), ax > 0)
    s = fnp.where(finite_nz, ax, work(1.0))
    e = fnp.maximum(_exponent(s, work), float(1 - bias))           # subnormals: e = emin
    normal = s >= fnp.power(work(2.0), float(1 - bias))
    mant = s * fnp.power(work(2.0), -e) * work(2.0 ** nmant)       # exact power-of-2 scales
    mant = fnp.where(normal, mant - work(2.0 ** nmant), mant)
    biased = fnp.where(normal, e + float(bias), 0.0)
    top = 2 ** (width - 1 - nmant) - 1                              # all-ones exponent field
    mant = fnp.where(fnp.isnan(xw), work(2.0 ** (nmant - 1)), fnp.where(finite_nz, mant, 0.0))
    biased = fnp.where(fnp.isfinite(xw), fnp.where(finite_nz, biased, 0.0), float(top))
    low = fnp.asarray(biased, itype) * (2 ** nmant) + fnp.asarray(mant, itype)
    neg = fnp.logical_and(fnp.signbit(xw), ~fnp.isnan(xw))
    if width < itype.itemsize * 8:
        return fnp.asarray(fnp.where(neg, low - 2 ** (width - 1), low), _INT[width])
    return fnp.where(neg, low + np.iinfo(itype).min, low)


def _bits_to_float(i, dt):
    """The float of dtype dt whose IEEE bits are the signed integer i (same width)."""
    width, nmant, bias, work, itype = _format(dt)
    i = fnp.asarray(i, itype)
    neg = i < 0
    low = fnp.bitwise_and(i, itype.type(2 ** (width - 1) - 1))    # the bits below the sign
    biased = fnp.right_shift(low, itype.type(nmant))
    mant = fnp.asarray(fnp.bitwise_and(low, itype.type(2 ** nmant - 1)), work)
    top = 2 ** (width - 1 - nmant) - 1
    scale = fnp.power(work(2.0), fnp.asarray(fnp.maximum(biased, 1) - (bias + nmant), work))
    mag = fnp.where(biased == 0, mant, mant + work(2.0 ** nmant)) * scale
    mag = fnp.where(biased == top, fnp.where(mant == 0, work(np.inf), work(np.nan)), mag)
    return fnp.asarray(fnp.where(neg, -mag, mag), dt)


def _to_signed(x):
    """x's bits as a signed integer of its width."""
    if dtype_kind(x.dtype) == "f":
        return _float_to_bits(x)
    return x if dtype_kind(x.dtype) == "i" else fnp.asarray(x, _INT[x.dtype.itemsize * 8])


def _from_signed(i, dt):
    if dtype_kind(dt) == "f":
        return _bits_to_float(i, dt)
    return fnp.asarray(i, dt)


def bitcast_convert_type(operand, new_dtype):
    """Reinterpret the bits of `operand` as `new_dtype` (lax.bitcast_convert_type).

    Same widths keep the shape; a wider source gains a trailing axis of width ratio, a narrower
    one loses its trailing axis, which must equal the ratio (little-endian order, as JAX on
    x86/GPU). Dtypes: bool is not allowed; int/uint 8-64 and float16/32/64. A composition of
    arithmetic and shifts (funcgrad has no bitcast primitive), so it jits, vmaps and runs on
    CUDA; a NaN becomes the canonical quiet NaN (its sign and payload are not kept). Integer
    results have no gradient, as in JAX.

    Example:
        >>> import numpy as np
        >>> from funcgrad import lax
        >>> int(lax.bitcast_convert_type(np.float32(1.0), np.int32))
        1065353216
        >>> lax.bitcast_convert_type(np.float32(1.0), np.uint8).tolist()
        [0, 0, 128, 63]
    """
    x = fnp.asarray(operand)
    src, dst = x.dtype, np.dtype(new_dtype)
    for d in (src, dst):
        if dtype_kind(d) not in "iuf" or (dtype_kind(d) == "f" and d not in _FLOAT):
            raise TypeError(f"bitcast_convert_type: dtype {d.name} is not supported (int/uint "
                            f"8-64, float16/32/64 and bfloat16 are)")
    if src == dst:
        return x
    ws, wd = src.itemsize * 8, dst.itemsize * 8
    if ws == wd:
        return _from_signed(_to_signed(x), dst)
    if ws > wd:
        u = fnp.asarray(_to_signed(x), _UINT[ws])
        mask = _UINT[ws](2 ** wd - 1)
        parts = [fnp.bitwise_and(fnp.right_shift(u, _UINT[ws](k * wd)), mask)
                 for k in range(ws // wd)]
        return _from_signed(fnp.asarray(fnp.stack(parts, axis=-1), _INT[wd]), dst)
    ratio = wd // ws
    if x.ndim == 0 or x.shape[-1] != ratio:
        raise ValueError(f"bitcast_convert_type: {src.name} {tuple(x.shape)} -> {dst.name} needs "
                         f"a last axis of size {ratio}")
    u = fnp.asarray(fnp.asarray(_to_signed(x), _UINT[ws]), _UINT[wd])
    out = u[..., 0]
    for k in range(1, ratio):
        out = fnp.bitwise_or(out, fnp.left_shift(u[..., k], _UINT[wd](k * ws)))
    return _from_signed(fnp.asarray(out, _INT[wd]), dst)


def clz(x):
    """The number of leading zero bits of each integer (lax.clz); no gradient.

    Example:
        >>> import numpy as np
        >>> from funcgrad import lax
        >>> lax.clz(np.array([0, 1, 255, -1], np.int32)).tolist()
        [32, 31, 24, 0]
    """
    x = fnp.asarray(x)
    if dtype_kind(x.dtype) not in "iu":
        raise TypeError(f"clz: an integer operand is required, got {x.dtype.name}")
    width = x.dtype.itemsize * 8
    ut = _UINT[width]
    u = fnp.asarray(x, ut)
    n = fnp.zeros(x.shape, x.dtype)
    shift = width // 2
    while shift:                      # binary search for the highest set bit
        top = fnp.right_shift(u, ut(width - shift))
        empty = top == 0
        n = fnp.where(empty, n + shift, n)
        u = fnp.where(empty, fnp.left_shift(u, ut(shift)), u)
        shift //= 2
    return fnp.where(fnp.asarray(x, ut) == 0, x.dtype.type(width), n)


def _reduce_precision(x, exponent_bits, mantissa_bits):
    dt = x.dtype
    fi = finfo(dt)
    work = compute_dtype(dt).type
    xw = fnp.asarray(x, work)
    ax = fnp.abs(xw)
    out = xw
    if mantissa_bits < fi.nmant:      # round half to even at the kept mantissa bits
        ok = fnp.logical_and(fnp.isfinite(xw), ax > 0)
        s = fnp.where(ok, ax, work(1.0))
        e = fnp.maximum(_exponent(s, work), float(fi.minexp))
        q = fnp.power(work(2.0), e - float(mantissa_bits))
        out = fnp.where(ok, fnp.round(xw / q) * q, xw)
    src_ebits = int(np.log2(int(fi.maxexp))) + 1
    if exponent_bits < src_ebits:     # out of the reduced range: inf or (signed) zero
        emax = 2 ** (exponent_bits - 1) - 1
        ao = fnp.abs(out)
        out = fnp.where(fnp.logical_and(fnp.isfinite(out), ao >= work(2.0 ** (emax + 1))),
                        fnp.where(out < 0, work(-np.inf), work(np.inf)), out)
        out = fnp.where(ao < work(2.0 ** (1 - emax)), xw * work(0.0), out)
    return fnp.asarray(out, dt)


def reduce_precision(operand, exponent_bits, mantissa_bits):
    """Round floats to `mantissa_bits` (half to even) and clamp them to the range of
    `exponent_bits` (overflow to inf, below the smallest normal to zero), as XLA's
    ReducePrecision: `reduce_precision(x, 8, 7)` rounds to bfloat16's values. Its derivative is
    reduce_precision of the tangent (JAX's rule).

    Example:
        >>> import numpy as np
        >>> from funcgrad import lax
        >>> lax.reduce_precision(np.float32([1 + 2 ** -9, 65520.0]), 5, 10).tolist()
        [1.001953125, inf]
    """
    x = fnp.asarray(operand)
    if x.dtype not in _FLOAT:
        raise TypeError(f"reduce_precision: a float16/32/64 or bfloat16 operand is required, got "
                        f"{x.dtype.name}")
    eb, mb = int(exponent_bits), int(mantissa_bits)
    if eb < 1 or mb < 0:
        raise ValueError(f"reduce_precision: exponent_bits >= 1 and mantissa_bits >= 0 "
                         f"required, got {eb} and {mb}")

    @custom_jvp
    def f(x):
        return _reduce_precision(x, eb, mb)

    @f.defjvp
    def _jvp(primals, tangents):
        return f(primals[0]), _reduce_precision(tangents[0], eb, mb)

    return f(x)
