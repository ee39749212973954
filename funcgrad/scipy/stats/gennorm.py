"""The generalized normal distribution (jax.scipy.stats.gennorm): density ~ exp(-|x|^beta)."""
from __future__ import annotations

from funcgrad import numpy as jnp
from funcgrad.scipy.special import gammainc, gammaln
from funcgrad.scipy.stats._common import promote


def logpdf(x, beta):
    """log(beta / 2) - gammaln(1 / beta) - |x|^beta.

    Example:
        >>> from funcgrad.scipy.stats import gennorm
        >>> round(float(gennorm.logpdf(0.5, 2.0)), 6)
        -0.822365
    """
    x, beta = promote(x, beta)
    return jnp.log(0.5 * beta) - gammaln(1 / beta) - jnp.abs(x) ** beta


def pdf(x, beta):
    """The generalized normal density.

    Example:
        >>> from funcgrad.scipy.stats import gennorm
        >>> round(float(gennorm.pdf(0.0, 1.0)), 6)
        0.5
    """
    return jnp.exp(logpdf(x, beta))


def cdf(x, beta):
    """P(X <= x) = (1 + sign(x) P(1 / beta, |x|^beta)) / 2.

    Example:
        >>> from funcgrad.scipy.stats import gennorm
        >>> round(float(gennorm.cdf(1.0, 1.0)), 6)
        0.81606
    """
    x, beta = promote(x, beta)
    return 0.5 * (1 + jnp.sign(x) * gammainc(1 / beta, jnp.abs(x) ** beta))
