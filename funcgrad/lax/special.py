"""Special functions as compositions of primitives: erfc, erf_inv, lgamma, digamma.

erfc is Cephes' (1 - erf below 1, rational approximations times exp(-x^2) above).

lgamma and digamma shift the argument up by six with the recurrence (Gamma(x+1) = x Gamma(x)),
then sum Stirling's asymptotic series, accurate to ~1e-13 for x > 0; negative arguments use the
reflection formulas. erf_inv starts from Giles' single-precision approximation and, in float64,
refines it by Newton steps on erf; its derivative is the exact one, through custom_jvp.
"""
from __future__ import annotations

import math

import numpy as np

from funcgrad import numpy as fnp
from funcgrad import prims as P
from funcgrad.core import bind
from funcgrad.core.dtypes import dtype_kind, is_half
from funcgrad.transforms.custom import custom_jvp


def _erf(x):
    return bind(P.erf_p, x)

_SHIFT = 6
# Stirling series for lgamma: 1/(12x) - 1/(360x^3) + 1/(1260x^5) - ... (Bernoulli numbers)
_LG = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360, 1 / 156)
# digamma: log x - 1/(2x) - sum B_2k / (2k x^2k)
_DG = (1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760, 1 / 12)


def _float(x):
    x = fnp.asarray(x)
    return x if dtype_kind(x.dtype) == "f" else fnp.asarray(x, np.float32)


def _lgamma_pos(x):
    """lgamma for x > 0."""
    prod = x
    for k in range(1, _SHIFT):
        prod = prod * (x + float(k))
    z = x + float(_SHIFT)
    zi = 1.0 / z
    zi2 = zi * zi
    series = 0.0
    for c in reversed(_LG):
        series = series * zi2 + c
    stirling = (z - 0.5) * fnp.log(z) - z + 0.5 * math.log(2 * math.pi) + series * zi
    return stirling - fnp.log(prod)


def lgamma(x):
    """log |Gamma(x)| elementwise (lax.lgamma); inf at the poles 0, -1, -2, ...

    Example:
        >>> import funcgrad
        >>> round(float(funcgrad.lax.lgamma(5.0)), 5)   # log(4!)
        3.17805
    """
    x = _float(x)
    neg = x < 0.5
    xp = fnp.where(neg, 1.0 - x, x)           # reflection: Gamma(x) Gamma(1-x) = pi / sin(pi x)
    pos = _lgamma_pos(xp)
    frac = x - fnp.floor(x)
    s = fnp.abs(fnp.sin(math.pi * fnp.where(neg, frac, 0.5)))
    pole = fnp.logical_and(neg, frac == 0)
    refl = math.log(math.pi) - fnp.log(fnp.where(pole, 1.0, s)) - pos
    return fnp.where(pole, np.inf, fnp.where(neg, refl, pos))


def _digamma_pos(x):
    acc = 0.0
    for k in range(_SHIFT):
        acc = acc + 1.0 / (x + float(k))
    z = x + float(_SHIFT)
    zi2 = 1.0 / (z * z)
    series = 0.0
    for c in reversed(_DG):
        series = series * zi2 + c
    return fnp.log(z) - 0.5 / z - series * zi2 - acc


def digamma(x):
    """The logarithmic derivative of Gamma (lax.digamma); NaN at the poles.

    Example:
        >>> import funcgrad
        >>> round(float(funcgrad.lax.digamma(1.0)), 6)   # -Euler's gamma
        -0.577216
    """
    x = _float(x)
    neg = x < 0.5
    xp = fnp.where(neg, 1.0 - x, x)           # reflection: psi(1-x) - psi(x) = pi cot(pi x)
    pos = _digamma_pos(xp)
    frac = x - fnp.floor(x)
    pole = fnp.logical_and(neg, frac == 0)
    t = fnp.tan(math.pi * fnp.where(neg & ~pole, frac, 0.25))
    refl = pos - math.pi / t
    return fnp.where(pole, np.nan, fnp.where(neg, refl, pos))


# Cephes' erfc for |x| >= 1: exp(-x^2) P(x) / Q(x) below 8, exp(-x^2) R(x) / S(x) above (Q and S
# have an implicit leading 1); highest power first
_ERFC_P = (2.46196981473530512524e-10, 5.64189564831068821977e-1, 7.46321056442269912687e0,
           4.86371970985681366614e1, 1.96520832956077098242e2, 5.26445194995477358631e2,
           9.34528527171957607540e2, 1.02755188689515710272e3, 5.57535335369399327526e2)
_ERFC_Q = (1.0, 1.32281951154744992508e1, 8.67072140885989742329e1, 3.54937778887819891062e2,
           9.75708501743205489753e2, 1.82390916687909736289e3, 2.24633760818710981792e3,
           1.65666309194161350182e3, 5.57535340817727675546e2)
_ERFC_R = (5.64189583547755073984e-1, 1.27536670759978104416e0, 5.01905042251180477414e0,
           6.16021097993053585195e0, 7.40974269950448939160e0, 2.97886665372100240670e0)
_ERFC_S = (1.0, 2.26052863220117276590e0, 9.39603524938001434673e0, 1.20489539808096656605e1,
           1.70814450747565897222e1, 9.60896809063285878198e0, 3.36907645100081516050e0)


def _exp_neg_sq(ax):
    """exp(-ax^2) with the rounding error of squaring kept out of the exponent (Cephes'
    expx2): ax = m + f with m a multiple of 1/128, whose square is exact."""
    m = fnp.floor(ax * 128.0 + 0.5) / 128.0
    f = ax - m
    return fnp.exp(-m * m) * fnp.exp(-(2.0 * m * f + f * f))


def _horner(coeffs, w):
    p = coeffs[0]
    for c in coeffs[1:]:
        p = c + p * w
    return p


@custom_jvp
def _erfc(x):
    ax = fnp.abs(x)
    big = fnp.where(ax < 1.0, 1.0, ax)        # keeps the unused branch finite
    small = big < 8.0
    ratio = fnp.where(small, _horner(_ERFC_P, big) / _horner(_ERFC_Q, big),
                      _horner(_ERFC_R, big) / _horner(_ERFC_S, big))
    tail = _exp_neg_sq(big) * ratio
    tail = fnp.where(x < 0, 2.0 - tail, tail)
    return fnp.where(ax < 1.0, 1.0 - _erf(x), tail)


@_erfc.defjvp
def _erfc_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _erfc(x), t * (-2.0 / math.sqrt(math.pi)) * fnp.exp(-x * x)


def erfc(x):
    """1 - erf(x) (lax.erfc), accurate in the upper tail (Cephes' rational approximations
    times exp(-x^2) for |x| >= 1) until it underflows.

    Example:
        >>> import funcgrad
        >>> float(funcgrad.lax.erfc(10.0)) > 0   # 2.09e-45: 1 - erf(10) would be 0
        True
    """
    return _erfc(_float(x))


_ERFINV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                   0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_ERFINV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844,
                0.00573950773, -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


@custom_jvp
def _erf_inv(x):
    dt = x.dtype
    xw = fnp.asarray(x, np.float32) if is_half(dt) else x
    w = -fnp.log((1.0 - xw) * (1.0 + xw))
    central = _horner(_ERFINV_CENTRAL, w - 2.5)
    tail = _horner(_ERFINV_TAIL, fnp.sqrt(fnp.where(w < 5.0, 5.0, w)) - 3.0)
    y = fnp.where(w < 5.0, central, tail) * xw
    if dt == np.float64:   # Newton on erf(y) = x from the float32-accurate start
        fin = fnp.isfinite(y)
        for _ in range(3):
            ys = fnp.where(fin, y, 0.0)
            step = (_erf(ys) - x) / (2.0 / math.sqrt(math.pi) * fnp.exp(-ys * ys))
            y = fnp.where(fin, y - step, y)
    return fnp.asarray(y, dt)


@_erf_inv.defjvp
def _erf_inv_jvp(primals, tangents):
    # d/dx erf_inv(x) = sqrt(pi)/2 exp(erf_inv(x)^2)
    (x,), (t,) = primals, tangents
    y = _erf_inv(x)
    return y, t * (math.sqrt(math.pi) / 2) * fnp.exp(y * y)


def erf_inv(x):
    """The inverse error function on (-1, 1) (lax.erf_inv); +-inf at +-1.

    Example:
        >>> import funcgrad
        >>> round(float(funcgrad.lax.erf_inv(0.5)), 6)
        0.476936
    """
    return _erf_inv(_float(x))
