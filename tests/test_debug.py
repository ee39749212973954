"""funcgrad.debug.print inside transformations, and the debug_nans checker."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import grad, jit, jvp, vmap

THIS_FILE = "test_debug.py"


@pytest.fixture(autouse=True)
def _reset_config():
    yield
    funcgrad.config.update("debug_nans", False)
    funcgrad.config.update("explain_retraces", False)


def _line_of(fn, text):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


# ---------------------------------------------------------------------------------------------
# debug.print
# ---------------------------------------------------------------------------------------------

def _printing(x):
    funcgrad.debug.print("x={x} twice={}", x * 2.0, x=x)
    return fnp.sum(fnp.sin(x))


X = np.array([0.0, 1.0, 2.0])


def test_print_eager(capsys):
    _printing(X)
    assert capsys.readouterr().out == "x=[0. 1. 2.] twice=[0. 2. 4.]\n"


def test_print_inside_jit_prints_every_call(capsys):
    f = jit(_printing)
    f(X)
    f(X + 1.0)
    assert capsys.readouterr().out == ("x=[0. 1. 2.] twice=[0. 2. 4.]\n"
                                       "x=[1. 2. 3.] twice=[2. 4. 6.]\n")
    assert f.stats()["traces"] == 1  # printed at run time, not at trace time
    assert "debug_print" in str(f.lower(X))  # never removed by DCE


def test_print_inside_vmap(capsys):
    # JAX prints once per element of the mapped axis, in order
    vmap(_printing)(np.stack([X, X + 1.0]))
    assert capsys.readouterr().out == ("x=[0. 1. 2.] twice=[0. 2. 4.]\n"
                                       "x=[1. 2. 3.] twice=[2. 4. 6.]\n")
    vmap(_printing, in_axes=1)(np.stack([X, X + 1.0]))
    assert capsys.readouterr().out.splitlines()[:2] == ["x=[0. 1.] twice=[0. 2.]",
                                                        "x=[1. 2.] twice=[2. 4.]"]


def test_print_inside_grad(capsys):
    g = grad(_printing)(X)
    np.testing.assert_allclose(g, np.cos(X))
    assert capsys.readouterr().out == "x=[0. 1. 2.] twice=[0. 2. 4.]\n"  # the forward, once
    jit(grad(_printing))(X)
    assert capsys.readouterr().out == "x=[0. 1. 2.] twice=[0. 2. 4.]\n"
    grad(jit(_printing))(X)
    assert capsys.readouterr().out == "x=[0. 1. 2.] twice=[0. 2. 4.]\n"


def test_print_inside_jvp_and_nested(capsys):
    jvp(_printing, (X,), (X,))
    assert capsys.readouterr().out == "x=[0. 1. 2.] twice=[0. 2. 4.]\n"
    jit(vmap(jit(_printing)))(X[None])
    assert capsys.readouterr().out == "x=[0. 1. 2.] twice=[0. 2. 4.]\n"


def test_print_of_values_inside_grad_of_intermediate(capsys):
    def f(x):
        y = fnp.exp(x)
        funcgrad.debug.print("y={}", y)
        return y * 2.0

    assert float(grad(f)(0.0)) == 2.0
    assert capsys.readouterr().out == "y=1.0\n"


# ---------------------------------------------------------------------------------------------
# debug_nans
# ---------------------------------------------------------------------------------------------

def _where_sqrt(x):
    return fnp.where(x > 0, fnp.sqrt(x), 0.0)  # the classic NaN gradient at 0


def _log_neg(x):
    y = x * 2.0
    return fnp.log(y - 3.0)  # NaN for y < 3


def test_debug_nans_off_by_default():
    assert funcgrad.config.debug_nans is False
    g = grad(_where_sqrt)(0.0)
    assert np.isnan(float(g))  # inf * 0 in the backward pass, silently


def test_debug_nans_forward_eager():
    funcgrad.config.update("debug_nans", True)
    with pytest.raises(FloatingPointError) as info:
        _log_neg(fnp.array([2.0, 1.0]))
    msg = str(info.value)
    assert "`log`" in msg and "NaN" in msg and "forward pass" in msg
    assert f"{THIS_FILE}:{_line_of(_log_neg, 'fnp.log(')}" in msg


def test_debug_nans_forward_under_jit():
    funcgrad.config.update("debug_nans", True)
    with pytest.raises(FloatingPointError) as info:
        jit(_log_neg)(fnp.array([2.0, 1.0]))
    msg = str(info.value)
    assert "`log`" in msg and "forward pass" in msg
    assert f"{THIS_FILE}:{_line_of(_log_neg, 'fnp.log(')}" in msg
    np.testing.assert_allclose(jit(_log_neg)(fnp.array([2.0, 3.0])),
                               np.log([1.0, 3.0]))  # finite values pass


@pytest.mark.parametrize("how", ["eager", "jit(grad)", "grad(jit)"])
def test_debug_nans_classic_where_sqrt_gradient(how):
    funcgrad.config.update("debug_nans", True)
    assert float(_where_sqrt(0.0)) == 0.0  # the forward pass is fine
    fn = {"eager": grad(_where_sqrt), "jit(grad)": jit(grad(_where_sqrt)),
          "grad(jit)": grad(jit(_where_sqrt))}[how]
    with pytest.raises(FloatingPointError) as info:
        fn(0.0)
    msg = str(info.value)
    assert "backward pass" in msg  # not the forward
    assert "of `sqrt`" in msg  # the forward op it belongs to
    assert "`div`" in msg and "Inf" in msg  # the primitive that produced it: 0.5 / sqrt(0)
    assert f"{THIS_FILE}:{_line_of(_where_sqrt, 'fnp.sqrt(x)')}" in msg
    assert isinstance(info.value, funcgrad.core.FuncgradError)
    assert float(fn(1.0)) == 0.5  # no error where the gradient is finite


def test_debug_nans_under_vmap():
    funcgrad.config.update("debug_nans", True)
    with pytest.raises(FloatingPointError, match="forward pass"):
        vmap(_log_neg)(fnp.array([[2.0], [1.0]]))


def test_debug_nans_reports_inf_from_division():
    funcgrad.config.update("debug_nans", True)
    with pytest.raises(FloatingPointError, match=r"`div` produced Inf in the forward pass"):
        jit(lambda x: 1.0 / x)(fnp.array([1.0, 0.0]))


def test_debug_nans_switched_off_again():
    funcgrad.config.update("debug_nans", True)
    funcgrad.config.update("debug_nans", False)
    assert np.isnan(float(grad(_where_sqrt)(0.0)))
    with pytest.raises(KeyError, match="unknown funcgrad config option"):
        funcgrad.config.update("debug_nan", True)


def test_callback_under_vmap_takes_elements_of_the_mapped_axis():
    seen = []
    vmap(lambda x: funcgrad.debug.callback(lambda v: seen.append(np.asarray(v).tolist()), x)
         or x, in_axes=1)(np.arange(6.0).reshape(2, 3))
    assert seen == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]   # the columns, as JAX calls it
