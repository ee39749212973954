"""lax.bitcast_convert_type, clz, reduce_precision, reduce, reduce_xor and shape helpers:
numpy references, jax.lax when importable, gradients, vmap and jit."""
from __future__ import annotations

import doctest

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad
import funcgrad.numpy as fnp
from funcgrad.lax import bits as _lax_bits, reductions as _lax_reductions
from funcgrad import lax
from funcgrad.test_util import check_grads

_SPECIAL = [0.0, -0.0, np.inf, -np.inf]


def _floats(rng, dt, n=40):
    fi = np.finfo(dt)
    x = rng.standard_normal(n) * 2.0 ** rng.integers(-30, 30, n)
    extra = _SPECIAL + [fi.max, -fi.max, fi.tiny, fi.smallest_subnormal, fi.tiny * 0.75]
    with np.errstate(over="ignore"):
        return np.concatenate([x, extra]).astype(dt)


def test_doctests():
    for mod in (_lax_bits, _lax_reductions):
        assert doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE).failed == 0


@pytest.mark.parametrize("dt,it,ut", [(np.float16, np.int16, np.uint16),
                                      (np.float32, np.int32, np.uint32),
                                      (np.float64, np.int64, np.uint64)])
def test_bitcast_matches_numpy_views(rng, dt, it, ut):
    x = _floats(rng, dt)
    bits = x.view(it)
    np.testing.assert_array_equal(np.asarray(lax.bitcast_convert_type(x, it)), bits)
    np.testing.assert_array_equal(np.asarray(lax.bitcast_convert_type(x, ut)), x.view(ut))
    back = np.asarray(lax.bitcast_convert_type(bits, dt))
    np.testing.assert_array_equal(back.view(it), bits)
    np.testing.assert_array_equal(np.asarray(lax.bitcast_convert_type(x.view(ut), dt)).view(it),
                                  bits)
    bytes_ = x.view(np.uint8).reshape(x.shape + (-1,))
    np.testing.assert_array_equal(np.asarray(lax.bitcast_convert_type(x, np.uint8)), bytes_)
    np.testing.assert_array_equal(
        np.asarray(lax.bitcast_convert_type(bytes_, dt)).view(it), bits)
    nan = np.asarray(lax.bitcast_convert_type(np.array([np.nan], dt), it))
    np.testing.assert_array_equal(nan, np.array([np.nan], dt).view(it))   # the quiet NaN


def test_bitcast_integers_jit_vmap_and_errors():
    x = np.array([-1, 0, 2 ** 31 - 1, -2 ** 31], np.int32)
    np.testing.assert_array_equal(np.asarray(lax.bitcast_convert_type(x, np.uint32)),
                                  x.view(np.uint32))
    np.testing.assert_array_equal(np.asarray(lax.bitcast_convert_type(x, np.int16)),
                                  x.view(np.int16).reshape(4, 2))
    f = funcgrad.jit(lambda v: lax.bitcast_convert_type(v, np.int32))
    v = np.float32([1.5, -2.0])
    np.testing.assert_array_equal(np.asarray(f(v)), v.view(np.int32))
    np.testing.assert_array_equal(
        np.asarray(funcgrad.vmap(lambda v: lax.bitcast_convert_type(v, np.int32))(v[:, None])),
        v.view(np.int32)[:, None])
    with pytest.raises(ValueError, match=r"int32 \(3,\) -> int64 needs a last axis of size 2"):
        lax.bitcast_convert_type(np.zeros(3, np.int32), np.int64)
    with pytest.raises(TypeError, match="bool is not supported"):
        lax.bitcast_convert_type(np.zeros(3, bool), np.uint8)


@settings(deadline=None)
@given(st.lists(st.integers(0, 3), min_size=0, max_size=3),
       st.sampled_from([np.float32, np.int16, np.uint8]))
def test_bitcast_shapes_with_empty_and_unit_dims(shape, dt):
    x = np.zeros(tuple(shape), dt)
    got = lax.bitcast_convert_type(x, np.uint8)
    assert got.shape == tuple(shape) + ((np.dtype(dt).itemsize,) if np.dtype(dt).itemsize > 1
                                        else ())


def test_clz(rng):
    for dt in (np.int8, np.uint8, np.int32, np.uint32, np.int64):
        info = np.iinfo(dt)
        x = np.concatenate([rng.integers(info.min, info.max, 50, dtype=dt, endpoint=True),
                            np.array([0, 1, info.max, info.min], dt)])
        width = np.dtype(dt).itemsize * 8
        u = x.astype(np.dtype(f"u{np.dtype(dt).itemsize}"))
        want = np.array([width - int(v).bit_length() for v in u], dt)
        np.testing.assert_array_equal(np.asarray(lax.clz(x)), want)
    with pytest.raises(TypeError, match="integer operand"):
        lax.clz(np.ones(2))


def _ref_reduce_precision(x, eb, mb):
    """Bit-level reference (XLA's algorithm) for float32."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    if mb < 23:
        shift = 23 - mb
        last = (bits >> shift) & 1
        bits = (bits + ((1 << (shift - 1)) - 1) + last) & ~np.uint64((1 << shift) - 1)
    out = bits.astype(np.uint32).view(np.float32).copy()
    if eb < 8:
        emax = 2 ** (eb - 1) - 1
        big = np.abs(out) >= 2.0 ** (emax + 1)
        out[big & np.isfinite(x)] = np.copysign(np.inf, x[big & np.isfinite(x)])
        small = np.abs(out) < 2.0 ** (1 - emax)
        out[small] = np.copysign(0.0, x[small])
    out[np.isnan(x)] = np.nan
    return out


@pytest.mark.parametrize("eb,mb", [(8, 7), (5, 10), (4, 3), (5, 2), (8, 23), (3, 0)])
def test_reduce_precision_matches_bit_rounding(rng, eb, mb):
    x = _floats(rng, np.float32, 200)
    x = x[np.isfinite(x)]
    got = np.asarray(lax.reduce_precision(x, eb, mb))
    want = _ref_reduce_precision(x, eb, mb)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_reduce_precision_matches_jax(rng):
    jax = pytest.importorskip("jax")
    for dt in (np.float16, np.float32):
        x = _floats(rng, dt, 100)
        for eb, mb in [(8, 7), (5, 10), (4, 3), (11, 52)]:
            want = np.asarray(jax.lax.reduce_precision(x, eb, mb))
            np.testing.assert_array_equal(np.asarray(lax.reduce_precision(x, eb, mb)), want)


def test_reduce_precision_gradient_is_rounded_tangent():
    g = funcgrad.grad(lambda x: lax.reduce_precision(x, 8, 7) * 3.0)(np.float32(1.0))
    assert float(g) == 3.0
    _, t = funcgrad.jvp(lambda x: lax.reduce_precision(x, 5, 2), (np.float32(1.0),),
                        (np.float32(1.1),))
    assert float(t) == 1.0     # the tangent rounded to 2 mantissa bits
    with pytest.raises(TypeError, match="float16/32/64"):
        lax.reduce_precision(np.ones(2, np.int32), 8, 7)


def test_reduce_monoids_and_general_computations(rng):
    x = rng.standard_normal((3, 4, 5))
    np.testing.assert_allclose(np.asarray(lax.reduce(x, 0.0, lax.add, (0, 2))), x.sum((0, 2)))
    np.testing.assert_allclose(np.asarray(lax.reduce(x, 1.0, lax.mul, (1,))), x.prod(1))
    np.testing.assert_allclose(np.asarray(lax.reduce(x, -np.inf, lax.max, (2,))), x.max(2))
    np.testing.assert_allclose(np.asarray(lax.reduce(x, 2.0, lax.add, (0,))), x.sum(0) + 2)
    f = lambda a, b: fnp.maximum(a, b) * 1.0          # not a recognized monoid
    np.testing.assert_allclose(np.asarray(lax.reduce(x, -np.inf, f, (1, 2))), x.max((1, 2)))
    ints = rng.integers(0, 64, (4, 7))
    np.testing.assert_array_equal(np.asarray(lax.reduce(ints, -1, lax.bitwise_and, (1,))),
                                  np.bitwise_and.reduce(ints, 1))
    np.testing.assert_array_equal(np.asarray(lax.reduce(ints, 0, lax.bitwise_or, (0,))),
                                  np.bitwise_or.reduce(ints, 0))
    np.testing.assert_array_equal(np.asarray(lax.reduce_xor(ints, (1,))),
                                  np.bitwise_xor.reduce(ints, 1))
    np.testing.assert_array_equal(np.asarray(lax.reduce_xor(ints > 30, (0, 1))),
                                  np.logical_xor.reduce((ints > 30).ravel()))
    # variadic: an argmax as a reduction over (value, index) pairs
    idx = np.broadcast_to(np.arange(5), x.shape)

    def pick(a, b):
        take_b = b[0] > a[0]
        return fnp.where(take_b, b[0], a[0]), fnp.where(take_b, b[1], a[1])
    vals, args = lax.reduce((x, idx), (-np.inf, 0), pick, (2,))
    np.testing.assert_array_equal(np.asarray(args), x.argmax(2))
    np.testing.assert_allclose(np.asarray(vals), x.max(2))
    with pytest.raises(ValueError, match=r"dimensions \(3,\) must be distinct axes"):
        lax.reduce(x, 0.0, lax.add, (3,))


@settings(deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=3), st.data())
def test_reduce_shapes_with_empty_and_unit_dims(shape, data):
    dims = tuple(sorted(data.draw(st.sets(st.integers(0, len(shape) - 1)))))
    x = np.random.default_rng(0).standard_normal(shape)
    got = lax.reduce(x, 0.0, lambda a, b: a + b * 1.0, dims)
    np.testing.assert_allclose(np.asarray(got), x.sum(dims), atol=1e-12)
    bits = (x > 0).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(lax.reduce_xor(bits, dims)),
                                  np.bitwise_xor.reduce(bits, axis=dims) if dims else bits)


def test_reduce_gradients_vmap_jit(rng):
    x = rng.standard_normal((3, 4))
    f = lambda a, b: a * b + 0.0 * a                   # product, general path
    check_grads(lambda x: lax.reduce(x, 1.0, f, (1,)), (x,), order=2)
    check_grads(lambda x: lax.reduce(x, -np.inf, lax.max, (0,)), (x,), order=1)
    got = funcgrad.jit(lambda x: lax.reduce(x, 1.0, f, (1,)))(x)
    np.testing.assert_allclose(np.asarray(got), x.prod(1))
    got = funcgrad.vmap(lambda x: lax.reduce(x, 1.0, f, (0,)))(x)
    np.testing.assert_allclose(np.asarray(got), x.prod(1))


def test_shape_helpers(rng):
    assert lax.broadcast_shapes((2, 1), (3,), ()) == (2, 3)
    with pytest.raises(ValueError, match=r"\(2,\), \(3,\)"):
        lax.broadcast_shapes((2,), (3,))
    assert lax.broadcast_like(np.ones(3), np.zeros((2, 3))).shape == (2, 3)
    e = lax.empty((2, 0, 3), np.float32)
    assert e.shape == (2, 0, 3) and e.dtype == np.float32
    x = rng.standard_normal((4, 5, 3))
    got = lax.index_take(x, (np.array([3, 0]), np.array([1, 4])), (0, 1))
    np.testing.assert_allclose(np.asarray(got), x[[3, 0], [1, 4]])
    assert lax.dtype(np.zeros(2, np.int8)) == np.int8
    np.testing.assert_array_equal(np.asarray(lax.tile(np.arange(3), (2,))), np.tile(np.arange(3),
                                                                                    2))
    parts = lax.split(x, (1, 0, 4), axis=1)
    assert [p.shape for p in parts] == [(4, 1, 3), (4, 0, 3), (4, 4, 3)]
    np.testing.assert_allclose(np.asarray(parts[2]), x[:, 1:])
    with pytest.raises(ValueError, match="sum to axis 1"):
        lax.split(x, (1, 1), axis=1)
    assert float(lax.nextafter(np.float32(1.0), np.float32(2.0))) == 1.0 + 2.0 ** -23
    sq = lax.composite(lambda x: x * x, name="my.square", version=2)
    assert sq.composite_name == "my.square" and float(funcgrad.grad(sq)(3.0)) == 6.0


def test_against_jax_helpers(rng):
    jax = pytest.importorskip("jax")
    x = rng.integers(-50, 50, (3, 8)).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(lax.clz(x)), np.asarray(jax.lax.clz(x)))
    np.testing.assert_array_equal(np.asarray(lax.reduce_xor(x, (1,))),
                                  np.asarray(jax.lax.reduce_xor(x, (1,))))
    y = rng.standard_normal((2, 3)).astype(np.float32)
    for dt in (np.int32, np.uint8, np.uint16):
        np.testing.assert_array_equal(np.asarray(lax.bitcast_convert_type(y, dt)),
                                      np.asarray(jax.lax.bitcast_convert_type(y, dt)))
