"""disable_jit, clear_caches and custom_gradient (JAX's top-level names)."""
import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp


def test_disable_jit_runs_python_eagerly():
    seen = []

    @funcgrad.jit
    def f(x):
        seen.append(type(x).__name__)
        return x * 2

    f(fnp.float32(1.0))
    with funcgrad.disable_jit():
        assert float(f(fnp.float32(3.0))) == 6.0
        if f(fnp.float32(1.0)) > 0:     # concrete values: Python control flow works
            seen.append("branch")
    assert seen[0] != "Array" and seen[1:] == ["Array", "Array", "branch"]
    assert f.stats()["traces"] == 1


def test_clear_caches_retraces():
    f = funcgrad.jit(lambda x: x + 1)
    f(fnp.ones(2))
    f(fnp.ones(2))
    assert f.stats()["traces"] == 1
    funcgrad.clear_caches()
    f(fnp.ones(2))
    assert f.stats()["traces"] == 2


@pytest.mark.parametrize("jit", [False, True])
def test_custom_gradient_uses_the_given_vjp(jit):
    @funcgrad.custom_gradient
    def f(x, y):
        return x * y, lambda ct: (ct * 10.0, ct * 0.0)

    g = funcgrad.grad(lambda x, y: 2.0 * f(x, y), argnums=(0, 1))
    g = funcgrad.jit(g) if jit else g
    gx, gy = g(3.0, 4.0)
    assert float(gx) == 20.0 and float(gy) == 0.0
    assert float(f(3.0, 4.0)) == 12.0
    np.testing.assert_allclose(float(funcgrad.jvp(lambda x: f(x, 4.0), (3.0,), (1.0,))[1]), 4.0)
