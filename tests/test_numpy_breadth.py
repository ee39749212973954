"""funcgrad.numpy breadth (issue 12): sorting, cumulative, statistics, elementwise math, index
building and construction against numpy; gradients in float64; a few under jit and vmap."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad
import funcgrad.numpy as fnp
from funcgrad.test_util import check_grads

shapes = st.lists(st.integers(0, 4), min_size=1, max_size=3).map(tuple)
nonempty = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple)


def close(a, b, **kw):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), equal_nan=True,
                               **({"rtol": 1e-6, "atol": 1e-7} | kw))


def _x(rng, shape, ties=False):
    x = rng.standard_normal(shape)
    return np.round(x) if ties else x


# sorting and searching ------------------------------------------------------------------------

@given(shape=shapes, ties=st.booleans(), desc=st.booleans())
def test_sort_argsort(shape, ties, desc):
    rng = np.random.default_rng(len(shape))
    x = _x(rng, shape, ties)
    if x.size:
        x.reshape(-1)[::4] = np.nan
    ax = -1
    want_i = np.argsort(-x if desc else x, axis=ax, kind="stable") if not desc else None
    got_i = fnp.argsort(x, axis=ax, descending=desc)
    if not desc:
        np.testing.assert_array_equal(got_i, want_i)
    close(fnp.sort(x, axis=ax, descending=desc),
          np.flip(np.sort(x, axis=ax), ax) if desc else np.sort(x, axis=ax))
    close(fnp.sort(x, axis=None), np.sort(x, axis=None))


def test_descending_stable_and_lexsort_searchsorted():
    x = np.array([1.0, 2.0, 1.0, 2.0])
    np.testing.assert_array_equal(fnp.argsort(x, descending=True), [1, 3, 0, 2])
    k1, k2 = np.array([1, 0, 1, 0]), np.array([3, 3, 1, 1])
    np.testing.assert_array_equal(fnp.lexsort((k1, k2)), np.lexsort((k1, k2)))
    a = np.array([1.0, 2.0, 2.0, 3.0, np.nan])
    v = np.array([0.0, 2.0, 2.5, 9.0, np.nan])
    for side in ("left", "right"):
        np.testing.assert_array_equal(fnp.searchsorted(a, v, side=side),
                                      np.searchsorted(a, v, side=side))
    bins = np.array([0.0, 1.0, 2.5])
    xs = np.array([-1.0, 0.0, 1.0, 2.0, 3.0])
    for right in (False, True):
        np.testing.assert_array_equal(fnp.digitize(xs, bins, right), np.digitize(xs, bins, right))
        np.testing.assert_array_equal(fnp.digitize(xs, bins[::-1], right),
                                      np.digitize(xs, bins[::-1], right))


def test_sort_grad_and_top_k():
    x = np.array([[0.3, -1.2, 2.0, 0.7], [1.5, 0.1, -0.4, 0.9]])
    check_grads(lambda v: fnp.sort(v, axis=-1) * np.arange(4.0), (x,), order=2)
    vals, idx = funcgrad.lax.top_k(x, 2)
    close(vals, -np.sort(-x, axis=-1)[:, :2])
    np.testing.assert_array_equal(idx, np.argsort(-x, axis=-1, kind="stable")[:, :2])
    close(funcgrad.jit(lambda v: fnp.sort(v, axis=0))(x), np.sort(x, axis=0))
    close(funcgrad.vmap(fnp.sort)(x), np.sort(x, axis=-1))


def test_unique_and_sets():
    x = np.array([3, 1, 3, 2, 1, 7])
    for r in fnp.unique(x, True, True, True), np.unique(x, True, True, True):
        pass
    got = fnp.unique(x, True, True, True)
    for g, w in zip(got, np.unique(x, True, True, True)):
        np.testing.assert_array_equal(g, w)
    got = funcgrad.jit(lambda v: fnp.unique(v, True, True, True, size=6, fill_value=-1))(x)
    np.testing.assert_array_equal(got[0], [1, 2, 3, 7, -1, -1])
    np.testing.assert_array_equal(got[1][:4], [1, 3, 0, 5])
    np.testing.assert_array_equal(got[2], np.unique(x, return_inverse=True)[1])
    np.testing.assert_array_equal(got[3], [2, 1, 2, 1, 0, 0])
    with pytest.raises(funcgrad.ConcretizationError, match="size="):
        funcgrad.jit(fnp.unique)(x)
    np.testing.assert_array_equal(fnp.isin(x, np.array([1, 7])), np.isin(x, [1, 7]))
    np.testing.assert_array_equal(fnp.intersect1d(x, np.array([1, 2, 9])), [1, 2])
    np.testing.assert_array_equal(fnp.union1d(x, np.array([9])), np.union1d(x, [9]))
    np.testing.assert_array_equal(fnp.setdiff1d(x, np.array([1])), np.setdiff1d(x, [1]))
    m = np.array([[0, 2], [3, 0]])
    for g, w in zip(fnp.nonzero(m), np.nonzero(m)):
        np.testing.assert_array_equal(g, w)
    got = funcgrad.jit(lambda v: fnp.nonzero(v, size=3))(m)
    np.testing.assert_array_equal(np.stack(got), [[0, 1, 0], [1, 0, 0]])
    np.testing.assert_array_equal(fnp.argwhere(m), np.argwhere(m))
    np.testing.assert_array_equal(fnp.where(m > 0)[1], np.where(m > 0)[1])
    np.testing.assert_array_equal(fnp.bincount(x), np.bincount(x))
    np.testing.assert_array_equal(funcgrad.jit(lambda v: fnp.bincount(v, length=9))(x),
                                  np.bincount(x, minlength=9))


# cumulative ------------------------------------------------------------------------------------

@given(shape=shapes, data=st.data())
def test_cumulative(shape, data):
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape)
    ax = data.draw(st.integers(-len(shape), len(shape) - 1))
    close(fnp.cumsum(x, ax), np.cumsum(x, ax), rtol=1e-12)
    close(fnp.cumprod(x, ax), np.cumprod(x, ax), rtol=1e-12)
    close(fnp.cumsum(x), np.cumsum(x), rtol=1e-12)
    i = rng.integers(-5, 5, shape).astype(np.int32)
    np.testing.assert_array_equal(fnp.cumsum(i, ax), np.cumsum(i, ax).astype(np.int32))
    close(funcgrad.lax.cummax(x, ax % len(shape)), np.maximum.accumulate(x, ax))
    close(funcgrad.lax.cummin(x, ax % len(shape), reverse=True),
          np.flip(np.minimum.accumulate(np.flip(x, ax), ax), ax))
    xn = x.copy()
    xn.reshape(-1)[::3] = np.nan
    close(fnp.nancumsum(xn, ax), np.nancumsum(xn, ax), rtol=1e-12)
    close(fnp.diff(x, axis=ax), np.diff(x, axis=ax))


def test_cumulative_grads_jit_vmap():
    x = np.array([[0.5, -1.0, 2.0, 0.3, 1.1], [1.2, 0.0, -0.7, 0.4, 2.0]])
    check_grads(lambda v: fnp.cumsum(v, axis=1), (x,), order=2)
    check_grads(lambda v: fnp.cumprod(v, axis=1), (x,), order=2)
    check_grads(lambda v: funcgrad.lax.cummax(v, 1), (x,), order=1)
    close(funcgrad.jit(lambda v: fnp.cumsum(v, 1))(x), np.cumsum(x, 1))
    close(funcgrad.vmap(fnp.cumprod)(x), np.cumprod(x, 1))
    close(fnp.cumulative_sum(x, axis=1, include_initial=True),
          np.concatenate([np.zeros((2, 1)), np.cumsum(x, 1)], 1))
    close(fnp.trapezoid(x, axis=1), np.trapezoid(x, axis=1))
    close(fnp.gradient(x[0]), np.gradient(x[0]))
    close(fnp.ediff1d(x, to_begin=[9.0]), np.ediff1d(x, to_begin=[9.0]))


# statistics ------------------------------------------------------------------------------------

@given(shape=nonempty, data=st.data())
def test_quantiles_and_nan_reductions(shape, data):
    rng = np.random.default_rng(len(shape) + shape[0])
    x = rng.standard_normal(shape)
    ax = data.draw(st.one_of(st.none(), st.integers(0, len(shape) - 1)))
    q = np.array([0.0, 0.3, 0.5, 1.0])
    for m in ("linear", "lower", "higher", "midpoint", "nearest"):
        close(fnp.quantile(x, q, axis=ax, method=m), np.quantile(x, q, axis=ax, method=m),
              rtol=1e-12)
    close(fnp.median(x, axis=ax, keepdims=True), np.median(x, axis=ax, keepdims=True))
    close(fnp.percentile(x, 40.0, axis=ax), np.percentile(x, 40.0, axis=ax))
    xn = x.copy()
    xn.reshape(-1)[::2] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for f in ("nansum", "nanmean", "nanmax", "nanmin", "nanvar", "nanstd", "nanprod",
                  "nanmedian"):
            close(getattr(fnp, f)(xn, axis=ax), getattr(np, f)(xn, axis=ax), rtol=1e-12)
        close(fnp.nanquantile(xn, q, axis=ax), np.nanquantile(xn, q, axis=ax), rtol=1e-12)
    close(fnp.ptp(x, axis=ax), np.ptp(x, axis=ax))


def test_stats_misc_and_grads():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 5))
    w = rng.uniform(0.5, 2, 5)
    close(fnp.average(x, axis=1, weights=w), np.average(x, axis=1, weights=w))
    close(fnp.cov(x), np.cov(x))
    close(fnp.cov(x, rowvar=False, bias=True), np.cov(x, rowvar=False, bias=True))
    close(fnp.corrcoef(x), np.corrcoef(x))
    c, e = fnp.histogram(x, bins=4)
    cw, ew = np.histogram(x, bins=4)
    np.testing.assert_array_equal(c, cw)
    close(e, ew)
    check_grads(lambda v: fnp.median(v, axis=1), (x,), order=2)
    check_grads(lambda v: fnp.quantile(v, 0.3), (x,), order=2)
    check_grads(lambda v: fnp.nanmean(v, axis=0), (x,), order=2)
    close(funcgrad.jit(lambda v: fnp.median(v, axis=0))(x), np.median(x, axis=0))
    close(funcgrad.vmap(fnp.median)(x), np.median(x, axis=1))


# elementwise math ------------------------------------------------------------------------------

UNARY = ["arctan", "arcsin", "arccos", "sinh", "cosh", "arcsinh", "arctanh", "cbrt", "sinc",
         "deg2rad", "rad2deg", "fabs", "rint", "fix", "signbit", "isneginf", "isposinf", "i0"]


@pytest.mark.parametrize("name", UNARY)
def test_unary_math(name):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-0.99, 0.99, 20), [0.0, -0.0, 1e-8, -1e-300]])
    if name not in ("arcsin", "arccos", "arctanh"):
        x = np.concatenate([x, rng.standard_normal(10) * 50, [1e200, -1e200, np.inf, -np.inf,
                                                               np.nan]])
    if name in ("sinh", "cosh", "i0"):
        x = x[np.abs(x) < 700]
    with np.errstate(all="ignore"):
        want = getattr(np, name)(x)
        x32 = x[~(np.abs(x) > 1e30)].astype(np.float32)
        want32 = getattr(np, name)(x32)
    close(getattr(fnp, name)(x), want, rtol=1e-12 if name == "i0" else 1e-13, atol=1e-15)
    close(getattr(fnp, name)(x32), want32, rtol=3e-6, atol=1e-7)


def test_binary_math_and_grads():
    rng = np.random.default_rng(1)
    y, x = rng.standard_normal(30), rng.standard_normal(30)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, 1.0, np.nan])
    ys, xs = np.repeat(specials, 6), np.tile(specials, 6)
    for a, b in ((y, x), (ys, xs)):
        with np.errstate(all="ignore"):
            want = [np.arctan2(a, b), np.hypot(a, b), np.logaddexp2(a, b)]
        close(fnp.arctan2(a, b), np.arctan2(a, b), rtol=1e-13, atol=1e-15)
        close(fnp.hypot(a, b), np.hypot(a, b), rtol=1e-13)
        close(fnp.copysign(a, b), np.copysign(a, b))
        close(fnp.fmax(a, b), np.fmax(a, b))
        close(fnp.logaddexp2(a, b), want[2], rtol=1e-12)
    check_grads(fnp.arctan2, (y[:5], x[:5]), order=2)
    check_grads(lambda v: fnp.arcsinh(v) + fnp.arctan(v) + fnp.cosh(v), (x[:5],), order=2)
    check_grads(fnp.arcsin, (np.array([0.1, -0.5, 0.7]),), order=2)
    check_grads(fnp.hypot, (y[:5], x[:5]), order=2)
    i, j = rng.integers(-50, 50, 20), rng.integers(-50, 50, 20)
    np.testing.assert_array_equal(fnp.gcd(i, j), np.gcd(i, j))
    np.testing.assert_array_equal(fnp.lcm(i, j), np.lcm(i, j))
    m, e = fnp.frexp(x * 1e3)
    wm, we = np.frexp(x * 1e3)
    close(m, wm)
    np.testing.assert_array_equal(e, we)
    close(fnp.ldexp(x, 3), np.ldexp(x, 3))
    close(fnp.spacing(x), np.spacing(x))
    np.testing.assert_array_equal(fnp.bitwise_count(i), np.bitwise_count(i))


def test_comparisons_with_tolerance():
    a = np.array([1.0, np.nan, np.inf, -np.inf, 1e-9, 2.0])
    b = np.array([1.0 + 1e-9, np.nan, np.inf, np.inf, 0.0, 2.1])
    for en in (False, True):
        with np.errstate(all="ignore"):
            want = np.isclose(a, b, equal_nan=en)
        np.testing.assert_array_equal(fnp.isclose(a, b, equal_nan=en), want)
        assert bool(fnp.array_equal(a, a, equal_nan=en)) == np.array_equal(a, a, equal_nan=en)
    assert bool(fnp.allclose(a[:1], b[:1]))
    assert not bool(fnp.array_equal(np.ones(2), np.ones(3)))
    close(fnp.nan_to_num(a), np.nan_to_num(a))
    close(fnp.nan_to_num(a.astype(np.float32), nan=1.0, posinf=9.0),
          np.nan_to_num(a.astype(np.float32), nan=1.0, posinf=9.0))


# index building and construction ------------------------------------------------------------

@given(n=st.integers(0, 4), m=st.integers(0, 4), k=st.integers(-3, 3))
def test_diag_tri_indices(n, m, k):
    a = np.arange(n * m, dtype=np.float64).reshape(n, m)
    close(fnp.diagonal(a, k), np.diagonal(a, k))
    close(fnp.trace(a, k), np.trace(a, k))
    close(fnp.diag(a[0] if n else np.zeros(0), k), np.diag(a[0] if n else np.zeros(0), k))
    for f in ("tril_indices", "triu_indices"):
        for g, w in zip(getattr(fnp, f)(n, k, m), getattr(np, f)(n, k, m)):
            np.testing.assert_array_equal(g, w)
    close(fnp.tri(n, m, k), np.tri(n, m, k))


def test_construction_helpers():
    a = np.arange(12.0).reshape(3, 4)
    for sh, ax in ((1, None), (-2, 1), ((1, 2), (0, 1)), (5, 0)):
        close(fnp.roll(a, sh, ax), np.roll(a, sh, ax))
    for idx in ("xy", "ij"):
        for g, w in zip(fnp.meshgrid(np.arange(3), np.arange(2), indexing=idx),
                        np.meshgrid(np.arange(3), np.arange(2), indexing=idx)):
            np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(fnp.indices((2, 3)), np.indices((2, 3)))
    np.testing.assert_array_equal(a[fnp.ix_(np.array([0, 2]), np.array([1, 3]))],
                                  a[np.ix_([0, 2], [1, 3])])
    np.testing.assert_array_equal(fnp.mgrid[0:2, 0:3], np.mgrid[0:2, 0:3])
    np.testing.assert_array_equal(fnp.r_[np.array([1, 2]), 3:5], np.r_[np.array([1, 2]), 3:5])
    close(fnp.kron(a[:2, :2], np.eye(2)), np.kron(a[:2, :2], np.eye(2)))
    close(fnp.rot90(a), np.rot90(a))
    close(fnp.rot90(a, 3), np.rot90(a, 3))
    close(fnp.insert(a, 1, 9.0, axis=1), np.insert(a, 1, 9.0, axis=1))
    close(fnp.insert(a.ravel(), [0, 2, 2], np.array([7.0, 8.0, 9.0])),
          np.insert(a.ravel(), [0, 2, 2], [7.0, 8.0, 9.0]))
    close(fnp.delete(a, [0, 2], axis=1), np.delete(a, [0, 2], axis=1))
    close(fnp.select([a > 8, a > 3], [a, -a], 0.5), np.select([a > 8, a > 3], [a, -a], 0.5))
    close(fnp.vander(np.array([1.0, 2.0, 3.0])), np.vander(np.array([1.0, 2.0, 3.0])))
    close(fnp.polyval(np.array([1.0, -2.0, 3.0]), a), np.polyval([1.0, -2.0, 3.0], a))
    close(fnp.polymul(np.array([1.0, 2.0]), np.array([1.0, -1.0, 3.0])),
          np.polymul([1.0, 2.0], [1.0, -1.0, 3.0]))
    close(fnp.interp(np.array([-1.0, 0.5, 2.5, 9.0]), np.array([0.0, 1.0, 3.0]),
                     np.array([1.0, 3.0, 2.0])),
          np.interp([-1.0, 0.5, 2.5, 9.0], [0.0, 1.0, 3.0], [1.0, 3.0, 2.0]))
    close(fnp.fill_diagonal(a, 0.0, inplace=False), _filled(a))
    close(fnp.apply_along_axis(lambda v: fnp.sum(v ** 2), 1, a), np.sum(a ** 2, 1))
    close(fnp.fft.fftshift(np.arange(6.0)), np.fft.fftshift(np.arange(6.0)))
    close(fnp.block([[np.ones((2, 2)), np.zeros((2, 1))]]),
          np.block([[np.ones((2, 2)), np.zeros((2, 1))]]))
    check_grads(lambda v: fnp.trace(v @ v.T) + fnp.diag(fnp.diagonal(v)).sum(), (a[:3, :3],))
    check_grads(lambda v: fnp.roll(fnp.kron(v, v), 2, 0), (a[:2, :2] / 10,))


def _filled(a):
    b = a.copy()
    np.fill_diagonal(b, 0.0)
    return b
