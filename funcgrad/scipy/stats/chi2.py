"""The chi-squared distribution (jax.scipy.stats.chi2)."""
from __future__ import annotations

import math

from funcgrad import numpy as jnp
from funcgrad.scipy.special import gammainc, gammaincc, gammaln
from funcgrad.scipy.stats._common import promote


def logpdf(x, df, loc=0, scale=1):
    """log of the chi-squared density with df degrees of freedom; -inf below loc.

    Example:
        >>> from funcgrad.scipy.stats import chi2
        >>> round(float(chi2.logpdf(2.0, 3.0)), 4)
        -1.5724
    """
    x, df, loc, scale = promote(x, df, loc, scale)
    y = (x - loc) / scale
    half = df / 2
    val = (half - 1) * jnp.log(y) - y / 2 - gammaln(half) - half * math.log(2) - jnp.log(scale)
    return jnp.where(x < loc, -jnp.inf, val)


def pdf(x, df, loc=0, scale=1):
    """The chi-squared density.

    Example:
        >>> from funcgrad.scipy.stats import chi2
        >>> round(float(chi2.pdf(2.0, 3.0)), 6)
        0.207554
    """
    return jnp.exp(logpdf(x, df, loc, scale))


def _half_y(x, loc, scale):
    return jnp.clip((x - loc) / (2 * scale), 0, jnp.inf)


def cdf(x, df, loc=0, scale=1):
    """P(X <= x), the regularized lower incomplete gamma function at (df / 2, x / 2).

    Example:
        >>> from funcgrad.scipy.stats import chi2
        >>> round(float(chi2.cdf(2.0, 3.0)), 5)
        0.42759
    """
    x, df, loc, scale = promote(x, df, loc, scale)
    return gammainc(df / 2, _half_y(x, loc, scale))


def logcdf(x, df, loc=0, scale=1):
    """log P(X <= x).

    Example:
        >>> from funcgrad.scipy.stats import chi2
        >>> round(float(chi2.logcdf(2.0, 3.0)), 4)
        -0.8496
    """
    return jnp.log(cdf(x, df, loc, scale))


def sf(x, df, loc=0, scale=1):
    """P(X > x).

    Example:
        >>> from funcgrad.scipy.stats import chi2
        >>> round(float(chi2.sf(2.0, 3.0)), 5)
        0.57241
    """
    x, df, loc, scale = promote(x, df, loc, scale)
    return gammaincc(df / 2, _half_y(x, loc, scale))


def logsf(x, df, loc=0, scale=1):
    """log P(X > x).

    Example:
        >>> from funcgrad.scipy.stats import chi2
        >>> round(float(chi2.logsf(2.0, 3.0)), 4)
        -0.5579
    """
    return jnp.log(sf(x, df, loc, scale))
