"""bfloat16 and float16 as dtypes: names, JAX's promotion lattice, casts (RNE), finfo, printing."""
import ml_dtypes
import numpy as np
import pytest

import funcgrad.numpy as fnp

BF16, F16 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)
F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


def test_names_and_strings():
    assert fnp.bfloat16.dtype == BF16 and fnp.float16.dtype == F16
    for spec in ("bfloat16", fnp.bfloat16, ml_dtypes.bfloat16, BF16):
        assert fnp.zeros(3, spec).dtype == BF16
    assert fnp.asarray([1.0, 2.0]).astype("bfloat16").dtype == BF16
    assert fnp.bfloat16(1.5).dtype == BF16


def test_issubdtype_as_jax():
    assert fnp.issubdtype(fnp.bfloat16, fnp.floating)
    assert fnp.issubdtype(BF16, fnp.inexact) and fnp.issubdtype(BF16, fnp.number)
    assert not fnp.issubdtype(fnp.bfloat16, fnp.integer)
    assert not fnp.issubdtype(fnp.bfloat16, fnp.complexfloating)
    assert fnp.issubdtype(fnp.bfloat16, fnp.bfloat16)
    assert not fnp.issubdtype(fnp.bfloat16, fnp.float16)
    assert fnp.issubdtype(ml_dtypes.float8_e4m3fn, fnp.floating)
    assert fnp.issubdtype(fnp.float16, fnp.floating)
    assert not fnp.issubdtype(np.int32, fnp.floating)


# JAX's lattice (jax.numpy.promote_types, documented in "Type promotion semantics"): strong
# dtypes against each other, then against weak Python scalars
PROMOTIONS = [
    ("bfloat16", "bfloat16", "bfloat16"), ("bfloat16", "float16", "float32"),
    ("bfloat16", "float32", "float32"), ("bfloat16", "float64", "float64"),
    ("bfloat16", "int8", "bfloat16"), ("bfloat16", "uint8", "bfloat16"),
    ("bfloat16", "int32", "bfloat16"), ("bfloat16", "int64", "bfloat16"),
    ("bfloat16", "bool", "bfloat16"), ("bfloat16", "complex64", "complex64"),
    ("bfloat16", "complex128", "complex128"), ("float16", "float32", "float32"),
    ("float16", "int32", "float16"), ("float16", "float16", "float16"),
    ("float16", "bool", "float16"), ("float16", "complex64", "complex64"),
]
WEAK = [("bfloat16", 2, "bfloat16"), ("bfloat16", 2.5, "bfloat16"),
        ("bfloat16", 1j, "complex64"), ("bfloat16", True, "bfloat16"),
        ("float16", 2.5, "float16"), ("float16", 3, "float16")]


@pytest.mark.parametrize("a,b,want", PROMOTIONS)
def test_promotion_table(a, b, want):
    assert fnp.result_type(np.dtype(a), np.dtype(b)) == np.dtype(want)
    assert fnp.result_type(np.dtype(b), np.dtype(a)) == np.dtype(want)
    assert fnp.promote_types(a, b) == np.dtype(want)
    x, y = fnp.ones(2, a), fnp.ones(2, b)
    assert (x + y).dtype == np.dtype(want) and (y * x).dtype == np.dtype(want)


@pytest.mark.parametrize("a,w,want", WEAK)
def test_weak_scalars(a, w, want):
    x = fnp.ones(2, a)
    assert (x + w).dtype == np.dtype(want) and (w * x).dtype == np.dtype(want)


def test_cast_rounds_to_nearest_even(rng):
    bits = np.concatenate([np.arange(0, 2**16, 7, dtype=np.uint32) << 16,
                           rng.integers(0, 2**32, 4000, dtype=np.uint32)]).astype(np.uint32)
    bits |= rng.integers(0, 2**16, bits.size, dtype=np.uint32)  # low bits: ties and above
    bits = np.concatenate([bits, np.array([0x3F808000, 0x3F818000, 0x7F7FFFFF], np.uint32)])
    x32 = bits.view(np.float32)
    got = np.asarray(fnp.asarray(x32).astype(fnp.bfloat16)).view(np.uint16)
    with np.errstate(invalid="ignore"):
        want = x32.astype(ml_dtypes.bfloat16).view(np.uint16)
    np.testing.assert_array_equal(got, want)
    # the integer spelling of round-to-nearest-even on the bits (finite values)
    fin = np.isfinite(x32)
    b = bits[fin].astype(np.uint64)
    rne = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    np.testing.assert_array_equal(got[fin], rne)
    # ties go to the even neighbour: 1 + 2^-8 (between 1 and 1 + 2^-7) rounds down to 1
    assert float(np.asarray(fnp.asarray(np.float32(1 + 2**-8)).astype(fnp.bfloat16))) == 1.0
    assert float(np.asarray(fnp.asarray(np.float32(1 + 3 * 2**-8)).astype(fnp.bfloat16))) \
        == 1 + 2**-6
    small = x32[np.isfinite(x32) & (np.abs(x32) < 65504)]
    got16 = np.asarray(fnp.asarray(small).astype(fnp.float16))
    np.testing.assert_array_equal(got16, small.astype(np.float16))


def test_cast_back_and_ints():
    x = fnp.asarray([-2.7, -0.5, 0.5, 1.5, 2.5, 300.0], fnp.float32).astype(fnp.bfloat16)
    np.testing.assert_array_equal(np.asarray(x.astype(fnp.float32)),
                                  np.array([-2.703125, -0.5, 0.5, 1.5, 2.5, 300.0], np.float32))
    np.testing.assert_array_equal(np.asarray(x.astype(fnp.int32)), [-2, 0, 0, 1, 2, 300])
    assert fnp.asarray([1, 2], fnp.int32).astype(fnp.bfloat16).dtype == BF16
    assert fnp.asarray(x, fnp.float16).dtype == F16


def test_finfo():
    fi = fnp.finfo(fnp.bfloat16)
    assert (fi.bits, fi.eps, fi.max) == (16, 2.0 ** -7, float(ml_dtypes.finfo(BF16).max))
    assert fi.dtype == BF16 and fi.smallest_normal == 2.0 ** -126
    assert fnp.finfo(fnp.float16).eps == 2.0 ** -10
    assert fnp.iinfo(np.int8).max == 127


def test_printing():
    x = fnp.asarray([1.0, 2.5, 3.3], fnp.float32).astype(fnp.bfloat16)
    assert repr(x) == "Array([1, 2.5, 3.29688], dtype=bfloat16)"
    assert str(x) == "[1 2.5 3.29688]"
    assert f"{x[1]:.2f}" == "2.50"
