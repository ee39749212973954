"""The saved-logsumexp attention pair (funcgrad/prims/attention_lse.py, attention_bwd.py):
attention_fwdl on every
float dtype (16-bit: the float32 lse as bit pairs), attention_bwdl from the forward's o and lse,
their vmap rule, the CUDA plan's rewrite to the pair (compile/rewrites/attention_lse.py,
rewrite_saved) with the fallback kernels bit-identical to the unrewritten plan (the simulator
forces it), and on a GPU with cuDNN's frontend the fused SDPA against float64 references."""
from __future__ import annotations

import numpy as np
import pytest
from attention_cases import dev as _dev
from attention_cases import operands
from attention_cases import sim as _sim
from attention_cases import usable as _usable
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import nn
from funcgrad.core import bind
from funcgrad.core.dtypes import bfloat16
from funcgrad.prims import attention as A
from funcgrad.prims import attention_bwd as AB
from funcgrad.prims import attention_lse as AL

needs_cuda = pytest.mark.skipif(not _usable(), reason="no GPU and no CUDA simulator")
HALF = [bfloat16, np.float16]


def _ops(b, t, s, kh, g, h, hv, dtype):
    _, q, k, v, do = operands(b, t, s, kh, g, h, hv)
    return [x.astype(dtype) for x in (q, k, v, do)]


@settings(max_examples=12, deadline=None)
@given(b=st.integers(0, 2), t=st.integers(0, 7), s=st.integers(0, 7), kh=st.integers(1, 2),
       g=st.integers(1, 2), h=st.integers(1, 6), causal=st.booleans(),
       dt=st.sampled_from([np.float32, np.float64, bfloat16, np.float16]))
def test_fwdl_layout_and_bwdl_match_the_unfused_primitives(b, t, s, kh, g, h, causal, dt):
    """fwdl = o then the lse (16-bit: the float32 lse's bits, two elements a row); bwdl from it
    equals attention_bwd of attention_stats' statistics, on every float dtype."""
    q, k, v, do = _ops(b, t, s, kh, g, h, h if s == t else h + 1, dt)   # packed: S == T, H == Hv
    prm = {"scale": 0.4, "causal": causal}
    fl = AL._fwdl_impl(q, k, v, **prm)
    assert fl.dtype == np.dtype(dt)
    assert fl.shape == AL._fwdl_shape(*(funcgrad.core.aval_of(x) for x in (q, k, v)),
                                      **prm).shape
    o, lse = AL.split_saved(fl, q, v)
    np.testing.assert_array_equal(o, A._attn_impl(q, k, v, **prm))
    st_ = A._stats_impl(q, k, o, do, **prm)
    assert lse.dtype == st_.dtype
    np.testing.assert_array_equal(lse, st_[..., 0])
    for packed in ([False, True] if s == t else [False]):
        got = AB._bwdl_impl(q, k, v, do, fl, **prm, packed=packed)
        want = AB._bwd_impl(q, k, v, do, st_, **prm, packed=packed)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=1e-6, atol=1e-6)


def test_bwdl_rejects_a_flat_result_of_another_shape():
    q, k, v, do = _ops(1, 3, 3, 1, 1, 4, 4, bfloat16)
    prm = {"scale": 0.5, "causal": True}
    fl = AL._fwdl_impl(q, k, v, **prm)
    with pytest.raises(TypeError, match="attention_fwdl's result bfloat16"):
        bind(AB.attention_bwdl_p, q, k, v, do, fl[:-1], **prm)


def test_saved_pair_vmaps_as_a_loop():
    """vmap of fwdl and bwdl (the flat results re-split per mapped row) equals a loop."""
    import funcgrad as fg
    ops = [np.stack(x) for x in zip(*(_ops(1, 4, 5, 1, 2, 3, 3, np.float64)
                                      for _ in range(3)))]
    for i, x in enumerate(ops):
        x += i * 0.1 * np.arange(x.size).reshape(x.shape) / x.size
    prm = {"scale": 0.7, "causal": False}

    def pair(q, k, v, do):
        fl = bind(AL.attention_fwdl_p, q, k, v, **prm)
        return fl, bind(AB.attention_bwdl_p, q, k, v, do, fl, **prm)
    got = fg.vmap(pair)(*ops)
    for i in range(3):
        want = pair(*(x[i] for x in ops))
        for g_, w_ in zip(got, want):
            np.testing.assert_allclose(np.asarray(g_)[i], np.asarray(w_), rtol=1e-12)


def _step_loss(dt, fused):
    """A mixed-precision attention loss; fused: q, k, v split from one [B, T, 3N, H] array (a
    GPT's fused projection: attention_bwd's packed layout)."""
    def loss(q, k, v):
        if fused:
            qkv = fnp.concatenate([q, k, v], axis=2).astype(dt)
            q_, k_, v_ = fnp.split(qkv, 3, axis=2)
        else:
            q_, k_, v_ = q.astype(dt), k.astype(dt), v.astype(dt)
        o = nn.dot_product_attention(q_, k_, v_, is_causal=True)
        return fnp.sum(o.astype(np.float32) ** 2)
    return loss


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("dt", HALF)
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("wrt", [(0, 1, 2), (0,)])
def test_plan_rewrite_to_the_saved_pair(monkeypatch, dt, fused, wrt):
    """A 16-bit attention grad step's CUDA plan with the rewrite forced: attention_fwdl /
    attention_bwdl and no statistics pass; on the fallback kernels (no cuDNN: the simulator)
    its values and gradients equal the unrewritten plan's bit for bit."""
    from funcgrad.cuda import cudnn_attn
    b, t, kh, g, h = (1, 9, 1 if fused else 2, 1 if fused else 2, 16) if _sim() else \
        (2, 200, 2, 2, 64)
    _, q, k, v, _ = operands(b, t, t, kh, g, h, h)
    if fused:
        k, v = (np.ascontiguousarray(np.repeat(x, g, axis=2)) for x in (k, v))
    args = _dev(q, k, v)
    res, descs = {}, {}
    for flag in (False, True):
        monkeypatch.setattr(cudnn_attn, "REWRITE", flag)
        f = funcgrad.jit(funcgrad.value_and_grad(_step_loss(dt, fused), argnums=wrt))
        descs[flag] = f.lower(*args).compile().describe()
        val, grads = f(*args)
        res[flag] = [np.asarray(val)] + [np.asarray(x) for x in grads]
    assert "attention_fwdl" in descs[True] and "attention_bwdl" in descs[True]
    assert "attention_stats" not in descs[True] and "attention_stats" in descs[False]
    if cudnn_attn.backend().startswith("numba"):
        for a, b_ in zip(res[False], res[True]):
            np.testing.assert_array_equal(a, b_)
    else:   # cuDNN's kernels: within the 16-bit bound of the numba kernels' results
        for a, b_ in zip(res[False], res[True]):
            scale = max(1.0, float(np.abs(a).max()))
            assert float(np.abs(a.astype(np.float64) - b_).max()) <= 3e-2 * scale


def _close(got, want, name, h):
    got = np.asarray(got).astype(np.float64)
    bound = 3e-2 * max(1.0, float(np.abs(want).max())) * max(1.0, np.sqrt(h / 64))
    err = float(np.abs(got - want).max())
    assert err <= bound, f"{name}: max error {err:.2e} over the 16-bit bound {bound:.2e}"


def _cudnn():
    if _sim() or not _usable():
        return False
    from funcgrad.cuda import cudnn_attn
    return not cudnn_attn.backend().startswith("numba")


@pytest.mark.cuda
@needs_cuda
@pytest.mark.skipif(not _cudnn(), reason="needs a GPU with cuDNN's frontend (the cudnn extra)")
@pytest.mark.parametrize("dt", HALF)
@pytest.mark.parametrize("shape", [(2, 1024, 1024, 2, 4, 128, True), (1, 300, 257, 2, 1, 64,
                                                                       False),
                                   (4, 128, 128, 12, 1, 64, True)])
def test_cudnn_sdpa_matches_float64(dt, shape):
    """cuDNN's forward (with its lse) and backward at real sizes (T 1024, head dim 128, GQA 8
    on 2, T != S, non-causal) within the 16-bit bound of float64 references of the rounded
    operands; its backward bit-identical across two calls (the deterministic algorithm)."""
    from funcgrad.cuda import cudnn_attn
    b, t, s, kh, g, h, causal = shape
    q, k, v, do = _ops(b, t, s, kh, g, h, h, dt)
    prm = {"scale": float(1 / np.sqrt(h)), "causal": causal}
    q64, k64, v64, do64 = (x.astype(np.float64) for x in (q, k, v, do))
    before = dict(cudnn_attn.calls)
    d = _dev(q, k, v, do)
    fl = np.asarray(bind(AL.attention_fwdl_p, *d[:3], **prm))
    o, lse = AL.split_saved(fl, q, v)
    o64 = A._attn_impl(q64, k64, v64, **prm)
    _close(o, o64, "o", h)
    np.testing.assert_allclose(lse, AL._lse_impl(q64, k64, prm["scale"], causal), atol=2e-2)
    fld = _dev(fl)[0]
    got = [np.asarray(bind(AB.attention_bwdl_p, *d, fld, **prm)) for _ in range(2)]
    np.testing.assert_array_equal(got[0].view(np.uint16), got[1].view(np.uint16))
    st64 = A._stats_impl(q64, k64, o.astype(np.float64), do64, **prm)
    _close(got[0], AB._bwd_impl(q64, k64, v64, do64, st64, **prm), "bwd", h)
    assert cudnn_attn.calls["fwd_stats"] > before["fwd_stats"]
    assert cudnn_attn.calls["bwd"] >= before["bwd"] + 2
