"""The CPU backend's fused attention kernels (funcgrad/backends/cpu/attention.py) against the
numpy impls of the attention primitives, through jit, with gradients and threads.

Tolerances: the kernels sum in another order than numpy's einsum and normalise by the row sum
(exp(x - m) / l) where the impls take exp(x - lse), so results agree to rounding: 2e-6 for
float32 and 1e-12 for float64, relative to the largest magnitude of each result.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import jit, nn
from funcgrad.backends.cpu import attention as CA
from funcgrad.prims import attention as A, attention_bwd as AB, attention_lse as AL
from funcgrad.test_util import check_grads

pytestmark = pytest.mark.skipif(CA._module() is None, reason="numba's np.dot needs SciPy")
TOL = {np.float32: 2e-6, np.float64: 1e-12}


def _close(got, want, dtype):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    fin = np.isfinite(want)
    np.testing.assert_array_equal(np.isfinite(got), fin)
    np.testing.assert_array_equal(got[~fin], want[~fin])   # the -inf logsumexp of no keys
    if fin.any():
        top = max(float(np.max(np.abs(want[fin]))), 1e-30)
        assert float(np.max(np.abs(got[fin] - want[fin]))) <= TOL[dtype] * top


def _operands(rng, dtype, b, t, s, kh, g, h, hv):
    q = rng.standard_normal((b, t, kh * g, h)).astype(dtype)
    k = rng.standard_normal((b, s, kh, h)).astype(dtype)
    v = rng.standard_normal((b, s, kh, hv)).astype(dtype)
    do = rng.standard_normal((b, t, kh * g, hv)).astype(dtype)
    return q, k, v, do


def _check_all(q, k, v, do, dtype, scale, causal):
    prm = {"scale": scale, "causal": causal}
    _close(CA._attention(q, k, v, **prm), A._attn_impl(q, k, v, **prm), dtype)
    _close(CA._fwdl(q, k, v, **prm), AL._fwdl_impl(q, k, v, **prm), dtype)
    o = A._attn_impl(q, k, v, **prm)
    stats = A._stats_impl(q, k, o, do, **prm)
    _close(CA._stats(q, k, o, do, **prm), stats, dtype)
    _close(CA._dq(q, k, v, do, stats, **prm), A._dq_impl(q, k, v, do, stats, **prm), dtype)
    _close(CA._dkv(q, k, v, do, stats, **prm), A._dkv_impl(q, k, v, do, stats, **prm), dtype)
    _close(CA.backward(q, k, v, do, stats, **prm), AB._bwd_impl(q, k, v, do, stats, **prm),
           dtype)
    if q.shape[1] == k.shape[1] and k.shape[3] == v.shape[3]:
        _close(CA.backward(q, k, v, do, stats, packed=True, **prm),
               AB._bwd_impl(q, k, v, do, stats, packed=True, **prm), dtype)


@given(b=st.integers(0, 2), t=st.integers(0, 5), s=st.integers(0, 5), kh=st.integers(1, 2),
       g=st.integers(1, 3), h=st.integers(0, 4), hv=st.integers(0, 3), causal=st.booleans(),
       dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2**16))
def test_kernels_match_numpy_impls(b, t, s, kh, g, h, hv, causal, dtype, seed):
    q, k, v, do = _operands(np.random.default_rng(seed), dtype, b, t, s, kh, g, h, hv)
    _check_all(q, k, v, do, dtype, 0.37, causal)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("t,s,causal", [(130, 130, True), (70, 150, True), (65, 3, False)])
def test_kernels_over_several_query_blocks(rng, dtype, t, s, causal):
    # more rows than one block (BLOCK = 64): blocks cut at the diagonal, a partial last block
    q, k, v, do = _operands(rng, dtype, 2, t, s, 2, 2, 8, 8)
    _check_all(q, k, v, do, dtype, 0.3, causal)


def test_strided_heads_as_a_gpt_splits_them(rng):
    # q, k, v as views of one [B, T, 3N, H] projection (non-contiguous head slices)
    qkv = rng.standard_normal((2, 9, 12, 8)).astype(np.float32)
    q, k, v = qkv[:, :, :4], qkv[:, :, 4:8], qkv[:, :, 8:]
    do = rng.standard_normal(q.shape).astype(np.float32)
    _check_all(q, k, v, do, np.float32, 0.35, True)


def test_same_bits_with_and_without_the_helper_thread(rng, monkeypatch):
    q, k, v, do = _operands(rng, np.float32, 4, 40, 40, 2, 2, 16, 16)
    stats = A._stats_impl(q, k, A._attn_impl(q, k, v, scale=0.25, causal=True), do,
                          scale=0.25, causal=True)
    monkeypatch.setattr(CA, "SPLIT_FLOPS", 1 << 62)
    one = CA._fwdl(q, k, v, scale=0.25, causal=True)
    one_b = CA.backward(q, k, v, do, stats, scale=0.25, causal=True)
    monkeypatch.setattr(CA, "SPLIT_FLOPS", 0)
    for _ in range(3):
        np.testing.assert_array_equal(CA._fwdl(q, k, v, scale=0.25, causal=True), one)
        np.testing.assert_array_equal(
            CA.backward(q, k, v, do, stats, scale=0.25, causal=True), one_b)


def _loss(q, k, v, w):
    return fnp.sum(nn.dot_product_attention(q, k, v, is_causal=True) * w)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_jitted_step_runs_the_kernels(rng, monkeypatch, dtype):
    monkeypatch.setenv("FUNCGRAD_CPU_FUSE_AFTER", "0")
    q, k, v, _ = _operands(rng, dtype, 2, 7, 7, 2, 2, 4, 4)
    w = rng.standard_normal(q.shape).astype(dtype)
    vg = funcgrad.value_and_grad(_loss, argnums=(0, 1, 2))
    f = jit(vg)
    got_val, got_g = f(q, k, v, w)
    plan = f.lower(q, k, v, w).compile()
    kernels = {s.eqn.prim.name for s in plan.program.steps
               if isinstance(s.fn, functools.partial) and s.fn.func in CA.KERNELS.values()}
    assert kernels == {"attention_fwdl", "attention_bwd"}
    want_val, want_g = vg(q, k, v, w)   # eager: the numpy impls
    _close(got_val, want_val, dtype)
    for a, b in zip(got_g, want_g):
        _close(a, b, dtype)


def test_grads_float64_through_jit(rng, monkeypatch):
    monkeypatch.setenv("FUNCGRAD_CPU_FUSE_AFTER", "0")
    q, k, v, _ = _operands(rng, np.float64, 1, 5, 5, 1, 2, 3, 3)
    w = rng.standard_normal(q.shape)
    check_grads(jit(lambda q, k, v: _loss(q, k, v, w)), (q, k, v), order=1, modes=("rev",))
