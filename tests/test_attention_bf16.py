"""bfloat16 flash attention on tensor cores (funcgrad/cuda/attention_bf.py, attention_bfl.py):
the forward, statistics, dq and dkv kernels (the simulator runs the same source with Python
stand-ins for the mma) against the float64 numpy impls of the bf16-rounded operands within
the bf16 bound, causal, grouped-query, strided (16-bit element loads), attention_bwd packed
and not, the numpy impls' dtypes, and T 4096 / head dim 128 GQA on a GPU."""
from __future__ import annotations

import numpy as np
import pytest
from attention_cases import dev as _dev
from attention_cases import operands
from attention_cases import sim as _sim
from attention_cases import usable as _usable
from hypothesis import given, settings
from hypothesis import strategies as st
from test_attention_hd128 import _reference

from funcgrad.core import bind
from funcgrad.core.dtypes import bfloat16
from funcgrad.prims import attention as A
from funcgrad.prims import attention_bwd as AB

needs_cuda = pytest.mark.skipif(not _usable(), reason="no GPU and no CUDA simulator")


def _close(got, want, name, h=64):
    """The bf16 bound: operands are exact bf16 (the reference computes on the same values),
    products and sums float32; probabilities (dS) round to bf16 (relative 2^-9) before the
    second product and outputs once more, so the error stays near 1% of the largest output
    magnitude, growing as sqrt(h) above head dim 64 (measured: <= 1.2e-2 of it under the
    simulator)."""
    got = np.asarray(got).astype(np.float64)
    if not want.size:
        return
    finite = np.abs(want[np.isfinite(want)])
    bound = 3e-2 * max(1.0, float(finite.max(initial=0.0))) * max(1.0, np.sqrt(h / 64))
    with np.errstate(invalid="ignore"):   # equal infinities (no keys: lse -inf) are no error
        err = float(np.where(got == want, 0.0, np.abs(got - want)).max())
    assert err <= bound, f"{name}: max error {err:.2e} over the bf16 bound {bound:.2e}"


def _bf(*xs):
    return [x.astype(bfloat16) for x in xs]


_LEN = 20 if _sim() else 150
_DIMS = [16] if _sim() else [64, 128]


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("dim", _DIMS)
@settings(max_examples=3 if _sim() else 8, deadline=None)
@given(b=st.integers(0, 2), t=st.integers(0, _LEN), s=st.integers(0, _LEN),
       kh=st.integers(1, 2), g=st.integers(1, 2), hd=st.integers(0, 4), hvd=st.integers(0, 4),
       causal=st.booleans(), strided=st.booleans())
def test_bf16_kernels_match_numpy(dim, b, t, s, kh, g, hd, hvd, causal, strided):
    h, hv = (1 + hd * 15 // 4, 1 + hvd * 15 // 4) if _sim() else (dim - 8 * hd, dim - 8 * hvd)
    qf, q, k, v, do = operands(b, t, s, kh, g, h, hv)
    qf, q, k, v, do = _bf(qf, q, k, v, do)
    prm = {"scale": 0.3, "causal": causal}
    q64, k64, v64, do64 = (x.astype(np.float64) for x in (q, k, v, do))
    o = A._attn_impl(q64, k64, v64, **prm)
    ob = o.astype(bfloat16)
    st64 = A._stats_impl(q64, k64, ob.astype(np.float64), do64, **prm)
    qd, kd, vd, dod, od = _dev(q, k, v, do, ob)
    std = _dev(st64.astype(np.float32))[0]
    if strided:   # query heads read through strides at an odd offset: 16-bit element loads
        qd = _dev(qf)[0][..., 1:]
    for prim, args, want, dt in [
            (A.attention_p, (qd, kd, vd), o, bfloat16),
            (A.attention_stats_p, (qd, kd, od, dod), st64, np.float32),
            (A.attention_dq_p, (qd, kd, vd, dod, std),
             A._dq_impl(q64, k64, v64, do64, st64, **prm), bfloat16),
            (A.attention_dkv_p, (qd, kd, vd, dod, std),
             A._dkv_impl(q64, k64, v64, do64, st64, **prm), bfloat16)]:
        got = bind(prim, *args, **prm)
        assert got.dtype == dt, (prim.name, got.dtype)
        _close(got, want, prim.name, max(h, hv))


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("packed", [False, True])
def test_bf16_bwd_matches_numpy(packed):
    """attention_bwd on bf16 (the jit rewrite's merged backward): dq and dkv kernels storing
    into the flat result's views, the packed [B, T, N + 2K, H] rows included; GQA split."""
    b, t, kh, g, h = (1, 21, 1, 2, 16) if _sim() else (2, 300, 2, 4, 128)
    _, q, k, v, do = _bf(*operands(b, t, t, kh, g, h, h))
    prm = {"scale": float(1 / np.sqrt(h)), "causal": True}
    q64, k64, v64, do64 = (x.astype(np.float64) for x in (q, k, v, do))
    o = A._attn_impl(q64, k64, v64, **prm)
    st64 = A._stats_impl(q64, k64, o, do64, **prm)
    args = (*_dev(q, k, v, do), _dev(st64.astype(np.float32))[0])
    got = bind(AB.attention_bwd_p, *args, **prm, packed=packed)
    assert got.dtype == bfloat16
    want = AB._bwd_impl(q64, k64, v64, do64, st64, **prm, packed=packed)
    _close(got, want, "attention_bwd", h)


def test_bf16_jitted_grad_on_cpu_matches_float64():
    """A mixed-precision loss (float32 operands cast to bf16 for attention, the output back to
    float32) differentiates through the bf16 attention primitives on the CPU backend, jitted:
    float32 gradients within the bf16 bound of the float64 ones."""
    import funcgrad
    import funcgrad.numpy as fnp
    from funcgrad import nn
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 6, 4, 8)).astype(np.float32)
    k, v = (rng.standard_normal((1, 6, 2, 8)).astype(np.float32) for _ in range(2))

    def loss(q, k, v, dt=bfloat16):
        o = nn.dot_product_attention(q.astype(dt), k.astype(dt), v.astype(dt), is_causal=True)
        return fnp.sum(o.astype(q.dtype) ** 2)
    cpu = [funcgrad.device_put(x, "cpu") for x in (q, k, v)]
    got = funcgrad.jit(funcgrad.grad(loss, argnums=(0, 1, 2)))(*cpu)
    want = funcgrad.grad(lambda *a: loss(*a, dt=np.float64), argnums=(0, 1, 2))(
        *(x.astype(np.float64) for x in (q, k, v)))
    for name, g_, w_ in zip("qkv", got, want):
        assert g_.dtype == np.float32
        _close(g_, np.asarray(w_), f"d{name}", 8)


def test_bf16_numpy_impls_compute_in_float32():
    """The numpy impls (CPU backend) take bf16 operands: results bf16, stats float32."""
    _, q, k, v, do = _bf(*operands(1, 5, 6, 1, 2, 8, 8))
    prm = {"scale": 0.5, "causal": True}
    o = A._attn_impl(q, k, v, **prm)
    st_ = A._stats_impl(q, k, o, do, **prm)
    assert o.dtype == bfloat16 and st_.dtype == np.float32
    assert A._dq_impl(q, k, v, do, st_, **prm).dtype == bfloat16
    want = A._attn_impl(*(x.astype(np.float64) for x in (q, k, v)), **prm)
    _close(o, want, "numpy attention", 8)


@pytest.mark.cuda
@needs_cuda
@pytest.mark.skipif(_sim(), reason="GPU only: T = 4096 would take hours in the simulator")
def test_bf16_long_sequence_gqa_hd128_matches_float64():
    """T = 4096, head dim 128, 8 query heads on 2 key heads, causal: o, the statistics, dq
    and dkv within the bf16 bound of a float64 reference of the bf16 operands; dkv (split over
    query heads) bit-identical across two calls."""
    b, t, n, kh, h = 1, 4096, 8, 2, 128
    rng = np.random.default_rng(11)
    q, do = _bf(*(rng.standard_normal((b, t, n, h)).astype(np.float32) for _ in range(2)))
    k, v = _bf(*(rng.standard_normal((b, t, kh, h)).astype(np.float32) for _ in range(2)))
    scale = float(1 / np.sqrt(h))
    o, lse, dq, dk, dv = _reference(q, k, v, do, scale)
    prm = {"scale": scale, "causal": True}
    qd, kd, vd, dod = _dev(q, k, v, do)
    _close(bind(A.attention_p, qd, kd, vd, **prm), o, "o", h)
    ob = o.astype(bfloat16)
    got = np.asarray(bind(A.attention_stats_p, qd, kd, _dev(ob)[0], dod, **prm))
    delta_b = (ob.astype(np.float64) * do.astype(np.float64)).sum(axis=-1).transpose(0, 2, 1)
    _close(got[..., 0], lse, "lse", h)
    _close(got[..., 1], delta_b, "delta", h)
    delta = (o * do.astype(np.float64)).sum(axis=-1).transpose(0, 2, 1)
    std = _dev(np.stack([lse, delta], axis=-1).astype(np.float32))[0]
    _close(bind(A.attention_dq_p, qd, kd, vd, dod, std, **prm), dq, "dq", h)
    got = np.asarray(bind(A.attention_dkv_p, qd, kd, vd, dod, std, **prm))
    _close(got, np.concatenate([dk, dv], axis=-1), "dkv", h)
    again = np.asarray(bind(A.attention_dkv_p, qd, kd, vd, dod, std, **prm))
    assert np.array_equal(got.view(np.uint16), again.view(np.uint16))
