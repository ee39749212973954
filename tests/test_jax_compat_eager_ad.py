"""Eager autodiff with concrete primals, as JAX's: grad / vjp / jvp outside jit let Python
branch and loop on values (bool(), int(), operator.index(), .item()), to any order and under
jacfwd / jacrev / hessian, while jit and vmap stay abstract (ConcretizationError), float()
refuses as in JAX, and values Python read are not computed twice."""
from __future__ import annotations

import numpy as np
import pytest

import funcgrad as jax
import funcgrad.numpy as jnp
from funcgrad import lax


def close(a, b, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


def piecewise(x):
    """x^3 for x > 1, sin(x) for 0 < x <= 1, else 2x (a Python if on values)."""
    if x > 1:
        return x ** 3
    elif x > 0:
        return jnp.sin(x)
    return 2.0 * x


# d/dx and d2/dx2 of piecewise at 2.0, 0.5 and -1.0
CASES = [(2.0, 12.0, 12.0), (0.5, np.cos(0.5), -np.sin(0.5)), (-1.0, 2.0, 0.0)]


@pytest.mark.parametrize("x,d1,d2", CASES)
def test_grad_and_second_order_through_if(x, d1, d2):
    close(jax.grad(piecewise)(x), d1)
    close(jax.grad(jax.grad(piecewise))(x), d2)
    close(jax.hessian(piecewise)(x), d2)
    close(jax.jacfwd(jax.jacrev(piecewise))(x), d2)
    close(jax.grad(jax.grad(jax.grad(piecewise)))(2.0), 6.0)


@pytest.mark.parametrize("x,d1,d2", CASES)
def test_vjp_jvp_linearize_value_and_grad_through_if(x, d1, d2):
    y, f_vjp = jax.vjp(piecewise, x)
    close(f_vjp(jnp.float32(1.0))[0], d1)
    y2, t = jax.jvp(piecewise, (x,), (jnp.float32(3.0),))
    close(t, 3 * d1)
    close(y, y2)
    _, f_jvp = jax.linearize(piecewise, x)
    close(f_jvp(jnp.float32(1.0)), d1)
    v, g = jax.value_and_grad(piecewise)(x)
    close(v, y)
    close(g, d1)
    close(jax.jacfwd(piecewise)(x), d1)
    close(jax.jacrev(piecewise)(x), d1)


def test_branch_on_an_intermediate_and_on_a_reduction():
    def f(w):
        h = jnp.tanh(w)
        if jnp.sum(h) > 0:          # a reduction
            return jnp.sum(h ** 2)
        return jnp.sum(h)
    w = jnp.array([0.3, 0.4])
    t = np.tanh([0.3, 0.4])
    close(jax.grad(f)(w), 2 * t * (1 - t ** 2))
    close(jax.grad(f)(-w), 1 - t ** 2)


def test_python_while_loop_on_a_value_newton_sqrt():
    # Newton's iteration for sqrt(a), stopped by a Python while on the residual; the
    # derivative of the unrolled iterations is (nearly) d sqrt(a)/da = 1 / (2 sqrt(a))
    def newton_sqrt(a):
        x = a
        while jnp.abs(x * x - a) > 1e-6:
            x = 0.5 * (x + a / x)
        return x

    for a in (2.0, 9.0):
        close(newton_sqrt(jnp.float32(a)), np.sqrt(a))
        close(jax.grad(newton_sqrt)(a), 0.5 / np.sqrt(a), rtol=1e-4)


def test_int_and_index_of_values():
    def f(x, n):
        total = 0.0
        for i in range(int(n)):          # int() of a concrete value
            total = total + x[i] * (i + 1)
        return total + x[jnp.argmax(x)]  # operator.index() of a concrete value

    x = jnp.array([1.0, 3.0, 2.0, 0.5])
    close(jax.grad(f)(x, jnp.int32(3)), [1, 2 + 1, 3, 0])


def test_item_is_a_constant_and_float_refuses_as_jax():
    close(jax.grad(lambda x: x * x.item())(3.0), 3.0)
    with pytest.raises(jax.ConcretizationError, match="derivative"):
        jax.grad(lambda x: float(x) * x)(3.0)
    with pytest.raises(jax.ConcretizationError):
        jax.grad(lambda x: np.asarray(x).sum() * x)(3.0)


def test_inner_derivative_branches_on_the_outer_variable():
    def f(x):
        def g(y):
            return y * x if x > 1 else y + x   # the outer tracer is concrete too
        return jax.grad(g)(x) * x
    close(jax.grad(f)(2.0), 4.0)   # g' = x: d(x * x)/dx
    close(jax.grad(f)(0.5), 1.0)   # g' = 1: d(x)/dx


def test_vmap_of_grad_and_grad_of_vmap():
    f = lambda x: jnp.sin(x) * x
    xs = jnp.array([0.1, 0.7, 2.0])
    close(jax.vmap(jax.grad(f))(xs), np.cos(xs) * xs + np.sin(xs))
    close(jax.grad(lambda v: jax.vmap(f)(v).sum())(xs), np.cos(xs) * xs + np.sin(xs))
    # the if sits outside the vmap: concrete
    g = lambda v: jax.vmap(f)(v).sum() if v[0] > 0 else v.sum()
    close(jax.grad(g)(xs), np.cos(xs) * xs + np.sin(xs))
    close(jax.grad(g)(-xs), [1, 1, 1])
    # under vmap the values are abstract, as in JAX
    with pytest.raises(jax.ConcretizationError):
        jax.vmap(jax.grad(piecewise))(xs)


def test_jit_stays_abstract():
    with pytest.raises(jax.ConcretizationError):
        jax.jit(jax.grad(piecewise))(2.0)
    with pytest.raises(jax.ConcretizationError):
        jax.grad(jax.jit(piecewise))(2.0)
    # a jitted function without Python branches inside an eager grad that branches on it
    h = jax.jit(lambda x: x ** 2)
    close(jax.grad(lambda x: h(x) if h(x) > 1 else -h(x))(2.0), 4.0)
    close(jax.grad(lambda x: h(x) if h(x) > 1 else -h(x))(0.5), -1.0)
    # a closure over a jit tracer is abstract
    with pytest.raises(jax.ConcretizationError):
        jax.jit(lambda y: jax.grad(lambda x: x * y if y > 0 else x)(1.0))(2.0)
    # a jitted grad of a branch-free function is unaffected
    close(jax.jit(jax.grad(lambda x: jnp.sin(x)))(0.0), 1.0)


def test_lax_control_flow_and_custom_rules_inside_eager_grad():
    @jax.custom_vjp
    def clip_grad(x):
        return x

    clip_grad.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -1.0, 1.0),))

    def f(x):
        y = lax.cond(x > 0, lambda v: v * 3.0, lambda v: v * 5.0, x)
        z = clip_grad(y)
        if z > 4:
            return 2.0 * z
        return z
    close(jax.grad(f)(2.0), 3.0)            # y = 6 > 4: clip(2 -> 1) * 3
    close(jax.grad(f)(1.0), 3.0)            # y = 3: clip(1) * 3
    close(jax.grad(f)(-1.0), 5.0)

    def loop(x):
        s = lax.fori_loop(0, 3, lambda i, c: c * x, 1.0)   # x^3
        return s if s > 1 else -s
    close(jax.grad(loop)(2.0), 12.0)
    close(jax.grad(loop)(0.5), -0.75)


def test_read_values_are_not_computed_again():
    calls = []

    def host_sin(v):
        calls.append(1)
        return np.sin(np.asarray(v))

    def f(x):
        s = jax.pure_callback(host_sin, jax.ShapeDtypeStruct((), np.float32), x)
        return x * 2.0 if s > 0 else x * 3.0

    close(jax.grad(f)(1.0), 2.0)
    close(jax.grad(f)(-1.0), 3.0)
    assert len(calls) == 2     # one per grad: the forward reuses the value the if read


def test_unread_values_cost_nothing_more(monkeypatch):
    # without Python control flow no value is computed while tracing
    from funcgrad import core
    seen = []
    monkeypatch.setattr(core, "_eval_detached", lambda e, vals: seen.append(e) or None)
    close(jax.grad(lambda x: jnp.sin(x) * x)(0.0), 0.0)
    assert seen == []


def test_value_dependent_shapes_in_eager_grad():
    x = jnp.array([0.0, 2.0, 0.0, 3.0])
    close(jax.grad(lambda v: (v[jnp.nonzero(v)] ** 2).sum())(x), [0, 4, 0, 6])
    close(jax.grad(lambda v: jnp.unique(v).sum())(jnp.array([1.0, 2.0, 2.0])), [1, 1, 0])
    w = jnp.array([0.5, 1.0, 2.0])
    idx = jnp.array([0, 2, 2])
    close(jax.grad(lambda w: (jnp.bincount(idx, weights=w) ** 2).sum())(w), [1, 6, 6])
    with pytest.raises(jax.ConcretizationError, match="size="):
        jax.jit(jax.grad(lambda v: v[jnp.nonzero(v)].sum()))(x)


def test_training_loop_with_python_early_stopping():
    # the pattern of the programs: a Python if on the loss inside the loss function
    def loss(w, x, y):
        err = jnp.mean((x @ w - y) ** 2)
        if err < 1e-3:     # e.g. skip a regularizer once converged
            return err
        return err + 1e-2 * jnp.sum(w ** 2)

    rs = np.random.RandomState(0)
    x = rs.standard_normal((16, 3)).astype(np.float32)
    y = x @ np.array([1.0, -2.0, 0.5], np.float32)
    w = jnp.zeros(3)
    for _ in range(200):
        w = w - 0.1 * jax.grad(loss)(w, x, y)
    close(w, [1.0, -2.0, 0.5], rtol=0.05, atol=0.05)
