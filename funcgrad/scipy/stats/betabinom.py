"""The beta-binomial distribution (jax.scipy.stats.betabinom)."""
from __future__ import annotations

from funcgrad import numpy as jnp
from funcgrad.scipy.special import betaln
from funcgrad.scipy.stats._common import promote


def logpmf(k, n, a, b, loc=0):
    """log P(K = k) for n trials with a Beta(a, b) success probability.

    Example:
        >>> from funcgrad.scipy.stats import betabinom
        >>> round(float(betabinom.logpmf(2, 5, 2.0, 3.0)), 5)
        -1.43508
    """
    k, n, a, b, loc = promote(k, n, a, b, loc)
    y = jnp.floor(k) - loc
    log_comb = -(jnp.log1p(n) + betaln(n - y + 1, y + 1))
    val = log_comb + betaln(y + a, n - y + b) - betaln(a, b)
    val = jnp.where((y == 0) & (n == 0), 0.0, val)
    val = jnp.where((y < -loc) | (y > n) | (y + a <= 0), -jnp.inf, val)
    return jnp.where((n < 0) | (a <= 0) | (b <= 0), jnp.nan, val)


def pmf(k, n, a, b, loc=0):
    """P(K = k).

    Example:
        >>> from funcgrad.scipy.stats import betabinom
        >>> round(float(betabinom.pmf(2, 5, 2.0, 3.0)), 5)
        0.2381
    """
    return jnp.exp(logpmf(k, n, a, b, loc))
