"""Host-to-device copies through the pinned ring (funcgrad/cuda/h2d.py), on a GPU: the values
arrive even when the GPU is busy, the ring wraps around, the numpy source may change right after
the put, large arrays take the synchronous copy, and a jitted step fed numpy batches matches one
fed device batches."""
import os

import numpy as np
import pytest

import funcgrad
import funcgrad.cuda
import funcgrad.numpy as fnp

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or not funcgrad.cuda.usable(),
    reason="pinned memory and asynchronous copies: a GPU")]


def _busy():
    """Queue a few ms of GPU work (the copies after it must wait for it in stream order)."""
    a = funcgrad.device_put(np.ones((2048, 2048), np.float32) / 2048)
    for _ in range(8):
        a = a @ a
    return a


def test_small_puts_arrive_while_the_gpu_is_busy_and_the_ring_wraps():
    from funcgrad.cuda import h2d
    rng = np.random.default_rng(0)
    busy = _busy()
    srcs, outs = [], []
    for k in range(3 * h2d.SLOTS + 5):
        n = int(rng.integers(1, 5000))
        a = rng.standard_normal(n).astype(np.float32 if k % 2 else np.float64)
        want = a.copy()
        outs.append(funcgrad.device_put(a))
        a[:] = -1.0            # the caller may reuse its buffer at once
        srcs.append(want)
    for o, want in zip(outs, srcs):
        np.testing.assert_array_equal(np.asarray(o), want)
    assert np.isfinite(np.asarray(busy)).all()


def test_a_large_array_takes_the_synchronous_copy():
    from funcgrad.cuda import h2d
    a = np.arange(h2d.SLOT // 4 + 7, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(funcgrad.device_put(a)), a)


def test_a_step_fed_numpy_batches_matches_device_batches():
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((16, 8)).astype(np.float32)

    def step(w, x, y):
        loss, g = funcgrad.value_and_grad(lambda w: fnp.mean((x @ w - y) ** 2))(w)
        return w - 0.1 * g, loss

    f = funcgrad.jit(step, donate_argnums=(0,))
    xs = [rng.standard_normal((32, 16)).astype(np.float32) for _ in range(12)]
    ys = [rng.standard_normal((32, 8)).astype(np.float32) for _ in range(12)]
    w_np, w_dev = funcgrad.device_put(w0), funcgrad.device_put(w0)
    for x, y in zip(xs, ys):
        x2, y2 = x.copy(), y.copy()
        w_np, l_np = f(w_np, x, y)
        x[:], y[:] = 0.0, 0.0      # changed right after the call: the step read its copy
        w_dev, l_dev = f(w_dev, *funcgrad.device_put((x2, y2)))
        assert float(l_np) == float(l_dev)
    np.testing.assert_array_equal(np.asarray(w_np), np.asarray(w_dev))
