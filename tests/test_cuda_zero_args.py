"""Eager contiguous copies of zero broadcasts (a jit's zero-initialized optimizer state) are driver
memsets, not kernels: no kernel to compile on a cold first call. Inside a plan's steps (dry run,
planned run, capture) the copy stays a kernel, so that what the dry run records is what runs."""
import numpy as np
import pytest

import funcgrad
import funcgrad.cuda
import funcgrad.numpy as fnp

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not (funcgrad.cuda.usable()
                            or __import__("os").environ.get("FUNCGRAD_REQUIRE_GPU") == "1"),
                       reason="no GPU; run with NUMBA_ENABLE_CUDASIM=1 to use the simulator"),
]


@pytest.fixture
def kernels(monkeypatch):
    """The elementwise kernels contiguous() launches (by op name)."""
    from funcgrad.cuda import elementwise as ew
    ran, orig = [], ew.run

    def run(name, *args, **kwargs):
        ran.append(name)
        return orig(name, *args, **kwargs)
    monkeypatch.setattr(ew, "run", run)
    return ran


def test_zero_broadcast_is_made_contiguous_without_a_kernel(kernels):
    from funcgrad.cuda import arrays
    from funcgrad.cuda import elementwise as ew
    for z in (fnp.zeros((3, 5), device="cuda").buf, fnp.zeros(7, np.int32, device="cuda").buf,
              arrays.from_host(np.broadcast_to(np.float32(0), (4, 2)))):   # a host broadcast
        assert not z.is_contiguous() and arrays.zero_const(z)
        c = ew.contiguous(z)
        assert c.is_contiguous() and c.block is not z.block
        np.testing.assert_array_equal(arrays.to_host(c), np.zeros(z.shape, z.dtype))
    assert kernels == []


def test_other_broadcasts_and_plan_steps_still_copy_by_kernel(kernels, monkeypatch):
    from funcgrad.cuda import arrays, runtime
    from funcgrad.cuda import elementwise as ew
    neg = fnp.full((2, 3), -0.0, device="cuda")   # not zero bytes: the sign bit is set
    two = fnp.full((2, 3), 2.0, device="cuda")
    assert not arrays.zero_const(neg.buf) and not arrays.zero_const(two.buf)
    assert np.signbit(arrays.to_host(ew.contiguous(neg.buf))).all()
    np.testing.assert_array_equal(arrays.to_host(ew.contiguous(two.buf)), np.full((2, 3), 2.0))
    assert kernels == ["copy", "copy"]
    monkeypatch.setattr(runtime, "_step", 0)   # a plan step runs: what a dry run would record
    z = fnp.zeros((2, 3), device="cuda")
    assert arrays.zero_const(z.buf)
    np.testing.assert_array_equal(arrays.to_host(ew.contiguous(z.buf)), np.zeros((2, 3)))
    assert kernels == ["copy", "copy", "copy"]


def test_jit_with_zero_arguments_matches_cpu(kernels):
    def f(m, x):
        return m * 0.5 + x, m + 1.0

    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    m = fnp.zeros((2, 3), device="cuda")
    g = funcgrad.jit(f)
    got = g(m, funcgrad.device_put(x, "cuda"))
    for a, b in zip(got, (x, np.ones((2, 3), np.float32))):
        np.testing.assert_array_equal(np.asarray(a), b)
    assert "copy" not in kernels   # the zero argument was made contiguous by a memset
