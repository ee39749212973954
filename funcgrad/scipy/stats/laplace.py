"""The Laplace distribution (jax.scipy.stats.laplace)."""
from __future__ import annotations

from funcgrad import numpy as jnp
from funcgrad.scipy.stats._common import promote


def logpdf(x, loc=0, scale=1):
    """log of the density exp(-|x - loc| / scale) / (2 scale).

    Example:
        >>> from funcgrad.scipy.stats import laplace
        >>> round(float(laplace.logpdf(1.0)), 6)
        -1.693147
    """
    x, loc, scale = promote(x, loc, scale)
    return -(jnp.abs(x - loc) / scale + jnp.log(2 * scale))


def pdf(x, loc=0, scale=1):
    """The Laplace density.

    Example:
        >>> from funcgrad.scipy.stats import laplace
        >>> float(laplace.pdf(0.0))
        0.5
    """
    return jnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """P(X <= x).

    Example:
        >>> from funcgrad.scipy.stats import laplace
        >>> round(float(laplace.cdf(1.0)), 6)
        0.81606
    """
    x, loc, scale = promote(x, loc, scale)
    z = (x - loc) / scale
    return jnp.where(z <= 0, 0.5 * jnp.exp(jnp.minimum(z, 0)),
                     1 - 0.5 * jnp.exp(-jnp.maximum(z, 0)))
