"""complex64/complex128: creation, promotion, math, reductions, matmul and JAX's gradient
convention (checked by finite differences in complex128)."""
import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad.test_util import check_grads

RNG = np.random.default_rng(13)


def crand(*shape, dtype=np.complex128):
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)


# ---------------------------------------------------------------------------------------------
# creation and promotion

def test_creation_from_python_complex():
    x = fnp.asarray([1 + 2j, 3j])
    assert x.dtype == fnp.complex64   # Python complex defaults to complex64, as in JAX
    np.testing.assert_array_equal(np.asarray(x), np.asarray([1 + 2j, 3j], np.complex64))
    assert fnp.full((2,), 1j).dtype == fnp.complex64
    assert fnp.zeros(3, fnp.complex128).dtype == np.complex128
    assert fnp.ones((2, 2), dtype=np.complex64).dtype == np.complex64
    assert fnp.array(np.ones(2, np.complex128)).dtype == np.complex128
    assert complex(fnp.asarray(2 - 1j)) == 2 - 1j


@pytest.mark.parametrize("a,b,want", [
    (np.float32, np.complex64, np.complex64), (np.float64, np.complex64, np.complex128),
    (np.float16, np.complex64, np.complex64), (np.int32, np.complex64, np.complex64),
    (np.complex64, np.complex128, np.complex128), (np.bool_, np.complex128, np.complex128)])
def test_promotion_like_jax(a, b, want):
    assert fnp.result_type(np.dtype(a), np.dtype(b)) == want
    assert (fnp.ones(2, a) + fnp.ones(2, b)).dtype == want


def test_python_complex_is_weak():
    assert (fnp.ones(2, fnp.float32) * 1j).dtype == np.complex64
    assert (fnp.ones(2, fnp.float64) * 1j).dtype == np.complex128
    assert (fnp.ones(2, fnp.complex128) + 1.5).dtype == np.complex128
    assert (fnp.ones(2, fnp.int32) + 1j).dtype == np.complex64


# ---------------------------------------------------------------------------------------------
# math against numpy

UNARY = ["exp", "log", "sqrt", "sin", "cos", "tan", "tanh", "negative", "square", "abs",
         "sign", "real", "imag", "conj", "angle", "reciprocal", "isfinite", "isnan", "isinf"]


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_unary_matches_numpy(name, dtype):
    z = crand(2, 3, dtype=dtype)
    z[0, 0] = 0 if name in ("sign", "abs", "angle") else z[0, 0]
    got = getattr(fnp, name)(z)
    want = getattr(np, name)(z)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    tol = 2e-6 if dtype == np.complex64 else 1e-13
    np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "divide", "power", "equal",
                                  "not_equal"])
def test_binary_matches_numpy(name):
    z, w = crand(3, 2), crand(3, 2)
    np.testing.assert_allclose(np.asarray(getattr(fnp, name)(z, w)), getattr(np, name)(z, w),
                               rtol=1e-13)


def test_reductions_and_matmul():
    z, w = crand(3, 4), crand(4, 2)
    np.testing.assert_allclose(np.asarray(fnp.sum(z, axis=0)), z.sum(0), rtol=1e-13)
    np.testing.assert_allclose(np.asarray(fnp.prod(z, axis=1)), z.prod(1), rtol=1e-13)
    np.testing.assert_allclose(np.asarray(fnp.mean(z)), z.mean(), rtol=1e-13)
    np.testing.assert_allclose(np.asarray(fnp.var(z)), z.var(), rtol=1e-13)
    np.testing.assert_allclose(np.asarray(z @ fnp.asarray(w)), z @ w, rtol=1e-13)
    np.testing.assert_allclose(np.asarray(fnp.matmul(z, w.real)), z @ w.real, rtol=1e-13)
    x = fnp.asarray(z)
    np.testing.assert_array_equal(np.asarray(x.real), z.real)
    np.testing.assert_array_equal(np.asarray(x.imag), z.imag)
    np.testing.assert_array_equal(np.asarray(x.conj()), z.conj())
    np.testing.assert_array_equal(np.asarray(x.astype(fnp.float64)), z.real)  # JAX: real part


def test_comparisons_that_need_an_order_reject_complex():
    with pytest.raises(TypeError, match="complex"):
        fnp.less(crand(2), crand(2))


# ---------------------------------------------------------------------------------------------
# gradients: JAX's convention, checked by finite differences in complex128

def _fd_grad(f, z, eps=1e-6):
    """df/dx - i df/dy of a real function f of complex z, by central differences."""
    g = np.zeros_like(z)
    for i in np.ndindex(z.shape):
        e = np.zeros_like(z)
        e[i] = eps
        dx = (float(f(z + e)) - float(f(z - e))) / (2 * eps)
        dy = (float(f(z + 1j * e)) - float(f(z - 1j * e))) / (2 * eps)
        g[i] = dx - 1j * dy
    return g


REAL_FNS = {
    "abs2": lambda z: fnp.sum(fnp.real(z) ** 2 + fnp.imag(z) ** 2),
    "abs": lambda z: fnp.sum(fnp.abs(z)),
    "angle": lambda z: fnp.sum(fnp.angle(z) * fnp.arange(z.size, dtype=fnp.float64)),
    "exp_re": lambda z: fnp.real(fnp.sum(fnp.exp(z) * (0.5 - 2j))),
    "log_im": lambda z: fnp.sum(fnp.imag(fnp.log(z * z + 1.0))),
    "conj_mul": lambda z: fnp.real(fnp.sum(fnp.conj(z) * z * fnp.sin(z))),
    "div_sqrt": lambda z: fnp.sum(fnp.abs(fnp.sqrt(z) / (z + 3.0))),
    "matmul": lambda z: fnp.sum(fnp.abs(z.reshape(2, 2) @ fnp.asarray([[1 + 1j], [2 - 1j]]))),
    "pow_prod": lambda z: fnp.real(fnp.prod(z ** 3 * fnp.tanh(z))),
    "mixed": lambda z: fnp.sum(fnp.real(z) * fnp.cos(fnp.abs(z))),
}


@pytest.mark.parametrize("name", sorted(REAL_FNS))
def test_grad_of_real_function_matches_finite_differences(name):
    f = REAL_FNS[name]
    z = crand(4)
    g = funcgrad.grad(f)(z)
    assert g.dtype == np.complex128
    np.testing.assert_allclose(np.asarray(g), _fd_grad(f, z), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", sorted(REAL_FNS))
def test_check_grads_complex_directions(name):
    check_grads(REAL_FNS[name], (crand(4),), order=2, atol=1e-6, rtol=1e-5)


def test_jax_documented_values():
    # the autodiff cookbook: f(z) = |z|^2 at 3 + 4j has grad 6 - 8j
    f = lambda z: fnp.real(z) ** 2 + fnp.imag(z) ** 2
    assert complex(funcgrad.grad(f)(np.complex128(3 + 4j))) == 6 - 8j
    np.testing.assert_allclose(complex(funcgrad.grad(fnp.abs)(np.complex128(3 + 4j))), 0.6 - 0.8j)
    assert complex(funcgrad.grad(fnp.abs)(np.complex128(0))) == 0


HOLO = {"sin": (fnp.sin, np.cos), "exp2": (lambda z: fnp.exp(2 * z), lambda z: 2 * np.exp(2 * z)),
        "poly": (lambda z: z ** 3 - 1j * z, lambda z: 3 * z ** 2 - 1j),
        "log": (fnp.log, lambda z: 1 / z), "tanh": (fnp.tanh, lambda z: 1 - np.tanh(z) ** 2)}


@pytest.mark.parametrize("name", sorted(HOLO))
def test_holomorphic_grad_is_the_complex_derivative(name):
    f, df = HOLO[name]
    z = np.complex128(0.3 - 0.7j)
    g = funcgrad.grad(f, holomorphic=True)(z)
    np.testing.assert_allclose(complex(g), df(z), rtol=1e-12)
    h = 1e-6   # a holomorphic f has the same difference quotient in every direction
    for d in (h, 1j * h):
        fd = (complex(f(z + d)) - complex(f(z - d))) / (2 * d)
        np.testing.assert_allclose(complex(g), fd, rtol=1e-6)


def test_holomorphic_jacobians():
    f = lambda z: fnp.sin(z) * z
    z = crand(3)
    want = np.diag(np.cos(z) * z + np.sin(z))
    for jac in (funcgrad.jacfwd, funcgrad.jacrev):
        np.testing.assert_allclose(np.asarray(jac(f, holomorphic=True)(z)), want, rtol=1e-12)


def test_errors_name_the_convention():
    z = crand(2)
    with pytest.raises(TypeError, match="holomorphic=True"):
        funcgrad.grad(lambda z: fnp.sum(z))(z)
    with pytest.raises(TypeError, match="complex inputs"):
        funcgrad.grad(lambda x: fnp.sum(x) * 1j, holomorphic=True)(np.ones(2))
    with pytest.raises(TypeError, match="complex output"):
        funcgrad.grad(lambda z: fnp.sum(fnp.abs(z)), holomorphic=True)(z)
    with pytest.raises(TypeError, match="holomorphic=True"):
        funcgrad.jacrev(fnp.sin)(z)
    with pytest.raises(TypeError, match="holomorphic=True"):
        funcgrad.jacfwd(fnp.sin)(z)


def test_real_to_complex_and_back_grads():
    # f(x) = |x e^{ix}|^2 + Re(e^{ix}) for real x: d/dx = 2x - sin x
    f = lambda x: fnp.sum(fnp.abs(x * fnp.exp(1j * x)) ** 2 + fnp.real(fnp.exp(1j * x)))
    x = RNG.standard_normal(3)
    g = funcgrad.grad(f)(x)
    assert g.dtype == np.float64
    np.testing.assert_allclose(np.asarray(g), 2 * x - np.sin(x), rtol=1e-12)
    check_grads(f, (x,), order=2)


def test_vmap_and_jit_with_complex():
    z = crand(3, 2)
    f = lambda v: fnp.sum(fnp.exp(v) * fnp.conj(v))
    np.testing.assert_allclose(np.asarray(funcgrad.vmap(f)(z)),
                               np.sum(np.exp(z) * z.conj(), axis=1), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(funcgrad.jit(f)(z)), np.sum(np.exp(z) * z.conj()),
                               rtol=1e-12)
    g = funcgrad.jit(funcgrad.grad(lambda v: fnp.sum(fnp.abs(v))))
    np.testing.assert_allclose(np.asarray(g(z)), z.conj() / np.abs(z), rtol=1e-12)


@pytest.mark.parametrize("name,real_in", [("fft", False), ("ifft", False), ("rfft", True),
                                          ("irfft", False), ("hfft", False), ("ihfft", True)])
def test_fft_matches_numpy_and_differentiates(name, real_in):
    x = RNG.standard_normal((2, 5)) if real_in else crand(2, 5)
    f, g = getattr(fnp.fft, name), getattr(np.fft, name)
    for kw in ({}, {"n": 4}, {"n": 7, "axis": 0}, {"norm": "ortho"}, {"norm": "forward"}):
        np.testing.assert_allclose(np.asarray(f(x, **kw)), g(x, **kw), atol=1e-12, err_msg=str(kw))
    check_grads(lambda v: fnp.sum(fnp.abs(f(v, n=4)) ** 2), (x,), order=1)
    z = crand(3, 4)
    np.testing.assert_allclose(np.asarray(fnp.fft.fftn(z, axes=(0, 1))), np.fft.fftn(z),
                               atol=1e-12)
    np.testing.assert_allclose(np.asarray(fnp.fft.irfftn(z, axes=(0, 1))),
                               np.fft.irfftn(z, axes=(0, 1)), atol=1e-12)
