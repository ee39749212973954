"""Student's t distribution (jax.scipy.stats.t)."""
from __future__ import annotations

import math

from funcgrad import numpy as jnp
from funcgrad.scipy.special import gammaln
from funcgrad.scipy.stats._common import promote


def logpdf(x, df, loc=0, scale=1):
    """log of Student's t density with df degrees of freedom.

    Example:
        >>> from funcgrad.scipy.stats import t
        >>> round(float(t.logpdf(0.0, 1.0)), 5)   # the Cauchy density at 0
        -1.14473
    """
    x, df, loc, scale = promote(x, df, loc, scale)
    z = (x - loc) / scale
    half_up = (df + 1) / 2
    log_norm = gammaln(df / 2) - gammaln(half_up) + 0.5 * jnp.log(math.pi * df * scale * scale)
    return -(log_norm + half_up * jnp.log1p(z * z / df))


def pdf(x, df, loc=0, scale=1):
    """Student's t density.

    Example:
        >>> from funcgrad.scipy.stats import t
        >>> round(float(t.pdf(0.0, 1.0)), 6)
        0.31831
    """
    return jnp.exp(logpdf(x, df, loc, scale))
