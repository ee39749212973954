"""Cross-entropy over wide rows (funcgrad/cuda/rows_wide.py) and softmax_xent_bwd written over
its logits in jit plans (funcgrad/cuda/rows_inplace.py): values and gradients against numpy,
the in-place step only where nothing else sees the logits (a returned or later-read logits
array stays intact), and a GPU check at GPT-2's 50,304 columns."""
from __future__ import annotations

import numpy as np
import pytest

import funcgrad
import funcgrad.cuda as fcuda
import funcgrad.numpy as fnp
from funcgrad import nn
from funcgrad.prims import rows as F
from funcgrad.prims import rows_bwd as FB

SIM = fcuda.simulator_active()
pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not fcuda.usable(), reason="no GPU and no CUDA simulator")]


@pytest.fixture(scope="module", autouse=True)
def _fast_barriers(fast_barriers):
    """The simulator's short GIL slices (conftest) for every test here."""


def _wide(n):
    """A row length past the warp-per-row kernels' reach (simulator: 128, GPU: 1024) + n."""
    from funcgrad.cuda import rows
    return rows.geometry()[1] * rows.MAX_SLOTS + n


def _dev(a, offset=0):
    flat = np.concatenate([np.zeros(offset, a.dtype), a.ravel()])
    buf = funcgrad.device_put(flat, "cuda").buf
    strides = tuple(int(np.prod(a.shape[d + 1:])) for d in range(a.ndim))
    return buf.view(a.shape, strides, offset)


def _tol(dtype):
    return {np.float16: 2e-3, np.float32: 2e-5, np.float64: 1e-12}[dtype]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # NaN rows (simulator threads)
@pytest.mark.parametrize("R,extra,dtype,offset", [
    (0, 4, np.float32, 0), (1, 1, np.float32, 0), (3, 4, np.float32, 1),
    (5, 8, np.float32, 0), (2, 3, np.float64, 0), (3, 4, np.float16, 0)])
def test_wide_rows_match_numpy(R, extra, dtype, offset, rng):
    from funcgrad.cuda import fused, rows
    from funcgrad.cuda.arrays import to_host
    N = _wide(extra)
    x = (rng.standard_normal((R, N)) * 4).astype(dtype)
    lab = rng.integers(0, N, R).astype(np.int32)
    ct = rng.standard_normal(R).astype(dtype)
    if R >= 5:   # a NaN, a row of -inf, a half row of -inf (the first runs of every thread)
        x[1, 7] = np.nan
        x[2] = -np.inf
        x[3, : N // 2] = -np.inf
        lab[3] = N - 1
    tol = _tol(dtype)
    with np.errstate(invalid="ignore"):
        loss = to_host(fused.softmax_xent(_dev(x, offset), _dev(lab)))
        np.testing.assert_allclose(loss, F._xent_impl(x, lab), rtol=tol, atol=tol)
        dx = to_host(rows.run("softmax_xent_bwd", [_dev(x, offset), _dev(lab), _dev(ct)],
                              x.shape, dtype))
        np.testing.assert_allclose(dx, FB._xent_bwd_impl(x, lab, ct), rtol=tol, atol=tol)


def test_wide_rows_bad_label_is_an_error(rng):
    N = _wide(2)
    x = fcuda_put(rng.standard_normal((3, N)).astype(np.float32))
    lab = fcuda_put(np.array([0, N, 1], np.int32))
    with pytest.raises(IndexError, match=f"label {N} is out of range for {N} classes"):
        np.asarray(nn_xent(x, lab))


def fcuda_put(a):
    return funcgrad.device_put(a, "cuda")


def nn_xent(x, lab):
    from funcgrad.core import bind
    return bind(F.softmax_xent_p, x, lab)


def _head_loss(h, w, tgt):
    logits = (h @ w.T).astype(fnp.float32 if h.dtype == fnp.float32 else h.dtype)
    return fnp.mean(nn.logsumexp(logits, axis=-1)
                    - fnp.take_along_axis(logits, tgt[..., None], axis=-1)[..., 0]), logits


def _numpy_head(h, w, tgt):
    """(loss, dh, dw) of mean cross-entropy of h @ w.T in float64."""
    z = h @ w.T
    zs = z - z.max(-1, keepdims=True)
    p = np.exp(zs) / np.exp(zs).sum(-1, keepdims=True)
    n = tgt.size
    picked = np.take_along_axis(zs, tgt[..., None], -1)[..., 0]
    loss = np.mean(np.log(np.exp(zs).sum(-1)) - picked)
    g = (p - (np.arange(z.shape[-1]) == tgt[..., None])) / n
    return loss, g @ w, np.einsum("btv,btd->vd", g, h)


def _inputs(rng, V, D=4, B=2, T=3, dtype=np.float64):
    return (rng.standard_normal((B, T, D)).astype(dtype),
            rng.standard_normal((V, D)).astype(dtype), rng.integers(0, V, (B, T)).astype(np.int32))


@pytest.mark.parametrize("V", [12, 132])   # the warp-per-row and the wide kernels (simulator)
def test_head_gradients_in_place_match_numpy(V, rng):
    h, w, tgt = _inputs(rng, V)
    f = funcgrad.jit(funcgrad.value_and_grad(lambda h, w, t: _head_loss(h, w, t)[0], (0, 1)))
    args = [fcuda_put(a) for a in (h, w, tgt)]
    desc = f.lower(*args).compile().describe()
    assert f"softmax_xent_bwd -> f64[2,3,{V}] (in place over its logits)" in desc, desc
    want = _numpy_head(h, w, tgt)
    for _ in range(3):   # the eager first call, the recorded one, planned calls
        loss, (dh, dw) = f(*args)
        for a, b in zip((loss, dh, dw), want):
            np.testing.assert_allclose(np.asarray(a), b, rtol=1e-12, atol=1e-14)


def test_logits_the_user_gets_are_not_overwritten(rng):
    h, w, tgt = _inputs(rng, 132)
    f = funcgrad.jit(funcgrad.value_and_grad(_head_loss, (0, 1), has_aux=True))
    args = [fcuda_put(a) for a in (h, w, tgt)]
    desc = f.lower(*args).compile().describe()
    assert "softmax_xent_bwd" in desc and "in place" not in desc, desc
    want = _numpy_head(h, w, tgt)
    for _ in range(3):
        (loss, logits), (dh, dw) = f(*args)
        np.testing.assert_allclose(np.asarray(logits), h @ w.T, rtol=1e-12, atol=1e-14)
        for a, b in zip((loss, dh, dw), want):
            np.testing.assert_allclose(np.asarray(a), b, rtol=1e-12, atol=1e-14)


def test_logits_read_after_the_backward_stay_intact(rng):
    """A second use of the logits (a penalty whose gradient reads them, a view of them
    returned) keeps them from being overwritten; a reshape of them does not."""
    h, w, tgt = _inputs(rng, 132)

    def penalised(h, w, t):
        loss, logits = _head_loss(h, w, t)
        return loss + 1e-2 * fnp.sum(logits * logits), logits.reshape(-1)[:5]
    f = funcgrad.jit(funcgrad.value_and_grad(penalised, (0, 1), has_aux=True))
    args = [fcuda_put(a) for a in (h, w, tgt)]
    (loss, head), (dh, dw) = f(*args)
    z = h @ w.T
    l0, dh0, dw0 = _numpy_head(h, w, tgt)
    np.testing.assert_allclose(np.asarray(head), z.reshape(-1)[:5], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(loss), l0 + 1e-2 * (z * z).sum(), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(dh), dh0 + 2e-2 * z @ w, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(dw), dw0 + 2e-2 * np.einsum("btv,btd->vd", z, h),
                               rtol=1e-10, atol=1e-12)

    def flat(h, w, t):   # the loss over a reshape of the logits: still written in place
        logits = (h @ w.T).reshape(-1, w.shape[0])
        t = t.reshape(-1)
        return fnp.mean(nn.logsumexp(logits, axis=-1)
                        - fnp.take_along_axis(logits, t[:, None], axis=-1)[:, 0])
    g = funcgrad.jit(funcgrad.grad(flat, (0, 1)))
    assert "in place over its logits" in g.lower(*args).compile().describe()
    for _ in range(3):
        dh, dw = g(*args)
        np.testing.assert_allclose(np.asarray(dh), dh0, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(np.asarray(dw), dw0, rtol=1e-12, atol=1e-14)


def test_logits_passed_in_are_not_overwritten(rng):
    x = rng.standard_normal((4, 132))
    tgt = rng.integers(0, 132, 4).astype(np.int32)
    f = funcgrad.jit(funcgrad.grad(lambda z, t: fnp.mean(
        nn.logsumexp(z, axis=-1) - fnp.take_along_axis(z, t[:, None], axis=-1)[:, 0])))
    xd, td = fcuda_put(x), fcuda_put(tgt)
    assert "in place" not in f.lower(xd, td).compile().describe()
    for _ in range(3):
        f(xd, td)
        np.testing.assert_array_equal(np.asarray(xd), x)


@pytest.mark.skipif(SIM, reason="GPT-2's vocabulary: a GPU only")
def test_gpt2_vocabulary_rows_on_gpu(rng):
    """Rows of 50,304 (values and gradients), the in-place plan of an LM head at that width."""
    from funcgrad.cuda import fused, rows
    from funcgrad.cuda.arrays import to_host
    V = 50304
    for R, dtype, off in ((64, np.float32, 0), (33, np.float32, 1), (16, np.float64, 0)):
        x = (rng.standard_normal((R, V)) * 3).astype(dtype)
        lab = rng.integers(0, V, R).astype(np.int32)
        ct = rng.standard_normal(R).astype(dtype)
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(to_host(fused.softmax_xent(_dev(x, off), _dev(lab))),
                                   F._xent_impl(x, lab), rtol=tol)
        dx = to_host(rows.run("softmax_xent_bwd", [_dev(x, off), _dev(lab), _dev(ct)],
                              x.shape, dtype))
        np.testing.assert_allclose(dx, FB._xent_bwd_impl(x, lab, ct), rtol=tol, atol=tol * 1e-3)
    h, w, tgt = _inputs(rng, V, D=16, B=2, T=8)
    f = funcgrad.jit(funcgrad.value_and_grad(lambda h, w, t: _head_loss(h, w, t)[0], (0, 1)))
    args = [fcuda_put(a) for a in (h, w, tgt)]
    assert "in place over its logits" in f.lower(*args).compile().describe()
    want = _numpy_head(h, w, tgt)
    for _ in range(3):
        loss, (dh, dw) = f(*args)
        for a, b in zip((loss, dh, dw), want):
            np.testing.assert_allclose(np.asarray(a), b, rtol=1e-10, atol=1e-13)


def test_transposed_products_are_made_in_their_layout(rng):
    """transpose(dot_general(a, b)) read by nothing else is dot_general(b, a) (rewrites/
    dot_transpose.py): the tied head's weight gradient comes out [V, d], no view of [d, V]."""
    h, w, tgt = _inputs(rng, 132, dtype=np.float32)
    f = funcgrad.jit(funcgrad.grad(lambda h, w, t: _head_loss(h, w, t)[0], 1))
    args = [fcuda_put(a) for a in (h, w, tgt)]
    desc = f.lower(*args).compile().describe()
    assert "dot_general -> f32[132,4]" in desc and "transpose -> f32[132,4]" not in desc, desc
    a, b = rng.standard_normal((3, 5)), rng.standard_normal((5, 2))
    once = funcgrad.jit(lambda a, b: (a @ b).T)
    twice = funcgrad.jit(lambda a, b: ((a @ b).T, (a @ b)[0]))   # the product read twice
    ad, bd = fcuda_put(a), fcuda_put(b)
    assert "transpose" not in once.lower(ad, bd).compile().describe()
    assert "transpose" in twice.lower(ad, bd).compile().describe()
    np.testing.assert_allclose(np.asarray(once(ad, bd)), (a @ b).T, rtol=1e-12)
    t, r = twice(ad, bd)
    np.testing.assert_allclose(np.asarray(t), (a @ b).T, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(r), (a @ b)[0], rtol=1e-12)
