"""The 64-bit switch (config "enable_x64", JAX's "jax_enable_x64"): funcgrad keeps 64-bit
types by default; switched off, 64-bit inputs and dtype requests become 32-bit as in JAX."""
import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp


@pytest.fixture
def x64_off():
    funcgrad.config.update("jax_enable_x64", False)
    try:
        yield
    finally:
        funcgrad.config.update("enable_x64", True)


def test_default_keeps_64_bit_types():
    assert funcgrad.config.enable_x64
    assert fnp.asarray(np.ones(2)).dtype == np.float64
    assert fnp.zeros(2, np.int64).dtype == np.int64


def test_switched_off_64_bit_becomes_32_bit(x64_off):
    assert not funcgrad.config.enable_x64
    assert fnp.asarray(np.ones(2)).dtype == np.float32
    assert fnp.asarray(np.arange(3)).dtype == np.int32
    assert fnp.zeros(2, np.float64).dtype == np.float32
    assert fnp.ones(2, dtype="complex128").dtype == np.complex64
    assert (fnp.ones(2, np.float32) + np.float64(1.5)).dtype == np.float32
    f = funcgrad.jit(lambda x: x * 2)
    assert f(np.ones(2)).dtype == np.float32
    g = funcgrad.grad(lambda x: (x ** 2).sum())(np.array([1.0, 2.0]))
    assert g.dtype == np.float32
    np.testing.assert_allclose(np.asarray(g), [2.0, 4.0])


def test_jit_retraces_when_the_switch_changes():
    f = funcgrad.jit(lambda x: x + 1)
    assert f(np.ones(2)).dtype == np.float64
    funcgrad.config.update("enable_x64", False)
    try:
        assert f(np.ones(2)).dtype == np.float32
    finally:
        funcgrad.config.update("enable_x64", True)
    assert f(np.ones(2)).dtype == np.float64
    assert f.stats()["traces"] == 2
