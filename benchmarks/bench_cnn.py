"""ResNet-style CNN training step: funcgrad against JAX and torch.compile, one process each.

  python benchmarks/bench_cnn.py                       # all three, then the ratios
  python benchmarks/bench_cnn.py --impl funcgrad|jax|torch_compile|torch [--prec tf32|fp32]

The model (ResNet-18's layout on 64 px images): a 3x3 stem conv (64) and a 3x3 / 2 max-pool,
four stages of two basic blocks (two 3x3 convs with biases, ReLU, identity or 1x1 / 2 projection
shortcut) at 64, 128, 256, 512 channels and 32, 16, 8, 4 px, global average pool, a dense
layer to 10 classes; NHWC activations and HWIO kernels; SGD with momentum 0.9, batch 128,
synthetic images. funcgrad and JAX run the same program text with the import swapped; torch
runs the same model as nn.Module in channels_last with torch.compile. Each child prints one JSON
line (median step over --reps timed steps after 3 warm-up steps, images/s, first call).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import types

import numpy as np

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

STAGES = (64, 128, 256, 512)
CLASSES = 10


def init(rng, px=64):
    """Parameters as numpy arrays: He-normal HWIO kernels, zero biases (the second conv of a
    block starts at a tenth of that, so the residual stream stays near unit scale)."""
    def conv(k, ci, co, scale=1.0):
        w = rng.standard_normal((k, k, ci, co)) * np.sqrt(2.0 / (k * k * ci)) * scale
        return {"w": w.astype(np.float32), "b": np.zeros(co, np.float32)}
    p = {"stem": conv(3, 3, STAGES[0]), "blocks": []}
    ci = STAGES[0]
    for si, co in enumerate(STAGES):
        for bi in range(2):
            stride = 2 if si > 0 and bi == 0 else 1
            blk = {"c1": conv(3, ci, co), "c2": conv(3, co, co, 0.1)}
            if stride != 1 or ci != co:
                blk["proj"] = conv(1, ci, co)
            p["blocks"].append(blk)
            ci = co
    p["head"] = {"w": (0.1 * rng.standard_normal((ci, CLASSES)) / np.sqrt(ci)).astype(np.float32),
                 "b": np.zeros(CLASSES, np.float32)}
    return p


def program(L):
    """forward / loss / step written once against a jax-like namespace L (np, nn, lax, optim)."""
    np_, lax, nn = L.np, L.lax, L.nn
    dn = ("NHWC", "HWIO", "NHWC")

    def conv(x, c, stride=1):
        k = c["w"].shape[0]
        pad = ((k // 2, k // 2), (k // 2, k // 2))
        return lax.conv_general_dilated(x, c["w"], (stride, stride), pad,
                                        dimension_numbers=dn) + c["b"]

    def forward(p, x):
        x = nn.relu(conv(x, p["stem"]))
        x = lax.reduce_window(x, -np.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1),
                              ((0, 0), (1, 1), (1, 1), (0, 0)))
        for blk in p["blocks"]:
            stride = 2 if "proj" in blk and blk["c1"]["w"].shape[2] != blk["c1"]["w"].shape[3] \
                else 1
            h = nn.relu(conv(x, blk["c1"], stride))
            h = conv(h, blk["c2"])
            sc = conv(x, blk["proj"], stride) if "proj" in blk else x
            x = nn.relu(h + sc)
        x = np_.mean(x, axis=(1, 2))
        return x @ p["head"]["w"] + p["head"]["b"]

    def loss(p, x, y):
        logits = forward(p, x)
        return np_.mean(nn.logsumexp(logits, axis=-1)
                        - np_.take_along_axis(logits, y[:, None], axis=-1)[:, 0])

    opt = L.optim.sgd(0.01, momentum=0.9)

    def step(p, s, x, y):
        value, g = L.vg(loss)(p, x, y)
        u, s = opt.update(g, s, p)
        return L.optim.apply_updates(p, u), s, value
    return types.SimpleNamespace(forward=forward, loss=loss, step=step, opt=opt)


def make(impl, prec):
    prec_name = {"fp32": "highest", "tf32": "tensorfloat32"}[prec]
    if impl == "jax":
        import jax
        import jax.numpy as jnp
        import optax
        jax.config.update("jax_default_matmul_precision", prec_name)
        return types.SimpleNamespace(np=jnp, nn=jax.nn, lax=jax.lax, optim=optax, jit=jax.jit,
                                     vg=jax.value_and_grad, put=jax.device_put,
                                     block=jax.block_until_ready, version=jax.__version__)
    import funcgrad
    import funcgrad.lax
    import funcgrad.nn
    import funcgrad.numpy as fnp
    import funcgrad.optim
    funcgrad.config.update("default_matmul_precision", prec_name)
    from funcgrad.cuda import cudnn
    return types.SimpleNamespace(np=fnp, nn=funcgrad.nn, lax=funcgrad.lax, optim=funcgrad.optim,
                                 jit=funcgrad.jit, vg=funcgrad.value_and_grad,
                                 put=funcgrad.device_put, block=lambda v: v.block_until_ready(),
                                 version=f"{funcgrad.default_backend()}, {cudnn.backend()}")


def timed(step_fn, block, reps):
    t0 = time.perf_counter()
    v0 = step_fn()
    block(v0)
    first = time.perf_counter() - t0
    for _ in range(3):
        v = step_fn()
    block(v)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        v = step_fn()
        block(v)
        ts.append(time.perf_counter() - t0)
    return first, float(np.median(ts)), min(ts), float(np.asarray(v0)), float(np.asarray(v))


CUDNN_NAMES = ("xmma", "cudnn", "conv", "implicit", "wgrad", "dgrad", "fprop", "cutlass", "sm90_",
               "sm80_", "winograd", "fft")


def profile(one, n):
    """CUPTI kernel times over n more steps (torch.profiler): the top kernels and the share
    of cuDNN's convolution kernels, printed as a JSON line."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof_
    with prof_(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            one()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if t:
            rows.append((t / n / 1e3, e.count // n, e.key[:90]))
    rows.sort(reverse=True)
    conv = sum(t for t, _, k in rows if any(c in k.lower() for c in CUDNN_NAMES))
    total = sum(t for t, _, _ in rows)
    print(json.dumps({"profile_ms_per_step": round(total, 3), "conv_kernels_ms": round(conv, 3),
                      "top": [[round(t, 3), c, k] for t, c, k in rows[:14]]}), flush=True)


def run_functional(a):
    L = make(a.impl, a.prec)
    rng = np.random.default_rng(0)
    prog = program(L)
    p = L.put(init(rng, a.px))
    s = prog.opt.init(p)
    x = L.put(rng.standard_normal((a.batch, a.px, a.px, 3)).astype(np.float32))
    y = L.put(rng.integers(0, CLASSES, a.batch).astype(np.int32))
    step = L.jit(prog.step, donate_argnums=(0, 1))
    st = [p, s]

    def one():
        st[0], st[1], v = step(st[0], st[1], x, y)
        return v
    res = timed(one, L.block, a.reps)
    if a.profile:
        profile(lambda: L.block(one()), a.profile)
    return L.version, res


def run_torch(a, compiled):
    import torch
    import torch.nn.functional as F
    torch.backends.cuda.matmul.allow_tf32 = a.prec != "fp32"
    torch.backends.cudnn.allow_tf32 = a.prec != "fp32"
    torch.backends.cudnn.benchmark = True
    p = init(np.random.default_rng(0), a.px)

    def conv_mod(c, stride=1):
        k, _, ci, co = c["w"].shape
        m = torch.nn.Conv2d(ci, co, k, stride, k // 2)
        with torch.no_grad():
            m.weight.copy_(torch.tensor(c["w"]).permute(3, 2, 0, 1))
            m.bias.zero_()
        return m

    class Block(torch.nn.Module):
        def __init__(self, blk):
            super().__init__()
            ci, co = blk["c1"]["w"].shape[2:]
            self.stride = 2 if "proj" in blk and ci != co else 1
            self.c1, self.c2 = conv_mod(blk["c1"], self.stride), conv_mod(blk["c2"])
            self.proj = conv_mod(blk["proj"], self.stride) if "proj" in blk else None

        def forward(self, x):
            h = self.c2(F.relu(self.c1(x)))
            return F.relu(h + (self.proj(x) if self.proj is not None else x))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = conv_mod(p["stem"])
            self.blocks = torch.nn.Sequential(*[Block(b) for b in p["blocks"]])
            self.head = torch.nn.Linear(STAGES[-1], CLASSES)

        def forward(self, x, y):
            x = F.max_pool2d(F.relu(self.stem(x)), 3, 2, 1)
            x = self.blocks(x).mean(dim=(2, 3))
            return F.cross_entropy(self.head(x), y)

    net = Net().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    fwd = torch.compile(net) if compiled else net
    rng = np.random.default_rng(0)
    x = torch.tensor(rng.standard_normal((a.batch, a.px, a.px, 3)).astype(np.float32)).cuda()
    x = x.permute(0, 3, 1, 2)     # NCHW view of NHWC memory: channels_last
    y = torch.tensor(rng.integers(0, CLASSES, a.batch)).cuda()

    def one():
        opt.zero_grad(set_to_none=True)
        v = fwd(x, y)
        v.backward()
        opt.step()
        return v.detach()
    return torch.__version__, timed(one, lambda v: torch.cuda.synchronize(), a.reps)


def child(a):
    out = {"impl": a.impl, "prec": a.prec, "batch": a.batch, "px": a.px}
    try:
        if a.impl in ("torch", "torch_compile"):
            ver, (first, med, mn, l0, l1) = run_torch(a, a.impl == "torch_compile")
        else:
            ver, (first, med, mn, l0, l1) = run_functional(a)
        out.update(version=ver, median_ms=round(med * 1e3, 3), min_ms=round(mn * 1e3, 3),
                   images_per_s=round(a.batch / med, 1), first_call_s=round(first, 2),
                   loss_first=round(l0, 5), loss_last=round(l1, 5))
    except Exception as e:  # noqa: BLE001 - a benchmark row records the failure
        out["error"] = f"{type(e).__name__}: {str(e)[:500]}"
    print(json.dumps(out), flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--impl", default="all",
                    help="funcgrad, jax, torch_compile, torch, or all (one process each)")
    ap.add_argument("--prec", default="tf32", choices=("tf32", "fp32"))
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--px", type=int, default=64)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--profile", type=int, default=0,
                    help="funcgrad / jax: CUPTI kernel table over N more steps (needs torch)")
    ap.add_argument("--timeout", default="300",
                    help="seconds per child process: one value, or three (funcgrad,jax,torch)")
    a = ap.parse_args(argv)
    if a.impl != "all":
        return child(a)
    rows = {}
    limits = [float(t) for t in a.timeout.split(",")]
    for j, impl in enumerate(("funcgrad", "jax", "torch_compile")):
        cmd = [sys.executable, __file__, "--impl", impl, "--prec", a.prec, "--batch",
               str(a.batch), "--px", str(a.px), "--reps", str(a.reps)]
        if a.profile and impl == "funcgrad":
            cmd += ["--profile", str(a.profile)]
        limit = limits[min(j, len(limits) - 1)]
        try:
            r = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=limit)
            lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
            rows[impl] = next((json.loads(ln) for ln in lines if '"impl"' in ln), {
                "impl": impl, "error": (r.stderr or r.stdout)[-500:]})
            for ln in lines:
                if '"profile_ms_per_step"' in ln:
                    print(ln, flush=True)
        except subprocess.TimeoutExpired:
            rows[impl] = {"impl": impl, "error": f"timed out after {limit} s"}
        print(json.dumps(rows[impl]), flush=True)
    fg = rows["funcgrad"].get("median_ms")
    for impl in ("jax", "torch_compile"):
        peer = rows[impl].get("median_ms")
        if fg and peer:
            print(f"funcgrad / {impl}: {fg / peer:.2f}x ({fg:.2f} ms against {peer:.2f} ms)")


if __name__ == "__main__":
    main()
