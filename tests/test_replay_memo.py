"""The loop memo of replayed CUDA steps (funcgrad/cuda/replay.py) on the simulator.

A SimGraphSet (tests/sim_graphs.py) runs GraphSet's per-call logic with the driver stubbed,
so these tests check what the memo must never get wrong: results equal a fresh computation,
results a user still holds (or views of them, or weak references) are never overwritten,
deleted arguments raise, a new batch each step is read, and other calls take the full path.
"""
import itertools
import os
import weakref

import numpy as np
import pytest

import funcgrad
import funcgrad.cuda
import funcgrad.numpy as fnp
from funcgrad import nn, optim
from funcgrad.tree_util import tree_leaves

pytestmark = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") != "1",
    reason="the stand-in GraphSet runs on the CUDA simulator only")


def _loss(p, x, y):
    h = x
    for i, layer in enumerate(p):
        h = h @ layer["w"] + layer["b"]
        if i < len(p) - 1:
            h = nn.relu(h)
    return fnp.mean(nn.softmax_cross_entropy_with_integer_labels(h, y))


def _setup(sizes=(5, 7, 3), batch=4, seed=0):
    rng = np.random.default_rng(seed)
    params = [{"w": (rng.standard_normal((a, b)) * 0.5).astype(np.float32),
               "b": (rng.standard_normal(b) * 0.1).astype(np.float32)}
              for a, b in itertools.pairwise(sizes)]
    opt = optim.adam(1e-2)
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    y = rng.integers(0, sizes[-1], batch).astype(np.int32)

    def step(p, s, x, y):
        val, g = funcgrad.value_and_grad(_loss)(p, x, y)
        u, s = opt.update(g, s, p)
        return optim.apply_updates(p, u), s, val

    return step, params, opt.init(params), x, y


def _reference(step, p, s, xs, ys):
    """Losses and final parameters of the same steps, eagerly on the CPU."""
    p, s = funcgrad.device_put((p, s), "cpu")
    losses = []
    for x, y in zip(xs, ys):
        p, s, v = step(p, s, funcgrad.device_put(x, "cpu"), funcgrad.device_put(y, "cpu"))
        losses.append(float(v))
    return losses, [np.asarray(a) for a in tree_leaves(p)]


def _graphed(step, p, s, x, y, donate=()):
    """The jitted step (donating arguments `donate`) on "cuda", planned, then replayed
    through a SimGraphSet."""
    from sim_graphs import install
    f = funcgrad.jit(step, donate_argnums=donate)
    p, s, x, y = funcgrad.device_put((p, s, x, y), "cuda")
    for _ in range(2):     # the dry run, then the recorded run: the plan's layout
        p, s, _ = f(p, s, x, y)
    gs = install(f.lower(p, s, x, y).compile())
    return f, gs, p, s, x, y


@pytest.fixture
def hits(monkeypatch):
    """How many calls the memo served (replay.replay returned results)."""
    from funcgrad.cuda import replay
    n = [0]
    orig = replay.replay

    def counted(gs, args):
        out = orig(gs, args)
        n[0] += out is not None
        return out
    monkeypatch.setattr(replay, "replay", counted)
    return n


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_loop_takes_the_short_path_and_matches_eager(hits):
    step, p0, s0, x, y = _setup()
    f, gs, p, s, xd, yd = _graphed(step, p0, s0, x, y)
    losses = []
    for _ in range(10):
        p, s, v = f(p, s, xd, yd)
        losses.append(float(v))
    ref, ref_p = _reference(step, p0, s0, [x] * 12, [y] * 12)
    for a, b in zip(losses, ref[2:]):
        assert abs(a - b) < 1e-5 * max(1.0, abs(b))
    for a, b in zip(tree_leaves(p), ref_p):
        _close(a, b)
    assert gs.memo is not None and gs.memo.n == len(tree_leaves((p, s, xd, yd)))
    assert f.stats()["traces"] == 1
    assert gs.captures == 2           # one graph per output set, no more
    assert hits[0] >= 8


def test_recycled_results_are_the_same_objects_when_unheld():
    step, p0, s0, x, y = _setup()
    f, _, p, s, xd, yd = _graphed(step, p0, s0, x, y)
    seen = []
    for _ in range(8):
        p, s, _ = f(p, s, xd, yd)
        seen.append(id(tree_leaves(p)[0]))
    # from the fifth call on, each output set's Arrays come back (no new objects per call)
    assert seen[4] == seen[6] and seen[5] == seen[7] and seen[4] != seen[5]


def test_held_results_and_views_keep_their_values(hits):
    step, p0, s0, x, y = _setup()
    f, _, p, s, xd, yd = _graphed(step, p0, s0, x, y)
    for _ in range(4):
        p, s, v = f(p, s, xd, yd)
    held = []   # (the Array or view held, its value when returned)
    for k in range(8):
        p, s, v = f(p, s, xd, yd)
        w = tree_leaves(p)[0]
        if k == 1:
            held.append((v, np.asarray(v).copy()))              # a loss kept in a list
        if k == 2:
            held.append((w.reshape(-1), np.asarray(w).reshape(-1).copy()))   # only a view
        if k == 3:
            held.append((w, np.asarray(w).copy()))
        del w
    for arr, val in held:
        np.testing.assert_array_equal(np.asarray(arr), val)
    assert hits[0] >= 10


def test_weakly_referenced_result_is_not_recycled():
    step, p0, s0, x, y = _setup()
    f, _, p, s, xd, yd = _graphed(step, p0, s0, x, y)
    for _ in range(4):
        p, s, v = f(p, s, xd, yd)
    p, s, v = f(p, s, xd, yd)
    ref = weakref.ref(v)
    ids = id(v)
    del v
    for _ in range(4):
        p, s, v2 = f(p, s, xd, yd)
        assert v2 is not ref() or ref() is None
        del v2
    assert ref() is None or id(ref()) == ids


def test_a_new_batch_each_step_is_read(hits):
    step, p0, s0, x, y = _setup()
    f, gs, p, s, _, _ = _graphed(step, p0, s0, x, y)
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal(x.shape).astype(np.float32) for _ in range(10)]
    ys = [rng.integers(0, 3, y.shape).astype(np.int32) for _ in range(10)]
    p_start, s_start = funcgrad.device_put((p, s), "cpu")
    losses = []
    for xb, yb in zip(xs, ys):
        p, s, v = f(p, s, funcgrad.device_put(xb, "cuda"), funcgrad.device_put(yb, "cuda"))
        losses.append(float(v))
    ref, ref_p = _reference(step, p_start, s_start, xs, ys)
    np.testing.assert_allclose(losses, ref, rtol=1e-5, atol=1e-6)
    for a, b in zip(tree_leaves(p), ref_p):
        _close(a, b)
    assert gs.memo is not None and hits[0] >= 6


def test_deleted_argument_raises():
    step, p0, s0, x, y = _setup()
    f, _, p, s, xd, yd = _graphed(step, p0, s0, x, y)
    for _ in range(5):
        p, s, _v = f(p, s, xd, yd)
    tree_leaves(p)[0].delete()
    with pytest.raises(Exception, match="delete"):
        f(p, s, xd, yd)


def test_a_deleted_result_is_not_returned_again(hits):
    """A result deleted by the user and dropped: its output set gets fresh Arrays."""
    step, p0, s0, x, y = _setup()
    f, _, p, s, xd, yd = _graphed(step, p0, s0, x, y)
    for _ in range(5):
        p, s, v = f(p, s, xd, yd)
    v.delete()
    del v
    for _ in range(4):
        p, s, v = f(p, s, xd, yd)
        assert not v.is_deleted() and np.isfinite(float(v))
    assert hits[0] >= 7


def test_other_calls_take_the_full_path():
    """An older result passed again, host arrays for the batch, a changed shape."""
    step, p0, s0, x, y = _setup()
    f, _, p, s, xd, yd = _graphed(step, p0, s0, x, y)
    for _ in range(4):
        p, s, _v = f(p, s, xd, yd)
    p_old, s_old = p, s
    p1, _, v1 = f(p_old, s_old, xd, yd)
    p2, s2, v2 = f(p_old, s_old, xd, yd)      # the same step twice: same results
    _close(v1, v2)
    for a, b in zip(tree_leaves(p1), tree_leaves(p2)):
        _close(a, b)
    p3, _, v3 = f(p2, s2, x, y)              # numpy batch: converted on the full path
    p4, s4, v4 = f(p2, s2, xd, yd)
    _close(v3, v4)
    for a, b in zip(tree_leaves(p3), tree_leaves(p4)):
        _close(a, b)
    assert f.stats()["traces"] == 1
    xs = funcgrad.device_put(np.concatenate([x, x]), "cuda")
    ys = funcgrad.device_put(np.concatenate([y, y]), "cuda")
    _, _, v5 = f(p4, s4, xs, ys)             # a new batch size: a new trace and plan
    assert f.stats()["traces"] == 2
    _close(v5, f(p4, s4, xd, yd)[2])


def test_a_config_switch_set_between_calls_is_seen(hits):
    """jit's per-call path compares config.version: a switch tracing reads retraces."""
    step, p0, s0, x, y = _setup()
    f, _, p, s, xd, yd = _graphed(step, p0, s0, x, y)
    for _ in range(5):
        p, s, _v = f(p, s, xd, yd)
    served = hits[0]
    assert served >= 2
    try:
        funcgrad.config.update("default_matmul_precision", "tensorfloat32")
        p, s, _v = f(p, s, xd, yd)
        assert f.stats()["traces"] == 2 and hits[0] == served
    finally:
        funcgrad.config.update("default_matmul_precision", None)


@pytest.mark.cuda
@pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or not funcgrad.cuda.usable(),
                    reason="real CUDA graphs: a GPU")
def test_real_graphs_loop_with_held_results(hits):
    """On a GPU: the memo serves a training loop (same batch, then new batches), held losses
    and a held view keep their values, and the results equal the CPU's."""
    step, p0, s0, x, y = _setup(sizes=(16, 32, 4), batch=8)
    rng = np.random.default_rng(7)
    xs = [x] * 8 + [rng.standard_normal(x.shape).astype(np.float32) for _ in range(8)]
    ys = [y] * 8 + [rng.integers(0, 4, y.shape).astype(np.int32) for _ in range(8)]
    f = funcgrad.jit(step)
    p, s = funcgrad.device_put((p0, s0), "cuda")
    xd, yd = funcgrad.device_put((x, y), "cuda")
    losses, held = [], []
    for k, (xb, yb) in enumerate(zip(xs, ys)):
        if k >= 8:
            xd, yd = funcgrad.device_put((xb, yb), "cuda")
        p, s, v = f(p, s, xd, yd)
        losses.append(v)                               # every loss Array kept
        if k == 10:
            w = tree_leaves(p)[0]
            held.append((w.reshape(-1), np.asarray(w).reshape(-1).copy()))
            del w
    ref, ref_p = _reference(step, p0, s0, xs, ys)
    np.testing.assert_allclose([float(v) for v in losses], ref, rtol=1e-4, atol=1e-5)
    for a, b in zip(tree_leaves(p), ref_p):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-4, atol=1e-5)
    for arr, val in held:
        np.testing.assert_array_equal(np.asarray(arr), val)
    gs = f.lower(p, s, xd, yd).compile().graphs
    assert gs is not None and gs.memo is not None
    assert hits[0] >= 6
