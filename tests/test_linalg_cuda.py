"""funcgrad.numpy.linalg on the CUDA backend (simulator or GPU) against the CPU backend: the
one-thread-per-matrix kernels through the public API, gradients and a jitted program."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import funcgrad
import funcgrad.cuda as fcuda
import funcgrad.numpy as fnp
from funcgrad.scipy import linalg as sla

REQUIRE_GPU = os.environ.get("FUNCGRAD_REQUIRE_GPU", "") == "1"
pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not (fcuda.usable() or REQUIRE_GPU),
                       reason="no GPU; run with NUMBA_ENABLE_CUDASIM=1 to use the simulator"),
]
LA = fnp.linalg


@pytest.fixture(scope="module", autouse=True)
def _switch():
    old = sys.getswitchinterval()
    if fcuda.simulator_active():
        sys.setswitchinterval(1e-4)
    yield
    sys.setswitchinterval(old)


def cu(x):
    return funcgrad.device_put(np.asarray(x), "cuda")


def same(fn, *args, tol=None):
    """fn on "cuda" arrays equals fn on the CPU backend, leaf by leaf (numpy operands alone
    would go to the default device, "cuda" on a GPU host)."""
    got = fn(*[cu(a) for a in args])
    with funcgrad.default_device("cpu"):
        want = fn(*args)
    got_l, want_l = funcgrad.tree_util.tree_leaves(got), funcgrad.tree_util.tree_leaves(want)
    for g, w in zip(got_l, want_l):
        assert g.device == "cuda"
        t = tol or (1e-4 if w.dtype == np.float32 else 1e-9)
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=t, atol=t)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_decompositions_match_cpu(dtype):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((2, 3, 3)) + 3 * np.eye(3)).astype(dtype)
    s = (a @ np.swapaxes(a, -1, -2)).astype(dtype)
    b = rng.standard_normal((2, 3, 2)).astype(dtype)
    r = rng.standard_normal((3, 2)).astype(dtype)
    same(LA.solve, a, b)
    same(LA.inv, a)
    same(LA.slogdet, a)
    same(LA.cholesky, s)
    same(LA.eigh, s)
    same(lambda x: LA.eigh(x, UPLO="U", symmetrize_input=False), a)
    same(lambda x: LA.svd(x, full_matrices=False), r)
    same(lambda x: LA.svd(x, full_matrices=True), r.T)
    same(lambda x: LA.qr(x, "complete"), r)
    same(lambda x, y: sla.solve_triangular(x, y, trans=1, lower=True), a, b)
    same(lambda x: LA.norm(x, 2), r)


def test_empty_and_one_by_one():
    for shape in [(0, 2, 2), (2, 0, 0), (1, 1)]:
        a = np.ones(shape) * 2
        same(LA.inv, a)
        same(LA.eigh, a)
        same(lambda x: LA.svd(x, compute_uv=False), a)
        same(lambda x: LA.qr(x), a)
    same(lambda x: LA.svd(x, full_matrices=False), np.zeros((3, 0)))


def test_not_positive_definite_nan_on_device():
    out = np.asarray(LA.cholesky(cu(np.stack([np.eye(2), -np.eye(2)]))))
    np.testing.assert_array_equal(out[0], np.eye(2))
    assert np.isnan(out[1]).all()


def test_rank_deficient_svd_is_orthonormal():
    u, s, vh = LA.svd(cu(np.outer([1.0, 2.0, 2.0], [1.0, 0.0])), full_matrices=False)
    u = np.asarray(u)
    np.testing.assert_allclose(np.asarray(s), [3.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(u.T @ u, np.eye(2), atol=1e-12)


def test_grad_and_jit_on_cuda_equal_cpu():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 3)) + 3 * np.eye(3)
    b = rng.standard_normal(3)

    def loss(a, b):
        w, v = LA.eigh(a @ a.T)
        return (fnp.sum(LA.solve(a, b) ** 2) + LA.slogdet(a)[1] + fnp.sum(w)
                + fnp.sum(LA.svd(a, compute_uv=False)) + fnp.sum(LA.qr(a)[1]))
    g = funcgrad.jit(funcgrad.grad(loss, argnums=(0, 1)))
    same(g, a, b, tol=1e-8)
