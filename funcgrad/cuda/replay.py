"""The loop memo of a GraphSet: a training loop's steady state replays with no per-leaf work.

After a replayed call the memo predicts the next one: arguments that are this call's results
(parameters and optimizer state fed back) must come back as the very same objects, the other
arguments (a batch) are checked one by one as before. When the prediction holds, the call
skips the signature, the argument keys and the output-set choice: it launches the graph
learned for that output set. Its results are the Arrays the call before last returned for the
same set (their memory is that set's) when nothing but the memo holds them, nor any view of
their memory (reference counts, no weak references, no deleted buffer); otherwise the set is
released as usual (held results are moved out) and fresh Arrays are made. Any other call goes
the full way (graphs.GraphSet.__call__), which drops the memo's references into the set it
writes and learns the memo again.

Per call the memo makes two C-level passes before the launch: the arguments against the list
of the very objects expected (`any(map(is_not, ...))`: no ids to make and compare), and the
reference counts of the results it would return again (Held.free). The expected list holds
the results fed back, so it belongs to those results' Held, whose reference-count base counts
it: it lives exactly as long as that base is compared. jit calls the memo first thing
(jit.py's front path) and inlines nothing else. W1 on an H200 host (2026-11-25,
benchmarks/host_split.py, five processes each of the old and new code alternating in one
call, fastest of each): 10.4 -> 8.6 µs before the launch, 3.4 -> 2.7 µs after it, 4.2 µs the
launch itself; that host also ran some processes of both about 1.75x slower throughout. On the
dev VM's stand-in (`host_profile.py --standin W1`): 5.65 / 2.45 -> 4.2 / 1.97 µs.

Plans whose results alias an argument keep the full path; plans that donate arguments have a
memo of their own (replay_inplace.py).
"""
from __future__ import annotations

import sys
from operator import attrgetter, is_not, itemgetter
from weakref import getweakrefcount

from funcgrad.core import Array, DeletedBuffer
from funcgrad.cuda import memplan
from funcgrad.cuda.arrays import DeviceBuffer

_buf = attrgetter("buf")
_refs = sys.getrefcount
_UNSEEN = object()   # stands for an argument not seen yet in a memo's expected arguments


def _picker(positions):
    """args -> the tuple of args at `positions` (itemgetter returns a bare item for one)."""
    if len(positions) > 1:
        return itemgetter(*positions)
    return (lambda a, i=positions[0]: (a[i],)) if positions else (lambda a: ())


def _owned(blk, plan) -> bool:
    """blk is memory of one of plan's output sets."""
    return type(blk) is memplan.PlanBlock and blk.owner is plan


class Held:
    """Result Arrays a memo may return again, and what tells that only the memo holds them:
    the Arrays outs[j] for j in `which`, their buffers and blocks with the sum of their
    reference counts when taken (so made here, with no temporary list holding them), and
    the buffers of outs[j] for j in `chk` (a deleted result has another). `keep`: a list
    that holds some of the Arrays for as long as this Held lives (Memo's expected arguments,
    counted in the base)."""
    __slots__ = ("arrs", "base", "chk", "chk_ids", "keep", "objs")

    def __init__(self, outs, which, chk, keep=None):
        self.keep = keep
        self.arrs = tuple(outs[j] for j in which)
        bufs = tuple(map(_buf, self.arrs))
        self.objs = self.arrs + bufs + tuple({id(b.block): b.block for b in bufs}.values())
        self.chk = tuple(outs[j] for j in chk)
        self.chk_ids = list(map(id, map(_buf, self.chk)))
        del bufs
        self.base = sum(map(_refs, self.objs))   # the memo's own references only

    def free(self, same_bufs: bool) -> bool:
        """Held by the memo alone (no name, view, weak reference or deletion since they were
        returned): they can be returned again. same_bufs: no Array was deleted since the memo
        last looked (DeletedBuffer.made unchanged)."""
        return ((same_bufs or list(map(id, map(_buf, self.chk))) == self.chk_ids)
                and sum(map(_refs, self.objs)) == self.base
                and not any(map(getweakrefcount, self.arrs)))


def launch(gs, entry, args):
    """Launch entry's graph of GraphSet gs for `args` (the ones it stages copied in first)."""
    if entry.staged:
        gs._stage(entry, lambda i: args[i].buf)
    err = gs._launch(entry.handle, 0)
    if err:
        gs.memo = None
        raise RuntimeError(f"cuGraphLaunch failed (CUresult {err})")


class Memo:
    """What the next calls of one GraphSet are expected to be, per output set t (0, 1).

    expect[t]: the very arguments a call writing set t must pass (a list, compared by
    identity): the other set's results where they are fed back, the batch seen last elsewhere
    (_UNSEEN before one is). The list holds results of the other set, so that set's Held
    keeps it (its reference-count base counts the list's references) and it goes with it."""
    __slots__ = ("all_bufs", "deaths", "entry", "expect", "fed_bufs", "fed_get", "fed_pos",
                 "feed", "free_get", "free_pos", "held", "inplace", "key", "last", "n", "nxt",
                 "outs", "seen", "seen_bufs")

    def __init__(self, n, feed, free_pos):
        self.n, self.feed, self.free_pos = n, feed, free_pos
        self.inplace = frozenset()   # no result written into an argument (replay_inplace's)
        self.fed_pos = [i for i, j in enumerate(feed) if j >= 0]
        self.fed_get = _picker(self.fed_pos) if self.fed_pos else None
        two = (None, None)
        self.entry, self.key, self.outs, self.held = [*two], [*two], [*two], [*two]
        self.expect, self.fed_bufs = [*two], [*two]
        # every argument's buffer's id, per output set: compared when some Array was deleted
        # since the last call (the Arrays in `expect` keep their buffers alive)
        self.all_bufs = [*two]
        self.free_get = _picker([i for i, _ in free_pos])
        self.seen = self.seen_bufs = None
        self.last = self.nxt = 0
        self.deaths = -1   # DeletedBuffer.made when the buffers were last checked

    def replay(self, gs, args, name=None):
        return replay(gs, args)

    def unhold(self):
        """(Nothing to let go of before a full call: plans that donate have InPlaceMemo.)"""

    def see(self, args):
        """The other arguments of a call that passed their checks: the next call with the very
        same ones needs none."""
        got = self.free_get(args)
        self.seen = (got, tuple(map(_buf, got)))
        self.seen_bufs = list(map(id, self.seen[1]))
        self._compose(0)
        self._compose(1)

    def _compose(self, u):
        """Put the batch seen last into expect[u] (its results stay) and list every
        argument's buffer id."""
        self.all_bufs[u] = None
        exp = self.expect[u]
        if exp is None or self.seen is None:
            return
        bufs = [0] * self.n
        for (i, _), a, b in zip(self.free_pos, self.seen[0], self.seen_bufs):
            exp[i], bufs[i] = a, b
        for i, b in zip(self.fed_pos, self.fed_bufs[u]):
            bufs[i] = b
        self.all_bufs[u] = bufs

    def store(self, t, outs, plan):
        """Keep set t's result Arrays `outs` (just made, held by nothing else yet) and what
        the call reading them (writing the other set) must pass."""
        self.outs[t] = outs
        exp = self._expect(1 - t if self.fed_get is not None else 0, outs)
        self.held[t] = Held(outs, [j for j, o in enumerate(outs) if _in_set(o, plan)],
                            range(len(outs)), exp)

    def _expect(self, u, outs, exp=None) -> list:
        """The arguments a call writing set u must pass, `outs` (the other set's results)
        where they are fed back; returns the list (expect[u]) for the Held of `outs`."""
        if self.fed_get is None:
            self.fed_bufs[u] = []
            fed = ()
        else:
            fed = self.fed_get([outs[j] if j >= 0 else None for j in self.feed])
            self.fed_bufs[u] = list(map(id, map(_buf, fed)))
        if exp is None:
            exp = [_UNSEEN] * self.n
            for i, o in zip(self.fed_pos, fed):
                exp[i] = o
        else:   # (its fed positions hold these results already)
            for i, _ in self.free_pos:
                exp[i] = _UNSEEN
        del fed
        self.expect[u] = exp
        self._compose(u)
        return exp

    def drop(self, t):
        """Forget set t's results and the expectations naming them."""
        u = 1 - t if self.fed_get is not None else 0
        self.outs[t] = self.held[t] = None
        self.expect[u] = self.fed_bufs[u] = self.all_bufs[u] = None



def _in_set(o, plan) -> bool:
    """o is a result in one of plan's output sets (not a constant, not an argument, not
    deleted)."""
    b = o.buf
    return type(b) is not DeletedBuffer and _owned(b.block, plan)


def feed_of(memo, args, plan) -> tuple | None:
    """For each argument, which result of the memo's last call it is (-1: none)."""
    if args is None:
        return None
    if memo is None or memo.outs[memo.last] is None:
        return tuple(-1 for _ in args)
    outs = memo.outs[memo.last]
    inplace = memo.inplace   # results written into an argument (donated plans)
    pos = {id(o): j for j, o in enumerate(outs) if j in inplace or _in_set(o, plan)}
    feed = tuple(pos.get(id(a), -1) for a in args)
    return feed if all(j < 0 or outs[j] is a for a, j in zip(args, feed)) else None


def carry(memo, feed, s):
    """The memo's last results, kept for a call writing set s that reads them (fed back):
    (outs, Held, entry, key, the memo's feed)."""
    t = 1 - s
    if (memo is None or feed is None or memo.last != t or memo.held[t] is None
            or all(j < 0 for j in feed)):
        return None
    return memo.outs[t], memo.held[t], memo.entry[t], memo.key[t], memo.feed


def learn(gs, args, bufs, feed, s, key, entry, outs, kept) -> Memo:
    """The memo after a full call of GraphSet gs (writing set s with `key` and `entry`); one
    that only remembers the results (to learn from the next call) when this plan or call
    cannot take the short path."""
    free_pos = _free_positions(gs.plan, args, bufs, feed, entry)
    if free_pos is None:
        m = Memo(-1, (), ())
        m.outs[s], m.last = outs, s
        return m
    m = Memo(len(args), feed, free_pos)
    m.entry[s], m.key[s] = entry, key
    m.store(s, outs, gs.plan)
    m.last, m.nxt = s, (1 - s if m.fed_get is not None else 0)
    if m.fed_get is None:
        return m
    u = 1 - s
    comps = list(key[1])
    for i, j in enumerate(feed):
        if j >= 0:     # read in place from set s
            b = outs[j].buf
            comps[i] = (id(b.block.raw), b.offset)
    m.key[u] = (u, tuple(comps))
    m.entry[u] = gs.entries.get(m.key[u])
    if kept is not None and kept[3] == m.key[u]:
        m.outs[u], m.held[u] = kept[:2]
        # the Held's expected arguments serve when the feed is the same (another list would
        # hold its Arrays once more: they would not be returned again)
        m._expect(s, m.outs[u], m.held[u].keep if kept[4] == feed else None)
    return m


def _free_positions(plan, args, bufs, feed, entry):
    """(position, aval) of the arguments not fed back, or None if the short path cannot
    serve this plan and call (donation, results aliasing arguments, older results passed)."""
    if (feed is None or plan.donate or any(t[0] == 1 for t in entry.templates)
            or len(args) != len(bufs)):
        return None
    free_pos = []
    for i, (a, b, j) in enumerate(zip(args, bufs, feed)):
        if type(a) is not Array or a.buf is not b:
            return None
        if j < 0:
            if _owned(b.block, plan):
                return None   # an older result of this plan: the full path stages it
            free_pos.append((i, a.aval))
    return tuple(free_pos)


def _free_ok(gs, m, args) -> bool:
    """The arguments not fed back (a new batch each step) pass the full path's checks and
    read the graph's addresses (in place, or copied into staging)."""
    plan, last, varies = gs.plan, gs.last, gs.varies
    for i, aval in m.free_pos:
        a = args[i]
        if type(a) is not Array or a.device != "cuda" or a.aval != aval:
            return False
        b = a.buf
        if type(b) is not DeviceBuffer or not b.is_contiguous():
            return False
        blk = b.block
        if _owned(blk, plan):
            return False
        if not varies[i] and (blk.ptr(), b.offset) != last[i]:
            return False     # moved: the full path copies it in from now on
    return True


def replay(gs, args) -> list | None:
    """The result Arrays of a call that matches gs's memo (None: take the full path)."""
    m = gs.memo
    if m is None or len(args) != m.n:
        return None
    t = m.nxt
    exp, entry = m.expect[t], m.entry[t]
    if exp is None or entry is None or entry.ab is not None:
        return None
    # the very objects expected (results fed back, the batch seen last), with their buffers
    # (checked again only when some Array was deleted since)
    deaths = DeletedBuffer.made
    same_bufs = deaths == m.deaths
    if any(map(is_not, args, exp)) or not (
            same_bufs or list(map(id, map(_buf, args))) == m.all_bufs[t]):
        if m.fed_get is not None:
            fed = m.fed_get(args)
            if (any(map(is_not, fed, m.fed_get(exp)))
                    or list(map(id, map(_buf, fed))) != m.fed_bufs[t]):
                return None
            del fed
        if not _free_ok(gs, m, args):
            return None
        m.see(args)
    if gs.failed():
        gs.check()
    held = m.held[t]
    fresh = held is None or not held.free(same_bufs)
    del held
    if fresh:
        m.drop(t)
        gs.plan.release_set(t, 0)   # (the memo keeps no reference into set t: held ones move)
    if entry.staged:
        gs._stage(entry, lambda i: args[i].buf)
    err = gs._launch(entry.handle, 0)   # (launch() inlined: one call less per step)
    if err:
        gs.memo = None
        raise RuntimeError(f"cuGraphLaunch failed (CUresult {err})")
    outs = m.outs[t]
    if fresh:
        outs = gs._results(entry, None, t)
        m.store(t, outs, gs.plan)
    m.last, m.nxt = t, (1 - t if m.fed_get is not None else 0)
    m.deaths = deaths
    return outs
