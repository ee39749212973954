"""Probe: does a cuDNN convolution replay from a captured CUDA graph, through the
nvidia-cudnn-frontend Python package and through cuDNN's C API (funcgrad/cuda/cudnn.py)?

  python benchmarks/cudnn_probe.py        # needs a GPU, torch (for buffers and the graph)

For each route: run a 3x3 NHWC conv (batch 32, 56 px, 64 -> 64 channels) eagerly, capture the
same call on a side stream into a torch.cuda.CUDAGraph, change the input in place, replay, and
compare with torch's own convolution; prints one JSON line per route with the replayed error
and the eager / replayed times.
"""
from __future__ import annotations

import json
import time
import traceback

import torch

N, H, C, K = 32, 56, 64, 64


def tensors():
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(N, H, H, C, device="cuda", generator=g)      # NHWC memory
    w = torch.randn(K, 3, 3, C, device="cuda", generator=g) / 24  # KRSC memory
    y = torch.empty(N, H, H, K, device="cuda")
    return x, w, y


def ref(x, w):
    torch.backends.cudnn.allow_tf32 = False
    return torch.nn.functional.conv2d(x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2),
                                      padding=1).permute(0, 2, 3, 1)


def replay_check(name, run, x, w, y):
    out = {"route": name}
    try:
        run()
        torch.cuda.synchronize()
        out["eager_err"] = float((y - ref(x, w)).abs().max())
        t0 = time.perf_counter()
        for _ in range(20):
            run()
        torch.cuda.synchronize()
        out["eager_ms"] = (time.perf_counter() - t0) / 20 * 1e3
        graph, s = torch.cuda.CUDAGraph(), torch.cuda.Stream()
        with torch.cuda.stream(s), torch.cuda.graph(graph, stream=s):
            run()
        x.copy_(torch.randn_like(x))
        y.zero_()
        graph.replay()
        torch.cuda.synchronize()
        out["replay_err"] = float((y - ref(x, w)).abs().max())
        t0 = time.perf_counter()
        for _ in range(20):
            graph.replay()
        torch.cuda.synchronize()
        out["replay_ms"] = (time.perf_counter() - t0) / 20 * 1e3
    except Exception as e:  # noqa: BLE001 - the probe reports what failed
        out["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        out["where"] = traceback.format_exc()[-400:]
    print(json.dumps(out), flush=True)


def frontend():
    import cudnn
    x, w, y = tensors()
    handle = cudnn.create_handle()
    f = cudnn.data_type.FLOAT
    g = cudnn.pygraph(io_data_type=f, intermediate_data_type=f, compute_data_type=f,
                      handle=handle)
    X = g.tensor(name="X", dim=[N, C, H, H], stride=[H * H * C, 1, H * C, C], data_type=f)
    W = g.tensor(name="W", dim=[K, C, 3, 3], stride=[9 * C, 1, 3 * C, C], data_type=f)
    Y = g.conv_fprop(image=X, weight=W, padding=[1, 1], stride=[1, 1], dilation=[1, 1],
                     compute_data_type=f, name="conv")
    Y.set_output(True).set_data_type(f)
    Y.set_dim([N, K, H, H]).set_stride([H * H * K, 1, H * K, K])
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    ws = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8, device="cuda")

    def run():
        cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
        g.execute({X: x.data_ptr(), W: w.data_ptr(), Y: y.data_ptr()}, ws.data_ptr(),
                  handle=handle)
    replay_check(f"nvidia-cudnn-frontend {cudnn.__version__}", run, x, w, y)


def c_api():
    from funcgrad.cuda import cudnn as capi
    from funcgrad.cuda import runtime
    x, w, y = tensors()
    assert capi.backend().startswith("cudnn"), capi.backend()
    p = capi.plan("fwd", "float32", ((N, C, H, H), (H * H * C, 1, H * C, C)), (K, C, 3, 3),
                  ((N, K, H, H), (H * H * K, 1, H * K, K)), capi.NHWC, (1, 1), (1, 1), (1, 1),
                  1, None)
    ws = torch.empty(max(p.ws, 1), dtype=torch.uint8, device="cuda")

    class _S:   # runtime.stream() as numba's Stream would be: .handle
        def __init__(self, h):
            self.handle = h

    def run():
        runtime._stream = _S(torch.cuda.current_stream().cuda_stream)
        try:
            capi.execute(p, x.data_ptr(), w.data_ptr(), y.data_ptr(), ws.data_ptr())
        finally:
            runtime._stream = None
    replay_check(f"C API via ctypes ({capi.backend()}, algo {p.algo})", run, x, w, y)


if __name__ == "__main__":
    frontend()
    c_api()
