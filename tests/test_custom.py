"""custom_vjp, custom_jvp and checkpoint: the custom rules are used by every transformation,
wrong rules fail clearly, and checkpoint lowers the planned peak memory of a deep MLP's grad."""
from __future__ import annotations

from functools import partial

import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import checkpoint, custom_jvp, custom_vjp, grad, jit, jvp, vjp, vmap
from funcgrad.core import FuncgradError

THIS_FILE = "test_custom.py"


# ---------------------------------------------------------------------------------------------
# custom_vjp
# ---------------------------------------------------------------------------------------------

@custom_vjp
def clip_gradient(x):
    return x


def _clip_fwd(x):
    return x, None


def _clip_bwd(_, g):
    return (fnp.clip(g, -1.0, 1.0),)


clip_gradient.defvjp(_clip_fwd, _clip_bwd)


def _clipped_loss(x):
    return fnp.sum(3.0 * clip_gradient(x) ** 2)


X = np.array([0.1, 1.0, -2.0])
# d/dx of 3 c^2 is 6c; the rule clips the cotangent 6c reaching clip_gradient to [-1, 1]
CLIPPED = np.clip(6 * X, -1, 1)


def test_grad_uses_custom_vjp_rule():
    np.testing.assert_allclose(clip_gradient(X), X)  # the primal is the function
    np.testing.assert_allclose(grad(_clipped_loss)(X), CLIPPED)
    assert not np.allclose(CLIPPED, 6 * X)  # the plain derivative would differ
    y, f_vjp = vjp(clip_gradient, X)
    np.testing.assert_allclose(y, X)
    np.testing.assert_allclose(f_vjp(np.array([5.0, -0.5, -3.0]))[0], [1.0, -0.5, -1.0])


def test_deliberately_wrong_rule_is_used():
    @custom_vjp
    def f(x):
        return fnp.sin(x)

    f.defvjp(lambda x: (fnp.sin(x), x), lambda x, g: (g * 100.0 * x,))
    np.testing.assert_allclose(grad(lambda x: fnp.sum(f(x)))(X), 100 * X)


def test_residuals_from_fwd_reach_bwd():
    @custom_vjp
    def softplus(x):
        return fnp.log1p(fnp.exp(x))

    def fwd(x):
        e = fnp.exp(x)
        return fnp.log1p(e), (e, {"one": 1.0})

    def bwd(res, g):
        e, extra = res
        return (g * e / (extra["one"] + e),)

    softplus.defvjp(fwd, bwd)
    np.testing.assert_allclose(grad(lambda x: fnp.sum(softplus(x)))(X), 1 / (1 + np.exp(-X)))


def test_custom_vjp_with_pytree_args_and_outputs():
    @custom_vjp
    def f(p, x):
        return {"y": p["a"] * x, "z": p["b"] + x}

    def fwd(p, x):
        return f(p, x), (p, x)

    def bwd(res, g):
        p, x = res
        # deliberately scaled by 2 to tell the rule from the real derivative
        return ({"a": 2 * fnp.sum(g["y"] * x), "b": 2 * fnp.sum(g["z"])},
                2 * (g["y"] * p["a"] + g["z"]))

    f.defvjp(fwd, bwd)
    p = {"a": 1.5, "b": 0.5}
    loss = lambda p, x: fnp.sum(f(p, x)["y"]) + fnp.sum(f(p, x)["z"] ** 2)
    gp, gx = grad(loss, argnums=(0, 1))(p, X)
    np.testing.assert_allclose(gp["a"], 2 * np.sum(X))
    np.testing.assert_allclose(gp["b"], 2 * np.sum(2 * (0.5 + X)))
    np.testing.assert_allclose(gx, 2 * (1.5 + 2 * (0.5 + X)))


def test_nondiff_argnums():
    @partial(custom_vjp, nondiff_argnums=(0,))
    def scaled(mode, x):
        return x * (2.0 if mode == "double" else 3.0)

    def fwd(mode, x):
        return scaled(mode, x), None

    def bwd(mode, _, g):  # nondiff args come first, like JAX
        return (g * (20.0 if mode == "double" else 30.0),)

    scaled.defvjp(fwd, bwd)
    np.testing.assert_allclose(scaled("double", X), 2 * X)
    np.testing.assert_allclose(grad(lambda x: fnp.sum(scaled("double", x)))(X), [20.0] * 3)
    np.testing.assert_allclose(grad(lambda x: fnp.sum(scaled("triple", x)))(X), [30.0] * 3)
    np.testing.assert_allclose(jit(grad(lambda x: fnp.sum(scaled("double", x))))(X), [20.0] * 3)


def test_custom_vjp_under_jit():
    np.testing.assert_allclose(jit(_clipped_loss)(X), _clipped_loss(X))
    np.testing.assert_allclose(jit(grad(_clipped_loss))(X), CLIPPED)
    np.testing.assert_allclose(grad(jit(_clipped_loss))(X), CLIPPED)  # jit inside grad
    np.testing.assert_allclose(jit(grad(jit(_clipped_loss)))(X), CLIPPED)


def test_custom_vjp_under_vmap():
    xs = np.stack([X, 2 * X, -X])
    want = np.stack([np.clip(6 * x, -1, 1) for x in xs])
    np.testing.assert_allclose(vmap(grad(_clipped_loss))(xs), want)
    np.testing.assert_allclose(grad(lambda xs: fnp.sum(vmap(_clipped_loss)(xs)))(xs), want)
    np.testing.assert_allclose(jit(vmap(grad(_clipped_loss)))(xs), want)
    np.testing.assert_allclose(vmap(clip_gradient)(xs), xs)


def test_custom_vjp_forward_mode_differentiates_the_body():
    # funcgrad differentiates the body in forward mode (JAX raises here instead)
    _, t = jvp(clip_gradient, (X,), (np.full(3, 5.0),))
    np.testing.assert_allclose(t, np.full(3, 5.0))


def test_custom_vjp_missing_rule():
    @custom_vjp
    def f(x):
        return x

    with pytest.raises(AttributeError, match="defvjp"):
        f(1.0)


def test_custom_vjp_wrong_structure_errors():
    @custom_vjp
    def f(x):
        return x * 2.0

    loss = lambda x: fnp.sum(f(x))
    f.defvjp(lambda x: (x * 2.0, None), lambda _, g: (g, g))
    with pytest.raises(TypeError, match=r"bwd rule must return a tuple of 1 cotangent.*length 2"
                       ) as info:
        grad(loss)(X)
    assert THIS_FILE in str(info.value)

    f.defvjp(lambda x: (x * 2.0, None), lambda _, g: g)  # not a tuple
    with pytest.raises(TypeError, match="bwd rule must return a tuple"):
        grad(loss)(X)

    f.defvjp(lambda x: (x * 2.0, None), lambda _, g: (g[:2],))
    with pytest.raises(TypeError, match=r"bwd cotangent has a leaf of shape \(2,\), expected"):
        grad(loss)(X)

    f.defvjp(lambda x: ((x * 2.0, x), None), lambda _, g: (g,))
    with pytest.raises(TypeError, match="fwd output has structure"):
        grad(loss)(X)

    f.defvjp(lambda x: x * 2.0, lambda _, g: (g,))
    with pytest.raises(TypeError, match=r"fwd rule must return a pair"):
        grad(loss)(X)

    f.defvjp(lambda x: (x[:1] * 2.0, None), lambda _, g: (g,))
    with pytest.raises(TypeError, match=r"fwd output has a leaf of shape \(1,\)"):
        grad(loss)(X)


def test_custom_vjp_pytree_cotangent_structure_error():
    @custom_vjp
    def f(p):
        return p["a"] * p["b"]

    f.defvjp(lambda p: (f(p), p), lambda p, g: ({"a": g},))  # "b" is missing
    with pytest.raises(TypeError, match="bwd cotangent has structure"):
        grad(lambda p: f(p))({"a": 1.0, "b": 2.0})


# ---------------------------------------------------------------------------------------------
# custom_jvp
# ---------------------------------------------------------------------------------------------

@custom_jvp
def sin_twice(x):
    return fnp.sin(x)


@sin_twice.defjvp
def _sin_twice_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return sin_twice(x), 2.0 * fnp.cos(x) * t  # deliberately twice the real derivative


def test_custom_jvp_used_by_jvp():
    y, t = jvp(sin_twice, (X,), (np.ones(3),))
    np.testing.assert_allclose(y, np.sin(X))
    np.testing.assert_allclose(t, 2 * np.cos(X))


def test_custom_jvp_used_by_grad_via_transpose():
    np.testing.assert_allclose(grad(lambda x: fnp.sum(sin_twice(x)))(X), 2 * np.cos(X))
    np.testing.assert_allclose(jit(grad(lambda x: fnp.sum(sin_twice(x))))(X), 2 * np.cos(X))
    np.testing.assert_allclose(grad(jit(lambda x: fnp.sum(sin_twice(x))))(X), 2 * np.cos(X))
    np.testing.assert_allclose(vmap(grad(sin_twice))(X), 2 * np.cos(X))
    _, t = jvp(vmap(sin_twice), (X,), (np.ones(3),))
    np.testing.assert_allclose(t, 2 * np.cos(X))


def test_custom_jvp_safe_log1pexp():
    """The classic use: a numerically safe derivative."""
    @custom_jvp
    def log1pexp(x):
        return fnp.log1p(fnp.exp(x))

    @log1pexp.defjvp
    def _(primals, tangents):
        (x,), (t,) = primals, tangents
        return log1pexp(x), t * (1.0 - 1.0 / (1.0 + fnp.exp(x)))

    x = np.array([0.0, 10.0, 800.0])
    with np.errstate(over="ignore"):
        g = np.asarray(grad(lambda x: fnp.sum(log1pexp(x)))(x))
    np.testing.assert_allclose(g, [0.5, 1 / (1 + np.exp(-10.0)), 1.0])


def test_custom_jvp_two_arguments_and_nondiff():
    @partial(custom_jvp, nondiff_argnums=(0,))
    def f(k, x, y):
        return x * y * k

    @f.defjvp
    def _(k, primals, tangents):
        (x, y), (tx, ty) = primals, tangents
        return f(k, x, y), k * (tx * y + x * ty) * 10.0

    gx, gy = grad(lambda x, y: fnp.sum(f(2.0, x, y)), argnums=(0, 1))(X, X + 1)
    np.testing.assert_allclose(gx, 20 * (X + 1))
    np.testing.assert_allclose(gy, 20 * X)


def test_custom_jvp_wrong_rule_errors():
    @custom_jvp
    def f(x):
        return x * 2.0

    f.defjvp(lambda p, t: (p[0] * 2.0, t[0][:1]))
    with pytest.raises(TypeError, match=r"jvp tangent output has a leaf of shape \(1,\)") as i:
        jvp(f, (X,), (X,))
    assert THIS_FILE in str(i.value)
    f.defjvp(lambda p, t: p[0] * 2.0)
    with pytest.raises(TypeError, match=r"must return \(primal_out, tangent_out\)"):
        jvp(f, (X,), (X,))
    f.defjvp(lambda p, t: ((p[0], p[0]), t[0]))
    with pytest.raises(TypeError, match="jvp primal output has structure"):
        grad(lambda x: fnp.sum(f(x)))(X)


# ---------------------------------------------------------------------------------------------
# checkpoint / remat
# ---------------------------------------------------------------------------------------------

def _layer(w, h):
    a = h @ w
    return fnp.tanh(a) * fnp.sin(a) + fnp.tanh(fnp.tanh(a))


def _deep_mlp(ws, x, remat):
    h = x
    for w in ws:
        h = (checkpoint(_layer) if remat else _layer)(w, h)
    return fnp.sum(h ** 2)


@pytest.fixture
def mlp(rng):
    ws = [(rng.standard_normal((32, 32)) * 0.3).astype(np.float32) for _ in range(8)]
    x = rng.standard_normal((16, 32)).astype(np.float32)
    return ws, x


def test_checkpoint_same_gradients(mlp):
    ws, x = mlp
    plain = grad(lambda ws: _deep_mlp(ws, x, False))(ws)
    for fn in (grad(lambda ws: _deep_mlp(ws, x, True)),
               jit(grad(lambda ws: _deep_mlp(ws, x, True))),
               grad(jit(lambda ws: _deep_mlp(ws, x, True)))):
        for a, b in zip(fn(ws), plain):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_deep_mlp(ws, x, True), _deep_mlp(ws, x, False), rtol=1e-6)


def test_checkpoint_lowers_peak_memory_and_recomputes(mlp):
    ws, x = mlp
    lowered = {remat: jit(grad(partial(_deep_mlp, remat=remat))).lower(ws, x)
               for remat in (False, True)}
    plain, remat = lowered[False], lowered[True]
    assert remat.peak_bytes() < plain.peak_bytes()
    assert remat.peak_bytes() < 0.8 * plain.peak_bytes()
    # the backward pass recomputes every layer's forward: twice the tanh equations
    tanh = lambda low: sum(e.prim.name == "tanh" for e in low.expr.eqns)
    assert tanh(plain) == 2 * 8
    assert tanh(remat) == 2 * tanh(plain)
    printed = lambda low: str(low).count(" = tanh ")
    assert printed(plain) == 16 and printed(remat) == 32
    assert "(backward of checkpoint:_layer)" in str(remat)


def test_checkpoint_static_argnums_and_higher_order():
    def block(x, n):
        for _ in range(n):
            x = fnp.sin(x)
        return x

    f = checkpoint(block, static_argnums=(1,))
    np.testing.assert_allclose(grad(lambda x: fnp.sum(f(x, 2)))(X), np.cos(np.sin(X)) * np.cos(X))
    # second derivative through a checkpoint
    g2 = grad(grad(lambda x: f(x, 1)))(0.3)
    np.testing.assert_allclose(g2, -np.sin(0.3), rtol=1e-6)
    # under vmap
    np.testing.assert_allclose(vmap(grad(lambda x: f(x, 1)))(X), np.cos(X))


def test_remat_is_checkpoint():
    assert funcgrad.remat is funcgrad.checkpoint


def test_custom_vjp_inside_a_jitted_function_called_twice_under_grad():
    """The traced expression of a jitted function is replayed once per call: each replay's
    custom_vjp call keeps its own residuals and cotangents."""
    @funcgrad.custom_vjp
    def f(x):
        return fnp.sin(x)

    f.defvjp(lambda x: (fnp.sin(x), fnp.cos(x)), lambda c, g: (g * c,))
    jf = funcgrad.jit(lambda x: f(x) * 3.0)

    def g(x):
        return jf(x) + jf(2.0 * x)

    np.testing.assert_allclose(float(funcgrad.grad(g)(0.3)),
                               3 * np.cos(0.3) + 6 * np.cos(0.6), rtol=1e-6)


def test_checkpoint_inside_a_jitted_function_called_twice_under_grad():
    jf = funcgrad.jit(funcgrad.checkpoint(lambda x: fnp.sin(x) * 3.0))

    def g(x):
        return jf(x) + jf(2.0 * x)

    np.testing.assert_allclose(float(funcgrad.grad(g)(0.3)),
                               3 * np.cos(0.3) + 6 * np.cos(0.6), rtol=1e-6)


@pytest.mark.parametrize("policy", [None, "dots"])
def test_checkpoint_closing_over_differentiated_values(policy):
    # a checkpointed function that closes over a parameter (checkpoint(lambda h: block(w, h)))
    # differentiates with respect to it too, eagerly, under jit, to second order
    from funcgrad.test_util import check_grads
    pol = None if policy is None else funcgrad.checkpoint_policies.dots_saveable
    rng = np.random.default_rng(0)
    w, x = rng.standard_normal((3, 3)) * 0.5, rng.standard_normal((2, 3))

    def f(w, x, remat=True):
        def block(h):
            return fnp.tanh(h @ w) * fnp.sin(w[0])
        return fnp.sum((checkpoint(block, policy=pol) if remat else block)(x) ** 2)
    want = grad(f, argnums=(0, 1))(w, x, False)
    for g in (grad(f, argnums=(0, 1)), jit(grad(f, argnums=(0, 1)))):
        for a, b in zip(g(w, x), want):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-14)
    check_grads(f, (w, x), order=2)


def test_scan_of_a_checkpointed_body_stacks_only_its_carries():
    # the reverse scan of scan(checkpoint(cell)) recomputes the cell from the saved carry;
    # without checkpoint the forward stacks the cell's values the derivative reads
    from funcgrad import lax
    from funcgrad.prims.loops import loop_run_p
    rng = np.random.default_rng(1)
    w, xs = rng.standard_normal((4, 4)) * 0.4, rng.standard_normal((5, 2, 4))

    def f(w, remat):
        def cell(h, x):
            a = fnp.tanh(h @ w + x)
            return fnp.sin(a) * a, fnp.sum(a)
        h, ys = lax.scan(checkpoint(cell) if remat else cell, fnp.zeros((2, 4), w.dtype), xs)
        return fnp.sum(h) + fnp.sum(ys * ys)

    def stacked(remat):
        lo = jit(grad(f), static_argnums=(1,)).lower(w, remat)
        fwd = [e.params["rec"] for e in lo.expr.eqns
               if e.prim is loop_run_p and e.params["rec"].name == "fwd(scan)"]
        return [a.shape for a in fwd[0].out_avals]
    assert stacked(True) == [(2, 4), (5,), (5, 2, 4)]        # carry, ys, the carries
    assert len(stacked(False)) > 3
    want = grad(f)(w, False)
    for remat in (True, False):
        np.testing.assert_allclose(np.asarray(grad(f)(w, remat)), np.asarray(want), rtol=1e-12)
        np.testing.assert_allclose(np.asarray(jit(grad(f), static_argnums=(1,))(w, remat)),
                                   np.asarray(want), rtol=1e-12)


def test_custom_vjp_closing_over_traced_values():
    # a custom_vjp function closing over a traced value works under jit and vmap and when
    # differentiated with respect to its arguments; differentiating with respect to the
    # closed-over value raises (as JAX: the rule only covers the explicit arguments)
    def f(w, x):
        @custom_vjp
        def g(x):
            return fnp.sin(x * w)
        g.defvjp(lambda x: (g(x), x), lambda x, ct: (ct * fnp.cos(x * w) * w,))
        return fnp.sum(g(x))
    w, x = np.float64(0.7), np.arange(3.0)
    np.testing.assert_allclose(float(jit(f)(w, x)), np.sum(np.sin(x * w)), rtol=1e-12)
    for g in (grad(f, argnums=1), jit(grad(f, argnums=1))):
        np.testing.assert_allclose(np.asarray(g(w, x)), np.cos(x * w) * w, rtol=1e-12)
    ws = np.array([0.1, 0.7])
    np.testing.assert_allclose(np.asarray(vmap(f, in_axes=(0, None))(ws, x)),
                               np.sin(np.outer(ws, x)).sum(1), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(vmap(grad(f, argnums=1), in_axes=(0, None))(ws, x)),
                               np.cos(np.outer(ws, x)) * ws[:, None], rtol=1e-12)
    with pytest.raises(FuncgradError, match="closes over"):
        grad(f)(w, x)


def test_custom_jvp_closing_over_traced_values():
    # as custom_vjp: jit, vmap and derivatives with respect to the arguments work; forward or
    # reverse mode with respect to the closed-over value raises (no silent zero)
    def f(w, x):
        @custom_jvp
        def g(x):
            return fnp.sin(x * w)

        @g.defjvp
        def g_jvp(primals, tangents):
            (x,), (t,) = primals, tangents
            return g(x), fnp.cos(x * w) * w * t
        return fnp.sum(g(x))
    w, x = np.float64(0.7), np.arange(3.0)
    np.testing.assert_allclose(float(jit(f)(w, x)), np.sum(np.sin(x * w)), rtol=1e-12)
    for g in (grad(f, argnums=1), jit(grad(f, argnums=1))):
        np.testing.assert_allclose(np.asarray(g(w, x)), np.cos(x * w) * w, rtol=1e-12)
    _, t = jvp(lambda x: f(w, x), (x,), (np.ones(3),))
    np.testing.assert_allclose(float(t), np.sum(np.cos(x * w) * w), rtol=1e-12)
    ws = np.array([0.1, 0.7])
    np.testing.assert_allclose(np.asarray(vmap(f, in_axes=(0, None))(ws, x)),
                               np.sin(np.outer(ws, x)).sum(1), rtol=1e-12)
    with pytest.raises(FuncgradError, match="closes over"):
        grad(f)(w, x)
    with pytest.raises(FuncgradError, match="closes over"):
        jvp(lambda w: f(w, x), (w,), (np.float64(1.0),))
