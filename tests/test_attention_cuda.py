"""CUDA flash-attention kernels against the numpy impls: causal, grouped-query, T != S, strided
heads, several tiles and lanes (tiny shapes under the simulator in CI, a real GPU otherwise)."""
from __future__ import annotations

import numpy as np
import pytest
from attention_cases import dev as _dev
from attention_cases import operands, unpacked_to_packed
from attention_cases import sim as _sim
from attention_cases import usable as _usable
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad
import funcgrad.numpy as fnp
from funcgrad.prims import attention_bwd as AB
from funcgrad.prims import attention_lse as AL
from funcgrad.prims import attention as A
from funcgrad import nn
from funcgrad.core import bind
from funcgrad.cuda import attention_src as AS

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not _usable(), reason="no GPU and no CUDA simulator")]

CASES = [  # b, t, s, n, kh, h, hv, causal
    (1, 5, 5, 2, 1, 3, 2, True), (2, 3, 4, 2, 2, 2, 3, False), (1, 4, 3, 1, 1, 1, 1, True),
    (1, 3, 5, 3, 3, 2, 2, True)]


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernels_match_numpy(case, dtype):
    *dims, causal = case
    b, t, s, n, kh, h, hv = dims
    rng = np.random.default_rng(sum(dims))
    q, k, v = (rng.standard_normal(sh).astype(dtype) for sh in
               ((b, t, n, h), (b, s, kh, h), (b, s, kh, hv)))
    do = rng.standard_normal((b, t, n, hv)).astype(dtype)
    prm = {"scale": 0.7, "causal": causal}
    o = A._attn_impl(q, k, v, **prm)
    st = A._stats_impl(q, k, o, do, **prm)
    tol = ({"rtol": 1e-4, "atol": 1e-5} if dtype == np.float32
           else {"rtol": 1e-11, "atol": 1e-13})
    qd, kd, vd, dod, od, std = _dev(q, k, v, do, o, st)
    for prim, args, want in [
            (A.attention_p, (qd, kd, vd), o), (A.attention_stats_p, (qd, kd, od, dod), st),
            (A.attention_dq_p, (qd, kd, vd, dod, std), A._dq_impl(q, k, v, do, st, **prm)),
            (A.attention_dkv_p, (qd, kd, vd, dod, std), A._dkv_impl(q, k, v, do, st, **prm)),
            (AB.attention_bwd_p, (qd, kd, vd, dod, std), AB._bwd_impl(q, k, v, do, st, **prm))]:
        got = bind(prim, *args, **prm)
        assert got.device == "cuda" and got.dtype == want.dtype
        np.testing.assert_allclose(np.asarray(got), want, err_msg=prim.name, **tol)


# tiny under the simulator; on a GPU, several tiles, partial tiles and every padded head dim:
# one test per head-dim class (head dims in (top / 2, top]), so parallel workers share them
_LEN = 5 if _sim() else 70
_TOPS = [5] if _sim() else [16, 32, 64, 128]


@pytest.mark.parametrize("top", _TOPS)
@settings(max_examples=6 if _sim() else 10)
@given(b=st.integers(0, 2), t=st.integers(0, _LEN), s=st.integers(1, _LEN),
       kh=st.integers(1, 2), g=st.integers(1, 2), hf=st.floats(0, 1), hvf=st.floats(0, 1),
       causal=st.booleans(), strided=st.booleans())
def test_kernels_match_numpy_drawn_shapes(top, b, t, s, kh, g, hf, hvf, causal, strided):
    lo = 1 if top <= 16 or _sim() else top // 2 + 1
    h, hv = (lo + int(f * (top - lo)) for f in (hf, hvf))
    qf, q, k, v, do = operands(b, t, s, kh, g, h, hv)
    prm = {"scale": 0.3, "causal": causal}
    o = A._attn_impl(q, k, v, **prm)
    st_ = A._stats_impl(q, k, o, do, **prm)
    qd, kd, vd, dod, od, std = _dev(q, k, v, do, o, st_)
    if strided:   # query heads read through strides at an offset
        qd = _dev(qf)[0][..., 1:]
    for prim, args, want in [
            (A.attention_p, (qd, kd, vd), o), (A.attention_stats_p, (qd, kd, od, dod), st_),
            (A.attention_dq_p, (qd, kd, vd, dod, std), A._dq_impl(q, k, v, do, st_, **prm)),
            (A.attention_dkv_p, (qd, kd, vd, dod, std), A._dkv_impl(q, k, v, do, st_, **prm)),
            (AB.attention_bwd_p, (qd, kd, vd, dod, std), AB._bwd_impl(q, k, v, do, st_, **prm))]:
        got = np.asarray(bind(prim, *args, **prm))
        # the absolute bound scales with the largest value: entries that cancel to near zero
        # keep the fp32 rounding of the sums they came from (an H200 run, 2026-11-24: dkv at
        # h = 128, t = 39 off by 2.4e-5 in 3 of 256 entries against a fixed 2e-5)
        atol = 2e-5 * max(1.0, float(np.abs(want).max(initial=0.0)))
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=atol, err_msg=prim.name)


# kernels under configurations other than the default: the VEC layout (contiguous register
# tiles over rows padded for float4 reads), other loads-in-flight counts, prefetched streamed
# tiles (PF), launch bounds (MB), k-loops of UK steps (lengths rounded up) and tile shapes;
# partial tiles, GQA, strided query heads. The simulator forces each of its configurations on
# every kernel. On a GPU (where each forced configuration compiles its kernels cold) the pairs
# (configuration, mode) are those pick_config can choose for some padded head dim and compute
# dtype other than a mode's default (the drawn-shape test runs those at every head-dim class),
# the defaults of fwdl and delta (which it does not run), and one configuration of no mode's
# list: 16 lanes a row with VEC, launch bounds, UK 4 and BR != BC (bwd's two-kernel path);
# both shapes pad to D = 64. Before (nine configurations on every kernel, three shapes at two
# padded head dims): about 130 kernel compiles, against about 20
_MODES = ("fwd", "stats", "fwdl", "delta", "dq", "dkv", "bwd")


def _gpu_forced():
    pairs = [(None, "fwdl"), (None, "delta")]
    for mode in _MODES:
        for itemsize in (4, 8):
            for d in (16, 32, 64, 128):
                cfg = AS.pick_config(mode, d, itemsize, False)
                if cfg != AS.GPU_CONFIGS[mode][0] and (cfg, mode) not in pairs:
                    pairs.append((cfg, mode))
    return pairs + [((64, 32, 16, 16, 1, 8, 0, 3, 4), m) for m in ("fwd", "bwd")]


_FORCED = ([(c, None) for c in [(4, 4, 2, 2, 1, 4), (8, 4, 2, 2, 1, 2, 1), (4, 8, 2, 2, 1, 3),
                                (8, 8, 2, 4, 0, 2, 1), (8, 8, 2, 2, 1, 2, 0, 0, 4),
                                (4, 4, 2, 2, 0, 4, 1, 0, 2), (8, 8, 2, 2, 2, 2, 1),
                                (4, 8, 2, 2, 2, 2, 0, 0, 2), (8, 8, 2, 4, 1, 2, 1, 0, 4)]]
           if _sim() else _gpu_forced())
_FORCED_SHAPES = ([(1, 5, 6, 1, 2, 3, 2, True), (2, 4, 3, 2, 1, 2, 3, False),
                   (1, 3, 5, 1, 1, 5, 1, True)] if _sim() else
                  [(2, 70, 70, 2, 2, 64, 64, True), (1, 33, 40, 1, 3, 40, 24, False)])


@pytest.mark.parametrize(("cfg", "mode"), _FORCED, ids=str)
def test_forced_configs_match_numpy(cfg, mode, monkeypatch):
    if _sim():
        monkeypatch.setattr(AS, "SIM_CONFIG", cfg)
    elif cfg is not None:
        monkeypatch.setattr(AS, "GPU_CONFIGS",   # the defaults where cfg does not fit
                            {m: [cfg, *c] for m, c in AS.GPU_CONFIGS.items()})
    for b, t, s, kh, g, h, hv, causal in _FORCED_SHAPES:
        qf, q, k, v, do = operands(b, t, s, kh, g, h, hv)
        prm = {"scale": 0.3, "causal": causal}
        o = A._attn_impl(q, k, v, **prm)
        st_ = A._stats_impl(q, k, o, do, **prm)
        qd, kd, vd, dod, od, std = _dev(q, k, v, do, o, st_)
        qd = _dev(qf)[0][..., 1:]
        lse = np.ascontiguousarray(st_[..., 0])
        bwd = [(AB.attention_bwd_p, (qd, kd, vd, dod, std),
                AB._bwd_impl(q, k, v, do, st_, **prm), prm)]
        if s == t and h == hv:
            pk = dict(prm, packed=True)
            bwd.append((AB.attention_bwd_p, (qd, kd, vd, dod, std),
                        AB._bwd_impl(q, k, v, do, st_, **pk), pk))
        runs = {
            "fwd": [(A.attention_p, (qd, kd, vd), o, prm)],
            "stats": [(A.attention_stats_p, (qd, kd, od, dod), st_, prm)],
            "fwdl": [(AL.attention_fwdl_p, (qd, kd, vd), AL._fwdl_impl(q, k, v, **prm), prm)],
            "delta": [(AL.attention_delta_p, (od, dod, _dev(lse)[0]),
                       AL._delta_impl(o, do, lse), {})],
            "dq": [(A.attention_dq_p, (qd, kd, vd, dod, std),
                    A._dq_impl(q, k, v, do, st_, **prm), prm)],
            "dkv": [(A.attention_dkv_p, (qd, kd, vd, dod, std),
                     A._dkv_impl(q, k, v, do, st_, **prm), prm)],
            "bwd": bwd}
        for prim, args, want, kw in [r for m in ([mode] if mode else _MODES) for r in runs[m]]:
            got = np.asarray(bind(prim, *args, **kw))
            np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5,
                                       err_msg=f"{prim.name} {cfg} {kw}")


@pytest.mark.parametrize("causal", [True, False])
def test_merged_backward_is_reproducible_and_matches_two_kernels(causal):
    # dQ comes from per-key-tile partials summed in a fixed order: equal inputs, equal bits;
    # the same values as the separate dq and dkv kernels. Several key and query tiles, GQA,
    # rows of N * H longer than the sum kernel's threads (several values per thread, a loop)
    b, t, s, kh, g, h, hv = (1, 9, 7, 2, 3, 6, 2) if _sim() else (2, 150, 130, 2, 3, 64, 48)
    _, q, k, v, do = operands(b, t, s, kh, g, h, hv)
    prm = {"scale": 0.3, "causal": causal}
    st_ = A._stats_impl(q, k, A._attn_impl(q, k, v, **prm), do, **prm)
    args = _dev(q, k, v, do, st_)
    first = np.asarray(bind(AB.attention_bwd_p, *args, **prm))
    assert np.array_equal(first, np.asarray(bind(AB.attention_bwd_p, *args, **prm)))
    two = np.concatenate([np.asarray(bind(p, *args, **prm)).ravel()
                          for p in (A.attention_dq_p, A.attention_dkv_p)])
    np.testing.assert_allclose(first, two, rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(first, AB._bwd_impl(q, k, v, do, st_, **prm), rtol=2e-4,
                               atol=2e-5)


@pytest.mark.parametrize("forced", [False, True], ids=["merged", "two-kernels"])
def test_packed_backward_matches_numpy(forced, monkeypatch):
    # attention_bwd[packed] ([B, T, N + 2K, H] rows of dq, dk and dv heads): the merged kernels
    # store through the packed row / head strides, the two-kernel path (BR != BC) copies its
    # C-order results in; both the unpacked result's bits rearranged. GQA, strided q
    if forced:
        cfg = (8, 4, 2, 2, 1, 2, 1) if _sim() else (64, 32, 16, 8)
        if _sim():
            monkeypatch.setattr(AS, "SIM_CONFIG", cfg)
        else:
            monkeypatch.setattr(AS, "GPU_CONFIGS", {m: [cfg, *c] for m, c in
                                                    AS.GPU_CONFIGS.items()})
    b, t, kh, g, h = (1, 9, 2, 2, 3) if _sim() else (2, 150, 2, 3, 64)
    qf, q, k, v, do = operands(b, t, t, kh, g, h, h)
    for causal in (True, False):
        prm = {"scale": 0.3, "causal": causal}
        st_ = A._stats_impl(q, k, A._attn_impl(q, k, v, **prm), do, **prm)
        args = [_dev(qf)[0][..., 1:], *_dev(k, v, do, st_)]
        got = np.asarray(bind(AB.attention_bwd_p, *args, **prm, packed=True))
        flat = np.asarray(bind(AB.attention_bwd_p, *args, **prm))
        assert np.array_equal(got.reshape(b, t, kh * (g + 2), h),
                              unpacked_to_packed(flat, b, t, kh * g, kh, h))
        np.testing.assert_allclose(got, AB._bwd_impl(q, k, v, do, st_, **prm, packed=True),
                                   rtol=2e-4, atol=2e-5)
    args = _dev(*(x[:0] for x in (q, k, v, do)), st_[:0])
    assert np.asarray(bind(AB.attention_bwd_p, *args, **prm, packed=True)).shape == (0,)


def test_jitted_grad_with_strided_heads_matches_cpu():
    rng = np.random.default_rng(0)
    b, t, n, h = 1, 5, 2, 2
    x = rng.standard_normal((b, t, 4)).astype(np.float32)
    w = rng.standard_normal((4, 3 * n * h)).astype(np.float32)

    def loss(w, x):
        qkv = fnp.reshape(x @ w, (b, t, 3 * n, h))
        q, k, v = fnp.split(qkv, 3, axis=2)   # heads as strided views, no copies
        return fnp.sum(nn.dot_product_attention(q, k, v, is_causal=True) ** 2)
    step = funcgrad.jit(funcgrad.value_and_grad(loss))
    bws = [e for e in step.lower(*_dev(w, x)).expr.eqns if e.prim is AB.attention_bwd_p]
    assert [e.params.get("packed") for e in bws] == [True]   # the qkv gradient's layout
    val, g = step(*_dev(w, x))
    val_c, g_c = funcgrad.value_and_grad(loss)(w, x)
    np.testing.assert_allclose(float(val), float(val_c), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(g), np.asarray(g_c), rtol=1e-4, atol=1e-5)


def test_empty_shapes():
    q = np.ones((1, 3, 2, 2), np.float32)
    k = np.ones((1, 0, 1, 2), np.float32)
    out = bind(A.attention_p, *_dev(q, k, k), scale=1.0, causal=False)
    assert np.all(np.asarray(out) == 0)
    st = bind(A.attention_stats_p, *_dev(q, k, np.asarray(out), np.asarray(out)), scale=1.0,
              causal=False)
    assert np.all(np.asarray(st)[..., 0] == -np.inf)
    q0 = np.ones((1, 0, 2, 2), np.float32)
    assert np.asarray(bind(A.attention_p, *_dev(q0, q[:, :2, :1], q[:, :2, :1]), scale=1.0,
                           causal=True)).shape == (1, 0, 2, 2)
