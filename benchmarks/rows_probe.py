"""Probe: where W2's layer-norm row kernels (4096 x 384 float32) lose time against torch's:
the warp-per-row kernel as it is, with more rows per warp, smaller blocks, and torch's
layer_norm forward / backward, each launched 50 times in one CUDA graph (bench_kernels.py).

Usage: python benchmarks/rows_probe.py
"""
from __future__ import annotations

import json

import numpy as np
import torch
from bench_kernels import dev, graph_ms

from funcgrad.cuda import rows, runtime


def main():
    rng = np.random.default_rng(0)
    R, N = 4096, 384
    x = rng.standard_normal((R, N)).astype(np.float32)
    sc, bi = (rng.standard_normal(N).astype(np.float32) for _ in range(2))
    xb, scb, bib, dyb = dev(x), dev(sc), dev(bi), dev(x * 0.5)
    f32 = np.dtype(np.float32)
    xt, sct, bit = (torch.from_numpy(a).cuda() for a in (x, sc, bi))
    out = {"torch_fwd_us": graph_ms(lambda: torch.nn.functional.layer_norm(xt, [N], sct, bit))}
    mean = xt.mean(1, keepdim=True)
    rstd = torch.rsqrt(xt.var(1, unbiased=False, keepdim=True) + 1e-5)
    out["torch_bwd_us"] = graph_ms(lambda: torch.ops.aten.native_layer_norm_backward(
        xt, xt, [N], mean, rstd, sct, bit, [True, True, True]))
    geo, rpg = rows.geometry, rows._rows_per_group
    for name, g, rp in [("as is", geo, rpg), ("rpw2", geo, lambda k, r: 2),
                        ("rpw4", geo, lambda k, r: 4), ("t128", lambda: (128, 32), rpg),
                        ("t64", lambda: (64, 32), rpg)]:
        rows.geometry, rows._rows_per_group = g, rp
        runtime._kernels.clear()
        fwd = graph_ms(lambda: rows.run("layer_norm", [xb, scb, bib], (R, N), f32, 1e-5))
        bwd = graph_ms(lambda: rows.run("layer_norm_bwd", [xb, scb, dyb], (R + 2, N), f32,
                                        1e-5))
        out[name] = (round(fwd * 1e3, 2), round(bwd * 1e3, 2))
    rows.geometry, rows._rows_per_group = geo, rpg
    out["torch_fwd_us"] = round(out["torch_fwd_us"] * 1e3, 2)
    out["torch_bwd_us"] = round(out["torch_bwd_us"] * 1e3, 2)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
