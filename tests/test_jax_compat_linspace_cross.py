"""linspace and cross in JAX's full forms: linspace with array / traced bounds, axis and retstep
(differentiable in its bounds), cross with axisa / axisb / axisc / axis and 2-vectors. Expected
values are those JAX 0.10.2 prints for the same calls."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as jax
import funcgrad.numpy as jnp
from funcgrad.test_util import check_grads


def test_linspace_matches_jax():
    assert jnp.linspace(0.0, 1.0, 5).tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    got = jnp.linspace(0, 10, 4, dtype=int)
    assert got.dtype == np.int32 and got.tolist() == [0, 3, 6, 10]
    assert jnp.linspace(jnp.array([0.0, 1.0]), 2.0, 3, axis=-1).tolist() == [[0.0, 1.0, 2.0],
                                                                            [1.0, 1.5, 2.0]]
    assert jnp.linspace(np.zeros((2, 1)), np.ones(3), 2, axis=1).shape == (2, 2, 3)
    one, step = jnp.linspace(0.0, 1.0, 1, retstep=True)
    assert one.tolist() == [0.0] and np.isnan(float(step))
    none, step = jnp.linspace(0.0, 1.0, 0, retstep=True)
    assert none.shape == (0,) and np.isnan(float(step))
    assert float(jnp.linspace(0.0, 1.0, 5, retstep=True)[1]) == 0.25
    assert float(jnp.linspace(0.0, 1.0, 1, endpoint=False, retstep=True)[1]) == 1.0
    assert jnp.logspace(0.0, 2.0, 3).tolist() == [1.0, 10.0, 100.0]
    with pytest.raises(ValueError, match="must be non-negative"):
        jnp.linspace(0.0, 1.0, -1)


@given(st.integers(0, 6), st.booleans(), st.floats(-5, 5), st.floats(-5, 5))
def test_linspace_close_to_numpy_with_exact_ends(num, endpoint, lo, hi):
    lo, hi = np.float64(lo), np.float64(hi)    # (a Python float would become float32)
    got = np.asarray(jnp.linspace(lo, hi, num, endpoint=endpoint, dtype=np.float64))
    np.testing.assert_allclose(got, np.linspace(lo, hi, num, endpoint=endpoint),
                               rtol=1e-12, atol=1e-12)
    if num:
        assert got[0] == lo
    if num > 1 and endpoint:
        assert got[-1] == hi


def test_linspace_differentiates_its_bounds():
    # JAX 0.10.2: 2.0 and 2.5
    assert float(jax.grad(lambda s: jnp.linspace(0.0, s, 4).sum())(2.0)) == 2.0
    assert float(jax.grad(lambda s: jnp.linspace(s, 3.0, 4, endpoint=False).sum())(2.0)) == 2.5
    check_grads(lambda a, b: jnp.linspace(a, b, 5, axis=-1), (np.array([0.5, 1.0]), 3.0),
                order=2)
    traced = jax.jit(lambda s: jnp.linspace(0.0, s, 3))(4.0)
    assert traced.tolist() == [0.0, 2.0, 4.0]


def test_cross_matches_jax():
    assert jnp.cross(np.array([1.0, 0.0, 0.0]), np.array([0.0, 1.0, 0.0])).tolist() == [0, 0, 1]
    assert float(jnp.cross(np.array([1.0, 2.0]), np.array([3.0, 4.0]))) == -2.0
    assert jnp.cross(np.eye(3), np.ones((3, 3)), axisa=0, axisc=0).tolist() == [
        [0.0, 1.0, -1.0], [-1.0, 0.0, 1.0], [1.0, -1.0, 0.0]]
    assert jnp.cross(np.array([1.0, 2.0]), np.array([3.0, 4.0, 5.0])).tolist() == [10, -5, -2]
    got = jnp.cross(np.arange(6.0).reshape(2, 3), np.ones((3, 2)), axisb=0)
    assert got.tolist() == [[-1.0, 2.0, -1.0], [-1.0, 2.0, -1.0]]
    a, b = np.arange(12.0).reshape(3, 4), np.arange(12.0, 24.0).reshape(3, 4)
    np.testing.assert_array_equal(np.asarray(jnp.cross(a, b, axis=0)), np.cross(a, b, axis=0))
    check_grads(lambda x, y: jnp.cross(x, y, axisa=0, axisb=0), (a, b), order=1)
    with pytest.raises(ValueError, match="dimension must be 2 or 3"):
        jnp.cross(np.ones(4), np.ones(3))
