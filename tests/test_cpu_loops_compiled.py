"""Compiled loop drivers (funcgrad/backends/cpu/drivers.py): scans and while_loops whose bodies
are fused kernels run as one njit call and give the numpy interpreter's results bit for bit."""
from __future__ import annotations

import contextlib
import os
import threading

import numpy as np
import pytest
from hypothesis import given, strategies as st

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import jit, lax
from funcgrad.backends.cpu import drivers as cpu_drivers, steps as cpu_steps
from funcgrad.prims.loops import EXEC_PRIMS, loop_run_p
from funcgrad.tree_util import tree_leaves


@contextlib.contextmanager
def env(**kw):
    """os.environ with `kw` set (None: unset) inside the block."""
    old = {k: os.environ.get(k) for k in kw}
    try:
        for k, v in kw.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


FUSED = {"FUNCGRAD_CPU_FUSE": "1", "FUNCGRAD_CPU_FUSE_AFTER": "0"}


@contextlib.contextmanager
def numpy_loops():
    """Plans built inside run their loops through loops.run_np, equation by equation."""
    # jit(f) shares f's plans (as JAX's cache does): clear them where the engine changes
    funcgrad.clear_caches()
    saved = {p: cpu_steps.STEP_BUILDERS.pop(p) for p in EXEC_PRIMS}
    try:
        yield
    finally:
        cpu_steps.STEP_BUILDERS.update(saved)
        funcgrad.clear_caches()


def loops_of(program, exact=True):
    """[(ExecRec, Bodies)] of the fused loops a CPU program ran, nested ones included."""
    out = []
    for s in program.steps:
        if s.eqn.prim is loop_run_p:
            ex = s.eqn.params["rec"]
            bs = ex.device_cache.get("cpu", {}).get((True, exact))
            if bs is not None:
                out.append((ex, bs))
                for b in bs:
                    out += loops_of(b.program, exact)
    return out


def drivers_of(jf, *args, exact=True):
    """The compiled drivers (None for a loop without one) of jf's plan for args."""
    return [bs.driver for _, bs in loops_of(jf.lower(*args).compile().program, exact)]


def same(got, want):
    for a, b in zip(tree_leaves(got), tree_leaves(want), strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def check(f, *args, drivers=1, calls=2):
    """jit(f) with fused loops equals eager f (the numpy interpreter) and a plan that runs its
    loops through numpy, bit for bit, and its loops ran `drivers` compiled drivers."""
    want = f(*args)
    with numpy_loops(), env(**FUSED):
        same(jit(f)(*args), want)
    with env(**FUSED):
        jf = jit(f)
        for _ in range(calls):
            same(jf(*args), want)
        ds = drivers_of(jf, *args)
    ran = [d for d in ds if d is not None and d.runs >= calls]
    assert len(ran) == drivers, [d and d.runs for d in ds]
    return ds


def test_fori_loop_of_a_scalar_body_is_one_driver_call():
    f = jit(lambda x: lax.fori_loop(0, 1000, lambda i, x: x * np.float32(0.999) + i, x))
    with env(**FUSED):
        (d,) = check(f, np.float32(1.0))
        assert d.kind == "scan" and "kernel0(" in d.source and "for t in range(n)" in d.source
        before = d.runs
        f(np.float32(2.0))
        assert d.runs == before + 1


def test_scan_carries_ys_reverse_and_passthroughs(rng):
    xs = rng.standard_normal(7).astype(np.float32)
    ws = rng.integers(-5, 5, (7, 3)).astype(np.int32)

    def f(c, xs, ws):
        def step(c, t):
            a, b, _, v = c
            x, w = t
            # a swap of carries, a literal carry, an x row as a y, an array carry
            return (b, a * 0.5 + x, np.int32(3), v * 2 + w), (a * x, x, w - v)
        return lax.scan(step, c, (xs, ws), reverse=True)
    c = (np.float32(1.0), np.float32(-2.0), np.int32(0), np.arange(3, dtype=np.int32))
    check(f, c, xs, ws)
    # carries that only trade places (each copied before either is replaced)
    def swap(c, xs):
        return lax.scan(lambda c, x: ((c[1], c[0]), c[0] * x), c, xs)
    check(swap, (np.float32(1.0), np.float32(2.0)), xs)
    # ys only, carry only, a scan over length alone
    check(lambda xs: lax.map(lambda x: x * x + 1.0, xs), xs)
    check(lambda xs: lax.scan(lambda c, x: (c + x, None), np.float32(0), xs)[0], xs)
    check(lambda c: lax.scan(lambda c, _: (c * 1.5 + 1.0, c), c, None, length=5), 2.0)


def test_array_bodies_with_broadcasts(rng):
    xs = rng.standard_normal((6, 4, 3))
    bias = rng.standard_normal(3)

    def f(h, s, xs):
        def step(c, x):
            h, s = c
            h = fnp.maximum(h * s + x + bias, 0.0)   # a broadcast scalar carry and row
            return (h, s * 0.9), fnp.where(h > 0.5, h, -h)
        return lax.scan(step, (h, s), xs)
    check(f, np.zeros((4, 3)), np.float64(1.0), xs)


def test_while_loops():
    def f(x, limit):
        return lax.while_loop(lambda c: c[0] < limit, lambda c: (c[0] * 2.0 + 1.0, c[1] + 1),
                              (x, np.int32(0)))
    for x in (0.5, 500.0):   # seven iterations, none
        (d,) = check(f, np.float32(x), np.float32(100.0))
        assert d.kind == "while"
    assert int(jit(f)(np.float32(0.5), np.float32(100.0))[1]) == 7
    # traced fori_loop bounds are a while_loop; an empty range
    def g(lo, hi, v):
        return lax.fori_loop(lo, hi, lambda i, v: v * 3 + i, v)
    check(g, np.int32(1), np.int32(9), np.arange(4))
    check(g, np.int32(5), np.int32(2), np.arange(4))


def test_rows_at_traced_indices(rng):
    table = rng.standard_normal((6, 3))
    vec = rng.standard_normal(6).astype(np.float32)

    def f(x):   # a row and an element of closed-over arrays at the loop index, a reshape
        def body(i, c):
            a, s = c
            row = fnp.asarray(table)[5 - i]
            return a * 0.5 + row.reshape(3, 1).reshape(3), s + fnp.asarray(vec)[i - 6]
        return lax.fori_loop(0, 6, body, (x, np.float32(0)))
    check(f, np.ones(3))

    def g(xs, k):   # dynamic_slice's one-row slice at a clamped index, an index carry
        def step(c, x):
            j, acc = c
            r = lax.dynamic_index_in_dim(xs, j, keepdims=False)
            return (j + k, acc + r * x), (r[0], xs[1:4:2, 1:])   # static slices
        return lax.scan(step, (np.int32(0), np.zeros(3)), xs[:, 0])
    check(g, table, np.int32(2))


_SUMS = [((7,), (0,)), ((3, 5), (1,)), ((2, 3, 4), (2,)), ((4, 3), (0,)), ((2, 3, 4), (0, 1)),
         ((300,), (0,)), ((2, 1000), (1,))]


@given(case=st.sampled_from(_SUMS), dtype=st.sampled_from(["float32", "float64", "int8",
                                                           "int64", "uint16"]),
       n=st.integers(0, 3), seed=st.integers(0, 2 ** 16))
def test_sums_in_a_body_equal_numpys(case, dtype, n, seed):
    shape, axes = case
    r = np.random.default_rng(seed)
    xs = (r.standard_normal((n,) + shape) * 100).astype(dtype)

    def f(xs):
        def step(c, x):
            s = fnp.sum(x, axis=axes, dtype=x.dtype)
            return c + fnp.sum(x, dtype=x.dtype), (s, fnp.sum(x * x, axis=axes, dtype=x.dtype))
        return lax.scan(step, fnp.zeros((), xs.dtype), xs)
    check(f, xs, calls=1)


@given(case=st.sampled_from(_SUMS[:5]), dtype=st.sampled_from(["int8", "uint32", "bool"]),
       n=st.integers(0, 3), seed=st.integers(0, 2 ** 16))
def test_integer_max_and_min_in_a_body_equal_numpys(case, dtype, n, seed):
    shape, axes = case
    xs = np.random.default_rng(seed).integers(0, 200, (n,) + shape).astype(dtype)

    def f(xs):
        def step(c, x):
            return c + fnp.max(x).astype(np.int32), (fnp.min(x, axis=axes),
                                                    fnp.max(x, axis=axes))
        return lax.scan(step, np.int32(0), xs)
    check(f, xs, calls=1)


def test_a_vmapped_while_loop_is_driven():
    def f(x):   # the batched condition: until every member is done (a boolean max)
        return lax.while_loop(lambda c: c < 10.0, lambda c: c * 1.5 + 0.1, x)
    check(funcgrad.vmap(f), np.arange(5.0) + 0.5)


def test_a_long_while_loop_runs_in_chunks(monkeypatch):
    monkeypatch.setattr(cpu_drivers, "WHILE_CHUNK", 7)   # 100 iterations: 15 calls

    def f(x, v):
        return lax.while_loop(lambda c: c[0] < 100, lambda c: (c[0] + 1, c[1] * 0.5 + c[0]),
                              (x, v))
    (d,) = check(f, np.int32(0), np.arange(3.0))
    assert d.kind == "while"


def test_an_index_out_of_range_is_named_at_the_users_line():
    table = np.array([1.0, 2.0])

    def body(c, x):
        return c + 1, fnp.asarray(table)[c + x]   # out of bounds from the second step
    line = body.__code__.co_firstlineno + 1
    with env(**FUSED):
        jf = jit(lambda xs: lax.scan(body, np.int32(0), xs)[1])
        for _ in range(2):
            with pytest.raises(IndexError, match=f"(?s)index 2 is out of bounds for an axis "
                               f"of size 2.*test_cpu_loops_compiled.py:{line}"):
                jf(np.ones(4, np.int32))
        same(jf(np.zeros(2, np.int32) - 1), np.array([2.0, 1.0]))
        (d,) = drivers_of(jf, np.ones(4, np.int32))
        assert d.runs == 2   # the two runs that raised (the last call is another plan)


_BODIES = {   # dtype kind -> (carry update, y) over a carry c and an x row
    "f": (lambda c, x: c * 0.5 + x, lambda c, x: c - x),
    "i": (lambda c, x: c * 3 + x, lambda c, x: c ^ x),   # integers wrap as in numpy
    "u": (lambda c, x: c * 3 + x, lambda c, x: c & x),
    "b": (lambda c, x: c ^ x, lambda c, x: c & ~x),
}
_DTYPES = ["float32", "float64", "int32", "int64", "uint8", "bool"]


@given(n=st.integers(0, 9), dtype=st.sampled_from(_DTYPES), shape=st.sampled_from([(), (3,)]),
       seed=st.integers(0, 2 ** 16), reverse=st.booleans())
def test_scan_equals_the_interpreter(n, dtype, shape, seed, reverse):
    r = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    upd, out = _BODIES[dt.kind]

    def draw(s):
        if dt.kind == "f":
            return r.standard_normal(s).astype(dt)
        if dt.kind == "b":
            return r.integers(0, 2, s).astype(dt)
        info = np.iinfo(dt)
        return r.integers(info.min, info.max, s, endpoint=True, dtype=dt)
    c0, xs = draw(shape), draw((n,) + shape)

    def f(c, xs):
        def step(c, x):
            a, k = c
            return (upd(a, x), k + 1), out(a, x)
        return lax.scan(step, (c, np.int32(0)), xs, reverse=reverse)
    check(f, c0, xs, calls=1)


@given(lo=st.integers(-3, 3), n=st.integers(0, 6), dtype=st.sampled_from(["float32", "int64"]))
def test_fori_and_while_equal_the_interpreter(lo, n, dtype):
    v = np.arange(3).astype(dtype)
    def static(v):
        return lax.fori_loop(lo, lo + n, lambda i, v: v * 2 - i, v)

    def traced(hi, v):
        return lax.while_loop(lambda c: c[0] < hi, lambda c: (c[0] + 1, c[1] * 2 - c[0]),
                              (np.int32(lo), v))
    check(static, v, calls=1)
    check(traced, np.int32(lo + n), v, calls=1)


def _loss(c, xs):
    def step(c, x):
        a, b = c
        return (a * x + b, b * 0.5 - x), a * b
    (a, b), ys = lax.scan(step, c, xs)
    return fnp.sum(a * b) + fnp.sum(ys * ys)


def test_grad_of_a_compiled_scan_equals_the_uncompiled_one(rng):
    c = (rng.standard_normal(3), rng.standard_normal(3))
    xs = rng.standard_normal((8, 3))
    g = funcgrad.value_and_grad(_loss, argnums=(0, 1))
    want = g(c, xs)
    with env(FUNCGRAD_CPU_FUSE="0"):
        same(jit(g)(c, xs), want)
    ds = check(g, c, xs, drivers=2)   # the forward scan and the reversed scan of its vjp
    assert sorted(d.reverse for d in ds) == [False, True]
    # fori_loop's gradient, through its scan
    h = funcgrad.grad(lambda x: lax.fori_loop(0, 20, lambda i, x: x * 0.9 + x * x * 0.01, x))
    check(h, np.float64(0.3), drivers=2)


def test_uncompilable_bodies_keep_the_python_loop(rng):
    w = rng.standard_normal((3, 3))
    xs = rng.standard_normal((5, 3))

    def product(h, xs):   # a BLAS product
        return lax.scan(lambda h, x: (h @ w + x, fnp.sum(h)), h, xs)
    ds = check(product, np.zeros(3), xs, drivers=0)
    assert ds == [None]

    def inexact(h, xs):   # tanh is numpy's call where results are bit for bit numpy's
        return lax.scan(lambda h, x: (fnp.tanh(h) + x, h), h, xs)
    assert check(inexact, np.zeros(3), xs, drivers=0) == [None]
    with env(FUNCGRAD_CPU_EXACT="0", **FUSED):   # ... and fused, then driven, otherwise
        jf = jit(inexact)
        got = jf(np.zeros(3), xs)
        for a, b in zip(tree_leaves(got), tree_leaves(inexact(np.zeros(3), xs))):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-12)
        (d,) = drivers_of(jf, np.zeros(3), xs, exact=False)
        assert d is not None and d.runs == 1

    def nested(h, xs):   # the outer body runs a loop: only the inner one is driven
        def outer(h, x):
            return lax.fori_loop(0, 3, lambda i, v: v * 0.5 + x, h), h
        return lax.scan(outer, h, xs)
    ds = check(nested, np.zeros(3), xs, drivers=1)
    assert ds[0] is None and ds[1] is not None

    def update(xs):   # a scatter (x.at[i].set)
        return lax.fori_loop(0, 5, lambda i, a: a.at[i].set(fnp.asarray(xs)[i] * 2.0),
                             fnp.zeros((5, 3)))
    assert check(update, xs, drivers=0) == [None]


def test_a_driver_numba_refuses_falls_back(monkeypatch):
    refused = type("TypingError", (Exception,), {"__module__": "numba.core.errors"})

    def fn(self):
        def run(*args):
            raise refused("cannot type this")
        return run
    monkeypatch.setattr(cpu_drivers.Driver, "fn", property(fn))
    def f(x):
        return lax.fori_loop(0, 10, lambda i, x: x * 0.5 + 1.0, x)
    with env(**FUSED):
        jf = jit(f)
        with pytest.warns(RuntimeWarning, match="loop driver failed to compile"):
            got = jf(np.float64(3.0))
        same(got, f(np.float64(3.0)))
        (bs,) = [bs for _, bs in loops_of(jf.lower(np.float64(3.0)).compile().program)]
        assert bs.driver is None
        same(jf(np.float64(3.0)), f(np.float64(3.0)))


def test_two_threads_share_a_driver(rng):
    def f(c, xs):
        return lax.scan(lambda c, x: (c * 0.5 + x, c * x), c, xs)
    data = [(rng.standard_normal(4), rng.standard_normal((200, 4))) for _ in range(2)]
    want = [f(*d) for d in data]
    with env(**FUSED):
        jf = jit(f)
        jf(*data[0])
    errors = []

    def work(k):
        try:
            for _ in range(30):
                same(jf(*data[k]), want[k])
        except Exception as e:   # noqa: BLE001 (reported below)
            errors.append(e)
    ts = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


def test_a_long_scan_fuses_on_the_first_call():
    def f(x):
        return lax.fori_loop(0, 100_000, lambda i, x: x * np.float32(0.5) + np.float32(1.0), x)
    with env(FUNCGRAD_CPU_FUSE=None, FUNCGRAD_CPU_FUSE_AFTER=None):
        jf = jit(f)
        got = jf(np.float32(0.0))
        (d,) = drivers_of(jf, np.float32(0.0))
        assert d is not None and d.runs == 1 and float(got) == 2.0
        g = jit(lambda x: lax.fori_loop(0, 10, lambda i, x: x * 0.5 + 1.0, x))
        g(np.float32(0.0))   # a short loop: its plan runs numpy first, as any plan
        assert drivers_of(g, np.float32(0.0)) == []


def test_read_only_and_strided_operands(rng):
    table = rng.standard_normal((8, 4))

    def f(t, xs):
        return lax.scan(lambda c, x: (c * 0.5 + t[0] * x, c), t[1], xs)
    xs = rng.standard_normal((6, 4))
    with env(**FUSED):
        jf = jit(f)
        for t, x in [(table, xs), (funcgrad.device_put(table, "cpu"), xs[:, ::-1]),
                     (np.asfortranarray(table), funcgrad.device_put(xs, "cpu"))]:
            same(jf(t, x), f(np.asarray(t), np.asarray(x)))
        (d,) = drivers_of(jf, table, xs)
        assert d.runs == 3
