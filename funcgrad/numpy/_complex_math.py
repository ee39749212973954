"""expm1, log1p, sinh, cosh and the inverse trigonometric and hyperbolic functions, complex too.

Compositions of primitives over the real and imaginary parts (so grad, vmap, jit and CUDA come
with them). Finite inputs use Kahan's formulas ("Branch cuts for complex elementary functions",
1987), which are accurate across the plane and put the branch cuts where C99 does, signed zeros
included; inputs with an infinite or NaN part take the C99 Annex G values that the array API
standard lists, chosen with `where` (their gradients are not defined).
"""
from __future__ import annotations

import math

from funcgrad import prims as P
from funcgrad.prims import complex as PC
from funcgrad.core.dtypes import dtype_kind, finfo
from funcgrad.numpy import _elementwise as R
from funcgrad.numpy import _ufuncs as U
from funcgrad.numpy._elementwise import _fl, arctan2, hypot, signbit
from funcgrad.numpy._ufuncs import (
    abs,
    cos,
    equal,
    exp,
    isfinite,
    isinf,
    isnan,
    log,
    logical_and,
    logical_not,
    logical_or,
    minimum,
    sin,
    sqrt,
    where,
)

_NAN, _INF, _PI = float("nan"), float("inf"), math.pi


def _parts(z):
    return PC.real(z), PC.imag(z)


def _cx(re, im):
    return PC.complex_(re, im)


def _flip(v, neg):
    """-v where `neg`, else v (a sign fold that keeps the gradient: d(-v)/dv = -1)."""
    return where(neg, -v, v)


def _nonfinite(a, b):
    """(either part is +-inf, some part is not finite)."""
    return logical_or(isinf(a), isinf(b)), logical_not(logical_and(isfinite(a), isfinite(b)))


def _k(v, like):
    """The constant v in like's dtype (two Python floats in `where` would give float32)."""
    return P.full_like(like, v)


def _huge(x):
    return math.sqrt(finfo(x.dtype).max) / 4


# ---------------------------------------------------------------------------------------------
# exp and log near zero, sinh and cosh
# ---------------------------------------------------------------------------------------------

def _expm1_c(z):
    """exp(z) - 1 = (expm1(a) cos b - 2 sin^2(b / 2)) + i exp(a) sin b, for z = a + ib."""
    a, b = _parts(z)
    h = sin(b * 0.5)
    re = U.expm1(a) * cos(b) - 2.0 * (h * h)
    im = exp(a) * sin(b)
    a_fin = isfinite(a)
    # a = -inf: 0 cis(b) - 1; a = +inf: inf cis(b) - 1, inf + NaN j when b is not finite;
    # a not finite and b = +-0: the imaginary part is b.
    re = where(equal(a, -_INF), _k(-1.0, a), where(logical_and(equal(a, _INF), logical_not(
        isfinite(b))), _INF, re))
    im = where(equal(a, -_INF), where(isfinite(b), 0.0 * sin(where(isfinite(b), b, 0.0)), 0.0),
               im)
    im = where(logical_and(logical_not(a_fin), equal(b, 0)), b, im)
    return _cx(re, im)


def _log1p_c(z):
    """log(1 + z) = log|1 + z| + i arg(1 + z); 1/2 < |1 + z| < 2 uses log1p(a (2 + a) + b^2) / 2
    (exact near z = 0, where the real part is small)."""
    a, b = _parts(z)
    ap1 = 1.0 + a
    m = hypot(ap1, b)
    small = logical_and(m < 2.0, m > 0.5)
    a_s, b_s = where(small, a, 0.0), where(small, b, 0.0)
    re = where(small, 0.5 * U.log1p(a_s * (2.0 + a_s) + b_s * b_s), log(where(small, 1.0, m)))
    return _cx(re, arctan2(b, ap1))


def _rot(z):
    """i z, exactly (no 0 * inf): (a, b) -> (-b, a)."""
    a, b = _parts(z)
    return _cx(-b, a)


def _rot_back(z):
    """-i z, exactly: (a, b) -> (b, -a)."""
    a, b = _parts(z)
    return _cx(b, -a)


def _sinh_c(z):
    """sinh z = -i sin(iz) (C99's definition, special values included)."""
    return _rot_back(sin(_rot(z)))


def _cosh_c(z):
    """cosh z = cos(iz)."""
    return cos(_rot(z))


# ---------------------------------------------------------------------------------------------
# inverse functions (Kahan's formulas)
# ---------------------------------------------------------------------------------------------

def _tanh_c(z):
    """tanh z; at a = +-inf with b finite, +-1 + 0j with the zero signed like b (the standard's
    value; C99's sign of sin(2b) differs)."""
    out = U.tanh(z)
    a, b = _parts(z)
    fix = logical_and(isinf(a), isfinite(b))
    one, zero = _k(1.0, a), _k(0.0, b)
    re, im = _parts(out)
    return _cx(where(fix, where(signbit(a), -one, one), re),
               where(fix, where(signbit(b), -zero, zero), im))


def _sqrt_parts(re, im):
    return _parts(sqrt(_cx(re, im)))


def _arccos_c(z):
    """acos z: re = 2 atan2(re s1, re s2), im = asinh(im(conj(s2) s1)), s1 = sqrt(1 - z),
    s2 = sqrt(1 + z)."""
    a, b = _parts(z)
    r1, i1 = _sqrt_parts(1.0 - a, -b)
    r2, i2 = _sqrt_parts(1.0 + a, b)
    re, im = 2.0 * arctan2(r1, r2), R.arcsinh(r2 * i1 - i2 * r1)
    anyinf, special = _nonfinite(a, b)
    s_re = where(anyinf, arctan2(abs(b), a), where(equal(a, 0), _k(_PI / 2, a), _NAN))
    s_im = _flip(where(anyinf, _k(-_INF, a), _NAN), signbit(b))
    return _cx(where(special, s_re, re), where(special, s_im, im))


def _arccosh_c(z):
    """acosh z: re = asinh(re(conj(s1) s2)), im = 2 atan2(im s1, re s2), s1 = sqrt(z - 1),
    s2 = sqrt(z + 1)."""
    a, b = _parts(z)
    r1, i1 = _sqrt_parts(a - 1.0, b)
    r2, i2 = _sqrt_parts(a + 1.0, b)
    re, im = R.arcsinh(r1 * r2 + i1 * i2), 2.0 * arctan2(i1, r2)
    anyinf, special = _nonfinite(a, b)
    s_re = where(anyinf, _k(_INF, a), _NAN)
    s_im = _flip(where(anyinf, arctan2(abs(b), a), where(equal(a, 0), _k(_PI / 2, a), _NAN)),
                 signbit(b))
    return _cx(where(special, s_re, re), where(special, s_im, im))


def _arcsinh_c(z):
    """asinh z = -i asin(iz); asin w = atan2(re w, re(s1 s2)) + i asinh(im(conj(s1) s2)),
    s1 = sqrt(1 - w), s2 = sqrt(1 + w)."""
    a, b = _parts(z)
    c, d = -b, a                                    # w = i z
    r1, i1 = _sqrt_parts(1.0 - c, -d)
    r2, i2 = _sqrt_parts(1.0 + c, d)
    re, im = R.arcsinh(r1 * i2 - i1 * r2), -arctan2(c, r1 * r2 - i1 * i2)
    anyinf, special = _nonfinite(a, b)
    s_re = _flip(where(anyinf, _k(_INF, a), _NAN), signbit(a))
    s_im = where(anyinf, _flip(arctan2(abs(b), abs(a)), signbit(b)),
                 where(equal(b, 0), b, _NAN))
    return _cx(where(special, s_re, re), where(special, s_im, im))


def _arctanh_c(z):
    """atanh z: re = log1p(4a / ((1 - a)^2 + b^2)) / 4, im = atan2(2b, (1 - a)(1 + a) - b^2) / 2;
    for |z| beyond sqrt(max) / 4, re(1 / z) + i pi / 2 sign(b)."""
    a, b = _parts(z)
    big = logical_or(abs(a) > _huge(a), abs(b) > _huge(b))
    a_s, b_s = where(big, 0.0, a), where(big, 0.0, b)
    am = 1.0 - a_s
    # near z = +-1, (1 -+ a)^2 + b^2 may underflow: 1/2 (log|1 + z| - log|1 - z|) there
    hp, hm = hypot(1.0 + a_s, b_s), hypot(am, b_s)
    near = minimum(hp, hm) < 0.5
    hp, hm = where(near, hp, 1.0), where(near, hm, 1.0)
    d = where(near, 1.0, am * am + b_s * b_s)
    re = where(near, 0.5 * (log(hp) - log(hm)), 0.25 * U.log1p(4.0 * where(near, 0.0, a_s) / d))
    im = 0.5 * arctan2(2.0 * b_s, am * (1.0 + a_s) - b_s * b_s)
    h = hypot(where(big, a, 1.0), where(big, b, 0.0))
    re = where(big, where(big, a, 0.0) / h / h, re)
    im = where(big, where(signbit(b), _k(-_PI / 2, b), _PI / 2), im)
    anyinf, special = _nonfinite(a, b)
    s_re = _flip(where(anyinf, _k(0.0, a), where(equal(a, 0), 0.0, _NAN)), signbit(a))
    s_im = where(logical_and(anyinf, logical_not(isnan(b))),
                 where(signbit(b), _k(-_PI / 2, b), _PI / 2), _NAN)
    return _cx(where(special, s_re, re), where(special, s_im, im))


def _arcsin_c(z):
    """asin z = -i asinh(iz) (the standard's definition, special values included)."""
    return _rot_back(_arcsinh_c(_rot(z)))


def _arctan_c(z):
    """atan z = -i atanh(iz)."""
    return _rot_back(_arctanh_c(_rot(z)))


# ---------------------------------------------------------------------------------------------
# the public functions: the real ones of _ufuncs / _extra_math, the versions above for complex
# ---------------------------------------------------------------------------------------------

def _dispatch(name, real, cplx, doc):
    def f(x):
        x = _fl(x)
        return cplx(x) if dtype_kind(x.dtype) == "c" else real(x)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = doc
    return f


expm1 = _dispatch("expm1", U.expm1, _expm1_c, """Elementwise exp(x) - 1, accurate near 0.

    Integer inputs give float32; complex inputs follow the array API's special cases.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> complex(fnp.expm1(fnp.complex128(1e-10j))).imag
        1e-10
    """)
log1p = _dispatch("log1p", U.log1p, _log1p_c, """Elementwise log(1 + x), accurate near 0.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> complex(fnp.log1p(fnp.complex128(-1 + 0j)))
        (-inf+0j)
    """)
tanh = _dispatch("tanh", U.tanh, _tanh_c, "Elementwise hyperbolic tangent.")
sinh = _dispatch("sinh", R.sinh, _sinh_c, "Elementwise hyperbolic sine (complex: -i sin(iz)).")
cosh = _dispatch("cosh", R.cosh, _cosh_c, "Elementwise hyperbolic cosine (complex: cos(iz)).")
arcsin = _dispatch("arcsin", R.arcsin, _arcsin_c, """Elementwise inverse sine.

    Complex inputs: branch cuts on the real axis beyond +-1 (C99's, signed zeros choosing the
    side), asin z = -i asinh(iz).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> complex(fnp.arcsin(fnp.complex128(2 + 0j))).imag > 0
        True
    """)
arccos = _dispatch("arccos", R.arccos, _arccos_c, """Elementwise inverse cosine.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> round(complex(fnp.arccos(fnp.complex128(0j))).real, 6)
        1.570796
    """)
arctan = _dispatch("arctan", R.arctan, _arctan_c, """Elementwise inverse tangent (radians).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> round(float(fnp.arctan(1.0)), 6)
        0.785398
    """)
arcsinh = _dispatch("arcsinh", R.arcsinh, _arcsinh_c, """Elementwise inverse hyperbolic sine.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> round(float(fnp.arcsinh(1.0)), 6)
        0.881374
    """)
arccosh = _dispatch("arccosh", R.arccosh, _arccosh_c, """Elementwise inverse hyperbolic cosine
    (NaN below 1 for real inputs).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> round(complex(fnp.arccosh(fnp.complex128(0j))).imag, 6)
        1.570796
    """)
arctanh = _dispatch("arctanh", R.arctanh, _arctanh_c, """Elementwise inverse hyperbolic tangent.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> complex(fnp.arctanh(fnp.complex128(1 + 0j)))
        (inf+0j)
    """)
asin, acos, atan = arcsin, arccos, arctan
asinh, acosh, atanh = arcsinh, arccosh, arctanh

__all__ = ["acos", "acosh", "arccos", "arccosh", "arcsin", "arcsinh", "arctan", "arctanh", "asin",
           "asinh", "atan", "atanh", "cosh", "expm1", "log1p", "sinh", "tanh"]
