"""The normal distribution (jax.scipy.stats.norm): densities, CDFs and quantiles."""
from __future__ import annotations

import math

from funcgrad import numpy as jnp
from funcgrad.scipy import special
from funcgrad.scipy.stats._common import promote

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def logpdf(x, loc=0, scale=1):
    """log of the normal density at x.

    Example:
        >>> from funcgrad.scipy.stats import norm
        >>> round(float(norm.logpdf(0.0)), 6)
        -0.918939
    """
    x, loc, scale = promote(x, loc, scale)
    z = (x - loc) / scale
    return -0.5 * z * z - jnp.log(scale) - _LOG_SQRT_2PI


def pdf(x, loc=0, scale=1):
    """The normal density at x.

    Example:
        >>> from funcgrad.scipy.stats import norm
        >>> round(float(norm.pdf(1.0, loc=1.0, scale=2.0)), 6)
        0.199471
    """
    return jnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """P(X <= x).

    Example:
        >>> from funcgrad.scipy.stats import norm
        >>> round(float(norm.cdf(1.96)), 5)
        0.975
    """
    x, loc, scale = promote(x, loc, scale)
    return special.ndtr((x - loc) / scale)


def logcdf(x, loc=0, scale=1):
    """log P(X <= x), accurate far into the lower tail.

    Example:
        >>> from funcgrad.scipy.stats import norm
        >>> round(float(norm.logcdf(-20.0)), 3)
        -203.917
    """
    x, loc, scale = promote(x, loc, scale)
    return special.log_ndtr((x - loc) / scale)


def sf(x, loc=0, scale=1):
    """The survival function P(X > x).

    Example:
        >>> from funcgrad.scipy.stats import norm
        >>> round(float(norm.sf(1.96)), 5)
        0.025
    """
    x, loc, scale = promote(x, loc, scale)
    return cdf(-x, -loc, scale)


def logsf(x, loc=0, scale=1):
    """log P(X > x).

    Example:
        >>> from funcgrad.scipy.stats import norm
        >>> round(float(norm.logsf(20.0)), 3)
        -203.917
    """
    x, loc, scale = promote(x, loc, scale)
    return logcdf(-x, -loc, scale)


def ppf(q, loc=0, scale=1):
    """The quantile function: the x with P(X <= x) = q.

    Example:
        >>> from funcgrad.scipy.stats import norm
        >>> round(float(norm.ppf(0.975)), 4)
        1.96
    """
    q, loc, scale = promote(q, loc, scale)
    return special.ndtri(q) * scale + loc


def isf(q, loc=0, scale=1):
    """The inverse survival function: the x with P(X > x) = q.

    Example:
        >>> from funcgrad.scipy.stats import norm
        >>> round(float(norm.isf(0.025)), 4)
        1.96
    """
    q, loc, scale = promote(q, loc, scale)
    return ppf(1 - q, loc, scale)
