"""The Bernoulli distribution (jax.scipy.stats.bernoulli)."""
from __future__ import annotations

from funcgrad import numpy as jnp
from funcgrad.scipy.special import xlog1py, xlogy
from funcgrad.scipy.stats._common import promote


def logpmf(k, p, loc=0):
    """log P(K = k): log p at k = 1, log(1 - p) at k = 0, -inf elsewhere.

    Example:
        >>> from funcgrad.scipy.stats import bernoulli
        >>> round(float(bernoulli.logpmf(1, 0.25)), 6), float(bernoulli.logpmf(2, 0.25))
        (-1.386294, -inf)
    """
    k, p, loc = promote(k, p, loc)
    x = k - loc
    val = xlogy(x, p) + xlog1py(1 - x, -p)
    return jnp.where((x < 0) | (x > 1), -jnp.inf, val)


def pmf(k, p, loc=0):
    """P(K = k).

    Example:
        >>> from funcgrad.scipy.stats import bernoulli
        >>> float(bernoulli.pmf(0, 0.25))
        0.75
    """
    return jnp.exp(logpmf(k, p, loc))


def cdf(k, p):
    """P(K <= k); nan for p outside [0, 1].

    Example:
        >>> from funcgrad.scipy.stats import bernoulli
        >>> [float(bernoulli.cdf(k, 0.25)) for k in (-1, 0, 0.5, 1)]
        [0.0, 0.75, 0.75, 1.0]
    """
    k, p = promote(k, p)
    bad = jnp.isnan(k) | jnp.isnan(p) | (p < 0) | (p > 1)
    return jnp.where(bad, jnp.nan, jnp.where(k < 0, 0, jnp.where(k < 1, 1 - p, 1)))


def ppf(q, p):
    """The smallest k in {0, 1} with P(K <= k) >= q; nan for q or p outside [0, 1].

    Example:
        >>> from funcgrad.scipy.stats import bernoulli
        >>> float(bernoulli.ppf(0.5, 0.25)), float(bernoulli.ppf(0.9, 0.25))
        (0.0, 1.0)
    """
    q, p = promote(q, p)
    bad = jnp.isnan(q) | jnp.isnan(p) | (p < 0) | (p > 1) | (q < 0) | (q > 1)
    return jnp.where(bad, jnp.nan, jnp.where(q <= 1 - p, 0, 1))
