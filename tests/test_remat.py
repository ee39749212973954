"""The rematerialization rewrite (funcgrad/compile/rewrites/remat.py): large elementwise results
read again by the backward pass are recomputed there, with the same gradients, on every
backend; programs below its size threshold are left alone."""
from __future__ import annotations

import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import nn
from funcgrad.compile.rewrites import remat


def _mlp_loss(ws, x):
    for w1, w2 in ws:
        x = x + nn.gelu(x @ w1, approximate=True) @ w2
    return fnp.sum(x * x)


def _args(rng, layers=3, d=4, f=8):
    ws = [(rng.standard_normal((d, f)) * 0.3, rng.standard_normal((f, d)) * 0.3)
          for _ in range(layers)]
    return ws, rng.standard_normal((5, d))


def _grads(ws, x, device):
    ws = [(funcgrad.device_put(a, device), funcgrad.device_put(b, device)) for a, b in ws]
    f = funcgrad.jit(funcgrad.grad(lambda ws, x: _mlp_loss(ws, x)))
    xd = funcgrad.device_put(x, device)
    expr = f.lower(ws, xd).compile().expr
    out = [f(ws, xd) for _ in range(3)]   # eager first call, then planned ones on "cuda"
    return expr, [np.asarray(a) for a in funcgrad.tree_util.tree_leaves(out[-1])], out


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_recomputed_gelu_gives_the_same_gradients(device, rng, monkeypatch):
    if device == "cuda":
        import funcgrad.cuda as fcuda
        if not fcuda.usable():
            pytest.skip("no GPU and no CUDA simulator")
    ws, x = _args(rng)
    expr0, plain, _ = _grads(ws, x, device)
    assert not any(e.tag == "remat" for e in expr0.eqns)      # below MIN_BYTES: untouched
    monkeypatch.setattr(remat, "MIN_BYTES", 1)
    monkeypatch.setattr(remat, "GAP", 4)
    expr, got, _ = _grads(ws, x, device)
    copies = [e for e in expr.eqns if e.tag == "remat"]
    # the first two layers' GELU chains are recomputed (the last layer's is read right away)
    assert copies and {e.prim.name for e in copies} <= {"mul", "add", "tanh", "integer_pow",
                                                         "broadcast_in_dim", "pow"}, copies
    for a, b in zip(got, plain):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)


def test_late_readers_read_the_copy_and_operands_are_not_kept_longer(rng, monkeypatch):
    """On the rewritten expression: the late GEMMs read the copy, the forward's one reads the
    original, and a result whose operands die early is not recomputed."""
    monkeypatch.setattr(remat, "GAP", 4)
    ws, x = _args(rng, layers=2)
    f = funcgrad.jit(funcgrad.grad(lambda ws, x: _mlp_loss(ws, x)))
    expr = f.lower(ws, x).compile().expr
    new, _ = remat.rewrite(expr, [], min_bytes=1)
    made = {e.out: e for e in new.eqns}
    dots = [e for e in new.eqns if e.prim.name == "dot_general"]
    read_copy = [d for d in dots if any(made.get(v) is not None and made[v].tag == "remat"
                                        for v in d.inputs)]
    assert read_copy and all(new.eqns.index(d) > new.eqns.index(dots[1]) for d in read_copy)
    # exp(a @ b) is read again by its own derivative, but a @ b is not: recomputing exp would
    # keep the product alive instead (nothing gained)
    monkeypatch.setattr(remat, "GAP", 1)
    g = funcgrad.jit(funcgrad.grad(lambda a, b: fnp.sum(fnp.sin(fnp.exp(a @ b))), (0, 1)))
    e2 = g.lower(rng.standard_normal((3, 4)), rng.standard_normal((4, 5))).compile().expr
    v = next(e.out for e in e2.eqns if e.prim.name == "exp")
    readers = [i for i, e in enumerate(e2.eqns) if v in e.inputs]
    assert len(readers) >= 2     # read by sin, and again by the backward
    assert remat.rewrite(e2, [], min_bytes=1)[0] is e2
