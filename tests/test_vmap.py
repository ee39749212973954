"""vmap: agreement with a Python loop (funcgrad.numpy programs, and every primitive with random
in_axes/out_axes), in_axes/out_axes forms, nesting, per-example gradients, jvp/vmap commuting,
and errors."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad.numpy as fnp
from funcgrad import grad, jit, jvp, vmap
from funcgrad.core import bind
from funcgrad.tree_util import tree_leaves, tree_map, tree_structure

THIS_FILE = "test_vmap.py"


def _take(x, i, axis):
    return fnp.asarray(x if axis is None else np.take(np.asarray(x), i, axis=axis))


def _loop(f, args, in_axes, size, out_axis=0):
    """vmap's reference: call f per batch element and stack every output leaf on out_axis."""
    outs = [f(*[_take(a, i, ax) for a, ax in zip(args, in_axes)]) for i in range(size)]
    return tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs], axis=out_axis), *outs)


def _close(a, b, rtol=1e-6, atol=1e-7):
    assert tree_structure(a) == tree_structure(b)
    for x, y in zip(tree_leaves(a), tree_leaves(b)):
        assert np.shape(x) == np.shape(y)
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------------
# funcgrad.numpy programs against a loop
# ---------------------------------------------------------------------------------------------

def _elementwise(x, y):
    return (fnp.exp(-x ** 2) * fnp.sin(y) + fnp.log1p(fnp.abs(x)) - fnp.tanh(x * y)
            + fnp.sqrt(fnp.abs(y) + 1.0) / (1.0 + fnp.exp(x)) + fnp.expm1(x) * fnp.cos(y)
            + fnp.maximum(x, y) - fnp.minimum(x, 0.5) + fnp.where(x > y, x, y ** 2)
            + fnp.clip(x, -0.5, 0.5) + fnp.sign(y) * fnp.floor(x * 3) + fnp.power(fnp.abs(x), 1.5))


def _reductions(x, y):
    return (fnp.sum(x, axis=0) + fnp.mean(y, axis=1).sum() + fnp.max(x, axis=1).mean()
            + fnp.min(y) + fnp.prod(x[:2], axis=0) + fnp.var(x) + fnp.std(y, axis=0)
            + fnp.argmax(x, axis=1).astype(fnp.float64)[:1] + fnp.any(x > 1.0).astype(x.dtype))


def _shapes(x, y):
    a = fnp.concatenate([x, y.T], axis=0)
    b = fnp.reshape(a, (-1,))[:6]
    c = fnp.stack([x[0], y[:, 0]], axis=1)
    d = fnp.transpose(fnp.expand_dims(x, 0), (2, 0, 1)).squeeze(1)
    e = fnp.pad(x, ((1, 0), (0, 2))) + fnp.flip(fnp.pad(x, ((0, 1), (2, 0))), axis=1)
    return {"a": a, "b": fnp.tile(b, 2), "c": c * 2.0, "d": d, "e": e,
            "f": fnp.repeat(x[:, :1], 2, axis=1), "g": fnp.swapaxes(y, 0, 1)}


def _linalg(x, y):
    return (x @ y, fnp.dot(x[0], y[:, 0]), fnp.einsum("ij,jk->ik", x, y),
            fnp.outer(x[0], y[:, 1]), fnp.tensordot(x, y.T, axes=2))


def _indexing(x, y):
    idx = fnp.array([2, 0, 1, 2])
    return (x[1], x[:, 1:3], x[::-1, ::2], x[idx], x[idx, idx[:4] % 2], x[..., None][0],
            x.at[0, 1].set(7.0), x.at[idx].add(1.0), fnp.take(y, idx, axis=0),
            fnp.take_along_axis(x, fnp.argmax(x, axis=1, keepdims=True), axis=1),
            x[x[:, 0].argmin()])


PROGRAMS = {"elementwise": (_elementwise, (3, 4), (3, 4)),
            "reductions": (_reductions, (3, 4), (3, 4)),
            "shapes": (_shapes, (3, 4), (4, 3)),
            "linalg": (_linalg, (3, 4), (4, 3)),
            "indexing": (_indexing, (3, 4), (4, 3))}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("in_axes", [(0, 0), (1, None), (-1, 2), (None, 0)], ids=str)
def test_numpy_programs_match_loop(name, in_axes, rng):
    f, sx, sy = PROGRAMS[name]
    B = 3
    args = []
    for shape, ax in zip((sx, sy), in_axes):
        if ax is None:
            args.append(rng.standard_normal(shape))
        else:
            full = list(shape)
            full.insert(ax % (len(shape) + 1), B)
            args.append(rng.standard_normal(full))
    got = vmap(f, in_axes=in_axes)(*args)
    _close(got, _loop(f, args, in_axes, B), rtol=1e-10, atol=1e-12)
    _close(jit(vmap(f, in_axes=in_axes))(*args), got, rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# in_axes / out_axes
# ---------------------------------------------------------------------------------------------

def test_in_axes_ints_negative_and_none(rng):
    f = lambda a, b: fnp.tanh(a) * b + fnp.sum(a ** 2)
    x, y = rng.standard_normal((3, 4)), rng.standard_normal((4, 3))
    _close(vmap(f, in_axes=(1, 0))(x, y), _loop(f, (x, y), (1, 0), 4))
    _close(vmap(f, in_axes=(-1, -2))(x, y), _loop(f, (x, y), (-1, -2), 4))
    z = rng.standard_normal(4)
    _close(vmap(f, in_axes=(0, None))(x, z), _loop(f, (x, z), (0, None), 3))
    _close(vmap(f, in_axes=[0, None])(x, z), _loop(f, (x, z), (0, None), 3))  # a list works
    _close(vmap(f, in_axes=(None, 1))(z, y), _loop(f, (z, y), (None, 1), 3))


@pytest.mark.parametrize("out_axes", [0, 1, 2, -1, -2, -3])
def test_out_axes_ints(out_axes, rng):
    f = lambda a: fnp.outer(a, a) * 2.0
    x = rng.standard_normal((5, 3))
    got = vmap(f, out_axes=out_axes)(x)
    np.testing.assert_allclose(got, _loop(f, (x,), (0,), 5, out_axis=out_axes), rtol=1e-12)


def test_out_axes_none_for_unbatched_outputs(rng):
    x = rng.standard_normal((4, 2))
    c, y = vmap(lambda a, k: (k * 2.0, a + k), in_axes=(0, None), out_axes=(None, 0))(x, 3.0)
    assert np.shape(c) == () and float(c) == 6.0
    np.testing.assert_allclose(y, x + 3.0)
    # an unbatched output with an int out_axis is broadcast along the batch
    c2 = vmap(lambda a: fnp.ones(2), out_axes=1)(x)
    assert c2.shape == (2, 4)
    with pytest.raises(ValueError, match="out_axes=None"):
        vmap(lambda a: a * 2.0, out_axes=None)(x)


def test_pytree_in_axes_and_out_axes(rng):
    def f(params, batch):
        xb, yb = batch
        pred = params["w"] @ xb + params["b"]
        return {"err": (pred - yb) ** 2, "w_norm": fnp.sum(params["w"] ** 2)}, pred

    params = {"w": rng.standard_normal((2, 3)), "b": rng.standard_normal(2)}
    xs, ys = rng.standard_normal((3, 5)), rng.standard_normal((5, 2))
    # tuple prefix for the batch, dict prefix for the params (b is batched, w is not)
    bs = rng.standard_normal((5, 2))
    in_axes = ({"w": None, "b": 0}, (1, 0))
    out_axes = ({"err": 1, "w_norm": None}, -1)
    out, pred = vmap(f, in_axes=in_axes, out_axes=out_axes)({"w": params["w"], "b": bs},
                                                            (xs, ys))
    for i in range(5):
        o, p = f({"w": params["w"], "b": bs[i]}, (xs[:, i], ys[i]))
        np.testing.assert_allclose(out["err"][:, i], o["err"], rtol=1e-12)
        np.testing.assert_allclose(pred[:, i], p, rtol=1e-12)
    np.testing.assert_allclose(out["w_norm"], np.sum(params["w"] ** 2))
    # a single int prefix for a whole pytree argument
    got = vmap(lambda t: t[0][:2] * t[1]["k"], in_axes=(0,))((xs.T, {"k": ys}))
    np.testing.assert_allclose(got, xs.T[:, :2] * ys, rtol=1e-12)


def test_axis_size_without_batched_inputs():
    out = vmap(lambda: fnp.arange(3.0), in_axes=(), axis_size=4)()
    assert out.shape == (4, 3)


def test_nested_vmap(rng):
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((5, 4))
    dot = lambda u, v: fnp.dot(u, v)
    r = vmap(vmap(dot, in_axes=(None, 0)), in_axes=(0, None))(a, b)
    np.testing.assert_allclose(r, np.einsum("ijk,lk->ilj", a, b), rtol=1e-12)
    # batch both operands on different axes at both levels, and map outputs to the back
    c = rng.standard_normal((4, 2))
    r2 = vmap(vmap(dot, in_axes=(0, None), out_axes=-1), in_axes=(0, 1), out_axes=1)(a, c)
    np.testing.assert_allclose(r2, np.einsum("ijk,ki->ji", a, c), rtol=1e-12)
    x = rng.standard_normal((2, 3, 4))
    f = lambda v: fnp.sum(fnp.sin(v) * v)
    np.testing.assert_allclose(vmap(vmap(vmap(f)))(x[..., None]), (np.sin(x) * x), rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# composition with differentiation
# ---------------------------------------------------------------------------------------------

def _loss(w, x, y):
    pred = fnp.tanh(x @ w["W"] + w["b"])
    return fnp.sum((pred - y) ** 2)


def test_per_example_gradients(rng):
    w = {"W": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)}
    xs, ys = rng.standard_normal((6, 3)), rng.standard_normal((6, 2))
    per_ex = vmap(grad(_loss), in_axes=(None, 0, 0))(w, xs, ys)
    want = _loop(lambda x, y: grad(_loss)(w, x, y), (xs, ys), (0, 0), 6)
    _close(per_ex, want, rtol=1e-10, atol=1e-12)
    assert per_ex["W"].shape == (6, 3, 2)
    # the mean of per-example gradients is the gradient of the mean loss
    full = grad(lambda w: sum(_loss(w, xs[i], ys[i]) for i in range(6)))(w)
    _close(tree_map(lambda g: np.sum(np.asarray(g), 0), per_ex), full, rtol=1e-10)
    # the brief's form: in_axes=(None, 0) with the example as one pytree
    pe2 = vmap(grad(lambda w, ex: _loss(w, *ex)), in_axes=(None, 0))(w, (xs, ys))
    _close(pe2, per_ex)
    _close(jit(vmap(grad(_loss), in_axes=(None, 0, 0)))(w, xs, ys), per_ex, rtol=1e-10)


def test_jvp_of_vmap_equals_vmap_of_jvp(rng):
    f = lambda a, b: fnp.sin(a) * fnp.sum(a * b) + fnp.exp(b[::-1])
    x, y = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    tx, ty = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    p1, t1 = jvp(vmap(f), (x, y), (tx, ty))
    p2, t2 = vmap(lambda a, b, ta, tb: jvp(f, (a, b), (ta, tb)))(x, y, tx, ty)
    np.testing.assert_allclose(p1, p2, rtol=1e-12)
    np.testing.assert_allclose(t1, t2, rtol=1e-12)
    # with an unbatched argument
    p3, t3 = jvp(vmap(f, in_axes=(0, None)), (x, y[0]), (tx, ty[0]))
    p4, t4 = vmap(lambda a, ta: jvp(f, (a, y[0]), (ta, ty[0])))(x, tx)
    np.testing.assert_allclose(p3, p4, rtol=1e-12)
    np.testing.assert_allclose(t3, t4, rtol=1e-12)


def test_grad_of_vmap(rng):
    x = rng.standard_normal((5, 3))
    g = grad(lambda x: fnp.sum(vmap(lambda r: fnp.sum(fnp.sin(r) ** 2))(x)))(x)
    np.testing.assert_allclose(g, 2 * np.sin(x) * np.cos(x), rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------------

def test_inconsistent_sizes_error():
    with pytest.raises(ValueError, match=r"inconsistent sizes.*\[3, 4\]") as info:
        vmap(lambda a, b: a + b)(np.ones((3, 2)), np.ones((4, 2)))
    assert THIS_FILE in str(info.value)
    with pytest.raises(ValueError, match="inconsistent sizes"):
        vmap(lambda a: a, axis_size=5)(np.ones(3))


def test_in_axes_errors():
    with pytest.raises(ValueError, match="out of range"):
        vmap(lambda a: a, in_axes=2)(np.ones((3, 2)))
    with pytest.raises(ValueError, match="2 entries but the function got 1"):
        vmap(lambda a: a, in_axes=(0, 0))(np.ones(3))
    with pytest.raises(ValueError, match="does not match the structure"):
        vmap(lambda d: d["a"], in_axes=({"b": 0},))({"a": np.ones(3)})
    with pytest.raises(ValueError, match="at least one non-None"):
        vmap(lambda a: a, in_axes=None)(np.ones(3))


# ---------------------------------------------------------------------------------------------
# every primitive: random in_axes / out_axes against a loop (hypothesis)
# ---------------------------------------------------------------------------------------------

try:
    from prim_specs import SPECS, hypothesis_shapes
except ImportError:  # pragma: no cover - the shared table is missing
    SPECS = None


def _batched_operands(rng, args, in_axes, size):
    """Stack `size` variants of each operand along its axis: the operand itself and random
    permutations of its elements (which keep every elementwise domain: positivity, distinct
    values, valid indices)."""
    out = []
    for a, ax in zip(args, in_axes):
        a = np.asarray(a)
        if ax is None:
            out.append(a)
            continue
        variants = [a] + [rng.permutation(a.reshape(-1)).reshape(a.shape)
                          for _ in range(size - 1)]
        out.append(np.stack(variants, axis=ax))
    return out


@pytest.mark.skipif(SPECS is None, reason="tests/prim_specs.py is not there")
@pytest.mark.parametrize("name", sorted(SPECS) if SPECS else [])
@given(data=st.data())
def test_vmap_of_each_primitive_matches_loop(name, data):
    spec = SPECS[name]
    shape = data.draw(hypothesis_shapes(spec, max_side=3), label="shape")
    dtype = data.draw(st.sampled_from(spec.dtypes), label="dtype")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    args, params = spec.make_args(rng, shape, dtype)
    size = data.draw(st.integers(1, 3), label="batch")
    in_axes = tuple(data.draw(st.one_of(st.none(), st.integers(-np.ndim(a) - 1, np.ndim(a))),
                              label=f"in_axes[{i}]") for i, a in enumerate(args))
    batched = _batched_operands(rng, args, in_axes, size)
    with np.errstate(all="ignore"):
        want_each = [np.asarray(spec.prim.impl(*[a if ax is None else np.take(a, i, axis=ax)
                                                 for a, ax in
                                                 zip(batched, in_axes)], **params))
                     for i in range(size)]
    nd = want_each[0].ndim + 1
    out_axis = data.draw(st.integers(-nd, nd - 1), label="out_axes")
    want = np.stack(want_each, axis=out_axis)

    got = vmap(lambda *xs: bind(spec.prim, *xs, **params), in_axes=in_axes, out_axes=out_axis,
               axis_size=size)(*batched)
    assert got.shape == want.shape and got.dtype == want.dtype
    rtol, atol = spec.tolerance(want.dtype)
    np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=atol)
