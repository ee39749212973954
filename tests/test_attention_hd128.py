"""TF32 tensor-core attention at head dim 128 (S2's Llama shapes: GQA 8 / 2, causal): the
kernels against the numpy impls with grouped query heads (dkv's head split on and off), the
gradient of nn.dot_product_attention, the configuration picked per head dim (pinned: over 48
KB of shared memory at 128, opted in at launch), every candidate configuration on a GPU, and a
T = 4096 check on a GPU (attention_tc.py, attention.py)."""
from __future__ import annotations

import numpy as np
import pytest
from attention_cases import dev as _dev
from attention_cases import operands
from attention_cases import sim as _sim
from attention_cases import usable as _usable
from test_attention_tc import TF32, _close

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import nn
from funcgrad.core import bind
from funcgrad.cuda import attention_tc as ATC
from funcgrad.prims import attention as A
from funcgrad.prims import attention_lse as AL

gpu_only = pytest.mark.skipif(
    _sim(), reason="GPU only: the simulator runs one configuration (SIM_CONFIG, one warp) and "
    "would take hours at these lengths (one Python thread per CUDA thread)")


def _check_kernels(b, t, s, kh, g, h, hv, causal):
    """fwd, fwdl, dq and dkv (TF32) against the float64 impls at one shape."""
    _, q, k, v, do = operands(b, t, s, kh, g, h, hv)
    prm = {"scale": float(1 / np.sqrt(h)), "causal": causal}
    q64, k64, v64, do64 = (x.astype(np.float64) for x in (q, k, v, do))
    o = A._attn_impl(q64, k64, v64, **prm)
    st64 = A._stats_impl(q64, k64, o, do64, **prm)
    qd, kd, vd, dod = _dev(q, k, v, do)
    std = _dev(st64.astype(np.float32))[0]
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
    return qd, kd, vd, dod, std, prm


# (shape, forced dkv split: None = the automatic one) -- the simulator: one query tile and one
# or two key tiles of 16 / 8 rows, split automatically (its target is 4 blocks) or not; a GPU:
# several tiles, partial ones, 2 to 8 query heads a key head
_CASES = ([((1, 9, 11, 1, 2, 128, 128, True), None), ((1, 7, 6, 2, 2, 100, 128, False), 1)]
          if _sim() else
          [((2, 150, 150, 2, 4, 128, 128, True), None), ((2, 150, 150, 2, 4, 128, 128, True), 1),
           ((1, 70, 90, 2, 4, 128, 120, False), None), ((2, 33, 20, 1, 8, 128, 128, True), None)])


@pytest.mark.parametrize(("shape", "split"), _CASES, ids=str)
@pytest.mark.usefixtures("_cuda")
def test_hd128_gqa_kernels_match_numpy(shape, split, monkeypatch):
    from funcgrad.cuda import attention as CA
    monkeypatch.setattr(CA, "DKV_SPLIT", split)
    _check_kernels(*shape)


@pytest.mark.usefixtures("_cuda")
def test_dkv_split_is_deterministic_and_close_to_unsplit(monkeypatch):
    """dkv's partials (a key head's query heads over GS blocks) are summed in head order by a
    second kernel: two calls give equal bits, and the result is the unsplit kernel's up to
    float32 rounding of the reordered sum."""
    from funcgrad.cuda import attention as CA
    b, t, kh, g, h = (1, 9, 1, 4, 16) if _sim() else (2, 130, 2, 4, 128)
    qd, kd, vd, dod, std, prm = _check_kernels(b, t, t, kh, g, h, h, True)
    args = (qd, kd, vd, dod, std)
    runs = {}
    for split in (g, 2, 1):
        monkeypatch.setattr(CA, "DKV_SPLIT", split)
        runs[split] = np.asarray(bind(A.attention_dkv_p, *args, **prm, **TF32))
    monkeypatch.setattr(CA, "DKV_SPLIT", g)
    assert np.array_equal(runs[g], np.asarray(bind(A.attention_dkv_p, *args, **prm, **TF32)))
    scale = max(1.0, float(np.abs(runs[1]).max()))
    for split in (g, 2):
        assert float(np.abs(runs[split] - runs[1]).max()) <= 1e-5 * scale, split


@pytest.mark.usefixtures("_cuda")
def test_hd128_gqa_jitted_gradient_matches_float64():
    """nn.dot_product_attention at head dim 128, 4 query heads on 2 key heads, causal: the
    jitted value_and_grad under TF32 runs the tensor-core fwdl / dq / dkv kernels and stays
    within the TF32 bound of the float64 gradient."""
    from funcgrad.cuda import runtime
    b, t, n, kh, h = (1, 10, 4, 2, 128) if _sim() else (2, 200, 8, 2, 128)
    rng = np.random.default_rng(5)
    q = rng.standard_normal((b, t, n, h)).astype(np.float32)
    k, v = (rng.standard_normal((b, t, kh, h)).astype(np.float32) for _ in range(2))
    w = rng.standard_normal((b, t, n, h)).astype(np.float32)

    def loss(q, k, v, w):
        return fnp.sum(nn.dot_product_attention(q, k, v, is_causal=True) * w)

    vg = funcgrad.value_and_grad(loss, argnums=(0, 1, 2))
    want = vg(*(x.astype(np.float64) for x in (q, k, v, w)))
    runtime._kernels.clear()
    with funcgrad.default_matmul_precision("tensorfloat32"):
        got = funcgrad.jit(vg)(*_dev(q, k, v, w))
    used = {key[1] for key in runtime._kernels if key[0] == "attention_tc"}
    assert {"fwdl", "dq", "dkv"} <= used, used
    _close(got[0], np.asarray(want[0]), "value", h)
    for name, g_, w_ in zip("qkv", got[1], want[1]):
        _close(g_, np.asarray(w_), f"d{name}", h)


def test_configs_per_head_dim_are_pinned():
    """The configuration each mode takes per padded head dim on an H200 (227 KB a block
    opted in): head dims to 64 keep what needs no opt-in (measured at W2's shapes); 128
    takes 8 warps x 32 keys (fwd) and 4 warps x 32 rows (dq, dkv), 101 KB each (over 48 KB, so
    the launch opts in; the fastest at S2's shapes); a 48 KB device limit gives 128 the
    2-warp configurations of before. S2's dkv spreads its 4 query heads a key head over 4
    blocks, S1's (no GQA) stays whole."""
    picked = {(m, d): ATC.pick_config(m, d, False) for m in ATC.MODES for d in (16, 64, 128)}
    assert picked == {**{(m, d): (4, 32) for m in ("fwd", "fwdl") for d in (16, 64)},
                      **{(m, d): (4, 16) for m in ("dq", "dkv") for d in (16, 64)},
                      ("fwd", 128): (8, 32), ("fwdl", 128): (8, 32),
                      ("dq", 128): (4, 32), ("dkv", 128): (4, 32)}
    assert ATC.smem_bytes("fwdl", 64, (4, 32)) <= ATC.DEFAULT_SMEM
    for m in ATC.MODES:
        assert ATC.DEFAULT_SMEM < ATC.smem_bytes(m, 128, picked[m, 128]) <= ATC.budget(128)
    assert ATC.smem_bytes("fwdl", 128, (8, 32)) == 101376
    assert ATC.pick_config("fwdl", 128, False, ATC.DEFAULT_SMEM) == (2, 16)
    assert ATC.pick_config("dkv", 128, False, ATC.DEFAULT_SMEM) == (2, 8)
    assert ATC.pick_config("dq", 256, False) is not None
    assert ATC.pick_config("fwd", 12, True) == ATC.SIM_CONFIG
    # S2: B 4, S 2048, 2 key heads of 4 query heads, 64-row key tiles; S1: B 8, 12 heads
    assert ATC.dkv_splits(4 * 2 * 32, 4, False) == 4
    assert ATC.dkv_splits(8 * 12 * 16, 1, False) == 1
    assert ATC.dkv_splits(1, 6, True) == 6 and ATC.dkv_splits(4, 6, True) == 1


def _candidates():
    """(mode, padded head dim, configuration) of every candidate the benchmark times."""
    out = []
    for d in (64, 128):
        for mode in ("fwdl", "dq", "dkv"):
            cands = {"fwdl": [(4, 32), (4, 64), (8, 32), (8, 16), (4, 16)],
                     "dq": [(4, 16), (4, 32), (8, 16)], "dkv": [(4, 16), (4, 32), (8, 16)]}
            out += [(mode, d, c) for c in cands[mode]
                    if ATC.smem_bytes(mode, d, c) <= ATC.SMEM_BYTES]
    return out


CANDIDATES = _candidates()


@gpu_only
@pytest.mark.parametrize(("mode", "d", "cfg"), CANDIDATES, ids=str)
@pytest.mark.usefixtures("_cuda")
def test_candidate_configs_match_numpy(mode, d, cfg, monkeypatch):
    """Each configuration the benchmark times, forced, at partial tiles with GQA (so any of
    them can become a head dim's default)."""
    monkeypatch.setattr(ATC, "BY_DIM", {(m, d): [cfg] for m in (mode, "fwd")})
    for shape in [(2, 150, 150, 2, 4, d, d, True), (1, 70, 90, 1, 2, d - 3, d, False)]:
        _check_kernels(*shape)


def _reference(q, k, v, do, scale):
    """Causal attention's o, logsumexp, dq, dk, dv in float64 by matmuls, one head at a time
    (the impls' einsums take minutes at T = 4096)."""
    b, t, n, _ = q.shape
    kh = k.shape[2]
    g = n // kh
    q, k, v, do = (x.astype(np.float64) for x in (q, k, v, do))
    o, lse, dq = np.zeros_like(q), np.zeros((b, n, t)), np.zeros_like(q)
    dk, dv = np.zeros_like(k), np.zeros_like(v)
    keep = np.tril(np.ones((t, t), bool))
    for bi in range(b):
        for ni in range(n):
            j = ni // g
            s = np.where(keep, q[bi, :, ni] @ k[bi, :, j].T * scale, -np.inf)
            m = s.max(axis=1, keepdims=True)
            p = np.exp(s - m)
            den = p.sum(axis=1, keepdims=True)
            p /= den
            lse[bi, ni] = (m + np.log(den))[:, 0]
            o[bi, :, ni] = p @ v[bi, :, j]
            dp = do[bi, :, ni] @ v[bi, :, j].T
            ds = p * (dp - (o[bi, :, ni] * do[bi, :, ni]).sum(axis=1, keepdims=True))
            dq[bi, :, ni] = ds @ k[bi, :, j] * scale
            dk[bi, :, j] += ds.T @ q[bi, :, ni] * scale
            dv[bi, :, j] += p.T @ do[bi, :, ni]
    return o, lse, dq, dk, dv


@gpu_only
@pytest.mark.usefixtures("_cuda")
def test_long_sequence_gqa_hd128_matches_float64():
    """T = 4096, head dim 128, 8 query heads on 2 key heads, causal (S2's attention at twice
    its length): fwdl's output and logsumexp, dq and dkv within the TF32 bound of a float64
    reference; dkv (split over query heads) bit-identical across two calls."""
    b, t, n, kh, h = 1, 4096, 8, 2, 128
    rng = np.random.default_rng(11)
    q, do = (rng.standard_normal((b, t, n, h)).astype(np.float32) for _ in range(2))
    k, v = (rng.standard_normal((b, t, kh, h)).astype(np.float32) for _ in range(2))
    scale = float(1 / np.sqrt(h))
    o, lse, dq, dk, dv = _reference(q, k, v, do, scale)
    prm = {"scale": scale, "causal": True}
    qd, kd, vd, dod = _dev(q, k, v, do)
    flat = np.asarray(bind(AL.attention_fwdl_p, qd, kd, vd, **prm, **TF32))
    _close(flat[:o.size].reshape(o.shape), o, "fwdl o", h)
    _close(flat[o.size:].reshape(lse.shape), lse, "fwdl lse", h)
    delta = (o * do.astype(np.float64)).sum(axis=-1).transpose(0, 2, 1)
    std = _dev(np.stack([lse, delta], axis=-1).astype(np.float32))[0]
    _close(bind(A.attention_dq_p, qd, kd, vd, dod, std, **prm, **TF32), dq, "dq", h)
    got = np.asarray(bind(A.attention_dkv_p, qd, kd, vd, dod, std, **prm, **TF32))
    _close(got, np.concatenate([dk, dv], axis=-1), "dkv", h)
    again = np.asarray(bind(A.attention_dkv_p, qd, kd, vd, dod, std, **prm, **TF32))
    assert np.array_equal(got, again)


@pytest.fixture
def _cuda():
    if not _usable():
        pytest.skip("no GPU and no CUDA simulator")


pytestmark = [pytest.mark.cuda]
