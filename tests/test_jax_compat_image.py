"""funcgrad.image (jax.image): resize with every method and scale_and_translate, against the
numbers JAX 0.10.2 (CPU, float32) gives for the same calls (rounded to 6 decimals)."""
from __future__ import annotations

import numpy as np
import pytest

import funcgrad as jax
import funcgrad.numpy as jnp
from funcgrad import image
from funcgrad.test_util import check_grads

X = np.arange(12, dtype=np.float32).reshape(3, 4) ** 1.5 / 10

JAX_RESIZE = {
    ("linear", (2, 3), True): [[0.354529, 0.604837, 0.931862], [1.831978, 2.317161, 2.84055]],
    ("lanczos3", (2, 2), True): [[0.25804, 0.696141], [2.034093, 2.873191]],
    ("area", (2, 2), True): [[0.353006, 0.821106], [1.97392, 2.823808]],
    ("lanczos5", (4, 2), False): [[0.058855, 0.420645], [0.277015, 0.817439],
                                  [1.765136, 2.679952], [2.510499, 3.489092]],
    ("cubic", (5, 7), True): [
        [-0.067005, -0.041637, 0.01416, 0.099328, 0.208715, 0.357351, 0.436967],
        [0.201525, 0.257741, 0.371207, 0.497785, 0.643441, 0.830039, 0.928988],
        [0.774771, 0.882637, 1.092835, 1.289845, 1.497804, 1.749968, 1.882355],
        [1.753368, 1.891448, 2.159132, 2.403049, 2.655644, 2.956588, 3.114102],
        [2.337737, 2.489962, 2.784736, 3.051734, 3.326832, 3.65266, 3.823029]],
    ("cubic-pytorch", (5, 6), False): [
        [-0.083664, -0.052888, 0.02918, 0.127022, 0.295927, 0.411044],
        [0.189804, 0.270554, 0.425912, 0.565224, 0.786903, 0.932067],
        [0.772393, 0.926049, 1.189473, 1.391557, 1.693828, 1.885214],
        [1.717494, 1.915692, 2.248807, 2.496532, 2.859594, 3.086876],
        [2.364215, 2.583183, 2.950078, 3.221634, 3.617081, 3.86378]],
}


@pytest.mark.parametrize("method, shape, antialias", sorted(JAX_RESIZE))
def test_resize_matches_jax(method, shape, antialias):
    got = image.resize(X, shape, method, antialias=antialias)
    assert got.dtype == np.float32 and got.shape == shape
    np.testing.assert_allclose(np.asarray(got), JAX_RESIZE[method, shape, antialias],
                               rtol=1e-5, atol=2e-6)


def test_nearest_keeps_the_dtype_and_picks_jax_s_pixels():
    got = image.resize(X, (5, 3), "nearest")
    np.testing.assert_array_equal(np.asarray(got), X[[0, 0, 1, 2, 2]][:, [0, 2, 3]])
    ints = image.resize(np.arange(6, dtype=np.int32).reshape(2, 3), (3, 5), "nearest")
    assert ints.dtype == np.int32
    assert image.resize(np.arange(6, dtype=np.int32).reshape(2, 3), (3, 5),
                        "linear").dtype == np.float32   # other methods: a floating dtype


def test_unchanged_axes_and_batches_pass_through():
    batch = np.stack([X, 2 * X])[..., None]            # (2, 3, 4, 1): batch and channel
    got = image.resize(batch, (2, 2, 3, 1), "linear")
    np.testing.assert_allclose(np.asarray(got[1, :, :, 0]),
                               2 * np.asarray(JAX_RESIZE["linear", (2, 3), True]), rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(image.resize(X, X.shape, "cubic")), X)
    assert image.resize(X, (0, 4), image.ResizeMethod.LINEAR).shape == (0, 4)


def test_scale_and_translate_and_its_gradient_match_jax():
    s, t = jnp.array([1.3, 0.7]), jnp.array([0.4, -0.6])
    got = image.scale_and_translate(X, (4, 5), (0, 1), s, t, "linear")
    np.testing.assert_allclose(np.asarray(got), [[0.125158, 0.401229, 0, 0, 0],
                                                 [0.478577, 0.837255, 0, 0, 0],
                                                 [1.329343, 1.86214, 0, 0, 0],
                                                 [2.550662, 3.204003, 0, 0, 0]],
                               rtol=1e-5, atol=2e-6)
    g = jax.grad(lambda s: image.scale_and_translate(X, (4, 5), (0, 1), s, t, "lanczos3")
                 .sum())(s)
    np.testing.assert_allclose(np.asarray(g), [-10.22894, -7.64504], rtol=1e-5)
    jitted = jax.jit(lambda s: image.scale_and_translate(X, (4, 5), (0, 1), s, t, "linear"))
    np.testing.assert_allclose(np.asarray(jitted(s)), np.asarray(got), rtol=1e-6)


def test_resize_gradient_float64():
    x = np.random.default_rng(0).standard_normal((3, 4))
    check_grads(lambda x: image.resize(x, (2, 5), "cubic"), (x,), order=2)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"shape \(2,\) for an image of shape \(3, 4\)"):
        image.resize(X, (2,), "linear")
    with pytest.raises(ValueError, match='Unknown resize method "bogus"'):
        image.resize(X, (2, 2), "bogus")
    with pytest.raises(ValueError, match="not supported by scale_and_translate"):
        image.scale_and_translate(X, (3, 4), (0,), [1.0], [0.0], "nearest")
    with pytest.raises(ValueError, match="one value per spatial dim"):
        image.scale_and_translate(X, (3, 4), (0, 1), [1.0], [0.0], "linear")
