"""CUDA backend interop and plumbing: __cuda_array_interface__, DLPack (numpy in the simulator,
PyTorch on a GPU), the content-addressed kernel cache, jit and examples on device "cuda"."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import funcgrad
import funcgrad.cuda as fcuda
import funcgrad.numpy as fnp
from funcgrad.dlpack import from_dlpack

REQUIRE_GPU = os.environ.get("FUNCGRAD_REQUIRE_GPU", "") == "1"
SIM = fcuda.simulator_active()
pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not (fcuda.usable() or REQUIRE_GPU),
                       reason="no GPU; run with NUMBA_ENABLE_CUDASIM=1 to use the simulator"),
]
gpu_only = pytest.mark.skipif(SIM, reason="needs a real GPU (the simulator's memory is host "
                                          "memory, and it cannot import CUDA DLPack tensors)")


def cu(x):
    return funcgrad.device_put(np.asarray(x), "cuda")


def test_cuda_array_interface_is_zero_copy_and_contiguous():
    x = cu(np.arange(12, dtype=np.float32).reshape(3, 4))
    cai = x.__cuda_array_interface__
    assert cai["shape"] == (3, 4) and cai["typestr"] == "<f4" and cai["version"] == 3
    assert cai["data"][0] == x.buf.block.ptr() + 4 * x.buf.offset
    t = x.T   # a strided view: exporting swaps in an equal contiguous buffer
    assert not t.buf.is_contiguous()
    assert t.__cuda_array_interface__["shape"] == (4, 3) and t.buf.is_contiguous()
    np.testing.assert_array_equal(np.asarray(t), np.arange(12).reshape(3, 4).T)
    assert not hasattr(funcgrad.device_put(np.ones(2), "cpu"), "__cuda_array_interface__")


def test_dlpack_device_and_cpu_roundtrip():
    x = cu(np.arange(6, dtype=np.float64).reshape(2, 3))
    dev = x.__dlpack_device__()
    assert dev == ((1, 0) if SIM else (2, 0))
    c = funcgrad.device_put(np.arange(4, dtype=np.int32), "cpu")
    assert c.__dlpack_device__() == (1, 0)
    np.testing.assert_array_equal(np.from_dlpack(c), np.arange(4))
    a = np.arange(5.0)
    f = from_dlpack(a)   # zero-copy from numpy into a cpu Array
    assert f.device == "cpu" and np.shares_memory(np.asarray(f), a)
    if SIM:   # simulated device memory is host memory: numpy can take it without a copy
        h = np.from_dlpack(x)
        np.testing.assert_array_equal(h, np.arange(6).reshape(2, 3))
        assert h.ctypes.data == x.buf.block.ptr() + 8 * x.buf.offset


@gpu_only
def test_torch_dlpack_and_cai_zero_copy():
    torch = pytest.importorskip("torch")
    x = cu(np.arange(12, dtype=np.float32).reshape(3, 4))
    t = torch.from_dlpack(x)                      # funcgrad -> torch
    assert t.device.type == "cuda" and t.data_ptr() == x.__cuda_array_interface__["data"][0]
    assert torch.equal(t.cpu(), torch.arange(12, dtype=torch.float32).reshape(3, 4))
    t2 = torch.as_tensor(x, device="cuda")        # through __cuda_array_interface__
    assert t2.data_ptr() == t.data_ptr()
    src = torch.arange(10, dtype=torch.float32, device="cuda") * 2
    y = from_dlpack(src)                          # torch -> funcgrad, no copy
    assert y.device == "cuda" and y.buf.block.ptr() == src.data_ptr()
    np.testing.assert_array_equal(np.asarray(fnp.sum(y)), 90.0)
    strided = torch.arange(12, dtype=torch.int64, device="cuda").reshape(3, 4).T
    z = from_dlpack(strided)
    np.testing.assert_array_equal(np.asarray(z), np.arange(12).reshape(3, 4).T)
    from funcgrad.dlpack import _from_cai
    w = _from_cai(src)                            # any __cuda_array_interface__ exporter
    np.testing.assert_array_equal(np.asarray(w * 1.0), src.cpu().numpy())
    del y, z, w
    import gc
    gc.collect()
    assert src.sum().item() == 90.0               # the producer's memory is still fine


def test_kernel_sources_are_content_addressed_files(tmp_path):
    """A fresh process writes generated kernels as fgk_<sha>.py under FUNCGRAD_CACHE_DIR and a
    second process reuses the same files (numba's cache=True keeps the compiled code next to
    them)."""
    code = ("import numpy as np, funcgrad, funcgrad.numpy as fnp\n"
            "x = funcgrad.device_put(np.arange(5, dtype=np.float32), 'cuda')\n"
            "print(float(fnp.sum(fnp.exp(x) * 2.0)))\n")
    env = dict(os.environ, FUNCGRAD_CACHE_DIR=str(tmp_path))
    outs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        outs.append(r.stdout)
        files = sorted(p.name for p in (tmp_path / "kernels").glob("fgk_*.py"))
        assert files
        if len(outs) == 1:
            first = files
    assert files == first and outs[0] == outs[1]
    np.testing.assert_allclose(float(outs[0]), 2 * np.exp(np.arange(5)).sum(), rtol=1e-5)


def test_jit_runs_on_cuda_inputs():
    def f(w, x):
        return fnp.sum(funcgrad.nn.relu(x @ w) ** 2)
    w = np.random.default_rng(0).standard_normal((3, 2)).astype(np.float32)
    x = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    g = funcgrad.jit(funcgrad.grad(f))
    got = g(cu(w), cu(x))
    assert got.device == "cuda"
    with funcgrad.default_device("cpu"):   # the reference: numpy operands alone go to "cuda"
        want = funcgrad.grad(f)(w, x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5)


def test_unavailable_gpu_is_reported_clearly():
    if fcuda.is_available():
        assert fcuda.unavailable_reason() == "" and funcgrad.default_backend() == "cuda"
    else:
        assert fcuda.unavailable_reason()
        assert funcgrad.default_backend() == "cpu"   # the simulator is never the default


def test_no_gpu_and_no_simulator_is_a_clear_error():
    """A process without the simulator: "cuda" stays off the device list and asking for it says
    why (on a machine with a GPU it simply works)."""
    code = ("import numpy as np, funcgrad, funcgrad.cuda as c\n"
            "print(funcgrad.devices(), c.is_available(), repr(c.unavailable_reason()))\n"
            "try:\n"
            "    funcgrad.device_put(np.ones(2), 'cuda')\n"
            "    print('ok')\n"
            "except RuntimeError as e:\n"
            "    print('RuntimeError', e)\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    if fcuda.is_available():
        assert "'cuda'" in r.stdout and r.stdout.strip().endswith("ok")
    else:
        assert "['cpu'] False" in r.stdout
        assert "RuntimeError device 'cuda' is not available: " in r.stdout
        assert len(r.stdout.split("not available: ")[1].strip()) > 10   # a reason is given


def test_numpy_too_new_is_reported(monkeypatch):
    from funcgrad.cuda import runtime
    monkeypatch.setattr(runtime, "NUMPY_TOO_NEW", True)
    monkeypatch.setattr(fcuda.probe, "_status", {})
    assert not fcuda.is_available() and not fcuda.usable()
    assert "numpy<2.5" in fcuda.unavailable_reason()
