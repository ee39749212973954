"""The multivariate normal distribution (jax.scipy.stats.multivariate_normal)."""
from __future__ import annotations

import math

from funcgrad import numpy as jnp
from funcgrad.scipy.linalg import solve_triangular
from funcgrad.scipy.stats._common import promote


def logpdf(x, mean, cov, allow_singular=None):
    """log of the multivariate normal density.

    Args:
        x: points, shape (..., n) (or (...) when mean is a scalar).
        mean: the mean, shape (..., n), or a scalar for a one-dimensional distribution.
        cov: the covariance: (..., n, n), or a scalar (a multiple of the identity).
        allow_singular: not supported (as in JAX); must be None.

    Returns:
        The log densities, shape (...).

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.scipy.stats import multivariate_normal
        >>> round(float(multivariate_normal.logpdf(jnp.zeros(2), jnp.zeros(2), jnp.eye(2))), 6)
        -1.837877
    """
    if allow_singular is not None:
        raise NotImplementedError("allow_singular argument of multivariate_normal.logpdf")
    x, mean, cov = promote(x, mean, cov)
    log2pi = math.log(2 * math.pi)
    if mean.ndim == 0:
        return -0.5 * (x - mean) ** 2 / cov - 0.5 * (log2pi + jnp.log(cov))
    n = mean.shape[-1]
    y = x - mean
    if cov.ndim == 0:
        return -0.5 * jnp.sum(y * y, axis=-1) / cov - n / 2 * (log2pi + jnp.log(cov))
    if cov.ndim < 2 or tuple(cov.shape[-2:]) != (n, n):
        raise ValueError("multivariate_normal.logpdf got incompatible shapes")
    chol = jnp.linalg.cholesky(cov)
    batch = jnp.broadcast_shapes(tuple(y.shape[:-1]), tuple(chol.shape[:-2]))
    chol = jnp.broadcast_to(chol, batch + (n, n))
    y = jnp.broadcast_to(y, batch + (n,))
    z = solve_triangular(chol, y[..., None], lower=True)[..., 0]
    half_logdet = jnp.sum(jnp.log(jnp.diagonal(chol, axis1=-2, axis2=-1)), axis=-1)
    return -0.5 * jnp.sum(z * z, axis=-1) - n / 2 * log2pi - half_logdet


def pdf(x, mean, cov):
    """The multivariate normal density.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.scipy.stats import multivariate_normal
        >>> round(float(multivariate_normal.pdf(jnp.zeros(2), jnp.zeros(2), jnp.eye(2))), 6)
        0.159155
    """
    return jnp.exp(logpdf(x, mean, cov))
