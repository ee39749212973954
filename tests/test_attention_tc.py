"""TF32 tensor-core flash attention (funcgrad/cuda/attention_tc.py): the kernels against the
float64 numpy impls within the TF32 bound, and the precision param reaching them from
nn.dot_product_attention and from the composed pattern (the simulator emulates the mma)."""
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
from funcgrad.prims import attention_lse as AL
from funcgrad.prims import attention as A
from funcgrad import nn
from funcgrad.core import bind

TF32 = {"precision": "tensorfloat32"}


def _close(got, want, name, h=64):
    """The TF32 bound: operands keep 10 mantissa bits (relative rounding 2^-11), products and
    sums stay float32; for unit-normal operands the error stays under 1% of the largest
    output magnitude up to head dim 64 (measured: <= 3e-3 under the simulator at head dim
    <= 16), growing as sqrt(h) above it: an h-term TF32 dot product's rounding error grows as
    sqrt(h), and dS = P (dP - delta) cancels to zero where one key is visible, leaving only
    that error (H200, 2026-11-24: dq 1.07e-2 at h = 128 with one key)."""
    got = np.asarray(got, np.float64)
    if not want.size:
        return
    bound = 1e-2 * max(1.0, float(np.abs(want).max())) * max(1.0, np.sqrt(h / 64))
    err = float(np.abs(got - want).max())
    assert err <= bound, f"{name}: max error {err:.2e} over the TF32 bound {bound:.2e}"


# simulator: two query tiles (16 rows, one warp), three key tiles (8); GPU: several tiles,
# partial ones, and each padded head dim (one class per test, so parallel workers compile them)
_LEN = 20 if _sim() else 150
_DIMS = [12] if _sim() else [16, 32, 64, 128]


@pytest.mark.cuda
@pytest.mark.skipif(not _usable(), reason="no GPU and no CUDA simulator")
@pytest.mark.parametrize("dim", _DIMS)
@settings(max_examples=3 if _sim() else 8, deadline=None)
@given(b=st.integers(0, 2), t=st.integers(0, _LEN), s=st.integers(1, _LEN),
       kh=st.integers(1, 2), g=st.integers(1, 2), hd=st.integers(0, 4), hvd=st.integers(0, 4),
       causal=st.booleans(), strided=st.booleans())
def test_tc_kernels_match_numpy(dim, b, t, s, kh, g, hd, hvd, causal, strided):
    # head dims near the class's top (the padded dim); the simulator's class is 1..12
    h, hv = (1 + hd * 11 // 4, 1 + hvd * 11 // 4) if _sim() else (dim - hd, dim - hvd)
    qf, q, k, v, do = operands(b, t, s, kh, g, h, hv)
    prm = {"scale": 0.3, "causal": causal}
    q64, k64, v64, do64 = (x.astype(np.float64) for x in (q, k, v, do))
    o = A._attn_impl(q64, k64, v64, **prm)
    st64 = A._stats_impl(q64, k64, o, do64, **prm)
    qd, kd, vd, dod = _dev(q, k, v, do)
    std = _dev(st64.astype(np.float32))[0]
    if strided:   # query heads read through strides at an offset
        qd = _dev(qf)[0][..., 1:]
    for prim, args, want in [
            (A.attention_p, (qd, kd, vd), o),
            (AL.attention_fwdl_p, (qd, kd, vd), AL._fwdl_impl(q64, k64, v64, **prm)),
            (A.attention_dq_p, (qd, kd, vd, dod, std),
             A._dq_impl(q64, k64, v64, do64, st64, **prm)),
            (A.attention_dkv_p, (qd, kd, vd, dod, std),
             A._dkv_impl(q64, k64, v64, do64, st64, **prm))]:
        got = bind(prim, *args, **prm, **TF32)
        assert got.dtype == np.float32
        _close(got, want, prim.name, max(h, hv))


@pytest.mark.cuda
@pytest.mark.skipif(not _usable(), reason="no GPU and no CUDA simulator")
def test_tf32_config_runs_tc_kernels_in_a_jitted_grad():
    """Under default_matmul_precision "tensorfloat32", nn.dot_product_attention's jitted
    gradient takes the tensor-core kernels (forward and backward) and the composed pattern's
    forward does too; results stay within the TF32 bound of the exact ones."""
    from funcgrad.cuda import runtime
    rng = np.random.default_rng(1)
    b, t, n, h = 1, 18, 2, 8
    x = rng.standard_normal((b, t, 8)).astype(np.float32)
    w = (rng.standard_normal((8, 3 * n * h)) * 0.5).astype(np.float32)

    def heads(w, x):
        qkv = fnp.reshape(x @ w, (b, t, 3 * n, h))
        return fnp.split(qkv, 3, axis=2)

    def fused(w, x):
        q, k, v = heads(w, x)
        return fnp.sum(nn.dot_product_attention(q, k, v, is_causal=True) ** 2)

    def composed(w, x):
        q, k, v = heads(w, x)
        s = fnp.einsum("btnh,bsnh->bnts", q, k) / float(np.sqrt(h))
        s = fnp.where(fnp.tril(fnp.ones((t, t), bool)), s, -fnp.inf)
        return fnp.einsum("bnts,bsnh->btnh", nn.softmax(s, axis=-1), v)

    w64, x64 = w.astype(np.float64), x.astype(np.float64)
    for f, want, modes in [
            (funcgrad.value_and_grad(fused), funcgrad.value_and_grad(fused)(w64, x64),
             {"fwdl", "dq", "dkv"}),
            (composed, fused_out(heads, w64, x64), {"fwd"})]:
        runtime._kernels.clear()
        with funcgrad.default_matmul_precision("tensorfloat32"):
            got = funcgrad.jit(f)(*_dev(w, x))
        used = {key[1] for key in runtime._kernels if key[0] == "attention_tc"}
        assert modes <= used, (f.__name__, used)
        for g_, w_ in zip(funcgrad.tree_util.tree_leaves(got),
                          funcgrad.tree_util.tree_leaves(want)):
            _close(g_, np.asarray(w_), f.__name__)


def fused_out(heads, w, x):
    q, k, v = heads(w, x)
    return nn.dot_product_attention(q, k, v, is_causal=True)


def test_precision_param_follows_the_config():
    """attention_p carries precision="tensorfloat32" only under TF32 (or bfloat16) precision;
    exact float32 keeps today's params, so nothing else changes."""
    q = np.ones((1, 4, 2, 8), np.float32)

    def prims(f):
        text = funcgrad.jit(f).lower(q).as_text()
        return [ln for ln in text.splitlines() if "= attention[" in ln]

    def fused(q):
        return nn.dot_product_attention(q, q, q, is_causal=True)

    def composed(q):
        s = fnp.einsum("btnh,bsnh->bnts", q, q) * 0.5
        return fnp.einsum("bnts,bsnh->btnh", nn.softmax(s, axis=-1), q)

    for f in (fused, composed):
        assert prims(f) and not any("tensorfloat32" in ln for ln in prims(f)), f.__name__
        for p in ("tensorfloat32", "bfloat16"):
            with funcgrad.default_matmul_precision(p):
                assert all("tensorfloat32" in ln for ln in prims(f)), (f.__name__, p)
    assert A.attention_precision("high") == "tensorfloat32"
    assert A.attention_precision("highest") is None
