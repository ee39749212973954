"""Probe: the norm kernels (forward, backward with a residual) at real model sizes, for the
configurations of rows.config (warps a block x rows a warp) and torch's kernels beside them,
each launched in a CUDA graph (bench_kernels.graph_ms): which grid suits S1/S2's rows.

Usage: python benchmarks/rows_sizes.py   (one JSON line per size and kernel)
"""
from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import torch
from bench_kernels import dev, graph_ms

from funcgrad.cuda import rows, runtime

SIZES = [(8192, 768, "bfloat16"), (8192, 1024, "bfloat16"), (4096, 384, "float32"),
         (8192, 768, "float32"), (32768, 768, "bfloat16")]
VARIANTS = [None, (8, 1), (4, 1), (8, 2), (16, 1), (4, 2), (2, 1)]


def _torch_us(R, N, dt, kind):
    tdt = {"bfloat16": torch.bfloat16, "float32": torch.float32}[dt]
    x = torch.randn(R, N, device="cuda", dtype=tdt)
    g = torch.randn(N, device="cuda", dtype=tdt)
    b = torch.randn(N, device="cuda", dtype=tdt)
    dy = torch.randn_like(x)
    if kind == "layer_norm":
        return graph_ms(lambda: torch.nn.functional.layer_norm(x, [N], g, b)) * 1e3
    mean = x.float().mean(1, keepdim=True)
    rstd = torch.rsqrt(x.float().var(1, unbiased=False, keepdim=True) + 1e-5)
    if kind == "layer_norm_bwd":
        return graph_ms(lambda: torch.ops.aten.native_layer_norm_backward(
            dy, x, [N], mean, rstd, g, b, [True, True, True])) * 1e3
    return graph_ms(lambda: torch.ops.aten._fused_rms_norm_backward(
        dy, x, rstd, g, [N], [True, True])) * 1e3 if hasattr(
        torch.ops.aten, "_fused_rms_norm_backward") else None


def main():
    rng = np.random.default_rng(0)
    cfg = rows.config
    for R, N, dt in SIZES:
        npdt = ml_dtypes.bfloat16 if dt == "bfloat16" else np.float32
        x = dev(rng.standard_normal((R, N)).astype(npdt))
        dy = dev(rng.standard_normal((R, N)).astype(npdt))
        res = dev(rng.standard_normal((R, N)).astype(npdt))
        sc, bi = (dev(rng.standard_normal(N).astype(npdt)) for _ in range(2))
        d = np.dtype(npdt)
        out = {"R": R, "N": N, "dtype": dt}
        for kind in ("layer_norm", "layer_norm_bwd", "rms_norm_bwd"):
            try:
                out[f"torch {kind}"] = round(_torch_us(R, N, dt, kind) or -1, 2)
            except Exception as e:  # noqa: BLE001 (a probe: report it, go on)
                out[f"torch {kind}"] = repr(e)[:60]
        for v in VARIANTS:
            rows.config = (lambda kind, r, C, it, V, v=v: (v[0], v[1], False)
                           if kind in rows.PARTIALS else cfg(kind, r, C, it, V)) if v else cfg
            name = f"W{v[0]}xRPW{v[1]}" if v else "default"
            runtime._kernels.clear()
            try:
                out[f"{name} ln_bwd+acc"] = round(1e3 * graph_ms(lambda: rows.run(
                    "layer_norm_bwd", [x, sc, dy], (R + 2, N), d, 1e-5, acc=res)), 2)
                out[f"{name} rms_bwd+acc"] = round(1e3 * graph_ms(lambda: rows.run(
                    "rms_norm_bwd", [x, sc, dy], (R + 1, N), d, 1e-6, acc=res)), 2)
            except Exception as e:  # noqa: BLE001
                out[f"{name} error"] = repr(e)[:100]
        rows.config = cfg
        runtime._kernels.clear()
        out["default ln_fwd"] = round(1e3 * graph_ms(lambda: rows.run(
            "layer_norm", [x, sc, bi], (R, N), d, 1e-5)), 2)
        mb = R * N * d.itemsize / 1e6
        out["ln_bwd+acc MB"] = round(4 * mb, 1)
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
