"""The beta distribution (jax.scipy.stats.beta)."""
from __future__ import annotations

from funcgrad import numpy as jnp
from funcgrad.scipy.special import betainc, betaln, xlog1py, xlogy
from funcgrad.scipy.stats._common import promote


def logpdf(x, a, b, loc=0, scale=1):
    """log of the beta density; -inf outside [loc, loc + scale], nan for a, b or scale <= 0.

    Example:
        >>> from funcgrad.scipy.stats import beta
        >>> round(float(beta.logpdf(0.5, 2.0, 3.0)), 5)
        0.40547
    """
    x, a, b, loc, scale = promote(x, a, b, loc, scale)
    y = (x - loc) / scale
    val = xlogy(a - 1, y) + xlog1py(b - 1, -y) - betaln(a, b) - jnp.log(scale)
    val = jnp.where((x < loc) | (x > loc + scale), -jnp.inf, val)
    return jnp.where((a <= 0) | (b <= 0) | (scale <= 0), jnp.nan, val)


def pdf(x, a, b, loc=0, scale=1):
    """The beta density.

    Example:
        >>> from funcgrad.scipy.stats import beta
        >>> round(float(beta.pdf(0.5, 2.0, 3.0)), 4)
        1.5
    """
    return jnp.exp(logpdf(x, a, b, loc, scale))


def _y(x, loc, scale):
    return jnp.clip((x - loc) / scale, 0, 1)


def cdf(x, a, b, loc=0, scale=1):
    """P(X <= x), the regularized incomplete beta function.

    Example:
        >>> from funcgrad.scipy.stats import beta
        >>> round(float(beta.cdf(0.5, 2.0, 3.0)), 6)
        0.6875
    """
    x, a, b, loc, scale = promote(x, a, b, loc, scale)
    return betainc(a, b, _y(x, loc, scale))


def logcdf(x, a, b, loc=0, scale=1):
    """log P(X <= x).

    Example:
        >>> from funcgrad.scipy.stats import beta
        >>> round(float(beta.logcdf(0.5, 2.0, 3.0)), 5)
        -0.37469
    """
    return jnp.log(cdf(x, a, b, loc, scale))


def sf(x, a, b, loc=0, scale=1):
    """P(X > x).

    Example:
        >>> from funcgrad.scipy.stats import beta
        >>> round(float(beta.sf(0.5, 2.0, 3.0)), 6)
        0.3125
    """
    x, a, b, loc, scale = promote(x, a, b, loc, scale)
    return betainc(b, a, 1 - _y(x, loc, scale))


def logsf(x, a, b, loc=0, scale=1):
    """log P(X > x).

    Example:
        >>> from funcgrad.scipy.stats import beta
        >>> round(float(beta.logsf(0.5, 2.0, 3.0)), 5)
        -1.16315
    """
    return jnp.log(sf(x, a, b, loc, scale))
