"""Loss scaling for float16 (funcgrad/optim/loss_scale.py, jmp's API): the dynamic rule step by
step, dtypes kept, the scales as pytrees through jit, and a float16 step whose gradients
underflow to zero unscaled and come back within float16 rounding of float64's when scaled."""
from __future__ import annotations

import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import optim
from funcgrad.optim import loss_scale as ls


def test_dynamic_rule_grows_after_a_period_and_shrinks_on_overflow():
    s = ls.DynamicLossScale(fnp.asarray(8.0), period=3, factor=2, min_loss_scale=2.0)
    seen = []
    for finite in [True, True, True, False, True, False, False, False]:
        s = s.adjust(fnp.asarray(finite))
        seen.append((float(s.loss_scale), int(s.counter)))
    # 3 finite steps: x2 and the count restarts; a non-finite step: /2, count 0; floor 2
    assert seen == [(8.0, 1), (8.0, 2), (16.0, 0), (8.0, 0), (8.0, 1), (4.0, 0), (2.0, 0),
                    (2.0, 0)]


@pytest.mark.parametrize("dt", [np.float16, np.float32, "bfloat16"])
def test_scale_and_unscale_keep_each_leafs_dtype(dt):
    tree = {"a": fnp.ones((2,), dt), "n": fnp.arange(3)}
    for s in (ls.StaticLossScale(4.0), ls.DynamicLossScale(fnp.asarray(4.0)),
              ls.NoOpLossScale()):
        up = s.scale(tree)
        assert up["a"].dtype == np.dtype(tree["a"].dtype) and up["n"].dtype == tree["n"].dtype
        back = s.unscale(up)
        np.testing.assert_array_equal(np.asarray(back["a"], np.float32), 1.0)


def test_all_finite_and_select_tree():
    good = {"w": fnp.ones(3), "b": fnp.zeros(())}
    assert bool(ls.all_finite(good))
    assert not bool(ls.all_finite({"w": fnp.asarray([1.0, np.inf]), "b": fnp.zeros(())}))
    assert not bool(ls.all_finite([fnp.asarray([np.nan])]))
    picked = ls.select_tree(fnp.asarray(False), {"x": fnp.ones(2)}, {"x": fnp.zeros(2)})
    np.testing.assert_array_equal(np.asarray(picked["x"]), 0.0)


def test_scales_are_pytrees_through_jit():
    s = ls.DynamicLossScale(fnp.asarray(2.0 ** 10), period=5)
    leaves, tree = funcgrad.tree_util.tree_flatten(s)
    assert len(leaves) == 2
    out = funcgrad.jit(lambda s, f: s.adjust(f))(s, fnp.asarray(False))
    assert isinstance(out, ls.DynamicLossScale) and out.period == 5
    assert float(out.loss_scale) == 512.0 and int(out.counter) == 0


def _step(scale, dt):
    opt = optim.sgd(1.0)

    def loss(w):
        # tiny float16 gradients: 2 w 1e-6 ~ 2e-9 is below float16's smallest subnormal
        return fnp.sum((w.astype(dt) * 1e-3) ** 2).astype(fnp.float32) * 1e-3

    @funcgrad.jit
    def step(w, state, scale):
        grads = funcgrad.grad(lambda w: scale.scale(loss(w)))(w)
        grads = scale.unscale(grads)
        finite = ls.all_finite(grads)
        updates, new_state = opt.update(grads, state, w)
        w2 = ls.select_tree(finite, optim.apply_updates(w, updates), w)
        return w2, new_state, scale.adjust(finite), grads
    return step, opt


def test_float16_gradients_survive_with_a_loss_scale():
    w = fnp.asarray(np.linspace(0.5, 2.0, 8).astype(np.float32))
    w16 = np.linspace(0.5, 2.0, 8).astype(np.float32).astype(np.float16).astype(np.float64)
    want = 2 * w16 * 1e-6 * 1e-3
    step, opt = _step(None, fnp.float16)
    _, _, _, g0 = step(w, opt.init(w), ls.NoOpLossScale())
    np.testing.assert_array_equal(np.asarray(g0), 0.0)    # unscaled: flushed to zero
    w1, _, s1, g1 = step(w, opt.init(w), ls.DynamicLossScale(fnp.asarray(2.0 ** 20)))
    np.testing.assert_allclose(np.asarray(g1), want, rtol=4e-3)   # a few float16 roundings
    assert float(s1.loss_scale) == 2.0 ** 20 and int(s1.counter) == 1
    # an overflowing scale: the step is skipped and the scale halves
    w2, _, s2, _ = step(w, opt.init(w), ls.DynamicLossScale(fnp.asarray(2.0 ** 60)))
    np.testing.assert_array_equal(np.asarray(w2), np.asarray(w))
    assert float(s2.loss_scale) == 2.0 ** 59 and int(s2.counter) == 0
