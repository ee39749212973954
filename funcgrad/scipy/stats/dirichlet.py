"""The Dirichlet distribution (jax.scipy.stats.dirichlet)."""
from __future__ import annotations

from funcgrad import numpy as jnp
from funcgrad.scipy.special import gammaln, xlogy
from funcgrad.scipy.stats._common import promote


def logpdf(x, alpha):
    """log of the Dirichlet density at points x (along axis 0) on the simplex.

    Args:
        x: shape (k, ...) or (k - 1, ...) (the last coordinate is then 1 - sum).
        alpha: the concentrations, shape (k,).

    Returns:
        The log densities, shape (...); -inf off the simplex (a coordinate <= 0, or a sum
        more than 1e-6 from 1).

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.scipy.stats import dirichlet
        >>> round(float(dirichlet.logpdf(jnp.array([0.2, 0.3, 0.5]), jnp.ones(3))), 5)
        0.69315
    """
    x, alpha = promote(x, alpha)
    if alpha.ndim != 1:
        raise ValueError(f"`alpha` must be one-dimensional; got alpha.shape={alpha.shape}")
    k = alpha.shape[0]
    if x.shape[0] not in (k, k - 1):
        raise ValueError("`x` must have either the same number of entries as `alpha` or one "
                         f"entry fewer; got x.shape={x.shape}, alpha.shape={alpha.shape}")
    if x.shape[0] != k:
        x = jnp.concatenate([x, 1 - jnp.sum(x, axis=0, keepdims=True)], axis=0)
    log_norm = jnp.sum(gammaln(alpha)) - gammaln(jnp.sum(alpha))
    a = jnp.reshape(alpha, (k,) + (1,) * (x.ndim - 1))
    val = jnp.sum(xlogy(a - 1, x), axis=0) - log_norm
    simplex = jnp.all(x > 0, axis=0) & (jnp.abs(jnp.sum(x, axis=0) - 1) < 1e-6)
    return jnp.where(simplex, val, -jnp.inf)


def pdf(x, alpha):
    """The Dirichlet density.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.scipy.stats import dirichlet
        >>> round(float(dirichlet.pdf(jnp.array([0.2, 0.3, 0.5]), jnp.ones(3))), 5)
        2.0
    """
    return jnp.exp(logpdf(x, alpha))
