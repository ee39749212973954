"""jax.nn activations, lax additions and top-level API of issue 12 against numpy / math."""
from __future__ import annotations

import math

import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import lax, nn
from funcgrad.test_util import check_grads

X = np.array([-3.0, -1.2, -0.3, 0.4, 1.1, 2.5, 7.0])


def close(a, b, **kw):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), **({"rtol": 1e-7, "atol": 1e-9}
                                                                 | kw))


def test_activations_values_and_grads():
    sp = np.log1p(np.exp(X))
    sig = 1 / (1 + np.exp(-X))
    want = {"elu": np.where(X > 0, X, np.expm1(X)), "relu6": np.clip(X, 0, 6),
            "leaky_relu": np.where(X >= 0, X, 0.01 * X), "hard_tanh": np.clip(X, -1, 1),
            "log_sigmoid": -np.log1p(np.exp(-X)), "soft_sign": X / (1 + np.abs(X)),
            "mish": X * np.tanh(sp), "hard_sigmoid": np.clip(X + 3, 0, 6) / 6,
            "selu": 1.0507009873554805 * np.where(X > 0, X, 1.6732632423543772 * np.expm1(X)),
            "celu": np.where(X > 0, X, np.expm1(X)), "squareplus": (X + np.sqrt(X * X + 4)) / 2}
    for name, w in want.items():
        close(getattr(nn, name)(X), w)
        check_grads(getattr(nn, name), (X[[0, 2, 4]],), order=1)
    close(nn.glu(np.concatenate([X, X])), X * sig)
    z = nn.standardize(X)
    close(z, (X - X.mean()) / np.sqrt(X.var() + 1e-5))
    close(nn.logmeanexp(X), np.log(np.mean(np.exp(X))))
    close(nn.log1mexp(np.array([1e-3, 0.5, 5.0])), np.log(-np.expm1(-np.array([1e-3, 0.5, 5.0]))))


def test_special_functions():
    xs = np.array([0.1, 0.5, 1.0, 2.5, 7.0, 30.0, -0.5, -2.3])
    close(lax.lgamma(xs), [math.lgamma(v) for v in xs], rtol=1e-12, atol=1e-13)
    h = 1e-6
    num = [(math.lgamma(v + h) - math.lgamma(v - h)) / (2 * h) for v in xs]
    close(lax.digamma(xs), num, rtol=1e-6, atol=1e-6)
    check_grads(lax.lgamma, (xs[:4],), order=1)
    y = np.array([-0.99, -0.5, 0.0, 0.3, 0.9, 0.999])
    close(lax.erf(lax.erf_inv(y)), y, rtol=1e-12, atol=1e-14)
    check_grads(lax.erf_inv, (y[1:5],), order=2)
    close(lax.erfc(np.array([0.5])), [math.erfc(0.5)], rtol=1e-12)


def test_lax_slicing_and_misc():
    a = np.arange(20.0).reshape(4, 5)
    close(lax.dynamic_slice(a, (1, 3), (2, 2)), a[1:3, 3:5])
    close(lax.dynamic_slice(a, (3, 4), (2, 2)), a[2:4, 3:5])   # clamped like lax
    f = funcgrad.jit(lambda x, i: lax.dynamic_slice_in_dim(x, i, 2, axis=1))
    close(f(a, np.int32(1)), a[:, 1:3])
    u = -np.ones((2, 2))
    want = a.copy()
    want[1:3, 0:2] = u
    close(lax.dynamic_update_slice(a, u, (1, 0)), want)
    check_grads(lambda x: lax.dynamic_slice(x, (1, 2), (2, 2)) ** 2, (a,), order=1)
    close(lax.clamp(0.0, X, 1.0), np.clip(X, 0, 1))
    close(lax.select_n(np.array([0, 1, 2]), np.zeros(3), np.ones(3), np.full(3, 2.0)), [0, 1, 2])
    close(lax.pad(np.ones(3), -1.0, [(1, -1, 1)]), [-1, 1, -1, 1, -1])
    k, v = lax.sort((np.array([3, 1, 2]), np.array([30.0, 10.0, 20.0])), num_keys=1)
    close(v, [10.0, 20.0, 30.0])
    close(lax.cumlogsumexp(X), np.logaddexp.accumulate(X))
    with pytest.raises(NameError, match="unbound axis name"):   # no pmap/vmap names "i"
        lax.psum(X, "i")


def test_top_level_api():
    s = funcgrad.ShapeDtypeStruct((4, 3), np.float32)
    out = funcgrad.eval_shape(lambda a, b: (fnp.sum(a, 0), a @ b), s, np.ones((3, 2)))
    assert out[0] == funcgrad.ShapeDtypeStruct((3,), np.float32)
    assert out[1].shape == (4, 2)
    tree = {"a": 1.0, "b": (2.0, 3.0)}
    assert funcgrad.tree.leaves(tree) == [1.0, 2.0, 3.0]
    assert funcgrad.tree.reduce(lambda x, y: x + y, tree) == 6.0
    leaves, td = funcgrad.tree.flatten(tree)
    assert funcgrad.tree.unflatten(td, leaves) == tree
    x = funcgrad.block_until_ready(fnp.ones(3))
    assert funcgrad.device_count() >= 1 and funcgrad.local_devices()
    t = funcgrad.linear_transpose(lambda v: 2.0 * v[::-1], np.zeros(3))
    close(t(np.array([1.0, 2.0, 3.0]))[0], [6.0, 4.0, 2.0])
    with funcgrad.named_scope("block"):
        close(x, np.ones(3))
    got = funcgrad.pure_callback(lambda v: np.sort(v), funcgrad.ShapeDtypeStruct((3,), np.float64),
                                 np.array([3.0, 1.0, 2.0]))
    close(got, [1.0, 2.0, 3.0])
    close(funcgrad.jacobian(lambda v: v * v)(np.array([1.0, 2.0])), np.diag([2.0, 4.0]))
