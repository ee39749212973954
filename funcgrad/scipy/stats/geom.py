"""The geometric distribution (jax.scipy.stats.geom): trials up to the first success."""
from __future__ import annotations

from funcgrad import numpy as jnp
from funcgrad.scipy.special import xlog1py
from funcgrad.scipy.stats._common import promote


def logpmf(k, p, loc=0):
    """log P(K = k) = (k - 1) log(1 - p) + log p for k >= 1 (shifted by loc); -inf below.

    Example:
        >>> from funcgrad.scipy.stats import geom
        >>> round(float(geom.logpmf(3, 0.5)), 6)
        -2.079442
    """
    k, p, loc = promote(k, p, loc)
    x = k - loc
    return jnp.where(x <= 0, -jnp.inf, xlog1py(x - 1, -p) + jnp.log(p))


def pmf(k, p, loc=0):
    """P(K = k).

    Example:
        >>> from funcgrad.scipy.stats import geom
        >>> float(geom.pmf(3, 0.5))
        0.125
    """
    return jnp.exp(logpmf(k, p, loc))
