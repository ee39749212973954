"""Pattern rewrites (funcgrad/compile/rewrites/rows.py) of RMSNorm and of the cross-entropy as users
write it (logsumexp - take_along_axis, or -take_along_axis(log_softmax)) into rms_norm and
softmax_xent: matched only where it is the same computation, with values and gradients equal to
the unrewritten program's, on the CPU and on CUDA (simulator-sized)."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

import funcgrad
import funcgrad.cuda as fcuda
import funcgrad.numpy as fnp
from funcgrad import lax, nn
from funcgrad.test_util import check_grads


@contextlib.contextmanager
def no_rewrites():
    """The program as written: the forward and jit rewrites switched off."""
    from funcgrad.compile import passes
    from funcgrad.transforms import ad
    saved = [(lst, lst[:]) for lst in (ad.FORWARD_REWRITES, passes.PRE_REWRITES)]
    for lst, _ in saved:
        lst.clear()
    try:
        yield
    finally:
        for lst, old in saved:
            lst[:] = old


def rms_rsqrt(x, g):
    return x * lax.rsqrt(fnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * g


def rms_sqrt(x, g):
    return g * (x / fnp.sqrt(fnp.mean(x ** 2, axis=-1, keepdims=True) + 1e-5))


def rms_plain(x, g):
    return lax.rsqrt(fnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * x


def rms_of_other(x, g):      # the mean of another array's square: not an RMSNorm of x
    return x * lax.rsqrt(fnp.mean((2 * x) * (2 * x), axis=-1, keepdims=True) + 1e-6) * g


def rms_wrong_axis(x, g):    # normalizes over the first axis
    return x * lax.rsqrt(fnp.mean(x * x, axis=0, keepdims=True) + 1e-6)


def rms_not_a_mean(x, g):    # sum / (n + 1)
    return x * lax.rsqrt(fnp.sum(x * x, axis=-1, keepdims=True) / 7.0 + 1e-6) * g


RMS = {rms_rsqrt: True, rms_sqrt: True, rms_plain: True, rms_of_other: False,
       rms_wrong_axis: False, rms_not_a_mean: False}


def _prims(f, *args):
    from funcgrad.compile.passes import optimize
    from funcgrad.core import aval_of, trace_to_expr
    expr, consts = trace_to_expr(lambda *a: [f(*a)], [aval_of(fnp.asarray(a)) for a in args])[:2]
    return [e.prim.name for e in optimize(expr, consts)[0].eqns]


@pytest.mark.parametrize("f", list(RMS), ids=lambda f: f.__name__)
def test_rms_norm_rewrite(f):
    rng = np.random.default_rng(0)
    args = (rng.standard_normal((2, 3, 6)), rng.standard_normal(6) + 2)
    w = np.linspace(-1, 1, 6)

    def loss(x, g):
        return (f(x, g) ** 2 * w).sum()
    both = str(funcgrad.make_jaxpr(funcgrad.grad(loss, argnums=(0, 1)))(*args))
    assert ("rms_norm_bwd" in both) == RMS[f], both
    assert ("rms_norm" in _prims(f, *args)) == RMS[f]
    np.testing.assert_allclose(np.asarray(funcgrad.jit(f)(*args)), np.asarray(f(*args)),
                               rtol=1e-12, atol=1e-12)
    with no_rewrites():
        want = funcgrad.grad(loss, argnums=(0, 1))(*args)
    got = funcgrad.grad(loss, argnums=(0, 1))(*args)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-12)
    check_grads(loss, args, order=2)


def test_rms_norm_rewrite_keeps_dtypes():
    """float32 rows with a float32 scale fuse with the scale; with a float64 scale the product
    is promoted, so only the float32 normalization fuses and the result stays float64."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    for g in (np.linspace(1, 2, 4).astype(np.float32), np.linspace(1, 2, 4)):
        assert "rms_norm" in _prims(rms_rsqrt, x, g)
        got, want = funcgrad.jit(rms_rsqrt)(x, g), rms_rsqrt(x, g)
        assert np.asarray(got).dtype == np.asarray(want).dtype == np.result_type(x, g)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)


def xent_lse(x, y):
    return fnp.mean(nn.logsumexp(x, axis=-1)
                    - fnp.take_along_axis(x, y[..., None], axis=-1)[..., 0])


def xent_rows(x, y):
    return nn.logsumexp(x, axis=-1) - fnp.take_along_axis(x, y[..., None], axis=-1)[..., 0]


def xent_log_softmax(x, y):
    return -fnp.mean(fnp.take_along_axis(nn.log_softmax(x, axis=-1), y[..., None],
                                         axis=-1)[..., 0])


def xent_log_softmax_sum(x, y):
    return -fnp.sum(fnp.take_along_axis(nn.log_softmax(x, axis=-1), y[..., None],
                                        axis=-1)[..., 0])


def xent_neg_rows(x, y):
    return fnp.mean(-fnp.take_along_axis(nn.log_softmax(x, axis=-1), y[..., None],
                                         axis=-1)[..., 0])


def xent_hand_log_softmax(x, y):
    s = x - x.max(-1, keepdims=True)
    ls = s - fnp.log(fnp.exp(s).sum(-1, keepdims=True))
    return -fnp.mean(fnp.take_along_axis(ls, y[..., None], axis=-1)[..., 0])


def xent_other_logits(x, y):   # logsumexp of x, the label picked from 2 x
    return fnp.mean(nn.logsumexp(x, axis=-1)
                    - fnp.take_along_axis(2 * x, y[..., None], axis=-1)[..., 0])


def xent_two_picks(x, y):      # two labels per row: not one cross-entropy per row
    yy = fnp.stack([y, y], axis=-1)
    return fnp.mean(nn.logsumexp(x, axis=-1)[..., None] - fnp.take_along_axis(x, yy, axis=-1))


def xent_positive_log_softmax(x, y):  # +log_softmax[y] (no negation): not a loss to fuse
    return fnp.mean(fnp.take_along_axis(nn.log_softmax(x, axis=-1), y[..., None],
                                        axis=-1)[..., 0])


XENT = {xent_lse: True, xent_rows: True, xent_log_softmax: True, xent_log_softmax_sum: True,
        xent_neg_rows: True, xent_hand_log_softmax: True, xent_other_logits: False,
        xent_two_picks: False, xent_positive_log_softmax: False}


def _xent_args(shape=(2, 3, 7)):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape) * 3
    y = rng.integers(-shape[-1], shape[-1], shape[:-1]).astype(np.int32)  # negatives wrap
    return x, y


@pytest.mark.parametrize("f", list(XENT), ids=lambda f: f.__name__)
def test_cross_entropy_rewrite(f):
    x, y = _xent_args()
    w = np.random.default_rng(3).standard_normal(np.shape(f(x, y)))

    def loss(x):
        return (f(x, y) * w).sum()
    both = str(funcgrad.make_jaxpr(funcgrad.grad(loss))(x))
    assert ("softmax_xent_bwd" in both) == XENT[f], both
    assert ("softmax_xent" in _prims(f, x, y)) == XENT[f]
    np.testing.assert_allclose(np.asarray(funcgrad.jit(f)(x, y)), np.asarray(f(x, y)),
                               rtol=1e-12, atol=1e-12)
    with no_rewrites():
        want = funcgrad.grad(loss)(x)
    np.testing.assert_allclose(np.asarray(funcgrad.grad(loss)(x)), np.asarray(want),
                               rtol=1e-10, atol=1e-12)
    check_grads(loss, (x,), order=2)


def test_cross_entropy_rewrite_keeps_label_errors():
    """Labels outside [-n, n) still raise IndexError (the gather's wrapped labels are fused)."""
    x, y = _xent_args()
    assert "softmax_xent" in _prims(xent_lse, x, y)
    for bad in (7, -8):
        yb = y.copy()
        yb[1, 2] = bad
        with pytest.raises(IndexError):
            np.asarray(funcgrad.jit(xent_lse)(x, yb))


@pytest.mark.parametrize("shape", [(4, 1), (1, 5), (2, 1, 3)])
def test_cross_entropy_rewrite_small_dims(shape):
    x, y = _xent_args(shape)
    assert "softmax_xent" in _prims(xent_lse, x, y)
    np.testing.assert_allclose(np.asarray(funcgrad.jit(xent_lse)(x, y)),
                               np.asarray(xent_lse(x, y)), rtol=1e-12, atol=1e-12)
    g = funcgrad.grad(xent_lse)(x, y)
    with no_rewrites():
        want = funcgrad.grad(xent_lse)(x, y)
    np.testing.assert_allclose(np.asarray(g), np.asarray(want), rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# on CUDA: values and gradients against numpy, and an S2-like plan's fused kernels
# ---------------------------------------------------------------------------------------------

def cu(x):
    return funcgrad.device_put(np.asarray(x), "cuda")


def _np_xent(x, y):
    n = x.shape[-1]
    s = x - x.max(-1, keepdims=True)
    lse = np.log(np.exp(s).sum(-1))
    picked = np.take_along_axis(s, (y % n)[..., None], -1)[..., 0]
    p = np.exp(s - lse[..., None])
    onehot = np.eye(n, dtype=x.dtype)[y % n]
    return (lse - picked).mean(), (p - onehot) / max(y.size, 1)


@pytest.mark.cuda
@pytest.mark.skipif(not fcuda.usable(), reason="no GPU and no CUDA simulator")
@pytest.mark.parametrize("f", [xent_lse, xent_log_softmax], ids=lambda f: f.__name__)
@pytest.mark.parametrize("shape", [(2, 3, 5), (3, 1), (1, 4)])
def test_cross_entropy_on_cuda(f, shape):
    x, y = _xent_args(shape)
    x = x.astype(np.float32)
    want, dwant = _np_xent(x.astype(np.float64), y)
    step = funcgrad.jit(funcgrad.value_and_grad(f))
    val, g = step(cu(x), cu(y))
    assert g.device == "cuda"
    np.testing.assert_allclose(float(val), want, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(g), dwant, rtol=2e-4, atol=2e-6)


@pytest.mark.cuda
@pytest.mark.skipif(not fcuda.usable(), reason="no GPU and no CUDA simulator")
@pytest.mark.parametrize("shape", [(2, 3, 8), (4, 1), (1, 6)])
def test_rms_norm_on_cuda(shape):
    rng = np.random.default_rng(4)
    x = rng.standard_normal(shape).astype(np.float32)
    g = (rng.standard_normal(shape[-1]) + 2).astype(np.float32)
    w = rng.standard_normal(shape).astype(np.float32)
    r = 1 / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6)
    want = x * r * g
    got = funcgrad.jit(rms_rsqrt)(cu(x), cu(g))
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=1e-6)

    def loss(x, g):
        return (rms_rsqrt(x, g) * w).sum()
    gx, gg = funcgrad.jit(funcgrad.grad(loss, argnums=(0, 1)))(cu(x), cu(g))
    xh = x * r
    c = w * g
    want_gx = r * (c - xh * (c * xh).mean(-1, keepdims=True))
    np.testing.assert_allclose(np.asarray(gx), want_gx, rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(np.asarray(gg), (w * xh).reshape(-1, shape[-1]).sum(0),
                               rtol=2e-4, atol=2e-5)


@pytest.mark.cuda
@pytest.mark.skipif(not fcuda.usable(), reason="no GPU and no CUDA simulator")
def test_s2_like_plan_fuses_rms_norm_and_cross_entropy():
    """A tiny Llama-like step (RMSNorm, logits, the cross-entropy as users write it) plans
    rms_norm / softmax_xent and their backward kernels, and no gather of the logits."""
    rng = np.random.default_rng(5)
    V, D, B, T = 11, 4, 2, 3
    p = {k: cu(rng.standard_normal(s).astype(np.float32) * 0.3)
         for k, s in {"wte": (V, D), "g": (D,), "head": (D, V)}.items()}
    idx = cu(rng.integers(0, V, (B, T)).astype(np.int32))

    def loss(p, idx, tgt):
        h = rms_rsqrt(fnp.take(p["wte"], idx, axis=0), p["g"])
        return xent_lse(h @ p["head"], tgt)
    step = funcgrad.jit(funcgrad.value_and_grad(loss))
    desc = step.lower(p, idx, idx).compile().describe()
    kernels = [line.split()[0] for line in desc.splitlines()[1:]]
    for k in ("rms_norm", "rms_norm_bwd", "softmax_xent", "softmax_xent_bwd"):
        assert kernels.count(k) == 1, desc
    takes = [line for line in desc.splitlines()[1:] if line.split()[0] == "take"]
    # the embedding's gather, and the labels' own check (take(iota(V), y): int32, one per row);
    # no gather of the logits
    assert sorted(t.split()[2].split("[")[0] for t in takes) == ["f32", "i32"], desc
