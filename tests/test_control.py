"""lax.fori_loop / scan / map / cond / switch / while_loop: against Python loops, under grad,
vmap and jit, errors (JAX's semantics; the loop primitives themselves: test_loops.py)."""
from __future__ import annotations

import doctest

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad
import funcgrad.lax.control_flow
import funcgrad.numpy as fnp
from funcgrad import grad, jit, lax, vmap
from funcgrad.test_util import check_grads


def test_docstring_examples_run():
    result = doctest.testmod(funcgrad.lax.control_flow, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 4 and result.failed == 0


@given(st.integers(-2, 5), st.integers(-2, 6))
def test_fori_loop_matches_python_loop(lo, hi):
    x0 = np.array([1.0, -2.0, 0.5])

    def body(i, c):
        x, s = c
        return x * 0.9 + i, s + fnp.sum(x)
    want_x, want_s = x0, 0.0
    for i in range(lo, hi):
        want_x, want_s = want_x * 0.9 + i, want_s + want_x.sum()
    x, s = lax.fori_loop(lo, hi, body, (x0, 0.0))   # a Python float carry takes f64 here
    np.testing.assert_allclose(np.asarray(x), want_x, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(s), want_s, rtol=1e-12)
    # jit's arguments are arrays (a Python float becomes float32), so give the carry's dtype
    jx, js = jit(lambda c: lax.fori_loop(lo, hi, body, c))((x0, np.float64(0.0)))
    np.testing.assert_allclose(np.asarray(jx), want_x, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(js), want_s, rtol=1e-12)


def test_fori_loop_index_is_int32_and_grad_flows():
    seen = []

    def body(i, x):
        seen.append(i.dtype)
        return fnp.sin(x) * (i + 1)

    def f(x):
        return fnp.sum(lax.fori_loop(0, 3, body, x))
    x = np.array([0.3, -1.2])
    check_grads(f, (x,), order=2)
    assert set(seen) == {np.dtype(np.int32)}
    np.testing.assert_allclose(np.asarray(grad(f)(x)), np.asarray(jit(grad(f))(x)), rtol=1e-12)


def test_scan_matches_python_loop_forward_and_reverse(rng):
    xs = rng.standard_normal((5, 3))
    w = rng.standard_normal((3, 3)) * 0.5

    def step(h, x):
        h = fnp.tanh(h @ w + x)
        return h, fnp.sum(h)
    for reverse in (False, True):
        h, want = np.zeros(3), []
        for x in (xs[::-1] if reverse else xs):
            h = np.tanh(h @ w + x)
            want.append(h.sum())
        if reverse:
            want.reverse()
        carry, ys = lax.scan(step, np.zeros(3), xs, reverse=reverse)
        np.testing.assert_allclose(np.asarray(carry), h, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(ys), want, rtol=1e-12)
        jc, jys = jit(lambda xs: lax.scan(step, np.zeros(3), xs, reverse=reverse))(xs)
        np.testing.assert_allclose(np.asarray(jys), want, rtol=1e-12)


def test_scan_pytrees_length_and_grad(rng):
    xs = {"a": rng.standard_normal((4, 2)), "b": rng.standard_normal(4)}

    def step(c, x):
        c = c * x["b"] + fnp.sum(x["a"])
        return c, (c, x["a"] * c)
    carry, (cs, scaled) = lax.scan(step, 1.0, xs)
    assert cs.shape == (4,) and scaled.shape == (4, 2)
    _, ys = lax.scan(lambda c, _: (c + 1.0, c), 0.0, None, length=3)
    assert np.asarray(ys).tolist() == [0.0, 1.0, 2.0]

    def loss(a):
        return lax.scan(lambda c, x: (c * x + fnp.sum(a), c), 1.0, fnp.asarray(xs["b"]))[0]
    check_grads(loss, (rng.standard_normal(2),), order=1)


def test_scan_zero_length_and_vmap(rng):
    carry, ys = lax.scan(lambda c, x: (c + x.sum(), x * 2.0), 1.5, np.zeros((0, 3)))
    assert float(carry) == 1.5 and ys.shape == (0, 3) and carry.dtype == np.float64
    with pytest.raises(TypeError, match=r"(?s)scan: the carry f returns.*f32\[\].*f64\[3\]"):
        lax.scan(lambda c, x: (c + x, x * 2.0), 1.5, np.zeros((0, 3)))   # as in JAX
    xs = rng.standard_normal((4, 6, 2))   # vmap over the 6 axis of a 4-step scan

    def total(xs):
        return lax.scan(lambda c, x: (c + x, c), np.zeros(2), xs)[0]
    got = vmap(total, in_axes=1)(xs)
    np.testing.assert_allclose(np.asarray(got), xs.sum(0), rtol=1e-12)


def test_map_stacks():
    out = lax.map(lambda r: (r.sum(), r * 2.0), np.arange(6.0).reshape(3, 2))
    assert np.asarray(out[0]).tolist() == [1.0, 5.0, 9.0]
    assert out[1].shape == (3, 2)


def test_cond_concrete_runs_one_branch_traced_selects():
    calls = []

    def t(x):
        calls.append("t")
        return x * 2.0

    def f(x):
        calls.append("f")
        return -x
    assert float(lax.cond(True, t, f, 3.0)) == 6.0 and calls == ["t"]
    g = jit(lambda x: lax.cond(x > 0, t, f, x))
    assert float(g(3.0)) == 6.0 and float(g(-2.0)) == 2.0
    assert np.asarray(vmap(lambda x: lax.cond(x > 0, t, f, x))(np.array([1.0, -1.0]))).tolist() \
        == [2.0, 1.0]
    d = grad(lambda x: lax.cond(x > 0, lambda v: v * v, lambda v: 3.0 * v, x))
    assert float(d(2.0)) == 4.0 and float(d(-2.0)) == 3.0


def test_errors_name_the_line():
    with pytest.raises(TypeError, match=r"(?s)fori_loop: body_fun's result must have the same.*"
                                        r"f32\[2\].*f32\[3\].*test_control.py"):
        lax.fori_loop(0, 2, lambda i, x: fnp.concatenate([x, x])[:3], np.zeros(2, np.float32))
    with pytest.raises(TypeError, match=r"(?s)scan: the carry f returns.*test_control.py"):
        lax.scan(lambda c, x: (c.astype(np.int32), x), np.float32(0.0), np.zeros(3))
    with pytest.raises(ValueError, match="disagree on the number of iterations"):
        lax.scan(lambda c, x: (c, x), 0.0, (np.zeros(3), np.zeros(4)))
    with pytest.raises(TypeError, match="fori_loop: upper must be an integer scalar"):
        lax.fori_loop(0, 2.5, lambda i, v: v, 0.0)
    # a traced trip count runs as a while loop (JAX's semantics)
    assert float(jit(lambda n, x: lax.fori_loop(0, n, lambda i, v: v + 1.0, x))(3, 0.0)) == 3.0
    with pytest.raises(TypeError, match="(?s)cond: true_fun and false_fun.*test_control.py"):
        jit(lambda x: lax.cond(x > 0, lambda v: v, lambda v: fnp.stack([v, v]), x))(1.0)
    with pytest.raises(TypeError, match="cond: pred must be a boolean or number scalar"):
        lax.cond(np.array([True, False]), lambda: 1.0, lambda: 2.0)
    # a static trip count is fine under jit
    f = jit(lambda n, x: lax.fori_loop(0, n, lambda i, v: v + 1.0, x), static_argnums=0)
    assert float(f(3, 0.0)) == 3.0


def test_k_training_steps_in_one_jitted_call_equal_k_calls(rng):
    from funcgrad import nn, optim
    params = {"w": rng.standard_normal((5, 3)).astype(np.float32) * 0.3,
              "b": np.zeros(3, np.float32)}
    x = rng.standard_normal((8, 5)).astype(np.float32)
    y = rng.integers(0, 3, 8).astype(np.int32)
    opt = optim.adam(1e-2)

    def one(p, s):
        def loss(p):
            return fnp.mean(nn.softmax_cross_entropy_with_integer_labels(x @ p["w"] + p["b"], y))
        val, g = funcgrad.value_and_grad(loss)(p)
        u, s = opt.update(g, s, p)
        return optim.apply_updates(p, u), s, val

    step = jit(one)
    p1, s1 = params, opt.init(params)
    for _ in range(4):
        p1, s1, v1 = step(p1, s1)
    four = jit(lambda p, s: lax.fori_loop(0, 4, lambda i, c: one(c[0], c[1]),
                                          (p, s, np.float32(0))))
    p2, s2, v2 = four(params, opt.init(params))
    for a, b in zip(funcgrad.tree_util.tree_leaves((p1, s1, v1)),
                    funcgrad.tree_util.tree_leaves((p2, s2, v2))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_switch_concrete_traced_grad_vmap_and_out_of_range():
    fs = [lambda x: x + 1.0, lambda x: x * x, lambda x: fnp.sin(x)]
    x = np.float64(0.7)
    for i in range(3):
        want = float(fs[i](x))
        assert float(lax.switch(i, fs, x)) == want
        assert np.isclose(float(jit(lambda i, x: lax.switch(i, fs, x))(np.int32(i), x)), want)
    d = grad(lambda x, i: lax.switch(i, fs, x))
    assert np.isclose(float(jit(d)(x, np.int32(1))), 2 * 0.7)
    assert np.isclose(float(jit(d)(x, np.int32(2))), np.cos(0.7))
    got = vmap(lambda i, x: lax.switch(i, fs, x))(np.array([0, 1, 2], np.int32),
                                                  np.array([1.0, 2.0, 0.0]))
    np.testing.assert_allclose(np.asarray(got), [2.0, 4.0, 0.0])
    # as in JAX, an index out of range is clamped (concrete or traced)
    assert float(lax.switch(3, fs, x)) == float(fs[2](x))
    assert np.isclose(float(jit(lambda i, x: lax.switch(i, fs, x))(np.int32(5), x)),
                      np.sin(0.7))
    assert float(jit(lambda i, x: lax.switch(i, fs, x))(np.int32(-4), x)) == 1.7
    with pytest.raises(TypeError, match="switch: every branch must return the same"):
        jit(lambda i, x: lax.switch(i, [lambda v: v, lambda v: fnp.stack([v, v])], x))(
            np.int32(0), x)


def test_while_loop_eager_traced_condition_forward_mode_and_reverse_error():
    assert float(lax.while_loop(lambda x: x < 100.0, lambda x: x * 3.0, fnp.asarray(1.0))) == 243.0

    def f(x):
        return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 2.0), (0, x))[1]
    assert float(jit(f)(1.5)) == 12.0
    assert float(funcgrad.jvp(f, (1.5,), (1.0,))[1]) == 8.0
    # reverse mode raises, as in JAX, naming the loop's line
    with pytest.raises(funcgrad.core.FuncgradError,
                       match="(?s)Reverse-mode differentiation does not work for lax.while_loop"
                             ".*test_control.py"):
        grad(f)(1.5)
    # a traced condition
    assert float(jit(lambda x: lax.while_loop(lambda v: v < 10.0, lambda v: v * 2.0, x))(1.0)) \
        == 16.0
    with pytest.raises(TypeError, match="while_loop: cond_fun must return a boolean scalar"):
        lax.while_loop(lambda v: v, lambda v: v, np.ones(2))
