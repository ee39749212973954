"""jit as a decorator factory, as JAX's: @jit(static_argnums=...) / @jit(static_argnames=...)
/ @jit(donate_argnums=...) with the function omitted, equal to functools.partial(jit, ...)."""
from __future__ import annotations

import functools

import numpy as np
import pytest

import funcgrad as jax
import funcgrad.numpy as jnp


def test_static_argnums_factory():
    @jax.jit(static_argnums=1)
    def power(x, n):
        out = x
        for _ in range(n - 1):   # n is a Python int: static
            out = out * x
        return out

    assert float(power(jnp.float32(2.0), 3)) == 8.0
    assert float(power(jnp.float32(2.0), 4)) == 16.0
    assert power.stats()["traces"] == 2     # one per static value
    assert float(power(jnp.float32(3.0), 3)) == 27.0
    assert power.stats()["traces"] == 2
    assert power.__name__ == "power"


def test_static_argnames_factory():
    @jax.jit(static_argnames=("mode",))
    def act(x, mode="relu"):
        return jnp.maximum(x, 0) if mode == "relu" else jnp.tanh(x)

    x = jnp.array([-1.0, 2.0])
    np.testing.assert_allclose(np.asarray(act(x)), [0.0, 2.0])
    np.testing.assert_allclose(np.asarray(act(x, mode="tanh")), np.tanh([-1.0, 2.0]),
                               rtol=1e-6)
    np.testing.assert_allclose(np.asarray(act(x, "tanh")), np.tanh([-1.0, 2.0]), rtol=1e-6)


def test_donate_argnums_factory():
    @jax.jit(donate_argnums=0)
    def step(x):
        return x + 1.0

    x = jnp.ones(3)
    y = step(x)
    assert x.is_deleted()
    np.testing.assert_allclose(np.asarray(y), [2.0, 2.0, 2.0])


def test_factory_equals_partial_and_plain_calls():
    def f(x, k):
        return x * k

    a = jax.jit(static_argnums=(1,))(f)
    b = functools.partial(jax.jit, static_argnums=(1,))(f)
    c = jax.jit(f, static_argnums=1)
    d = jax.jit(f, (1,))      # positional static_argnums still works
    for g in (a, b, c, d):
        assert float(g(jnp.float32(2.0), 5)) == 10.0
    assert float(jax.jit()(lambda x: x * 2)(jnp.float32(1.5))) == 3.0


def test_factory_composes_with_grad_and_vmap():
    @jax.jit(static_argnums=1)
    def loss(w, n):
        return jnp.sum(w ** n)

    g = jax.grad(loss)(jnp.array([1.0, 2.0]), 3)
    np.testing.assert_allclose(np.asarray(g), [3.0, 12.0])
    v = jax.vmap(lambda w: loss(w, 2))(jnp.arange(6.0).reshape(3, 2))
    np.testing.assert_allclose(np.asarray(v), [1.0, 13.0, 41.0])


def test_non_callable_is_refused():
    with pytest.raises(TypeError, match="callable"):
        jax.jit(3)
