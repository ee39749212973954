"""Matmul `precision=` (JAX's names) and config's "default_matmul_precision": the value reaches
dot_general's `precision` param, gradients/jvp/vmap keep it, jit retraces when the config
changes, and the CPU ignores it (numpy computes in the operand dtype)."""
from __future__ import annotations

import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.config import canonical_precision, config


@pytest.fixture(autouse=True)
def _restore_config():
    old = config.default_matmul_precision
    yield
    config.update("default_matmul_precision", old)


def _precisions(fun, *args):
    """The precision param of every dot_general fun's expression binds."""
    expr = funcgrad.make_jaxpr(fun)(*args)
    return [e.params["precision"] for e in expr.eqns if e.prim.name == "dot_general"]


@pytest.mark.parametrize("value,want", [
    (None, None), ("default", None), ("fastest", None), ("DEFAULT", None),
    ("high", "tensorfloat32"), ("tensorfloat32", "tensorfloat32"),
    ("highest", "float32"), ("float32", "float32"), ("bfloat16", "bfloat16"),
    (lax.Precision.HIGH, "tensorfloat32"), (lax.Precision.HIGHEST, "float32"),
    (lax.Precision.DEFAULT, None), (("high", "highest"), "float32"),
    ((None, "bfloat16"), "bfloat16"),
])
def test_canonical_names(value, want):
    assert canonical_precision(value) == want


@pytest.mark.parametrize("bad", ["tf32", 3, ("high",), ("high", "low")])
def test_unknown_precision_is_an_error(bad):
    with pytest.raises(ValueError, match="precision"):
        canonical_precision(bad)
    with pytest.raises(ValueError, match="precision"):
        fnp.matmul(np.ones((2, 2)), np.ones((2, 2)), precision=bad)
    with pytest.raises(ValueError, match="precision"):
        config.update("default_matmul_precision", bad)


@pytest.mark.parametrize("api", ["matmul", "dot", "einsum", "tensordot", "inner", "vdot",
                                 "lax.dot_general", "lax.dot", "lax.batch_matmul"])
def test_param_reaches_dot_general(api):
    x, y = np.ones((2, 3, 3), "float32"), np.ones((2, 3, 3), "float32")
    calls = {
        "matmul": lambda a, b, p: fnp.matmul(a, b, precision=p),
        "dot": lambda a, b, p: fnp.dot(a[0], b[0], precision=p),
        "einsum": lambda a, b, p: fnp.einsum("bij,bjk->bik", a, b, precision=p),
        "tensordot": lambda a, b, p: fnp.tensordot(a, b, ([2], [1]), precision=p),
        "inner": lambda a, b, p: fnp.inner(a, b, precision=p),
        "vdot": lambda a, b, p: fnp.vdot(a, b, precision=p),
        "lax.dot_general": lambda a, b, p: lax.dot_general(
            a, b, (((2,), (1,)), ((0,), (0,))), precision=p),
        "lax.dot": lambda a, b, p: lax.dot(a[0], b[0], precision=p),
        "lax.batch_matmul": lambda a, b, p: lax.batch_matmul(a, b, precision=p),
    }
    f = calls[api]
    assert _precisions(lambda a, b: f(a, b, "high"), x, y) == ["tensorfloat32"]
    assert _precisions(lambda a, b: f(a, b, lax.Precision.HIGHEST), x, y) == ["float32"]
    assert _precisions(lambda a, b: f(a, b, None), x, y) == [None]
    # the CPU computes in the operand dtype whatever the precision
    np.testing.assert_array_equal(np.asarray(f(x, y, "bfloat16")), np.asarray(f(x, y, None)))


def test_gradients_jvp_and_vmap_keep_the_param(rng):
    x = rng.standard_normal((3, 4)).astype("float32")
    w = rng.standard_normal((4, 5)).astype("float32")

    def loss(x, w):
        return fnp.sum(fnp.tanh(fnp.matmul(x, w, precision="tensorfloat32")))

    g = funcgrad.grad(loss, argnums=(0, 1))
    ps = _precisions(g, x, w)
    assert len(ps) == 3 and set(ps) == {"tensorfloat32"}   # forward + both cotangents
    ps = _precisions(lambda x, w: funcgrad.jvp(lambda a: loss(a, w), (x,), (x,)), x, w)
    assert len(ps) == 2 and set(ps) == {"tensorfloat32"}
    ps = _precisions(funcgrad.vmap(lambda x, w: fnp.dot(x, w, precision="bfloat16"),
                                   (0, None)), x, w)
    assert ps == ["bfloat16"]
    # and the gradient values are numpy's (the CPU ignores the precision)
    gx, gw = g(x, w)
    dt = 1 - np.tanh(x @ w) ** 2
    np.testing.assert_allclose(gx, dt @ w.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gw, x.T @ dt, rtol=1e-5, atol=1e-6)


def test_config_default_and_explicit_override():
    x = np.ones((2, 2), "float32")
    config.update("default_matmul_precision", "tensorfloat32")
    assert _precisions(lambda a: a @ a, x) == ["tensorfloat32"]
    assert _precisions(lambda a: fnp.matmul(a, a, precision="highest"), x) == ["float32"]
    assert _precisions(lambda a: fnp.matmul(a, a, precision="default"), x) == ["tensorfloat32"]
    config.update("default_matmul_precision", "highest")
    assert config.default_matmul_precision == "float32"
    assert _precisions(lambda a: a @ a, x) == ["float32"]
    config.update("default_matmul_precision", None)
    assert _precisions(lambda a: a @ a, x) == [None]


def test_jit_retraces_when_the_default_precision_changes():
    f = funcgrad.jit(lambda a, b: a @ b)
    x = funcgrad.device_put(np.ones((2, 2), "float32"), "cpu")
    f(x, x)
    f(x, x)
    assert f.stats()["traces"] == 1
    config.update("default_matmul_precision", "tensorfloat32")
    f(x, x)
    assert f.stats()["traces"] == 2
    low = f.lower(x, x)
    ps = [e.params["precision"] for e in low.closed.expr.eqns if e.prim.name == "dot_general"]
    assert ps == ["tensorfloat32"]
    config.update("default_matmul_precision", None)
    f(x, x)   # back to the first signature: its trace is reused
    assert f.stats()["traces"] == 2
