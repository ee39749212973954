"""The fused (flash) attention primitive against composed attention: values, gradients, causal,
grouped-query and strided heads, the head_dim limit, and no T x S buffer in the jitted step."""
from __future__ import annotations

import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad.prims import attention as A
from funcgrad import nn
from funcgrad.core import ShapeError
from funcgrad.test_util import check_grads


def composed(q, k, v, causal, scale=None):
    """softmax(where(mask, q k^T * s, -inf)) v with [B, T, N, H] operands (GQA by repeat)."""
    g = q.shape[2] // k.shape[2]
    k, v = fnp.repeat(k, g, axis=2), fnp.repeat(v, g, axis=2)
    q, k, v = (fnp.transpose(x, (0, 2, 1, 3)) for x in (q, k, v))
    s = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    att = q @ fnp.swapaxes(k, -1, -2) * s
    if causal:
        t, sk = att.shape[-2:]
        att = fnp.where(fnp.tril(fnp.ones((t, sk), bool)), att, -np.inf)
    return fnp.transpose(nn.softmax(att, axis=-1) @ v, (0, 2, 1, 3))


def _qkv(rng, b, t, s, n, kh, h, hv, dtype=np.float64):
    return (rng.standard_normal((b, t, n, h)).astype(dtype),
            rng.standard_normal((b, s, kh, h)).astype(dtype),
            rng.standard_normal((b, s, kh, hv)).astype(dtype))


CASES = [  # b, t, s, n, kh, h, hv, causal
    (2, 5, 5, 2, 2, 4, 4, True), (1, 4, 6, 4, 2, 3, 5, False), (2, 7, 3, 3, 1, 2, 2, True),
    (1, 200, 200, 1, 1, 3, 2, True)]   # more rows than one chunk of the numpy impl


@pytest.mark.parametrize("case", CASES, ids=str)
def test_fused_equals_composed(case):
    *dims, causal = case
    q, k, v = _qkv(np.random.default_rng(0), *dims)
    got = nn.dot_product_attention(q, k, v, is_causal=causal)
    np.testing.assert_allclose(np.asarray(got), np.asarray(composed(q, k, v, causal)),
                               rtol=1e-10, atol=1e-12)
    f = funcgrad.jit(lambda q, k, v: nn.dot_product_attention(q, k, v, is_causal=causal))
    np.testing.assert_allclose(np.asarray(f(q, k, v)), np.asarray(got), rtol=1e-12)


@pytest.mark.parametrize("case", CASES[:3], ids=str)
def test_gradients_equal_composed(case):
    *dims, causal = case
    q, k, v = _qkv(np.random.default_rng(1), *dims)
    w = np.random.default_rng(2).standard_normal(q.shape[:3] + v.shape[3:])

    def loss(att):
        return lambda q, k, v: fnp.sum(att(q, k, v) * w)
    fused = funcgrad.grad(loss(lambda q, k, v: nn.dot_product_attention(
        q, k, v, is_causal=causal)), argnums=(0, 1, 2))(q, k, v)
    ref = funcgrad.grad(loss(lambda q, k, v: composed(q, k, v, causal)),
                        argnums=(0, 1, 2))(q, k, v)
    for a, b in zip(fused, ref):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-9, atol=1e-11)


def test_check_grads_second_order_causal_gqa():
    q, k, v = _qkv(np.random.default_rng(3), 1, 3, 4, 2, 1, 2, 3)
    check_grads(lambda q, k, v: A.attention(q, k, v, causal=True), (q, k, v), order=2)
    check_grads(lambda q, k, v: A.attention(q, k, v, scale=0.3), (q, k, v), order=1)


def test_strided_heads_from_a_fused_projection():
    rng = np.random.default_rng(4)
    b, t, n, h = 2, 6, 3, 4
    x = rng.standard_normal((b, t, 8))
    w = rng.standard_normal((8, 3 * n * h))

    def attn(w, fused):
        qkv = fnp.reshape(x @ w, (b, t, 3 * n, h))
        q, k, v = fnp.split(qkv, 3, axis=2)   # strided views of one buffer
        o = nn.dot_product_attention(q, k, v, is_causal=True) if fused else composed(
            q, k, v, True)
        return fnp.sum(o ** 2)
    for fn in (funcgrad.jit, lambda f: f):
        val, g = fn(funcgrad.value_and_grad(lambda w: attn(w, True)))(w)
        val2, g2 = funcgrad.value_and_grad(lambda w: attn(w, False))(w)
        np.testing.assert_allclose(float(val), float(val2), rtol=1e-10)
        np.testing.assert_allclose(np.asarray(g), np.asarray(g2), rtol=1e-9, atol=1e-11)


def test_float32_and_float16_close_to_float64():
    q, k, v = _qkv(np.random.default_rng(5), 2, 9, 9, 2, 1, 8, 8)
    want = np.asarray(composed(q, k, v, True))
    for dt, tol in ((np.float32, 1e-5), (np.float16, 2e-2)):
        got = nn.dot_product_attention(*(a.astype(dt) for a in (q, k, v)), is_causal=True)
        assert got.dtype == dt
        np.testing.assert_allclose(np.asarray(got, np.float64), want, atol=tol, rtol=tol)


def test_vmap_and_unbatched():
    q, k, v = _qkv(np.random.default_rng(6), 3, 4, 4, 2, 2, 3, 3)
    f = lambda q, k, v: nn.dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    batched = funcgrad.vmap(f)(q, k, v)   # each call sees unbatched [T, N, H] operands
    np.testing.assert_allclose(np.asarray(batched), np.asarray(f(q, k, v)), rtol=1e-12)
    kb = funcgrad.vmap(f, in_axes=(0, None, None))(q, k[0], v[0])
    np.testing.assert_allclose(np.asarray(kb)[1], np.asarray(f(q[1:2], k[:1], v[:1]))[0],
                               rtol=1e-12)


def test_empty_keys_and_rows():
    q, k, v = _qkv(np.random.default_rng(7), 1, 3, 0, 2, 1, 2, 2)
    assert np.all(np.asarray(A.attention(q, k, v)) == 0)
    q, k, v = _qkv(np.random.default_rng(7), 1, 0, 4, 2, 1, 2, 2)
    assert np.asarray(A.attention(q, k, v, causal=True)).shape == (1, 0, 2, 2)


def test_head_dim_above_128_is_a_clear_error():
    q, k, v = _qkv(np.random.default_rng(8), 1, 2, 2, 1, 1, 129, 4)
    with pytest.raises(ValueError, match="head_dim 129.*128"):
        nn.dot_product_attention(q, k, v)
    with pytest.raises(ShapeError, match="head dims up to 128"):
        A.attention(q, k, v)
    q, k, v = _qkv(np.random.default_rng(8), 1, 2, 2, 1, 1, 128, 128)
    assert nn.dot_product_attention(q, k, v).shape == (1, 2, 1, 128)


def test_jitted_step_stores_no_t_by_s_buffer():
    t = 16
    q, k, v = _qkv(np.random.default_rng(9), 2, t, t, 2, 2, 4, 4, np.float32)

    def loss(q, k, v):
        return fnp.sum(nn.dot_product_attention(q, k, v, is_causal=True) ** 2)
    closed = funcgrad.make_jaxpr(funcgrad.grad(loss, argnums=(0, 1, 2)))(q, k, v)
    names = [e.prim.name for e in closed.eqns]
    assert {"attention", "attention_stats", "attention_dq", "attention_dkv"} <= set(names)
    assert not any(e.out.aval.shape[-2:] == (t, t) for e in closed.eqns), names


def _names(f, *args):
    return [e.prim.name for e in funcgrad.jit(f).lower(*args).expr.eqns]


def test_jitted_backward_merges_dq_and_dkv():
    # grads of q, k and v under jit: one attention_bwd for the pair; one gradient wanted, or
    # TF32 precision: the separate kernels stay
    q, k, v = _qkv(np.random.default_rng(12), 2, 6, 5, 4, 2, 3, 2)
    w = np.random.default_rng(13).standard_normal((2, 6, 4, 2))

    def loss(q, k, v, precision=None):
        return fnp.sum(A.attention(q, k, v, causal=True, precision=precision) * w)
    f = funcgrad.grad(loss, argnums=(0, 1, 2))
    names = _names(f, q, k, v)
    assert names.count("attention_bwd") == 1 and "attention_dq" not in names, names
    for g, h in zip(funcgrad.jit(f)(q, k, v), f(q, k, v)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(h), rtol=1e-12, atol=1e-13)
    names = _names(funcgrad.grad(loss), q, k, v)
    assert "attention_dq" in names and "attention_bwd" not in names, names
    names = _names(funcgrad.grad(lambda *a: loss(*a, "tensorfloat32"), argnums=(0, 1, 2)),
                   q, k, v)
    assert "attention_dkv" in names and "attention_bwd" not in names, names


@pytest.mark.parametrize("case", CASES[:3], ids=str)
def test_composed_pattern_is_rewritten_under_jit(case):
    *dims, causal = case
    q, k, v = _qkv(np.random.default_rng(10), *dims)
    if q.shape[2] != k.shape[2]:   # the pattern is plain multi-head (no repeat)
        g = q.shape[2] // k.shape[2]
        k, v = np.repeat(k, g, axis=2), np.repeat(v, g, axis=2)
    f = lambda q, k, v: composed(q, k, v, causal)  # noqa: E731
    names = _names(f, q, k, v)
    assert "attention" in names and "softmax" not in names, names
    np.testing.assert_allclose(np.asarray(funcgrad.jit(f)(q, k, v)), np.asarray(f(q, k, v)),
                               rtol=1e-10, atol=1e-12)


def test_pattern_variants_and_non_matches():
    rng = np.random.default_rng(11)
    args = [rng.standard_normal((3, 5, 4)) for _ in range(3)]   # [N, T, H]: one batch dim
    tril = np.tril(np.ones((5, 5), bool))

    def att(mask, fill=-1e30, div=True):
        def f(q, k, v):
            s = q @ fnp.swapaxes(k, -1, -2)
            s = s / 2.0 if div else s
            if mask is not None:
                s = fnp.where(mask, s, fill)
            return nn.softmax(s, axis=-1) @ v
        return f
    for f in (att(tril), att(None), att(np.ones((5, 5), bool)), att(tril, div=False),
              att(tril, fill=-np.inf)):
        names = _names(f, *args)
        assert "attention" in names and "softmax" not in names, names
        np.testing.assert_allclose(np.asarray(funcgrad.jit(f)(*args)), np.asarray(f(*args)),
                                   rtol=1e-10, atol=1e-12)
    band = np.triu(tril, -1)   # not causal: stays composed
    for f in (att(band), att(tril, fill=-1.0)):
        assert "softmax" in _names(f, *args)

    def shared(q, k, v):   # the probabilities used elsewhere: stays composed
        p = nn.softmax(q @ fnp.swapaxes(k, -1, -2), -1)
        return fnp.sum(p @ v) + fnp.sum(p)
    assert "attention" not in _names(shared, *args)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_jitted_training_step_reuses_the_forward_logsumexp(dtype):
    # value_and_grad under jit: the forward writes its logsumexp (attention_fwdl) and the
    # backward's statistics read it (attention_delta) instead of a second q.k pass
    q, k, v = _qkv(np.random.default_rng(10), 2, 9, 9, 4, 2, 8, 8, dtype)
    w = np.random.default_rng(11).standard_normal((2, 9, 4, 8)).astype(dtype)

    def loss(q, k, v):
        return fnp.sum(nn.dot_product_attention(q, k, v, is_causal=True) * w)
    f = funcgrad.value_and_grad(loss, argnums=(0, 1, 2))
    names = _names(f, q, k, v)
    assert "attention_fwdl" in names and "attention_delta" in names
    assert "attention_stats" not in names and "attention" not in names
    val, grads = funcgrad.jit(f)(q, k, v)
    want_val, want = f(q, k, v)     # eager: attention + attention_stats
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(float(val), float(want_val), rtol=tol)
    for g, h in zip(grads, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(h), rtol=tol * 10, atol=tol)
    # float16 keeps the separate statistics pass (its statistics are float32)
    q16, k16, v16 = (x.astype(np.float16) for x in (q, k, v))
    assert "attention_stats" in _names(funcgrad.value_and_grad(loss, argnums=(0, 1, 2)),
                                       q16, k16, v16)
