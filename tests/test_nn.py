"""funcgrad.nn: gradient checks, fused primitives against their compositions and numpy
references, attention (GQA, causal), RoPE, embedding, dropout, losses, initializers, vmap/jit."""
from __future__ import annotations

import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad.prims import rows as F
from funcgrad import nn
from funcgrad.core import bind
from funcgrad.test_util import check_grads

F64 = np.float64


def close(a, b, rtol=1e-10, atol=1e-12):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


@pytest.fixture
def x3(rng):
    return rng.standard_normal((2, 3, 5))


# ---------------------------------------------------------------------------------------------
# numpy references
# ---------------------------------------------------------------------------------------------

def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def np_layer_norm(x, scale=1.0, bias=0.0, axis=-1, eps=1e-5):
    m = x.mean(axis=axis, keepdims=True)
    v = ((x - m) ** 2).mean(axis=axis, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * scale + bias


def np_rms_norm(x, scale=1.0, axis=-1, eps=1e-6):
    return x / np.sqrt((x * x).mean(axis=axis, keepdims=True) + eps) * scale


def np_attention(q, k, v, bias=None, mask=None, causal=False):
    """[B, T, N, H] reference with key/value heads repeated for GQA."""
    n, kh = q.shape[2], k.shape[2]
    k, v = np.repeat(k, n // kh, axis=2), np.repeat(v, n // kh, axis=2)
    logits = np.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(q.shape[-1])
    if bias is not None:
        logits = logits + bias
    keep = np.ones(logits.shape, bool)
    if mask is not None:
        keep &= mask
    if causal:
        keep &= np.tril(np.ones(logits.shape[-2:], bool))
    logits = np.where(keep, logits, -0.7 * np.finfo(logits.dtype).max)
    return np.einsum("bnts,bsnh->btnh", np_softmax(logits), v)


def np_rope(x, pos, base=10000.0):
    h = x.shape[-1]
    inv = base ** (-np.arange(h // 2) * 2 / h)
    ang = np.asarray(pos, F64)[..., None] * inv          # [..., T, h/2]
    c, s = np.cos(ang)[..., None, :], np.sin(ang)[..., None, :]
    x1, x2 = x[..., :h // 2], x[..., h // 2:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1)


# ---------------------------------------------------------------------------------------------
# fused primitives == compositions / numpy references
# ---------------------------------------------------------------------------------------------

def test_fused_softmax_equals_composition(x3):
    x = fnp.asarray(x3)
    comp = fnp.exp(x - fnp.max(x, -1, keepdims=True))
    comp = comp / fnp.sum(comp, -1, keepdims=True)
    close(bind(F.softmax_p, x), comp)
    close(nn.softmax(x3, axis=1), np_softmax(x3, 1))
    close(nn.softmax(x3, axis=(0, 2)), np_softmax(x3, (0, 2)))
    close(nn.softmax(x3, axis=None), np_softmax(x3, (0, 1, 2)))
    eqns = funcgrad.make_jaxpr(nn.softmax)(x3).eqns
    assert [e.prim for e in eqns] == [F.softmax_p]  # one fused equation on the last axis


def test_fused_log_softmax_and_xent_equal_compositions(x3):
    lsm = x3 - np.log(np.exp(x3).sum(-1, keepdims=True))
    close(nn.log_softmax(x3), lsm)
    close(nn.log_softmax(x3, axis=0), x3 - np.log(np.exp(x3).sum(0, keepdims=True)))
    labels = np.array([[0, 4, 2], [1, 1, 3]])
    want = -np.take_along_axis(lsm, labels[..., None], -1)[..., 0]
    close(nn.softmax_cross_entropy_with_integer_labels(x3, labels), want)
    close(nn.softmax_cross_entropy(x3, np.eye(5)[labels]), want)
    # class axis elsewhere: logits [2, 5, 3] with labels [2, 3]
    xt = np.moveaxis(x3, -1, 1)
    close(nn.softmax_cross_entropy_with_integer_labels(xt, labels, axis=1), want)
    close(nn.softmax_cross_entropy(xt, np.moveaxis(np.eye(5)[labels], -1, 1), axis=1), want)


def test_fused_prims_are_numerically_stable():
    big = np.array([[1000.0, 0.0, -1000.0], [1e4, 1e4, 1e4]], np.float32)
    sm = np.asarray(nn.softmax(big))
    assert np.all(np.isfinite(sm))
    close(sm, [[1, 0, 0], [1 / 3, 1 / 3, 1 / 3]], rtol=1e-6, atol=1e-7)
    close(nn.log_softmax(big)[0], [0.0, -1000.0, -2000.0], rtol=1e-6)
    loss = nn.softmax_cross_entropy_with_integer_labels(big, np.array([2, 1]))
    close(loss, [2000.0, np.log(3)], rtol=1e-6)
    g = funcgrad.grad(lambda z: fnp.sum(nn.softmax_cross_entropy_with_integer_labels(
        z, np.array([2, 1]))))(big)
    assert np.all(np.isfinite(np.asarray(g)))
    # float16 accumulates in float32: no overflow in exp or in the sum
    h = nn.softmax(np.full((1, 4096), 60000.0, np.float16))
    assert h.dtype == np.float16 and np.all(np.isfinite(np.asarray(h)))
    # layer_norm of a large offset with small spread, float32
    x = (1e4 + np.random.default_rng(0).standard_normal((3, 64))).astype(np.float32)
    close(nn.layer_norm(x), np_layer_norm(x.astype(F64)), rtol=2e-3, atol=2e-3)


def test_layer_norm_and_rms_norm_match_numpy(rng, x3):
    s, b = rng.standard_normal(5), rng.standard_normal(5)
    close(nn.layer_norm(x3, s, b), np_layer_norm(x3, s, b))
    close(nn.layer_norm(x3, axis=1, eps=1e-3), np_layer_norm(x3, axis=1, eps=1e-3))
    s2 = rng.standard_normal((3, 5))
    close(nn.layer_norm(x3, s2, None, axis=(1, 2)), np_layer_norm(x3, s2, axis=(1, 2)))
    close(nn.rms_norm(x3, s), np_rms_norm(x3, s))
    close(nn.rms_norm(x3, axis=0), np_rms_norm(x3, axis=0))
    x32 = x3.astype(np.float32)
    assert nn.layer_norm(x32).dtype == np.float32 and nn.rms_norm(x32).dtype == np.float32
    close(nn.layer_norm(x3.astype(np.float16)), np_layer_norm(x3), rtol=1e-2, atol=1e-2)
    with pytest.raises(funcgrad.ShapeError):
        nn.layer_norm(x3, np.ones(4))


def test_xent_labels_are_checked(x3):
    with pytest.raises(IndexError):
        nn.softmax_cross_entropy_with_integer_labels(x3, np.full((2, 3), 5))
    with pytest.raises(TypeError):
        nn.softmax_cross_entropy_with_integer_labels(x3, np.zeros((2, 3)))


# ---------------------------------------------------------------------------------------------
# gradients (float64, central differences + the vjp/jvp identity)
# ---------------------------------------------------------------------------------------------

def test_grads_activations(rng):
    x = rng.standard_normal((3, 4))
    x = np.where(np.abs(x) < 0.1, 0.5, x)  # away from relu's kink
    for f in (nn.relu, nn.sigmoid, nn.silu, nn.softplus, nn.gelu,
              lambda z: nn.gelu(z, approximate=False), lambda z: nn.logsumexp(z, axis=1)):
        check_grads(f, (x,), order=2)


def test_grads_softmax_family(x3, rng):
    for f in (nn.softmax, nn.log_softmax, lambda z: nn.softmax(z, axis=(0, 1)),
              lambda z: nn.log_softmax(z, axis=1)):
        check_grads(f, (x3,), order=2)
    labels = rng.integers(0, 5, (2, 3))
    check_grads(lambda z: nn.softmax_cross_entropy_with_integer_labels(z, labels), (x3,),
                order=2)
    check_grads(lambda z: nn.softmax_cross_entropy_with_integer_labels(z, labels[:, :2],
                                                                         axis=1),
                (np.moveaxis(x3, 1, 2)[:, :, :2],), order=1)
    p = np_softmax(rng.standard_normal((2, 3, 5)))
    check_grads(nn.softmax_cross_entropy, (x3, p), order=2)


def test_grads_norms(x3, rng):
    s, b = rng.standard_normal(5), rng.standard_normal(5)
    check_grads(nn.layer_norm, (x3, s, b), order=2)
    check_grads(lambda z, s2: nn.layer_norm(z, s2, axis=(0, 1)), (x3, rng.standard_normal(
        (2, 3))), order=2)
    check_grads(nn.rms_norm, (x3, s), order=2)
    check_grads(lambda z: nn.rms_norm(z, axis=1), (x3,), order=2)


def test_grads_attention(rng):
    q = rng.standard_normal((1, 3, 4, 2))
    k, v = rng.standard_normal((2, 1, 3, 2, 2))
    bias = rng.standard_normal((4, 3, 3))
    check_grads(lambda a, b, c, d: nn.dot_product_attention(a, b, c, d, is_causal=True),
                (q, k, v, bias), order=1)
    check_grads(nn.dot_product_attention, (q[0], k[0], v[0]), order=2)


def test_grads_rope_embedding_dropout(rng):
    x = rng.standard_normal((2, 3, 2, 4))
    check_grads(lambda z: nn.apply_rotary(z, np.arange(3)), (x,), order=2)
    table = rng.standard_normal((5, 3))
    check_grads(lambda t: nn.embedding(t, np.array([[1, 4], [1, 0]])), (table,), order=2)
    keep = rng.random((3, 4)) < 0.7
    from funcgrad.nn._functions import _dropout_mask
    check_grads(lambda z: _dropout_mask(keep, 0.3, z), (rng.standard_normal((3, 4)),),
                order=2)


def test_embedding_gradient_is_scatter_add(rng):
    table = rng.standard_normal((4, 2))
    ids = np.array([1, 3, 1, 1])
    g = funcgrad.grad(lambda t: fnp.sum(nn.embedding(t, ids) * np.arange(8.).reshape(4, 2)))
    want = np.zeros((4, 2))
    np.add.at(want, ids, np.arange(8.).reshape(4, 2))
    close(g(table), want)
    with pytest.raises(IndexError):
        nn.embedding(table, np.array([4]))


# ---------------------------------------------------------------------------------------------
# attention
# ---------------------------------------------------------------------------------------------

def test_attention_gqa_equals_repeated_kv_heads(rng):
    q = rng.standard_normal((2, 5, 6, 4))
    k, v = rng.standard_normal((2, 2, 7, 2, 4))
    out = nn.dot_product_attention(q, k, v)
    rep = nn.dot_product_attention(q, np.repeat(k, 3, 2), np.repeat(v, 3, 2))
    close(out, rep)
    close(out, np_attention(q, k, v))
    mqa = nn.dot_product_attention(q, k[:, :, :1], v[:, :, :1], is_causal=True)
    close(mqa, np_attention(q, k[:, :, :1], v[:, :, :1], causal=True))
    with pytest.raises(ValueError):
        nn.dot_product_attention(q, k[:, :, :1].repeat(4, 2), v[:, :, :1].repeat(4, 2))


def test_attention_causal_mask_and_bias(rng):
    q, k = rng.standard_normal((2, 2, 4, 3, 8))
    v = rng.standard_normal((2, 4, 3, 5))
    out = np.asarray(nn.dot_product_attention(q, k, v, is_causal=True))
    close(out, np_attention(q, k, v, causal=True))
    # the first query position sees only the first key: its output is exactly v[:, 0]
    close(out[:, 0], v[:, 0])
    # changing later keys/values does not change earlier outputs
    k2, v2 = k.copy(), v.copy()
    k2[:, 2:], v2[:, 2:] = 9.0, -9.0
    close(np.asarray(nn.dot_product_attention(q, k2, v2, is_causal=True))[:, :2], out[:, :2])
    bias = rng.standard_normal((3, 4, 4))
    mask = rng.random((2, 1, 4, 4)) < 0.7
    mask[..., 0] = True
    close(nn.dot_product_attention(q, k, v, bias, mask, is_causal=True),
          np_attention(q, k, v, bias, mask, causal=True))
    # unbatched [T, N, H] inputs and an explicit scale
    close(nn.dot_product_attention(q[0], k[0], v[0], scale=1 / np.sqrt(8)),
          np_attention(q[:1], k[:1], v[:1])[0])


def test_attention_jit_and_grad_match_eager(rng):
    q = rng.standard_normal((1, 4, 2, 4)).astype(np.float32)
    k, v = rng.standard_normal((2, 1, 4, 1, 4)).astype(np.float32)

    def loss(q, k, v):
        return fnp.sum(nn.dot_product_attention(q, k, v, is_causal=True) ** 2)
    close(funcgrad.jit(loss)(q, k, v), loss(q, k, v), rtol=1e-5)
    for a, b in zip(funcgrad.jit(funcgrad.grad(loss, (0, 1, 2)))(q, k, v),
                    funcgrad.grad(loss, (0, 1, 2))(q, k, v)):
        close(a, b, rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# rotary embedding
# ---------------------------------------------------------------------------------------------

def test_rotary_halves_layout_and_properties(rng):
    x = rng.standard_normal((2, 5, 3, 8))
    pos = np.arange(5)
    y = np.asarray(nn.apply_rotary(x, pos))
    close(y, np_rope(x, pos))
    close(y[:, 0], x[:, 0])  # position 0 is the identity
    close(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1))  # a rotation
    # q_m . k_n depends only on m - n
    q, k = rng.standard_normal((2, 8))
    dots = [float(np.dot(np.asarray(nn.apply_rotary(q[None, None], np.array([m])))[0, 0],
                         np.asarray(nn.apply_rotary(k[None, None], np.array([n])))[0, 0]))
            for m, n in ((3, 1), (7, 5), (12, 10))]
    close(dots[1:], dots[:1] * 2, rtol=1e-9)
    # per-batch positions [B, T]
    pos2 = np.stack([pos, pos + 7])
    close(nn.apply_rotary(x, pos2), np_rope(x, pos2))
    cos, sin = nn.rotary_embedding(pos, 8)
    assert cos.shape == sin.shape == (5, 4) and cos.dtype == np.float32
    with pytest.raises(ValueError):
        nn.apply_rotary(np.ones((2, 1, 3)), np.arange(2))


# ---------------------------------------------------------------------------------------------
# vmap / jit of the fused primitives
# ---------------------------------------------------------------------------------------------

def _loop(f, *args, in_axes):
    n = next(a.shape[ax] for a, ax in zip(args, in_axes) if ax is not None)
    outs = [f(*[a if ax is None else np.take(a, i, ax) for a, ax in zip(args, in_axes)])
            for i in range(n)]
    return np.stack([np.asarray(o) for o in outs])


def _vmap_cases(rng):
    x = rng.standard_normal((3, 4, 5))
    s, b = rng.standard_normal((2, 3, 5))
    labels = rng.integers(0, 5, (3, 4))
    xent = nn.softmax_cross_entropy_with_integer_labels
    return {
        "softmax": [(nn.softmax, (x,), (0,)), (nn.softmax, (x,), (1,)),
                    (nn.softmax, (x,), (2,))],
        "log_softmax": [(nn.log_softmax, (x,), (0,)), (nn.log_softmax, (x,), (2,))],
        "xent": [(xent, (x, labels), (0, 0)), (xent, (x[0], labels), (None, 0)),
                 (xent, (x, labels[0]), (0, None))],
        "layer_norm": [(nn.layer_norm, (x, s, b), (0, 0, 0)),
                       (nn.layer_norm, (x, s[0], b), (0, None, 0)),
                       (nn.layer_norm, (x[0], s, b[0]), (None, 0, None))],
        "rms_norm": [(nn.rms_norm, (x, s[0]), (1, None)), (nn.rms_norm, (x[0], s), (None, 0)),
                     (nn.rms_norm, (x, s), (0, 0))],
    }


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "xent", "layer_norm", "rms_norm"])
def test_vmap_of_fused_prims_equals_loop(name, rng):
    for f, args, in_axes in _vmap_cases(rng)[name]:
        got = funcgrad.vmap(f, in_axes=in_axes)(*args)
        close(got, _loop(f, *args, in_axes=in_axes))


def test_vmap_of_grad_and_jit_of_fused(rng):
    x = rng.standard_normal((3, 4, 5))
    labels = rng.integers(0, 5, (3, 4))

    def loss(z, y):
        return fnp.mean(nn.softmax_cross_entropy_with_integer_labels(nn.layer_norm(z), y))
    g = funcgrad.vmap(funcgrad.grad(loss))(x, labels)
    close(g, _loop(funcgrad.grad(loss), x, labels, in_axes=(0, 0)))
    close(funcgrad.jit(funcgrad.grad(loss))(x, labels), funcgrad.grad(loss)(x, labels))
    close(funcgrad.jit(nn.rms_norm)(x), nn.rms_norm(x))


# ---------------------------------------------------------------------------------------------
# dropout and initializers (funcgrad.random)
# ---------------------------------------------------------------------------------------------

def test_dropout():
    random = pytest.importorskip("funcgrad.random")
    key = random.PRNGKey(0)
    x = fnp.ones((100, 100))
    y = np.asarray(nn.dropout(key, 0.25, x))
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.02
    close(y[kept], np.full(kept.sum(), 1 / 0.75), rtol=1e-6)
    close(nn.dropout(key, 0.25, x), y)                   # same key, same mask
    assert not np.array_equal(np.asarray(nn.dropout(random.PRNGKey(1), 0.25, x)), y)
    close(nn.dropout(key, 0.25, x, deterministic=True), np.ones((100, 100)))
    close(nn.dropout(key, 0.0, x), np.ones((100, 100)))
    close(nn.dropout(key, 1.0, x), np.zeros((100, 100)))
    close(funcgrad.jit(lambda k, z: nn.dropout(k, 0.25, z))(key, x), y)
    with pytest.raises(ValueError):
        nn.dropout(key, 1.5, x)


def test_initializers_statistics():
    random = pytest.importorskip("funcgrad.random")
    init = nn.initializers
    key = random.PRNGKey(42)
    shape = (200, 300)
    fan_in, fan_out = 200, 300
    expect_var = {
        "glorot_uniform": 2 / (fan_in + fan_out), "glorot_normal": 2 / (fan_in + fan_out),
        "lecun_uniform": 1 / fan_in, "lecun_normal": 1 / fan_in,
        "he_uniform": 2 / fan_in, "he_normal": 2 / fan_in}
    for name, var in expect_var.items():
        w = np.asarray(getattr(init, name)()(key, shape))
        assert w.shape == shape and w.dtype == np.float32
        assert abs(w.mean()) < 0.05 * np.sqrt(var), name
        assert abs(w.var() / var - 1) < 0.05, (name, w.var(), var)
        if name.endswith("uniform"):
            assert np.abs(w).max() <= np.sqrt(3 * var) * (1 + 1e-6)
        else:  # truncated at 2 standard deviations of the untruncated distribution
            assert np.abs(w).max() <= 2 * np.sqrt(var) / .87962566103423978 * (1 + 1e-6)
    w = np.asarray(init.normal(0.02)(key, (100, 100)))
    assert abs(w.std() - 0.02) < 0.001
    w = np.asarray(init.truncated_normal(0.02)(key, (100, 100), fnp.float64))
    assert w.dtype == np.float64 and np.abs(w).max() <= 0.04
    w = np.asarray(init.uniform(0.5)(key, (100, 100)))
    assert w.min() >= 0 and w.max() < 0.5 and abs(w.mean() - 0.25) < 0.01
    assert np.asarray(init.zeros(key, (2, 3))).tolist() == [[0.0] * 3] * 2
    assert np.asarray(init.ones(key, (2,), fnp.float64)).dtype == np.float64
    close(init.constant(0.5)(key, (2,)), [0.5, 0.5])
    # conv kernels (receptive field 3x3): fan_in = 3 * 3 * 16
    w = np.asarray(init.he_normal()(key, (3, 3, 16, 32)))
    assert abs(w.var() / (2 / 144) - 1) < 0.1
    with pytest.raises(ValueError):
        init.glorot_uniform()(key, (5,))
    with pytest.raises(ValueError):
        init.variance_scaling(1.0, "fan_sideways", "normal")
