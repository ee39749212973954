"""The von Mises distribution on the circle (jax.scipy.stats.vonmises)."""
from __future__ import annotations

import math

from funcgrad import numpy as jnp
from funcgrad.scipy.special import i0e
from funcgrad.scipy.stats._common import promote


def logpdf(x, kappa):
    """kappa (cos x - 1) - log(2 pi i0e(kappa)); nan for kappa <= 0.

    Example:
        >>> from funcgrad.scipy.stats import vonmises
        >>> round(float(vonmises.logpdf(0.0, 1.0)), 5)
        -1.07379
    """
    x, kappa = promote(x, kappa)
    val = kappa * (jnp.cos(x) - 1) - jnp.log(2 * math.pi * i0e(kappa))
    return jnp.where(kappa > 0, val, jnp.nan)


def pdf(x, kappa):
    """The von Mises density.

    Example:
        >>> from funcgrad.scipy.stats import vonmises
        >>> round(float(vonmises.pdf(0.0, 1.0)), 5)
        0.34171
    """
    return jnp.exp(logpdf(x, kappa))
