"""Elementwise math of funcgrad.numpy beyond the primitives: inverse trigonometric and
hyperbolic functions, hypot, cbrt, comparisons with tolerance, nan_to_num, and friends.

All are compositions of primitives (so grad, vmap, jit and CUDA come with them). arctan has no
primitive: it reduces |x| > 1 through 1/x and halves the angle twice (|t| <= 0.2), then sums an
odd Taylor series to float64 accuracy; arctan2, arcsin and arccos build on it. Branches that
are not taken are fed safe operands, so their gradients never produce NaNs.
"""
from __future__ import annotations

import math

import numpy as np

from funcgrad import prims as P
from funcgrad.prims import complex as PC
from funcgrad.core import is_float, is_int
from funcgrad.core.dtypes import dtype_kind, finfo
from funcgrad.numpy._base import asarray, promote_args, result_type
from funcgrad.numpy._ufuncs import (
    _float_dtype,
    abs,
    all,
    equal,
    exp,
    expm1,
    floor,
    isfinite,
    isinf,
    isnan,
    less,
    log,
    log1p,
    logical_and,
    logical_not,
    logical_or,
    maximum,
    minimum,
    sign,
    sqrt,
    where,
)

# ---------------------------------------------------------------------------------------------
# arctan and the functions built on it
# ---------------------------------------------------------------------------------------------

_ATAN_TERMS = 12  # |t| <= tan(pi/16) ~ 0.199: t^25/25 < 1e-19


def _promote(name, *args, dtype=None):
    """promote_args, as funcgrad arrays (never numpy arrays)."""
    return [asarray(v) for v in promote_args(name, *args, dtype=dtype)]


def _fl(x):
    x = asarray(x)
    return asarray(x, _float_dtype(x))


def _atan_unit(t):
    """arctan(t) for |t| <= 1: two half-angle steps, then the odd Taylor series."""
    for _ in range(2):
        t = t / (1.0 + sqrt(1.0 + t * t))
    t2 = t * t
    acc = P.full_like(t, (-1.0) ** (_ATAN_TERMS - 1) / (2 * _ATAN_TERMS - 1))
    for k in range(_ATAN_TERMS - 2, -1, -1):
        acc = acc * t2 + (-1.0) ** k / (2 * k + 1)
    return 4.0 * (t * acc)


def arctan(x):
    """Elementwise inverse tangent (radians).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> round(float(fnp.arctan(1.0)), 6)
        0.785398
    """
    x = _fl(x)
    big = abs(x) > 1.0
    safe = where(big, x, 1.0)
    inner = _atan_unit(where(big, 1.0 / safe, x))
    return where(big, sign(x) * (math.pi / 2) - inner, inner)


def signbit(x):
    """True where the sign bit is set (negative numbers and -0.0)."""
    x = asarray(x)
    if not is_float(x.dtype):
        return less(x, 0)
    neg_zero = logical_and(equal(x, 0), less(1.0 / where(equal(x, 0), x, 1.0), 0))
    return logical_or(less(x, 0), neg_zero)


def copysign(x1, x2):
    """|x1| with the sign of x2 (float result)."""
    a, b = _promote("copysign", x1, x2, dtype=_float_dtype(x1, x2))
    return where(signbit(b), -abs(a), abs(a))


def arctan2(x1, x2):
    """Elementwise arctan(x1 / x2) in the correct quadrant (numpy's signed-zero cases).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> round(float(fnp.arctan2(1.0, -1.0)), 6)
        2.356194
    """
    y, x = _promote("arctan2", x1, x2, dtype=_float_dtype(x1, x2))
    ay, ax = where(signbit(y), -y, y), where(signbit(x), -x, x)   # |.|, with d|v|/dv = 1 at +0
    swap = ay > ax
    num, den = where(swap, ax, ay), where(swap, ay, ax)
    both_inf = logical_and(isinf(num), isinf(den))
    ok = logical_and(den != 0, logical_not(both_inf))
    r = where(ok, num / where(ok, den, 1.0), where(both_inf, 1.0, 0.0))
    r = where(logical_or(isnan(num), isnan(den)), num + den, r)
    a = _atan_unit(r)
    a = where(swap, math.pi / 2 - a, a)
    a = where(signbit(x), math.pi - a, a)
    return where(signbit(y), -a, a)


def arcsin(x):
    x = _fl(x)
    return arctan2(x, sqrt((1.0 - x) * (1.0 + x)))


def arccos(x):
    x = _fl(x)
    return arctan2(sqrt((1.0 - x) * (1.0 + x)), x)


def sinh(x):
    x = _fl(x)
    return (expm1(x) - expm1(-x)) * 0.5


def cosh(x):
    x = _fl(x)
    return (exp(x) + exp(-x)) * 0.5


def _huge(x):
    return math.sqrt(finfo(x.dtype).max) / 4


def arcsinh(x):
    x = _fl(x)
    ax = abs(x)
    big = ax > _huge(x)
    s = where(big, 1.0, ax)
    small = log1p(s + s * s / (1.0 + sqrt(1.0 + s * s)))
    out = sign(x) * where(big, log(where(big, ax, 1.0)) + math.log(2.0), small)
    return where(equal(x, 0), x, out)   # asinh(+-0) = +-0 (and asinh'(0) = 1 either way)


def arccosh(x):
    x = _fl(x)
    big = x > _huge(x)
    s = where(big, 2.0, x)
    small = log1p((s - 1.0) + sqrt((s - 1.0) * (s + 1.0)))
    out = where(big, log(where(big, x, 1.0)) + math.log(2.0), small)
    return where(x < 1.0, np.nan, out)


def arctanh(x):
    x = _fl(x)
    return 0.5 * log1p(2.0 * x / (1.0 - x))


asin, acos, atan, atan2 = arcsin, arccos, arctan, arctan2
asinh, acosh, atanh = arcsinh, arccosh, arctanh


def hypot(x1, x2):
    """sqrt(x1**2 + x2**2) without overflow or underflow."""
    a, b = _promote("hypot", x1, x2, dtype=_float_dtype(x1, x2))
    a, b = abs(a), abs(b)
    hi, lo = maximum(a, b), minimum(a, b)
    zero = equal(hi, 0)
    q = lo / where(zero, 1.0, hi)
    out = where(zero, 0.0, hi * sqrt(1.0 + q * q))
    return where(logical_or(isinf(a), isinf(b)), np.inf, out)


def cbrt(x):
    x = _fl(x)
    ax = abs(x)
    pos = ax > 0
    r = exp(log(where(pos, ax, 1.0)) * (1.0 / 3.0))
    return where(pos, sign(x) * r, x)


def deg2rad(x):
    return _fl(x) * (math.pi / 180.0)


def rad2deg(x):
    return _fl(x) * (180.0 / math.pi)


radians, degrees = deg2rad, rad2deg


def sinc(x):
    """sin(pi x) / (pi x), 1 at 0 (smooth there: its Taylor series near 0)."""
    from funcgrad.numpy._ufuncs import sin
    x = _fl(x)
    small = abs(x) < 1e-3
    px = math.pi * where(small, 1.0, x)
    near = 1.0 - (math.pi * x) ** 2 / 6.0 + (math.pi * x) ** 4 / 120.0
    return where(small, near, sin(px) / px)


def heaviside(x1, x2):
    a, b = _promote("heaviside", x1, x2, dtype=_float_dtype(x1, x2))
    return where(less(a, 0), 0.0, where(equal(a, 0), b, 1.0)).astype(a.dtype)


def fmax(x1, x2):
    """Elementwise maximum ignoring NaNs (a NaN loses unless both are NaN)."""
    a, b = _promote("fmax", x1, x2)
    if not is_float(a.dtype):
        return maximum(a, b)
    return where(isnan(a), b, where(isnan(b), a, maximum(a, b)))


def fmin(x1, x2):
    a, b = _promote("fmin", x1, x2)
    if not is_float(a.dtype):
        return minimum(a, b)
    return where(isnan(a), b, where(isnan(b), a, minimum(a, b)))


def float_power(x1, x2):
    from funcgrad.numpy._ufuncs import power
    dt = result_type(x1, x2, 1.0)
    dt = np.dtype(np.float64) if dt == np.float64 else dt
    return power(asarray(x1, dt), asarray(x2, dt))


def logaddexp2(x1, x2):
    from funcgrad.numpy._ufuncs import logaddexp
    ln2 = math.log(2.0)
    a, b = _promote("logaddexp2", x1, x2, dtype=_float_dtype(x1, x2))
    return logaddexp(a * ln2, b * ln2) / ln2


def positive(x):
    return asarray(x)


def fabs(x):
    return abs(_fl(x))


def rint(x):
    from funcgrad.numpy._ufuncs import round
    x = asarray(x)
    return round(x) if is_float(x.dtype) else asarray(x, np.float32)


def fix(x):
    from funcgrad.numpy._ufuncs import trunc
    return trunc(x)


def modf(x):
    """(fractional part, integral part), both with x's sign."""
    from funcgrad.numpy._ufuncs import trunc
    x = _fl(x)
    i = trunc(x)
    return x - i, i


def divmod(x1, x2):  # noqa: A001 - numpy's name
    from funcgrad.numpy._ufuncs import floor_divide, remainder
    return floor_divide(x1, x2), remainder(x1, x2)


def ldexp(x1, x2):
    from funcgrad.numpy._ufuncs import exp2
    x = _fl(x1)
    return x * exp2(asarray(x2, x.dtype))


def frexp(x):
    """(mantissa in [0.5, 1), int32 exponent) with x = mantissa * 2**exponent."""
    from funcgrad.numpy._ufuncs import log2
    x = _fl(x)
    ax = abs(x)
    ok = logical_and(ax > 0, isfinite(x))
    e = floor(log2(where(ok, ax, 1.0))) + 1.0
    m = x / where(ok, 2.0 ** e, 1.0)
    # log2 may round across a power of two: renormalise by one step
    adj_up = abs(m) >= 1.0
    m = where(adj_up, m * 0.5, m)
    e = where(adj_up, e + 1.0, e)
    adj_dn = logical_and(ok, abs(m) < 0.5)
    m = where(adj_dn, m * 2.0, m)
    e = where(adj_dn, e - 1.0, e)
    return where(ok, m, x), asarray(where(ok, e, 0.0), np.int32)


def gcd(x1, x2):
    """Greatest common divisor of integers (Euclid's algorithm, unrolled)."""
    from funcgrad.numpy._ufuncs import remainder
    a, b = _promote("gcd", x1, x2)
    if not is_int(a.dtype):
        raise TypeError("gcd: arguments must be integers")
    a, b = abs(a), abs(b)
    for _ in range(8 * a.dtype.itemsize * 3 // 2 + 2):   # Fibonacci bound on Euclid's steps
        nz = b != 0
        a, b = where(nz, b, a), where(nz, remainder(a, where(nz, b, 1)), 0)
    return a


def lcm(x1, x2):
    from funcgrad.numpy._ufuncs import floor_divide
    a, b = _promote("lcm", x1, x2)
    g = gcd(a, b)
    return where(g == 0, 0, abs(floor_divide(a, where(g == 0, 1, g)) * b))


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|a - b| <= atol + rtol |b|, infinities equal only to themselves.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.isclose(fnp.array([1.0, 2.0]), 1.0).tolist()
        [True, False]
    """
    x, y = _promote("isclose", a, b)
    if not is_float(x.dtype):
        return equal(x, y)
    close = abs(x - y) <= atol + rtol * abs(y)
    both_inf = logical_and(isinf(x), equal(x, y))
    out = logical_or(logical_and(close, isfinite(x)), both_inf)
    out = logical_and(out, logical_not(logical_or(isnan(x), isnan(y))))
    if equal_nan:
        out = logical_or(out, logical_and(isnan(x), isnan(y)))
    return out


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    return all(isclose(a, b, rtol, atol, equal_nan))


def array_equal(a1, a2, equal_nan=False):
    """True when the shapes are equal and every element is (NaN == NaN with equal_nan)."""
    x, y = asarray(a1), asarray(a2)
    if tuple(x.shape) != tuple(y.shape):
        return asarray(False)
    eq = equal(x, y)
    if equal_nan and is_float(result_type(x, y)):
        eq = logical_or(eq, logical_and(isnan(x), isnan(y)))
    return all(eq)


def array_equiv(a1, a2):
    x, y = asarray(a1), asarray(a2)
    try:
        np.broadcast_shapes(tuple(x.shape), tuple(y.shape))
    except ValueError:
        return asarray(False)
    return all(equal(x, y))


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """NaN -> nan, +inf -> posinf (default the dtype's max), -inf -> neginf (its min)."""
    x = asarray(x)
    if not is_float(x.dtype):
        return x
    fi = finfo(x.dtype)
    posinf = fi.max if posinf is None else posinf
    neginf = fi.min if neginf is None else neginf
    out = where(isnan(x), asarray(nan, x.dtype), x)
    out = where(logical_and(isinf(x), x > 0), asarray(posinf, x.dtype), out)
    return where(logical_and(isinf(x), x < 0), asarray(neginf, x.dtype), out)


def isneginf(x):
    x = asarray(x)
    return logical_and(isinf(x), less(x, 0))


def isposinf(x):
    x = asarray(x)
    return logical_and(isinf(x), x > 0)


def real(val):
    """The real part (the array itself for real dtypes).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.real(fnp.asarray([1 + 2j])).tolist()
        [1.0]
    """
    x = asarray(val)
    return PC.real(x) if dtype_kind(x.dtype) == "c" else x


def imag(val):
    """The imaginary part (zeros for real dtypes)."""
    from funcgrad.numpy._base import zeros_like
    x = asarray(val)
    return PC.imag(x) if dtype_kind(x.dtype) == "c" else zeros_like(x)


def conjugate(x):
    """The complex conjugate (the array itself for real dtypes)."""
    x = asarray(x)
    return PC.conj(x) if dtype_kind(x.dtype) == "c" else x


conj = conjugate


def angle(z, deg=False):
    """The argument of complex z, arctan2(imag z, real z) (float result).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> round(float(fnp.angle(1j)), 6)
        1.570796
    """
    z = asarray(z)
    if dtype_kind(z.dtype) != "c":
        z = _fl(z)
        out = arctan2(imag(z), z)
    else:
        out = arctan2(PC.imag(z), PC.real(z))
    return rad2deg(out) if deg else out


def iscomplex(x):
    """Elementwise: a nonzero imaginary part."""
    return imag(x) != 0


def isreal(x):
    """Elementwise: a zero imaginary part."""
    return imag(x) == 0


def iscomplexobj(x):
    """Whether x has a complex dtype."""
    return dtype_kind(asarray(x).dtype) == "c"


def isrealobj(x):
    return not iscomplexobj(x)


def i0(x):
    """The modified Bessel function of the first kind, order 0 (series, then asymptotic)."""
    x = abs(_fl(x))
    small = x <= 15.0
    xs = where(small, x, 1.0)
    term = P.full_like(xs, 1.0)
    acc = term
    q = (xs * xs) * 0.25
    for k in range(1, 60):
        term = term * q / float(k * k)
        acc = acc + term
    xl = where(small, 20.0, x)
    term, series = P.full_like(xl, 1.0), P.full_like(xl, 1.0)
    for k in range(1, 25):   # asymptotic: sum ((2k-1)!!)^2 / (k! (8x)^k)
        term = term * float((2 * k - 1) ** 2) / (8.0 * float(k) * xl)
        series = series + term
    asym = exp(xl) / sqrt(2.0 * math.pi * xl) * series
    return where(small, acc, asym)


def spacing(x):
    """The distance from x to the next float of larger magnitude."""
    x = _fl(x)
    m, e = frexp(x)
    eps = float(finfo(x.dtype).eps)
    ax = abs(x)
    tiny = float(finfo(x.dtype).smallest_subnormal)
    out = where(ax > 0, (2.0 ** asarray(e, x.dtype)) * (eps * 0.5), tiny)
    out = where(ax < float(finfo(x.dtype).tiny), tiny, out)
    return where(signbit(x), -out, out)


def nextafter(x1, x2):
    """The next float after x1 in the direction of x2 (x2 itself where they are equal).

    No bitcast: the exponent e of |x1| is floor(log2 |x1|) corrected by one step against 2**e,
    and the step is 2**(e - mantissa bits), halved below a power of two (not subnormal ones).
    Gradients are those of the composition (1 for x1, 0 for x2); JAX defines none.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> float(fnp.nextafter(fnp.float32(1.0), 2.0)) - 1.0 == 2.0 ** -23
        True
    """
    from funcgrad.numpy._ufuncs import log2, power
    a, b = _promote("nextafter", x1, x2, dtype=_float_dtype(x1, x2))
    if dtype_kind(a.dtype) != "f":
        raise TypeError(f"nextafter: real floating-point operands required, got {a.dtype.name}")
    fi = finfo(a.dtype)
    emin, nmant = int(fi.minexp), int(fi.nmant)
    ax = abs(a)
    finite_nz = logical_and(isfinite(a), ax > 0)
    s = where(finite_nz, ax, 1.0)
    e = floor(log2(s))
    e = where(power(2.0, e) > s, e - 1.0, e)
    e = where(power(2.0, e + 1.0) <= s, e + 1.0, e)
    up = power(2.0, maximum(e, float(emin)) - float(nmant))
    down = where(logical_and(equal(s, power(2.0, e)), e > emin), up * 0.5, up)
    away = equal(b > a, a > 0)
    mag = where(away, ax + up, ax - down)
    out = where(signbit(a), -mag, mag)
    tiny = P.full_like(a, float(fi.smallest_subnormal))
    out = where(equal(a, 0), where(b > a, tiny, -tiny), out)
    big = P.full_like(a, float(fi.max))
    out = where(isinf(a), where(a > 0, big, -big), out)
    out = where(equal(a, b), b, out)
    return where(logical_or(isnan(a), isnan(b)), np.nan, out)


def bitwise_count(x):
    """Number of set bits of |x| (integers)."""
    x = asarray(x)
    if not is_int(x.dtype) and x.dtype != np.bool_:
        raise TypeError("bitwise_count: integer input required")
    v = abs(x) if dtype_kind(x.dtype) == "i" else x
    out = P.zeros_like(asarray(v, np.int32)) if x.dtype != np.bool_ else asarray(x, np.uint8)
    if x.dtype == np.bool_:
        return out
    for k in range(8 * x.dtype.itemsize):
        out = out + asarray((v >> k) & 1, np.int32)
    return asarray(out, np.uint8)


__all__ = [
    "signbit",
    "copysign",
    "arctan2",
    "atan2",
    "hypot",
    "cbrt",
    "deg2rad",
    "rad2deg",
    "radians",
    "degrees",
    "sinc",
    "heaviside",
    "fmax",
    "fmin",
    "float_power",
    "logaddexp2",
    "positive",
    "fabs",
    "rint",
    "fix",
    "modf",
    "divmod",
    "ldexp",
    "frexp",
    "gcd",
    "lcm",
    "isclose",
    "allclose",
    "array_equal",
    "array_equiv",
    "nan_to_num",
    "isneginf",
    "isposinf",
    "real",
    "imag",
    "conjugate",
    "conj",
    "angle",
    "iscomplex",
    "isreal",
    "iscomplexobj",
    "isrealobj",
    "i0",
    "spacing",
    "nextafter",
    "bitwise_count",
]
