"""Hurwitz zeta, polygamma and the exponentially scaled Bessel functions i0e, i1e (lax names).

zeta follows Cephes: direct terms until the argument passes 9 (a `while_loop`), then the
Euler-Maclaurin tail with Bernoulli numbers; polygamma(m, x) = (-1)^(m+1) m! zeta(m+1, x)
(digamma for m = 0). bessel_i0e is Cephes' Chebyshev expansion (JAX's coefficients); bessel_i1e
sums the power series for |x| <= 15 and the asymptotic series beyond. Derivatives follow JAX:
polygamma and the Bessel functions in x; zeta in q only (JAX defines none; the derivative in
the order s is zero here, like polygamma's in m).
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from funcgrad.core.dtypes import finfo
from funcgrad import numpy as fnp
from funcgrad.lax.special import digamma, lgamma
from funcgrad.lax.special_gamma import _floats
from funcgrad.lax.control_flow import while_loop
from funcgrad.transforms.custom import custom_jvp

# Bernoulli numbers B_2 .. B_24, for the tail's coefficients (2k)! / B_2k (Cephes' A[])
_B = [Fraction(1, 6), Fraction(-1, 30), Fraction(1, 42), Fraction(-1, 30), Fraction(5, 66),
      Fraction(-691, 2730), Fraction(7, 6), Fraction(-3617, 510), Fraction(43867, 798),
      Fraction(-174611, 330), Fraction(854513, 138), Fraction(-236364091, 2730)]
_A = [float(math.factorial(2 * k + 2) / b) for k, b in enumerate(_B)]


def _zeta(x, q):
    eps = float(finfo(x.dtype).eps)
    q_int = fnp.floor(q) == q
    x_int = fnp.floor(x) == x
    pole = (x == 1) | ((q <= 0) & q_int)
    bad = (x < 1) | ((q < 0) & ~q_int & ~x_int) | fnp.isnan(x) | fnp.isnan(q)
    ok = ~(pole | bad)
    x = fnp.where(ok, x, 2.0)
    q = fnp.where(ok, q, 1.0)
    s0 = fnp.power(q, -x)

    def body(v):
        i, a, s, b, live = v
        a1 = a + 1.0
        b1 = fnp.power(a1, -x)
        s1 = s + b1
        converged = fnp.abs(b1 / s1) < eps
        return (i + 1.0, fnp.where(live, a1, a), fnp.where(live, s1, s),
                fnp.where(live, b1, b), live & ~converged & ((i + 1.0 < 9) | (a1 <= 9)))

    zero = fnp.zeros_like(q)
    _, w, s, b, _ = while_loop(lambda v: fnp.any(v[4]) & fnp.all(v[0] < 1e6), body,
                               (fnp.asarray(0.0, q.dtype), q, s0, zero, ok))
    done = fnp.abs(b / s) < eps
    tail = b * w / (x - 1.0) - 0.5 * b
    a, k, live = fnp.ones_like(q), 0.0, ~done
    for coef in _A:
        a = a * (x + k)
        b = b / w
        t = a * b / coef
        tail = tail + fnp.where(live, t, 0.0)
        live = live & ~(fnp.abs(t / (s + tail)) < eps)
        k += 1.0
        a = a * (x + k)
        b = b / w
        k += 1.0
    out = s + fnp.where(done, 0.0, tail)
    return fnp.where(pole, np.inf, fnp.where(bad, np.nan, out))


@custom_jvp
def _zeta_cj(x, q):
    return _zeta(x, q)


@_zeta_cj.defjvp
def _zeta_jvp(primals, tangents):
    # d/dq zeta(x, q) = -x zeta(x + 1, q)
    (x, q), (_, tq) = primals, tangents
    return _zeta_cj(x, q), tq * (-x * _zeta_cj(x + 1.0, q))


def zeta(x, q):
    """The Hurwitz zeta function sum_k (q + k)^-x (lax.zeta): inf at x = 1 and at the poles
    q = 0, -1, ...; NaN for x < 1. Differentiable in q.

    Example:
        >>> from funcgrad import lax
        >>> round(float(lax.zeta(2.0, 1.0)), 6)      # pi^2 / 6
        1.644934
    """
    (x, q), dt = _floats(x, q)
    return fnp.asarray(_zeta_cj(x, q), dt)


def _polygamma(m, x):
    mint = (fnp.floor(m) == m) & (m >= 0)
    ms = fnp.where(mint & (m > 0), m, 1.0)
    sign = fnp.where(fnp.floor(ms) % 2.0 == 0, -1.0, 1.0)      # (-1)^(m+1)
    higher = sign * fnp.exp(lgamma(ms + 1.0)) * _zeta_cj(ms + 1.0, x)
    out = fnp.where(m == 0, digamma(x), higher)
    return fnp.where(mint, out, np.nan)


@custom_jvp
def _polygamma_cj(m, x):
    return _polygamma(m, x)


@_polygamma_cj.defjvp
def _polygamma_jvp(primals, tangents):
    (m, x), (_, tx) = primals, tangents
    return _polygamma_cj(m, x), tx * _polygamma_cj(m + 1.0, x)


def polygamma(m, x):
    """The m-th derivative of digamma at x (lax.polygamma), for integer m >= 0 (NaN
    otherwise); differentiable in x (JAX defines no derivative in m; funcgrad's is zero).

    Example:
        >>> from funcgrad import lax
        >>> round(float(lax.polygamma(1.0, 1.0)), 6)   # pi^2 / 6
        1.644934
    """
    (m, x), dt = _floats(m, x)
    return fnp.asarray(_polygamma_cj(m, x), dt)


_I0E_A = (-4.41534164647933937950E-18, 3.33079451882223809783E-17, -2.43127984654795469359E-16,
          1.71539128555513303061E-15, -1.16853328779934516808E-14, 7.67618549860493561688E-14,
          -4.85644678311192946090E-13, 2.95505266312963983461E-12, -1.72682629144155570723E-11,
          9.67580903537323691224E-11, -5.18979560163526290666E-10, 2.65982372468238665035E-9,
          -1.30002500998624804212E-8, 6.04699502254191894932E-8, -2.67079385394061173391E-7,
          1.11738753912010371815E-6, -4.41673835845875056359E-6, 1.64484480707288970893E-5,
          -5.75419501008210370398E-5, 1.88502885095841655729E-4, -5.76375574538582365885E-4,
          1.63947561694133579842E-3, -4.32430999505057594430E-3, 1.05464603945949983183E-2,
          -2.37374148058994688156E-2, 4.93052842396707084878E-2, -9.49010970480476444210E-2,
          1.71620901522208775349E-1, -3.04682672343198398683E-1, 6.76795274409476084995E-1)
_I0E_B = (-7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17,
          3.46122286769746109310E-17, -2.82762398051658348494E-16, -3.42548561967721913462E-16,
          1.77256013305652638360E-15, 3.81168066935262242075E-15, -9.55484669882830764870E-15,
          -4.15056934728722208663E-14, 1.54008621752140982691E-14, 3.85277838274214270114E-13,
          7.18012445138366623367E-13, -1.79417853150680611778E-12, -1.32158118404477131188E-11,
          -3.14991652796324136454E-11, 1.18891471078464383424E-11, 4.94060238822496958910E-10,
          3.39623202570838634515E-9, 2.26666899049817806459E-8, 2.04891858946906374183E-7,
          2.89137052083475648297E-6, 6.88975834691682398426E-5, 3.36911647825569408990E-3,
          8.04490411014108831608E-1)


def _chebyshev(x, coeffs):
    b0 = b1 = b2 = fnp.zeros_like(x)
    for c in coeffs:
        b2, b1 = b1, b0
        b0 = x * b1 - b2 + c
    return 0.5 * (b0 - b2)


def _i0e(x):
    ax = fnp.abs(x)
    f32 = x.dtype != np.float64        # Cephes' float32 tables are the tails of these
    a, b = (_I0E_A[12:], _I0E_B[18:]) if f32 else (_I0E_A, _I0E_B)
    small = _chebyshev(0.5 * ax - 2.0, a)
    axl = fnp.where(ax > 8.0, ax, 8.0)
    large = _chebyshev(32.0 / axl - 2.0, b) / fnp.sqrt(axl)
    return fnp.where(ax <= 8.0, small, large)


def _i1e(x):
    ax = fnp.abs(x)
    small = ax <= 15.0
    xs = fnp.where(small, ax, 1.0)
    q = xs * xs * 0.25
    term = 0.5 * xs
    acc = term
    for k in range(1, 60):         # I1(x) = (x/2) sum (x^2/4)^k / (k! (k+1)!)
        term = term * q / float(k * (k + 1))
        acc = acc + term
    series = acc * fnp.exp(-xs)
    xl = fnp.where(small, 20.0, ax)
    term = fnp.ones_like(xl)
    tot = term
    for k in range(1, 25):         # e^x / sqrt(2 pi x) sum_k prod (4 - (2j-1)^2) / (k! (8x)^k)
        term = term * -(4.0 - float((2 * k - 1) ** 2)) / (8.0 * float(k) * xl)
        tot = tot + term
    asym = tot / fnp.sqrt(2.0 * math.pi * xl)
    out = fnp.where(small, series, asym)
    return fnp.where(x < 0, -out, out)


@custom_jvp
def _i0e_cj(x):
    return _i0e(x)


@_i0e_cj.defjvp
def _i0e_jvp(primals, tangents):
    # (e^-|x| I0(x))' = i1e(x) - sign(x) i0e(x)
    (x,), (t,) = primals, tangents
    y = _i0e_cj(x)
    return y, t * (_i1e_cj(x) - fnp.sign(x) * y)


@custom_jvp
def _i1e_cj(x):
    return _i1e(x)


@_i1e_cj.defjvp
def _i1e_jvp(primals, tangents):
    # (e^-|x| I1(x))' = i0e(x) - i1e(x) (sign(x) + 1/x); 1/2 at 0
    (x,), (t,) = primals, tangents
    y = _i1e_cj(x)
    eps = float(finfo(x.dtype).eps)
    tiny = fnp.abs(x) <= eps
    xs = fnp.where(tiny, eps, x)
    d = _i0e_cj(xs) - y * (fnp.sign(xs) + 1.0 / xs)
    return y, t * fnp.where(tiny, 0.5, d)


def bessel_i0e(x):
    """exp(-|x|) I0(x), the exponentially scaled modified Bessel function of order 0
    (lax.bessel_i0e).

    Example:
        >>> from funcgrad import lax
        >>> round(float(lax.bessel_i0e(1.0)), 6)
        0.46576
    """
    (x,), dt = _floats(x)
    return fnp.asarray(_i0e_cj(x), dt)


def bessel_i1e(x):
    """exp(-|x|) I1(x), the exponentially scaled modified Bessel function of order 1
    (lax.bessel_i1e).

    Example:
        >>> from funcgrad import lax
        >>> round(float(lax.bessel_i1e(1.0)), 6)
        0.20791
    """
    (x,), dt = _floats(x)
    return fnp.asarray(_i1e_cj(x), dt)
