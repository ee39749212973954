"""Complex kernels on the CUDA backend (== numpy), under the simulator or on a GPU."""
import numpy as np
import pytest

import funcgrad
import funcgrad.cuda as fcuda
import funcgrad.numpy as fnp

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not fcuda.usable(),
                       reason="no GPU; run with NUMBA_ENABLE_CUDASIM=1 to use the simulator"),
]

RNG = np.random.default_rng(7)


def crand(*shape, dtype=np.complex64):
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)


def _dev(x):
    return funcgrad.device_put(x, "cuda")


def _tol(dtype):
    return (2e-5, 2e-6) if np.dtype(dtype) == np.complex64 else (1e-12, 1e-13)


UNARY = ["exp", "log", "sqrt", "sin", "cos", "tanh", "negative", "square", "abs", "sign",
         "real", "imag", "conj", "reciprocal"]


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_elementwise_kernels_match_numpy(dtype):
    z, w = crand(5, dtype=dtype), crand(5, dtype=dtype)
    rtol, atol = _tol(dtype)
    zc, wc = _dev(z), _dev(w)
    for name in UNARY:
        r = getattr(fnp, name)(zc)
        assert r.device == "cuda", name
        with np.errstate(all="ignore"):
            want = getattr(np, name)(z)
        np.testing.assert_allclose(np.asarray(r), want, rtol=rtol, atol=atol, err_msg=name)
    for name in ["add", "subtract", "multiply", "divide", "power", "equal", "not_equal"]:
        np.testing.assert_allclose(np.asarray(getattr(fnp, name)(zc, wc)),
                                   getattr(np, name)(z, w), rtol=rtol, atol=atol, err_msg=name)
    zero = _dev(np.zeros(2, dtype))   # (log(0) would raise in the simulator: not tested)
    np.testing.assert_array_equal(np.asarray(fnp.sign(zero)), np.zeros(2, dtype))
    np.testing.assert_array_equal(np.asarray(fnp.abs(zero)), np.zeros(2))
    for p in (3, -2):
        np.testing.assert_allclose(np.asarray(zc ** p), z ** p, rtol=rtol * 10)
    np.testing.assert_allclose(np.asarray(zc.astype(z.real.dtype)), z.real, rtol=rtol)
    re = _dev(z.real.copy())
    np.testing.assert_allclose(np.asarray(funcgrad.lax.complex(re, re)), z.real + 1j * z.real,
                               rtol=rtol)


def test_sums_fused_jit_and_grads_match_numpy():
    z, w = crand(4, 3), crand(4, 3)
    zc, wc = _dev(z), _dev(w)
    rtol, atol = _tol(np.complex64)
    np.testing.assert_allclose(np.asarray(fnp.sum(zc, axis=0)), z.sum(0), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(fnp.mean(zc, axis=1)), z.mean(1), rtol=1e-5)
    f = funcgrad.jit(lambda a, b: fnp.sum(fnp.exp(a) * b + fnp.conj(a) * 2j, axis=1))
    np.testing.assert_allclose(np.asarray(f(zc, wc)), np.sum(np.exp(z) * w + z.conj() * 2j, 1),
                               rtol=1e-5)
    g = funcgrad.grad(lambda a: fnp.sum(fnp.abs(a * wc)))(zc)
    assert g.device == "cuda"
    np.testing.assert_allclose(np.asarray(g), np.conj(z * w) / np.abs(z * w) * w,
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((2, 1, 4), (2, 4, 0)), ((1, 4), (4,)),
                                    ((2, 3, 4), (4, 3))])
def test_complex_matmul_and_its_gradient(dtype, shapes):
    a, b = crand(*shapes[0], dtype=dtype), crand(*shapes[1], dtype=dtype)
    rtol, atol = _tol(dtype)
    np.testing.assert_allclose(np.asarray(_dev(a) @ _dev(b)), a @ b, rtol=rtol * 10,
                               atol=atol * 10)

    def loss(a, b):
        return fnp.sum(fnp.abs(a @ b) ** 2)
    got = funcgrad.jit(funcgrad.grad(loss, argnums=(0, 1)))(_dev(a), _dev(b))
    want = funcgrad.grad(loss, argnums=(0, 1))(*funcgrad.device_put((a, b), "cpu"))
    for g, w in zip(got, want):
        assert g.device == "cuda"
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol * 50, atol=atol * 50)


def test_missing_complex_kernels_raise_clearly():
    zc = _dev(crand(2, 2))
    with pytest.raises(NotImplementedError, match="'reduce_prod'"):
        fnp.prod(zc)
