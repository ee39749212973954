"""The per-call host path of a replayed jitted step: jit's front path, the loop memo's expected
arguments (replay.Memo.expect), the straight-line pytree builder.

The memo tests run a SimGraphSet (tests/sim_graphs.py) on the CUDA simulator, as
tests/test_replay_memo.py does; the tree tests run anywhere.
"""
import collections
import os
from typing import NamedTuple

import numpy as np
import pytest

import funcgrad
from funcgrad.compile import tree_fast
from funcgrad.tree_util import tree_flatten, tree_leaves, tree_unflatten

_sim = pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") != "1",
                          reason="the stand-in GraphSet runs on the CUDA simulator only")


class _Plain(NamedTuple):
    a: object
    b: object


_Base = collections.namedtuple("_Base", "x y")


class _Counted(_Base):
    """A namedtuple subclass with a constructor of its own: rebuilt through it."""
    made = 0

    def __new__(cls, x, y):
        cls.made += 1
        return super().__new__(cls, x, y)


def test_builder_constructs_namedtuples_as_optree_does():
    for tree in [(_Plain(1, [2, 3]), _Base(4, 5)), {"k": _Counted(1, 2)}, _Plain((), {})]:
        leaves, spec = tree_flatten(tree)
        new = [k + 100 for k in range(len(leaves))]
        build = tree_fast.builder(spec)
        made = _Counted.made
        got, want = build(new), tree_unflatten(spec, new)
        assert got == want and type(got) is type(want)
        assert _Counted.made - made == (2 if "k" in tree else 0)
    assert tree_fast._plain_namedtuple(_Plain) and tree_fast._plain_namedtuple(_Base)
    assert not tree_fast._plain_namedtuple(_Counted)


def test_getter_checks_lengths_by_unpacking():
    spec = tree_flatten(([1, 2], (3,), _Plain(4, 5), [], {}))[1]
    get = tree_fast.leaf_getter(spec, None)
    assert get(([1, 2], (3,), _Plain(4, 5), [], {})) == [1, 2, 3, 4, 5]
    assert get(([1, 2, 9], (3,), _Plain(4, 5), [], {})) is None      # a longer list
    assert get(([1], (3,), _Plain(4, 5), [], {})) is None            # a shorter one
    assert get(([1, 2], (3, 4), _Plain(4, 5), [], {})) is None
    assert get(([1, 2], (3,), _Plain(4, 5), [0], {})) is None        # an empty list was
    assert get(([1, 2], (3,), _Plain(4, 5), [], {"a": 1})) is None   # an empty dict was
    assert get(([1, 2], (3,), (4, 5), [], {})) is None               # tuple, not _Plain
    assert get(({1: 1, 2: 2}, (3,), _Plain(4, 5), [], {})) is None   # a dict at a list


def _setup(seed=0):
    from test_replay_memo import _setup as setup
    return setup(seed=seed)


def _graphed(step, p, s, x, y):
    from test_replay_memo import _graphed as graphed
    return graphed(step, p, s, x, y)


@_sim
def test_fed_arguments_the_caller_keeps_are_not_overwritten():
    """The memo's expected arguments hold the results fed back; a caller that also keeps
    them (every other step's parameters) must find them unchanged."""
    step, p0, s0, x, y = _setup()
    f, gs, p, s, xd, yd = _graphed(step, p0, s0, x, y)
    kept = []
    for k in range(12):
        if k % 3 == 0:
            kept.append((p, [np.asarray(a).copy() for a in tree_leaves(p)]))
        p, s, _v = f(p, s, xd, yd)
    for tree, vals in kept:
        for a, b in zip(tree_leaves(tree), vals):
            np.testing.assert_array_equal(np.asarray(a), b)
    assert gs.memo is not None and gs.memo.expect[gs.memo.nxt] is not None


@_sim
def test_recycled_in_steady_state_after_a_new_batch_and_a_held_result():
    """After a new batch (checked once) and a held result (fresh Arrays once), the memo
    returns the same Arrays again: its expected lists keep the reference counts exact."""
    step, p0, s0, x, y = _setup()
    f, _, p, s, xd, yd = _graphed(step, p0, s0, x, y)
    for _ in range(4):
        p, s, _v = f(p, s, xd, yd)
    xd2 = funcgrad.device_put(x + 1, "cuda")
    keep = p
    for _ in range(4):
        p, s, _v = f(p, s, xd2, yd)
    del keep
    ids = []
    for _ in range(8):
        p, s, _v = f(p, s, xd2, yd)
        ids.append(id(tree_leaves(p)[0]))
    assert ids[4] == ids[6] and ids[5] == ids[7] and ids[4] != ids[5]


@_sim
def test_front_path_gives_way_to_disable_jit_tracing_and_switches():
    """jit's first check serves only plain calls: under disable_jit, inside a trace, and with
    debug_nans on, the call takes its own path and agrees."""
    step, p0, s0, x, y = _setup()
    f, _, p, s, xd, yd = _graphed(step, p0, s0, x, y)
    for _ in range(4):
        p, s, _v = f(p, s, xd, yd)
    calls = f.stats()["calls"]
    pc, sc = funcgrad.device_put((p, s), "cpu")
    want = float(step(pc, sc, funcgrad.device_put(x, "cpu"), funcgrad.device_put(y, "cpu"))[2])
    with funcgrad.disable_jit():
        got = f(p, s, xd, yd)[2]
    assert f.stats()["calls"] == calls      # ran eagerly, not replayed
    assert abs(float(got) - want) < 1e-5
    g = funcgrad.grad(lambda q: f(q, s, xd, yd)[2])(p)      # traced: inlined, not replayed
    g_cpu = funcgrad.grad(lambda q: step(q, sc, funcgrad.device_put(x, "cpu"),
                                         funcgrad.device_put(y, "cpu"))[2])(pc)
    for a, b in zip(tree_leaves(g), tree_leaves(g_cpu)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
    try:
        funcgrad.config.update("debug_nans", True)
        assert abs(float(f(p, s, xd, yd)[2]) - want) < 1e-5
    finally:
        funcgrad.config.update("debug_nans", False)
    v2 = f(p, s, xd, yd)[2]
    assert abs(float(v2) - want) < 1e-5 and f.stats()["traces"] == 1
