"""The right-skewed Gumbel distribution (jax.scipy.stats.gumbel_r)."""
from __future__ import annotations

from funcgrad import numpy as jnp
from funcgrad.scipy.stats._common import promote


def _z(x, loc, scale):
    return (x - loc) / scale


def logpdf(x, loc=0, scale=1):
    """log of the density exp(-(z + exp(-z))) / scale; nan for scale <= 0.

    Example:
        >>> from funcgrad.scipy.stats import gumbel_r
        >>> float(gumbel_r.logpdf(0.0))
        -1.0
    """
    x, loc, scale = promote(x, loc, scale)
    z = _z(x, loc, scale)
    return jnp.where(scale > 0, -jnp.log(scale) - (z + jnp.exp(-z)), jnp.nan)


def pdf(x, loc=0, scale=1):
    """The density.

    Example:
        >>> from funcgrad.scipy.stats import gumbel_r
        >>> round(float(gumbel_r.pdf(0.0)), 6)
        0.367879
    """
    return jnp.exp(logpdf(x, loc, scale))


def logcdf(x, loc=0, scale=1):
    """log P(X <= x) = -exp(-z).

    Example:
        >>> from funcgrad.scipy.stats import gumbel_r
        >>> float(gumbel_r.logcdf(0.0))
        -1.0
    """
    x, loc, scale = promote(x, loc, scale)
    return jnp.where(scale > 0, -jnp.exp(-_z(x, loc, scale)), jnp.nan)


def cdf(x, loc=0, scale=1):
    """P(X <= x) = exp(-exp(-z)).

    Example:
        >>> from funcgrad.scipy.stats import gumbel_r
        >>> round(float(gumbel_r.cdf(0.0)), 6)
        0.367879
    """
    return jnp.exp(logcdf(x, loc, scale))


def sf(x, loc=0, scale=1):
    """P(X > x) = -expm1(-exp(-z)).

    Example:
        >>> from funcgrad.scipy.stats import gumbel_r
        >>> round(float(gumbel_r.sf(0.0)), 6)
        0.632121
    """
    x, loc, scale = promote(x, loc, scale)
    return jnp.where(scale > 0, -jnp.expm1(-jnp.exp(-_z(x, loc, scale))), jnp.nan)


def logsf(x, loc=0, scale=1):
    """log P(X > x).

    Example:
        >>> from funcgrad.scipy.stats import gumbel_r
        >>> round(float(gumbel_r.logsf(0.0)), 6)
        -0.458675
    """
    return jnp.log(sf(x, loc, scale))


def ppf(p, loc=0, scale=1):
    """The quantile function loc - scale * log(-log p); nan outside (0, 1).

    Example:
        >>> from funcgrad.scipy.stats import gumbel_r
        >>> round(float(gumbel_r.ppf(0.5)), 6)
        0.366513
    """
    p, loc, scale = promote(p, loc, scale)
    return jnp.where((p > 0) & (p < 1), loc - scale * jnp.log(-jnp.log(p)), jnp.nan)
