"""The kernel choices of a GPT training step's CUDA plan at an LM-head-like vocabulary (S1's
pattern at a tiny size): a regression in the plan shows here, in CI, not only in a benchmark."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import funcgrad
import funcgrad.cuda as fcuda
import funcgrad.numpy as fnp
from funcgrad import optim

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import gpt  # noqa: E402


def _plan(cfg, bf16=False):
    params = funcgrad.device_put(gpt.init_params(cfg), "cuda")
    opt = optim.adamw(3e-4)

    def loss(p, idx, tgt):
        if bf16:   # fp32 masters, bf16 compute (the mixed-precision idiom)
            p = funcgrad.tree_util.tree_map(lambda a: a.astype(fnp.bfloat16), p)
        return gpt.loss_fn(p, idx, tgt, cfg)

    @funcgrad.jit
    def step(p, s, idx, tgt):
        val, g = funcgrad.value_and_grad(loss)(p, idx, tgt)
        u, s = opt.update(g, s, p)
        return optim.apply_updates(p, u), s, val
    rng = np.random.default_rng(0)
    idx = funcgrad.device_put(rng.integers(0, cfg.vocab, (2, cfg.ctx)).astype(np.int32), "cuda")
    return step.lower(params, opt.init(params), idx, idx).compile().describe()


@pytest.mark.cuda
@pytest.mark.skipif(not fcuda.usable(), reason="no GPU and no CUDA simulator")
def test_wide_vocabulary_step_plans_fused_rows_and_an_in_place_xent():
    # 2,050 classes: rows wider than a warp's registers (rows_wide.py), as GPT-2's 50,304
    cfg = gpt.Config(vocab=2050, d=8, layers=2, heads=2, ctx=4)
    desc = _plan(cfg)
    kernels = [line.split()[0] for line in desc.splitlines()[1:]]
    n_ln = 2 * cfg.layers + 1
    assert kernels.count("layer_norm") == n_ln, desc
    assert kernels.count("layer_norm_bwd") == n_ln, desc
    assert kernels.count("softmax_xent") == 1, desc
    # the backward writes its dlogits over the dead logits (S1: 1.5 GB less at the peak)
    assert any(ln.strip().startswith("softmax_xent_bwd") and "(in place over its logits)" in ln
               for ln in desc.splitlines()), desc
    assert any(k.startswith("attention") for k in kernels), desc
    assert not any(k in ("softmax", "log_softmax", "reduce_max") for k in kernels), desc


@pytest.mark.cuda
@pytest.mark.skipif(not fcuda.usable(), reason="no GPU and no CUDA simulator")
def test_bf16_step_keeps_fused_norms():
    cfg = gpt.Config(vocab=64, d=8, layers=1, heads=2, ctx=4)
    desc = _plan(cfg, bf16=True)
    kernels = [line.split()[0] for line in desc.splitlines()[1:]]
    # a bf16 mean is a float32 sum rounded back: still recognised as a layer norm
    assert kernels.count("layer_norm") == 2 * cfg.layers + 1, desc
    assert kernels.count("layer_norm_bwd") == 2 * cfg.layers + 1, desc
    assert any(k.startswith("attention") for k in kernels), desc


@pytest.mark.cuda
@pytest.mark.skipif(not fcuda.usable(), reason="no GPU and no CUDA simulator")
def test_float32_logits_of_a_bf16_head_take_the_in_place_backward(monkeypatch):
    """scale.py's S1 idiom: bf16 products cast to float32 logits (one float32 GEMM, cast_gemm)
    for the loss; the xent backward still writes over those logits (S1 bf16: 1,572 MiB less),
    with the values of the plan that does not."""
    from funcgrad import nn
    from funcgrad.cuda import rows_inplace
    rng = np.random.default_rng(1)
    v, d, b, t = 2050, 16, 2, 4
    w, x = (funcgrad.device_put(rng.standard_normal(s).astype(np.float32), "cuda")
            for s in ((v, d), (b, t, d)))
    tgt = funcgrad.device_put(rng.integers(0, v, (b, t)).astype(np.int32), "cuda")

    def loss(w, x, tgt):
        logits = (x.astype(fnp.bfloat16) @ w.astype(fnp.bfloat16).T).astype(fnp.float32)
        return fnp.mean(nn.logsumexp(logits, axis=-1)
                        - fnp.take_along_axis(logits, tgt[..., None], axis=-1)[..., 0])
    got = {}
    for on in (True, False):
        monkeypatch.setattr(rows_inplace, "ENABLED", on)
        f = funcgrad.jit(funcgrad.value_and_grad(loss, argnums=(0, 1)))
        desc = f.lower(w, x, tgt).compile().describe()
        assert ("(in place over its logits)" in desc) == on, desc
        assert "dot_general->float32" in desc, desc
        val, grads = f(w, x, tgt)
        got[on] = [np.asarray(val)] + [np.asarray(g) for g in grads]
    for a, b_ in zip(got[True], got[False]):
        np.testing.assert_array_equal(a, b_)
