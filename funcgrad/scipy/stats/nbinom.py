"""The negative binomial distribution (jax.scipy.stats.nbinom): failures before n
successes."""
from __future__ import annotations

from funcgrad import numpy as jnp
from funcgrad.scipy.special import gammaln, xlogy
from funcgrad.scipy.stats._common import promote


def logpmf(k, n, p, loc=0):
    """log P(K = k); -inf below loc.

    Example:
        >>> from funcgrad.scipy.stats import nbinom
        >>> round(float(nbinom.logpmf(2, 3, 0.5)), 5)
        -1.67398
    """
    k, n, p, loc = promote(k, n, p, loc)
    y = k - loc
    val = gammaln(y + n) - gammaln(n) - gammaln(y + 1) + xlogy(n, p) + xlogy(y, 1 - p)
    return jnp.where(k < loc, -jnp.inf, val)


def pmf(k, n, p, loc=0):
    """P(K = k).

    Example:
        >>> from funcgrad.scipy.stats import nbinom
        >>> round(float(nbinom.pmf(2, 3, 0.5)), 6)
        0.1875
    """
    return jnp.exp(logpmf(k, n, p, loc))
