"""CUDA row kernels of the fused primitives (softmax, log_softmax, softmax_xent, layer_norm,
rms_norm) against their numpy impls, on tiny shapes (numba's simulator in CI, or a real GPU)."""
from __future__ import annotations

import zlib

import numpy as np
import pytest
from prim_specs import SPECS

import funcgrad
import funcgrad.numpy as fnp
from funcgrad.prims import rows as F
from funcgrad import nn
from funcgrad.core import bind


def _usable() -> bool:
    try:
        from funcgrad import cuda
    except ImportError:
        return False
    return cuda.usable()


pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not _usable(), reason="no GPU and no CUDA simulator")]

FUSED = ["softmax", "log_softmax", "softmax_xent", "layer_norm", "rms_norm"]
# rows longer than a block (8 threads in the simulator) and more rows than blocks (2 there)
SHAPES = [(5,), (3, 1), (0, 3), (2, 0, 1), (2, 3, 4), (5, 19), (1, 37)]


def _on_cuda(args):
    return [funcgrad.device_put(a, "cuda") for a in args]


def _run(prim, args, params):
    out = bind(prim, *_on_cuda(args), **params)
    assert out.device == "cuda"
    return np.asarray(out)


@pytest.mark.parametrize("name", FUSED)
def test_kernel_matches_numpy_impl(name):
    spec = SPECS[name]
    for shape in [s for s in SHAPES if spec.supports(s)]:
        for dtype in (np.float32, np.float64):
            rng = np.random.default_rng(zlib.crc32(repr((name, shape, dtype)).encode()))
            args, params = spec.make_args(rng, shape, dtype)
            with np.errstate(all="ignore"):
                want = spec.prim.impl(*args, **params)
            got = _run(spec.prim, args, params)
            assert got.shape == want.shape and got.dtype == want.dtype
            rtol, atol = spec.tolerance(dtype)
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol,
                                       err_msg=f"{name} {shape} {np.dtype(dtype).name}")


@pytest.mark.parametrize("name", FUSED)
def test_kernel_float16_accumulates_in_float32(name):
    spec = SPECS[name]
    args, params = spec.make_args(np.random.default_rng(3), (3, 21), np.float16)
    got = _run(spec.prim, args, params)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), spec.prim.impl(*args, **params),
                               rtol=1e-2, atol=1e-2)


def test_kernels_are_stable_and_check_labels():
    big = np.array([[1000.0, 0.0, -1000.0], [1e4, 1e4, 1e4]], np.float32)
    np.testing.assert_allclose(_run(F.softmax_p, [big], {}), F.softmax_p.impl(big), atol=1e-7)
    np.testing.assert_allclose(_run(F.log_softmax_p, [big], {}), F.log_softmax_p.impl(big),
                               rtol=1e-6)
    labels = np.array([2, 1], np.int32)
    np.testing.assert_allclose(_run(F.softmax_xent_p, [big, labels], {}),
                               F.softmax_xent_p.impl(big, labels), rtol=1e-6)
    with pytest.raises(IndexError):
        _run(F.softmax_xent_p, [big, np.array([0, 3], np.int32)], {})
    with pytest.raises(IndexError):
        _run(F.softmax_xent_p, [big, np.array([-1, 0], np.int32)], {})
    x = (1e3 + np.random.default_rng(0).standard_normal((2, 33))).astype(np.float32)
    s, b = np.ones(33, np.float32), np.zeros(33, np.float32)
    np.testing.assert_allclose(_run(F.layer_norm_p, [x, s, b], {"eps": 1e-5}),
                               F.layer_norm_p.impl(x, s, b, eps=1e-5), rtol=1e-3, atol=1e-3)


def test_nn_on_cuda_matches_cpu():
    """Strided inputs (axis moves), broadcast scale constants, and backward passes built from
    other kernels around the fused ones."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 5))
    labels = rng.integers(0, 5, (2, 3))
    xc = funcgrad.device_put(x, "cuda")
    for f in (lambda z: nn.softmax(z, axis=1), lambda z: nn.log_softmax(z, axis=(0, 2)),
              lambda z: nn.layer_norm(z, axis=1), lambda z: nn.rms_norm(z, fnp.full(5, 2.0))):
        np.testing.assert_allclose(np.asarray(f(xc)), np.asarray(f(x)), rtol=1e-12, atol=1e-14)

    def loss(z):
        h = nn.layer_norm(z, fnp.full(5, 1.5), fnp.full(5, 0.1))
        return fnp.sum(nn.softmax_cross_entropy_with_integer_labels(nn.rms_norm(h), labels))
    gc = funcgrad.grad(loss)(xc)
    assert gc.device == "cuda"
    np.testing.assert_allclose(np.asarray(gc), np.asarray(funcgrad.grad(loss)(x)), rtol=1e-10,
                               atol=1e-12)


@pytest.mark.cuda
def test_backward_cluster_recomputes_gelu_values_instead_of_storing_them():
    """The forward cluster of gelu writes only what other steps read; the backward cluster
    recomputes tanh(...) and friends from the pre-activation (fewer stored intermediates)."""
    from funcgrad.cuda import fusion

    def f(x, w):
        return fnp.sum(nn.gelu(x @ w) @ w.T)

    g = funcgrad.jit(funcgrad.grad(f, argnums=(0, 1)))
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(4, 3)
    w = np.linspace(-1, 1, 9, dtype=np.float32).reshape(3, 3)
    steps = fusion.plan_steps(g.lower(x, w).expr)
    big = [s for k, s in steps if k == "fused" and list(s.shape) == [4, 3]]
    assert sum(len(s.outputs) for s in big) <= 3
    want = funcgrad.grad(f, argnums=(0, 1))(funcgrad.device_put(x, "cpu"),
                                            funcgrad.device_put(w, "cpu"))
    got = g(funcgrad.device_put(x, "cuda"), funcgrad.device_put(w, "cuda"))
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
