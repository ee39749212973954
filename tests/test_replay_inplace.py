"""The loop memo of replayed CUDA steps that donate their arguments (cuda/replay_inplace.py).

On the simulator a SimGraphSet (tests/sim_graphs.py) runs GraphSet's per-call logic with the
driver stubbed. These tests check what the memo must never get wrong: results equal the eager
steps, donated arguments are deleted (reading one raises, naming the jitted function), a
deleted Array the caller still holds is never brought back, a view of a donated array keeps
its value (the full path copies it), held losses keep theirs, a new batch each step is read.
"""
import gc
import os
import weakref

import numpy as np
import pytest
from test_replay_memo import _close, _reference, _setup
from test_replay_memo import _graphed as _graphed_as

import funcgrad
import funcgrad.cuda
from funcgrad.tree_util import tree_leaves

pytestmark = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") != "1",
    reason="the stand-in GraphSet runs on the CUDA simulator only")


@pytest.fixture
def hits(monkeypatch):
    """How many calls the in-place memo served."""
    from funcgrad.cuda import replay_inplace
    n = [0]
    orig = replay_inplace.replay

    def counted(gs, args, name=None):
        out = orig(gs, args, name)
        n[0] += out is not None
        return out
    monkeypatch.setattr(replay_inplace, "replay", counted)
    return n


def _graphed(step, p, s, x, y):
    """The step jitted with parameters and optimizer state donated, replayed through a
    SimGraphSet."""
    return _graphed_as(step, p, s, x, y, donate=(0, 1))


def test_donated_loop_takes_the_short_path_and_matches_eager(hits):
    step, p0, s0, x, y = _setup()
    f, gs, p, s, xd, yd = _graphed(step, p0, s0, x, y)
    losses = []
    for _ in range(10):
        old = p
        p, s, v = f(p, s, xd, yd)
        losses.append(float(v))
        assert all(a.is_deleted() for a in tree_leaves(old))
        assert not any(a.is_deleted() for a in tree_leaves((p, s)))
    del old
    ref, ref_p = _reference(step, p0, s0, [x] * 12, [y] * 12)
    np.testing.assert_allclose(losses, ref[2:], rtol=1e-5, atol=1e-6)
    for a, b in zip(tree_leaves(p), ref_p):
        _close(a, b)
    assert type(gs.memo).__name__ == "InPlaceMemo" and gs.memo.ready
    assert gs.captures == 1 and hits[0] >= 8


def test_results_come_back_as_the_same_objects_when_unheld(hits):
    step, p0, s0, x, y = _setup()
    f, _, p, s, xd, yd = _graphed(step, p0, s0, x, y)
    seen = []
    for _ in range(8):
        p, s, _v = f(p, s, xd, yd)
        seen.append(id(tree_leaves(p)[0]))
    # the Arrays of the call before last come back (deleted by the last call, held by none)
    assert seen[4] == seen[6] and seen[5] == seen[7] and seen[4] != seen[5]
    assert hits[0] >= 6


def test_donated_arguments_raise_naming_the_function(hits):
    step, p0, s0, x, y = _setup()
    f, _, p, s, xd, yd = _graphed(step, p0, s0, x, y)
    for _ in range(4):
        p, s, _v = f(p, s, xd, yd)
    old = p
    p, s, _v = f(p, s, xd, yd)      # served by the memo
    assert hits[0] >= 3
    with pytest.raises(RuntimeError, match=r"donated to jit\(step\).*test_replay_inplace"):
        np.asarray(tree_leaves(old)[0])
    with pytest.raises(RuntimeError, match="deleted"):
        f(old, s, xd, yd)            # a donated (deleted) pytree passed again


def test_a_held_deleted_array_is_never_revived(hits):
    """A caller keeping the pytree it donated: those Arrays stay deleted for good."""
    step, p0, s0, x, y = _setup()
    f, _, p, s, xd, yd = _graphed(step, p0, s0, x, y)
    for _ in range(3):
        p, s, _v = f(p, s, xd, yd)
    kept = p
    ref = weakref.ref(tree_leaves(s)[0])
    for _ in range(6):
        p, s, _v = f(p, s, xd, yd)
        assert all(a.is_deleted() for a in tree_leaves(kept))
        r = ref()
        assert r is None or r.is_deleted()
        del r
    gc.collect()
    assert all(a.is_deleted() for a in tree_leaves(kept))
    assert hits[0] >= 4


def test_a_view_of_a_donated_array_keeps_its_value(hits):
    step, p0, s0, x, y = _setup()
    f, _, p, s, xd, yd = _graphed(step, p0, s0, x, y)
    for _ in range(4):
        p, s, _v = f(p, s, xd, yd)
    w = next(a for a in tree_leaves(p) if a.ndim == 2)
    view = w.reshape(-1)           # shares w's memory: the step must not write over it
    assert view is not w and view.buf.block is w.buf.block
    val = np.asarray(view).copy()
    del w
    for _ in range(4):
        p, s, _v = f(p, s, xd, yd)
    np.testing.assert_array_equal(np.asarray(view), val)
    _, ref_p = _reference(step, p0, s0, [x] * 10, [y] * 10)
    for a, b in zip(tree_leaves(p), ref_p):
        _close(a, b)


def test_held_losses_and_a_new_batch_each_step(hits):
    step, p0, s0, x, y = _setup()
    f, _, p, s, _, _ = _graphed(step, p0, s0, x, y)
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal(x.shape).astype(np.float32) for _ in range(8)]
    ys = [rng.integers(0, 3, y.shape).astype(np.int32) for _ in range(8)]
    p_start, s_start = funcgrad.device_put((p, s), "cpu")
    losses = []
    for xb, yb in zip(xs, ys):
        p, s, v = f(p, s, funcgrad.device_put(xb, "cuda"), funcgrad.device_put(yb, "cuda"))
        losses.append(v)                     # the loss Arrays are kept
    ref, ref_p = _reference(step, p_start, s_start, xs, ys)
    np.testing.assert_allclose([float(v) for v in losses], ref, rtol=1e-5, atol=1e-6)
    for a, b in zip(tree_leaves(p), ref_p):
        _close(a, b)
    assert hits[0] >= 5


def test_a_deleted_result_is_not_served(hits):
    step, p0, s0, x, y = _setup()
    f, _, p, s, xd, yd = _graphed(step, p0, s0, x, y)
    for _ in range(4):
        p, s, _v = f(p, s, xd, yd)
    tree_leaves(s)[-1].delete()
    with pytest.raises(RuntimeError, match="delete"):
        f(p, s, xd, yd)


@pytest.mark.cuda
@pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or not funcgrad.cuda.usable(),
                    reason="real CUDA graphs: a GPU")
def test_real_graphs_donated_loop(hits):
    """On a GPU: the memo serves a donated training loop (same batch, then new batches),
    donated parameters are deleted, held losses keep their values, results equal the CPU's."""
    step, p0, s0, x, y = _setup(sizes=(16, 32, 4), batch=8)
    rng = np.random.default_rng(9)
    xs = [x] * 8 + [rng.standard_normal(x.shape).astype(np.float32) for _ in range(8)]
    ys = [y] * 8 + [rng.integers(0, 4, y.shape).astype(np.int32) for _ in range(8)]
    f = funcgrad.jit(step, donate_argnums=(0, 1))
    p, s = funcgrad.device_put((p0, s0), "cuda")
    xd, yd = funcgrad.device_put((x, y), "cuda")
    losses = []
    for k, (xb, yb) in enumerate(zip(xs, ys)):
        if k >= 8:
            xd, yd = funcgrad.device_put((xb, yb), "cuda")
        old = p
        p, s, v = f(p, s, xd, yd)
        losses.append(v)
        assert all(a.is_deleted() for a in tree_leaves(old))
    del old
    ref, ref_p = _reference(step, p0, s0, xs, ys)
    np.testing.assert_allclose([float(v) for v in losses], ref, rtol=1e-4, atol=1e-5)
    for a, b in zip(tree_leaves(p), ref_p):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-4, atol=1e-5)
    assert hits[0] >= 8
