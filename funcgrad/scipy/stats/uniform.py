"""The uniform distribution on [loc, loc + scale] (jax.scipy.stats.uniform)."""
from __future__ import annotations

from funcgrad import numpy as jnp
from funcgrad.scipy.stats._common import promote


def logpdf(x, loc=0, scale=1):
    """-log(scale) on [loc, loc + scale], -inf outside.

    Example:
        >>> from funcgrad.scipy.stats import uniform
        >>> round(float(uniform.logpdf(0.5, 0.0, 2.0)), 6), float(uniform.logpdf(3.0))
        (-0.693147, -inf)
    """
    x, loc, scale = promote(x, loc, scale)
    return jnp.where((x < loc) | (x > loc + scale), -jnp.inf, -jnp.log(scale))


def pdf(x, loc=0, scale=1):
    """The uniform density.

    Example:
        >>> from funcgrad.scipy.stats import uniform
        >>> float(uniform.pdf(0.5, 0.0, 2.0))
        0.5
    """
    return jnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """P(X <= x), clipped to [0, 1].

    Example:
        >>> from funcgrad.scipy.stats import uniform
        >>> [float(uniform.cdf(v, 0.0, 2.0)) for v in (-1.0, 0.5, 3.0)]
        [0.0, 0.25, 1.0]
    """
    x, loc, scale = promote(x, loc, scale)
    return jnp.where(x < loc, 0.0, jnp.where(x > loc + scale, 1.0, (x - loc) / scale))


def ppf(q, loc=0, scale=1):
    """The quantile function loc + scale * q; nan outside [0, 1].

    Example:
        >>> from funcgrad.scipy.stats import uniform
        >>> float(uniform.ppf(0.25, 0.0, 2.0))
        0.5
    """
    q, loc, scale = promote(q, loc, scale)
    return jnp.where(jnp.isnan(q) | (q < 0) | (q > 1), jnp.nan, loc + scale * q)
