"""The Poisson distribution (jax.scipy.stats.poisson)."""
from __future__ import annotations

from funcgrad import numpy as jnp
from funcgrad.scipy.special import gammaincc, gammaln, xlogy
from funcgrad.scipy.stats._common import promote


def logpmf(k, mu, loc=0):
    """log P(K = k) = k log mu - log k! - mu; -inf below loc and at non-integer k.

    Example:
        >>> from funcgrad.scipy.stats import poisson
        >>> round(float(poisson.logpmf(2, 3.0)), 6)
        -1.495922
    """
    k, mu, loc = promote(k, mu, loc)
    x = k - loc
    val = xlogy(x, mu) - gammaln(x + 1) - mu
    return jnp.where((x < 0) | (jnp.round(k) != k), -jnp.inf, val)


def pmf(k, mu, loc=0):
    """P(K = k).

    Example:
        >>> from funcgrad.scipy.stats import poisson
        >>> round(float(poisson.pmf(2, 3.0)), 6)
        0.224042
    """
    return jnp.exp(logpmf(k, mu, loc))


def cdf(k, mu, loc=0):
    """P(K <= k), the regularized upper incomplete gamma function at (floor(k) + 1, mu).

    Example:
        >>> from funcgrad.scipy.stats import poisson
        >>> round(float(poisson.cdf(2, 3.0)), 5)
        0.42319
    """
    k, mu, loc = promote(k, mu, loc)
    x = k - loc
    return jnp.where(x < 0, 0.0, gammaincc(jnp.floor(1 + jnp.maximum(x, 0)), mu))
