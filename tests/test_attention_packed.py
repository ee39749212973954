"""attention_bwd's packed layout: the backward of heads split from one fused qkv projection stores
[B, T, N + 2K, H] directly (no concatenate after the kernel); its rules and the rewrite."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from attention_cases import unpacked_to_packed

import funcgrad
import funcgrad.numpy as fnp
from funcgrad.prims import attention_bwd as AB
from funcgrad.prims import attention as A
from funcgrad import nn
from funcgrad.core import ShapeError, bind
from funcgrad.test_util import check_grads

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import gpt


def _operands(rng, b, t, s, n, kh, h, hv, causal, dtype=np.float64):
    q = rng.standard_normal((b, t, n, h)).astype(dtype)
    k = rng.standard_normal((b, s, kh, h)).astype(dtype)
    v = rng.standard_normal((b, s, kh, hv)).astype(dtype)
    do = rng.standard_normal((b, t, n, hv)).astype(dtype)
    prm = {"scale": 0.4, "causal": causal}
    st = A._stats_impl(q, k, A._attn_impl(q, k, v, **prm), do, **prm)
    return (q, k, v, do, st), prm


PACKABLE = [  # b, t, n, kh, h, causal: S == T, H == Hv; plain multi-head and GQA
    (2, 5, 2, 2, 3, True), (1, 7, 4, 2, 2, False), (2, 3, 3, 1, 4, True), (1, 1, 1, 1, 1, True)]


@pytest.mark.parametrize("case", PACKABLE, ids=str)
def test_packed_impl_is_the_unpacked_result_rearranged(case):
    b, t, n, kh, h, causal = case
    args, prm = _operands(np.random.default_rng(t + n), b, t, t, n, kh, h, h, causal)
    flat = AB._bwd_impl(*args, **prm)
    packed = AB._bwd_impl(*args, **prm, packed=True)
    assert packed.shape == flat.shape
    np.testing.assert_array_equal(packed.reshape(b, t, n + 2 * kh, h),
                                  unpacked_to_packed(flat, b, t, n, kh, h))
    got = bind(AB.attention_bwd_p, *args, **prm, packed=True)   # the primitive's own rules
    np.testing.assert_array_equal(np.asarray(got), packed)


def test_packed_needs_s_equal_t_and_h_equal_hv():
    for dims in ((1, 3, 4, 2, 1, 2, 2), (1, 3, 3, 2, 1, 2, 3)):   # S != T; H != Hv
        args, prm = _operands(np.random.default_rng(0), *dims, True)
        with pytest.raises(ShapeError, match="packed layout"):
            bind(AB.attention_bwd_p, *args, **prm, packed=True)
        bind(AB.attention_bwd_p, *args, **prm)   # the unpacked layout takes them


def test_packed_rules_vjp_jvp_and_vmap():
    args, prm = _operands(np.random.default_rng(1), 1, 3, 3, 2, 1, 2, 2, True)
    q, k, v, do, st = args
    check_grads(lambda q, k, v, do: bind(AB.attention_bwd_p, q, k, v, do, st, **prm,
                                         packed=True), (q, k, v, do), order=1)
    # vmap over a leading axis: each mapped element's packed rows, as a loop gives them
    xs, _ = _operands(np.random.default_rng(2), 3, 4, 4, 2, 2, 3, 3, False)
    xs = [x[:, None] for x in xs]   # [3, 1, ...]: map over 3, batch 1 inside
    f = lambda *a: bind(AB.attention_bwd_p, *a, **prm, packed=True)
    got = np.asarray(funcgrad.vmap(f)(*xs))
    want = np.stack([np.asarray(f(*(x[i] for x in xs))) for i in range(3)])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)


def _fused_qkv_loss(b, t, n, kh, h, order=(0, 1, 2)):
    """sum(attention(q, k, v)^2) of q, k, v split from one projection x @ w: [N | K | K]
    heads (GQA when K < N); order: which of q, k, v each head group is."""
    rng = np.random.default_rng(b + t + n)
    x = rng.standard_normal((b, t, 5))
    w = rng.standard_normal((5, (n + 2 * kh) * h)) * 0.5

    def loss(w, x):
        qkv = fnp.reshape(x @ w, (b, t, n + 2 * kh, h))
        parts = fnp.split(qkv, [n, n + kh], axis=2) if n != kh else fnp.split(qkv, 3, axis=2)
        q, k, v = (parts[i] for i in order)
        return fnp.sum(nn.dot_product_attention(q, k, v, is_causal=True) ** 2)
    return loss, (w, x)


def _bwd_eqns(f, *args):
    return [e for e in funcgrad.jit(f).lower(*args).expr.eqns if e.prim is AB.attention_bwd_p]


@pytest.mark.parametrize("dims", [(2, 6, 2, 2, 3), (1, 5, 4, 2, 2)], ids=["mha", "gqa"])
def test_fused_projection_gradient_is_packed_and_equal(dims):
    loss, args = _fused_qkv_loss(*dims)
    f = funcgrad.value_and_grad(loss)
    (bw,) = _bwd_eqns(f, *args)
    assert bw.params.get("packed") is True
    val, g = funcgrad.jit(f)(*args)
    val_e, g_e = f(*args)   # eager: attention_dq, attention_dkv and the concatenate
    np.testing.assert_allclose(float(val), float(val_e), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(g), np.asarray(g_e), rtol=1e-10, atol=1e-12)


def test_other_orders_and_layouts_stay_unpacked():
    # heads concatenated in another order (k, q, v): not the packed layout
    loss, args = _fused_qkv_loss(1, 4, 2, 2, 3, order=(1, 0, 2))
    f = funcgrad.grad(loss)
    (bw,) = _bwd_eqns(f, *args)
    assert "packed" not in bw.params
    np.testing.assert_allclose(np.asarray(funcgrad.jit(f)(*args)), np.asarray(f(*args)),
                               rtol=1e-10, atol=1e-12)
    # S != T and H != Hv: separate operands, the unpacked layout
    for s, hv in ((5, 3), (4, 2)):
        args, _ = _operands(np.random.default_rng(s), 1, 4, s, 2, 1, 3, hv, True)
        q, k, v = args[:3]

        def loss2(q, k, v):
            return fnp.sum(nn.dot_product_attention(q, k, v, is_causal=True) ** 2)
        g = funcgrad.grad(loss2, argnums=(0, 1, 2))
        (bw,) = _bwd_eqns(g, q, k, v)
        assert "packed" not in bw.params
        for a, b_ in zip(funcgrad.jit(g)(q, k, v), g(q, k, v)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b_), rtol=1e-10, atol=1e-12)


def test_other_readers_of_the_views_read_slices_of_the_packed_array():
    # dq, dk and dv also used on their own (here: returned): slices of the packed rows
    b, t, n, h = 1, 5, 2, 3
    rng = np.random.default_rng(3)
    qkv = rng.standard_normal((b, t, 3 * n, h))
    ct = rng.standard_normal((b, t, n, h))

    def f(qkv):
        q, k, v = fnp.split(qkv, 3, axis=2)
        _, vjp = funcgrad.vjp(lambda q, k, v: nn.dot_product_attention(q, k, v, is_causal=True),
                              q, k, v)
        dq, dk, dv = vjp(ct)
        return fnp.concatenate([dq, dk, dv], axis=2), dq, dk * 2, dv
    (bw,) = _bwd_eqns(f, qkv)
    assert bw.params.get("packed") is True
    for a, b_ in zip(funcgrad.jit(f)(qkv), f(qkv)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b_), rtol=1e-10, atol=1e-12)


def test_w2_program_has_no_concatenate_after_attention_bwd():
    cfg = gpt.Config(vocab=16, d=16, layers=2, heads=2, ctx=8)
    params = gpt.init_params(cfg)
    idx = np.random.default_rng(0).integers(0, cfg.vocab, (2, cfg.ctx)).astype(np.int32)
    f = funcgrad.value_and_grad(lambda p, i, y: gpt.loss_fn(p, i, y, cfg))
    expr = funcgrad.jit(f).lower(params, idx, idx).expr
    bws = [i for i, e in enumerate(expr.eqns) if e.prim is AB.attention_bwd_p]
    assert len(bws) == cfg.layers
    assert all(expr.eqns[i].params.get("packed") is True for i in bws)
    assert not [e for e in expr.eqns[bws[0]:] if e.prim.name == "concatenate"], \
        funcgrad.jit(f).lower(params, idx, idx).as_text()
    val, g = funcgrad.jit(f)(params, idx, idx)
    val_e, g_e = f(params, idx, idx)
    np.testing.assert_allclose(float(val), float(val_e), rtol=1e-5)
    for a, b_ in zip(funcgrad.tree_util.tree_leaves(g), funcgrad.tree_util.tree_leaves(g_e)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b_), rtol=1e-4, atol=1e-6)
