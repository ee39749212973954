"""Convolutions on cuDNN (funcgrad/cuda/conv_cudnn.py): how conv_general_dilated and its two
gradients map onto cuDNN's forward / backward-data / backward-filter calls, checked under the
simulator by a numpy stand-in for cuDNN that rejects sizes cuDNN would; on a real GPU, cuDNN
itself on ResNet-size layers (values and both gradients against float64 numpy) and a jitted
training step replayed from a CUDA graph."""
from __future__ import annotations

import contextlib
import itertools
import os

import numpy as np
import pytest
from conv_reference import conv_configs
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided

import funcgrad
import funcgrad.cuda as fcuda
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.cuda import conv as kernels
from funcgrad.cuda import conv_cudnn, cudnn

REQUIRE_GPU = os.environ.get("FUNCGRAD_REQUIRE_GPU", "") == "1"
SIM = fcuda.simulator_active()
pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not (fcuda.usable() or REQUIRE_GPU),
                       reason="no GPU; run with NUMBA_ENABLE_CUDASIM=1 to use the simulator"),
]


def cu(x):
    return funcgrad.device_put(np.asarray(x), "cuda")


def _on_cpu(f, *args, **kwargs):
    with funcgrad.default_device("cpu"):
        return f(*args, **kwargs)


# ---------------------------------------------------------------------------------------------
# a numpy stand-in for cuDNN's three calls (symmetric padding, groups, packed filters)
# ---------------------------------------------------------------------------------------------

class _FakePlan:
    def __init__(self, kind, x, w, y, fmt, pads, strides, dils, groups):
        self.kind, self.x, self.w, self.y, self.fmt = kind, x, w, y, fmt
        self.pads, self.strides, self.dils, self.groups = pads, strides, dils, groups
        self.ws = 0
        # cuDNN's own size check: y's spatial sizes are x's through the convolution
        want = [conv_cudnn.cdim(n, p, k, s, d) for n, p, k, s, d in
                zip(x[0][2:], pads, w[2:], strides, dils)]
        assert list(y[0][2:]) == want, (x, w, y, pads, strides, dils)
        assert x[0][1] == w[1] * groups and y[0][1] == w[0] and x[0][0] == y[0][0]
        assert min(x[1]) >= 0 and min(y[1]) >= 0


def _fake_plan(kind, dtype, x, w, y, fmt, pads, strides, dils, groups, precision):
    return _FakePlan(kind, x, w, y, fmt, pads, strides, dils, groups)


def _flat(buf):
    return buf.arr().copy_to_host()


def _strided(flat, buf, dims, strides):
    it = flat.itemsize
    return as_strided(flat[buf.offset:], shape=dims, strides=[s * it for s in strides])


def _filter(flat, buf, dims, fmt):
    n = int(np.prod(dims))
    a = flat[buf.offset:buf.offset + n]
    if fmt == cudnn.NCHW:
        return a.reshape(dims)
    return np.moveaxis(a.reshape([dims[0]] + list(dims[2:]) + [dims[1]]), -1, 1)


def _taps(p, out_sp):
    for r in itertools.product(*map(range, p.w[2:])):
        yield r, tuple(slice(ri * d, ri * d + (o - 1) * s + 1, s) for ri, d, o, s in
                       zip(r, p.dils, out_sp, p.strides))


def _fake_execute(p, X, W, Y, WS):
    G = p.groups
    xf, wf, yf = _flat(X), _flat(W), _flat(Y)
    x = _strided(xf, X, *p.x).astype(np.float64)
    y = _strided(yf, Y, *p.y).astype(np.float64)
    w = _filter(wf, W, p.w, p.fmt).astype(np.float64)
    N, C, K = x.shape[0], x.shape[1], w.shape[0]
    wg = w.reshape((G, K // G) + w.shape[1:])
    pad = ((0, 0), (0, 0)) + tuple((q, q) for q in p.pads)
    osp = y.shape[2:]
    if p.kind == "fwd":
        xp = np.pad(x, pad).reshape((N, G, C // G) + tuple(np.add(x.shape[2:], 2 * np.array(
            p.pads))))
        res = np.zeros((N, G, K // G) + osp)
        for r, sl in _taps(p, osp):
            res += np.einsum("ngc...,gkc->ngk...", xp[(slice(None),) * 3 + sl],
                             wg[(Ellipsis,) + r])
        out, dst, dims = res.reshape(y.shape), (yf, Y), p.y
    elif p.kind == "bwd_data":
        xsp = tuple(np.add(x.shape[2:], 2 * np.array(p.pads)))
        dxp = np.zeros((N, G, C // G) + xsp)
        dy = y.reshape((N, G, K // G) + osp)
        for r, sl in _taps(p, osp):
            dxp[(slice(None),) * 3 + sl] += np.einsum("ngk...,gkc->ngc...", dy,
                                                      wg[(Ellipsis,) + r])
        crop = tuple(slice(q, q + n) for q, n in zip(p.pads, x.shape[2:]))
        out, dst, dims = dxp.reshape((N, C) + xsp)[(slice(None),) * 2 + crop], (xf, X), p.x
    else:
        xp = np.pad(x, pad)
        xp = xp.reshape((N, G, C // G) + xp.shape[2:])
        dy = y.reshape((N, G, K // G) + osp)
        dw = np.zeros(wg.shape)
        for r, sl in _taps(p, osp):
            xs = xp[(slice(None),) * 3 + sl]
            dw[(Ellipsis,) + r] = np.einsum("ngks,ngcs->gkc", dy.reshape(dy.shape[:3] + (-1,)),
                                            xs.reshape(xs.shape[:3] + (-1,)))
        dw = dw.reshape(w.shape)
        if p.fmt == cudnn.NHWC:
            dw = np.moveaxis(dw, 1, -1)
        n = dw.size
        wf[W.offset:W.offset + n] = dw.reshape(-1)
        W.arr().copy_to_device(wf)
        return
    flat, buf = dst
    view = as_strided(flat[buf.offset:], shape=dims[0],
                      strides=[s * flat.itemsize for s in dims[1]], writeable=True)
    view[...] = out
    buf.arr().copy_to_device(flat)


@contextlib.contextmanager
def _fake_cudnn():
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield _patch(monkeypatch)


def _patch(monkeypatch):
    monkeypatch.setattr(cudnn, "available", lambda dtype: True)
    monkeypatch.setattr(cudnn, "plan", _fake_plan)
    monkeypatch.setattr(cudnn, "execute", _fake_execute)
    monkeypatch.setattr(conv_cudnn, "_ptr", lambda buf: buf)
    monkeypatch.setattr(kernels, "MODE", "cudnn")


CONFIGS = st.composite(lambda draw: conv_configs(draw, st, nonempty=True))()


def _loss(params, ct):
    def f(a, b):
        return fnp.sum(lax.conv_general_dilated(a, b, **params) * ct)
    return f


@settings(max_examples=12 if SIM else 40, deadline=None)
@given(data=st.data())
def test_mapping_onto_cudnn_calls_matches_numpy(data):
    """Random layouts, groups, strides, padding and dilations: the value and both gradients
    through the stand-in equal the CPU's, and the gradients took the backward calls."""
    lhs, rhs, params = data.draw(CONFIGS)
    lhs, rhs = lhs.astype(np.float32), rhs.astype(np.float32)
    want = np.asarray(_on_cpu(lax.conv_general_dilated, lhs, rhs, **params))
    ct = np.random.default_rng(1).standard_normal(want.shape).astype(np.float32)
    gwant = _on_cpu(funcgrad.grad(_loss(params, ct), argnums=(0, 1)), lhs, rhs)
    with _fake_cudnn():
        before = dict(conv_cudnn.calls)
        got = lax.conv_general_dilated(cu(lhs), cu(rhs), **params)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
        ggot = funcgrad.grad(_loss(params, cu(ct)), argnums=(0, 1))(cu(lhs), cu(rhs))
    for g, w in zip(ggot, gwant):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-4)
    if want.size and conv_cudnn.choose(lhs.shape, rhs.shape, want.shape, params) is not None:
        assert sum(conv_cudnn.calls.values()) > sum(before.values())


@pytest.mark.parametrize("stride,padding,dn", [
    (2, "SAME", ("NHWC", "HWIO", "NHWC")), (2, ((1, 1), (1, 1)), ("NHWC", "HWIO", "NHWC")),
    (1, "SAME", ("NCHW", "OIHW", "NCHW"))])
def test_resnet_layer_gradients_take_the_backward_calls(stride, padding, dn):
    """A 3x3 layer's three convolutions become fwd, bwd_data (stride 2) or fwd (stride 1,
    the reversed kernel) and bwd_filter, "SAME" at stride 2 included."""
    rng = np.random.default_rng(0)
    nhwc = dn[0] == "NHWC"
    x = rng.standard_normal((2, 8, 8, 3) if nhwc else (2, 3, 8, 8)).astype(np.float32)
    k = rng.standard_normal((3, 3, 3, 4) if nhwc else (4, 3, 3, 3)).astype(np.float32)
    params = {"window_strides": (stride, stride), "padding": padding, "dimension_numbers": dn}
    want = np.asarray(_on_cpu(lax.conv_general_dilated, x, k, **params))
    ct = rng.standard_normal(want.shape).astype(np.float32)
    gwant = _on_cpu(funcgrad.grad(_loss(params, ct), argnums=(0, 1)), x, k)
    with _fake_cudnn():
        before = dict(conv_cudnn.calls)
        ggot = funcgrad.grad(_loss(params, cu(ct)), argnums=(0, 1))(cu(x), cu(k))
        made = {kind: conv_cudnn.calls[kind] - before[kind] for kind in cudnn.KINDS}
    for g, w in zip(ggot, gwant):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-4)
    assert made["bwd_filter"] == 1 and made["fwd"] == (2 if stride == 1 else 1), made
    assert made["bwd_data"] == (1 if stride == 2 else 0), made


def test_choose_declines_what_cudnn_cannot_run():
    base = {"window_strides": (1,), "padding": ((1, 1),), "lhs_dilation": (1,), "rhs_dilation": (1,),
                "dimension_numbers": ((0, 1, 2),) * 3, "feature_group_count": 1, "batch_group_count": 1}
    assert conv_cudnn.choose((2, 3, 8), (4, 3, 3), (2, 4, 8), base)["kind"] == "fwd"
    neg = dict(base, padding=((-1, 1),))
    assert conv_cudnn.choose((2, 3, 8), (4, 3, 3), (2, 4, 6), neg) is None
    both = dict(base, window_strides=(2,), lhs_dilation=(2,))
    assert conv_cudnn.choose((2, 3, 8), (4, 3, 3), (2, 4, 8), both) is None
    four = dict(base, window_strides=(1,) * 4, padding=((0, 0),) * 4, lhs_dilation=(1,) * 4,
                rhs_dilation=(1,) * 4, dimension_numbers=(tuple(range(6)),) * 3)
    assert conv_cudnn.choose((1,) * 6, (1,) * 6, (1,) * 6, four) is None


def test_backend_names_the_engine_or_the_reason():
    b = cudnn.backend()
    assert b.startswith(("cudnn ", "numba: "))
    if SIM:
        assert "simulator" in b


# ---------------------------------------------------------------------------------------------
# real cuDNN (a GPU with libcudnn): ResNet-size layers, float64 references
# ---------------------------------------------------------------------------------------------

needs_cudnn = pytest.mark.skipif(SIM or not cudnn.backend().startswith("cudnn"),
                                 reason="needs a GPU with libcudnn.so.9")

RESNET_LAYERS = [   # (batch, H, C in, C out, kernel, stride, padding, groups, layout)
    (32, 32, 64, 64, 3, 1, "SAME", 1, "NHWC"),
    (32, 32, 64, 128, 3, 2, ((1, 1), (1, 1)), 1, "NHWC"),
    (32, 16, 128, 256, 3, 2, "SAME", 1, "NHWC"),
    (32, 16, 64, 128, 1, 2, "VALID", 1, "NHWC"),
    (16, 8, 512, 512, 3, 1, "SAME", 1, "NCHW"),
    (16, 16, 128, 128, 3, 1, "SAME", 128, "NHWC"),        # depthwise
    (16, 16, 128, 128, 3, 2, ((1, 1), (1, 1)), 4, "NCHW"),   # feature groups, strided
]


def _layer(n, h, ci, co, k, s, pad, g, layout, dil=1):
    rng = np.random.default_rng(hash((n, h, ci, co, k, s, g)) % 2 ** 32)
    nhwc = layout == "NHWC"
    x = rng.standard_normal((n, h, h, ci) if nhwc else (n, ci, h, h)).astype(np.float32)
    w = (rng.standard_normal((k, k, ci // g, co) if nhwc else (co, ci // g, k, k))
         / np.sqrt(k * k * ci / g)).astype(np.float32)
    dn = ("NHWC", "HWIO", "NHWC") if nhwc else ("NCHW", "OIHW", "NCHW")
    params = {"window_strides": (s, s), "padding": pad, "rhs_dilation": (dil, dil),
                  "dimension_numbers": dn, "feature_group_count": g}
    return x, w, params


@needs_cudnn
@pytest.mark.parametrize("layer", RESNET_LAYERS, ids=lambda v: "-".join(map(str, v)))
def test_resnet_size_layers_values_and_grads(layer):
    x, w, params = _layer(*layer)
    want = np.asarray(_on_cpu(lax.conv_general_dilated, x.astype(np.float64),
                              w.astype(np.float64), **params))
    ct = np.random.default_rng(2).standard_normal(want.shape).astype(np.float32)
    f64 = _on_cpu(funcgrad.grad(_loss(params, ct.astype(np.float64)), argnums=(0, 1)),
                  x.astype(np.float64), w.astype(np.float64))
    before = dict(conv_cudnn.calls)
    got = lax.conv_general_dilated(cu(x), cu(w), **params)
    g = funcgrad.grad(_loss(params, cu(ct)), argnums=(0, 1))(cu(x), cu(w))
    made = {kind: conv_cudnn.calls[kind] - before[kind] for kind in cudnn.KINDS}
    assert made["bwd_filter"] >= 1 and made["fwd"] >= 2 - (layer[5] > 1), made
    for a, b in [(got, want)] + list(zip(g, f64)):
        b = np.asarray(b)
        scale = np.abs(b).max() + 1e-30
        err = np.abs(np.asarray(a, np.float64) - b).max() / scale
        # full float32, relative to the largest value; the algorithm cuDNN's timing picks may
        # be a Winograd / FFT one (as XLA lets it), whose rounding error is larger than a direct
        # sum's: 1.9e-5 seen at 512 channels x 3x3 (K 4,608) on an H200
        assert err < 1e-4, err


@needs_cudnn
def test_tf32_precision_and_dilation():
    x, w, params = _layer(8, 16, 64, 64, 3, 1, "SAME", 1, "NHWC", dil=2)
    want = np.asarray(_on_cpu(lax.conv_general_dilated, x.astype(np.float64),
                              w.astype(np.float64), **params))
    got = np.asarray(lax.conv_general_dilated(cu(x), cu(w), precision="tensorfloat32",
                                              **params))
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err < 5e-3, err


@needs_cudnn
def test_jitted_cnn_step_replays_cudnn_from_a_cuda_graph():
    x, w, params = _layer(16, 16, 32, 32, 3, 2, "SAME", 1, "NHWC")
    ct = np.random.default_rng(3).standard_normal(
        np.asarray(_on_cpu(lax.conv_general_dilated, x, w, **params)).shape).astype(np.float32)
    step = funcgrad.jit(lambda a, b: funcgrad.value_and_grad(_loss(params, ct),
                                                            argnums=(0, 1))(a, b))
    want = _on_cpu(funcgrad.value_and_grad(_loss(params, ct), argnums=(0, 1)), x, w)
    xs, ws = cu(x), cu(w)
    for _ in range(4):
        v, (gx, gw) = step(xs, ws)
        np.testing.assert_allclose(float(v), float(want[0]), rtol=1e-4)
        np.testing.assert_allclose(np.asarray(gx), np.asarray(want[1][0]), rtol=1e-3,
                                   atol=1e-4)
        np.testing.assert_allclose(np.asarray(gw), np.asarray(want[1][1]), rtol=1e-3,
                                   atol=1e-3)
    plan = step.lower(xs, ws).compile()
    assert plan.graphs is not None, plan.graph_error
