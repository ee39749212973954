"""The cuBLAS workspace policy of captured graphs: blas.py's lanes, graph_ab.py's A/B."""
from __future__ import annotations

from collections import OrderedDict
from types import SimpleNamespace

import numpy as np
import pytest

import funcgrad
import funcgrad.cuda as fcuda
from funcgrad.cuda import blas, graph_ab, runtime
from funcgrad.cuda.graph_ab import Timing, Trial
from funcgrad.cuda.graphs import _Entry

LARGE, SMALL = blas.SMALL_GEMM, blas.SMALL_GEMM - 1


# Trial: the pure bookkeeping --------------------------------------------------------------------

def test_trial_alternates_and_times_after_the_warmup():
    t = Trial(("ordered", "spread"), samples=3, warmup=1)
    seq = [t.next() for _ in range(8)]
    assert [i for i, _ in seq] == [0, 1] * 4
    assert [timed for _, timed in seq] == [False, False] + [True] * 6
    assert t.due()


def test_trial_is_due_and_decides_only_after_every_sample():
    t = Trial(samples=3, warmup=1)
    for _ in range(7):
        t.next()
        assert not t.due()
    t.next()
    assert t.due()
    assert t.decide() is None                  # no times added yet
    for ms in (1.0, 1.0, 1.0):
        t.add(1, ms)
    for ms in (5.0, 5.0):
        t.add(0, ms)
    assert t.decide() is None                  # "ordered" has 2 of 3
    t.add(0, 5.0)
    assert t.decide() == "spread"


def test_trial_picks_the_faster_median_and_a_tie_keeps_ordered():
    t = Trial(samples=3)
    for ms in (1.0, 1.0, 100.0):               # one slow outlier: the median ignores it
        t.add(0, ms)
    for ms in (2.0, 2.0, 2.0):
        t.add(1, ms)
    assert t.decide() == "ordered"
    assert t.medians() == {"ordered": 1.0, "spread": 2.0}
    tie = Trial(samples=2)
    for i in (0, 1):
        tie.add(i, 0.5)
        tie.add(i, 0.7)
    assert tie.decide() == "ordered"
    near = Trial(samples=1)   # spread 0.5% faster: within MARGIN, noise; ordered stays
    near.add(0, 1.0)
    near.add(1, 0.995)
    assert near.decide() == "ordered"
    swapped = Trial(("spread", "ordered"), samples=1)
    swapped.add(0, 1.0)
    swapped.add(1, 1.0)
    assert swapped.decide() == "spread"        # a tie keeps the first variant named


# Timing with a stand-in for cuda.bindings.driver ------------------------------------------------

class _FakeDriver:
    """Records event calls; an event's time is the index of the launch after it was recorded."""

    def __init__(self, ms_of=None):
        self.calls, self.made, self.destroyed, self.clock = [], 0, [], 0
        self.stamp = {}
        self.ms_of = ms_of or {}

    def cuEventCreate(self, flags):
        self.made += 1
        return (0, f"ev{self.made}")

    def cuEventRecord(self, ev, stream):
        self.calls.append(("record", ev, stream))
        self.stamp[ev] = self.clock
        return (0,)

    def cuEventSynchronize(self, ev):
        self.calls.append(("sync", ev))
        return (0,)

    def cuEventElapsedTime(self, e0, e1):
        return (0, self.ms_of.get((e0, e1), 1.0))

    def cuEventDestroy(self, ev):
        self.destroyed.append(ev)
        return (0,)


def test_timing_brackets_timed_launches_and_waits_once():
    cb = _FakeDriver()
    launched = []

    def launch(handle, stream):
        launched.append((handle, stream))
        cb.calls.append(("launch", handle))
        return 0

    t = Timing((111, 222), cb, Trial(samples=2, warmup=1))
    assert cb.made == 8                                   # 2 variants x 2 samples x 2 events
    while not t.due():
        assert t.launch(launch) == 0
    assert [h for h, _ in launched] == [111, 222] * 3
    assert all(s == 0 for _, s in launched)               # the legacy stream
    kinds = [c[0] for c in cb.calls]
    # warm-ups untimed, then record / launch / record for each timed one; no waits yet
    assert kinds == ["launch", "launch"] + ["record", "launch", "record"] * 4
    last_end = cb.calls[-1][1]
    # variant 1's timed launches took 0.5 ms each: it wins
    cb.ms_of = {(e0, e1): (0.5 if i == 1 else 2.0) for i, e0, e1 in t.timed}
    assert t.finish() == "spread"
    assert [c for c in cb.calls if c[0] == "sync"] == [("sync", last_end)]
    assert sorted(cb.destroyed) == sorted(f"ev{k}" for k in range(1, 9))
    assert t.trial.medians() == {"ordered": 2.0, "spread": 0.5}
    t.close()                                             # idempotent: nothing left
    assert len(cb.destroyed) == 8


# blas: which lane a captured GEMM takes ---------------------------------------------------------

def _fake_lanes(monkeypatch, n):
    lanes = [SimpleNamespace(block=SimpleNamespace(ptr=lambda k=k: 1000 * (k + 1)), offset=0,
                             dtype=np.dtype(np.uint8)) for k in range(n)]
    monkeypatch.setattr(blas, "LANES", n)
    monkeypatch.setattr(blas, "_lanes", lanes)
    monkeypatch.setattr(blas, "_turn", [0])
    return lambda macs: blas._workspace(macs) // 1000 - 1     # the lane handed out


def test_workspace_lanes_follow_the_policy_while_capturing(monkeypatch):
    lane = _fake_lanes(monkeypatch, 4)
    monkeypatch.setattr(runtime, "_keep", None)
    with blas.workspace_policy("spread"):                 # eager calls: lane 0 under either
        assert [lane(LARGE), lane(SMALL)] == [0, 0]
    monkeypatch.setattr(runtime, "_keep", [])             # a capture under way
    with blas.workspace_policy("ordered"):
        got = [lane(m) for m in (LARGE, SMALL, LARGE, SMALL, SMALL, SMALL)]
        assert got == [0, 1, 0, 2, 3, 1]
        assert blas.large_gemms() == 2
    with blas.workspace_policy("spread"):
        assert blas.large_gemms() == 0                    # counted from zero per capture
        got = [lane(m) for m in (LARGE, LARGE, SMALL, LARGE)]
        assert got == [2, 3, 1, 2]
        assert blas.large_gemms() == 3
    assert blas._policy == ["ordered"]                    # restored on exit


def test_workspace_policy_restores_on_error_and_rejects_unknown_names(monkeypatch):
    lane = _fake_lanes(monkeypatch, 1)
    monkeypatch.setattr(runtime, "_keep", [])
    with blas.workspace_policy("spread"):
        assert lane(LARGE) == lane(SMALL) == 0            # one lane: every GEMM in order
    with pytest.raises(KeyError), blas.workspace_policy("spread"):
        raise KeyError
    assert blas._policy == ["ordered"]
    with pytest.raises(ValueError, match="not one of"), blas.workspace_policy("fast"):
        pass


def test_policies_differ_and_the_setting(monkeypatch):
    monkeypatch.setattr(blas, "LANES", 4)
    assert not blas.policies_differ(1) and blas.policies_differ(2)
    monkeypatch.setattr(blas, "LANES", 2)               # spread would share lane 1: no choice
    assert not blas.policies_differ(5)
    for value in ("measure", "ordered", "spread"):
        monkeypatch.setattr(blas, "GEMM_POLICY", value)
        assert blas.policy_setting() == value
    monkeypatch.setattr(blas, "GEMM_POLICY", "fastest")
    with pytest.raises(ValueError, match="FUNCGRAD_GEMM_POLICY"):
        blas.policy_setting()


# start / decide against a stand-in GraphSet -----------------------------------------------------

def _entry(slot, large=2, checks=0):
    e = _Entry()
    e.graph, e.exec, e.handle = f"g{slot}", f"x{slot}", 100 + slot
    e.slot, e.row, e.deferred, e.keep, e.large = slot, 16 * slot, [None] * checks, [], large
    e.alt = e.ab = None
    e.staged, e.templates = [], [(0, 0, (2,), (1,), 0, np.dtype("f4"), True, None)]
    return e


class _FakeGraphSet:
    """What graph_ab.start / decide use of a GraphSet."""

    def __init__(self):
        self.entries, self.free_slots = OrderedDict(), list(range(6))
        self.sticky = np.zeros((96, 2), np.int64)
        self.sticky[:, 1] = np.iinfo(np.int64).max
        self.gemm_policy, self.gemm_ab = None, {"setting": "measure"}
        self._cb = _FakeDriver()
        self.destroyed, self.recorded = [], []

    def _record(self, key, ins, s, policy):
        self.recorded.append(policy)
        return _entry(self.free_slots.pop(), checks=1), ["outs"], "pool"

    def _templates(self, outs, ins, pool, s):
        return [(0, 0, (2,), (1,), 0, np.dtype("f4"), True, None), (2, object(), None)]

    def _destroy(self, e):
        self.destroyed.append(e.graph)
        self.free_slots.append(e.slot)


def test_entry_slots_hold_every_graph_field():
    assert set(graph_ab.GRAPH_FIELDS) <= set(_Entry.__slots__)


def test_start_decides_ordered_without_two_large_gemms(monkeypatch):
    monkeypatch.setattr(blas, "LANES", 4)
    gs = _FakeGraphSet()
    e = _entry(gs.free_slots.pop(), large=1)
    graph_ab.start(gs, e, ("k",), [], 0)
    assert gs.gemm_policy == "ordered" and gs.recorded == [] and e.alt is None
    assert gs.gemm_ab["large"] == 1 and "nothing to choose" in gs.gemm_ab["why"]


def test_start_then_decide_keeps_the_faster_graph(monkeypatch):
    monkeypatch.setattr(blas, "LANES", 4)
    gs = _FakeGraphSet()
    entries = []
    for key in ("a", "b"):              # a training loop's two result sets, both undecided
        e = _entry(gs.free_slots.pop(), checks=1)
        graph_ab.start(gs, e, (key,), [], 0)
        gs.entries[key] = e
        entries.append(e)
    assert gs.recorded == ["spread", "spread"] and gs.gemm_policy is None
    a, b = entries
    assert a.alt is not None and a.ab is not None and a.ab.handles == [a.handle, a.alt.handle]
    spread_a, spread_b = a.alt.graph, b.alt.graph
    ordered_a, ordered_b = a.graph, b.graph
    gs.sticky[b.row, 0] = 1            # a device check failed in b's ordered replay
    launches = []
    while not a.ab.due():
        a.ab.launch(lambda h, s: launches.append(h) or 0)
    gs._cb.ms_of = {(e0, e1): (3.0 if i == 0 else 1.0) for i, e0, e1 in a.ab.timed}
    assert graph_ab.decide(gs, a.ab) == "spread"
    assert gs.gemm_policy == "spread"
    assert gs.gemm_ab["ms"] == {"ordered": 3.0, "spread": 1.0}
    assert len(gs.gemm_ab["samples"]["spread"]) == graph_ab.SAMPLES
    # both entries now run their spread graph; the ordered ones are freed
    assert (a.graph, b.graph) == (spread_a, spread_b)
    assert sorted(gs.destroyed) == sorted([ordered_a, ordered_b])
    assert a.alt is a.ab is b.alt is b.ab is None
    assert a.handle == int(a.graph[1:]) + 100
    # b's failed check moved to the row of the graph it keeps (still raised later)
    assert gs.sticky[b.row, 0] == 1 and gs.sticky[:, 0].sum() == 1
    assert len(gs.free_slots) == 6 - 2


def test_decide_ordered_keeps_the_first_capture(monkeypatch):
    monkeypatch.setattr(blas, "LANES", 4)
    gs = _FakeGraphSet()
    e = _entry(gs.free_slots.pop())
    graph_ab.start(gs, e, ("k",), [], 0)
    gs.entries["k"] = e
    first, alt = e.graph, e.alt.graph
    while not e.ab.due():
        e.ab.launch(lambda h, s: 0)
    gs._cb.ms_of = {}                  # every launch 1.0 ms: a tie
    assert graph_ab.decide(gs, e.ab) == "ordered"
    assert e.graph == first and gs.destroyed == [alt]


# on a real GPU ----------------------------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.skipif(not fcuda.is_available(), reason="captures CUDA graphs: a real GPU only")
def test_two_large_matmuls_measure_and_keep_a_policy(rng):
    # two independent 1024^3 products (2^30 multiply-adds each): the policies can differ, so
    # the graph is captured twice and its first replays pick one; results equal eager ones
    def f(a, b, c, d):
        return a @ b, c @ d
    xs = [rng.standard_normal((1024, 1024)).astype(np.float32) for _ in range(4)]
    ds = [funcgrad.device_put(x, "cuda") for x in xs]
    want = [np.asarray(w) for w in f(*ds)]
    jf = funcgrad.jit(f)
    for _ in range(12):
        for got, w in zip(jf(*ds), want):
            np.testing.assert_allclose(np.asarray(got), w, rtol=1e-4, atol=1e-3)
    plan = jf.lower(*ds).compile()
    g = plan.graphs
    assert g is not None, plan.graph_error
    assert g.gemm_policy in blas.POLICIES, g.gemm_ab
    assert all(e.alt is None and e.ab is None for e in g.entries.values())
    if (blas.available("float32") and blas.policy_setting() == "measure"
            and blas.policies_differ(2)):
        assert g.gemm_ab["large"] == 2, g.gemm_ab
        assert set(g.gemm_ab["ms"]) == {"ordered", "spread"}, g.gemm_ab
        assert all(ms > 0 for ms in g.gemm_ab["ms"].values()), g.gemm_ab
