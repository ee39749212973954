"""The residual-add fusion of funcgrad/cuda/rows_fuse.py: a norm backward whose dx feeds only
`dx + r` writes dx + r itself; plans use it on pre-norm blocks (W2's GPT) and give the
unfused plan's results (bit for bit in the simulator; on a GPU the row kernel's layout follows
every operand's alignment, r's included, so a row's sums may be added in another order)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad
import funcgrad.cuda as fcuda
from funcgrad import nn
from funcgrad.cuda import rows_fuse

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import gpt  # noqa: E402

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not (fcuda.usable() or os.environ.get("FUNCGRAD_REQUIRE_GPU") == "1"),
                       reason="no GPU; run with NUMBA_ENABLE_CUDASIM=1 to use the simulator"),
]


def _norm(kind, x, g, b):
    return (nn.layer_norm(x, g, b, eps=1e-5) if kind == "layer_norm"
            else nn.rms_norm(x, g, eps=1e-6))


def _block_loss(kind):
    """Three pre-norm residual blocks: the cotangent of each block's input is r + dx (the
    parameters' gradients need those of the last two)."""
    def loss(p, x):
        for w in (p["w1"], p["w2"], p["w3"]):
            x = x + _norm(kind, x, p["g"], p["b"]) @ w
        return (x * x).sum()
    return loss


def _params(rng, n, dtype):
    return {k: funcgrad.device_put(v.astype(dtype), "cuda") for k, v in {
        "w1": rng.standard_normal((n, n)) * 0.3, "w2": rng.standard_normal((n, n)) * 0.3,
        "w3": rng.standard_normal((n, n)) * 0.3,
        "g": 1 + 0.1 * rng.standard_normal(n), "b": 0.1 * rng.standard_normal(n)}.items()}


def _grads(fn, p, x, enabled):
    """(gradients, plan description) of a jitted grad of fn, with the fusion on or off."""
    old, rows_fuse.ENABLED = rows_fuse.ENABLED, enabled
    try:
        step = funcgrad.jit(funcgrad.grad(fn))
        desc = step.lower(p, x).compile().describe()
        return [np.asarray(a) for a in funcgrad.tree_util.tree_leaves(step(p, x))], desc
    finally:
        rows_fuse.ENABLED = old


@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
@settings(max_examples=6)   # each example plans and runs three programs (simulator: ~7 s)
@given(rows=st.integers(0, 5), n=st.integers(1, 9),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_fused_residual_equals_unfused(kind, rows, n, dtype):
    rng = np.random.default_rng(rows * 10 + n)
    p = _params(rng, n, dtype)
    x = funcgrad.device_put(rng.standard_normal((rows, n)).astype(dtype), "cuda")
    fused, desc = _grads(_block_loss(kind), p, x, True)
    plain, desc0 = _grads(_block_loss(kind), p, x, False)
    # (empty arrays form no clusters: their adds stay equations of their own)
    assert desc.count(f"{kind}_bwd + residual") == (2 if rows else 0), desc
    assert "+ residual" not in desc0, desc0
    for a, b in zip(fused, plain):
        if fcuda.simulator_active():
            np.testing.assert_array_equal(a, b)
        else:
            # (the products around the norm pass a last-bit difference on, relative to the
            # gradient's scale: 1.2e-7 seen on an H200 where the element was 0.18)
            eps = np.finfo(dtype).eps
            np.testing.assert_allclose(a, b, rtol=16 * eps,
                                       atol=16 * eps * max(1.0, float(np.abs(b).max())))
    # and both equal the CPU backend's gradients
    with funcgrad.default_device("cpu"):
        ref = funcgrad.grad(_block_loss(kind))(
            {k: np.asarray(v) for k, v in p.items()}, np.asarray(x))
    tol = 2e-4 if dtype == np.float32 else 1e-10
    for a, b in zip(fused, funcgrad.tree_util.tree_leaves(ref)):
        np.testing.assert_allclose(a, np.asarray(b), rtol=tol, atol=tol)


def test_sum_returned_by_the_plan_is_not_fused(monkeypatch):
    rng = np.random.default_rng(0)
    p = _params(rng, 6, np.float32)
    x = funcgrad.device_put(rng.standard_normal((4, 6)).astype(np.float32), "cuda")

    def loss(p, x):
        h = x + nn.layer_norm(x, p["g"], p["b"]) @ p["w1"]
        return (h * h).sum()
    monkeypatch.setattr(rows_fuse, "ENABLED", True)
    # x's cotangent r + dx is the plan's result: it keeps its own add (a view of the packed
    # norm gradient would be returned otherwise)
    desc = funcgrad.jit(funcgrad.grad(loss, argnums=1)).lower(p, x).compile().describe()
    assert "layer_norm_bwd" in desc and "+ residual" not in desc, desc
    # with the sum read inside the plan, the pair is fused
    desc = funcgrad.jit(lambda p, x: funcgrad.grad(loss, argnums=1)(p, x) @ p["w2"]).lower(
        p, x).compile().describe()
    assert "layer_norm_bwd + residual" in desc, desc


def test_w2_step_fuses_every_block_residual():
    cfg = gpt.Config(vocab=16, d=8, layers=2, heads=2, ctx=4)
    params = funcgrad.device_put(gpt.init_params(cfg), "cuda")
    idx = funcgrad.device_put(np.zeros((2, cfg.ctx), np.int32), "cuda")
    desc = funcgrad.jit(funcgrad.grad(gpt.loss_fn), static_argnums=3).lower(
        params, idx, idx, cfg).compile().describe()
    # every block's two norms (the final norm's dx has no residual to join)
    assert desc.count("layer_norm_bwd + residual") == 2 * cfg.layers, desc
