"""The wrapped Cauchy distribution on [0, 2 pi] (jax.scipy.stats.wrapcauchy)."""
from __future__ import annotations

import math

from funcgrad import numpy as jnp
from funcgrad.scipy.stats._common import promote


def logpdf(x, c):
    """log((1 - c^2) / (2 pi (1 + c^2 - 2 c cos x))) on [0, 2 pi] (-inf outside); nan unless
    0 < c < 1.

    Example:
        >>> from funcgrad.scipy.stats import wrapcauchy
        >>> round(float(wrapcauchy.logpdf(1.0, 0.5)), 5)
        -1.78264
    """
    x, c = promote(x, c)
    val = jnp.log(1 - c * c) - math.log(2 * math.pi) - jnp.log(1 + c * c - 2 * c * jnp.cos(x))
    val = jnp.where((x >= 0) & (x <= 2 * math.pi), val, -jnp.inf)
    return jnp.where((c > 0) & (c < 1), val, jnp.nan)


def pdf(x, c):
    """The wrapped Cauchy density.

    Example:
        >>> from funcgrad.scipy.stats import wrapcauchy
        >>> round(float(wrapcauchy.pdf(1.0, 0.5)), 5)
        0.16819
    """
    return jnp.exp(logpdf(x, c))
