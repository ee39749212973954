"""funcgrad.scipy.special: jax.scipy.special's functions as compositions of funcgrad ops.

logsumexp (with b=, return_sign=, where=), the normal distribution's ndtr / ndtri / log_ndtr
(Cephes' rational approximations for ndtri, the asymptotic series below -10 (float32) or -20
(float64) for log_ndtr, as JAX), xlogy / xlog1py (0 where x == 0, with JAX's derivatives), the
gamma family (gammaln, gamma, gammasgn, digamma, polygamma, betaln, beta, gammainc, gammaincc,
betainc, multigammaln, factorial, comb), erf / erfc / erfinv, expit / logit, the entropies
(entr, rel_entr, kl_div), the scaled Bessel functions i0e / i1e and i0 / i1, zeta, softmax and
log_softmax. Integer inputs compute in float32 (float64 inputs stay float64), as in JAX.
"""
from __future__ import annotations

import math

import numpy as np

from funcgrad import lax
from funcgrad import numpy as jnp
from funcgrad.core.dtypes import dtype_kind
from funcgrad.nn import log_softmax, softmax
from funcgrad.transforms.ad import stop_gradient
from funcgrad.transforms.custom import custom_jvp

__all__ = [
    "beta", "betainc", "betaln", "comb", "digamma", "entr", "erf", "erfc", "erfinv", "expit",
    "factorial", "gamma", "gammainc", "gammaincc", "gammaln", "gammasgn", "i0", "i0e", "i1",
    "i1e", "kl_div", "log_ndtr", "log_softmax", "logit", "logsumexp", "multigammaln", "ndtr",
    "ndtri", "polygamma", "rel_entr", "softmax", "xlog1py", "xlogy", "zeta",
]


def _inexact(*xs):
    """The arguments as arrays of their promoted dtype, float32 unless already inexact."""
    xs = [x if hasattr(x, "dtype") or isinstance(x, (int, float, complex)) else
          jnp.asarray(x) for x in xs]
    dt = jnp.result_type(*xs)   # Python scalars are weak: they take the arrays' dtype
    if dtype_kind(dt) not in "fc":
        dt = np.dtype(np.float32)
    arrs = [jnp.asarray(x, dt) for x in xs]
    return arrs if len(arrs) > 1 else arrs[0]


# ---------------------------------------------------------------------------------------------
# logsumexp
# ---------------------------------------------------------------------------------------------

def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False, where=None):
    """log(sum(b * exp(a))) along `axis`, computed stably (jax.scipy.special.logsumexp).

    Args:
        a: the exponents.
        axis: an int, a tuple of ints or None (all axes).
        b: optional weights broadcast against `a` (negative weights allowed).
        keepdims: keep the reduced axes with size 1.
        return_sign: also return the sign of the sum; without it a negative sum gives nan.
        where: optional mask of the elements that take part.

    Returns:
        The log of the (absolute) sum, and its sign when return_sign.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.scipy.special import logsumexp
        >>> round(float(logsumexp(jnp.array([0.0, 0.0]))), 6)
        0.693147
        >>> v, s = logsumexp(jnp.array([0.0, 1.0]), b=jnp.array([1.0, -1.0]), return_sign=True)
        >>> round(float(v), 4), float(s)
        (0.5413, -1.0)
    """
    if b is not None:
        a, b = _inexact(a, b)
        a, b = jnp.broadcast_arrays(a, b)
    else:
        a = _inexact(a)
    axes = tuple(range(a.ndim)) if axis is None else (
        tuple(axis) if isinstance(axis, (tuple, list)) else (axis,))
    if where is not None:
        where = jnp.broadcast_to(jnp.asarray(where, bool), a.shape)
        a = jnp.where(where, a, -jnp.inf)
        if b is not None:
            b = jnp.where(where, b, 0)
    amax = jnp.max(jnp.real(a), axis=axes, keepdims=True)
    amax = stop_gradient(jnp.where(jnp.isfinite(amax), amax, 0))
    exp_a = jnp.exp(a - amax)
    if b is not None:
        exp_a = exp_a * b
    total = jnp.sum(exp_a, axis=axes, keepdims=True)
    sign = jnp.sign(total)
    if return_sign or not jnp.iscomplexobj(total):
        total = jnp.abs(total)
    out = jnp.log(total) + amax
    if return_sign:
        sign = jnp.where(jnp.isnan(out), jnp.nan, sign)
    elif not jnp.iscomplexobj(out):
        out = jnp.where(sign < 0, jnp.nan, out)
    if not keepdims:
        out = jnp.squeeze(out, axis=axes)
        sign = jnp.squeeze(sign, axis=axes)
    return (out, sign) if return_sign else out


# ---------------------------------------------------------------------------------------------
# x log y
# ---------------------------------------------------------------------------------------------

@custom_jvp
def _xlogy(x, y):
    return jnp.where(x != 0, x * jnp.log(y), jnp.zeros_like(x))


@_xlogy.defjvp
def _xlogy_jvp(primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    return _xlogy(x, y), tx * jnp.log(y) + ty * x / y


@custom_jvp
def _xlog1py(x, y):
    return jnp.where(x != 0, x * jnp.log1p(y), jnp.zeros_like(x))


@_xlog1py.defjvp
def _xlog1py_jvp(primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    return _xlog1py(x, y), tx * jnp.log1p(y) + ty * x / (1 + y)


def xlogy(x, y):
    """x * log(y), and 0 where x == 0 (even where y == 0).

    Example:
        >>> from funcgrad.scipy.special import xlogy
        >>> float(xlogy(0.0, 0.0)), round(float(xlogy(2.0, 3.0)), 5)
        (0.0, 2.19722)
    """
    x, y = _inexact(x, y)
    x, y = jnp.broadcast_arrays(x, y)
    return _xlogy(x, y)


def xlog1py(x, y):
    """x * log1p(y), and 0 where x == 0 (even where y == -1).

    Example:
        >>> from funcgrad.scipy.special import xlog1py
        >>> float(xlog1py(0.0, -1.0)), round(float(xlog1py(2.0, 1.0)), 5)
        (0.0, 1.38629)
    """
    x, y = _inexact(x, y)
    x, y = jnp.broadcast_arrays(x, y)
    return _xlog1py(x, y)


def entr(x):
    """-x log(x) for x > 0, 0 at 0, -inf for x < 0.

    Example:
        >>> from funcgrad.scipy.special import entr
        >>> round(float(entr(0.5)), 6), float(entr(0.0)), float(entr(-1.0))
        (0.346574, 0.0, -inf)
    """
    x = _inexact(x)
    return jnp.where(x < 0, -jnp.inf, 0.0 - xlogy(x, x))   # 0.0 - : +0 at x == 0


def rel_entr(x, y):
    """x log(x / y) for x, y > 0; 0 where x == 0 and y >= 0; inf otherwise.

    Example:
        >>> from funcgrad.scipy.special import rel_entr
        >>> round(float(rel_entr(1.0, 2.0)), 6), float(rel_entr(0.0, 1.0))
        (-0.693147, 0.0)
    """
    x, y = _inexact(x, y)
    safe_y = jnp.where(y > 0, y, 1)
    val = jnp.where(x > 0, xlogy(x, x) - xlogy(x, safe_y), 0)
    return jnp.where((x > 0) & (y > 0) | (x == 0) & (y >= 0), val, jnp.inf)


def kl_div(p, q):
    """p log(p / q) - p + q for p, q > 0; q where p == 0 and q >= 0; inf otherwise.

    Example:
        >>> from funcgrad.scipy.special import kl_div
        >>> round(float(kl_div(1.0, 2.0)), 6)
        0.306853
    """
    p, q = _inexact(p, q)
    return jnp.where((p == 0) & (q >= 0), q, rel_entr(p, q) - p + q)


# ---------------------------------------------------------------------------------------------
# the gamma family
# ---------------------------------------------------------------------------------------------

def gammaln(x):
    """log |Gamma(x)| (scipy.special.gammaln); inf at 0, -1, -2, ...

    Example:
        >>> from funcgrad.scipy.special import gammaln
        >>> round(float(gammaln(5.0)), 5)
        3.17805
    """
    return lax.lgamma(_inexact(x))


def gammasgn(x):
    """The sign of Gamma(x): 1 for x > 0, alternating between the negative poles (nan at them).

    Example:
        >>> from funcgrad.scipy.special import gammasgn
        >>> float(gammasgn(2.5)), float(gammasgn(-0.5)), float(gammasgn(-1.5))
        (1.0, -1.0, 1.0)
    """
    x = _inexact(x)
    floor_x = jnp.floor(x)
    odd = jnp.fmod(jnp.abs(floor_x), 2) == 1
    neg = jnp.where((x < 0) & (x == floor_x), jnp.nan, jnp.where(odd, -1.0, 1.0))
    return jnp.where(x > 0, jnp.ones_like(x), jnp.where(x == 0, jnp.ones_like(x), neg))


def gamma(x):
    """The gamma function, as gammasgn(x) * exp(gammaln(x)).

    Example:
        >>> from funcgrad.scipy.special import gamma
        >>> round(float(gamma(5.0)), 3), round(float(gamma(-0.5)), 5)
        (24.0, -3.54491)
    """
    x = _inexact(x)
    return gammasgn(x) * jnp.exp(gammaln(x))


def digamma(x):
    """The logarithmic derivative of the gamma function.

    Example:
        >>> from funcgrad.scipy.special import digamma
        >>> round(float(digamma(1.0)), 6)
        -0.577216
    """
    return lax.digamma(_inexact(x))


def polygamma(n, x):
    """The n-th derivative of digamma (n a non-negative integer).

    Example:
        >>> from funcgrad.scipy.special import polygamma
        >>> round(float(polygamma(1, 1.0)), 5)   # pi^2 / 6
        1.64493
    """
    x = _inexact(x)
    return lax.polygamma(jnp.asarray(n, x.dtype), x)


def zeta(x, q=None):
    """The Hurwitz zeta function sum_k (k + q)^-x (q=None: Riemann's, q = 1).

    Example:
        >>> from funcgrad.scipy.special import zeta
        >>> round(float(zeta(2.0)), 5)
        1.64493
    """
    if q is None:
        q = 1.0
    x, q = _inexact(x, q)
    return lax.zeta(x, q)


def betaln(a, b):
    """log |B(a, b)| = gammaln(a) + gammaln(b) - gammaln(a + b).

    Example:
        >>> from funcgrad.scipy.special import betaln
        >>> round(float(betaln(2.0, 3.0)), 5)   # log(1 / 12)
        -2.48491
    """
    a, b = _inexact(a, b)
    return gammaln(a) + gammaln(b) - gammaln(a + b)


def beta(a, b):
    """The beta function B(a, b) = Gamma(a) Gamma(b) / Gamma(a + b).

    Example:
        >>> from funcgrad.scipy.special import beta
        >>> round(float(beta(2.0, 3.0)), 6)
        0.083333
    """
    a, b = _inexact(a, b)
    sign = gammasgn(a) * gammasgn(b) * gammasgn(a + b)
    return sign * jnp.exp(betaln(a, b))


def gammainc(a, x):
    """The regularized lower incomplete gamma function P(a, x).

    Example:
        >>> from funcgrad.scipy.special import gammainc
        >>> round(float(gammainc(1.0, 1.0)), 5)   # 1 - exp(-1)
        0.63212
    """
    a, x = _inexact(a, x)
    return lax.igamma(a, x)


def gammaincc(a, x):
    """The regularized upper incomplete gamma function Q(a, x) = 1 - P(a, x).

    Example:
        >>> from funcgrad.scipy.special import gammaincc
        >>> round(float(gammaincc(1.0, 1.0)), 6)
        0.367879
    """
    a, x = _inexact(a, x)
    return lax.igammac(a, x)


def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b).

    Example:
        >>> from funcgrad.scipy.special import betainc
        >>> round(float(betainc(2.0, 3.0, 0.5)), 6)
        0.6875
    """
    a, b, x = _inexact(a, b, x)
    return lax.betainc(a, b, x)


def multigammaln(a, d):
    """The log of the multivariate gamma function of dimension d (a Python int).

    Example:
        >>> from funcgrad.scipy.special import multigammaln
        >>> round(float(multigammaln(2.0, 2)), 5)
        0.45158
    """
    d = int(d)
    a = _inexact(a)
    js = jnp.arange(d, dtype=a.dtype)
    terms = gammaln(jnp.expand_dims(a, -1) - js / 2)
    return jnp.sum(terms, axis=-1) + d * (d - 1) / 4 * math.log(math.pi)


def factorial(n, exact=False):
    """n! as Gamma(n + 1) (0 for n < 0); exact=True is not supported (as in JAX).

    Example:
        >>> from funcgrad.scipy.special import factorial
        >>> round(float(factorial(5)), 3)
        120.0
    """
    if exact:
        raise NotImplementedError("factorial with exact=True")
    n = _inexact(n)
    return jnp.where(n < 0, 0, jnp.exp(gammaln(n + 1)))


def comb(N, k, exact=False, repetition=False):
    """The binomial coefficient N choose k, through gammaln (0 outside 0 <= k <= N).

    Example:
        >>> from funcgrad.scipy.special import comb
        >>> round(float(comb(5, 2)), 3)
        10.0
    """
    if exact:
        raise NotImplementedError("comb with exact=True")
    N, k = _inexact(N, k)
    if repetition:
        N = N + k - 1
    val = jnp.exp(gammaln(N + 1) - gammaln(k + 1) - gammaln(N - k + 1))
    return jnp.where((k < 0) | (k > N) | (N < 0), 0, val)


# ---------------------------------------------------------------------------------------------
# error function and the normal distribution
# ---------------------------------------------------------------------------------------------

def erf(x):
    """The error function.

    Example:
        >>> from funcgrad.scipy.special import erf
        >>> round(float(erf(0.5)), 6)
        0.5205
    """
    return lax.erf(_inexact(x))


def erfc(x):
    """The complementary error function 1 - erf(x), accurate in the upper tail.

    Example:
        >>> from funcgrad.scipy.special import erfc
        >>> round(float(erfc(0.5)), 6)
        0.4795
    """
    return lax.erfc(_inexact(x))


def erfinv(x):
    """The inverse error function on (-1, 1).

    Example:
        >>> from funcgrad.scipy.special import erfinv
        >>> round(float(erfinv(0.5)), 6)
        0.476936
    """
    return lax.erf_inv(_inexact(x))


def ndtr(x):
    """The standard normal CDF, from erf near 0 and erfc in the tails.

    Example:
        >>> from funcgrad.scipy.special import ndtr
        >>> float(ndtr(0.0)), round(float(ndtr(1.0)), 6)
        (0.5, 0.841345)
    """
    x = _inexact(x)
    z = x * (1 / math.sqrt(2))
    az = jnp.abs(z)
    y = jnp.where(az < 1 / math.sqrt(2), 1 + lax.erf(z),
                  jnp.where(z > 0, 2 - lax.erfc(az), lax.erfc(az)))
    return 0.5 * y


# Cephes' ndtri: rational approximations in w = p - 1/2 for exp(-2) < p < 1 - exp(-2), and in
# 1/z with z = sqrt(-2 log p) in the tails (z < 8 and z >= 8); highest power first
_NDTRI_P0 = (-5.99633501014107895267e1, 9.80010754185999661536e1, -5.66762857469070293439e1,
             1.39312609387279679503e1, -1.23916583867381258016e0)
_NDTRI_Q0 = (1.0, 1.95448858338141759834e0, 4.67627912898881538453e0, 8.63602421390890590575e1,
             -2.25462687854119370527e2, 2.00260212380060660359e2, -8.20372256168333339912e1,
             1.59056225126211695515e1, -1.18331621121330003142e0)
_NDTRI_P1 = (4.05544892305962419923e0, 3.15251094599893866154e1, 5.71628192246421288162e1,
             4.40805073893200834700e1, 1.46849561928858024014e1, 2.18663306850790267539e0,
             -1.40256079171354495875e-1, -3.50424626827848203418e-2,
             -8.57456785154685413611e-4)
_NDTRI_Q1 = (1.0, 1.57799883256466749731e1, 4.53907635128879210584e1, 4.13172038254672030440e1,
             1.50425385692907503408e1, 2.50464946208309415979e0, -1.42182922854787788574e-1,
             -3.80806407691578277194e-2, -9.33259480895457427372e-4)
_NDTRI_P2 = (3.23774891776946035970e0, 6.91522889068984211695e0, 3.93881025292474443415e0,
             1.33303460815807542389e0, 2.01485389549179081538e-1, 1.23716634817820021358e-2,
             3.01581553508235416007e-4, 2.65806974686737550832e-6, 6.23974539184983293730e-9)
_NDTRI_Q2 = (1.0, 6.02427039364742014255e0, 3.67983563856160859403e0, 1.37702099489081330271e0,
             2.16236993594496635890e-1, 1.34204006088543189037e-2, 3.28014464682127739104e-4,
             2.89247864745380683936e-6, 6.79019408009981274425e-9)


def _poly(coeffs, x):
    out = jnp.full_like(x, coeffs[0])
    for c in coeffs[1:]:
        out = out * x + c
    return out


@custom_jvp
def _ndtri(p):
    big = p > -math.expm1(-2.0)
    q = jnp.where(big, 1 - p, p)                    # the smaller tail
    q = jnp.where(q == 0, jnp.full_like(q, 0.5), q)  # keep the branches finite at 0 and 1
    w = q - 0.5
    ww = w * w
    central = -(w + w * ww * (_poly(_NDTRI_P0, ww) / _poly(_NDTRI_Q0, ww))) * math.sqrt(
        2 * math.pi)
    z = jnp.sqrt(-2.0 * jnp.log(q))
    iz = 1 / z
    first = z - jnp.log(z) / z
    far = first - _poly(_NDTRI_P2, iz) / _poly(_NDTRI_Q2, iz) / z
    near = first - _poly(_NDTRI_P1, iz) / _poly(_NDTRI_Q1, iz) / z
    x = jnp.where(q > math.exp(-2.0), central, jnp.where(z >= 8.0, far, near))
    x = jnp.where(big, x, -x)
    x = jnp.where(p == 0, -jnp.inf, jnp.where(p == 1, jnp.inf, x))
    return jnp.where((p < 0) | (p > 1), jnp.nan, x)


@_ndtri.defjvp
def _ndtri_jvp(primals, tangents):
    # d/dp ndtri(p) = 1 / pdf(ndtri(p)) = sqrt(2 pi) exp(ndtri(p)^2 / 2)
    (p,), (t,) = primals, tangents
    x = _ndtri(p)
    return x, t * math.sqrt(2 * math.pi) * jnp.exp(0.5 * x * x)


def ndtri(p):
    """The inverse of the standard normal CDF (Cephes' algorithm); +-inf at 1 and 0, nan
    outside [0, 1].

    Example:
        >>> from funcgrad.scipy.special import ndtri
        >>> round(float(ndtri(0.975)), 5), round(float(ndtri(1e-10)), 4)
        (1.95996, -6.3613)
    """
    return _ndtri(_inexact(p))


def _log_ndtr_series(x, order):
    """log(ndtr(x)) for x << -1: the asymptotic series to `order` terms."""
    x2 = x * x
    total = jnp.ones_like(x)
    x2n = x2
    for n in range(1, order + 1):
        term = float(np.prod(np.arange(2 * n - 1, 1, -2))) / x2n
        total = total + (term if n % 2 == 0 else -term)
        x2n = x2n * x2
    return -0.5 * x2 - jnp.log(-x) - 0.5 * math.log(2 * math.pi) + jnp.log(total)


def _log_ndtr_impl(x, series_order):
    lower, upper = (-20.0, 8.0) if x.dtype == np.float64 else (-10.0, 5.0)
    # log1p(-ndtr(-x)) for x > 0 (JAX takes log(ndtr(x)) up to `upper`, which loses digits as
    # ndtr(x) nears 1), ~ -ndtr(-x) above `upper`, the asymptotic series below `lower`
    pos = x > 0
    res = ndtr(jnp.where(pos, -x, jnp.maximum(x, lower)))
    mid = jnp.where(pos, jnp.log1p(-res), jnp.log(res))
    return jnp.where(x > upper, -res, jnp.where(x > lower, mid, _log_ndtr_series(
        jnp.minimum(x, lower), series_order)))


@custom_jvp
def _log_ndtr3(x):
    return _log_ndtr_impl(x, 3)


@_log_ndtr3.defjvp
def _log_ndtr3_jvp(primals, tangents):
    # d/dx log ndtr(x) = pdf(x) / ndtr(x), computed in logs
    (x,), (t,) = primals, tangents
    y = _log_ndtr3(x)
    return y, t * jnp.exp(-0.5 * x * x - 0.5 * math.log(2 * math.pi) - y)


def log_ndtr(x, series_order=3):
    """log of the standard normal CDF, accurate far into both tails.

    Args:
        x: float32 or float64 values (integers compute in float32).
        series_order: terms of the asymptotic series used below -10 (float32) / -20
            (float64); a Python int in [0, 30].

    Example:
        >>> from funcgrad.scipy.special import log_ndtr
        >>> round(float(log_ndtr(-30.0)), 3), round(float(log_ndtr(0.0)), 6)
        (-454.321, -0.693147)
    """
    if not isinstance(series_order, int):
        raise TypeError("series_order must be a Python integer.")
    if not 0 <= series_order <= 30:
        raise ValueError("series_order must be in [0, 30].")
    x = _inexact(x)
    if series_order == 3:
        return _log_ndtr3(x)
    return _log_ndtr_impl(x, series_order)


def expit(x):
    """The logistic sigmoid 1 / (1 + exp(-x)).

    Example:
        >>> from funcgrad.scipy.special import expit
        >>> float(expit(0.0))
        0.5
    """
    x = _inexact(x)
    return 1 / (1 + jnp.exp(-x))


def logit(p):
    """log(p / (1 - p)), the inverse of expit.

    Example:
        >>> from funcgrad.scipy.special import logit
        >>> round(float(logit(0.75)), 6)
        1.098612
    """
    p = _inexact(p)
    return jnp.log(p) - jnp.log1p(-p)


# ---------------------------------------------------------------------------------------------
# Bessel functions
# ---------------------------------------------------------------------------------------------

def i0e(x):
    """exp(-|x|) I0(x), the exponentially scaled modified Bessel function of order 0.

    Example:
        >>> from funcgrad.scipy.special import i0e
        >>> round(float(i0e(1.0)), 5)
        0.46576
    """
    return lax.bessel_i0e(_inexact(x))


def i1e(x):
    """exp(-|x|) I1(x), the exponentially scaled modified Bessel function of order 1.

    Example:
        >>> from funcgrad.scipy.special import i1e
        >>> round(float(i1e(1.0)), 5)
        0.20791
    """
    return lax.bessel_i1e(_inexact(x))


def i0(x):
    """I0(x), the modified Bessel function of order 0.

    Example:
        >>> from funcgrad.scipy.special import i0
        >>> round(float(i0(1.0)), 5)
        1.26607
    """
    x = _inexact(x)
    return jnp.exp(jnp.abs(x)) * i0e(x)


def i1(x):
    """I1(x), the modified Bessel function of order 1.

    Example:
        >>> from funcgrad.scipy.special import i1
        >>> round(float(i1(1.0)), 5)
        0.56516
    """
    x = _inexact(x)
    return jnp.exp(jnp.abs(x)) * i1e(x)
