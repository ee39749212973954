"""jax.custom_batching.custom_vmap: the user's rule batches the function under vmap (nested,
inside jit, around jit), the function itself runs outside vmap, derivatives differentiate it;
sequential_vmap maps one element at a time; bad rules raise naming the function."""
from __future__ import annotations

import numpy as np
import pytest

import funcgrad as jax
import funcgrad.numpy as jnp
from funcgrad.custom_batching import custom_vmap, sequential_vmap


def _counted():
    calls = []

    @custom_vmap
    def f(x, y):
        return jnp.sin(x) * y

    @f.def_vmap
    def rule(axis_size, in_batched, x, y):
        calls.append((axis_size, list(in_batched)))
        x_b, y_b = in_batched
        # the rule computes something else (cos), so a test sees which one ran
        out = jnp.cos(x) * y
        return out, x_b or y_b
    return f, calls


def test_outside_vmap_the_function_runs():
    f, calls = _counted()
    np.testing.assert_allclose(float(f(0.5, 2.0)), np.sin(0.5) * 2.0, rtol=1e-6)
    np.testing.assert_allclose(float(jax.jit(f)(0.5, 2.0)), np.sin(0.5) * 2.0, rtol=1e-6)
    assert calls == []


def test_vmap_calls_the_rule_with_jaxs_arguments():
    f, calls = _counted()
    x = np.linspace(0, 1, 4).astype(np.float32)
    got = jax.vmap(f, in_axes=(0, None))(x, 3.0)
    np.testing.assert_allclose(np.asarray(got), np.cos(x) * 3.0, rtol=1e-6)
    assert calls == [(4, [True, False])]
    # a batch axis elsewhere arrives at the front
    xs = np.stack([x, x + 1])
    got = jax.vmap(f, in_axes=(1, None))(xs, 2.0)
    np.testing.assert_allclose(np.asarray(got), np.cos(xs.T) * 2.0, rtol=1e-6)
    assert calls[-1] == (4, [True, False])


def test_the_rule_runs_under_jit_both_ways():
    f, calls = _counted()
    x = np.arange(3, dtype=np.float32)
    want = np.cos(x) * x
    np.testing.assert_allclose(np.asarray(jax.jit(jax.vmap(f))(x, x)), want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jax.vmap(jax.jit(f))(x, x)), want, rtol=1e-6)
    assert [c[1] for c in calls] == [[True, True], [True, True]]


def test_nested_vmap_applies_the_rule_at_the_inner_level():
    f, calls = _counted()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = jax.vmap(jax.vmap(f, in_axes=(0, None)), in_axes=(0, None))(x, 2.0)
    np.testing.assert_allclose(np.asarray(got), np.cos(x) * 2.0, rtol=1e-6)
    assert calls == [(3, [True, False])]


def test_an_unbatched_output_and_pytrees():
    @custom_vmap
    def f(d):
        return {"total": jnp.sum(d["a"]) + d["b"], "scale": d["b"] * 2}

    @f.def_vmap
    def rule(axis_size, in_batched, d):
        (flags,) = in_batched
        assert flags == {"a": True, "b": False} and axis_size == 2
        return ({"total": jnp.sum(d["a"], axis=1) + d["b"], "scale": d["b"] * 2},
                {"total": True, "scale": False})

    out = jax.vmap(f, in_axes=({"a": 0, "b": None},), out_axes={"total": 0, "scale": None})(
        {"a": jnp.ones((2, 3)), "b": jnp.float32(1.0)})
    assert out["total"].tolist() == [4.0, 4.0] and float(out["scale"]) == 2.0


def test_derivatives_differentiate_the_function():
    f, _ = _counted()
    g = jax.grad(f)(0.5, 2.0)
    np.testing.assert_allclose(float(g), np.cos(0.5) * 2.0, rtol=1e-6)
    _, t = jax.jvp(lambda x: f(x, 2.0), (0.5,), (1.0,))
    np.testing.assert_allclose(float(t), np.cos(0.5) * 2.0, rtol=1e-6)


def test_sequential_vmap_maps_one_element_at_a_time():
    seen = []

    def body(x, w):
        seen.append(tuple(x.shape))
        return x @ w

    g = sequential_vmap(body)
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    w = np.ones((2, 4), np.float32)
    got = jax.vmap(g, in_axes=(0, None))(x, w)
    np.testing.assert_allclose(np.asarray(got), x @ w)
    assert (2,) in seen and (3, 2) not in seen


def test_bad_rules_raise():
    @custom_vmap
    def f(x):
        return x * 2

    with pytest.raises(AttributeError, match="No batching rule defined"):
        f(1.0)

    f.def_vmap(lambda n, b, x: x * 2)            # not a pair
    with pytest.raises(TypeError, match="must return a pair"):
        jax.vmap(f)(jnp.ones(3))
    f.def_vmap(lambda n, b, x: ((x, x), True))    # another structure
    with pytest.raises(ValueError, match="does not match that of original"):
        jax.vmap(f)(jnp.ones(3))
    f.def_vmap(lambda n, b, x: (x[0], True))      # a batched output without the batch axis
    with pytest.raises(ValueError, match=r"shape \(\) batched, expected \(3,\)"):
        jax.vmap(f)(jnp.ones(3))
    f.def_vmap(lambda n, b, x: (x * 2, [True]))   # batching spec of another structure
    with pytest.raises(ValueError, match="batching specification"):
        jax.vmap(f)(jnp.ones(3))
