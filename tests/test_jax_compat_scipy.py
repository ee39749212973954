"""funcgrad.scipy.special, .stats and .signal against scipy's numbers (which JAX's match), in
float64 and float32, with their derivatives, JAX's out-of-support conventions and jit/vmap."""
from __future__ import annotations

import doctest
import importlib

import numpy as np
import pytest
import scipy.signal as ss
import scipy.special as sp
import scipy.stats as st

import funcgrad as jax
import funcgrad.numpy as jnp
from funcgrad.scipy import signal, special, stats

F64 = np.float64


def close(a, b, rtol=1e-10, atol=1e-12):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


STATS_MODULES = ["bernoulli", "beta", "betabinom", "binom", "cauchy", "chi2", "dirichlet",
                 "expon", "gamma", "gennorm", "geom", "gumbel_l", "gumbel_r", "laplace",
                 "logistic", "multinomial", "multivariate_normal", "nbinom", "norm", "pareto",
                 "poisson", "t", "uniform", "vonmises", "wrapcauchy"]


@pytest.mark.parametrize("name", ["funcgrad.scipy.special", "funcgrad.scipy.signal",
                                  "funcgrad.scipy.stats"]
                         + [f"funcgrad.scipy.stats.{m}" for m in STATS_MODULES])
def test_docstring_examples(name):
    res = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert res.failed == 0 and res.attempted > 0


def test_top_level_names():
    assert jax.scipy.stats.norm is stats.norm and jax.scipy.special is special
    for m in STATS_MODULES:
        assert hasattr(stats, m)


# ---------------------------------------------------------------------------------------------
# special
# ---------------------------------------------------------------------------------------------

X = np.linspace(-4.5, 6.0, 23)
POS = np.linspace(0.05, 9.0, 19)
UNIT = np.linspace(0.01, 0.99, 17)

SPECIAL_CASES = [
    ("gammaln", sp.gammaln, (POS,), 1e-12),
    ("gammaln", sp.gammaln, (np.array([-0.5, -1.5, -2.25, 3.5]),), 1e-12),
    ("gamma", sp.gamma, (np.array([-2.5, -0.5, 0.3, 1.0, 4.5]),), 1e-12),
    ("gammasgn", sp.gammasgn, (np.array([-2.5, -1.5, -0.5, 0.3, 4.5]),), 0),
    ("digamma", sp.digamma, (POS,), 1e-11),
    ("betaln", sp.betaln, (POS, POS[::-1]), 1e-11),
    ("beta", sp.beta, (POS[:8], POS[3:11]), 1e-11),
    ("gammainc", sp.gammainc, (POS, POS[::-1]), 1e-9),
    ("gammaincc", sp.gammaincc, (POS, POS[::-1]), 1e-9),
    ("betainc", sp.betainc, (POS[:17], POS[2:], UNIT), 1e-8),
    ("erf", sp.erf, (X,), 1e-13),
    ("erfc", sp.erfc, (X,), 1e-12),
    ("erfinv", sp.erfinv, (np.linspace(-0.99, 0.99, 21),), 1e-10),
    ("ndtr", sp.ndtr, (np.linspace(-30, 10, 41),), 1e-12),
    ("ndtri", sp.ndtri, (np.r_[1e-300, 1e-40, 1e-10, UNIT, 1 - 1e-10],), 1e-12),
    # the 3-term asymptotic series below -20, as JAX's: ~1e-11 there
    ("log_ndtr", sp.log_ndtr, (np.r_[-1e3, -200, -38.5, -21, -19, X, 7, 9, 30],), 2e-11),
    ("expit", sp.expit, (X,), 1e-13),
    ("logit", sp.logit, (UNIT,), 1e-12),
    ("xlogy", sp.xlogy, (np.array([0.0, 0.0, 1.5, 2.0]), np.array([0.0, 3.0, 2.0, 0.5])), 1e-14),
    ("xlog1py", sp.xlog1py, (np.array([0.0, 1.5, 2.0]), np.array([-1.0, 2.0, -0.5])), 1e-14),
    ("entr", sp.entr, (np.array([-1.0, 0.0, 0.5, 2.0]),), 1e-14),
    ("rel_entr", sp.rel_entr, (np.array([0.0, 0.0, 1.0, 2.0, -1.0, 1.0]),
                               np.array([0.0, 1.0, 2.0, 0.5, 1.0, 0.0])), 1e-14),
    ("kl_div", sp.kl_div, (np.array([0.0, 1.0, 2.0, 1.0]), np.array([1.0, 2.0, 0.5, 0.0])),
     1e-14),
    ("i0e", sp.i0e, (X,), 1e-12),
    ("i1e", sp.i1e, (X,), 1e-12),
    ("i0", sp.i0, (X,), 1e-12),
    ("i1", sp.i1, (X,), 1e-12),
    ("zeta", sp.zeta, (np.array([2.0, 3.5, 6.0]), np.array([1.0, 0.5, 2.0])), 1e-10),
    ("polygamma", sp.polygamma, (np.array([0, 1, 2, 3]), np.array([0.5, 1.0, 2.5, 4.0])), 1e-9),
    ("multigammaln", lambda a: sp.multigammaln(a, 3), (np.array([1.5, 2.0, 7.5]),), 1e-12),
    ("factorial", lambda n: sp.factorial(n, exact=False), (np.array([-1.0, 0, 1, 5, 10.5]),),
     1e-12),
    ("comb", lambda n, k: sp.comb(n, k), (np.array([5.0, 10, 4, 3]), np.array([2.0, 3, 5, -1])),
     1e-11),
]


@pytest.mark.parametrize("name,ref,args,rtol", SPECIAL_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(SPECIAL_CASES)])
def test_special_matches_scipy_float64(name, ref, args, rtol):
    fn = getattr(special, name)
    if name == "multigammaln":
        got = fn(args[0], 3)
    else:
        got = fn(*[np.asarray(a, F64) for a in args])
    assert np.asarray(got).dtype == F64
    close(got, ref(*args), rtol=rtol, atol=rtol * 1e-3)


@pytest.mark.parametrize("name,ref,args,rtol", SPECIAL_CASES[:20],
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(SPECIAL_CASES[:20])])
def test_special_float32(name, ref, args, rtol):
    got = getattr(special, name)(*[np.asarray(a, np.float32) for a in args])
    assert np.asarray(got).dtype == np.float32
    want = ref(*[np.asarray(a, np.float32).astype(F64) for a in args])
    close(got, want, rtol=2e-5 if name not in ("gammainc", "gammaincc", "betainc") else 1e-4,
          atol=1e-6)


def test_integer_inputs_compute_in_float32():
    assert special.gammaln(3).dtype == np.float32
    assert special.xlogy(2, 3).dtype == np.float32
    assert stats.norm.logpdf(1).dtype == np.float32


def test_ndtri_tails_and_domain():
    assert float(special.ndtri(0.0)) == -np.inf and float(special.ndtri(1.0)) == np.inf
    assert np.isnan(float(special.ndtri(-0.1))) and np.isnan(float(special.ndtri(1.5)))
    p = np.float32(1e-30)
    close(special.ndtri(p), sp.ndtri(1e-30), rtol=1e-5)


def test_log_ndtr_float32_tails():
    x = np.array([-100.0, -30.0, -12.0, -9.0, 0.0, 4.0, 6.0, 20.0], np.float32)
    close(special.log_ndtr(x), sp.log_ndtr(x.astype(F64)), rtol=2e-6, atol=1e-30)


def test_derivatives():
    x = np.linspace(-30.0, 10.0, 11)
    pdf = np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi)
    close(jax.vmap(jax.grad(special.log_ndtr))(x), pdf / sp.ndtr(x), rtol=1e-8)
    q = np.array([1e-8, 0.1, 0.5, 0.97])
    close(jax.vmap(jax.grad(special.ndtri))(q), np.sqrt(2 * np.pi) *
          np.exp(0.5 * sp.ndtri(q) ** 2), rtol=1e-9)
    close(jax.vmap(jax.grad(special.ndtr))(x[-6:]), pdf[-6:], rtol=1e-9)
    # xlogy: d/dx = log y, d/dy = x / y (JAX's rule, finite at x == 0)
    gx, gy = jax.grad(special.xlogy, argnums=(0, 1))(F64(0.0), F64(2.0))
    close(gx, np.log(2.0))
    close(gy, 0.0)
    gx, gy = jax.grad(special.xlog1py, argnums=(0, 1))(F64(3.0), F64(1.0))
    close(gx, np.log(2.0))
    close(gy, 1.5)
    close(jax.grad(special.gammaln)(F64(3.5)), sp.digamma(3.5), rtol=1e-10)
    close(jax.grad(special.expit)(F64(0.3)), sp.expit(0.3) * (1 - sp.expit(0.3)))
    close(jax.grad(special.logit)(F64(0.3)), 1 / (0.3 * 0.7))
    close(jax.grad(special.erfc)(F64(2.5)), -2 / np.sqrt(np.pi) * np.exp(-6.25))


def test_logsumexp():
    rs = np.random.RandomState(0)
    a = rs.standard_normal((3, 4)) * 5
    b = rs.standard_normal((3, 4))
    for axis in (None, 0, 1, (0, 1), -1):
        for keepdims in (False, True):
            close(special.logsumexp(a, axis=axis, keepdims=keepdims),
                  sp.logsumexp(a, axis=axis, keepdims=keepdims))
    v, s = special.logsumexp(a, axis=1, b=b, return_sign=True)
    wv, ws = sp.logsumexp(a, axis=1, b=b, return_sign=True)
    close(v, wv)
    close(s, ws)
    with np.errstate(invalid="ignore"):
        want = sp.logsumexp(a, axis=1, b=b)
    close(special.logsumexp(a, axis=1, b=b), want)   # nan where the sum is negative
    mask = a > 0
    close(special.logsumexp(a, axis=1, where=mask),
          [sp.logsumexp(r[m]) for r, m in zip(a, mask)])
    assert float(special.logsumexp(np.array([-np.inf, -np.inf]))) == -np.inf
    assert float(special.logsumexp(np.array([np.inf, 1.0]))) == np.inf
    close(special.logsumexp(np.array([1000.0, 1000.0])), 1000 + np.log(2))
    # the gradient is the softmax (the max is not differentiated)
    e = np.exp(a - a.max(axis=1, keepdims=True))
    close(jax.grad(lambda x: special.logsumexp(x, axis=1).sum())(a), e / e.sum(1, keepdims=True))
    assert special.logsumexp(np.float32([1, 2])).dtype == np.float32


# ---------------------------------------------------------------------------------------------
# stats: (module, function, funcgrad args, scipy callable)
# ---------------------------------------------------------------------------------------------

XS = np.linspace(-3.0, 4.0, 15)
PX = np.linspace(0.0, 7.0, 15)
Q = np.linspace(0.02, 0.98, 15)
K = np.arange(-1.0, 9.0)


def _cases():
    c = []
    for fn in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"):
        c.append(("norm", fn, (XS, 0.5, 1.7), getattr(st.norm, fn)))
        c.append(("cauchy", fn, (XS, 0.5, 1.7), getattr(st.cauchy, fn)))
        c.append(("beta", fn, (np.linspace(-0.1, 1.1, 13), 2.5, 1.5), getattr(st.beta, fn)))
        c.append(("chi2", fn, (PX[1:], 3.0), getattr(st.chi2, fn)))
        c.append(("gamma", fn, (PX - 0.5, 2.5, 0.0, 1.5), getattr(st.gamma, fn)))
        c.append(("pareto", fn, (PX + 0.5, 2.5, 0.0, 1.2), getattr(st.pareto, fn)))
        c.append(("expon", fn, (PX - 1, 0.0, 2.0), getattr(st.expon, fn)))
        c.append(("gumbel_r", fn, (XS, 0.5, 1.5), getattr(st.gumbel_r, fn)))
        c.append(("gumbel_l", fn, (XS, 0.5, 1.5), getattr(st.gumbel_l, fn)))
    for fn in ("ppf", "isf"):
        c.append(("norm", fn, (Q, 0.5, 1.7), getattr(st.norm, fn)))
        c.append(("cauchy", fn, (Q, 0.5, 1.7), getattr(st.cauchy, fn)))
        c.append(("logistic", fn, (Q, 0.5, 1.7), getattr(st.logistic, fn)))
    for fn in ("logpdf", "pdf", "cdf", "sf"):
        c.append(("logistic", fn, (XS, 0.5, 1.7), getattr(st.logistic, fn)))
    for fn in ("logpdf", "pdf", "cdf"):
        c.append(("laplace", fn, (XS, 0.5, 1.7), getattr(st.laplace, fn)))
        c.append(("uniform", fn, (XS, -1.0, 3.0), getattr(st.uniform, fn)))
        c.append(("gennorm", fn, (XS, 1.5), getattr(st.gennorm, fn)))
    c += [("expon", "ppf", (Q, 0.5, 2.0), st.expon.ppf),
          ("pareto", "ppf", (Q, 2.5, 0.0, 1.2), st.pareto.ppf),
          ("gumbel_r", "ppf", (Q, 0.5, 1.5), st.gumbel_r.ppf),
          ("gumbel_l", "ppf", (Q, 0.5, 1.5), st.gumbel_l.ppf),
          ("uniform", "ppf", (Q, -1.0, 3.0), st.uniform.ppf),
          ("t", "logpdf", (XS, 3.5, 0.5, 1.7), st.t.logpdf),
          ("t", "pdf", (XS, 3.5, 0.5, 1.7), st.t.pdf),
          ("vonmises", "logpdf", (XS, 2.5), st.vonmises.logpdf),
          ("vonmises", "pdf", (XS, 2.5), st.vonmises.pdf),
          ("wrapcauchy", "logpdf", (np.linspace(0, 6, 13), 0.3), st.wrapcauchy.logpdf),
          ("wrapcauchy", "pdf", (np.linspace(0, 6, 13), 0.3), st.wrapcauchy.pdf),
          ("poisson", "logpmf", (K, 3.5), st.poisson.logpmf),
          ("poisson", "pmf", (K, 3.5), st.poisson.pmf),
          ("poisson", "cdf", (K, 3.5), st.poisson.cdf),
          ("binom", "logpmf", (K, 7.0, 0.3), st.binom.logpmf),
          ("binom", "pmf", (K, 7.0, 0.3), st.binom.pmf),
          ("nbinom", "logpmf", (K, 3.0, 0.4), st.nbinom.logpmf),
          ("nbinom", "pmf", (K, 3.0, 0.4), st.nbinom.pmf),
          ("geom", "logpmf", (K, 0.3), st.geom.logpmf),
          ("geom", "pmf", (K, 0.3), st.geom.pmf),
          ("betabinom", "logpmf", (K, 7.0, 2.0, 3.5), st.betabinom.logpmf),
          ("betabinom", "pmf", (K, 7.0, 2.0, 3.5), st.betabinom.pmf),
          ("bernoulli", "logpmf", (K[:4], 0.3), st.bernoulli.logpmf),
          ("bernoulli", "pmf", (K[:4], 0.3), st.bernoulli.pmf),
          ("bernoulli", "cdf", (np.array([-1.0, 0.0, 0.5, 1.0, 2.0]), 0.3), st.bernoulli.cdf),
          ("bernoulli", "ppf", (np.array([0.5, 0.7, 0.71, 1.0]), 0.3), st.bernoulli.ppf)]
    return c


CASES = _cases()


@pytest.mark.parametrize("mod,fn,args,ref", CASES,
                         ids=[f"{m}.{f}-{i}" for i, (m, f, _, _) in enumerate(CASES)])
def test_stats_match_scipy(mod, fn, args, ref):
    with np.errstate(all="ignore"):
        want = ref(*args)
    got = getattr(getattr(stats, mod), fn)(*[np.asarray(a, F64) for a in args])
    close(got, want, rtol=1e-9, atol=1e-12)
    got32 = getattr(getattr(stats, mod), fn)(*[np.asarray(a, np.float32) for a in args])
    assert got32.dtype == np.float32
    close(got32, want, rtol=1e-4, atol=1e-5)


def test_out_of_support_and_invalid_parameters():
    assert float(stats.beta.logpdf(1.5, 2.0, 2.0)) == -np.inf
    assert np.isnan(float(stats.beta.logpdf(0.5, -1.0, 2.0)))
    assert float(stats.expon.logpdf(-1.0)) == -np.inf
    assert float(stats.poisson.logpmf(1.5, 2.0)) == -np.inf
    assert np.isnan(float(stats.gumbel_r.logpdf(0.0, 0.0, -1.0)))
    assert np.isnan(float(stats.bernoulli.cdf(0.5, 1.5)))
    assert np.isnan(float(stats.expon.ppf(1.5)))
    assert float(stats.bernoulli.ppf(0.0, 0.3)) == 0.0   # JAX's (scipy gives -1)
    assert np.isnan(float(stats.vonmises.logpdf(0.0, -1.0)))
    assert float(stats.wrapcauchy.logpdf(7.0, 0.5)) == -np.inf


def test_norm_tails():
    close(stats.norm.logcdf(F64(-40.0)), st.norm.logcdf(-40.0), rtol=1e-12)
    close(stats.norm.logsf(F64(40.0)), st.norm.logsf(40.0), rtol=1e-12)
    close(stats.norm.logcdf(np.float32(-15.0)), st.norm.logcdf(-15.0), rtol=1e-6)
    close(stats.norm.ppf(np.array([1e-12, 1 - 1e-12])), st.norm.ppf([1e-12, 1 - 1e-12]),
          rtol=1e-6)


def test_multivariate_normal():
    rs = np.random.RandomState(1)
    a = rs.standard_normal((3, 3))
    cov = a @ a.T + 3 * np.eye(3)
    mean = rs.standard_normal(3)
    x = rs.standard_normal((5, 3))
    close(stats.multivariate_normal.logpdf(x, mean, cov),
          st.multivariate_normal.logpdf(x, mean, cov), rtol=1e-9)
    close(stats.multivariate_normal.pdf(x[0], mean, cov),
          st.multivariate_normal.pdf(x[0], mean, cov), rtol=1e-9)
    close(stats.multivariate_normal.logpdf(x, mean, 2.0),
          st.multivariate_normal.logpdf(x, mean, 2.0 * np.eye(3)), rtol=1e-10)
    close(stats.multivariate_normal.logpdf(F64(0.3), 0.1, 2.0),
          st.norm.logpdf(0.3, 0.1, np.sqrt(2)))
    covs = np.stack([cov, 2 * cov])          # batched covariances
    close(stats.multivariate_normal.logpdf(x[:2], mean, covs),
          [st.multivariate_normal.logpdf(x[i], mean, covs[i]) for i in range(2)], rtol=1e-10)
    with pytest.raises(ValueError):
        stats.multivariate_normal.logpdf(x, mean, np.eye(2))
    with pytest.raises(NotImplementedError):
        stats.multivariate_normal.logpdf(x, mean, cov, allow_singular=True)
    # the gradient in the mean: cov^-1 (x - mean)
    g = jax.grad(lambda m: stats.multivariate_normal.logpdf(x[0], m, cov))(mean)
    close(g, np.linalg.solve(cov, x[0] - mean), rtol=1e-9)


def test_dirichlet_and_multinomial():
    alpha = np.array([1.5, 2.0, 3.0])
    x = np.array([[0.2, 0.5], [0.3, 0.1], [0.5, 0.4]])
    close(stats.dirichlet.logpdf(x, alpha), st.dirichlet.logpdf(x, alpha), rtol=1e-10)
    close(stats.dirichlet.logpdf(x[:2], alpha), st.dirichlet.logpdf(x, alpha), rtol=1e-10)
    assert float(stats.dirichlet.logpdf(np.array([0.5, 0.6, 0.1]), alpha)) == -np.inf
    close(stats.multinomial.logpmf(np.array([1, 3, 2]), 6, np.array([0.2, 0.5, 0.3])),
          st.multinomial.logpmf([1, 3, 2], 6, [0.2, 0.5, 0.3]), rtol=1e-6)
    assert float(stats.multinomial.logpmf(np.array([1, 3, 2]), 5, np.ones(3) / 3)) == -np.inf
    with pytest.raises(ValueError):
        stats.multinomial.logpmf(np.array([1.0, 2.0]), 3, np.ones(2) / 2)


def test_stats_gradients_jit_vmap():
    # d/dloc norm.logpdf = (x - loc) / scale^2; d/dscale = ((x - loc)^2 / scale^2 - 1) / scale
    x, loc, scale = F64(1.3), F64(0.2), F64(0.7)
    gl, gs = jax.grad(stats.norm.logpdf, argnums=(1, 2))(x, loc, scale)
    close(gl, (x - loc) / scale ** 2)
    close(gs, ((x - loc) ** 2 / scale ** 2 - 1) / scale)
    close(jax.grad(stats.norm.cdf)(F64(0.4)), st.norm.pdf(0.4))
    close(jax.grad(stats.norm.ppf)(F64(0.3)), 1 / st.norm.pdf(st.norm.ppf(0.3)), rtol=1e-9)
    close(jax.grad(stats.gamma.logpdf, argnums=1)(F64(2.0), F64(3.0)),
          np.log(2.0) - sp.digamma(3.0), rtol=1e-9)
    close(jax.grad(stats.poisson.logpmf, argnums=1)(F64(3.0), F64(2.0)), 3 / 2 - 1)
    close(jax.grad(stats.bernoulli.logpmf, argnums=1)(F64(1.0), F64(0.25)), 4.0)
    close(jax.grad(stats.norm.logpdf)(1.5), -1.5, rtol=1e-6)   # Python floats: float32
    f = jax.jit(jax.vmap(stats.t.logpdf, in_axes=(0, None)))
    close(f(XS, 4.0), st.t.logpdf(XS, 4.0), rtol=1e-10)


# ---------------------------------------------------------------------------------------------
# signal
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("shapes", [((7,), (3,)), ((3,), (7,)), ((5, 6), (2, 3)),
                                    ((2, 3), (5, 6)), ((4, 3, 5), (2, 2, 3))])
def test_convolve_correlate_match_scipy(mode, shapes, rng):
    a = rng.standard_normal(shapes[0])
    b = rng.standard_normal(shapes[1])
    close(signal.convolve(a, b, mode), ss.convolve(a, b, mode, method="direct"), rtol=1e-10)
    close(signal.correlate(a, b, mode), ss.correlate(a, b, mode, method="direct"), rtol=1e-10)
    close(signal.convolve(a, b, mode, method="fft"), ss.fftconvolve(a, b, mode), rtol=1e-9,
          atol=1e-10)
    if a.ndim == 2:
        close(signal.convolve2d(a, b, mode), ss.convolve2d(a, b, mode), rtol=1e-10)
        close(signal.correlate2d(a, b, mode), ss.correlate2d(a, b, mode), rtol=1e-10)


def test_convolve_mixed_shapes_and_complex(rng):
    a = rng.standard_normal((4, 2))
    b = rng.standard_normal((2, 3))
    for mode in ("full", "same"):
        close(signal.convolve(a, b, mode), ss.convolve(a, b, mode), rtol=1e-10)
    with pytest.raises(ValueError):
        signal.convolve(a, b, "valid")
    c = rng.standard_normal(6) + 1j * rng.standard_normal(6)
    d = rng.standard_normal(3) + 1j * rng.standard_normal(3)
    close(signal.convolve(c, d), ss.convolve(c, d), rtol=1e-10)
    close(signal.correlate(c, d), ss.correlate(c, d), rtol=1e-10)
    close(signal.correlate2d(c.reshape(2, 3), d.reshape(1, 3)),
          ss.correlate2d(c.reshape(2, 3), d.reshape(1, 3)), rtol=1e-10)
    close(signal.fftconvolve(c, d), ss.fftconvolve(c, d), rtol=1e-9)
    x = np.arange(5)   # integers convolve in float32
    assert signal.convolve(x, x).dtype == np.float32


def test_fftconvolve_axes(rng):
    a = rng.standard_normal((3, 8))
    b = rng.standard_normal((3, 4))
    for mode in ("full", "same", "valid"):
        close(signal.fftconvolve(a, b, mode, axes=1), ss.fftconvolve(a, b, mode, axes=1),
              rtol=1e-9, atol=1e-12)


def test_convolve_gradient_is_a_correlation(rng):
    a = rng.standard_normal(6)
    b = rng.standard_normal(3)
    w = rng.standard_normal(8)
    g = jax.grad(lambda x: jnp.sum(signal.convolve(x, b) * w))(a)
    close(g, ss.correlate(w, b, "valid"), rtol=1e-10)


def test_detrend(rng):
    x = rng.standard_normal((4, 20)) + np.linspace(0, 5, 20)
    close(signal.detrend(x), ss.detrend(x), rtol=1e-9, atol=1e-10)
    close(signal.detrend(x, axis=0, type="constant"), ss.detrend(x, axis=0, type="constant"))
    close(signal.detrend(x, bp=[7, 13]), ss.detrend(x, bp=[7, 13]), rtol=1e-9, atol=1e-10)


# spectral analysis: (length, nperseg, noverlap, nfft); nperseg > length is cut to the length
SPECTRAL_CASES = [(5, 4, None, None), (7, 16, None, None), (33, 8, 3, None), (64, 16, 8, 20),
                  (100, 17, 5, 40), (257, None, None, None), (50, 9, 0, None)]


@pytest.mark.filterwarnings("ignore:nperseg")
@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-9), (np.float32, 1e-4)])
@pytest.mark.parametrize("n,nperseg,noverlap,nfft", SPECTRAL_CASES)
def test_welch_csd_match_scipy(n, nperseg, noverlap, nfft, dtype, rtol, rng):
    x = rng.standard_normal(n).astype(dtype)
    y = rng.standard_normal(max(n - 3, 2)).astype(dtype)   # csd zero-pads the shorter signal
    kw = {"nperseg": nperseg, "noverlap": noverlap, "nfft": nfft}
    if nperseg is not None and nperseg > n:
        with pytest.warns(UserWarning, match="nperseg"):
            signal.welch(x, **kw)
    cases = [{}, {"detrend": "linear", "scaling": "spectrum"},
             {"average": "median", "window": "hamming"},
             {"return_onesided": False, "detrend": False}]
    for extra in cases:
        f, p = signal.welch(x, **kw, **extra)
        f_ref, p_ref = ss.welch(x, **kw, **extra)
        assert p.dtype == dtype
        close(f, f_ref, rtol=rtol)
        close(p, p_ref, rtol=rtol, atol=rtol * np.abs(p_ref).max())
        f, p = signal.csd(x, y, **kw, **extra)
        f_ref, p_ref = ss.csd(x, y, **kw, **extra)
        close(p, p_ref, rtol=rtol, atol=rtol * np.abs(p_ref).max())


@pytest.mark.filterwarnings("ignore:NOLA condition failed")   # scipy's istft, hann with no overlap
@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-9), (np.float32, 1e-4)])
@pytest.mark.parametrize("n,nperseg,noverlap,nfft", SPECTRAL_CASES)
@pytest.mark.parametrize("boundary", ["zeros", "even", "odd", "constant", None])
def test_stft_istft_match_scipy(n, nperseg, noverlap, nfft, boundary, dtype, rtol, rng):
    x = rng.standard_normal(n).astype(dtype)
    nperseg = min(nperseg or 256, n)   # stft's nperseg is 256 by default
    if boundary in ("even", "odd") and nperseg // 2 > n - 1:
        pytest.skip("scipy's reflecting extensions need nperseg // 2 < len(x)")
    kw = {"nperseg": nperseg, "noverlap": noverlap, "nfft": nfft}
    for scaling in ("spectrum", "psd"):
        f, t, z = signal.stft(x, boundary=boundary, scaling=scaling, **kw)
        f_ref, t_ref, z_ref = ss.stft(x, boundary=boundary, scaling=scaling, **kw)
        assert z.dtype == np.result_type(dtype, np.complex64)
        close(f, f_ref, rtol=rtol)
        close(t, t_ref, rtol=rtol)
        close(z, z_ref, rtol=rtol, atol=rtol * np.abs(z_ref).max())
    _, _, z_ref = ss.stft(x, boundary=boundary, **kw)
    t, y = signal.istft(z_ref.astype(np.result_type(dtype, np.complex64)),
                        boundary=boundary is not None, **kw)
    t_ref, y_ref = ss.istft(z_ref, boundary=boundary is not None, **kw)
    close(t, t_ref, rtol=rtol)
    close(y, y_ref, rtol=rtol, atol=rtol * np.abs(y_ref).max())


def test_spectral_axes_and_windows(rng):
    x = rng.standard_normal((3, 50, 2))
    close(signal.welch(x, nperseg=8, axis=1)[1], ss.welch(x, nperseg=8, axis=1)[1], rtol=1e-9)
    _, _, z = signal.stft(x, nperseg=8, axis=1)
    _, _, z_ref = ss.stft(x, nperseg=8, axis=1)
    close(z, z_ref, rtol=1e-9, atol=1e-12)
    y = signal.istft(z_ref, nperseg=8, time_axis=-1, freq_axis=1)[1]
    close(y, ss.istft(z_ref, nperseg=8, time_axis=-1, freq_axis=1)[1], rtol=1e-9, atol=1e-12)
    for window in ("boxcar", "blackman", "bartlett", "triang", ("tukey", 0.3),
                   np.linspace(0.1, 1.0, 12)):
        close(signal.welch(x[0, :, 0], window=window, nperseg=12)[1],
              ss.welch(x[0, :, 0], window=window, nperseg=12)[1], rtol=1e-9)
    with pytest.raises(ValueError, match="noverlap"):
        signal.welch(x[0, :, 0], nperseg=8, noverlap=8)
    with pytest.raises(ValueError, match="scaling"):
        signal.welch(x[0, :, 0], scaling="bogus", nperseg=8)


def test_spectral_jit_and_grad(rng):
    x = rng.standard_normal(64)
    f = jax.jit(lambda v: signal.welch(v, nperseg=16)[1])
    close(f(x), ss.welch(x, nperseg=16)[1], rtol=1e-9)
    g = jax.jit(lambda v: signal.istft(signal.stft(v, nperseg=16)[2], nperseg=16)[1])
    close(g(x), x, rtol=1e-9, atol=1e-12)
    # d/dx of the total power sum(Pxx) = scale * sum_k ||W_k x||^2 (weighted by one-sided
    # doubling): check it against central differences of scipy's welch.
    w = rng.standard_normal(9)
    grad = jax.grad(lambda v: jnp.sum(signal.welch(v, nperseg=16)[1] * w))(x)
    eps = 1e-6
    fd = np.array([(np.sum(ss.welch(x + eps * e, nperseg=16)[1] * w)
                    - np.sum(ss.welch(x - eps * e, nperseg=16)[1] * w)) / (2 * eps)
                   for e in np.eye(64)])
    close(grad, fd, rtol=1e-5, atol=1e-8)
