"""Pattern rewrites (funcgrad/compile/rewrites/rows.py): hand-written layer norm / softmax / log_softmax
become the fused primitives, forward and backward, and W2's GPT step plans the fused kernels."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import funcgrad
import funcgrad.cuda as fcuda
import funcgrad.numpy as fnp
from funcgrad import lax, nn, optim
from funcgrad.test_util import check_grads

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import gpt  # noqa: E402


def ln_rsqrt(x, g, b):
    m = x.mean(-1, keepdims=True)
    v = fnp.var(x, -1, keepdims=True)
    return (x - m) * lax.rsqrt(v + 1e-5) * g + b


def ln_sqrt(x, g, b):
    m = fnp.mean(x, axis=-1, keepdims=True)
    v = fnp.mean((x - m) ** 2, axis=-1, keepdims=True)
    return g * ((x - m) / fnp.sqrt(v + 1e-5)) + b


def softmax(x, g, b):
    e = fnp.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True) * g


def log_softmax(x, g, b):
    s = x - x.max(-1, keepdims=True)
    return (s - fnp.log(fnp.exp(s).sum(-1, keepdims=True))) * g


def not_a_layer_norm(x, g, b):   # var of another array: must stay as written
    m = x.mean(-1, keepdims=True)
    return (x - m) * lax.rsqrt(fnp.var(x * 2, -1, keepdims=True) + 1e-5) * g + b


CASES = {ln_rsqrt: "layer_norm", ln_sqrt: "layer_norm", softmax: "softmax",
         log_softmax: "log_softmax", not_a_layer_norm: None}


@pytest.mark.parametrize("f", list(CASES), ids=lambda f: f.__name__)
def test_rewrite_forward_and_backward(f):
    rng = np.random.default_rng(0)
    args = (rng.standard_normal((2, 3, 6)), rng.standard_normal(6) + 2, rng.standard_normal(6))

    def loss(x, g, b):
        return (f(x, g, b) ** 2 * np.linspace(-1, 1, 6)).sum()
    fwd = str(funcgrad.make_jaxpr(funcgrad.jit(f))(*args))
    both = str(funcgrad.make_jaxpr(funcgrad.grad(loss, argnums=(0, 1, 2)))(*args))
    want = CASES[f]
    if want is None:
        assert "layer_norm" not in both
    else:
        assert f"{want}_bwd" in both and (f"= {want}[" in both or f"= {want} " in both), both
        opt, _ = funcgrad.compile.passes.optimize(*funcgrad.core.trace_to_expr(
            lambda *a: [f(*a)], [funcgrad.core.aval_of(fnp.asarray(a)) for a in args])[:2])
        assert any(e.prim.name == want for e in opt.eqns), fwd
    np.testing.assert_allclose(np.asarray(funcgrad.jit(f)(*args)), np.asarray(f(*args)),
                               rtol=1e-9, atol=1e-12)
    check_grads(loss, args, order=2)


def _w2_plan(cfg, forward_ln):
    """The plan of W2's jitted AdamW step (benchmarks/bench_gpu.py) at a tiny size."""
    params = funcgrad.device_put(gpt.init_params(cfg), "cuda")
    opt = optim.adamw(3e-4)

    def loss(p, idx, tgt):
        if forward_ln is None:
            return gpt.loss_fn(p, idx, tgt, cfg)
        old = gpt._ln
        gpt._ln = lambda x, q: forward_ln(x, q["scale"], q["bias"])
        try:
            return gpt.loss_fn(p, idx, tgt, cfg)
        finally:
            gpt._ln = old

    @funcgrad.jit
    def step(p, s, idx, tgt):
        val, g = funcgrad.value_and_grad(loss)(p, idx, tgt)
        u, s = opt.update(g, s, p)
        return optim.apply_updates(p, u), s, val
    rng = np.random.default_rng(0)
    idx = funcgrad.device_put(rng.integers(0, cfg.vocab, (2, cfg.ctx)).astype(np.int32), "cuda")
    return step.lower(params, opt.init(params), idx, idx).compile()


@pytest.mark.cuda
@pytest.mark.skipif(not fcuda.usable(), reason="no GPU and no CUDA simulator")
@pytest.mark.parametrize("ln", [None, ln_rsqrt], ids=["nn.layer_norm", "hand-written"])
def test_w2_step_plans_the_fused_kernels(ln):
    cfg = gpt.Config(vocab=16, d=8, layers=2, heads=2, ctx=4)
    desc = _w2_plan(cfg, ln).describe()
    kernels = [line.split()[0] for line in desc.splitlines()[1:]]
    n_ln = 2 * cfg.layers + 1
    assert kernels.count("layer_norm") == n_ln, desc
    assert kernels.count("layer_norm_bwd") == n_ln, desc
    assert kernels.count("softmax_xent") == 1 and kernels.count("softmax_xent_bwd") == 1, desc
