"""The Pareto distribution (jax.scipy.stats.pareto)."""
from __future__ import annotations

from funcgrad import numpy as jnp
from funcgrad.scipy.stats._common import promote


def logpdf(x, b, loc=0, scale=1):
    """log of the density b / z^(b + 1) / scale for z = (x - loc) / scale >= 1; -inf below.

    Example:
        >>> from funcgrad.scipy.stats import pareto
        >>> round(float(pareto.logpdf(2.0, 3.0)), 6)
        -1.673976
    """
    x, b, loc, scale = promote(x, b, loc, scale)
    z = (x - loc) / scale
    val = -(jnp.log(scale / b) + (b + 1) * jnp.log(z))
    return jnp.where(x < loc + scale, -jnp.inf, val)


def pdf(x, b, loc=0, scale=1):
    """The Pareto density.

    Example:
        >>> from funcgrad.scipy.stats import pareto
        >>> round(float(pareto.pdf(2.0, 3.0)), 6)
        0.1875
    """
    return jnp.exp(logpdf(x, b, loc, scale))


def cdf(x, b, loc=0, scale=1):
    """P(X <= x) = 1 - z^-b (0 below loc + scale).

    Example:
        >>> from funcgrad.scipy.stats import pareto
        >>> float(pareto.cdf(2.0, 3.0))
        0.875
    """
    x, b, loc, scale = promote(x, b, loc, scale)
    z = (x - loc) / scale
    return jnp.where(x < loc + scale, 0.0, 1 - z ** -b)


def logcdf(x, b, loc=0, scale=1):
    """log P(X <= x).

    Example:
        >>> from funcgrad.scipy.stats import pareto
        >>> round(float(pareto.logcdf(2.0, 3.0)), 6)
        -0.133531
    """
    x, b, loc, scale = promote(x, b, loc, scale)
    z = (x - loc) / scale
    return jnp.where(x < loc + scale, -jnp.inf, jnp.log1p(-(z ** -b)))


def logsf(x, b, loc=0, scale=1):
    """log P(X > x) = -b log z (0 below loc + scale).

    Example:
        >>> from funcgrad.scipy.stats import pareto
        >>> round(float(pareto.logsf(2.0, 3.0)), 6)
        -2.079442
    """
    x, b, loc, scale = promote(x, b, loc, scale)
    z = (x - loc) / scale
    return jnp.where(x < loc + scale, 0.0, -b * jnp.log(z))


def sf(x, b, loc=0, scale=1):
    """P(X > x).

    Example:
        >>> from funcgrad.scipy.stats import pareto
        >>> float(pareto.sf(2.0, 3.0))
        0.125
    """
    return jnp.exp(logsf(x, b, loc, scale))


def ppf(q, b, loc=0, scale=1):
    """The quantile function loc + scale * (1 - q)^(-1 / b); nan outside [0, 1].

    Example:
        >>> from funcgrad.scipy.stats import pareto
        >>> round(float(pareto.ppf(0.875, 3.0)), 5)
        2.0
    """
    q, b, loc, scale = promote(q, b, loc, scale)
    val = loc + scale * (1 - q) ** (-1 / b)
    return jnp.where(jnp.isnan(q) | (q < 0) | (q > 1), jnp.nan, val)
