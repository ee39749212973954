"""Convolution and window kernels on the CUDA backend against numpy: random configurations
(layouts, groups, padding, dilations), strided operands, dtypes, max-pool ties and NaNs,
gradients and a jitted CNN training step. Real GPU, or the simulator on tiny shapes."""
from __future__ import annotations

import contextlib
import os

import numpy as np
import pytest
from conv_reference import conv_configs
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad
import funcgrad.cuda as fcuda
import funcgrad.numpy as fnp
from funcgrad import lax, nn, optim, prims
from funcgrad.core import bind
from funcgrad.prims.windows import (
    reduce_window_max_p,
    reduce_window_sum_p,
    select_and_scatter_add_p,
)

REQUIRE_GPU = os.environ.get("FUNCGRAD_REQUIRE_GPU", "") == "1"
SIM = fcuda.simulator_active()
pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not (fcuda.usable() or REQUIRE_GPU),
                       reason="no GPU; run with NUMBA_ENABLE_CUDASIM=1 to use the simulator"),
]


@pytest.fixture(scope="module", autouse=True)
def _device_setup(fast_barriers):
    if REQUIRE_GPU:
        assert fcuda.is_available(), fcuda.unavailable_reason()


def cu(x):
    return funcgrad.device_put(np.asarray(x), "cuda")


def _on_cpu(f, *args, **kwargs):
    """f on the CPU backend: the reference (numpy operands alone would go to the default
    device, "cuda" on a GPU host, and compile kernels there for a CUDA-to-CUDA comparison)."""
    with funcgrad.default_device("cpu"):
        return f(*args, **kwargs)


def _transposed(a):
    """A "cuda" array equal to a, read through reversed-axis (non-contiguous) strides."""
    t = cu(np.ascontiguousarray(np.transpose(a)))
    return bind(prims.transpose_p, t, permutation=tuple(range(a.ndim))[::-1])


@contextlib.contextmanager
def _path(mode):
    """Run convolutions through the direct kernel or through im2col + GEMM."""
    from funcgrad.cuda import conv as kernels
    old, kernels.MODE = kernels.MODE, mode
    try:
        yield
    finally:
        kernels.MODE = old


def _cudnn_here() -> bool:
    from funcgrad.cuda import cudnn
    return not SIM and cudnn.backend().startswith("cudnn")


PATHS = ["direct", "gemm", pytest.param("cudnn", marks=pytest.mark.skipif(
    not _cudnn_here(), reason="needs a GPU with libcudnn.so.9"))]


@pytest.fixture(params=PATHS)
def conv_path(request):
    with _path(request.param):
        yield request.param


CONFIGS = st.composite(lambda draw: conv_configs(draw, st, nonempty=True))()


@pytest.mark.parametrize("mode", PATHS)
@settings(max_examples=8 if SIM else 50, deadline=None)
@given(data=st.data())
def test_random_convolutions_match_numpy(mode, data):
    lhs, rhs, params = data.draw(CONFIGS)
    lhs, rhs = lhs.astype(np.float32), rhs.astype(np.float32)
    want = _on_cpu(lax.conv_general_dilated, lhs, rhs, **params)
    with _path(mode):
        for a, b in [(cu(lhs), cu(rhs)), (_transposed(lhs), _transposed(rhs))]:
            got = lax.conv_general_dilated(a, b, **params)
            assert got.device == "cuda" and got.shape == want.shape
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4,
                                       atol=1e-5)


@pytest.mark.parametrize("dtype,pet", [("float16", None), ("float16", "float32"),
                                       ("float64", None), ("int32", None),
                                       ("int32", "int64"), ("float32", "float64")])
def test_conv_dtypes(conv_path, dtype, pet):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((2, 5, 4, 3)) * 3).astype(dtype)
    k = (rng.standard_normal((3, 2, 3, 4)) * 3).astype(dtype)
    kw = dict(window_strides=(2, 1), padding="SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
              preferred_element_type=pet)
    want = np.asarray(_on_cpu(lax.conv_general_dilated, x, k, **kw))
    got = lax.conv_general_dilated(cu(x), cu(k), **kw)
    assert got.dtype == want.dtype
    tol = 1e-2 if want.dtype == np.float16 else 1e-5
    np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol)


def test_conv_gemm_operands_have_the_result_dtype(monkeypatch):
    """float16 operands with preferred_element_type=float32: the GEMM path hands dot_general
    operands of the result dtype (cuBLAS writes C in the operands' type: a float16 C in the
    float32 result filled half of it, the second batch element read zeros on an H200)."""
    from funcgrad.cuda import matmul
    seen = []
    real = matmul.dot_general

    def spy(x, y, dimension_numbers, out_aval, precision=None):
        seen.append((x.dtype.name, y.dtype.name, np.dtype(out_aval.dtype).name))
        return real(x, y, dimension_numbers, out_aval, precision)

    monkeypatch.setattr(matmul, "dot_general", spy)
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((2, 5, 4, 3)) * 3).astype(np.float16)
    k = (rng.standard_normal((3, 2, 3, 4)) * 3).astype(np.float16)
    kw = dict(window_strides=(2, 1), padding="SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
              preferred_element_type=np.float32)
    want = np.asarray(_on_cpu(lax.conv_general_dilated, x, k, **kw))
    with _path("gemm"):
        got = lax.conv_general_dilated(_transposed(x), cu(k), **kw)
    assert seen and all(t == ("float32", "float32", "float32") for t in seen), seen
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_window_kernels_ties_nan_and_dilations():
    x = np.array([[1.0, 3.0, 3.0, 0.0, 2.0],
                  [2.0, np.nan, 5.0, 5.0, 1.0],
                  [7.0, 7.0, 1.0, -np.inf, 1.0]], np.float32)
    for p in [dict(window_dimensions=(2, 2), window_strides=(1, 2), padding=((0, 1), (1, 0)),
                   base_dilation=(1, 1), window_dilation=(1, 1)),
              dict(window_dimensions=(2, 3), window_strides=(2, 1), padding=((1, 1), (0, 2)),
                   base_dilation=(2, 1), window_dilation=(1, 2))]:
        for prim in (reduce_window_sum_p, reduce_window_max_p):
            want = prim.impl(x, **p)
            got = np.asarray(bind(prim, cu(x), **p))
            np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)
        clean = np.nan_to_num(x, nan=5.0)    # ties (5, 5) and (7, 7): the first one wins
        out = reduce_window_max_p.impl(clean, **p)
        src = np.arange(1, out.size + 1, dtype=np.float32).reshape(out.shape)
        for sel in ("ge", "le"):
            want = select_and_scatter_add_p.impl(src, clean, select_prim=sel, **p)
            got = bind(select_and_scatter_add_p, cu(src), _transposed(clean), select_prim=sel,
                       **p)
            np.testing.assert_array_equal(np.asarray(got), want)
        pool = lambda a, p=p: bind(reduce_window_max_p, a, **p)
        t = np.arange(x.size, dtype=np.float32).reshape(x.shape)
        want = _on_cpu(funcgrad.jvp, pool, (clean,), (t,))[1]
        got = funcgrad.jvp(pool, (_transposed(clean),), (cu(t),))[1]
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def _cnn_loss(params, x, y):
    h = lax.conv_general_dilated(x, params["w"], (1, 1), "SAME",
                                 dimension_numbers=("NHWC", "HWIO", "NHWC"))
    h = lax.reduce_window(nn.relu(h), -np.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    h = lax.reduce_window(h, 0.0, lax.add, (1, 2, 2, 1), (1, 1, 1, 1), "SAME") / 4.0
    logits = fnp.reshape(h, (h.shape[0], -1)) @ params["d"]
    return fnp.mean(nn.softmax_cross_entropy_with_integer_labels(logits, y))


def _cnn_args(rng):
    params = {"w": rng.standard_normal((3, 3, 1, 2)).astype(np.float32),
              "d": rng.standard_normal((8, 3)).astype(np.float32)}
    return params, rng.random((2, 4, 4, 1)).astype(np.float32), np.array([0, 2], np.int32)


def test_cnn_grad_and_jitted_adam_step_equal_cpu(conv_path):
    params, x, y = _cnn_args(np.random.default_rng(1))
    want = _on_cpu(funcgrad.grad(_cnn_loss), params, x, y)
    got = funcgrad.grad(_cnn_loss)(*funcgrad.device_put((params, x, y), "cuda"))
    for k in want:
        assert got[k].device == "cuda"
        np.testing.assert_allclose(np.asarray(got[k]), np.asarray(want[k]), rtol=2e-4,
                                   atol=2e-5)
    opt = optim.adam(1e-2)

    def step(p, s, x, y):
        v, g = funcgrad.value_and_grad(_cnn_loss)(p, x, y)
        u, s = opt.update(g, s, p)
        return optim.apply_updates(p, u), s, v
    step = funcgrad.jit(step)
    outs = {}
    for dev in ("cpu", "cuda"):
        p, xs, ys = funcgrad.device_put((params, x, y), dev)
        s = opt.init(p)
        for _ in range(2):
            p, s, v = step(p, s, xs, ys)
        outs[dev] = (p, v)
    np.testing.assert_allclose(float(outs["cuda"][1]), float(outs["cpu"][1]), rtol=1e-4)
    for k in params:
        np.testing.assert_allclose(np.asarray(outs["cuda"][0][k]), np.asarray(outs["cpu"][0][k]),
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("window,strides,padding", [
    ((1, 3, 3, 1), (1, 2, 2, 1), ((0, 0), (1, 1), (1, 1), (0, 0))),   # ResNet's stem pool
    ((1, 2, 2, 1), (1, 2, 2, 1), ((0, 0), (0, 0), (0, 0), (0, 0))),
    ((2, 3, 1, 2), (1, 1, 2, 2), ((1, 0), (0, 2), (1, 1), (0, 1)))])
def test_max_pool_gradient_two_passes_equal_cpu(window, strides, padding):
    """select_and_scatter_add's two passes (the windows' selections once, then each element
    reads those of the windows holding it) against numpy, rounded values making ties."""
    rng = np.random.default_rng(4)
    x = np.round(rng.standard_normal((2, 7, 6, 3)) * 2).astype(np.float32)
    p = {"window_dimensions": window, "window_strides": strides, "padding": padding,
         "base_dilation": (1,) * 4, "window_dilation": (1,) * 4}
    out = reduce_window_max_p.impl(x, **p)
    src = rng.standard_normal(out.shape).astype(np.float32)
    want = select_and_scatter_add_p.impl(src, x, select_prim="ge", **p)
    got = bind(select_and_scatter_add_p, cu(src), cu(x), select_prim="ge", **p)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)
