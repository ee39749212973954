"""lax.custom_linear_solve, lax.custom_root, funcgrad.closure_convert and lax.ragged_dot."""
from __future__ import annotations

import doctest

import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad.lax import solvers as _lax_solvers
from funcgrad import lax


def test_doctests():
    assert doctest.testmod(_lax_solvers, optionflags=doctest.NORMALIZE_WHITESPACE).failed == 0


def _spd(rng, n=3):
    a = rng.standard_normal((n, n))
    return a @ a.T + n * np.eye(n)


def _cg(mv, r):
    """Conjugate gradients, a fixed number of steps (differentiating through it would be
    wrong in general; custom_linear_solve never does)."""
    x = fnp.zeros_like(r)
    res = r - mv(x)
    p = res
    for _ in range(8):
        ap = mv(p)
        alpha = (res @ res) / (p @ ap)
        x = x + alpha * p
        new = res - alpha * ap
        p = new + (new @ new) / (res @ res) * p
        res = new
    return x


def test_linear_solve_gradients_match_a_direct_solve(rng):
    a, b = _spd(rng), rng.standard_normal(3)
    a_ns = a + np.triu(np.ones((3, 3)))          # not symmetric

    def direct(a, b):
        return (fnp.linalg.solve(a, b) ** 2).sum()

    def custom(a, b):
        x = lax.custom_linear_solve(lambda x: a @ x, b, lambda mv, r: fnp.linalg.solve(a, r),
                                    lambda vm, r: fnp.linalg.solve(a.T, r))
        return (x ** 2).sum()

    def custom_cg(a, b):
        return (lax.custom_linear_solve(lambda x: a @ x, b, _cg, symmetric=True) ** 2).sum()

    for f, m in ((custom, a_ns), (custom_cg, a)):
        want = funcgrad.grad(direct, (0, 1))(m, b)
        for got in (funcgrad.grad(f, (0, 1))(m, b), funcgrad.jit(funcgrad.grad(f, (0, 1)))(m, b)):
            for g, w in zip(got, want):
                np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-8, atol=1e-10)
    batched = funcgrad.vmap(funcgrad.grad(custom_cg, 1), (None, 0))(a, np.stack([b, 2 * b]))
    np.testing.assert_allclose(np.asarray(batched)[1],
                               np.asarray(funcgrad.grad(direct, 1)(a, 2 * b)), rtol=1e-8)


def test_linear_solve_has_aux_and_errors(rng):
    a, b = _spd(rng), rng.standard_normal(3)

    def solve(mv, r):
        return fnp.linalg.solve(a, r), fnp.asarray(7)
    x, aux = lax.custom_linear_solve(lambda x: a @ x, b, solve, symmetric=True, has_aux=True)
    np.testing.assert_allclose(np.asarray(x), np.linalg.solve(a, b))
    assert int(aux) == 7
    f = lambda b: lax.custom_linear_solve(lambda x: a @ x, b,
                                          lambda mv, r: fnp.linalg.solve(a, r)).sum()
    with pytest.raises(TypeError, match="transpose_solve is required"):
        funcgrad.grad(f)(b)


def test_custom_root_implicit_gradient():
    def newton(f, x):
        for _ in range(40):
            x = x - f(x) / (3 * x * x)
        return x

    def cube_root(c):
        return lax.custom_root(lambda x: x ** 3 - c, fnp.ones_like(c), newton,
                               lambda g, y: y / g(fnp.ones_like(y)))
    c = np.array([8.0, 27.0, 2.0])
    np.testing.assert_allclose(np.asarray(cube_root(c)), np.cbrt(c), rtol=1e-12)
    g = funcgrad.grad(lambda c: cube_root(c).sum())(c)
    np.testing.assert_allclose(np.asarray(g), c ** (-2 / 3) / 3, rtol=1e-10)
    gj = funcgrad.jit(funcgrad.grad(lambda c: cube_root(c).sum()))(c)
    np.testing.assert_allclose(np.asarray(gj), np.asarray(g), rtol=1e-12)


def test_closure_convert_hoists_float_consts(rng):
    w, n = rng.standard_normal(3), np.array([2, 2, 0])
    f, consts = funcgrad.closure_convert(lambda x: fnp.take(w * x, n).sum(), np.ones(3))
    assert len(consts) == 1                               # the int index stays closed over
    # the float constant's value as traced (numpy arrays are captured by value, as in JAX)
    np.testing.assert_array_equal(np.asarray(consts[0]), w)
    assert float(f(np.ones(3), np.ones(3))) == 3.0
    np.testing.assert_allclose(float(f(np.ones(3), *consts)), w[n].sum())

    def outer(w):
        g, cs = funcgrad.closure_convert(lambda x: (w * x).sum(), np.ones(3))
        return g(2 * np.ones(3), *cs)
    np.testing.assert_allclose(np.asarray(funcgrad.grad(outer)(w)), 2 * np.ones(3))


def ref_ragged(lhs, rhs, gs):
    out, start = np.zeros((lhs.shape[0], rhs.shape[2])), 0
    for g, n in enumerate(gs):
        out[start:start + n] = lhs[start:start + n] @ rhs[g]
        start += n
    return out


def test_ragged_dot(rng):
    lhs, rhs = rng.standard_normal((6, 4)), rng.standard_normal((3, 4, 2))
    for gs in ([2, 0, 3], [0, 6, 0], [1, 1, 1], [0, 0, 0]):
        gs = np.array(gs, np.int32)
        np.testing.assert_allclose(np.asarray(lax.ragged_dot(lhs, rhs, gs)),
                                   ref_ragged(lhs, rhs, gs), atol=1e-12)
    gs = np.array([2, 1, 3], np.int32)
    from funcgrad.test_util import check_grads
    check_grads(lambda a, b: lax.ragged_dot(a, b, gs), (lhs, rhs), order=1)
    got = funcgrad.jit(lambda a, b, g: lax.ragged_dot(a, b, g))(lhs, rhs, gs)
    np.testing.assert_allclose(np.asarray(got), ref_ragged(lhs, rhs, gs), atol=1e-12)
    v = funcgrad.vmap(lambda a: lax.ragged_dot(a, rhs, gs))(np.stack([lhs, 2 * lhs]))
    np.testing.assert_allclose(np.asarray(v)[1], 2 * ref_ragged(lhs, rhs, gs), atol=1e-12)
    with pytest.raises(ValueError, match=r"got \(6, 4\), \(3, 5, 2\)"):
        lax.ragged_dot(lhs, np.zeros((3, 5, 2)), gs)
    jax = pytest.importorskip("jax")
    np.testing.assert_allclose(np.asarray(lax.ragged_dot(lhs, rhs, gs)),
                               np.asarray(jax.lax.ragged_dot(lhs, rhs, gs)), rtol=1e-5)
