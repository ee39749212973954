"""The Cauchy distribution (jax.scipy.stats.cauchy)."""
from __future__ import annotations

import math

from funcgrad import numpy as jnp
from funcgrad.scipy.stats._common import promote


def logpdf(x, loc=0, scale=1):
    """log of the Cauchy density.

    Example:
        >>> from funcgrad.scipy.stats import cauchy
        >>> round(float(cauchy.logpdf(1.0)), 6)
        -1.837877
    """
    x, loc, scale = promote(x, loc, scale)
    z = (x - loc) / scale
    return -(jnp.log(math.pi * scale) + jnp.log1p(z * z))


def pdf(x, loc=0, scale=1):
    """The Cauchy density.

    Example:
        >>> from funcgrad.scipy.stats import cauchy
        >>> round(float(cauchy.pdf(0.0)), 6)
        0.31831
    """
    return jnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """P(X <= x) = 1/2 + arctan(z) / pi.

    Example:
        >>> from funcgrad.scipy.stats import cauchy
        >>> float(cauchy.cdf(1.0))
        0.75
    """
    x, loc, scale = promote(x, loc, scale)
    return 0.5 + jnp.arctan((x - loc) / scale) / math.pi


def logcdf(x, loc=0, scale=1):
    """log P(X <= x).

    Example:
        >>> from funcgrad.scipy.stats import cauchy
        >>> round(float(cauchy.logcdf(1.0)), 6)
        -0.287682
    """
    return jnp.log(cdf(x, loc, scale))


def sf(x, loc=0, scale=1):
    """P(X > x).

    Example:
        >>> from funcgrad.scipy.stats import cauchy
        >>> float(cauchy.sf(1.0))
        0.25
    """
    x, loc, scale = promote(x, loc, scale)
    return cdf(-x, -loc, scale)


def logsf(x, loc=0, scale=1):
    """log P(X > x).

    Example:
        >>> from funcgrad.scipy.stats import cauchy
        >>> round(float(cauchy.logsf(1.0)), 6)
        -1.386294
    """
    x, loc, scale = promote(x, loc, scale)
    return logcdf(-x, -loc, scale)


def ppf(q, loc=0, scale=1):
    """The quantile function loc + scale * tan(pi (q - 1/2)).

    Example:
        >>> from funcgrad.scipy.stats import cauchy
        >>> round(float(cauchy.ppf(0.75)), 5)
        1.0
    """
    q, loc, scale = promote(q, loc, scale)
    return jnp.tan(math.pi * q - math.pi / 2) * scale + loc


def isf(q, loc=0, scale=1):
    """The inverse survival function loc + scale * tan(pi (1/2 - q)).

    Example:
        >>> from funcgrad.scipy.stats import cauchy
        >>> round(float(cauchy.isf(0.25)), 5)
        1.0
    """
    q, loc, scale = promote(q, loc, scale)
    return jnp.tan(math.pi / 2 - math.pi * q) * scale + loc
