"""pure_callback under jit/vmap (JAX semantics) and checkpoint policies (what remat saves)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import checkpoint, grad, jit, jvp, vmap
from funcgrad import checkpoint_policies as cp
from funcgrad.ad_checkpoint import checkpoint_name

S = funcgrad.ShapeDtypeStruct
X = np.array([3.0, 1.0, 2.0], np.float32)


class Counted:
    """A host function that counts its calls."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0
        self.__name__ = fn.__name__

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


def host_sort(x):
    assert isinstance(x, np.ndarray)
    return np.sort(x)


# ---------------------------------------------------------------------------------------------
# pure_callback
# ---------------------------------------------------------------------------------------------

def test_pure_callback_eager_and_jit_call_at_run_time():
    cb = Counted(host_sort)
    spec = S((3,), np.float32)
    np.testing.assert_array_equal(funcgrad.pure_callback(cb, spec, X), [1.0, 2.0, 3.0])
    f = jit(lambda x: funcgrad.pure_callback(cb, spec, x * 2.0) + 1.0)
    np.testing.assert_array_equal(f(X), [3.0, 5.0, 7.0])
    np.testing.assert_array_equal(f(X + 1.0), [5.0, 7.0, 9.0])
    assert cb.calls == 3 and f.stats()["traces"] == 1
    assert "pure_callback" in str(f.lower(X))


def test_pure_callback_pytree_results_and_kwargs_one_host_call():
    cb = Counted(lambda x, y: {"s": x + y, "p": (x * y).sum()})
    spec = {"s": S((3,), np.float32), "p": S((), np.float32)}
    for f in (lambda x: funcgrad.pure_callback(cb, spec, x, y=x),
              jit(lambda x: funcgrad.pure_callback(cb, spec, x, y=x))):
        cb.calls = 0
        out = f(X)
        np.testing.assert_array_equal(out["s"], 2 * X)
        assert float(out["p"]) == float((X * X).sum())
        assert cb.calls == 1


def test_pure_callback_is_pure_dce_and_cse():
    cb = Counted(host_sort)
    spec = S((3,), np.float32)
    unused = jit(lambda x: (funcgrad.pure_callback(cb, spec, x), x * 2.0)[1])
    np.testing.assert_array_equal(unused(X), 2 * X)
    assert cb.calls == 0 and "pure_callback" not in str(unused.lower(X))
    twice = jit(lambda x: funcgrad.pure_callback(cb, spec, x) + funcgrad.pure_callback(cb, spec, x))
    np.testing.assert_array_equal(twice(X), [2.0, 4.0, 6.0])
    assert cb.calls == 1


def test_pure_callback_wrong_result_names_callback_and_shapes():
    with pytest.raises(TypeError, match=r"pure_callback\(host_sort\).*shape \(3,\).*expected "
                                        r"shape \(4,\)"):
        jit(lambda x: funcgrad.pure_callback(host_sort, S((4,), np.float32), x))(X)
    with pytest.raises(TypeError, match=r"dtype int32.*expected.*dtype float32"):
        funcgrad.pure_callback(lambda x: x.astype(np.int32), S((3,), np.float32), X)
    with pytest.raises(TypeError, match="returned"):
        funcgrad.pure_callback(lambda x: (x, x), S((3,), np.float32), X)


@pytest.mark.parametrize("method", ["sequential", "expand_dims", "broadcast_all"])
def test_pure_callback_vmap_methods(method):
    seen = []

    def host(a, b):
        seen.append((a.shape, b.shape))
        return (a * b + 1.0).astype(np.float32)

    xs = np.arange(6, dtype=np.float32).reshape(2, 3)
    c = np.array([1.0, 2.0, 3.0], np.float32)
    f = lambda x, y: funcgrad.pure_callback(host, S((3,), np.float32), x, y, vmap_method=method)
    want = xs * c + 1.0
    np.testing.assert_array_equal(vmap(f, in_axes=(0, None))(xs, c), want)
    np.testing.assert_array_equal(jit(vmap(f, in_axes=(0, None)))(xs, c), want)
    # batch axis not first
    np.testing.assert_array_equal(vmap(f, in_axes=(1, None), out_axes=1)(xs.T, c), want.T)
    shapes = {"sequential": ((3,), (3,)), "expand_dims": ((2, 3), (1, 3)),
              "broadcast_all": ((2, 3), (2, 3))}[method]
    assert seen[0] == shapes and set(seen) == {shapes}
    assert len(seen) == (6 if method == "sequential" else 3)   # 3 runs: 2 per element for seq
    # nested vmap
    xss = np.stack([xs, xs + 1.0])
    np.testing.assert_array_equal(vmap(vmap(f, in_axes=(0, None)), in_axes=(0, None))(xss, c),
                                  xss * c + 1.0)


def test_pure_callback_vmap_without_method_raises():
    with pytest.raises(NotImplementedError, match="vmap_method='sequential'"):
        vmap(lambda x: funcgrad.pure_callback(host_sort, S((3,), np.float32), x))(np.ones((2, 3)))
    with pytest.raises(ValueError, match="vmap_method must be one of"):
        funcgrad.pure_callback(host_sort, S((3,), np.float32), X, vmap_method="legacy")


def test_pure_callback_not_differentiable_but_custom_jvp_works():
    f = lambda x: funcgrad.pure_callback(np.sin, S((), np.float32), x)
    with pytest.raises(ValueError, match=r"pure_callback\(sin\) cannot be differentiated.*"
                                         r"custom_jvp"):
        grad(f)(np.float32(0.3))
    with pytest.raises(ValueError, match="cannot be differentiated"):
        jvp(f, (np.float32(0.3),), (np.float32(1.0),))

    @funcgrad.custom_jvp
    def sin(x):
        return f(x)

    @sin.defjvp
    def _(primals, tangents):
        (x,), (t,) = primals, tangents
        return sin(x), funcgrad.pure_callback(np.cos, S((), np.float32), x) * t

    np.testing.assert_allclose(jit(grad(sin))(np.float32(0.3)), np.cos(0.3), rtol=1e-6)
    # a callback on a non-differentiated value is fine under grad
    g = grad(lambda x: x * funcgrad.pure_callback(np.sin, S((), np.float32), np.float32(1.0)))
    np.testing.assert_allclose(g(np.float32(2.0)), np.sin(1.0), rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# checkpoint policies
# ---------------------------------------------------------------------------------------------

POLICIES = {
    "nothing": cp.nothing_saveable,
    "dots": cp.dots_saveable,
    "dots_no_batch": cp.dots_with_no_batch_dims_saveable,
    "everything": cp.everything_saveable,
    "only_a": cp.save_only_these_names("a"),
    "all_but_a": cp.save_any_names_but_these("a"),
}


def _layer(w, h):
    a = checkpoint_name(h @ w, "a")
    return fnp.tanh(a) * fnp.sin(a) + fnp.tanh(fnp.tanh(a))


def _mlp(ws, x, policy, remat=True):
    h = x
    for w in ws:
        h = (checkpoint(_layer, policy=policy) if remat else _layer)(w, h)
    return fnp.sum(h ** 2)


def test_policy_names_follow_jax():
    assert cp.checkpoint_dots is cp.dots_saveable
    assert cp.checkpoint_dots_with_no_batch_dims is cp.dots_with_no_batch_dims_saveable
    from funcgrad import lax
    x = np.ones((2, 3, 4), np.float32)
    batched = jit(lambda a: lax.dot_general(a, a, (((2,), (2,)), ((0,), (0,))))).lower(x)
    e = next(e for e in batched.expr.eqns if e.prim.name == "dot_general")
    avals = [v.aval for v in e.inputs]
    assert cp.dots_saveable(e.prim, *avals, **e.params)
    assert not cp.dots_with_no_batch_dims_saveable(e.prim, *avals, **e.params)
    np.testing.assert_array_equal(checkpoint_name(X, "x"), X)
    np.testing.assert_array_equal(jit(lambda v: checkpoint_name(v, "x") * 2.0)(X), 2 * X)
    assert "name" not in str(jit(lambda v: checkpoint_name(v, "x") * 2.0).lower(X))


@settings(max_examples=8)
@given(n=st.sampled_from([0, 1, 3]), d=st.sampled_from([1, 4]), layers=st.integers(1, 2),
       name=st.sampled_from(sorted(POLICIES)))
def test_policy_gradients_equal_plain(n, d, layers, name):
    rng = np.random.default_rng(n * 10 + d)
    ws = [rng.standard_normal((d, d)) * 0.5 for _ in range(layers)]
    x = rng.standard_normal((n, d))
    plain = grad(lambda ws: _mlp(ws, x, None, remat=False))(ws)
    policy = POLICIES[name]
    for fn in (grad(lambda ws: _mlp(ws, x, policy)), jit(grad(lambda ws: _mlp(ws, x, policy)))):
        for a, b in zip(fn(ws), plain):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["nothing", "dots", "everything"])
def test_policy_higher_order_vmap_and_nested_custom_vjp(name):
    policy = POLICIES[name]
    xs = np.array([0.1, 0.5, 1.0])
    f = checkpoint(lambda x: fnp.sin(fnp.sin(x)), policy=policy)
    want2 = -np.sin(np.sin(0.3)) * np.cos(0.3) ** 2 - np.cos(np.sin(0.3)) * np.sin(0.3)
    np.testing.assert_allclose(grad(grad(f))(0.3), want2, rtol=1e-6)
    np.testing.assert_allclose(jit(vmap(grad(f)))(xs), np.cos(np.sin(xs)) * np.cos(xs),
                               rtol=1e-6)

    @funcgrad.custom_vjp
    def doubled(x):
        return x * 2.0

    doubled.defvjp(lambda x: (x * 2.0, None), lambda _, g: (g * 3.0,))
    h = checkpoint(lambda x: fnp.sin(doubled(x)), policy=policy)
    np.testing.assert_allclose(grad(h)(0.3), 3 * np.cos(0.6), rtol=1e-6)


def _count(low, prim):
    return sum(e.prim.name == prim for e in low.expr.eqns)


def test_policies_show_in_the_lowered_backward_and_peak_memory():
    rng = np.random.default_rng(0)
    ws = [(rng.standard_normal((32, 32)) * 0.3).astype(np.float32) for _ in range(4)]
    x = rng.standard_normal((16, 32)).astype(np.float32)
    low = {k: jit(grad(lambda ws, p=p: _mlp(ws, x, p))).lower(ws) for k, p in POLICIES.items()}
    plain = jit(grad(lambda ws: _mlp(ws, x, None, remat=False))).lower(ws)
    dots, tanh = _count(plain, "dot_general"), _count(plain, "tanh")
    # dots saved: no dot_general of the body is recomputed, the elementwise ops are
    for k in ("dots", "dots_no_batch", "only_a"):
        assert _count(low[k], "dot_general") == dots and _count(low[k], "tanh") == 2 * tanh, k
    # nothing saved: every layer's dot is recomputed in the backward pass
    for k in ("nothing", "all_but_a"):
        assert _count(low[k], "dot_general") == dots + 4 and _count(low[k], "tanh") == 2 * tanh
    # everything saved: nothing is recomputed
    assert _count(low["everything"], "dot_general") == dots
    assert _count(low["everything"], "tanh") == tanh
    assert "(backward of checkpoint:_layer)" in str(low["dots"])
    peak = {k: v.peak_bytes() for k, v in low.items()}
    assert peak["nothing"] <= peak["dots"] <= peak["everything"]
    assert peak["nothing"] < peak["everything"] == plain.peak_bytes()


def test_host_calls_do_not_run_in_a_cuda_plans_dry_run():
    # a GPU plan's first call is a dry run (kernels recorded, nothing executed): the callback
    # must not run there (pure_callback counted 2 calls for one jitted call on an H200)
    from funcgrad import cuda as fcuda
    if not fcuda.usable():
        pytest.skip("no CUDA backend (set NUMBA_ENABLE_CUDASIM=1)")
    from funcgrad.cuda import compile as fcompile
    cb = Counted(host_sort)
    f = jit(lambda x: funcgrad.pure_callback(cb, S((3,), np.float32), x * 2.0) + 1.0)
    x = funcgrad.device_put(X, "cuda")
    plan = f.lower(x).compile()
    fcompile.dry_run(plan, [x.buf])
    assert cb.calls == 0
    np.testing.assert_array_equal(np.asarray(f(x)), [3.0, 5.0, 7.0])
    assert cb.calls == 1
