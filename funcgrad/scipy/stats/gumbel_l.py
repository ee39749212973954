"""The left-skewed Gumbel distribution (jax.scipy.stats.gumbel_l): X = -Y, Y ~ gumbel_r."""
from __future__ import annotations

from funcgrad import numpy as jnp
from funcgrad.scipy.stats import gumbel_r
from funcgrad.scipy.stats._common import promote


def logpdf(x, loc=0, scale=1):
    """log of the density exp(z - exp(z)) / scale; nan for scale <= 0.

    Example:
        >>> from funcgrad.scipy.stats import gumbel_l
        >>> float(gumbel_l.logpdf(0.0))
        -1.0
    """
    x, loc, scale = promote(x, loc, scale)
    return gumbel_r.logpdf(-x, -loc, scale)


def pdf(x, loc=0, scale=1):
    """The density.

    Example:
        >>> from funcgrad.scipy.stats import gumbel_l
        >>> round(float(gumbel_l.pdf(0.0)), 6)
        0.367879
    """
    return jnp.exp(logpdf(x, loc, scale))


def logcdf(x, loc=0, scale=1):
    """log P(X <= x) = log(1 - exp(-exp(z))).

    Example:
        >>> from funcgrad.scipy.stats import gumbel_l
        >>> round(float(gumbel_l.logcdf(0.0)), 6)
        -0.458675
    """
    x, loc, scale = promote(x, loc, scale)
    return gumbel_r.logsf(-x, -loc, scale)


def cdf(x, loc=0, scale=1):
    """P(X <= x) = 1 - exp(-exp(z)).

    Example:
        >>> from funcgrad.scipy.stats import gumbel_l
        >>> round(float(gumbel_l.cdf(0.0)), 6)
        0.632121
    """
    x, loc, scale = promote(x, loc, scale)
    return gumbel_r.sf(-x, -loc, scale)


def sf(x, loc=0, scale=1):
    """P(X > x) = exp(-exp(z)).

    Example:
        >>> from funcgrad.scipy.stats import gumbel_l
        >>> round(float(gumbel_l.sf(0.0)), 6)
        0.367879
    """
    x, loc, scale = promote(x, loc, scale)
    return gumbel_r.cdf(-x, -loc, scale)


def logsf(x, loc=0, scale=1):
    """log P(X > x) = -exp(z).

    Example:
        >>> from funcgrad.scipy.stats import gumbel_l
        >>> float(gumbel_l.logsf(0.0))
        -1.0
    """
    x, loc, scale = promote(x, loc, scale)
    return gumbel_r.logcdf(-x, -loc, scale)


def ppf(p, loc=0, scale=1):
    """The quantile function loc + scale * log(-log(1 - p)); nan outside (0, 1).

    Example:
        >>> from funcgrad.scipy.stats import gumbel_l
        >>> round(float(gumbel_l.ppf(0.5)), 6)
        -0.366513
    """
    p, loc, scale = promote(p, loc, scale)
    return -gumbel_r.ppf(1 - p, -loc, scale)
