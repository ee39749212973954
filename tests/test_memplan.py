"""The static memory plan's packing: buffers alive at the same time never share bytes."""
import types

from hypothesis import given, settings
from hypothesis import strategies as st

from funcgrad.cuda import memplan


def _recorder(events):
    """A Recorder's log without memory: events are ("alloc", size) or ("free", index)."""
    rec = types.SimpleNamespace(sizes=[], life=[], clock=0)
    for kind, x in events:
        if kind == "alloc":
            rec.sizes.append(x)
            rec.life.append([rec.clock, None])
        else:
            rec.life[x][1] = rec.clock
        rec.clock += 1
    return rec


@st.composite
def _programs(draw):
    events, live = [], []
    for _ in range(draw(st.integers(1, 40))):
        if live and draw(st.booleans()):
            k = live.pop(draw(st.integers(0, len(live) - 1)))
            events.append(("free", k))
        else:
            live.append(sum(1 for e in events if e[0] == "alloc"))
            events.append(("alloc", draw(st.integers(0, 5000))))
    return events


@settings(max_examples=200, deadline=None)
@given(_programs())
def test_packed_buffers_never_overlap_while_both_alive(events):
    rec = _recorder(events)
    lay = memplan.pack(rec, [])
    end = rec.clock + 1
    spans = []
    for k, (size, (b, d)) in enumerate(zip(rec.sizes, rec.life)):
        where, off = lay.places[k]
        assert where == "arena" and off % memplan.ALIGN == 0
        spans.append((off, off + memplan._align(size), b, end if d is None else d))
    for i, (o1, e1, b1, d1) in enumerate(spans):
        assert e1 <= lay.arena_bytes
        for o2, e2, b2, d2 in spans[i + 1:]:
            if b1 < d2 and b2 < d1:          # alive at the same time
                assert e1 <= o2 or e2 <= o1
    # the arena is no larger than every buffer side by side
    assert lay.arena_bytes <= sum(memplan._align(s) for s in rec.sizes)


def test_results_get_slots_of_their_own():
    rec = _recorder([("alloc", 100), ("alloc", 300), ("free", 0), ("alloc", 50)])
    rec.freed = lambda k: None
    out = memplan._RecBlock(None, rec, 1)     # the block a result lives in
    lay = memplan.pack(rec, [out])
    assert lay.places[1] == ("out", 0) and lay.out_sizes == [memplan._align(300)]
    assert lay.places[0][0] == lay.places[2][0] == "arena"
    assert lay.places[0][1] == lay.places[2][1] == 0      # the freed buffer's bytes are reused


def test_reuse_follows_step_dependencies():
    # step 0 makes a (dies at step 1); step 2 makes b. b may take a's bytes only when step 2
    # depends on step 1 (else reuse would order two steps that could run side by side)
    def run(anc):
        rec = _recorder([("alloc", 256), ("free", 0), ("alloc", 256)])
        rec.at = [[0, 1], [2, None]]
        return memplan.pack(rec, [], anc).places
    assert run(None)[1] == ("arena", 0)
    assert run([0, 1, 0b10])[1] == ("arena", 0)          # step 2 depends on step 1: reuse
    assert run([0, 1, 0])[1] == ("arena", memplan.ALIGN)  # independent: a fresh place


def test_large_allocations_reuse_across_unordered_steps(monkeypatch):
    # as above with independent steps, but b is at least ORDER_FREE_BYTES: it takes a's bytes
    monkeypatch.setattr(memplan, "ORDER_FREE_BYTES", 512)

    def run(size):
        rec = _recorder([("alloc", size), ("free", 0), ("alloc", size)])
        rec.at = [[0, 1], [2, None]]
        return memplan.pack(rec, [], [0, 1, 0]).places
    assert run(512)[1] == ("arena", 0)
    assert run(256)[1] == ("arena", memplan.ALIGN)
