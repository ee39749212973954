"""concatenate on CUDA (funcgrad/cuda/concat.py): values and gradients against numpy for every
axis, strided and 0-/1-sized pieces, and a launch whose grid covers the output whatever its
outer size (one grid-stride loop over the flat output, not a block per output row)."""
from __future__ import annotations

import numpy as np
import pytest

import funcgrad
import funcgrad.cuda as fcuda
import funcgrad.numpy as fnp

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not fcuda.usable(), reason="no GPU and no CUDA simulator"),
]


def cu(x):
    return funcgrad.device_put(np.asarray(x), "cuda")


@pytest.fixture
def launches(monkeypatch):
    """(blocks, threads) of every concatenate kernel launched while the test runs."""
    from funcgrad.cuda import runtime
    seen = []
    real = runtime.kernel

    class Recorder:
        def __init__(self, k):
            self.k = k

        def __getitem__(self, cfg):
            seen.append((cfg[0], cfg[1]))
            return self.k[cfg]

    def kernel(key, make, *a, **kw):
        k = real(key, make, *a, **kw)
        return Recorder(k) if str(key[0]).startswith("concat") else k
    monkeypatch.setattr(runtime, "kernel", kernel)
    return seen


CASES = [  # piece shapes, axis
    ([(3, 4), (2, 4), (1, 4)], 0), ([(3, 4), (3, 1), (3, 0), (3, 2)], 1),
    ([(2, 3, 4), (2, 1, 4)], 1), ([(1, 5), (1, 5)], 0), ([(2, 0), (2, 0)], 1),
    ([(6, 2, 3)] * 5, 2), ([(1,), (1,), (1,)], 0), ([(0, 3), (2, 3)], 0),
]


@pytest.mark.parametrize("shapes,axis", CASES)
def test_concatenate_matches_numpy(shapes, axis):
    rng = np.random.default_rng(len(shapes) + axis)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    got = fnp.concatenate([cu(x) for x in xs], axis=axis)
    assert got.device == "cuda"
    np.testing.assert_array_equal(np.asarray(got), np.concatenate(xs, axis=axis))


def test_strided_pieces_and_gradient():
    """Transposed and sliced pieces (read through their strides); the VJP slices back."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal((6, 4)).astype(np.float32)
    w = rng.standard_normal((4, 7)).astype(np.float32)

    def f(a, b):
        return (fnp.concatenate([a, b[::2].T, a[:, :1]], axis=1) * w).sum()
    want = np.concatenate([a, b[::2].T, a[:, :1]], axis=1)
    got = fnp.concatenate([cu(a), cu(b)[::2].T, cu(a)[:, :1]], axis=1)
    np.testing.assert_array_equal(np.asarray(got), want)
    ga, gb = funcgrad.grad(f, argnums=(0, 1))(cu(a), cu(b))
    wa = w[:, :3].copy()
    wa[:, :1] += w[:, 6:]
    wb = np.zeros_like(b)
    wb[::2] = w[:, 3:6].T
    np.testing.assert_allclose(np.asarray(ga), wa, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(gb), wb)


@pytest.mark.parametrize("shape,n,stack", [((5, 3), 4, True), ((40, 2), 3, False),
                                           ((9, 4), 2, False)])
def test_grid_covers_the_output(launches, shape, n, stack):
    """dim 0 with outer 1 (a stack, D1's 12 KV caches) and long outer rows of few elements (S2's
    RoPE): the launch has as many threads as the output (up to the grid cap), not one block per
    outer row."""
    from funcgrad.cuda import runtime
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]
    if stack:
        got, want = fnp.stack([cu(x) for x in xs]), np.stack(xs)
    else:
        got, want = fnp.concatenate([cu(x) for x in xs], -1), np.concatenate(xs, -1)
    np.testing.assert_array_equal(np.asarray(got), want)
    assert launches, "concatenate did not take the one-kernel path"
    blocks, threads = launches[-1]
    assert (blocks, threads) == runtime.grid_1d(want.size), launches
