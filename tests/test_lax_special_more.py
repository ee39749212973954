"""lax.igamma, igammac, igamma_grad_a, random_gamma_grad, betainc, zeta, polygamma,
bessel_i0e and bessel_i1e: reference values, jax.lax (when importable), gradients, vmap, jit."""
from __future__ import annotations

import doctest
import math

import numpy as np
import pytest

import funcgrad
from funcgrad.lax import special_gamma as _special_gamma, special_zeta as _special_zeta
from funcgrad import lax
from funcgrad.test_util import check_grads

D = np.float64


def test_doctests():
    for mod in (_special_gamma, _special_zeta):
        assert doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE).failed == 0


def test_closed_forms():
    x = np.array([0.1, 1.0, 2.5, 7.0])
    # a = 1: P(1, x) = 1 - e^-x; a = 1/2: P = erf(sqrt x)
    np.testing.assert_allclose(np.asarray(lax.igamma(D(1.0), x)), 1 - np.exp(-x), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(lax.igammac(D(1.0), x)), np.exp(-x), rtol=1e-12)
    erf = np.vectorize(math.erf)
    np.testing.assert_allclose(np.asarray(lax.igamma(D(0.5), x)), erf(np.sqrt(x)), rtol=1e-12)
    # I_x(1, b) = 1 - (1 - x)^b ; I_x(a, 1) = x^a
    u = np.array([0.0, 0.2, 0.7, 1.0])
    np.testing.assert_allclose(np.asarray(lax.betainc(D(1.0), D(3.0), u)), 1 - (1 - u) ** 3,
                               atol=1e-14)
    np.testing.assert_allclose(np.asarray(lax.betainc(D(2.5), D(1.0), u)), u ** 2.5, atol=1e-14)
    np.testing.assert_allclose(float(lax.zeta(D(2.0), D(1.0))), math.pi ** 2 / 6, rtol=1e-13)
    np.testing.assert_allclose(float(lax.zeta(D(4.0), D(1.0))), math.pi ** 4 / 90, rtol=1e-13)
    k = np.arange(2_000_00, dtype=np.float64)
    np.testing.assert_allclose(float(lax.zeta(D(4.0), D(-7.5))), np.sum((k - 7.5) ** -4.0),
                               rtol=1e-12)
    np.testing.assert_allclose(float(lax.polygamma(D(1.0), D(1.0))), math.pi ** 2 / 6, rtol=1e-13)
    np.testing.assert_allclose(float(lax.polygamma(D(0.0), D(1.0))), -0.5772156649015329, rtol=1e-12)
    np.testing.assert_allclose(float(lax.polygamma(D(2.0), D(1.0))), -2 * 1.2020569031595942,
                               rtol=1e-12)
    assert np.isnan(float(lax.polygamma(D(1.5), D(1.0)))) and np.isnan(float(lax.zeta(D(0.5), D(1.0))))
    assert float(lax.zeta(D(1.0), D(2.0))) == np.inf and float(lax.zeta(D(2.0), D(-2.0))) == np.inf
    xb = np.array([0.0, 0.5, 3.0, 8.0, 12.0, 30.0, -2.0])
    i0 = np.i0(xb) * np.exp(-np.abs(xb))
    np.testing.assert_allclose(np.asarray(lax.bessel_i0e(xb)), i0, rtol=1e-13)
    i1 = np.array([sum((v / 2) ** (2 * j + 1) / (math.factorial(j) * math.factorial(j + 1))
                       for j in range(80)) for v in xb]) * np.exp(-np.abs(xb))
    np.testing.assert_allclose(np.asarray(lax.bessel_i1e(xb)), i1, rtol=1e-12)


def test_domain_edges():
    a = np.array([0.0, 0.0, -1.0, 2.0, 2.0, np.nan])
    x = np.array([0.0, 1.0, 1.0, 0.0, np.inf, 1.0])
    p = np.asarray(lax.igamma(a, x))
    assert np.isnan(p[0]) and np.isnan(p[2]) and np.isnan(p[5])
    assert p[3] == 0.0 and p[4] == 1.0
    q = np.asarray(lax.igammac(a, x))
    assert q[1] == 0.0 and q[3] == 1.0 and q[4] == 0.0
    assert np.isnan(float(lax.betainc(2.0, 3.0, 1.5)))
    assert lax.igamma(np.float32(2.0), np.float32(1.0)).dtype == np.float32
    assert lax.igamma(np.float16(2.0), np.float16(1.0)).dtype == np.float16


def test_against_jax(rng):
    jax = pytest.importorskip("jax")
    a = rng.uniform(0.05, 20, 40).astype(np.float32)
    x = rng.uniform(0.0, 25, 40).astype(np.float32)
    for name in ("igamma", "igammac", "igamma_grad_a", "random_gamma_grad"):
        got, want = getattr(lax, name)(a, x), getattr(jax.lax, name)(a, x)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-4, atol=1e-6)
    u = rng.uniform(0, 1, 40).astype(np.float32)
    np.testing.assert_allclose(np.asarray(lax.betainc(a / 2, x / 3, u)),
                               np.asarray(jax.lax.betainc(a / 2, x / 3, u)),
                               rtol=2e-4, atol=1e-6)
    q = rng.uniform(0.1, 30, 40).astype(np.float32)
    s = rng.uniform(1.1, 20, 40).astype(np.float32)
    np.testing.assert_allclose(np.asarray(lax.zeta(s, q)), np.asarray(jax.lax.zeta(s, q)),
                               rtol=1e-4)
    m = rng.integers(0, 5, 40).astype(np.float32)
    np.testing.assert_allclose(np.asarray(lax.polygamma(m, q)),
                               np.asarray(jax.lax.polygamma(m, q)), rtol=1e-4, atol=1e-6)
    xb = rng.uniform(-40, 40, 40).astype(np.float32)
    for name in ("bessel_i0e", "bessel_i1e"):
        np.testing.assert_allclose(np.asarray(getattr(lax, name)(xb)),
                                   np.asarray(getattr(jax.lax, name)(xb)), rtol=1e-5)


def test_gradients_float64():
    a, x = np.array([0.7, 3.0]), np.array([0.4, 5.0])
    check_grads(lax.igamma, (a, x), order=1, eps=1e-5, atol=1e-6, rtol=1e-4)
    check_grads(lax.igammac, (a, x), order=1, eps=1e-5, atol=1e-6, rtol=1e-4)
    check_grads(lambda x: lax.betainc(D(2.0), D(3.5), x), (np.array([0.2, 0.8]),), order=1)
    check_grads(lambda q: lax.zeta(D(3.0), q), (np.array([0.5, 4.0]),), order=1)
    check_grads(lambda x: lax.polygamma(D(1.0), x), (np.array([0.5, 4.0]),), order=1)
    check_grads(lax.bessel_i0e, (np.array([-3.0, 0.5, 9.0, 20.0]),), order=2)
    check_grads(lax.bessel_i1e, (np.array([-3.0, 0.5, 9.0, 20.0]),), order=2)
    g = funcgrad.grad(lambda a: lax.igamma(a, D(2.0)))(D(1.5))
    np.testing.assert_allclose(float(g), float(lax.igamma_grad_a(D(1.5), D(2.0))), rtol=1e-12)


def test_vmap_and_jit():
    a, x = np.array([0.5, 2.0, 9.0]), np.array([0.3, 4.0, 8.0])
    want = np.asarray(lax.igamma(a, x))
    np.testing.assert_allclose(np.asarray(funcgrad.jit(lax.igamma)(a, x)), want, rtol=1e-14)
    np.testing.assert_allclose(np.asarray(funcgrad.vmap(lax.igamma)(a, x)), want, rtol=1e-14)
    z = funcgrad.vmap(lambda q: lax.zeta(D(2.0), q))(np.array([1.0, 2.0]))
    np.testing.assert_allclose(np.asarray(z), [math.pi ** 2 / 6, math.pi ** 2 / 6 - 1],
                               rtol=1e-13)
    assert lax.igamma(np.zeros((0, 2)), np.zeros((0, 2))).shape == (0, 2)
    assert lax.zeta(np.ones((1, 0)) * 2, 1.0).shape == (1, 0)
