"""The loop memo of a GraphSet whose plan donates its arguments (jit's donate_argnums).

A training step jitted with donated parameters and optimizer state writes their new values in
place, into the memory of the arguments it was given (results of template kind 1, graphs.py),
and the caller passes those results back at the next call. In that steady state this memo
launches the graph learned for the call and moves each donated argument's buffer to the
result Array written into it. The result Arrays are the ones the call before last returned
(deleted by the last call) when nothing but the memo holds them, so a step makes no Array and
no buffer; the donated arguments are deleted with one DeletedBuffer for the call (reading one
raises, naming the jitted function and the caller's line, as on the full path).

The memo is learned by the full path (graphs.GraphSet.__call__) when
- every donated argument is a result of the last call written in place and fed back, every
  other argument is not a result of this plan (a batch, a constant), so the output set written
  stays the same from call to call;
- every in-place result replaces the donated argument it is passed back as, whole and
  contiguous (so each result keeps one buffer, which only moves from Array to Array).
Each call then checks, in a few C-level passes over the arguments: they are the very objects
expected (ids; their buffers again when some Array was deleted since); those buffers and their
blocks are held by nothing else (a view of a donated array: the full path copies it first);
the other arguments pass the full path's checks (replay._free_ok). The output set's results
(a loss) come back as the same Arrays when the caller dropped them, else the set is released
as usual (results still held are moved out) and fresh ones are made.
"""
from __future__ import annotations

from itertools import repeat
from operator import attrgetter
from weakref import getweakrefcount

from funcgrad.core import Array, DeletedBuffer, user_frame
from funcgrad.cuda.replay import Held, _buf, _free_ok, _owned, _picker, _refs, launch

_block = attrgetter("block")
# what getrefcount reports through map() for an object held by one list and nothing else
_ONE = next(map(_refs, [object()]))


class InPlaceMemo:
    """What the next call of one GraphSet with donated arguments is expected to be."""
    __slots__ = ("blocks", "chk", "consts", "deaths", "donated", "entry", "exp_alt",
                 "exp_bufs", "exp_ids", "f1_get", "f1_res", "free_get", "free_pos", "held",
                 "inplace", "k0", "k1_bufs", "k1_src", "key", "last", "n", "n1", "order",
                 "outs", "ready", "seen", "seen_bufs", "seen_ids", "spare")

    def __init__(self, outs, s, inplace):
        self.outs, self.last, self.inplace = [None, None], s, inplace
        self.outs[s] = outs
        self.ready = False

    def replay(self, gs, args, name=None):
        return replay(gs, args, name)

    def unhold(self):
        """Before a full call: let go of the donated buffers and blocks (the full path tells
        by their owners whether it may write into them)."""
        self.ready = False
        self.k1_bufs = self.blocks = None

    def see(self, got):
        """The other arguments of a call that passed their checks (kept alive: their ids)."""
        self.seen = got
        self.seen_ids, self.seen_bufs = list(map(id, got)), list(map(id, map(_buf, got)))

    def store0(self, outs):
        """Keep the output set's results among `outs` (just made, held by nothing else but
        `outs`) to return them again when the caller drops them."""
        self.held = Held(outs, self.k0, self.chk)


def learn(gs, args, bufs, feed, s, key, entry, outs, kept=None) -> InPlaceMemo:
    """The memo after a full call of GraphSet gs (writing set s with `key` and `entry`); one
    that only remembers the results (for the next call's feed) when the short path cannot
    serve this plan and call."""
    tpl = entry.templates
    inplace = frozenset(j for j, t in enumerate(tpl) if t[0] == 1)
    m = InPlaceMemo(outs, s, inplace)
    plan = gs.plan
    if feed is None or not inplace or len(args) != len(bufs):
        return m
    donate = set(plan.donate)
    f1, free = [], []
    for i, (a, b, j) in enumerate(zip(args, bufs, feed)):
        if type(a) is not Array or a.buf is not b:
            return m
        if j >= 0:
            if j not in inplace:
                return m      # a result of an output set fed back: the set would alternate
            f1.append(i)
        elif i in donate or _owned(b.block, plan):
            return m
        else:
            free.append((i, a.aval))
    if not donate <= set(f1):
        return m
    k1 = sorted(inplace)
    for j in k1:   # result j is written into donated argument a, and passed back as a
        a, t = tpl[j][1], tpl[j]
        if a not in donate or feed[a] != j or t[4] != 0 or not t[6] or t[2] != t[7].shape:
            return m
    m.k1_bufs = [outs[j].buf for j in k1]   # each result's buffer from now on
    m.blocks = [b.block for b in m.k1_bufs]
    if len(set(map(id, m.blocks))) != len(k1):
        return m
    m.n, m.key, m.entry = len(args), key, entry
    m.n1 = len(k1) * (_ONE + 1)
    m.f1_get, m.f1_res = _picker(f1), _picker([feed[i] for i in f1])
    m.free_pos, m.free_get = tuple(free), _picker([i for i, _ in free])
    m.seen = m.seen_ids = m.seen_bufs = None
    m.k1_src = _picker([tpl[j][1] for j in k1])
    m.donated = None if donate == set(f1) else _picker(sorted(donate))
    m.spare = m.k1_src(args)     # deleted by jit after this call
    m.k0 = [j for j, t in enumerate(tpl) if t[0] == 0]
    fixed = [j for j, t in enumerate(tpl) if t[0] == 2]
    m.consts = tuple(outs[j] for j in fixed)
    m.chk = m.k0 + fixed   # results whose buffers must still be theirs (not deleted)
    inv = [0] * len(tpl)
    for p, j in enumerate(m.k0 + k1 + fixed):
        inv[j] = p
    m.order = _picker(inv)       # (set results + in-place results + constants) -> results
    m.store0(outs)
    got = m.f1_res(outs)
    m.exp_ids, m.exp_bufs, m.exp_alt = list(map(id, got)), list(map(id, map(_buf, got))), None
    m.deaths = -1
    m.ready = True
    return m


def replay(gs, args, name=None) -> list | None:
    """The result Arrays of a call that matches gs's memo (None: take the full path)."""
    m = gs.memo
    if not m.ready or len(args) != m.n or m.entry.ab is not None:
        return None
    entry = m.entry
    deaths = DeletedBuffer.made
    same_bufs = deaths == m.deaths
    got = m.f1_get(args)
    if list(map(id, got)) != m.exp_ids or not (
            same_bufs or list(map(id, map(_buf, got))) == m.exp_bufs):
        return None
    # each buffer held by its Array alone, each block by its buffer alone (and the memo's
    # lists): no view of a donated array anywhere
    if sum(map(_refs, m.k1_bufs)) != m.n1 or sum(map(_refs, m.blocks)) != m.n1:
        return None
    fr = m.free_get(args)
    if list(map(id, fr)) != m.seen_ids or not (
            same_bufs or list(map(id, map(_buf, fr))) == m.seen_bufs):
        if not _free_ok(gs, m, args):
            return None
        m.see(fr)
    if gs.failed():
        gs.check()
    t = m.last
    fresh = not m.held.free(same_bufs)
    if fresh:
        m.held = m.outs[t] = None    # (no reference into set t: release_set moves held ones)
        gs.plan.release_set(t, 0)
    launch(gs, entry, args)
    # the in-place results: the call before last's Arrays (deleted since) when only the memo
    # holds them, each taking its buffer back from the argument it was passed as
    new = m.spare
    again = sum(map(_refs, new)) == len(new) * _ONE and not any(map(getweakrefcount, new))
    if not again:
        new = [Array(None, a.aval, "cuda") for a in new]
    m.spare = m.k1_src(args)
    list(map(setattr, new, repeat("buf"), m.k1_bufs))
    gone = DeletedBuffer((name, user_frame()))
    list(map(setattr, got if m.donated is None else m.donated(args), repeat("buf"),
             repeat(gone)))
    k0 = tuple(gs._results(entry, None, t, m.k0)) if fresh else m.held.arrs
    outs = m.outs[t] = list(m.order(k0 + tuple(new) + m.consts))
    del k0
    if fresh:
        m.store0(outs)
    if again and m.exp_alt is not None:   # the same objects as two calls ago
        m.exp_ids, m.exp_alt = m.exp_alt, m.exp_ids
    else:
        m.exp_ids, m.exp_alt = list(map(id, m.f1_res(outs))), m.exp_ids
    m.deaths = DeletedBuffer.made
    return outs
