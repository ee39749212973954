"""Smaller JAX compatibility pieces (issue 32, item 6): test_util.check_grads with JAX's dtype
tolerances, funcgrad.typing, custom_jvp.defjvps, Array.devices() / .sharding,
debug.callback, the optax.transforms namespace, and JAX's out-of-range gather modes."""
from __future__ import annotations

import doctest
import functools
import importlib

import numpy as np
import pytest

import funcgrad as jax
import funcgrad.numpy as jnp
from funcgrad import optim as optax
from funcgrad import test_util
from funcgrad.api.config_states import check_indices
from funcgrad.test_util import check_grads


@pytest.mark.parametrize("name", ["funcgrad.test_util", "funcgrad.typing", "funcgrad.sharding",
                                  "funcgrad.debug", "funcgrad.numpy._indexing",
                                  "funcgrad.optim.transforms_misc"])
def test_docstring_examples(name):
    res = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert res.failed == 0 and res.attempted > 0


# ---------------------------------------------------------------------------------------------
# test_util
# ---------------------------------------------------------------------------------------------

def test_default_gradient_tolerances_are_jax():
    t = test_util.default_gradient_tolerance
    assert t[np.dtype(np.float32)] == 2e-3 and t[np.dtype(np.float64)] == 1e-5
    assert t[np.dtype(np.float16)] == 1e-2 and t[np.dtype(np.complex64)] == 1e-3


def test_float32_checks_pass_with_jax_tolerances():
    # float32 central differences with eps=1e-4 are good to ~1e-3: JAX's 2e-3 passes them
    x = np.linspace(-2, 2, 7).astype(np.float32)
    check_grads(jnp.tanh, (x,), order=2)
    check_grads(lambda a, b: jnp.sum(jnp.sin(a) * b ** 2), (x, x[::-1] * 0.3 + 0.5), order=2,
                modes=("fwd", "rev", "lin"))
    check_grads(lambda z: jnp.abs(z) ** 2, (np.complex64([1 + 2j, -0.5j]),), order=1)


def test_wrong_derivatives_are_still_caught():
    f = jax.custom_jvp(lambda x: jnp.sin(x))
    f.defjvp(lambda p, t: (jnp.sin(p[0]), 1.01 * jnp.cos(p[0]) * t[0]))   # 1% off
    with pytest.raises(AssertionError, match="tangent"):
        check_grads(f, (np.float64([0.3, 1.1]),), order=1, modes=("fwd",))
    # reverse mode alone compares with central differences (JAX's check_vjp): a jvp and vjp
    # that agree with each other but not with f are caught
    with pytest.raises(AssertionError, match="cotangent projection"):
        check_grads(f, (np.float64([0.3, 1.1]),), order=1, modes=("rev",))
    with pytest.raises(AssertionError):   # float32 with a 10% error is caught too
        g = jax.custom_jvp(lambda x: x ** 2)
        g.defjvp(lambda p, t: (p[0] ** 2, 2.2 * p[0] * t[0]))
        check_grads(g, (np.float32([1.0, 2.0]),), order=1)


def test_tolerance_arguments():
    f = jax.custom_jvp(lambda x: jnp.sin(x))
    f.defjvp(lambda p, t: (jnp.sin(p[0]), 1.001 * jnp.cos(p[0]) * t[0]))
    check_grads(f, (np.float64(0.3),), order=1, modes=("fwd",), atol=1e-2, rtol=1e-2)
    check_grads(f, (np.float64(0.3),), order=1, modes=("fwd",),
                atol={np.float64: 1e-2}, rtol={np.float64: 1e-2})
    with pytest.raises(AssertionError):
        check_grads(f, (np.float64(0.3),), order=1, modes=("fwd",))


def test_check_jvp_and_check_vjp_take_jax_arguments():
    f = lambda x, y: jnp.sin(x) * y
    args = (np.float64([0.1, 0.5]), np.float64([2.0, 3.0]))
    test_util.check_jvp(f, functools.partial(jax.jvp, f), args)
    test_util.check_vjp(f, functools.partial(jax.vjp, f), args, err_msg="f")


def test_python_scalars_and_integer_arguments():
    check_grads(lambda x, n: x ** n, (1.5, 3), order=2)
    check_grads(lambda x: (x > 0, x * 2.0), (np.ones(2),), order=2)


# ---------------------------------------------------------------------------------------------
# typing, defjvps, devices / sharding
# ---------------------------------------------------------------------------------------------

def test_typing():
    import typing

    from funcgrad.typing import ArrayLike, DTypeLike

    assert jax.typing.ArrayLike is ArrayLike
    members = typing.get_args(ArrayLike)
    assert jax.Array in members and np.ndarray in members and float in members
    assert np.dtype in typing.get_args(DTypeLike)

    def f(x: ArrayLike, dtype: DTypeLike = "float32") -> jax.Array:
        return jnp.asarray(x, dtype)

    assert f([1, 2]).dtype == np.float32


def test_defjvps_matches_jax_docs():
    @jax.custom_jvp
    def f(x, y):
        return jnp.sin(x) * y

    f.defjvps(lambda x_dot, primal_out, x, y: jnp.cos(x) * x_dot * y,
              lambda y_dot, primal_out, x, y: jnp.sin(x) * y_dot)
    x, y = np.float64(3.0), np.float64(4.0)
    np.testing.assert_allclose(np.asarray(f(x, y)), np.sin(3.0) * 4.0)
    np.testing.assert_allclose(np.asarray(jax.grad(f)(x, y)), np.cos(3.0) * 4.0)
    np.testing.assert_allclose(np.asarray(jax.grad(f, 1)(x, y)), np.sin(3.0))
    _, t = jax.jvp(f, (x, y), (np.float64(1.0), np.float64(2.0)))
    np.testing.assert_allclose(np.asarray(t), np.cos(3.0) * 4.0 + 2 * np.sin(3.0))

    g = jax.custom_jvp(lambda a, b: a * b)
    g.defjvps(None, lambda tb, ans, a, b: tb * a)   # no dependence on a's tangent
    ga, gb = jax.grad(g, (0, 1))(np.float64(2.0), np.float64(5.0))
    assert float(ga) == 0.0 and float(gb) == 2.0
    h = jax.custom_jvp(lambda a: a, nondiff_argnums=())
    h.defjvps(None)
    assert float(jax.grad(h)(1.0)) == 0.0
    with pytest.raises(TypeError, match="nondiff_argnums"):
        jax.custom_jvp(lambda a, n: a * n, nondiff_argnums=(1,)).defjvps(None)


def test_devices_and_sharding():
    x = jnp.ones((2, 3))
    (d,) = x.devices()
    assert d == jax.devices("cpu")[0] or d.platform == jax.default_backend()
    s = x.sharding
    assert isinstance(s, jax.sharding.SingleDeviceSharding)
    assert s.device_set == x.devices() and s.is_fully_replicated and s.num_devices == 1
    assert s.shard_shape(x.shape) == (2, 3) and s == jnp.zeros(1).sharding
    assert hash(s) == hash(jnp.zeros(1).sharding)
    assert jax.jit(lambda v: v * 2)(x).sharding == s
    x.delete()
    with pytest.raises(RuntimeError):
        x.devices()


# ---------------------------------------------------------------------------------------------
# debug.callback
# ---------------------------------------------------------------------------------------------

def test_debug_callback_eager_jit_grad_vmap():
    seen = []

    def record(v, tag="?"):
        seen.append((np.asarray(v).tolist(), tag))

    def f(x):
        jax.debug.callback(record, x, tag="f")
        return jnp.sum(x ** 2)

    x = jnp.array([1.0, 2.0])
    f(x)
    jf = jax.jit(f)
    jf(x)
    jf(x + 1)                      # runs on every call, not only when tracing
    g = jax.grad(f)(x)             # eager grad: once (the forward's value is reused)
    np.testing.assert_allclose(np.asarray(g), [2.0, 4.0])
    jax.vmap(f)(jnp.arange(4.0).reshape(2, 2))   # once per element, as JAX
    assert seen == [([1.0, 2.0], "f"), ([1.0, 2.0], "f"), ([2.0, 3.0], "f"),
                    ([1.0, 2.0], "f"), ([0.0, 1.0], "f"), ([2.0, 3.0], "f")]


def test_debug_callback_forms_and_arguments():
    seen = []
    jax.debug.callback(ordered=True)(lambda a, b: seen.append(a + b), 1, jnp.ones(2))
    jax.debug.callback(lambda d: seen.append(d["k"]), {"k": jnp.float32(3.0)}, ordered=True)
    np.testing.assert_allclose(np.asarray(seen[0]), [2.0, 2.0])
    assert float(seen[1]) == 3.0 and isinstance(seen[1], jax.Array)
    with pytest.raises(TypeError, match="callable"):
        jax.debug.callback(3)
    with pytest.raises(TypeError):
        jax.debug.callback(None, 1)


# ---------------------------------------------------------------------------------------------
# optax.transforms paths
# ---------------------------------------------------------------------------------------------

def test_optax_transforms_namespace():
    t = optax.transforms
    for name in ("freeze", "selective_transform", "partition", "masked", "MaskedNode",
                 "chain", "named_chain", "clip", "clip_by_global_norm", "add_decayed_weights",
                 "add_noise", "trace", "ema", "MultiSteps", "skip_not_finite", "apply_if_finite",
                 "conditionally_transform", "conditionally_mask", "flatten", "zero_nans",
                 "keep_params_nonnegative", "per_example_global_norm_clip", "monitor",
                 "snapshot", "measure_with_ema", "adaptive_grad_clip", "unitwise_norm",
                 "unitwise_clip", "ConditionFn", "PartitionState"):
        assert hasattr(t, name), name
        assert name in dir(t)
    from funcgrad.optim.transforms import freeze
    assert freeze is optax.freeze
    with pytest.raises(AttributeError):
        t.not_a_transform   # noqa: B018


def test_freeze_through_transforms_path():
    params = {"a": jnp.ones(2), "b": jnp.ones(2)}
    opt = optax.chain(optax.transforms.freeze({"a": True, "b": False}), optax.sgd(0.5))
    state = opt.init(params)
    updates, _ = opt.update({"a": jnp.ones(2), "b": jnp.ones(2)}, state, params)
    new = optax.apply_updates(params, updates)
    np.testing.assert_allclose(np.asarray(new["a"]), [1.0, 1.0])
    np.testing.assert_allclose(np.asarray(new["b"]), [0.5, 0.5])


def test_unitwise_norm_and_clip():
    w = jnp.asarray(np.arange(6.0).reshape(2, 3))
    np.testing.assert_allclose(np.asarray(optax.transforms.unitwise_norm(w)),
                               np.broadcast_to(np.linalg.norm(np.arange(6.0).reshape(2, 3),
                                                              axis=0), (2, 3)))
    g = jnp.array([3.0, 4.0])
    out = optax.transforms.unitwise_clip(jnp.full(2, 5.0), jnp.full(2, 10.0), g)
    np.testing.assert_allclose(np.asarray(out), [3.0, 4.0])
    with pytest.raises(ValueError):
        optax.transforms.unitwise_clip(jnp.ones(3), jnp.ones(2), g)


# ---------------------------------------------------------------------------------------------
# out-of-range gathers (JAX's modes)
# ---------------------------------------------------------------------------------------------

def test_gathers_clamp_like_jax_when_asked():
    with check_indices(False):   # JAX's gather clamps (funcgrad's default raises)
        x = jnp.arange(5.0)
        idx = jnp.array([1, 9, -1, -7])
        np.testing.assert_allclose(np.asarray(x[idx]), [1.0, 4.0, 4.0, 0.0])
        np.testing.assert_allclose(np.asarray(jax.jit(lambda v, i: v[i])(x, idx)),
                                   [1.0, 4.0, 4.0, 0.0])
        m = jnp.arange(12.0).reshape(3, 4)
        np.testing.assert_allclose(np.asarray(m[jnp.array([0, 5]), jnp.array([1, 9])]),
                                   [1.0, 11.0])
        np.testing.assert_allclose(np.asarray(m[:, jnp.array([7])]), [[3.0], [7.0], [11.0]])
        # clamped positions get the gradient
        g = jax.grad(lambda v: v[jnp.array([4, 8, 0])].sum())(x)
        np.testing.assert_allclose(np.asarray(g), [1.0, 0.0, 0.0, 0.0, 2.0])
    with pytest.raises(IndexError):   # static ints out of range raise, as in JAX
        x[5]
    with pytest.raises(IndexError, match="out of bounds"):   # the default
        x[idx]


def test_at_get_modes():
    x = jnp.arange(5.0)
    idx = jnp.array([1, 9, -1, -7])
    with check_indices(False):
        np.testing.assert_allclose(np.asarray(x.at[idx].get()), [1.0, 4.0, 4.0, 0.0])
    np.testing.assert_allclose(np.asarray(x.at[idx].get(mode="clip")), [1.0, 4.0, 4.0, 0.0])
    np.testing.assert_allclose(np.asarray(x.at[idx].get(mode="fill")),
                               [1.0, np.nan, 4.0, np.nan])
    np.testing.assert_allclose(np.asarray(x.at[idx].get(mode="fill", fill_value=-1)),
                               [1.0, -1.0, 4.0, -1.0])
    assert float(x.at[20].get(mode="clip")) == 4.0
    assert np.isnan(float(x.at[20].get(mode="fill")))
    m = jnp.arange(12, dtype=jnp.int32).reshape(3, 4)
    np.testing.assert_array_equal(np.asarray(m.at[jnp.array([0, 3]), 1:3].get(mode="fill")),
                                  [[1, 2], [np.iinfo(np.int32).min] * 2])
    u = jnp.arange(3, dtype=jnp.uint32)
    assert int(u.at[jnp.array([5])].get(mode="drop")[0]) == np.iinfo(np.uint32).max
    b = jnp.array([False, False])
    assert bool(b.at[jnp.array([4])].get(mode="fill")[0])
    g = jax.grad(lambda v: jnp.nansum(v.at[jnp.array([0, 7])].get(mode="fill", fill_value=0)))
    np.testing.assert_allclose(np.asarray(g(x)), [1.0, 0.0, 0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="mode"):
        x.at[0].get(mode="wrap")


def test_updates_and_checked_gathers_still_raise():
    x = jnp.arange(5.0)
    with pytest.raises(IndexError):
        x.at[jnp.array([0, 7])].set(1.0)
    with check_indices():
        with pytest.raises(IndexError, match="out of bounds"):
            x[jnp.array([7])]
        with pytest.raises(IndexError):
            jax.jit(lambda v, i: v[i])(x, jnp.array([7]))
    with check_indices(False):   # JAX's clamping, asked for
        np.testing.assert_allclose(np.asarray(x[jnp.array([7])]), [4.0])


def test_explain_cache_misses_is_explain_retraces(caplog):
    f = jax.jit(lambda x: x * 2)
    f(jnp.ones(2))
    with jax.explain_cache_misses(), caplog.at_level("WARNING", logger="funcgrad.jit"):
        assert jax.config.explain_retraces
        f(jnp.ones(3))
    assert "traces again" in caplog.text
    assert not jax.config.explain_retraces
