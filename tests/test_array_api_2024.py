"""What the array API's 2024.12 and 2025.12 revisions add or change in funcgrad.numpy: nextafter,
complex inverse trigonometric / hyperbolic functions and expm1 / log1p with C99's special values,
signed zeros of remainder, ValueErrors for bad shapes and axes, tuples, eig / eigvals."""
import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import funcgrad
import funcgrad.numpy as fnp
from funcgrad.test_util import check_grads

RNG = np.random.default_rng(2024)
SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3)


def _same(got, want, rtol):
    """Equal with NaNs equal, infinities exact and zeros' signs compared."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    for g, w in zip(got.ravel(), want.ravel()):
        if np.isnan(w):
            assert np.isnan(g), (g, w)
        elif w == 0 or np.isinf(w):
            assert g == w and np.signbit(g) == np.signbit(w), (g, w)
        else:
            assert abs(g - w) <= rtol * abs(w), (g, w)


def _same_complex(got, want, rtol):
    got, want = np.asarray(got), np.asarray(want)
    _same(got.real, want.real, rtol)
    _same(got.imag, want.imag, rtol)


# ---------------------------------------------------------------------------------------------
# nextafter

def _floats(dtype):
    fi = np.finfo(dtype)
    special = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, fi.tiny, -fi.tiny, fi.smallest_subnormal,
               fi.max, -fi.max, np.inf, -np.inf, np.nan]
    return st.sampled_from(special) | st.floats(width=8 * np.dtype(dtype).itemsize)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@given(data=st.data())
def test_nextafter_matches_numpy(dtype, data):
    shape = data.draw(SHAPES)
    x1 = data.draw(hnp.arrays(dtype, shape, elements=_floats(dtype)))
    x2 = data.draw(hnp.arrays(dtype, shape[1:], elements=_floats(dtype)))   # broadcasts
    _same(fnp.nextafter(x1, x2), np.nextafter(x1, x2), rtol=0)
    _same(funcgrad.jit(fnp.nextafter)(x1, x2), np.nextafter(x1, x2), rtol=0)


def test_nextafter_special_cases_scalars_and_gradient():
    assert np.signbit(float(fnp.nextafter(np.float64(0.0), np.float64(-0.0))))
    assert not np.signbit(float(fnp.nextafter(np.float64(-0.0), np.float64(0.0))))
    assert math.isnan(float(fnp.nextafter(np.float32(1.0), np.nan)))
    up = fnp.nextafter(fnp.ones(3, fnp.float32), 2)   # a Python scalar is weak
    assert up.dtype == fnp.float32 and float(up[0]) == 1.0 + 2.0 ** -23
    assert float(fnp.nextafter(np.float64(1.0), 0.0)) == 1.0 - 2.0 ** -53
    g1, g2 = funcgrad.grad(fnp.nextafter, argnums=(0, 1))(np.float64(1.5), np.float64(3.0))
    assert (float(g1), float(g2)) == (1.0, 0.0)
    with pytest.raises(TypeError, match="floating"):
        fnp.nextafter(fnp.ones(2, fnp.complex64), 1.0)


# ---------------------------------------------------------------------------------------------
# complex elementary functions

CFUNCS = ["arccos", "arcsin", "arctan", "arccosh", "arcsinh", "arctanh", "sinh", "cosh",
          "tanh", "expm1", "log1p"]
VALS = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -3.5, 1e-300, -1e-300, 1e300, -1e300,
        np.inf, -np.inf, np.nan]


def _grid():
    z = np.empty(len(VALS) ** 2, np.complex128)
    z.real, z.imag = np.repeat(VALS, len(VALS)), np.tile(VALS, len(VALS))
    return z


def _unspecified(name, z):
    """Where numpy (C99) and the standard may differ: a sign the standard leaves open, numpy's
    naive expm1 at infinities and NaNs, and its log1p's absorption of tiny values."""
    a, b = z.real, z.imag
    inf_nan = np.isinf(a) & np.isnan(b)
    if name == "expm1":
        return np.isinf(a) & ~np.isfinite(b) | (a == np.inf) & (b == 0) | np.isnan(a) & (b == 0)
    if name == "log1p":
        return (np.abs(a) == 1e-300) & (np.abs(b) <= 1e-300)
    if name in ("arcsin", "arctan"):
        return inf_nan
    if name == "cosh":
        return np.isnan(a) & (b == 0)
    if name == "tanh":   # the standard: +-1 + 0j with b's sign, C99: the sign of sin(2b)
        return np.isinf(a) | (a == 0) & ~np.isfinite(b)
    return np.zeros(z.shape, bool)


@pytest.mark.parametrize("name", CFUNCS)
def test_complex_special_values_like_c99(name):
    z = _grid()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = getattr(np, name)(z)
    got = np.asarray(getattr(fnp, name)(z))
    keep = ~_unspecified(name, z)
    _same_complex(got[keep], want[keep], rtol=1e-13)


@pytest.mark.parametrize("z,want", [
    (complex(np.inf, 0.0), complex(np.inf, 0.0)), (complex(-np.inf, 4.0), complex(-1.0, -0.0)),
    (complex(-np.inf, np.nan), complex(-1.0, 0.0)), (complex(np.nan, 0.0), complex(np.nan, 0.0)),
    (complex(-0.0, 0.0), complex(-0.0, 0.0))])
def test_expm1_special_values_of_the_standard(z, want):
    _same_complex(fnp.expm1(np.complex128(z)), np.complex128(want), rtol=0)


def test_tanh_at_infinity_has_a_zero_signed_like_b():
    z = np.array([complex(np.inf, 2.0), complex(np.inf, -2.0), complex(-np.inf, 2.0)])
    _same_complex(fnp.tanh(z), np.array([complex(1, 0.0), complex(1, -0.0), complex(-1, 0.0)]),
                  rtol=0)


@pytest.mark.parametrize("name", CFUNCS)
@pytest.mark.parametrize("dtype,rtol", [(np.complex64, 3e-6), (np.complex128, 1e-13)])
def test_complex_values_match_numpy(name, dtype, rtol):
    top = 30.0 if name in ("sinh", "cosh", "expm1") else 1e4   # exp(30) fits complex64
    z = np.concatenate([(RNG.standard_normal(40) + 1j * RNG.standard_normal(40)) * s
                        for s in (1e-3, 0.7, 3.0, top)]).astype(dtype)
    want = getattr(np, name)(z.astype(np.complex128))
    if name == "log1p":   # numpy's log(1 + z) loses digits near 0: an extended-precision one
        a, b = z.real.astype(np.longdouble), z.imag.astype(np.longdouble)
        want = 0.5 * np.log1p(a * (2 + a) + b * b) + 1j * np.arctan2(b, 1 + a)
    got = np.asarray(getattr(fnp, name)(z))
    assert got.dtype == dtype
    np.testing.assert_allclose(got, want.astype(dtype), rtol=rtol, atol=0)


def test_complex_symmetries():
    z = _grid()
    z = z[np.isfinite(z)]   # (at infinities and NaNs the standard leaves some signs open)
    for name in CFUNCS:
        f = getattr(fnp, name)
        _same_complex(f(np.conj(z)), np.conj(np.asarray(f(z))), rtol=1e-15)
    for name in ("arcsinh", "arctanh", "arcsin", "arctan", "sinh"):
        f = getattr(fnp, name)
        _same_complex(f(-z), -np.asarray(f(z)), rtol=1e-15)


DERIV = {"arccos": lambda z: -1 / np.sqrt(1 - z * z), "arcsin": lambda z: 1 / np.sqrt(1 - z * z),
         "arctan": lambda z: 1 / (1 + z * z), "arcsinh": lambda z: 1 / np.sqrt(1 + z * z),
         "arccosh": lambda z: 1 / (np.sqrt(z - 1) * np.sqrt(z + 1)),
         "arctanh": lambda z: 1 / (1 - z * z), "sinh": np.cosh, "cosh": np.sinh,
         "tanh": lambda z: 1 - np.tanh(z) ** 2, "expm1": np.exp, "log1p": lambda z: 1 / (1 + z)}


@pytest.mark.parametrize("name", CFUNCS)
def test_complex_holomorphic_gradients(name):
    f = getattr(fnp, name)
    for z in (0.3 - 0.7j, -1.7 + 0.2j, 2.5 + 1j, 0j, 0.5 + 0j):
        g = funcgrad.grad(f, holomorphic=True)(np.complex128(z))
        np.testing.assert_allclose(complex(g), DERIV[name](z), rtol=1e-10, atol=1e-14)
    z = (RNG.standard_normal(3) + 1j * RNG.standard_normal(3)) * 0.6
    check_grads(lambda z: fnp.sum(fnp.abs(f(z)) ** 2), (z,), order=2, modes=("rev",))
    jac = funcgrad.jacfwd(f, holomorphic=True)(z)
    np.testing.assert_allclose(np.diag(np.asarray(jac)), DERIV[name](z), rtol=1e-10)


@pytest.mark.parametrize("name", CFUNCS)
@given(shape=SHAPES)
def test_complex_functions_under_jit_and_vmap(name, shape):
    f = getattr(fnp, name)
    z = (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(np.complex64)
    want = np.asarray(f(z))
    np.testing.assert_allclose(np.asarray(funcgrad.jit(f)(z)), want, rtol=1e-6, atol=1e-30)
    if z.ndim:
        np.testing.assert_allclose(np.asarray(funcgrad.vmap(f)(z)), want, rtol=1e-6,
                                   atol=1e-30)


def test_real_inverse_functions_keep_their_gradients_at_zero():
    assert float(funcgrad.grad(fnp.arcsin)(0.0)) == 1.0
    assert float(funcgrad.grad(lambda y: fnp.arctan2(y, 2.0))(0.0)) == 0.5
    assert float(funcgrad.grad(lambda x: fnp.arctan2(1.0, x))(0.0)) == -1.0
    check_grads(lambda y: fnp.arctan2(y, np.float64(0.5)), (np.float64(0.0),), order=2)


def test_acosh_below_one_is_nan():
    x = np.array([0.5, -1e300, -np.inf, 1.0, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _same(fnp.arccosh(x), np.arccosh(x), rtol=1e-15)


# ---------------------------------------------------------------------------------------------
# remainder's zeros, shapes and axes, tuples, scalar masks

@given(x=hnp.arrays(np.float64, SHAPES, elements=st.sampled_from([0.0, -0.0, 3.0, -3.0, 2.5])),
       y=st.sampled_from([1.5, -1.5, 3.0, -3.0, np.inf]))
def test_remainder_zero_takes_the_divisor_sign(x, y):
    _same(fnp.remainder(x, y), np.remainder(x, y), rtol=1e-15)
    _same(fnp.asarray(x) % y, np.remainder(x, y), rtol=1e-15)


def test_bad_shapes_and_axes_raise_value_errors():
    with pytest.raises(ValueError, match="broadcast"):
        fnp.broadcast_shapes((3,), (4,))
    with pytest.raises(ValueError):
        fnp.broadcast_to(fnp.ones(3), (4,))
    with pytest.raises(ValueError, match="size not equal to one"):
        fnp.squeeze(fnp.ones((2, 1)), axis=0)
    with pytest.raises(ValueError, match="repeated"):
        fnp.expand_dims(fnp.ones(2), axis=(0, 0))
    with pytest.raises(ValueError, match="out of bounds"):
        fnp.expand_dims(fnp.ones((2, 2, 2)), axis=(4,))
    with pytest.raises(TypeError):   # still funcgrad's ShapeError (a TypeError) too
        fnp.ones(3) + fnp.ones(4)
    with pytest.raises(IndexError):   # like numpy's AxisError
        fnp.sum(fnp.ones(2), axis=1)


@given(shape=SHAPES, data=st.data())
def test_expand_dims_tuples(shape, data):
    nd = len(shape) + 2
    axes = tuple(data.draw(st.lists(st.integers(-nd, nd - 1), min_size=2, max_size=2,
                                    unique_by=lambda a: a % nd)))
    x = np.zeros(shape)
    assert fnp.expand_dims(x, axis=axes).shape == np.expand_dims(x, axes).shape


def test_tuples_of_the_2025_revision():
    out = fnp.broadcast_arrays(fnp.ones((2, 1)), fnp.ones(3))
    assert isinstance(out, tuple) and [o.shape for o in out] == [(2, 3), (2, 3)]
    grids = fnp.meshgrid(fnp.arange(3), fnp.arange(2))
    assert isinstance(grids, tuple) and grids[0].shape == (2, 3)
    info = fnp.__array_namespace_info__()
    assert isinstance(info.devices(), tuple)
    assert info.capabilities()["max dimensions"] == 64
    assert fnp.__array_api_version__ == "2025.12"


def test_zero_dimensional_boolean_index():
    x = fnp.arange(6).reshape(2, 3)
    assert x[True].shape == (1, 2, 3) and x[fnp.asarray(False)].shape == (0, 2, 3)
    np.testing.assert_array_equal(np.asarray(x[np.bool_(True)]), np.arange(6).reshape(1, 2, 3))
    with pytest.raises(IndexError, match="concrete"):
        funcgrad.jit(lambda m: x[m])(fnp.asarray(True))


# ---------------------------------------------------------------------------------------------
# eig / eigvals (concrete arrays)

@pytest.mark.parametrize("dtype,cdtype", [(np.float32, np.complex64), (np.float64, np.complex128),
                                          (np.complex64, np.complex64), (np.int32, np.complex64)])
@given(shape=st.sampled_from([(1, 1), (3, 3), (2, 4, 4), (0, 2, 2), (2, 0, 0)]))
def test_eig_and_eigvals(dtype, cdtype, shape):
    a = (RNG.standard_normal(shape) * 3).astype(dtype)
    w, v = fnp.linalg.eig(a)
    assert w.dtype == v.dtype == cdtype and w.shape == shape[:-1] and v.shape == shape
    av = np.asarray(a, cdtype)
    w, v = np.asarray(w), np.asarray(v)
    tol = 1e-3 if cdtype == np.complex64 else 1e-10
    np.testing.assert_allclose(av @ v, v * w[..., None, :], atol=tol * (1 + np.abs(av).max(
        initial=0)))
    wv = np.asarray(fnp.linalg.eigvals(a))
    assert wv.dtype == cdtype
    np.testing.assert_allclose(np.sort_complex(wv.reshape(-1)), np.sort_complex(w.reshape(-1)),
                               atol=tol * 10)


def test_eig_needs_concrete_values():
    with pytest.raises(NotImplementedError, match="concrete"):
        funcgrad.jit(fnp.linalg.eigvals)(np.eye(2))
    with pytest.raises(ValueError, match="square"):
        fnp.linalg.eig(np.ones((2, 3)))
