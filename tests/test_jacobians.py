"""jacfwd == jacrev (pytrees, argnums tuples, has_aux), and hessian against finite differences."""
from __future__ import annotations

import numpy as np
import pytest

import funcgrad.numpy as fnp
from funcgrad import grad, hessian, jacfwd, jacrev, jit
from funcgrad.tree_util import tree_leaves, tree_structure


def _close(a, b, rtol=1e-10, atol=1e-12):
    assert tree_structure(a) == tree_structure(b)
    for x, y in zip(tree_leaves(a), tree_leaves(b)):
        assert np.shape(x) == np.shape(y)
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def _vec(x):
    return fnp.sin(x) * fnp.sum(x ** 2) + fnp.exp(x[::-1])


def _mat(m):
    return fnp.tanh(m @ m.T) + fnp.sum(m, axis=1, keepdims=True)


def _scalar_out(x):
    return fnp.sum(fnp.log1p(x ** 2) * x)


def _layer(p, z):
    return {"o": fnp.tanh(p["w"] @ z + p["b"]), "s": fnp.sum(z) * p["b"][0]}


@pytest.mark.parametrize("f, shape", [(_vec, (3,)), (_mat, (2, 3)), (_scalar_out, (4,)),
                                      (lambda x: x * 3.0, ())], ids=["vec", "mat", "scalar",
                                                                     "0d"])
def test_jacfwd_equals_jacrev(f, shape, rng):
    x = rng.standard_normal(shape)
    jf, jr = jacfwd(f)(x), jacrev(f)(x)
    out_shape = np.shape(f(fnp.asarray(x)))
    assert jf.shape == out_shape + shape
    _close(jf, jr)
    # against an explicit column-by-column jvp-free construction: grad of each output element
    if out_shape == ():
        _close(jf, grad(f)(x))


@pytest.mark.parametrize("argnums", [0, 1, (0, 1), (1, 0)], ids=str)
def test_jacobians_of_pytrees_and_argnums(argnums, rng):
    p = {"w": rng.standard_normal((2, 3)), "b": rng.standard_normal(2)}
    z = rng.standard_normal(3)
    jf, jr = jacfwd(_layer, argnums)(p, z), jacrev(_layer, argnums)(p, z)
    _close(jf, jr)
    if argnums == 0:  # the input structure nests inside the output structure
        assert jf["o"]["w"].shape == (2, 2, 3) and jf["s"]["b"].shape == (2,)
    if argnums == (0, 1):
        assert isinstance(jf["o"], tuple) and jf["o"][1].shape == (2, 3)
    if argnums == (1, 0):
        assert jf["o"][0].shape == (2, 3) and jf["o"][1]["w"].shape == (2, 2, 3)


def test_jacobian_matches_finite_differences(rng):
    x = rng.standard_normal(4)
    f = lambda x: fnp.stack([fnp.sum(fnp.sin(x) * x), x[0] * x[1] ** 2, fnp.prod(x)])
    eps = 1e-6
    fd = np.stack([(np.asarray(f(x + eps * e)) - np.asarray(f(x - eps * e))) / (2 * eps)
                   for e in np.eye(4)], axis=1)
    np.testing.assert_allclose(jacrev(f)(x), fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(jacfwd(f)(x), fd, rtol=1e-6, atol=1e-8)


def test_has_aux(rng):
    x = rng.standard_normal(3)
    f = lambda x: (x ** 2, {"norm": fnp.sum(x ** 2)})
    (jf, af), (jr, ar) = jacfwd(f, has_aux=True)(x), jacrev(f, has_aux=True)(x)
    _close(jf, np.diag(2 * x))
    _close(jr, jf)
    _close(af, {"norm": np.sum(x ** 2)})
    _close(ar, af)


def test_jacobians_under_jit(rng):
    x = rng.standard_normal(3)
    _close(jit(jacfwd(_vec))(x), jacrev(_vec)(x))
    _close(jit(jacrev(_vec))(x), jacfwd(_vec)(x))


# ---------------------------------------------------------------------------------------------
# hessian
# ---------------------------------------------------------------------------------------------

def _fd_hessian(f, x, eps=1e-4):
    """Central differences of the gradient (float64)."""
    x = np.asarray(x, np.float64)
    n = x.size
    g = lambda v: np.asarray(grad(f)(v.reshape(x.shape))).reshape(-1)
    cols = []
    for i in range(n):
        e = np.zeros(n)
        e[i] = eps
        cols.append((g(x.reshape(-1) + e) - g(x.reshape(-1) - e)) / (2 * eps))
    return np.stack(cols, axis=1).reshape(x.shape + x.shape)


def _fd_hessian_values(f, x, eps=1e-3):
    """Second central differences of the function values only (no autodiff at all)."""
    x = np.asarray(x, np.float64).reshape(-1)
    n = x.size
    fv = lambda v: float(f(v))
    h = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            ei, ej = np.eye(n)[i] * eps, np.eye(n)[j] * eps
            h[i, j] = (fv(x + ei + ej) - fv(x + ei - ej) - fv(x - ei + ej)
                       + fv(x - ei - ej)) / (4 * eps * eps)
    return h


HESS_FUNS = {
    "poly": lambda x: fnp.sum(x ** 3) + x[0] * x[1] * x[2],
    "exp_mix": lambda x: fnp.sum(fnp.exp(x) * x[0]) + x[1] ** 3,
    "softplus": lambda x: fnp.sum(fnp.logaddexp(x, 0.0) * fnp.arange(1.0, 4.0)),
    "rosenbrock": lambda x: fnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2),
    "quadratic_form": lambda x: x @ (np.arange(9.0).reshape(3, 3) @ x) + fnp.sum(fnp.tanh(x)),
}


@pytest.mark.parametrize("name", sorted(HESS_FUNS))
def test_hessian_vs_finite_differences(name, rng):
    f = HESS_FUNS[name]
    x = rng.standard_normal(3) * 0.7
    H = np.asarray(hessian(f)(x))
    assert H.shape == (3, 3) and H.dtype == np.float64
    np.testing.assert_allclose(H, H.T, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(H, _fd_hessian(f, x), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(H, _fd_hessian_values(f, x), rtol=1e-4, atol=1e-4)


def test_hessian_of_matrix_input_and_argnums(rng):
    m = rng.standard_normal((2, 2))
    f = lambda m: fnp.sum(fnp.sin(m) * m[::-1])
    H = hessian(f)(m)
    assert H.shape == (2, 2, 2, 2)
    np.testing.assert_allclose(H, _fd_hessian(f, m), rtol=1e-6, atol=1e-6)
    # the argnums=(0, 1) blocks of sum(a^2 b)
    a, b = rng.standard_normal(3), rng.standard_normal(3)
    (haa, hab), (hba, hbb) = hessian(lambda a, b: fnp.sum(a * a * b), argnums=(0, 1))(a, b)
    _close(haa, np.diag(2 * b))
    _close(hab, np.diag(2 * a))
    _close(hba, np.diag(2 * a))
    _close(hbb, np.zeros((3, 3)))
