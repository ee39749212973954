"""The logistic distribution (jax.scipy.stats.logistic)."""
from __future__ import annotations

from funcgrad import numpy as jnp
from funcgrad.scipy.special import expit, logit
from funcgrad.scipy.stats._common import promote


def logpdf(x, loc=0, scale=1):
    """log of the logistic density, -2 log(2 cosh(z / 2)) - log(scale), computed stably.

    Example:
        >>> from funcgrad.scipy.stats import logistic
        >>> round(float(logistic.logpdf(0.0)), 6)
        -1.386294
    """
    x, loc, scale = promote(x, loc, scale)
    half = (x - loc) / scale / 2
    return -2 * jnp.logaddexp(half, -half) - jnp.log(scale)


def pdf(x, loc=0, scale=1):
    """The logistic density.

    Example:
        >>> from funcgrad.scipy.stats import logistic
        >>> float(logistic.pdf(0.0))
        0.25
    """
    return jnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """P(X <= x) = expit(z).

    Example:
        >>> from funcgrad.scipy.stats import logistic
        >>> float(logistic.cdf(0.0))
        0.5
    """
    x, loc, scale = promote(x, loc, scale)
    return expit((x - loc) / scale)


def sf(x, loc=0, scale=1):
    """P(X > x) = expit(-z).

    Example:
        >>> from funcgrad.scipy.stats import logistic
        >>> round(float(logistic.sf(1.0)), 6)
        0.268941
    """
    x, loc, scale = promote(x, loc, scale)
    return expit(-(x - loc) / scale)


def ppf(q, loc=0, scale=1):
    """The quantile function loc + scale * logit(q).

    Example:
        >>> from funcgrad.scipy.stats import logistic
        >>> round(float(logistic.ppf(0.75)), 6)
        1.098612
    """
    q, loc, scale = promote(q, loc, scale)
    return logit(q) * scale + loc


def isf(q, loc=0, scale=1):
    """The inverse survival function loc - scale * logit(q).

    Example:
        >>> from funcgrad.scipy.stats import logistic
        >>> round(float(logistic.isf(0.25)), 6)
        1.098612
    """
    q, loc, scale = promote(q, loc, scale)
    return -logit(q) * scale + loc
