"""The 64-bit switch (config "enable_x64", JAX's "jax_enable_x64"): off by default as in JAX, so
64-bit inputs and dtype requests become 32-bit; on, they keep their dtype; JAX_ENABLE_X64 sets it
at import (the test suite runs with it on: tests/conftest.py)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad.config import check_flag


@pytest.fixture
def x64_off():
    old = funcgrad.config.enable_x64
    funcgrad.config.update("jax_enable_x64", False)
    try:
        yield
    finally:
        funcgrad.config.update("enable_x64", old)


def _run_fresh(code: str, **env) -> str:
    """Runs `code` in a fresh interpreter with JAX_ENABLE_X64 as given (absent when None)."""
    environ = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    environ.update({k: v for k, v in env.items() if v is not None})
    done = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


_PROBE = ("import numpy as np, funcgrad, funcgrad.numpy as jnp;"
          "print(funcgrad.config.enable_x64, jnp.asarray(np.ones(2)).dtype)")


def test_default_is_jax_s_32_bit_mode():
    assert _run_fresh(_PROBE) == "False float32"


@pytest.mark.parametrize("text, want", [("1", "True float64"), ("true", "True float64"),
                                        ("0", "False float32"), ("False", "False float32")])
def test_environment_variable_sets_the_switch_at_import(text, want):
    assert _run_fresh(_PROBE, JAX_ENABLE_X64=text) == want


def test_check_flag_rejects_other_words():
    assert check_flag(" Yes ", "X") and not check_flag("off", "X") and not check_flag("", "X")
    with pytest.raises(ValueError, match="JAX_ENABLE_X64 must be one of"):
        check_flag("maybe", "JAX_ENABLE_X64")


def test_switched_on_keeps_64_bit_types():
    assert funcgrad.config.enable_x64          # tests/conftest.py turns it on
    assert fnp.asarray(np.ones(2)).dtype == np.float64
    assert fnp.zeros(2, np.int64).dtype == np.int64


def test_switched_off_64_bit_becomes_32_bit(x64_off):
    assert not funcgrad.config.enable_x64
    assert fnp.asarray(np.ones(2)).dtype == np.float32
    assert fnp.asarray(np.arange(3)).dtype == np.int32
    assert fnp.arange(3).dtype == np.int32
    assert fnp.zeros(2, np.float64).dtype == np.float32
    assert fnp.ones(2, dtype=int).dtype == np.int32
    assert fnp.ones(2, dtype="complex128").dtype == np.complex64
    assert (fnp.ones(2, np.float32) + np.float64(1.5)).dtype == np.float32
    assert fnp.sum(np.ones(3)).dtype == np.float32
    f = funcgrad.jit(lambda x: x * 2)
    assert f(np.ones(2)).dtype == np.float32
    g = funcgrad.grad(lambda x: (x ** 2).sum())(np.array([1.0, 2.0]))
    assert g.dtype == np.float32
    np.testing.assert_allclose(np.asarray(g), [2.0, 4.0])


def test_jax_program_in_the_default_mode(x64_off):
    # JAX 0.10.2 (CPU, default mode): x stays float32 through `+=` of numpy float64 data, and
    # the draws are float32 with these values (to the last bit or two: erfinv's rounding).
    x = fnp.zeros(3)
    x += np.ones(3)
    assert x.dtype == np.float32
    w = funcgrad.random.normal(funcgrad.random.PRNGKey(0), (2,))
    assert w.dtype == np.float32
    np.testing.assert_allclose(np.asarray(w), np.float32([1.6226422, 2.0252647]), rtol=3e-7)
    assert str(fnp.asarray(np.float64(0.1) * 3)) == "0.3"


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


def test_gradient_checks_use_the_computed_dtype_s_tolerance(x64_off):
    # JAX 0.10.2's check_vjp passes this in its default mode: float64 inputs compute in
    # float32, so float32's tolerance (2e-3) applies, not float64's (1e-5)
    import functools

    from funcgrad.test_util import check_grads, check_vjp
    check_vjp(fnp.tanh, functools.partial(funcgrad.vjp, fnp.tanh), (np.ones(3),))
    check_grads(fnp.tanh, (np.ones(3),), order=2)
    wrong = funcgrad.custom_jvp(fnp.sin)
    wrong.defjvp(lambda primals, tangents: (fnp.sin(primals[0]), 1.1 * fnp.cos(primals[0])
                                            * tangents[0]))
    with pytest.raises(AssertionError):   # a rule 10% off is still caught
        check_grads(wrong, (np.ones(3),), order=1)


def test_switches_read_by_jax_s_names():
    assert funcgrad.config.jax_enable_x64 is funcgrad.config.enable_x64
    assert funcgrad.config.read("jax_enable_x64") is funcgrad.config.enable_x64
    assert funcgrad.config.read("debug_nans") is False
    with pytest.raises(KeyError, match="unknown funcgrad config option 'jax_nope'"):
        funcgrad.config.read("jax_nope")
