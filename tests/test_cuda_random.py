"""funcgrad.random gives the same numbers on the CUDA backend as on the CPU."""
import numpy as np
import pytest

import funcgrad
import funcgrad.cuda
from funcgrad import random

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not (funcgrad.cuda.usable()
                            or __import__("os").environ.get("FUNCGRAD_REQUIRE_GPU") == "1"),
                       reason="no GPU; run with NUMBA_ENABLE_CUDASIM=1 to use the simulator"),
]


def _draws(key):
    k1, k2, k3 = random.split(key, 3)
    return (random.bits(k1, (7,)), random.uniform(k2, (5,)), random.normal(k3, (3, 2)),
            random.randint(k1, (4,), 0, 10))


def test_same_stream_on_cpu_and_cuda():
    # the reference on the CPU backend (on a GPU host, numpy-only work goes to the default
    # device, "cuda": the test compared CUDA with CUDA, compiling 45 eager kernels for it)
    with funcgrad.default_device("cpu"):
        key = random.PRNGKey(42)
        cpu = _draws(key)
    gpu = funcgrad.jit(_draws)(funcgrad.device_put(key, "cuda"))
    for a, b in zip(cpu, gpu):
        assert a.device == "cpu" and b.device == "cuda"
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype.kind == "f":
            # the same bits, then float math that may round apart (libdevice's log, the GPU's
            # fused multiply-adds)
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(b, a)
