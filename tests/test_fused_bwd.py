"""Backward primitives of the fused row primitives (funcgrad/prims/rows_bwd.py): their warp-per-row
CUDA kernels against the numpy impls on hypothesis-drawn shapes (strided operands included),
and the vjps of nn.layer_norm / rms_norm / softmax / log_softmax / cross-entropy through them."""
from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prim_specs import SPECS

import funcgrad
import funcgrad.cuda as fcuda
import funcgrad.numpy as fnp
from funcgrad.prims import rows_bwd as FB
from funcgrad import nn
from funcgrad import prims as P
from funcgrad.core import bind
from funcgrad.test_util import check_grads

SIM = fcuda.simulator_active()
BWD = [p.name for p in FB.BWD_PRIMITIVES]
cuda_only = pytest.mark.skipif(not fcuda.usable(), reason="no GPU and no CUDA simulator")


@pytest.fixture(scope="module", autouse=True)
def _fast_barriers(fast_barriers):
    """The simulator's short GIL slices (conftest) for every test here."""


def _strided(a):
    """A transposed device view equal to `a` (rank >= 2), else a contiguous copy."""
    if a.ndim < 2:
        return funcgrad.device_put(a, "cuda")
    t = funcgrad.device_put(np.ascontiguousarray(np.swapaxes(a, 0, -1)), "cuda")
    perm = list(range(a.ndim))
    perm[0], perm[-1] = perm[-1], perm[0]
    return bind(P.transpose_p, t, permutation=tuple(perm))


@pytest.mark.cuda
@cuda_only
@pytest.mark.parametrize("name", BWD)
@settings(max_examples=6 if SIM else 40, deadline=None)
@given(data=st.data())
def test_kernel_matches_numpy(name, data):
    spec = SPECS[name]
    lead = data.draw(st.lists(st.integers(0, 5), max_size=2))
    n = data.draw(st.integers(1, 11 if SIM else 300))
    shape = tuple(lead) + (n,)
    dtype = data.draw(st.sampled_from([np.float32, np.float64]))
    strided = data.draw(st.booleans())
    args, params = spec.make_args(np.random.default_rng(n), shape, dtype)
    want = spec.prim.impl(*args, **params)
    ins = [_strided(a) if strided else funcgrad.device_put(a, "cuda") for a in args]
    got = bind(spec.prim, *ins, **params)
    assert got.device == "cuda"
    rtol, atol = spec.tolerance(np.dtype(dtype))
    np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=atol,
                               err_msg=f"{name} {shape} strided={strided}")


@pytest.mark.cuda
@cuda_only
@pytest.mark.parametrize("name", ["layer_norm_bwd", "rms_norm_bwd", "softmax_xent_bwd"])
def test_float16_and_many_rows(name):
    """float16 computes in float32; more rows than one group handles (partials combined)."""
    spec = SPECS[name]
    for shape, dtype, tol in [((3, 21), np.float16, 2e-2), ((37, 6), np.float32, 1e-4)]:
        args, params = spec.make_args(np.random.default_rng(1), shape, dtype)
        want = spec.prim.impl(*args, **params)
        got = bind(spec.prim, *[funcgrad.device_put(a, "cuda") for a in args], **params)
        np.testing.assert_allclose(np.asarray(got).astype(np.float32),
                                   want.astype(np.float32), rtol=tol, atol=tol)


def _losses():
    w = np.linspace(-1, 1, 7)
    labels = np.array([1, 0, 6, 3])
    return {
        "layer_norm": lambda x, s, b: (nn.layer_norm(x, s, b) ** 2 * w).sum(),
        "rms_norm": lambda x, s, b: (nn.rms_norm(x, s) ** 2 * w).sum() + b.sum(),
        "softmax": lambda x, s, b: (nn.softmax(x * s) ** 2 * w).sum(),
        "log_softmax": lambda x, s, b: (nn.log_softmax(x + b) * w).sum(),
        "xent": lambda x, s, b: fnp.mean(
            nn.softmax_cross_entropy_with_integer_labels(x * s, labels) ** 2),
    }


@pytest.mark.parametrize("which", sorted(_losses()))
def test_vjps_bind_backward_primitives_and_differentiate_twice(which):
    f = _losses()[which]
    rng = np.random.default_rng(2)
    args = (rng.standard_normal((4, 7)), rng.standard_normal(7) + 1.5, rng.standard_normal(7))
    prims = str(funcgrad.make_jaxpr(funcgrad.grad(f, argnums=(0, 1, 2)))(*args))
    assert "_bwd" in prims
    check_grads(f, args, order=2)


@pytest.mark.cuda
@cuda_only
@pytest.mark.parametrize("which", ["layer_norm", "xent"])
def test_jitted_grad_on_cuda_equals_cpu(which):
    f = _losses()[which]
    rng = np.random.default_rng(3)
    args = [rng.standard_normal((4, 7)).astype(np.float32),
            (rng.standard_normal(7) + 1.5).astype(np.float32),
            rng.standard_normal(7).astype(np.float32)]
    g = funcgrad.jit(funcgrad.grad(f, argnums=(0, 1, 2)))
    want = g(*args)
    got = g(*[funcgrad.device_put(a, "cuda") for a in args])
    for a, b in zip(got, want):
        assert a.device == "cuda"
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)
