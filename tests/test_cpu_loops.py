"""Loops in CPU jit plans (funcgrad/backends/cpu/loops.py): bodies run as compiled programs and
give the numpy path's results (eager, and plans that run loops through loops.run_np)."""
from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import grad, jit, lax
from funcgrad.api.config_states import check_indices
from funcgrad.backends.cpu import loops as cpu_loops, plan as cpu_plan, steps as cpu_steps
from funcgrad.backends.cpu.plan import CpuPlan
from funcgrad.prims.loops import EXEC_PRIMS, loop_run_effect_p, loop_run_p
from funcgrad.tree_util import tree_leaves

# numpy: the plan's numpy program (bodies too); fused: kernels from the first call, results
# the numpy interpreter's bit for bit; inexact: exp/tanh/... fused too (an ulp or two off)
MODES = {"numpy": {"FUNCGRAD_CPU_FUSE": "0"},
         "fused": {"FUNCGRAD_CPU_FUSE": "1", "FUNCGRAD_CPU_FUSE_AFTER": "0"},
         "inexact": {"FUNCGRAD_CPU_FUSE": "1", "FUNCGRAD_CPU_FUSE_AFTER": "0",
                     "FUNCGRAD_CPU_EXACT": "0"}}


@pytest.fixture(params=list(MODES))
def mode(request, monkeypatch):
    for k, v in MODES[request.param].items():
        monkeypatch.setenv(k, v)
    return request.param


@contextlib.contextmanager
def numpy_loops():
    """Plans built inside run their loops through loops.run_np (the engine before)."""
    # jit(f) shares f's plans (as JAX's cache does): clear them where the engine changes
    funcgrad.clear_caches()
    saved = {p: cpu_steps.STEP_BUILDERS.pop(p) for p in EXEC_PRIMS}
    try:
        yield
    finally:
        cpu_steps.STEP_BUILDERS.update(saved)
        funcgrad.clear_caches()


def loop_recs(program):
    """The ExecRecs of the loops a CPU program runs, nested loops included."""
    out = []
    for s in program.steps:
        if s.eqn.prim in (loop_run_p, loop_run_effect_p):
            ex = s.eqn.params["rec"]
            out.append(ex)
            for bs in ex.device_cache.get("cpu", {}).values():
                for b in bs:
                    out += loop_recs(b.program)
    return out


def check(f, *args, mode="fused", n_loops=1):
    """jit(f) on the CPU equals eager f and a plan running its loops through numpy: bit for
    bit unless `mode` fuses inexact ops; the loops ran compiled bodies."""
    want = tree_leaves(f(*args))
    with numpy_loops():
        before = tree_leaves(jit(f)(*args))
    jf = jit(f)
    for _ in range(2):   # the second call reuses the plan and the body programs
        got = tree_leaves(jf(*args))
        for a, b, c in zip(got, want, before):
            a, b, c = np.asarray(a), np.asarray(b), np.asarray(c)
            assert a.dtype == b.dtype and a.shape == b.shape
            if mode == "inexact":
                tol = 1e-12 if a.dtype == np.float64 else 2e-5
                np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
            else:
                np.testing.assert_array_equal(a, b)
                np.testing.assert_array_equal(a, c)
    plan = jf.lower(*args).compile()
    assert isinstance(plan, CpuPlan)
    recs = loop_recs(plan.program)
    assert len(recs) >= n_loops
    for ex in recs:   # the compiled path ran: each loop keeps its body programs
        assert not ex.effectful
        bodies = ex.device_cache["cpu"][(mode != "numpy", mode != "inexact")]
        assert len(bodies) == len(ex.bodies)
        assert all(isinstance(b, cpu_loops.Body) for b in bodies)
        if ex.kind == "scan":   # its iterations run in one generated loop
            assert bodies[0].loop is not None
        if ex.kind == "while":
            assert bodies.loop is not None
    return plan


def _rnn(w, h, xs):
    def cell(h, x):
        h = fnp.tanh(h @ w + x)
        return h, fnp.sum(h)
    h, ys = lax.scan(cell, h, xs)
    return h, ys


def _rnn_data(rng, n, dtype=np.float32):
    w = (rng.standard_normal((8, 8)) / 3).astype(dtype)
    return w, np.zeros((4, 8), dtype), rng.standard_normal((n, 4, 8)).astype(dtype)


def test_rnn_scan_carry_and_ys(mode, rng):
    plan = check(_rnn, *_rnn_data(rng, 7), mode=mode)
    if mode != "numpy":
        (ex,) = loop_recs(plan.program)
        (body,) = ex.device_cache["cpu"][(True, mode != "inexact")]
        assert body.program.kernels >= 1 and plan.fused


def test_scan_reverse_ys_pytrees_and_no_xs(mode, rng):
    xs = rng.standard_normal((5, 3))
    ws = rng.standard_normal((5,)).astype(np.float32)

    def f(c0, xs, ws):
        def step(c, t):
            x, w = t
            a, b = c
            return (a * 0.5 + x, b + w), {"p": a * x, "q": w * 2.0}
        return lax.scan(step, (c0, np.float32(0.0)), (xs, ws), reverse=True)
    check(f, rng.standard_normal(3), xs, ws, mode=mode)
    check(lambda c: lax.scan(lambda c, _: (c * 1.5 + 1.0, c), c, None, length=4), 2.0,
          mode=mode)
    check(lambda xs: lax.map(lambda r: (r.sum(), r * 2.0), xs), xs, mode=mode)   # no carry
    check(lambda xs: lax.scan(lambda c, x: (c + x, None), 0.0, xs)[0], ws, mode=mode)  # no ys


def test_zero_length_scan(mode):
    def f(c, xs):
        return lax.scan(lambda c, x: (fnp.sin(c + x), c * x), c, xs)
    c, ys = jit(f)(np.ones(3), np.zeros((0, 3)))
    assert np.asarray(c).tolist() == [1.0, 1.0, 1.0] and np.asarray(ys).shape == (0, 3)
    check(f, np.ones(3), np.zeros((0, 3)), mode=mode)


def test_nested_scan_with_closures(mode, rng):
    w = rng.standard_normal((3, 3))

    def f(x, xs):
        def outer(c, row):
            def inner(d, v):
                return fnp.tanh(d @ w + v * c), fnp.sum(d)
            d, s = lax.scan(inner, c, fnp.stack([row, row * 2.0]))
            return d + c, s
        return lax.scan(outer, x, xs)
    plan = check(f, rng.standard_normal(3), rng.standard_normal((4, 3)), mode=mode, n_loops=2)
    assert len(loop_recs(plan.program)) == 2   # the inner loop ran compiled too


def test_while_loop_traced_condition(mode):
    def f(x, limit):
        return lax.while_loop(lambda c: c[0] < limit, lambda c: (c[0] * 2.0 + 1.0, c[1] + 1),
                              (x, np.int32(0)))
    check(f, np.float32(0.5), np.float32(100.0), mode=mode)
    check(f, np.float32(500.0), np.float32(100.0), mode=mode)   # no iteration
    out = jit(f)(np.float32(0.5), np.float32(100.0))
    assert int(out[1]) == 7


def test_fori_loop_traced_and_static_bounds(mode, rng):
    x = rng.standard_normal((2, 3))

    def traced(lo, hi, x):
        return lax.fori_loop(lo, hi, lambda i, v: fnp.cos(v) * i + v, x)
    check(traced, np.int32(1), np.int32(6), x, mode=mode)
    check(traced, np.int32(4), np.int32(2), x, mode=mode)   # empty range
    check(lambda x: lax.fori_loop(0, 5, lambda i, v: fnp.cos(v) * i + v, x), x, mode=mode)


def test_cond_and_switch(mode, rng):
    x = rng.standard_normal(4)

    def c(p, x):
        return lax.cond(p > 0, lambda v: fnp.exp(v) * 2.0, lambda v: -v @ v + v, x)
    check(c, np.float64(1.0), x, mode=mode)
    check(c, np.float64(-1.0), x, mode=mode)
    fs = [lambda v: v + 1.0, lambda v: v * v, fnp.sin]
    for i in (-3, 0, 1, 2, 7):   # clamped, as in JAX
        check(lambda i, v: lax.switch(i, fs, v), np.int32(i), x, mode=mode)


def test_grad_of_a_scan(mode, rng):
    w, h, xs = _rnn_data(rng, 6, np.float64)

    def loss(w, h, xs):
        h, ys = _rnn(w, h, xs)
        return fnp.sum(h * h) + fnp.sum(ys)
    check(grad(loss), w, h, xs, mode=mode, n_loops=2)
    check(funcgrad.value_and_grad(loss, argnums=(0, 2)), w, h, xs, mode=mode, n_loops=2)


def test_effectful_bodies_keep_the_numpy_path(capsys):
    def f(x):
        def step(c, t):
            funcgrad.debug.print("t={t}", t=t)
            return c + t, c
        return lax.scan(step, x, fnp.arange(3.0))
    jf = jit(f)
    c, ys = jf(np.float64(1.0))
    assert float(c) == 4.0 and np.asarray(ys).tolist() == [1.0, 1.0, 2.0]
    assert capsys.readouterr().out.split() == ["t=0.0", "t=1.0", "t=2.0"]
    (ex,) = loop_recs(jf.lower(np.float64(1.0)).compile().program)
    assert ex.effectful and "cpu" not in ex.device_cache


def test_errors_in_a_body_name_the_users_line(mode):
    with check_indices():   # out-of-range gathers raise (JAX's default clamps them)
        _errors_in_a_body_name_the_users_line()


def _errors_in_a_body_name_the_users_line():
    table = np.array([1.0, 2.0])

    def body(c, x):
        return c + 1, fnp.asarray(table)[c + x]   # out of bounds from the second step
    line = body.__code__.co_firstlineno + 1
    jf = jit(lambda xs: lax.scan(body, np.int32(0), xs)[1])
    for _ in range(3):   # the first run (kernels compile) and the generated loop after it
        with pytest.raises(IndexError, match=f"(?s)out of bounds.*test_cpu_loops.py:{line}"):
            jf(np.ones(4, np.int32))
    assert np.asarray(jf(np.zeros(2, np.int32) - 1)).tolist() == [2.0, 1.0]

    def wbody(c):
        return c[0] + 1, c[1] + fnp.asarray(table)[c[0]]   # out of bounds at c[0] = 2
    wline = wbody.__code__.co_firstlineno + 1
    jw = jit(lambda n: lax.while_loop(lambda c: c[0] < n, wbody, (np.int32(0), 0.0))[1])
    for _ in range(3):
        with pytest.raises(IndexError, match=f"(?s)out of bounds.*test_cpu_loops.py:{wline}"):
            jw(np.int32(4))
    assert float(jw(np.int32(2))) == 3.0


def test_two_threads_share_a_plan(monkeypatch, rng):
    monkeypatch.setenv("FUNCGRAD_CPU_FUSE_AFTER", "0")
    jf = jit(_rnn)
    data = [_rnn_data(np.random.default_rng(k), 50) for k in range(2)]
    want = [tree_leaves(_rnn(*d)) for d in data]
    jf(*data[0])
    errors = []

    def work(k):
        try:
            for _ in range(20):
                for a, b in zip(tree_leaves(jf(*data[k])), want[k]):
                    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        except Exception as e:   # noqa: BLE001 (reported below)
            errors.append(e)
    ts = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


def test_a_kernel_numba_refuses_falls_back_to_the_numpy_body(monkeypatch, rng):
    monkeypatch.setenv("FUNCGRAD_CPU_FUSE_AFTER", "0")
    refused = type("TypingError", (Exception,), {"__module__": "numba.core.errors"})

    class Refusing(cpu_plan.Program):   # numba refuses every fused body program
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            if self.kernels:
                def fn(args, bufs):
                    raise refused("cannot type this")
                self.fn = fn
    monkeypatch.setattr(cpu_loops, "Program", Refusing)
    args = _rnn_data(rng, 3)
    with pytest.warns(RuntimeWarning, match="scan body failed to compile"):
        got = jit(_rnn)(*args)
    for a, b in zip(tree_leaves(got), tree_leaves(_rnn(*args))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_strided_rows_integer_carries_and_loops_in_branches(mode, rng):
    m = rng.standard_normal((3, 5)).astype(np.float32)

    def f(m, k):
        # the rows of a transpose (a strided view), an int and a bool carry, a product of the
        # outer plan's arena as a loop constant, a loop inside a branch
        w = m @ m.T
        def step(c, x):
            s, n, flip = c
            return (fnp.tanh(s @ w + x[:3]), n + 2, ~flip), fnp.where(flip, x, -x)
        init = (fnp.zeros(3, np.float32), np.int32(1), np.bool_(False))
        (s, n, flip), ys = lax.scan(step, init, fnp.transpose(fnp.concatenate([m, m])))
        inner = lax.cond(k > 0, lambda v: lax.fori_loop(0, 3, lambda i, a: a * 0.5 + i, v),
                         lambda v: v, s)
        return s, n, flip, ys, inner, w
    check(f, m, np.int32(1), mode=mode, n_loops=3)
    check(f, m, np.int32(0), mode=mode)
