"""The loop primitives (scan, while, cond): size independent of the trip count, one run per
group under jit, float64 gradients, vmap, jit's passes, nesting, associative_scan, CUDA."""
from __future__ import annotations

import doctest

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad
import funcgrad.lax.associative
import funcgrad.cuda as fcuda
import funcgrad.prims.loops
import funcgrad.numpy as fnp
from funcgrad import grad, jit, jvp, lax, make_jaxpr, vmap
from funcgrad.test_util import check_grads
from funcgrad.api.config_states import check_indices


def _rnn_loss(w, xs):
    def step(h, x):
        h = fnp.tanh(h * w + x)
        return h, fnp.sum(h * h)
    h, ys = lax.scan(step, fnp.zeros(w.shape, w.dtype), xs)
    return fnp.sum(h) + fnp.sum(ys)


def _rnn_loss_np(w, xs):
    h, total = np.zeros_like(w), 0.0
    for x in xs:
        h = np.tanh(h * w + x)
        total += np.sum(h * h)
    return h.sum() + total


def _rnn_grad_np(w, xs):
    """Reverse-mode by hand: the same recurrence, differentiated step by step."""
    hs = [np.zeros_like(w)]
    for x in xs:
        hs.append(np.tanh(hs[-1] * w + x))
    g, dh = np.zeros_like(w), np.ones_like(w)     # d loss / d h_n from sum(h)
    for t in range(len(xs), 0, -1):
        dh = dh + 2 * hs[t]                        # from sum(h_t^2)
        pre = dh * (1 - hs[t] ** 2)
        g += pre * hs[t - 1]
        dh = pre * w
    return g


def test_10000_step_scan_is_no_larger_than_10_steps_under_jit_and_grad(rng):
    w = np.array([0.5, -0.3, 0.8])
    sizes, traced = {}, []

    def body_counting(w, xs):
        traced.append(1)
        return _rnn_loss(w, xs)
    for n in (10, 10_000):
        xs = rng.standard_normal((n, 3)) * 0.1
        f, df = jit(body_counting), jit(grad(body_counting))
        sizes[n] = (len(make_jaxpr(_rnn_loss)(w, xs).eqns),
                    len(make_jaxpr(grad(_rnn_loss))(w, xs).eqns),
                    len(f.lower(w, xs).expr.eqns), len(df.lower(w, xs).expr.eqns))
        np.testing.assert_allclose(float(f(w, xs)), _rnn_loss_np(w, xs), rtol=1e-12)
        np.testing.assert_allclose(np.asarray(df(w, xs)), _rnn_grad_np(w, xs), rtol=1e-10)
    assert sizes[10_000] == sizes[10], sizes
    assert len(traced) == 4   # each jitted function traced its body once per length


def test_value_and_grad_of_a_scan_runs_one_forward_and_one_backward_scan(rng):
    # both results (the final carry and the stacked ys) receive cotangents: one reverse scan
    # takes them together, and the forward that stacks the residuals also gives the value
    w = np.array([0.5, -0.3, 0.8])
    xs = rng.standard_normal((7, 3)) * 0.1
    vg = jit(funcgrad.value_and_grad(_rnn_loss))
    loops = [e.params["rec"].name for e in vg.lower(w, xs).expr.eqns
             if e.prim is funcgrad.prims.loops.loop_run_p]
    assert sorted(loops) == ["bwd(scan)", "fwd(scan)"], loops
    # xs is not differentiated: the reverse scan stacks no cotangent for it (w's and h's only)
    bwd = [e.params["rec"] for e in vg.lower(w, xs).expr.eqns
           if e.prim is funcgrad.prims.loops.loop_run_p and e.params["rec"].name == "bwd(scan)"]
    assert [a.shape for a in bwd[0].out_avals] == [(3,), (3,)]
    # the forward stacks tanh's output for the derivative: the reverse scan does not run the
    # body's forward again (no tanh, no h * w there)
    bwd_body = bwd[0].bodies[0][0]
    assert not [e for e in bwd_body.eqns if e.prim.name == "tanh"], bwd_body
    traced = make_jaxpr(funcgrad.value_and_grad(_rnn_loss))(w, xs)
    groups = {id(e.params["rec"]) for e in traced.eqns if e.prim is funcgrad.prims.loops.scan_p}
    assert len(groups) == 2
    val, g = vg(w, xs)
    np.testing.assert_allclose(float(val), _rnn_loss_np(w, xs), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(g), _rnn_grad_np(w, xs), rtol=1e-10)
    # only the ys receive a cotangent: no zeros are stacked for the carry's, same gradient
    def ys_only(w):
        return fnp.sum(lax.scan(lambda h, x: (fnp.tanh(h * w + x), h * h),
                                fnp.zeros(3, w.dtype), xs)[1])
    check_grads(ys_only, (w,), order=2)
    check_grads(jit(ys_only), (w,), order=1)


@given(argnums=st.sampled_from([0, 1, 2, (0, 2), (1, 2)]),
       used=st.sampled_from(["h", "ys", "both"]))
def test_scan_grads_of_some_operands_equal_the_full_gradient(argnums, used):
    # the reverse scan computes cotangents only for operands the differentiated inputs reach;
    # each one equals the same entry of the gradient over every argument
    rng = np.random.default_rng(3)
    w, b, xs = rng.standard_normal(3) * 0.5, rng.standard_normal(3), rng.standard_normal((4, 3))

    def f(w, b, xs):
        def step(c, x):
            h, k = c
            h = fnp.tanh(h * w + x * b) + k.astype(h.dtype) * 0.1
            return (h, k + 1), (h * b, fnp.sum(h * x))
        (h, _), (hb, s) = lax.scan(step, (fnp.zeros(3, w.dtype), np.int32(0)), xs)
        return {"h": fnp.sum(h * h), "ys": fnp.sum(hb) + fnp.sum(s),
                "both": fnp.sum(h) + fnp.sum(hb * s[:, None])}[used]
    full = funcgrad.grad(f, argnums=(0, 1, 2))(w, b, xs)
    nums = argnums if isinstance(argnums, tuple) else (argnums,)
    for g in (funcgrad.grad(f, argnums=nums), jit(funcgrad.grad(f, argnums=nums))):
        for i, got in zip(nums, g(w, b, xs)):
            np.testing.assert_allclose(np.asarray(got), np.asarray(full[i]), rtol=1e-12,
                                       atol=1e-14)
    check_grads(lambda *a: f(*[a[nums.index(i)] if i in nums else v
                               for i, v in enumerate((w, b, xs))]),
                tuple((w, b, xs)[i] for i in nums), order=2)


def test_grad_of_a_cond_with_two_results_runs_one_backward_cond():
    def f(x, y):
        a, b, k = lax.cond(fnp.sum(x) > 0,
                           lambda x, y: (fnp.sin(x) * y, x * x, np.int32(1)),
                           lambda x, y: (x + y, fnp.cos(y), np.int32(2)), x, y)
        return fnp.sum(a) + fnp.sum(b * b) + k
    x, y = np.array([0.3, 0.5]), np.array([1.2, -0.4])
    for xx in (x, -x):   # each branch
        check_grads(f, (xx, y), order=2)
        check_grads(jit(f), (xx, y), order=1)
    lo = jit(funcgrad.grad(f, argnums=(0, 1))).lower(x, y)
    conds = [e.params["rec"].name for e in lo.expr.eqns if e.prim is funcgrad.prims.loops.loop_run_p]
    assert sorted(conds) == ["bwd(cond)", "cond"], conds
    np.testing.assert_allclose(np.asarray(funcgrad.grad(f, argnums=1)(x, y)), np.sin(x))


def test_each_loop_group_runs_once_under_jit_and_eagerly(monkeypatch):
    runs = []
    real = funcgrad.prims.loops.run_np
    monkeypatch.setattr(funcgrad.prims.loops, "run_np", lambda ex, bufs: runs.append(ex.kind)
                        or real(ex, bufs))
    from funcgrad.backends.cpu import loops as cpu_loops   # jit on the CPU runs compiled bodies
    real_cpu = cpu_loops.run
    monkeypatch.setattr(cpu_loops, "run", lambda ex, bufs, fuse: runs.append(ex.kind)
                        or real_cpu(ex, bufs, fuse))

    def f(x):   # 3 results (2 carries, 1 stacked y), all used
        (a, b), ys = lax.scan(lambda c, t: ((c[0] + t, c[1] * 2.0), c[0] * t), (x, x), fnp.ones(4))
        return a + b + fnp.sum(ys)
    want = float(f(np.float64(1.0)))
    assert runs == ["scan"]
    runs.clear()
    assert float(jit(f)(np.float64(1.0))) == want and runs == ["scan"]
    text = str(jit(f).lower(np.float64(1.0)).expr)
    assert text.count("loop_run[") == 1 and text.count("loop_out[") == 2


def test_jit_passes_keep_used_loops_drop_unused_and_keep_effects(capsys):
    def f(x):
        c, ys = lax.scan(lambda c, t: (c + t, c * t), x, fnp.arange(3.0))
        unused = lax.fori_loop(0, 5, lambda i, v: v * 2.0, x)   # noqa: F841 - DCE removes it
        return c
    expr = jit(f).lower(np.float64(1.0)).expr
    assert [e.prim.name for e in expr.eqns].count("loop_run") == 1
    assert float(jit(f)(np.float64(1.0))) == 4.0

    def g(x):
        def step(c, t):
            funcgrad.debug.print("step {t}", t=t)
            return c + t, None
        lax.scan(step, x, fnp.arange(2.0))   # results unused: the prints still happen
        return x * 2.0
    assert float(jit(g)(np.float64(1.0))) == 2.0
    assert capsys.readouterr().out.split() == ["step", "0.0", "step", "1.0"]
    # constant operands are not folded away either
    assert np.asarray(jit(lambda: lax.scan(lambda c, t: (c + t, c), 0.0, np.arange(3.0)))()[1]) \
        .tolist() == [0.0, 0.0, 1.0]


@given(n=st.sampled_from([0, 1, 3]), shape=st.sampled_from([(), (1,), (0,), (2, 3)]),
       reverse=st.booleans())
def test_scan_grads_float64_hypothesis_shapes(n, shape, reverse):
    rng = np.random.default_rng(n * 7 + len(shape))
    w = rng.standard_normal(shape) * 0.5
    xs = rng.standard_normal((n,) + shape)
    h0 = rng.standard_normal(shape)

    def f(w, xs, h0):
        def step(c, x):
            h, k = c
            h = fnp.sin(h * w) + x * k.astype(h.dtype) * 0.3
            return (h, k + 1), (h * x, fnp.sum(h))
        (h, k), (hx, s) = lax.scan(step, (h0, np.int32(1)), xs, reverse=reverse)
        return fnp.sum(h) + fnp.sum(hx) * 0.5 + 0.1 * fnp.sum(s * s)
    check_grads(f, (w, xs, h0), order=2)
    check_grads(jit(f), (w, xs, h0), order=1)
    # against the Python loop
    h, k, total = h0, 1, 0.0
    for x in (xs[::-1] if reverse else xs):
        h = np.sin(h * w) + x * k * 0.3
        k += 1
        total += 0.5 * np.sum(h * x) + 0.1 * np.sum(h) ** 2
    np.testing.assert_allclose(float(f(w, xs, h0)), np.sum(h) + total, rtol=1e-12, atol=1e-12)


def test_fori_cond_switch_while_grads_float64():
    x = np.array([0.3, -0.8])
    check_grads(lambda x: lax.fori_loop(1, 4, lambda i, v: fnp.cos(v) * i, x), (x,), order=2)
    check_grads(lambda x: lax.cond(x[0] > 0, lambda v: v ** 3, lambda v: fnp.exp(v), x), (x,),
                order=2)
    fs = [lambda v: v * v, lambda v: fnp.sin(v), lambda v: -v]
    for i in range(3):
        check_grads(jit(lambda x, i=i: lax.switch(np.int32(i) + 0 * x[0].astype(np.int32), fs,
                                                      x)), (x,), order=2)

    def w(x):
        return lax.while_loop(lambda c: c[0] < 4, lambda c: (c[0] + 1, fnp.sin(c[1]) * 1.5),
                              (0, x))[1]
    check_grads(w, (x,), order=2, modes=("fwd",))
    with pytest.raises(funcgrad.core.FuncgradError, match="(?s)while_loop.*test_loops.py"):
        grad(lambda x: fnp.sum(w(x)))(x)
    # fori_loop with traced bounds is a while loop: forward mode only
    t = jvp(lambda x: jit(lambda n, x: lax.fori_loop(0, n, lambda i, v: v * 2.0, x))(3, x),
            (x,), (np.ones(2),))[1]
    np.testing.assert_allclose(np.asarray(t), [8.0, 8.0])


def test_grad_of_a_jitted_loop_called_twice():
    # the jitted expression (one loop record) is replayed twice inside one differentiated trace
    f = jit(lambda x: lax.scan(lambda c, t: (c * x + t, c), x, fnp.arange(3.0))[0])
    check_grads(lambda x: f(x) + f(2.0 * x), (np.float64(0.5),), order=1)
    c = jit(lambda x: lax.cond(x > 0, lambda v: v * v, lambda v: -v, x))
    check_grads(lambda x: c(x) + c(-3.0 * x), (np.float64(0.5),), order=1)


def test_nested_scan_grad_and_closure_over_outer_values():
    def f(a, xs):
        def outer(c, row):
            inner, _ = lax.scan(lambda d, v: (d * a + v, None), c, row)
            return inner, inner
        return lax.scan(outer, np.float64(0.0), xs)   # (no weak types inside traces)
    a, xs = np.float64(0.7), np.arange(6.0).reshape(2, 3) / 5
    c, ys = f(a, xs)
    d = 0.0
    want = []
    for row in xs:
        for v in row:
            d = d * a + v
        want.append(d)
    np.testing.assert_allclose(np.asarray(ys), want, rtol=1e-12)
    check_grads(lambda a, xs: f(a, xs)[0], (a, xs), order=2)


def test_vmap_scan_while_cond(rng):
    a, xs = rng.standard_normal(4), rng.standard_normal((3, 5))

    def f(a, xs):   # init unbatched, becomes batched through a: the carry's fixpoint
        return lax.scan(lambda c, x: (c * a + x, c), 0.0, xs)
    c, ys = vmap(f, in_axes=(0, None))(a, xs[:, 0])
    for i in range(4):
        ci, yi = f(a[i], xs[:, 0])
        np.testing.assert_allclose(np.asarray(c[i]), np.asarray(ci), rtol=1e-12)
        np.testing.assert_allclose(np.asarray(ys[i]), np.asarray(yi), rtol=1e-12)
    c2, _ = vmap(f, in_axes=(None, 1))(a[0], xs)
    np.testing.assert_allclose(np.asarray(c2), [np.asarray(f(a[0], xs[:, j])[0])
                                                for j in range(5)], rtol=1e-12)

    def steps(n):   # a batched predicate: runs while any member runs, as in JAX
        return lax.while_loop(lambda c: c[0] > 1, lambda c: (
            fnp.where(c[0] % 2 == 0, c[0] // 2, 3 * c[0] + 1), c[1] + 1), (n, 0))[1]
    ns = np.array([1, 2, 3, 6, 27], np.int32)
    assert np.asarray(jit(vmap(steps))(ns)).tolist() == [0, 1, 7, 8, 111]
    g = vmap(lambda x, i: lax.switch(i, [fnp.sin, fnp.cos, fnp.tanh], x))
    xv, iv = np.array([0.1, 0.2, 0.3]), np.array([2, 0, 1], np.int32)
    np.testing.assert_allclose(np.asarray(g(xv, iv)), [np.tanh(0.1), np.sin(0.2), np.cos(0.3)])
    h = vmap(lambda p, x: lax.cond(p, lambda v: v * 2.0, lambda v: -v, x), in_axes=(None, 0))
    assert np.asarray(jit(h)(True, np.array([1.0, 2.0]))).tolist() == [2.0, 4.0]
    # per-example gradients through a scan
    gs = vmap(grad(lambda w, x: _rnn_loss(w, x)), in_axes=(None, 0))(
        np.array([0.5, -0.3]), rng.standard_normal((3, 4, 2)) * 0.1)
    assert gs.shape == (3, 2)


def test_cond_runs_one_branch_under_jit():
    table = np.array([1.0, 2.0])

    def f(x):
        return lax.cond(x > 0, lambda v: v * 2.0,
                        lambda v: fnp.asarray(table)[(v * 0).astype(np.int32) + 3], x)
    # the false branch would index out of bounds: only the true one runs
    assert float(jit(f)(np.float64(2.0))) == 4.0
    with check_indices(), pytest.raises(IndexError, match="(?s)out of bounds.*test_loops.py"):
        jit(f)(np.float64(-2.0))   # (JAX's default clamps the index)


def test_map_batch_size_and_errors():
    xs = np.arange(14.0).reshape(7, 2)
    for bs in (None, 1, 3, 7, 10):
        out = lax.map(lambda r: (r.sum(), r * 2.0), xs, batch_size=bs)
        np.testing.assert_allclose(np.asarray(out[0]), xs.sum(1))
        np.testing.assert_allclose(np.asarray(out[1]), xs * 2.0)
    with pytest.raises(TypeError, match="(?s)scan: length must be a concrete.*test_loops.py"):
        jit(lambda n: lax.scan(lambda c, _: (c, c), 0.0, None, length=n))(3)
    with pytest.raises(TypeError, match="scan: f must return a pair"):
        lax.scan(lambda c, x: c, 0.0, np.zeros(3))
    with pytest.raises(TypeError, match="while_loop: body_fun's result must have the same"):
        lax.while_loop(lambda v: v < 3.0, lambda v: fnp.stack([v, v]), 0.0)


@given(n=st.integers(0, 9), reverse=st.booleans(), axis=st.sampled_from([0, 1, -1]))
def test_associative_scan_matches_cumulative_ops(n, reverse, axis):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((n, n + 1) if axis != 0 else (n, 2))
    ax = axis % 2
    got = lax.associative_scan(fnp.add, x, reverse=reverse, axis=axis)
    want = np.flip(np.cumsum(np.flip(x, ax), ax), ax) if reverse else np.cumsum(x, ax)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)

    # a non-commutative operator on a pytree: composing affine maps v -> a v + b
    def compose(f, g):
        return {"a": g["a"] * f["a"], "b": g["a"] * f["b"] + g["b"]}
    a, b = rng.standard_normal(n), rng.standard_normal(n)
    out = lax.associative_scan(compose, {"a": a, "b": b})
    va, vb, want_b = 1.0, 0.0, []
    for ai, bi in zip(a, b):
        va, vb = ai * va, ai * vb + bi
        want_b.append(vb)
    np.testing.assert_allclose(np.asarray(out["b"]), want_b, rtol=1e-10, atol=1e-12)


def test_associative_scan_grad_and_docstrings():
    check_grads(lambda x: lax.associative_scan(fnp.multiply, x), (np.linspace(0.5, 1.5, 5),),
                order=2)
    for mod in (funcgrad.lax.associative, funcgrad.lax.control_flow):
        res = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
        assert res.attempted >= 1 and res.failed == 0


# ---------------------------------------------------------------------------------------------
# CUDA (numba's simulator in CI, the GPU where there is one): tiny shapes
# ---------------------------------------------------------------------------------------------

cuda = pytest.mark.skipif(not fcuda.usable(), reason="no GPU; NUMBA_ENABLE_CUDASIM=1 simulates")


def _cu(x):
    return funcgrad.device_put(np.asarray(x), "cuda")


@pytest.mark.cuda
@cuda
def test_cuda_scan_eager_jit_planned_and_grad(fast_barriers, rng):
    w = np.array([0.5, -0.3], np.float32)
    xs = (rng.standard_normal((3, 2)) * 0.5).astype(np.float32)
    with funcgrad.default_device("cpu"):   # the reference: numpy operands alone go to "cuda"
        want, want_g = _rnn_loss(w, xs), grad(_rnn_loss)(w, xs)
    np.testing.assert_allclose(float(_rnn_loss(_cu(w), _cu(xs))), float(want), rtol=1e-5)
    f, df = jit(_rnn_loss), jit(grad(_rnn_loss))
    for _ in range(3):   # first call, recorded call, planned call
        np.testing.assert_allclose(float(f(_cu(w), _cu(xs))), float(want), rtol=1e-5)
        g = df(_cu(w), _cu(xs))
        assert g.device == "cuda"
        np.testing.assert_allclose(np.asarray(g), np.asarray(want_g), rtol=1e-5, atol=1e-6)
    r = jit(lambda xs: lax.scan(lambda c, x: (c + x, c * x), np.float32(1.0), xs,
                                reverse=True))(_cu(xs[:, 0]))
    c, y = 1.0, []
    for x in xs[::-1, 0]:
        y.append(c * x)
        c += x
    np.testing.assert_allclose(np.asarray(r[1]), y[::-1], rtol=1e-5)


@pytest.mark.cuda
@cuda
def test_cuda_while_and_cond(fast_barriers):
    g = jit(lambda x: lax.while_loop(lambda v: fnp.sum(v) < 10.0, lambda v: v * 2.0, x))
    for start, want in [(1.0, 8.0), (3.0, 6.0), (1.0, 8.0), (0.5, 8.0)]:   # trip counts vary
        assert np.asarray(g(_cu(np.full(2, start, np.float32)))).tolist() == [want, want]
    c = jit(lambda x: lax.cond(fnp.sum(x) > 0, lambda v: v * 2.0, lambda v: -v, x))
    for s in (1.0, -1.0, 1.0, -2.0):
        out = c(_cu(np.full(2, s, np.float32)))
        assert out.device == "cuda" and np.asarray(out).tolist() == [2 * s if s > 0 else -s] * 2
    steps = vmap(lambda n: lax.while_loop(lambda c: c[0] > 1, lambda c: (
        fnp.where(c[0] % 2 == 0, c[0] // 2, 3 * c[0] + 1), c[1] + 1), (n, 0))[1])
    assert np.asarray(jit(steps)(_cu(np.array([1, 6, 7], np.int32)))).tolist() == [0, 8, 16]


@pytest.mark.cuda
@cuda
def test_cuda_loop_state_swaps_nests_and_reverses(fast_barriers, rng):
    # a carry that swaps two values, a scan, a cond and a while_loop nested in a scan, a
    # reversed scan with ys, a zero-length scan: planned (and on a GPU captured) calls equal
    # numpy's (loops keep their state in step buffers)
    def f(a, b, xs):
        def outer(c, x):
            (p, q), inner = lax.scan(lambda cc, r: ((cc[1], cc[0] + r), cc[0] * r), c, x)
            q = lax.cond(fnp.sum(x) > 0, lambda v: v * 2.0, lambda v: v - 1.0, q)
            p = lax.while_loop(lambda v: fnp.abs(v) < 4.0, lambda v: v * 3.0 + 0.5, p)
            return (p, q), fnp.sum(inner)
        (p, q), ys = lax.scan(outer, (a, b), xs, reverse=True)
        z, _ = lax.scan(lambda c, x: (c + x, x), a, xs[:0, 0])
        return p, q, ys, z
    a, b = np.float32(0.5), np.float32(-1.5)
    xs = rng.standard_normal((3, 4)).astype(np.float32)
    want = [np.asarray(v) for v in f(a, b, xs)]
    jf = jit(f)
    for _ in range(3):
        got = jf(_cu(a), _cu(b), _cu(xs))
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=1e-6)


@pytest.mark.cuda
@cuda
def test_cuda_graph_size_independent_of_trip_count(fast_barriers):
    # on a real GPU a scan is one conditional node of the step's CUDA graph: the same number of
    # nodes for 10 and 10,000 steps (the simulator runs the iterations on the host)
    def step(n):
        def f(x):
            c, _ = lax.scan(lambda c, _: (c * 0.999 + 1.0, None), x, None, length=n)
            return c
        return jit(f)

    x = _cu(np.zeros(4, np.float32))
    sizes = {}
    for n in ((10, 10_000) if not fcuda.simulator_active() else (10, 40)):
        f = step(n)
        for _ in range(3):
            out = np.asarray(f(x))
        want = (1 - 0.999 ** n) / (1 - 0.999)
        np.testing.assert_allclose(out, np.full(4, want, np.float32), rtol=1e-4)
        plan = f.lower(x).compile()
        if not fcuda.simulator_active():   # a real GPU: the step was captured, loop included
            from cuda.bindings import driver as cb
            assert plan.graphs is not None and plan.graph_error is None, plan.graph_error
            (e,) = plan.graphs.entries.values()
            sizes[n] = int(cb.cuGraphGetNodes(e.graph, 0)[2])
    if not fcuda.simulator_active():
        assert sizes[10] == sizes[10_000], sizes


@pytest.mark.cuda
@cuda
def test_cuda_eager_loops_equal_numpy(fast_barriers):
    # outside a plan's graph a long scan and a while_loop run as graphs of their own on a real
    # GPU (the host runs the iterations under the simulator); results equal numpy's
    xs = np.linspace(-1.0, 1.0, 24).astype(np.float32)
    c, ys = lax.scan(lambda c, x: (c * 0.5 + x, c * x), np.float32(0.25), _cu(xs))
    cw, yw = 0.25, []
    for x in xs:
        yw.append(cw * x)
        cw = cw * 0.5 + x
    np.testing.assert_allclose(float(c), cw, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(ys), yw, rtol=1e-5, atol=1e-7)
    v = lax.while_loop(lambda v: fnp.sum(v) < 100.0, lambda v: v * 1.5 + 1.0,
                       _cu(np.ones(3, np.float32)))
    w = np.ones(3, np.float32)
    while w.sum() < 100.0:
        w = w * np.float32(1.5) + np.float32(1.0)
    np.testing.assert_allclose(np.asarray(v), w, rtol=1e-6)
