"""Probe: W2's row kernels against torch's, in one run: the layer norm forward and backward
(4096 x 384 float32; the backward with its column reduction of the partial sums) and
softmax_xent_bwd (4096 x 256), each launched 50 times in one CUDA graph (bench_kernels.py), for
rows.py as it is, for variants of its configuration (monkeypatched), and optionally for an
earlier rows.py given by path (--before FILE) as the baseline; the column reduction alone; the
generated kernels' registers and local-memory accesses (ld.local / st.local in their PTX).

Usage: python benchmarks/rows_probe.py [--before path/to/old_rows.py] [--variants NAME,...]
(--variants: only the variants named, comma-separated; "" for none)
"""
from __future__ import annotations

import argparse
import importlib.util
import json

import numpy as np
import torch
from bench_kernels import dev, graph_ms

from funcgrad.cuda import reduce as RD
from funcgrad.cuda import rows, runtime

R, N, NX = 4096, 384, 256


def _load(path):
    """An earlier rows.py as the module funcgrad.cuda._rows_before (its relative imports)."""
    spec = importlib.util.spec_from_file_location("funcgrad.cuda._rows_before", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _kernels_info():
    """{kernel key: (registers, local loads + stores in the PTX)} of the kernels compiled."""
    info = {}
    for key, k in runtime._kernels.items():
        if key[0] != "rows":
            continue
        try:
            ptx = "".join(k.inspect_asm().values())
            regs = list(k.get_regs_per_thread().values()) if hasattr(
                k, "get_regs_per_thread") else []
            info[str(key[1:])] = (regs, ptx.count("ld.local") + ptx.count("st.local"))
        except Exception as e:  # noqa: BLE001 (a probe: report it, go on)
            info[str(key[1:])] = repr(e)[:80]
    return info


def _time(mod, b):
    """(forward, backward, xent backward) microseconds of module `mod`'s row kernels."""
    f32 = np.dtype(np.float32)
    fwd = graph_ms(lambda: mod.run("layer_norm", [b["x"], b["sc"], b["bi"]], (R, N), f32, 1e-5))
    bwd = graph_ms(lambda: mod.run("layer_norm_bwd", [b["x"], b["sc"], b["dy"]], (R + 2, N),
                                   f32, 1e-5))
    xent = graph_ms(lambda: mod.run("softmax_xent_bwd", [b["lx"], b["lab"], b["cr"]], (R, NX),
                                    f32))
    return [round(t * 1e3, 2) for t in (fwd, bwd, xent)]


def _torch_us(x, sc, bi, lx):
    """torch's layer norm forward / backward and log_softmax backward, microseconds."""
    xt, sct, bit = (torch.from_numpy(v).cuda() for v in (x, sc, bi))
    t_fwd = graph_ms(lambda: torch.nn.functional.layer_norm(xt, [N], sct, bit))
    mean = xt.mean(1, keepdim=True)
    rstd = torch.rsqrt(xt.var(1, unbiased=False, keepdim=True) + 1e-5)
    t_bwd = graph_ms(lambda: torch.ops.aten.native_layer_norm_backward(
        xt, xt, [N], mean, rstd, sct, bit, [True, True, True]))
    ls = torch.log_softmax(torch.from_numpy(lx).cuda(), 1)
    g = torch.randn_like(ls)
    t_xent = graph_ms(lambda: torch._log_softmax_backward_data(g, ls, 1, torch.float32))
    return [round(t * 1e3, 2) for t in (t_fwd, t_bwd, t_xent)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", help="an earlier rows.py to time as the baseline")
    ap.add_argument("--variants", help="comma-separated names of the variants to time")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((R, N)).astype(np.float32)
    sc, bi = (rng.standard_normal(N).astype(np.float32) for _ in range(2))
    lx = rng.standard_normal((R, NX)).astype(np.float32)
    lab = rng.integers(0, NX, R).astype(np.int32)
    cr = rng.standard_normal(R).astype(np.float32)
    b = {"x": dev(x), "sc": dev(sc), "bi": dev(bi), "dy": dev(x * 0.5), "lx": dev(lx),
         "lab": dev(lab), "cr": dev(cr)}
    out = {"gpu": torch.cuda.get_device_name()}
    if a.before:
        old = _load(a.before)
        runtime._kernels.clear()
        out["before"] = _time(old, b)
        out["before kernels"] = _kernels_info()
    runtime._kernels.clear()
    out["after"] = _time(rows, b)
    # dx rows with a residual added (rows_fuse.py): the backward with `acc`
    f32 = np.dtype(np.float32)
    out["after bwd + acc"] = round(1e3 * graph_ms(lambda: rows.run(
        "layer_norm_bwd", [b["x"], b["sc"], b["dy"]], (R + 2, N), f32, 1e-5, acc=b["x"])), 2)
    out["after kernels"] = _kernels_info()
    print(json.dumps(out), flush=True)
    # the column reduction of the backward's partial sums alone (256 / 1024 partial rows)
    for nb in (256, 1024):
        part = dev(rng.standard_normal((nb, 2 * N)).astype(np.float32))
        res = dev(np.zeros(2 * N, np.float32))
        out[f"colsum {nb} rows us"] = round(1e3 * graph_ms(
            lambda p=part, n=nb, r=res: RD._reduce3("sum", p, 1, n, 2 * N, 0, 2 * N, 1, r)), 2)
    # variants: (warps a block, rows a warp, prefetch) of the backward, vector width
    cfg, vw = rows.config, rows.vector_width
    variants = [("bwd W8 RPW2 noprefetch", (8, 2, False), None),
                ("bwd W8 RPW1", (8, 1, False), None), ("bwd W4 RPW4 prefetch", (4, 4, True), None),
                ("bwd W16 RPW1", (16, 1, False), None), ("scalar (V=1)", None, 1),
                ("scalar bwd W8 RPW2 prefetch", (8, 2, True), 1)]
    if a.variants is not None:
        variants = [t for t in variants if t[0] in a.variants.split(",")]
    for name, c, v in variants:
        rows.config = (lambda kind, r, C, it, V, c=c: c if kind in rows.PARTIALS
                       else cfg(kind, r, C, it, V)) if c else cfg
        rows.vector_width = (lambda *args, v=v: v) if v else vw
        runtime._kernels.clear()
        try:
            out[name] = _time(rows, b)
        finally:
            rows.config, rows.vector_width = cfg, vw
        print(json.dumps({name: out[name], "kernels": _kernels_info()}), flush=True)
    try:   # last: a failed capture (seen once, 2026-11-25) must not stop the figures above
        out["torch (fwd, bwd, log_softmax bwd) us"] = _torch_us(x, sc, bi, lx)
    except Exception as e:  # noqa: BLE001 (a probe: torch's figures are a side line)
        out["torch"] = repr(e)[:120]
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
