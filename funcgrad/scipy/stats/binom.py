"""The binomial distribution (jax.scipy.stats.binom)."""
from __future__ import annotations

from funcgrad import numpy as jnp
from funcgrad.scipy.special import gammaln, xlog1py, xlogy
from funcgrad.scipy.stats._common import promote


def logpmf(k, n, p, loc=0):
    """log P(K = k) of n trials with success probability p; -inf outside [loc, loc + n].

    Example:
        >>> from funcgrad.scipy.stats import binom
        >>> round(float(binom.logpmf(3, 10, 0.5)), 5)
        -2.14398
    """
    k, n, p, loc = promote(k, n, p, loc)
    y = k - loc
    log_comb = gammaln(n + 1) - gammaln(y + 1) - gammaln(n - y + 1)
    linear = xlogy(y, p) + xlog1py(n - y, -p)
    val = jnp.where(((y == 0) & (n == 0)) | (linear == 0), 0.0, log_comb + linear)
    return jnp.where((k >= loc) & (k < loc + n + 1), val, -jnp.inf)


def pmf(k, n, p, loc=0):
    """P(K = k).

    Example:
        >>> from funcgrad.scipy.stats import binom
        >>> round(float(binom.pmf(3, 10, 0.5)), 6)
        0.117188
    """
    return jnp.exp(logpmf(k, n, p, loc))
