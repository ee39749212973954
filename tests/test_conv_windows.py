"""lax.reduce_window (sum / max / min pooling, other init values and computations) against a
loop reference; max-pool gradients go to each window's first maximum; float64 gradient checks."""
from __future__ import annotations

import operator

import numpy as np
import pytest
from conv_reference import ref_reduce_window
from hypothesis import given
from hypothesis import strategies as st

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.test_util import check_grads

OPS = {"sum": (lax.add, 0.0, operator.add), "max": (lax.max, -np.inf, max),
       "min": (lax.min, np.inf, min)}


@st.composite
def windows(draw, grad_safe=False):
    """(x, window params) of rank 0-3; grad_safe: unit dilations and every window holds an
    element, distinct values (max/min differentiable)."""
    nd = draw(st.integers(0, 3))
    shape = tuple(draw(st.integers(1 if grad_safe else 0, 4)) for _ in range(nd))
    wd = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    ws = tuple(draw(st.integers(1, 2)) for _ in range(nd))
    hi_pad = (lambda w: w - 1) if grad_safe else (lambda w: 2)
    pads = tuple((draw(st.integers(0, hi_pad(w))), draw(st.integers(0, hi_pad(w)))) for w in wd)
    bd = tuple(1 if grad_safe else draw(st.integers(1, 2)) for _ in range(nd))
    wl = tuple(1 if grad_safe else draw(st.integers(1, 2)) for _ in range(nd))
    n = int(np.prod(shape))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 31)))
    x = (rng.permutation(n) - n / 2).reshape(shape) * 0.37 + 0.05
    return x, dict(window_dimensions=wd, window_strides=ws, padding=pads, base_dilation=bd,
                   window_dilation=wl)


@pytest.mark.parametrize("kind", sorted(OPS))
@given(case=windows())
def test_matches_loop_reference(kind, case):
    x, p = case
    comp, init, op = OPS[kind]
    got = lax.reduce_window(x, init, comp, **p)
    want = ref_reduce_window(x, init, op, p["window_dimensions"], p["window_strides"],
                             p["padding"], p["base_dilation"], p["window_dilation"])
    assert got.shape == want.shape
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)


@pytest.mark.parametrize("kind", sorted(OPS))
@given(case=windows(grad_safe=True))
def test_grads_second_order(kind, case):
    x, p = case
    comp, init, _ = OPS[kind]
    check_grads(lambda a: lax.reduce_window(a, init, comp, **p), (x,), order=2)


@given(case=windows())
def test_sum_grads_with_dilations(case):
    x, p = case
    check_grads(lambda a: lax.reduce_window(a, 0.0, lax.add, **p), (x,), order=2)


def test_max_pool_gradient_goes_to_the_first_maximum():
    x = np.array([[1.0, 3.0, 3.0, 0.0],
                  [2.0, 0.0, 5.0, 5.0],
                  [7.0, 7.0, 1.0, 1.0],
                  [7.0, 7.0, 1.0, 1.0]])
    pool = lambda a: lax.reduce_window(a, -np.inf, lax.max, (2, 2), (2, 2), "VALID")
    np.testing.assert_array_equal(np.asarray(pool(x)), [[3.0, 5.0], [7.0, 1.0]])
    g = funcgrad.grad(lambda a: fnp.sum(pool(a) * np.array([[1.0, 2.0], [3.0, 4.0]])))(x)
    np.testing.assert_array_equal(np.asarray(g), [[0, 1, 0, 0], [0, 0, 2, 0],
                                                  [3, 0, 4, 0], [0, 0, 0, 0]])
    # overlapping windows (stride 1) add up at a shared maximum
    g = funcgrad.grad(lambda a: fnp.sum(lax.reduce_window(a, -np.inf, lax.max, (2,), (1,),
                                                          "VALID")))(np.array([1.0, 4.0, 2.0]))
    np.testing.assert_array_equal(np.asarray(g), [0.0, 2.0, 0.0])
    # jvp: the tangent of the selected element
    _, t = funcgrad.jvp(pool, (x,), (np.arange(16.0).reshape(4, 4),))
    np.testing.assert_array_equal(np.asarray(t), [[1.0, 6.0], [8.0, 10.0]])


def test_avg_pool_same_padding_and_nhwc():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 5, 3))
    window = (1, 3, 3, 1)

    def avg_pool(a):
        return lax.reduce_window(a, 0.0, lax.add, window, (1, 2, 2, 1), "SAME") / 9.0
    y = avg_pool(x)
    assert y.shape == (2, 3, 3, 3)
    want = ref_reduce_window(x, 0.0, operator.add, window, (1, 2, 2, 1),
                             [(0, 0), (1, 1), (1, 1), (0, 0)]) / 9.0
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-12)
    check_grads(avg_pool, (x,), order=1)
    yj = funcgrad.jit(funcgrad.grad(lambda a: fnp.sum(avg_pool(a) ** 2)))(x)
    yg = funcgrad.grad(lambda a: fnp.sum(avg_pool(a) ** 2))(x)
    np.testing.assert_allclose(np.asarray(yj), np.asarray(yg), rtol=1e-12)
    per = funcgrad.vmap(lambda a: lax.reduce_window(a, -np.inf, lax.max, (2, 2, 1), (1, 1, 1),
                                                    "VALID"))(x)
    np.testing.assert_allclose(np.asarray(per), np.asarray(lax.reduce_window(
        x, -np.inf, lax.max, (1, 2, 2, 1), (1, 1, 1, 1), "VALID")), rtol=1e-12)


def test_other_init_values_and_computations():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 5))
    p = dict(window_dimensions=(2, 3), window_strides=(1, 2), padding=[(1, 0), (1, 2)],
             base_dilation=(2, 1))
    for comp, init, op in [(lax.add, 1.5, operator.add), (lax.max, 0.0, max),
                           (lax.min, 0.25, min), (fnp.add, 0.0, operator.add),
                           (fnp.maximum, -np.inf, max), (lax.mul, 1.0, operator.mul),
                           (lambda a, b: a * 0.5 + b, 0.0, lambda a, b: a * 0.5 + b)]:
        got = lax.reduce_window(x, init, comp, **p)
        want = ref_reduce_window(x, init, op, (2, 3), (1, 2), [(1, 0), (1, 2)], (2, 1))
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)
    check_grads(lambda a: lax.reduce_window(a, 1.0, lax.mul, (2, 2), (1, 1), "VALID"), (x,),
                order=1)
    ints = lax.reduce_window(np.arange(6, dtype=np.int32), 0, lax.add, (3,), (3,), "VALID")
    assert ints.dtype == np.int32 and np.asarray(ints).tolist() == [3, 12]


def test_errors():
    with pytest.raises(ValueError, match="window_dimensions needs 2 entries"):
        lax.reduce_window(np.ones((3, 3)), 0.0, lax.add, (2,), (1, 1), "VALID")
    with pytest.raises(funcgrad.ShapeError, match="non-negative"):
        lax.reduce_window(np.ones(3), 0.0, lax.add, (2,), (1,), [(-1, 0)])
    with pytest.raises(TypeError, match="not a scalar of the operand's dtype int32"):
        lax.reduce_window(np.ones(3, np.int32), -np.inf, lax.max, (2,), (1,), "VALID")
    imax = lax.reduce_window(np.array([3, -2, 5], np.int32), np.iinfo(np.int32).min, lax.max,
                             (2,), (1,), "VALID")
    assert np.asarray(imax).tolist() == [3, 5]
    with pytest.raises(funcgrad.ShapeError, match=">= 1"):
        lax.reduce_window(np.ones(3), 0.0, lax.add, (0,), (1,), "VALID")
