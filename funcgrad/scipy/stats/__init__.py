"""funcgrad.scipy.stats: jax.scipy.stats' distributions, one module each (norm.logpdf, ...).

Each module has JAX's functions with JAX's arguments and out-of-support conventions (-inf log
densities outside the support, nan for invalid parameters where JAX gives nan); integer inputs
compute in float32 and float64 inputs stay float64.

Example:
    >>> import funcgrad.numpy as jnp
    >>> from funcgrad.scipy import stats
    >>> round(float(stats.norm.logpdf(1.0)), 6)
    -1.418939
"""
from funcgrad.scipy.stats import (  # noqa: F401
    bernoulli,
    beta,
    betabinom,
    binom,
    cauchy,
    chi2,
    dirichlet,
    expon,
    gamma,
    gennorm,
    geom,
    gumbel_l,
    gumbel_r,
    laplace,
    logistic,
    multinomial,
    multivariate_normal,
    nbinom,
    norm,
    pareto,
    poisson,
    t,
    uniform,
    vonmises,
    wrapcauchy,
)
