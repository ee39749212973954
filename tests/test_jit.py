"""jit: agreement with grad in every order, trace/compile caching, static and donated arguments,
the optimizing passes (DCE, CSE, constant folding, trivial algebra), explain_retraces, and the
concretization error."""
from __future__ import annotations

import logging

import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import grad, jit, vmap
from funcgrad.tree_util import tree_leaves, tree_structure

THIS_FILE = "test_jit.py"


@pytest.fixture(autouse=True)
def _reset_config():
    yield
    funcgrad.config.update("explain_retraces", False)
    funcgrad.config.update("debug_nans", False)


def _close(a, b, rtol=1e-5, atol=1e-6):
    assert tree_structure(a) == tree_structure(b)
    for x, y in zip(tree_leaves(a), tree_leaves(b)):
        assert np.asarray(x).dtype == np.asarray(y).dtype
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def _count(expr, name):
    return sum(e.prim.name == name for e in expr.eqns)


# ---------------------------------------------------------------------------------------------
# grad(f) == grad(jit(f)) == jit(grad(f))
# ---------------------------------------------------------------------------------------------

def _mlp_loss(params, x, y):
    h = x
    for w, b in params[:-1]:
        h = fnp.tanh(h @ w + b)
    w, b = params[-1]
    logits = h @ w + b
    logp = logits - fnp.log(fnp.sum(fnp.exp(logits), axis=1, keepdims=True))
    return -fnp.mean(fnp.sum(logp * y, axis=1))


def _softmax(x, axis=-1):
    z = x - fnp.max(x, axis=axis, keepdims=True)
    e = fnp.exp(z)
    return e / fnp.sum(e, axis=axis, keepdims=True)


def _softmax_loss(x):
    return fnp.sum(_softmax(x * 2.0, axis=-1) * fnp.arange(x.shape[-1], dtype=x.dtype))


def _indexing_loss(x):
    x = fnp.asarray(x)
    idx = fnp.array([2, 0, 2])
    return fnp.sum(x[1:, ::2] ** 2) + fnp.sum(x[idx] * 3.0) + x[0, -1] * x.at[1, 1].set(5.0)[1, 1]


def _reduction_loss(x):
    return (fnp.max(x, axis=0).sum() + fnp.min(x) * fnp.prod(x[:, :2] + 2.0)
            + fnp.var(x, axis=1).sum() + fnp.mean(fnp.abs(x)))


def _programs(rng):
    params = [(rng.standard_normal((4, 8)).astype(np.float32) * 0.5, np.zeros(8, np.float32)),
              (rng.standard_normal((8, 8)).astype(np.float32) * 0.5,
               rng.standard_normal(8).astype(np.float32)),
              (rng.standard_normal((8, 3)).astype(np.float32) * 0.5, np.zeros(3, np.float32))]
    x = rng.standard_normal((5, 4)).astype(np.float32)
    y = np.eye(3, dtype=np.float32)[[0, 1, 2, 0, 1]]
    m = rng.standard_normal((3, 4))
    return {
        "mlp": (_mlp_loss, (params, x, y)),
        "softmax": (_softmax_loss, (rng.standard_normal((2, 5)).astype(np.float32),)),
        "indexing": (_indexing_loss, (m,)),
        "reductions": (_reduction_loss, (m,)),
    }


@pytest.mark.parametrize("name", ["mlp", "softmax", "indexing", "reductions"])
def test_grad_jit_orders_agree(name, rng):
    f, args = _programs(rng)[name]
    g = grad(f)(*args)
    _close(grad(jit(f))(*args), g)
    jg = jit(grad(f))
    _close(jg(*args), g)
    _close(jg(*args), g)  # the cached plan
    assert jg.stats()["traces"] == 1
    _close(jit(f)(*args), f(*args))


def test_value_and_grad_under_jit(rng):
    f, args = _programs(rng)["mlp"]
    v, g = jit(funcgrad.value_and_grad(f))(*args)
    v0, g0 = funcgrad.value_and_grad(f)(*args)
    _close(v, v0)
    _close(g, g0)


# ---------------------------------------------------------------------------------------------
# caching: traces and compiles
# ---------------------------------------------------------------------------------------------

def test_same_signature_neither_retraces_nor_recompiles():
    f = jit(lambda x, y: fnp.sin(x) * y)
    x = np.ones(3, np.float32)
    f(x, 2.0)
    assert f.stats() == {"traces": 1, "compiles": 1, "calls": 1, "cache_size": 1}
    f(x + 1, 3.0)  # new values, same shapes/dtypes
    f(fnp.asarray(x), np.float32(4.0))  # an Array and a numpy scalar have the same signature
    assert f.stats() == {"traces": 1, "compiles": 1, "calls": 3, "cache_size": 1}


@pytest.mark.parametrize("change", ["shape", "dtype", "structure"])
def test_new_signature_retraces(change):
    f = jit(lambda xs: sum(fnp.sum(x) for x in xs))
    f([np.ones(3, np.float32)])
    new = {"shape": [np.ones(4, np.float32)], "dtype": [np.ones(3, np.float64)],
           "structure": [np.ones(3, np.float32), np.ones(3, np.float32)]}[change]
    f(new)
    assert f.stats()["traces"] == 2 and f.stats()["compiles"] == 2
    f(new)
    assert f.stats()["traces"] == 2 and f.stats()["calls"] == 3


def test_static_argnums():
    def power(x, n):
        out = x
        for _ in range(n - 1):  # needs a concrete n
            out = out * x
        return out

    f = jit(power, static_argnums=1)
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(f(x, 3), x ** 3)
    np.testing.assert_allclose(f(x, 3), x ** 3)
    assert f.stats()["traces"] == 1
    np.testing.assert_allclose(f(x, 2), x ** 2)  # a new static value traces again
    assert f.stats()["traces"] == 2
    np.testing.assert_allclose(f(x, n=2), x ** 2)  # by keyword: still static
    with pytest.raises(TypeError, match="hashable"):
        f(x, [2])


def test_static_argnames():
    def f(x, mode="sum", scale=1.0):
        return (fnp.sum(x) if mode == "sum" else fnp.max(x)) * scale

    jf = jit(f, static_argnames="mode")
    x = np.array([1.0, 5.0, 2.0])
    assert float(jf(x, mode="sum")) == 8.0
    assert float(jf(x, mode="max")) == 5.0
    assert float(jf(x, "max")) == 5.0  # given by position: still static
    assert float(jf(x, mode="max", scale=2.0)) == 10.0  # scale is traced
    assert float(jf(x, mode="max", scale=3.0)) == 15.0
    assert jf.stats()["traces"] == 4  # sum, max, max by position, max with scale


def test_donate_argnums_accepted():
    f = jit(lambda x, y: x * 2.0 + y, donate_argnums=(0,))
    x, y = np.arange(3.0), np.ones(3)
    np.testing.assert_allclose(f(x, y), x * 2 + 1)
    np.testing.assert_allclose(f(x, y), x * 2 + 1)
    np.testing.assert_allclose(x, np.arange(3.0))  # the caller's numpy array is untouched
    assert f.lower(x, y).donate == (0,)


# ---------------------------------------------------------------------------------------------
# the passes, seen through lower()
# ---------------------------------------------------------------------------------------------

def test_lower_dce_removes_unused_computation():
    def f(x):
        unused = fnp.exp(fnp.cos(x)) * 3.0  # noqa: F841
        also_unused = fnp.sum(x ** 2)  # noqa: F841
        return fnp.sin(x)

    low = jit(f).lower(np.ones(3, np.float32))
    assert [e.prim.name for e in low.expr.eqns] == ["sin"]
    assert "exp" not in str(low) and "cos" not in str(low)
    assert funcgrad.make_jaxpr(f)(np.ones(3, np.float32)).eqns  # traced, before the passes
    assert _count(funcgrad.make_jaxpr(f)(np.ones(3, np.float32)), "exp") == 1


def test_lower_cse_computes_duplicate_sin_once():
    def f(x):
        return fnp.sin(x) * fnp.sin(x) + fnp.sin(x)

    x = np.ones(3, np.float32)
    assert _count(funcgrad.make_jaxpr(f)(x), "sin") == 3
    low = jit(f).lower(x)
    assert _count(low.expr, "sin") == 1
    assert str(low).count("sin") == 1
    np.testing.assert_allclose(jit(f)(x), np.sin(x) ** 2 + np.sin(x), rtol=1e-6)


def test_lower_constant_folding():
    c = fnp.arange(4.0)

    def f(x):
        k = fnp.exp(c) * 2.0 + fnp.sum(c)  # only constants: folded at trace time
        ones = fnp.ones(4) * 2.0 + 1.0     # broadcast scalars: folded to one broadcast of 3.0
        return x * k + ones

    x = np.ones(4, np.float32)
    low = jit(f).lower(x)
    names = [e.prim.name for e in low.expr.eqns]
    assert "exp" not in names and "reduce_sum" not in names
    assert names.count("broadcast_in_dim") == 1 and "3.0" in str(low)
    assert sorted(names) == ["add", "broadcast_in_dim", "mul"]  # x * k + broadcast(3.0)
    assert low.expr.n_consts == 1 and np.allclose(low.closed.consts[0], np.exp(c) * 2 + 6)
    np.testing.assert_allclose(jit(f)(x), f(x), rtol=1e-6)


def test_lower_removes_trivial_algebra():
    def f(x):
        return (fnp.tanh(x) * 1.0 + 0.0 - 0.0) / 1.0 + fnp.zeros_like(x)

    x = np.ones((2, 3), np.float32)
    traced = funcgrad.make_jaxpr(f)(x)
    assert len(traced.eqns) > 1
    low = jit(f).lower(x)
    assert [e.prim.name for e in low.expr.eqns] == ["tanh"]
    # no-op reshapes, transposes and casts disappear too
    g = jit(lambda x: fnp.reshape(x, (2, 3)).astype(np.float32).transpose((0, 1)) * 2.0)
    assert [e.prim.name for e in g.lower(x).expr.eqns] == ["broadcast_in_dim", "mul"]


def test_lower_is_printable_and_runs():
    f = jit(lambda x: fnp.sin(x) + 1.0)
    low = f.lower(np.ones(2, np.float32))
    text = str(low)
    assert text.startswith("{ lambda") and "sin" in text and THIS_FILE in text
    assert low.peak_bytes() > 0
    assert f.stats()["compiles"] == 0  # lowering does not compile
    f(np.ones(2, np.float32))
    assert f.stats() == {"traces": 1, "compiles": 1, "calls": 1, "cache_size": 1}


# ---------------------------------------------------------------------------------------------
# explain_retraces and the concretization error
# ---------------------------------------------------------------------------------------------

def test_explain_retraces_logs_what_changed(caplog):
    funcgrad.config.update("explain_retraces", True)

    def step(params, x, n):
        return params["w"] * x * n

    f = jit(step, static_argnums=2)
    p = {"w": np.ones(3, np.float32)}
    with caplog.at_level(logging.WARNING, logger="funcgrad.jit"):
        f(p, np.ones(3, np.float32), 1)
        f(p, np.ones(3, np.float32), 1)
        assert caplog.records == []  # a cache hit says nothing
        f(p, np.ones(3, np.float64), 1)
        f(p, np.ones(3, np.float64), 2)
        f({"w": np.ones(4, np.float32)}, np.ones(4, np.float64), 2)
    msgs = [r.getMessage() for r in caplog.records if r.name == "funcgrad.jit"]
    assert len(msgs) == 3
    assert "jit(step)" in msgs[0] and "args[1]" in msgs[0] and "f32[3] to f64[3]" in msgs[0]
    assert "static argument 2 changed from 1 to 2" in msgs[1]
    assert "args[0]['w']" in msgs[2] and "f32[3] to f32[4]" in msgs[2]


def test_explain_retraces_static_argname_given_later(caplog):
    funcgrad.config.update("explain_retraces", True)
    f = jit(lambda x, mode="a": x * (2.0 if mode == "a" else 3.0), static_argnames="mode")
    with caplog.at_level(logging.WARNING, logger="funcgrad.jit"):
        f(np.ones(2))
        f(np.ones(2), mode="b")
    (msg,) = [r.getMessage() for r in caplog.records]
    assert "static argument mode" in msg and "'b'" in msg


def test_explain_retraces_off_by_default(caplog):
    f = jit(lambda x: x + 1.0)
    with caplog.at_level(logging.WARNING, logger="funcgrad.jit"):
        f(np.ones(2))
        f(np.ones(3))
    assert caplog.records == []


def _line_of(fn, text):
    import inspect
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def _branchy(x):
    if x > 0:  # concretizes a tracer
        return x
    return -x


def _to_float(x):
    return float(x) * 2.0  # concretizes a tracer


@pytest.mark.parametrize("fn, marker, what", [(_branchy, "if x > 0", "bool()"),
                                              (_to_float, "return float(x)", "float()")])
def test_concretization_error_names_line_and_fixes(fn, marker, what):
    with pytest.raises(funcgrad.ConcretizationError) as info:
        jit(fn)(1.0)
    msg = str(info.value)
    assert f"{THIS_FILE}:{_line_of(fn, marker)}" in msg
    assert what in msg and "static_argnums" in msg and "where" in msg
    assert isinstance(info.value, TypeError)
    # the suggested fixes work
    assert float(jit(fn, static_argnums=0)(1.0)) in (1.0, 2.0)


def test_concretization_error_under_jit_of_grad_and_vmap():
    # eager grad evaluates primals concretely, as JAX's (issue 32); jit and vmap stay abstract
    assert float(grad(_branchy)(1.0)) == 1.0 and float(grad(_branchy)(-1.0)) == -1.0
    with pytest.raises(funcgrad.ConcretizationError, match=THIS_FILE):
        jit(grad(_branchy))(1.0)
    with pytest.raises(funcgrad.ConcretizationError, match=THIS_FILE):
        vmap(_branchy)(np.ones(2))


# ---------------------------------------------------------------------------------------------
# pytrees, kwargs, nesting
# ---------------------------------------------------------------------------------------------

def test_pytree_outputs_and_kwargs():
    def f(x, *, scale, extra=None):
        out = {"y": x * scale, "parts": (fnp.sum(x), [x[0], x[-1]])}
        if extra is not None:
            out["extra"] = extra["a"] + 1.0
        return out

    jf = jit(f)
    x = np.arange(3.0, dtype=np.float32)
    got = jf(x, scale=2.0)
    _close(got, f(fnp.asarray(x), scale=fnp.float32(2.0)))
    assert set(got) == {"y", "parts"}
    got2 = jf(x, scale=2.0, extra={"a": np.ones(2, np.float32)})
    assert set(got2) == {"y", "parts", "extra"}
    np.testing.assert_allclose(got2["extra"], [2.0, 2.0])
    assert jf.stats()["traces"] == 2


def test_nested_jit():
    inner = jit(lambda x: fnp.sin(x) * 2.0)

    @jit
    def outer(x, y):
        return inner(x) + inner(y * 2.0), inner(x)

    x, y = np.arange(3.0, dtype=np.float32), np.ones(3, np.float32)
    a, b = outer(x, y)
    np.testing.assert_allclose(a, 2 * np.sin(x) + 2 * np.sin(2 * y), rtol=1e-6)
    np.testing.assert_allclose(b, 2 * np.sin(x), rtol=1e-6)
    low = outer.lower(x, y)
    assert _count(low.expr, "sin") == 2  # inner(x) twice: merged by CSE
    assert inner.stats()["traces"] == 1 and inner.stats()["compiles"] == 0  # inlined
    # grad and vmap through nested jit
    g = grad(lambda x: fnp.sum(outer(x, x)[0]))(x)
    np.testing.assert_allclose(g, 2 * np.cos(x) + 4 * np.cos(2 * x), rtol=1e-5)
    np.testing.assert_allclose(vmap(inner)(np.ones((2, 3))), 2 * np.sin(np.ones((2, 3))),
                               rtol=1e-6)


def test_jit_of_vmap_and_vmap_of_jit(rng):
    f = lambda w, x: fnp.tanh(x @ w)
    w, xs = rng.standard_normal((3, 2)), rng.standard_normal((5, 3))
    want = np.stack([np.tanh(x @ w) for x in xs])
    np.testing.assert_allclose(jit(vmap(f, in_axes=(None, 0)))(w, xs), want, rtol=1e-12)
    np.testing.assert_allclose(vmap(jit(f), in_axes=(None, 0))(w, xs), want, rtol=1e-12)


def test_cpu_plan_transposed_dots_and_scalar_broadcasts(rng):
    # the CPU plan computes (x . y)^T as y . x and lets numpy broadcast scalars itself
    from funcgrad.backends.cpu.backend import CpuPlan
    a = rng.standard_normal((3, 4))
    b = rng.standard_normal((4, 5))
    c = rng.standard_normal((2, 3, 4))
    v = rng.standard_normal(4)

    def f(a, b, c, v):
        return ((a @ b).T * 2.0 + 1.0, fnp.einsum("ijk,k->ij", c, v).T,
                fnp.einsum("ij,ik->jk", a, a).T - fnp.full((4, 4), 0.5))
    args = funcgrad.device_put((a, b, c, v), "cpu")
    got = jit(f)(*args)
    want = ((a @ b).T * 2.0 + 1.0, np.einsum("ijk,k->ij", c, v).T,
            np.einsum("ij,ik->jk", a, a).T - 0.5)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-12)
    plan = jit(f).lower(*args).compile()
    assert isinstance(plan, CpuPlan)
    steps = [e.prim.name for e in plan.line_eqn.values()]
    assert steps.count("dot_general") == 1   # only the 3-D product keeps its own step
    assert "broadcast_in_dim" not in steps     # scalars broadcast inside the consumers


@pytest.mark.skipif(__import__("platform").libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_cpu_backend_malloc_tuning_is_on_by_default_and_can_be_turned_off():
    import subprocess
    import sys
    code = "import funcgrad.backends.cpu.backend as c; print(c.MALLOPT_APPLIED)"
    env = dict(__import__("os").environ)
    on = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                        check=True).stdout.strip()
    env["FUNCGRAD_MALLOPT"] = "0"
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True).stdout.strip()
    assert (on, off) == ("True", "False")
