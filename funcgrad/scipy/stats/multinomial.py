"""The multinomial distribution (jax.scipy.stats.multinomial)."""
from __future__ import annotations

import numpy as np

from funcgrad import numpy as jnp
from funcgrad.core.dtypes import dtype_kind
from funcgrad.scipy.special import gammaln, xlogy
from funcgrad.scipy.stats._common import promote


def logpmf(x, n, p):
    """log P(X = x) of n draws over the categories of the last axis with probabilities p.

    Args:
        x: integer counts, shape (..., k).
        n: the integer number of draws.
        p: the category probabilities, shape (..., k).

    Returns:
        The log probabilities; -inf where the counts do not sum to n.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.scipy.stats import multinomial
        >>> round(float(multinomial.logpmf(jnp.array([1, 2]), 3, jnp.array([0.5, 0.5]))), 4)
        -0.9808
    """
    p = promote(p)
    x, n = jnp.asarray(x), jnp.asarray(n)
    if dtype_kind(x.dtype) not in "iu" or dtype_kind(n.dtype) not in "iu":
        raise ValueError(f"x and n must be of integer type; got x.dtype={x.dtype}, "
                         f"n.dtype={n.dtype}")
    x = jnp.asarray(x, p.dtype)
    n = jnp.asarray(n, p.dtype)
    val = gammaln(n + 1) + jnp.sum(xlogy(x, p) - gammaln(x + 1), axis=-1)
    return jnp.where(jnp.sum(x, axis=-1) == n, val, -np.inf)


def pmf(x, n, p):
    """P(X = x).

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.scipy.stats import multinomial
        >>> round(float(multinomial.pmf(jnp.array([1, 2]), 3, jnp.array([0.5, 0.5]))), 5)
        0.375
    """
    return jnp.exp(logpmf(x, n, p))
