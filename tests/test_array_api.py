"""The array API standard surface of funcgrad.numpy: dtypes, namespace info, in-place operators."""
import numpy as np
import pytest

import funcgrad.numpy as fnp


@pytest.mark.parametrize("other", ["foo", "float33", "(2)i", "f8,f8", None, 3, object()])
def test_dtype_comparisons_never_raise(other):
    assert (fnp.float32 == other) is False
    assert (fnp.float32 != other) is True
    assert (fnp.zeros(2).dtype == fnp.complex64) is False


def test_new_dtypes_exported_and_hash_like_numpy():
    for name in ("int16", "uint16", "uint64", "complex64", "complex128"):
        dt = getattr(fnp, name)
        assert dt == np.dtype(name) and hash(dt) == hash(np.dtype(name))
        x = fnp.ones(3, dtype=dt)
        assert x.dtype == dt and {dt: 1}[x.dtype] == 1
        np.testing.assert_array_equal(np.asarray(x + x), np.full(3, 2, name))


def test_namespace_and_info():
    x = fnp.ones(2)
    assert x.__array_namespace__() is fnp
    assert fnp.__array_api_version__ == "2025.12"
    assert x.__array_namespace__(api_version="2024.12") is fnp
    with pytest.raises(ValueError, match="1999"):
        x.__array_namespace__(api_version="1999.01")
    info = fnp.__array_namespace_info__()
    assert set(info.capabilities()) == {"boolean indexing", "data-dependent shapes",
                                        "max dimensions"}
    assert info.default_device() in info.devices() and isinstance(info.devices(), tuple)
    d = info.default_dtypes()
    assert d["real floating"] == fnp.float32 and d["complex floating"] == fnp.complex64
    assert d["integral"] == d["indexing"] == fnp.int32
    assert set(info.dtypes(kind="complex floating")) == {"complex64", "complex128"}
    assert set(info.dtypes(kind=("bool", "unsigned integer"))) == {
        "bool", "uint8", "uint16", "uint32", "uint64"}
    assert len(info.dtypes()) == 13
    with pytest.raises(ValueError, match="kind"):
        info.dtypes(kind="strings")


def test_inplace_operators_rebind_and_keep_dtype_and_shape():
    x = y = fnp.arange(3)
    x += 2
    np.testing.assert_array_equal(np.asarray(x), [2, 3, 4])
    np.testing.assert_array_equal(np.asarray(y), [0, 1, 2])   # y is unchanged: immutable arrays
    x *= fnp.ones((3,), fnp.int32)
    with pytest.raises(TypeError, match="immutable.*x = x / y") as e:
        x /= 2   # int32 / int -> float32: would change x's dtype
    assert "test_array_api.py" in str(e.value)
    with pytest.raises(TypeError, match=r"i32\[3\] to i32\[2,3\]"):
        x += fnp.ones((2, 3), fnp.int32)


def test_standard_spellings_vecdot_and_to_device():
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    np.testing.assert_array_equal(np.asarray(fnp.bitwise_left_shift(x, 1)), x << 1)
    np.testing.assert_array_equal(np.asarray(fnp.bitwise_right_shift(x, 1)), x >> 1)
    np.testing.assert_array_equal(np.asarray(fnp.bitwise_invert(x)), ~x)
    np.testing.assert_array_equal(np.asarray(fnp.pow(x, 2)), x ** 2)
    z = np.asarray([[1j, 2.0], [1 - 1j, 0.5j]], np.complex64)
    w = np.asarray([[1j, 1.0], [2.0, 1j]], np.complex64)
    np.testing.assert_allclose(np.asarray(fnp.vecdot(z, w)), np.sum(z.conj() * w, axis=-1))
    np.testing.assert_allclose(np.asarray(fnp.vecdot(z, w, axis=0)), np.sum(z.conj() * w, 0))
    assert complex(fnp.vdot(z, w)) == pytest.approx(np.vdot(z, w))
    with pytest.raises((ValueError, TypeError), match="vecdot"):
        fnp.vecdot(np.ones(3), np.ones(2))
    assert fnp.vecdot(np.ones(3, np.uint8), np.ones(3, np.uint8)).dtype == np.uint8
    a = fnp.ones(2)
    assert a.to_device("cpu").device == "cpu"
    assert fnp.ones((2, 3)).mT.shape == (3, 2)
