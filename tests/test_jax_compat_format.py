"""Array.__format__ and __str__ as jax.Array's: a 0-d array formats as its numpy scalar
(f"{loss:.4f}"), other arrays as numpy's ndarray; str() and print() show numpy's text, repr()
keeps Array(...)."""
from __future__ import annotations

import numpy as np
import pytest

import funcgrad as jax
import funcgrad.numpy as jnp


@pytest.mark.parametrize("spec", [".4f", ".2e", "10.3f", "<8.1f", "+.3g", "", ".0%"])
def test_scalar_float_formats_as_numpy_scalar(spec):
    v = np.float32(0.1123456)
    assert format(jnp.float32(v), spec) == format(v, spec)


def test_fstring_of_a_loss():
    loss = jnp.mean(jnp.array([0.5, 0.25]))
    assert f"{loss:.4f}" == "0.3750"
    assert f"step {3}: loss {loss:.3f}" == "step 3: loss 0.375"
    assert "{:.2f}".format(loss) == "0.38"  # noqa: UP032 (str.format on purpose)


def test_scalar_int_and_bool_specs():
    assert f"{jnp.int32(7):04d}" == "0007"
    assert f"{jnp.int32(255):x}" == "ff"
    assert f"{jnp.array(True)}" == "True"
    assert f"{jnp.int32(12345):,}" == "12,345"


def test_arrays_format_like_ndarray():
    x = jnp.array([1.0, 2.5])
    assert f"{x}" == str(np.array([1.0, 2.5], np.float32)) == "[1.  2.5]"
    with pytest.raises(TypeError):
        format(x, ".3f")   # numpy refuses a spec on an ndarray; so does jax.Array


def test_str_is_numpy_text_and_repr_keeps_array():
    x = jnp.array([[1.0, 2.0], [3.0, 4.0]])
    assert str(x) == str(np.asarray(x))
    assert repr(x).startswith("Array([[1., 2.],") and repr(x).endswith("dtype=float32)")
    assert str(jnp.float32(0.5)) == "0.5"
    assert repr(jnp.float32(0.5)) == "Array(0.5, dtype=float32)"
    assert str([jnp.float32(0.5)]) == "[Array(0.5, dtype=float32)]"   # containers use repr


def test_print_shows_values(capsys):
    print(jnp.float32(0.25), jnp.arange(3))
    assert capsys.readouterr().out == "0.25 [0 1 2]\n"


def test_jit_result_formats():
    f = jax.jit(lambda x: (x ** 2).sum())
    assert f"{f(jnp.array([1.0, 2.0])):.1f}" == "5.0"


def test_tracer_with_spec_raises_inside_jit():
    def f(x):
        return f"{x:.2f}"

    with pytest.raises(TypeError):
        jax.jit(lambda x: (f(x), x)[1])(1.0)
