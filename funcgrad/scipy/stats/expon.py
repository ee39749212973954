"""The exponential distribution (jax.scipy.stats.expon)."""
from __future__ import annotations

from funcgrad import numpy as jnp
from funcgrad.scipy.stats._common import promote


def logpdf(x, loc=0, scale=1):
    """log of the exponential density; -inf below loc.

    Example:
        >>> from funcgrad.scipy.stats import expon
        >>> float(expon.logpdf(2.0))
        -2.0
    """
    x, loc, scale = promote(x, loc, scale)
    return jnp.where(x < loc, -jnp.inf, -(x - loc) / scale - jnp.log(scale))


def pdf(x, loc=0, scale=1):
    """The exponential density.

    Example:
        >>> from funcgrad.scipy.stats import expon
        >>> round(float(expon.pdf(1.0)), 6)
        0.367879
    """
    return jnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """P(X <= x) = 1 - exp(-(x - loc) / scale).

    Example:
        >>> from funcgrad.scipy.stats import expon
        >>> round(float(expon.cdf(1.0)), 6)
        0.632121
    """
    x, loc, scale = promote(x, loc, scale)
    return jnp.where(x < loc, 0.0, -jnp.expm1((loc - x) / scale))


def logsf(x, loc=0, scale=1):
    """log P(X > x) = -(x - loc) / scale (0 below loc).

    Example:
        >>> from funcgrad.scipy.stats import expon
        >>> float(expon.logsf(3.0))
        -3.0
    """
    x, loc, scale = promote(x, loc, scale)
    return jnp.where(x < loc, 0.0, (loc - x) / scale)


def sf(x, loc=0, scale=1):
    """P(X > x).

    Example:
        >>> from funcgrad.scipy.stats import expon
        >>> round(float(expon.sf(1.0)), 6)
        0.367879
    """
    return jnp.exp(logsf(x, loc, scale))


def logcdf(x, loc=0, scale=1):
    """log P(X <= x).

    Example:
        >>> from funcgrad.scipy.stats import expon
        >>> round(float(expon.logcdf(1.0)), 6)
        -0.458675
    """
    return jnp.log1p(-sf(x, loc, scale))


def ppf(q, loc=0, scale=1):
    """The quantile function loc - scale * log(1 - q); nan outside [0, 1].

    Example:
        >>> from funcgrad.scipy.stats import expon
        >>> round(float(expon.ppf(0.5)), 6)
        0.693147
    """
    q, loc, scale = promote(q, loc, scale)
    return jnp.where(jnp.isnan(q) | (q < 0) | (q > 1), jnp.nan, loc - scale * jnp.log1p(-q))
