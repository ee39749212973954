"""jax.numpy/jax names built from existing ones: matvec, vecmat, 2-D FFTs, polyfit, orthogonal
initializer, placement context managers, replicated/sharded device_put, host queries."""
import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import random
from funcgrad.nn import initializers
from funcgrad.test_util import check_grads


def test_matvec_vecmat_match_numpy():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 4))
    v = rng.standard_normal((4,))
    u = rng.standard_normal((2, 3))
    np.testing.assert_allclose(np.asarray(fnp.matvec(a, v)), a @ v, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(fnp.vecmat(u, a)),
                               np.einsum("bi,bij->bj", u, a), rtol=1e-12)
    z = np.array([1 + 2j, 3 - 1j])
    np.testing.assert_allclose(np.asarray(fnp.vecmat(z, np.eye(2))), np.conj(z))
    check_grads(lambda m, x: fnp.matvec(m, x), (a, v), order=1)


def test_2d_ffts_match_numpy():
    x = np.random.default_rng(1).standard_normal((3, 4, 6))
    np.testing.assert_allclose(np.asarray(fnp.fft.fft2(x)), np.fft.fft2(x), atol=1e-9)
    np.testing.assert_allclose(np.asarray(fnp.fft.ifft2(x)), np.fft.ifft2(x), atol=1e-9)
    np.testing.assert_allclose(np.asarray(fnp.fft.rfft2(x)), np.fft.rfft2(x), atol=1e-9)
    r = np.fft.rfft2(x)
    np.testing.assert_allclose(np.asarray(fnp.fft.irfft2(r, s=x.shape[-2:])),
                               np.fft.irfft2(r, s=x.shape[-2:]), atol=1e-9)


@pytest.mark.parametrize("deg", [0, 1, 3])
def test_polyfit_matches_numpy(deg):
    rng = np.random.default_rng(deg)
    x = np.linspace(-1, 1, 9)
    y = rng.standard_normal(9)
    w = rng.uniform(0.5, 2.0, 9)
    np.testing.assert_allclose(np.asarray(fnp.polyfit(x, y, deg)), np.polyfit(x, y, deg),
                               rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(np.asarray(fnp.polyfit(x, y, deg, w=w)),
                               np.polyfit(x, y, deg, w=w), rtol=1e-8, atol=1e-10)
    with pytest.raises(NotImplementedError):
        fnp.polyfit(x, y, deg, cov=True)


@pytest.mark.parametrize("shape,axis", [((5, 3), -1), ((3, 5), -1), ((2, 3, 4), 0)])
def test_orthogonal_initializer(shape, axis):
    w = np.asarray(initializers.orthogonal(2.0, column_axis=axis)(random.PRNGKey(3), shape))
    assert w.shape == shape
    m = np.moveaxis(w, axis, -1).reshape(-1, shape[axis]) / 2.0
    small = min(m.shape)
    gram = m.T @ m if m.shape[0] >= m.shape[1] else m @ m.T
    np.testing.assert_allclose(gram, np.eye(small), atol=1e-5)
    with pytest.raises(ValueError, match="2-D"):
        initializers.orthogonal()(random.PRNGKey(0), (4,))


@pytest.mark.parametrize("shape", [(3, 2, 5), (3, 4, 1, 1), (1, 2, 3, 3, 4), (4, 3, 0, 2)])
def test_delta_orthogonal_initializer(shape):
    w = np.asarray(initializers.delta_orthogonal(2.0)(random.PRNGKey(4), shape))
    assert w.shape == shape and w.dtype == np.float32
    centre = tuple((k - 1) // 2 for k in shape[:-2])
    m = w[centre] / 2.0
    np.testing.assert_allclose(m @ m.T, np.eye(shape[-2]), atol=1e-5)
    rest = w.copy()
    rest[centre] = 0
    assert not rest.any()   # zeros away from the spatial centre
    with pytest.raises(ValueError, match="3-D, 4-D or 5-D"):
        initializers.delta_orthogonal()(random.PRNGKey(0), (3, 3))
    with pytest.raises(ValueError, match="fan_in <= fan_out"):
        initializers.delta_orthogonal()(random.PRNGKey(0), (3, 4, 2))


def test_placement_context_managers_and_host_queries():
    with funcgrad.default_device("cpu"):
        assert fnp.ones(2).device == "cpu"
    with funcgrad.default_matmul_precision("tensorfloat32"):
        assert funcgrad.config.default_matmul_precision == "tensorfloat32"
    assert funcgrad.config.default_matmul_precision is None
    assert (funcgrad.host_count(), funcgrad.host_id(), funcgrad.host_ids(),
            funcgrad.process_indices()) == (1, 0, [0], [0])
    f = funcgrad.named_call(lambda x: x + 1, name="inc")
    assert f.__name__ == "inc" and float(f(1.0)) == 2.0
    assert "funcgrad:" in funcgrad.print_environment_info(return_string=True)


def test_replicated_and_sharded_device_put():
    devs = funcgrad.devices("cpu")
    rep = funcgrad.device_put_replicated({"w": np.arange(3.0)}, devs)
    assert rep["w"].shape == (len(devs), 3)
    sh = funcgrad.device_put_sharded([np.full(2, i, np.float32) for i in range(len(devs))],
                                     devs)
    np.testing.assert_array_equal(np.asarray(sh)[:, 0], np.arange(len(devs)))
    with pytest.raises(ValueError, match="shards"):
        funcgrad.device_put_sharded([np.ones(2)] * (len(devs) + 1), devs)


def test_tree_broadcast_and_reduce_associative():
    full = {"a": (1, 2), "b": [3, {"c": 4}]}
    assert funcgrad.tree.broadcast({"a": 0, "b": [5, 6]}, full) == {"a": (0, 0),
                                                                   "b": [5, {"c": 6}]}
    order = funcgrad.tree.reduce_associative(lambda x, y: f"({x}{y})", list("abcde"))
    assert order == "(((ab)(cd))e)"
    assert funcgrad.tree.reduce_associative(max, [], identity=-1) == -1
    with pytest.raises(TypeError, match="identity"):
        funcgrad.tree.reduce_associative(max, [])


def test_lax_primitive_names_bind():
    from funcgrad import lax
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(np.asarray(lax.add_p.bind(x, x)), 2 * x)
    np.testing.assert_array_equal(np.asarray(lax.reduce_sum_p.bind(x, axes=(1,))), x.sum(1))
    assert lax.transpose_p.bind(x, permutation=(1, 0)).shape == (3, 2)
