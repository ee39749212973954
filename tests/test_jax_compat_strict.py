"""Strictness as JAX's: lax ops refuse mixed dtypes, funcgrad.numpy functions refuse Python
lists and tuples where JAX's do (check_arraylike), and array / asarray keep taking them."""
from __future__ import annotations

import numpy as np
import pytest

import funcgrad as jax
import funcgrad.numpy as jnp
from funcgrad import lax


def test_lax_refuses_mixed_dtypes_as_jax():
    # JAX: TypeError: lax.add requires arguments to have the same dtypes, got int32, float32.
    with pytest.raises(TypeError, match=r"^lax\.add requires arguments to have the same "
                                        r"dtypes, got int32, float32\. \(Tip: jnp\.add"):
        lax.add(1, 1.0)
    with pytest.raises(TypeError, match="lax.mul requires .* got float32, int32"):
        lax.mul(jnp.ones(2), jnp.ones(2, jnp.int32))
    with pytest.raises(TypeError, match="lax.max requires .* got float32, int32"):
        lax.max(jnp.float32(1), 2)                  # an int scalar with a float array
    with pytest.raises(TypeError, match="lax.dynamic_update_slice requires"):
        lax.dynamic_update_slice(jnp.zeros(3), jnp.ones(1, jnp.int32), (0,))
    with pytest.raises(TypeError, match="lax.clamp requires"):
        lax.clamp(0, jnp.ones(2), 1.0)
    with pytest.raises(TypeError, match=r"\n  at .*test_jax_compat_strict\.py"):
        lax.sub(jnp.ones(2), jnp.ones(2, jnp.int32))   # the message names the user's line


def test_lax_takes_one_dtype_and_scalars_of_its_kind():
    assert lax.add(jnp.ones(2), 1.0).tolist() == [2.0, 2.0]
    assert lax.mul(jnp.arange(3), 2).tolist() == [0, 2, 4]
    assert int(lax.add(1, 2)) == 3
    assert bool(lax.lt(jnp.float32(1), jnp.float32(2)))
    assert lax.clamp(0.0, jnp.asarray([-1.0, 2.0]), 1.0).tolist() == [0.0, 1.0]
    # the same dtypes under jit, vmap and grad
    f = jax.jit(jax.vmap(lambda x: lax.mul(x, 3.0)))
    assert f(jnp.ones(2)).tolist() == [3.0, 3.0]
    assert float(jax.grad(lambda x: lax.mul(x, x))(3.0)) == 6.0


@pytest.mark.parametrize("call", [
    lambda: jnp.sum([1, 2, 3]),
    lambda: jnp.add([1, 2], 1),
    lambda: jnp.mean((1.0, 2.0)),
    lambda: jnp.reshape([1, 2, 3, 4], (2, 2)),
    lambda: jnp.where([True, False], 1, 2),
    lambda: jnp.dot(jnp.ones(2), [1.0, 2.0]),
    lambda: jnp.concatenate([[1, 2], [3]]),
    lambda: jnp.take(jnp.arange(3), [0, 1]),
    lambda: jnp.zeros_like([1, 2]),
    lambda: jnp.clip(jnp.ones(2), [0, 0], 1),
])
def test_numpy_functions_refuse_lists_as_jax(call):
    with pytest.raises(TypeError, match=r"requires ndarray or scalar arguments, got <class "
                                        r"'(list|tuple)'> at position \d\.\n  at .*strict"):
        call()


def test_the_message_is_jaxs():
    # JAX 0.4-0.7: "sum requires ndarray or scalar arguments, got <class 'list'> at position 0."
    with pytest.raises(TypeError) as info:
        jnp.sum([1, 2, 3])
    assert str(info.value).splitlines()[0] == (
        "sum requires ndarray or scalar arguments, got <class 'list'> at position 0.")
    with pytest.raises(TypeError, match="at position 1"):
        jnp.stack([jnp.ones(2), [1.0, 2.0]])


def test_lists_still_go_where_jax_takes_them():
    assert jnp.array([1, 2, 3]).tolist() == [1, 2, 3]
    assert jnp.asarray((1.0, 2.0)).dtype == np.float32
    assert jnp.sum(jnp.asarray([1, 2, 3])) == 6
    assert jnp.reshape(jnp.arange(4), [2, 2]).shape == (2, 2)        # a shape may be a list
    assert jnp.concatenate([jnp.ones(2), np.zeros(1)]).tolist() == [1.0, 1.0, 0.0]
    assert jnp.stack((jnp.ones(2), jnp.zeros(2))).shape == (2, 2)
    assert jnp.zeros([2, 3]).shape == (2, 3)
    assert jnp.sum(jnp.ones((2, 3)), axis=(0, 1)) == 6.0
    assert jnp.pad(jnp.ones(2), [(1, 1)]).tolist() == [0.0, 1.0, 1.0, 0.0]
    assert jnp.einsum("i,i->", jnp.ones(2), np.ones(2)) == 2.0
    assert jnp.shape([[1, 2]]) == (1, 2) and jnp.ndim([1]) == 1
    assert jnp.float32([1, 2]).tolist() == [1.0, 2.0]
    assert jnp.sum(np.float64(2.0)) == 2.0 and jnp.sum(3) == 3       # scalars are array-like
    x = jnp.arange(3.0)
    assert x.sum() == 3.0 and (x + 1).tolist() == [1.0, 2.0, 3.0]   # methods and operators


def test_the_library_calls_its_own_functions_with_arrays():
    # a few library paths that take lists and call funcgrad.numpy internally
    from funcgrad import nn, random
    assert nn.one_hot(jnp.asarray([0, 2]), 3).shape == (2, 3)
    assert random.permutation(random.key(0), 5).shape == (5,)
    assert jnp.histogram(jnp.arange(4.0), bins=2)[0].tolist() == [2, 2]
