"""JAX's module paths jax.ops (segment_*), jax.errors and jax.custom_derivatives, and
x.at[idx].multiply / .min / .max applying every repeated update at a traced index as JAX does.
Expected values are JAX 0.10.2's (CPU) for the same calls."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as jax
import funcgrad.numpy as jnp
from funcgrad import errors, ops
from funcgrad.test_util import check_grads

ROWS = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]], np.float32)
IDS = np.array([1, -1, 3, 0])     # -1 and 3 are outside [0, 3)


def test_segment_ops_match_jax():
    data, ids = jnp.arange(5), jnp.array([0, 0, 1, 1, 2])
    out = ops.segment_sum(data, ids)
    assert out.dtype == np.int32 and out.tolist() == [1, 5, 4]
    assert jax.jit(ops.segment_sum, static_argnums=2)(data, ids, 3).tolist() == [1, 5, 4]
    x, i = jnp.array([2.0, 3.0, 4.0]), jnp.array([0, 0, 2])
    assert ops.segment_prod(x, i).tolist() == [6.0, 1.0, 4.0]
    assert ops.segment_max(x, i).tolist() == [3.0, -np.inf, 4.0]
    assert ops.segment_min(x, i).tolist() == [2.0, np.inf, 4.0]
    assert ops.segment_max(jnp.arange(4), jnp.array([0, 0, 2, 2]), 3).tolist() == [
        1, np.iinfo(np.int32).min, 3]
    assert ops.segment_min(jnp.array([True, False]), jnp.array([0, 0]), 2).tolist() == [
        False, True]
    assert ops.segment_sum(jnp.ones(3), jnp.array([0, 1, 5])).tolist() == [1, 1, 0, 0, 0, 1]
    assert ops.segment_sum(jnp.ones((0, 2)), jnp.zeros(0, int), 2).tolist() == [[0, 0], [0, 0]]


def test_out_of_range_ids_are_dropped_or_clipped_as_in_jax():
    dropped = ops.segment_sum(ROWS, IDS, 3)
    np.testing.assert_array_equal(np.asarray(dropped), [[7, 8], [1, 2], [0, 0]])
    clipped = ops.segment_sum(ROWS, IDS, 3, mode="clip")
    np.testing.assert_array_equal(np.asarray(clipped), [[10, 12], [1, 2], [5, 6]])
    jitted = jax.jit(lambda d, s: ops.segment_sum(d, s, 3))(ROWS, IDS)
    np.testing.assert_array_equal(np.asarray(jitted), np.asarray(dropped))
    with pytest.raises(IndexError):
        ops.segment_sum(ROWS, IDS, 3, mode="promise_in_bounds")


def test_bucket_size_and_gradients_match_jax():
    x = jnp.arange(7.0) * 0.1
    got = ops.segment_sum(x, jnp.array([0, 1, 0, 1, 0, 1, 2]), 3, bucket_size=2)
    np.testing.assert_allclose(np.asarray(got), [0.6, 0.9, 0.6], rtol=1e-6)
    g = jax.grad(lambda d: (ops.segment_max(d, IDS, 3) ** 2).sum())(jnp.asarray(ROWS))
    np.testing.assert_array_equal(np.asarray(g), [[2, 4], [0, 0], [0, 0], [14, 16]])
    tied = jax.grad(lambda d: ops.segment_max(d, jnp.array([0, 0, 1]), 2).sum())(
        jnp.array([3.0, 3.0, 4.0]))
    assert tied.tolist() == [0.5, 0.5, 1.0]     # JAX splits a tie


@pytest.mark.parametrize("name", ["segment_sum", "segment_prod", "segment_max", "segment_min"])
def test_segment_gradients_float64(name):
    rng = np.random.default_rng(0)
    data = rng.uniform(0.5, 2.0, (6, 2))
    ids = np.array([2, 0, 2, 1, 0, 5])
    f = getattr(ops, name)
    check_grads(lambda d: f(d, ids, 3), (data,), order=2, modes=("fwd", "rev"))
    traced_ids = jax.jit(lambda d, s: f(d, s, 3))    # ids traced: the scan path
    check_grads(lambda d: traced_ids(d, ids), (data,), order=2, modes=("fwd", "rev"))


@given(st.integers(0, 9), st.integers(1, 4), st.sampled_from(["max", "min", "multiply"]))
def test_traced_repeated_updates_all_apply(n, size, kind):
    rng = np.random.default_rng(n * 7 + size)
    ids = rng.integers(0, size, n).astype(np.int32)
    v = rng.uniform(-2, 2, n).astype(np.float32)
    base = rng.uniform(-1, 1, size).astype(np.float32)
    want = base.copy()
    getattr(np, {"multiply": "multiply", "max": "maximum", "min": "minimum"}[kind]).at(
        want, ids, v)
    f = jax.jit(lambda b, i, u: getattr(b.at[i], kind)(u))
    np.testing.assert_allclose(np.asarray(f(base, ids, v)), want, rtol=1e-6)


def test_traced_index_max_matches_jax():
    f = jax.jit(lambda ids, v: jnp.full(2, -jnp.inf).at[ids].max(v))
    # JAX 0.10.2: [5, 4] whichever order the repeated updates come in
    assert f(jnp.array([0, 0, 1]), jnp.array([5.0, 3.0, 4.0])).tolist() == [5.0, 4.0]
    assert f(jnp.array([0, 0, 1]), jnp.array([3.0, 5.0, 4.0])).tolist() == [5.0, 4.0]
    g = jax.jit(lambda ids, v: jnp.ones(3).at[ids].multiply(v))
    assert g(jnp.array([0, 0, 1]), jnp.array([5.0, 3.0, 4.0])).tolist() == [15.0, 4.0, 1.0]
    h = jax.jit(lambda ids, v: jnp.full((2, 3), 9).at[ids, 1].min(v))
    assert h(jnp.array([0, 0, 1, 1]), jnp.array([5, 3, 4, 12])).tolist() == [[9, 3, 9],
                                                                              [9, 4, 9]]
    batched = jax.vmap(lambda i: jnp.zeros(3).at[i].max(jnp.array([1.0, 2.0])))(
        jnp.array([[0, 0], [1, 2]]))
    assert batched.tolist() == [[2.0, 0.0, 0.0], [0.0, 1.0, 2.0]]


def test_segment_errors_name_the_problem():
    with pytest.raises(errors.ConcretizationTypeError, match="num_segments is needed under jit"):
        jax.jit(ops.segment_sum)(jnp.arange(5), jnp.array([0, 0, 1, 1, 2]))
    with pytest.raises(TypeError, match="segment_ids must be integers"):
        ops.segment_sum(jnp.ones(2), jnp.array([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"segment_ids \(3,\) and data \(2,\)"):
        ops.segment_sum(jnp.ones(2), jnp.array([0, 1, 1]))
    with pytest.raises(ValueError, match="non-negative"):
        ops.segment_sum(jnp.ones(2), jnp.array([0, 1]), -1)
    with pytest.raises(ValueError, match="mode must be"):
        ops.segment_sum(jnp.ones(2), jnp.array([0, 1]), 2, mode="wrap")


def test_errors_are_the_classes_funcgrad_raises():
    @jax.jit
    def branch(x):
        return x if x > 0 else -x

    with pytest.raises(errors.TracerBoolConversionError):
        branch(1.0)
    with pytest.raises(errors.ConcretizationTypeError):
        branch(1.0)
    with pytest.raises(errors.TracerIntegerConversionError):
        jax.jit(lambda x: jnp.ones(3)[: int(x)])(2)
    with pytest.raises(errors.TracerArrayConversionError):
        jax.jit(lambda x: np.asarray(x))(jnp.ones(2))
    with pytest.raises(errors.NonConcreteBooleanIndexError, match="traced mask bool"):
        jax.jit(lambda x: x[x > 0])(jnp.ones(3))
    leaked = []
    jax.jit(lambda x: leaked.append(x) or x)(1.0)
    with pytest.raises(errors.UnexpectedTracerError, match="escaped its transformation"):
        leaked[0] + 1
    assert issubclass(errors.TracerBoolConversionError, TypeError)
    assert issubclass(errors.NonConcreteBooleanIndexError, IndexError)


def test_custom_derivatives_path():
    from funcgrad import custom_derivatives as cd
    assert cd.custom_jvp is jax.custom_jvp and cd.custom_vjp is jax.custom_vjp
    assert cd.closure_convert is jax.closure_convert
    assert cd.custom_gradient is jax.custom_gradient


@pytest.mark.parametrize("module", ["ops", "errors", "custom_derivatives", "image"])
def test_docstring_examples(module):
    import doctest
    import importlib
    result = doctest.testmod(importlib.import_module(f"funcgrad.{module}"))
    assert result.attempted > 0 and result.failed == 0


def test_tracer_shows_its_primal_in_eager_autodiff():
    # JAX 0.10.2 prints GradTracer(primal=3.0, typeof(tangent)=f32[]) under grad and
    # JitTracer(~float32[]) under jit; funcgrad shows the primal where it is known
    seen = []

    def f(x):
        seen.append(repr(x))
        return x * 2

    jax.grad(f)(3.0)
    jax.jit(f)(3.0)
    assert seen == ["Traced<f32[]>(primal=3.0)", "Traced<f32[]>"]
