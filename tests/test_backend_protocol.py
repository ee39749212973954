"""Backends are peers behind one protocol (funcgrad/backends/base.py)."""
import numpy as np

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import core
from funcgrad.backends.base import Backend
from funcgrad.backends.cpu.backend import CpuBackend


class ToyBackend(Backend):
    """The smallest backend: numpy buffers, each primitive's numpy impl, no planner."""
    name = "toy"

    def from_numpy(self, a):
        return np.array(a, copy=True)

    def from_value(self, a):
        return np.asarray(a)

    def to_numpy(self, buf):
        return np.asarray(buf)

    def apply(self, prim, bufs, params, aval):
        return np.asarray(prim.impl(*bufs, **params), dtype=aval.dtype)


def test_builtin_backends_implement_the_protocol():
    assert isinstance(core.get_backend("cpu"), Backend)
    assert issubclass(CpuBackend, Backend)
    from funcgrad.cuda.backend import CudaBackend
    assert issubclass(CudaBackend, Backend)


def test_a_backend_without_a_planner_runs_jit_by_interpretation():
    core.register_backend("toy", ToyBackend)
    x = core.to_array(np.arange(4.0, dtype=np.float32), device="toy")
    f = funcgrad.jit(lambda v: fnp.tanh(v) * 2.0 + v.sum())
    got = f(x)
    assert got.device == "toy"
    want = np.tanh(np.arange(4.0)) * 2.0 + 6.0
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
    assert funcgrad.jit(lambda v: v * 2).lower(x).as_text()   # describe() adds nothing
