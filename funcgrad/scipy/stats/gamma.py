"""The gamma distribution (jax.scipy.stats.gamma)."""
from __future__ import annotations

from funcgrad import numpy as jnp
from funcgrad.scipy.special import gammainc, gammaincc, gammaln, xlogy
from funcgrad.scipy.stats._common import promote


def logpdf(x, a, loc=0, scale=1):
    """log of the gamma density with shape a; -inf below loc.

    Example:
        >>> from funcgrad.scipy.stats import gamma
        >>> round(float(gamma.logpdf(2.0, 3.0)), 5)
        -1.30685
    """
    x, a, loc, scale = promote(x, a, loc, scale)
    ok = x >= loc
    y = jnp.where(ok, (x - loc) / scale, 1)
    return jnp.where(ok, xlogy(a - 1, y) - y - gammaln(a) - jnp.log(scale), -jnp.inf)


def pdf(x, a, loc=0, scale=1):
    """The gamma density.

    Example:
        >>> from funcgrad.scipy.stats import gamma
        >>> round(float(gamma.pdf(2.0, 3.0)), 6)
        0.270671
    """
    return jnp.exp(logpdf(x, a, loc, scale))


def cdf(x, a, loc=0, scale=1):
    """P(X <= x), the regularized lower incomplete gamma function.

    Example:
        >>> from funcgrad.scipy.stats import gamma
        >>> round(float(gamma.cdf(2.0, 3.0)), 5)
        0.32332
    """
    x, a, loc, scale = promote(x, a, loc, scale)
    return gammainc(a, jnp.clip((x - loc) / scale, 0, jnp.inf))


def logcdf(x, a, loc=0, scale=1):
    """log P(X <= x).

    Example:
        >>> from funcgrad.scipy.stats import gamma
        >>> round(float(gamma.logcdf(2.0, 3.0)), 4)
        -1.1291
    """
    return jnp.log(cdf(x, a, loc, scale))


def sf(x, a, loc=0, scale=1):
    """P(X > x) (1 below loc).

    Example:
        >>> from funcgrad.scipy.stats import gamma
        >>> round(float(gamma.sf(2.0, 3.0)), 5)
        0.67668
    """
    x, a, loc, scale = promote(x, a, loc, scale)
    y = (x - loc) / scale
    return jnp.where(y < 0, 1.0, gammaincc(a, jnp.maximum(y, 0)))


def logsf(x, a, loc=0, scale=1):
    """log P(X > x).

    Example:
        >>> from funcgrad.scipy.stats import gamma
        >>> round(float(gamma.logsf(2.0, 3.0)), 4)
        -0.3906
    """
    return jnp.log(sf(x, a, loc, scale))
