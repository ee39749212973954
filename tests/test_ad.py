"""grad, value_and_grad, vjp, jvp, stop_gradient and their JAX-style errors; printed backward
expressions with call sites."""
from __future__ import annotations

import collections
import inspect

import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.core import typecheck_expr
from funcgrad.test_util import check_grads

F32, F64 = np.dtype("float32"), np.dtype("float64")


def lineno_of(marker: str, fn=None) -> int:
    """The line number in this file of the first source line containing `marker`."""
    if fn is not None:
        lines, start = inspect.getsourcelines(fn)
    else:
        with open(__file__) as fh:
            lines, start = fh.read().splitlines(), 1
    for i, line in enumerate(lines):
        if marker in line:
            return start + i
    raise AssertionError(marker)


# ---------------------------------------------------------------------------------------------
# grad / value_and_grad
# ---------------------------------------------------------------------------------------------

def test_grad_basic():
    assert float(funcgrad.grad(lambda x: x * x)(3.0)) == 6.0
    assert float(funcgrad.grad(fnp.sin)(0.0)) == 1.0
    g = funcgrad.grad(lambda x: fnp.sum(x ** 2))(fnp.arange(3.0))
    np.testing.assert_allclose(np.asarray(g), [0, 2, 4])
    assert g.dtype == F32 and g.shape == (3,)
    g64 = funcgrad.grad(lambda x: fnp.sum(fnp.exp(x)))(np.arange(3.0))
    assert g64.dtype == F64
    np.testing.assert_allclose(np.asarray(g64), np.exp(np.arange(3.0)), rtol=1e-15)


def test_grad_argnums():
    def f(x, y, z):
        return fnp.sum(x * y) + 2.0 * z

    x, y, z = fnp.ones(2), fnp.arange(2.0), fnp.float32(3)
    np.testing.assert_allclose(np.asarray(funcgrad.grad(f)(x, y, z)), [0, 1])
    np.testing.assert_allclose(np.asarray(funcgrad.grad(f, argnums=1)(x, y, z)), [1, 1])
    gx, gz = funcgrad.grad(f, argnums=(0, 2))(x, y, z)
    np.testing.assert_allclose(np.asarray(gx), [0, 1])
    assert float(gz) == 2.0
    (gy,) = funcgrad.grad(f, argnums=(1,))(x, y, z)
    np.testing.assert_allclose(np.asarray(gy), [1, 1])
    v, (gx, gy) = funcgrad.value_and_grad(f, argnums=(0, 1))(x, y, z)
    assert float(v) == 7.0
    np.testing.assert_allclose(np.asarray(gy), [1, 1])


def test_grad_kwargs_pass_through():
    def f(x, scale=1.0):
        return fnp.sum(x) * scale

    np.testing.assert_allclose(np.asarray(funcgrad.grad(f)(fnp.ones(2), scale=3.0)), [3, 3])


def test_value_and_grad_has_aux():
    def f(x):
        y = fnp.sum(x * x)
        return y, {"y": y, "n": 2}

    (v, aux), g = funcgrad.value_and_grad(f, has_aux=True)(fnp.arange(3.0))
    assert float(v) == 5.0 and float(aux["y"]) == 5.0 and int(aux["n"]) == 2
    np.testing.assert_allclose(np.asarray(g), [0, 2, 4])
    g, aux = funcgrad.grad(f, has_aux=True)(fnp.arange(3.0))
    np.testing.assert_allclose(np.asarray(g), [0, 2, 4])
    assert float(aux["y"]) == 5.0
    (v, aux), (g0, g1) = funcgrad.value_and_grad(
        lambda a, b: (fnp.sum(a * b), a), argnums=(0, 1), has_aux=True)(fnp.ones(2), fnp.ones(2))
    assert float(v) == 2.0 and aux.shape == (2,)
    np.testing.assert_allclose(np.asarray(g0), [1, 1])
    np.testing.assert_allclose(np.asarray(g1), [1, 1])


def test_grad_pytrees():
    Params = collections.namedtuple("Params", "w b")

    def loss(p, x):
        return fnp.sum((x @ p["layer"].w + p["layer"].b) ** 2) + fnp.sum(p["extra"][0])

    params = {"layer": Params(fnp.ones((3, 2)), fnp.zeros(2)), "extra": [fnp.ones(4), None]}
    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    g = funcgrad.grad(loss)(params, x)
    assert isinstance(g["layer"], Params) and g["extra"][1] is None
    h = x @ np.ones((3, 2), np.float32)
    np.testing.assert_allclose(np.asarray(g["layer"].w), x.T @ (2 * h), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(g["layer"].b), (2 * h).sum(0), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(g["extra"][0]), np.ones(4))


def test_grad_unused_input_and_constant_output():
    g = funcgrad.grad(lambda x, y: fnp.sum(y) * 2.0)(fnp.ones(3), fnp.ones(2))
    assert g.shape == (3,) and g.dtype == F32 and not np.asarray(g).any()
    g = funcgrad.grad(lambda x: fnp.float32(4.0))(fnp.ones((2, 2)))
    assert g.shape == (2, 2) and not np.asarray(g).any()
    g = funcgrad.grad(lambda x: fnp.sum(x.astype(fnp.int32)).astype(fnp.float32))(fnp.ones(2))
    assert not np.asarray(g).any()


def test_grad_allow_int():
    g = funcgrad.grad(lambda x, n: fnp.sum(x) * 2.0, argnums=(0, 1), allow_int=True)(
        fnp.ones(2), fnp.int32(3))
    np.testing.assert_allclose(np.asarray(g[0]), [2, 2])
    assert not np.asarray(g[1]).any()


def test_grad_closure_over_arrays():
    w = fnp.arange(3.0)
    g = funcgrad.grad(lambda x: fnp.sum(w * x))(fnp.ones(3))
    np.testing.assert_allclose(np.asarray(g), [0, 1, 2])


def test_grad_of_grad():
    f = lambda x: x ** 3
    assert float(funcgrad.grad(funcgrad.grad(f))(2.0)) == 12.0
    assert float(funcgrad.grad(funcgrad.grad(funcgrad.grad(f)))(2.0)) == 6.0
    d2 = funcgrad.grad(funcgrad.grad(fnp.sin))(np.float64(0.7))
    np.testing.assert_allclose(float(d2), -np.sin(0.7), rtol=1e-14)
    # grad of a function of grad, with arrays and two arguments
    def loss(w, x):
        return fnp.sum(fnp.tanh(x @ w) ** 2)

    def gnorm(w, x):
        g = funcgrad.grad(loss)(w, x)
        return fnp.sum(g * g)

    rng = np.random.default_rng(0)
    w, x = rng.standard_normal((3, 2)), rng.standard_normal((4, 3))
    check_grads(gnorm, (w, x), order=1)
    check_grads(loss, (w, x), order=3, atol=1e-5, rtol=1e-4)  # 3rd-order differences


def test_jvp_of_grad_and_grad_of_jvp():
    f = lambda x: fnp.sum(fnp.sin(x) * x)
    x = np.array([0.3, -1.2])
    # Hessian-vector product two ways
    v = np.array([1.0, 2.0])
    _, hv1 = funcgrad.jvp(funcgrad.grad(f), (x,), (v,))
    hv2 = funcgrad.grad(lambda y: funcgrad.jvp(f, (y,), (v,))[1])(x)
    hess_diag = 2 * np.cos(x) - x * np.sin(x)
    np.testing.assert_allclose(np.asarray(hv1), hess_diag * v, rtol=1e-14)
    np.testing.assert_allclose(np.asarray(hv2), hess_diag * v, rtol=1e-14)


# ---------------------------------------------------------------------------------------------
# vjp / jvp
# ---------------------------------------------------------------------------------------------

def test_vjp():
    x = np.array([1.0, 2.0, 3.0])
    y, f_vjp = funcgrad.vjp(lambda a: a * a, x)
    np.testing.assert_allclose(np.asarray(y), x * x)
    (ct,) = f_vjp(np.ones(3))
    np.testing.assert_allclose(np.asarray(ct), 2 * x)
    out, f_vjp = funcgrad.vjp(lambda a, b: {"s": a * b, "d": [a - b]}, x, 2 * x)
    np.testing.assert_allclose(np.asarray(out["d"][0]), -x)
    ca, cb = f_vjp({"s": np.ones(3), "d": [np.full(3, 2.0)]})
    np.testing.assert_allclose(np.asarray(ca), 2 * x + 2)
    np.testing.assert_allclose(np.asarray(cb), x - 2)
    y, f_vjp, aux = funcgrad.vjp(lambda a: (fnp.sum(a), a * 3), x, has_aux=True)
    np.testing.assert_allclose(np.asarray(aux), 3 * x)
    np.testing.assert_allclose(np.asarray(f_vjp(np.float64(2.0))[0]), [2, 2, 2])
    # vjp_fn can be called several times
    np.testing.assert_allclose(np.asarray(f_vjp(np.float64(1.0))[0]), [1, 1, 1])


def test_jvp():
    x = np.array([0.5, 1.0])
    y, t = funcgrad.jvp(fnp.exp, (x,), (np.ones(2),))
    np.testing.assert_allclose(np.asarray(t), np.exp(x), rtol=1e-15)
    (a, b), (ta, tb) = funcgrad.jvp(lambda u, v: (u * v, u + v), (x, 2 * x), (np.ones(2),
                                                                                np.zeros(2)))
    np.testing.assert_allclose(np.asarray(ta), 2 * x)
    np.testing.assert_allclose(np.asarray(tb), [1, 1])
    np.testing.assert_allclose(np.asarray(a), 2 * x * x)
    np.testing.assert_allclose(np.asarray(b), 3 * x)
    y, t = funcgrad.jvp(lambda d: d["a"] ** 2, ({"a": x},), ({"a": np.ones(2)},))
    np.testing.assert_allclose(np.asarray(y), x * x)
    np.testing.assert_allclose(np.asarray(t), 2 * x)
    y, t, aux = funcgrad.jvp(lambda u: (u * 2.0, {"u": u}), [x], [x], has_aux=True)
    np.testing.assert_allclose(np.asarray(t), 2 * x)
    np.testing.assert_allclose(np.asarray(aux["u"]), x)
    y, t = funcgrad.jvp(lambda u: fnp.float32(1.0), (x,), (x,))  # output independent of u
    assert float(t) == 0.0 and float(y) == 1.0
    y, t = funcgrad.jvp(lambda u, n: u * n, (x, np.int32(3)), (x, np.int32(0)))  # int primal
    np.testing.assert_allclose(np.asarray(t), 3 * x)


def test_linearize():
    y, f_jvp = funcgrad.linearize(fnp.sin, np.float64(0.3))
    np.testing.assert_allclose(float(y), np.sin(0.3), rtol=1e-15)
    np.testing.assert_allclose(float(f_jvp(np.float64(2.0))), 2 * np.cos(0.3), rtol=1e-15)


def test_stop_gradient():
    def f(x):
        return fnp.sum(x * lax.stop_gradient(x))

    x = fnp.arange(3.0)
    np.testing.assert_allclose(np.asarray(funcgrad.grad(f)(x)), [0, 1, 2])
    g = funcgrad.grad(lambda x: funcgrad.stop_gradient(x) ** 2 + x)(2.0)
    assert float(g) == 1.0
    tree = funcgrad.stop_gradient({"a": x, "b": [x * 2]})
    np.testing.assert_allclose(np.asarray(tree["b"][0]), [0, 2, 4])
    _, t = funcgrad.jvp(lambda u: lax.stop_gradient(u) * u, (np.float64(3.0),),
                        (np.float64(1.0),))
    assert float(t) == 3.0
    # second order through stop_gradient
    assert float(funcgrad.grad(funcgrad.grad(lambda u: lax.stop_gradient(u) * u ** 2))(2.0)) \
        == 4.0


# ---------------------------------------------------------------------------------------------
# errors, like JAX's
# ---------------------------------------------------------------------------------------------

def test_grad_non_scalar_output():
    with pytest.raises(TypeError, match="scalar") as e:
        funcgrad.grad(lambda x: x * 2.0)(fnp.ones(3))
    assert "(3,)" in str(e.value)
    with pytest.raises(TypeError, match="scalar"):
        funcgrad.grad(lambda x: [fnp.sum(x), fnp.sum(x)])(fnp.ones(3))
    with pytest.raises(TypeError, match="scalar"):
        funcgrad.value_and_grad(lambda x: x.reshape(1, 1))(1.0)
    with pytest.raises(TypeError, match="float|real"):
        funcgrad.grad(lambda x: fnp.sum(x).astype(fnp.int32))(fnp.ones(3))


def test_grad_integer_input():
    with pytest.raises(TypeError, match="int32") as e:
        funcgrad.grad(lambda x: fnp.sum(x) * 1.0)(fnp.arange(3))
    assert "float" in str(e.value)
    with pytest.raises(TypeError, match="int32"):
        funcgrad.grad(lambda x: x * 1.0)(3)
    with pytest.raises(TypeError):
        funcgrad.grad(lambda x, y: fnp.sum(x * y), argnums=1)(fnp.ones(2), np.arange(2))
    with pytest.raises(TypeError):
        funcgrad.grad(lambda p: p["a"] * 1.0)({"a": np.int64(2)})
    with pytest.raises(TypeError):
        funcgrad.grad(lambda x: fnp.sum(x) * 1.0)(np.array([True]))


def test_grad_bad_argnums_and_aux():
    with pytest.raises((TypeError, ValueError)):
        funcgrad.grad(lambda x: x, argnums=1)(1.0)
    with pytest.raises(TypeError, match="pair|aux"):
        funcgrad.grad(lambda x: x, has_aux=True)(1.0)


def test_jvp_mismatched_tangents():
    x = np.ones(3)
    with pytest.raises((TypeError, ValueError), match="shape") as e:
        funcgrad.jvp(fnp.sin, (x,), (np.ones(2),))
    assert "3" in str(e.value) and "2" in str(e.value)
    with pytest.raises((TypeError, ValueError), match="structure"):
        funcgrad.jvp(lambda a, b: a * b, (x, x), (x,))
    with pytest.raises((TypeError, ValueError), match="structure"):
        funcgrad.jvp(lambda d: d["a"], ({"a": x},), ({"b": x},))
    with pytest.raises((TypeError, ValueError), match="dtype"):
        funcgrad.jvp(fnp.sin, (x,), (np.ones(3, np.float32),))
    with pytest.raises(TypeError, match="tuple|list"):
        funcgrad.jvp(fnp.sin, x, x)


def test_vjp_mismatched_cotangents():
    _, f_vjp = funcgrad.vjp(lambda a: a * 2.0, np.ones(3))
    with pytest.raises((TypeError, ValueError), match="shape"):
        f_vjp(np.ones(2))
    _, f_vjp = funcgrad.vjp(lambda a: (a, a), np.ones(3))
    with pytest.raises((TypeError, ValueError), match="structure"):
        f_vjp(np.ones(3))


# ---------------------------------------------------------------------------------------------
# printed expressions
# ---------------------------------------------------------------------------------------------

def _loss(w, x):
    h = fnp.tanh(x @ w)  # LOSS-LINE-1
    return fnp.sum(h * h)  # LOSS-LINE-2


def test_make_jaxpr_grad_shows_forward_and_backward_with_call_sites():
    w, x = fnp.ones((3, 2)), fnp.ones((4, 3))
    closed = funcgrad.make_jaxpr(funcgrad.grad(_loss))(w, x)
    typecheck_expr(closed.expr)
    text = str(closed)
    line1, line2 = lineno_of("LOSS-LINE-1"), lineno_of("LOSS-LINE-2")
    rows = text.splitlines()
    assert rows[0].startswith("{ lambda") and rows[-1].strip().startswith("in (")
    assert "a:f32[3,2]" in rows[0] and "b:f32[4,3]" in rows[0]

    def row(*needles):
        hits = [r for r in rows if all(n in r for n in needles)]
        assert hits, (needles, text)
        return hits

    # forward equations with the user's lines
    row("dot_general", f"test_ad.py:{line1}")
    fwd_tanh = row("= tanh", f"test_ad.py:{line1}")
    assert all("backward" not in r for r in fwd_tanh)
    row("reduce_sum", f"test_ad.py:{line2}")
    # backward equations point at the forward line they differentiate
    row(f"test_ad.py:{line1} (backward of tanh)")
    row("dot_general", f"test_ad.py:{line1} (backward of dot_general)")
    row(f"test_ad.py:{line2} (backward of mul)")
    row(f"test_ad.py:{line2} (backward of reduce_sum)")
    assert "f32[3,2]" in rows[-2]  # the gradient is the last equation's output
    # the forward pass comes before the backward pass
    first_bwd = next(i for i, r in enumerate(rows) if "backward" in r)
    assert first_bwd > max(i for i, r in enumerate(rows) if "= tanh" in r and "backward" not in r)


def test_make_jaxpr_grad_of_grad():
    closed = funcgrad.make_jaxpr(funcgrad.grad(funcgrad.grad(lambda x: fnp.sin(x) * x)))(1.0)
    typecheck_expr(closed.expr)
    text = str(closed)
    assert "(backward of sin) (backward of cos)" in text or "backward of cos" in text
    assert f"test_ad.py:{lineno_of('funcgrad.grad(funcgrad.grad(lambda x: fnp.sin(x) * x)')}" \
        in text


def test_make_jaxpr_value_and_grad_has_aux_and_consts():
    c = fnp.arange(3.0)
    closed = funcgrad.make_jaxpr(funcgrad.value_and_grad(
        lambda x: (fnp.sum(x * c), x), has_aux=True))(fnp.ones(3))
    typecheck_expr(closed.expr)
    assert len(closed.out_avals) == 3
    assert closed.in_avals[0].shape == (3,)


# ---------------------------------------------------------------------------------------------
# check_grads itself
# ---------------------------------------------------------------------------------------------

def test_check_grads_accepts_python_scalars_and_pytrees():
    check_grads(fnp.sin, (0.5,), order=2)
    check_grads(lambda p, s: fnp.sum(p["w"] * s) ** 2, ({"w": np.ones(3)}, 2.0), order=2)
    check_grads(lambda x, i: x[i] * 2.0, (np.arange(3.0), np.int32(1)), order=2)
    check_grads(lambda x: (x > 0, x * 2.0), (np.ones(2),), order=2)  # bool outputs skipped


def test_check_grads_catches_wrong_rules(monkeypatch):
    from funcgrad import prims
    x = (np.array([0.3, -0.7]),)
    check_grads(lambda t: fnp.sin(t), x, order=2)
    # a wrong vjp rule (-cos): the <vjp(ct), t> = <ct, jvp(t)> identity fails
    monkeypatch.setattr(prims.sin_p, "vjp", lambda ct, t, *, out: (
        prims.neg(prims.mul(ct, prims.bind(prims.cos_p, t))),))
    with pytest.raises(AssertionError, match="transpose"):
        check_grads(lambda t: fnp.sin(t), x, order=1)
    monkeypatch.undo()
    # a wrong second derivative (cos' = +sin) is caught at order 2 only
    monkeypatch.setattr(prims.cos_p, "jvp", lambda ts, xs, *, out: prims.mul(
        ts[0], prims.bind(prims.sin_p, xs[0])))
    monkeypatch.setattr(prims.cos_p, "vjp", lambda ct, t, *, out: (
        prims.mul(ct, prims.bind(prims.sin_p, t)),))
    check_grads(lambda t: fnp.sin(t), x, order=1)
    with pytest.raises(AssertionError):
        check_grads(lambda t: fnp.sin(t), x, order=2)
