"""A/B of a captured graph's two cuBLAS workspace policies, timed on its first replays.

blas.py's "ordered" policy keeps large GEMMs in order, "spread" lets them overlap; which one
runs a step faster depends on the step (blas.LANES says what was measured). graphs.GraphSet
captures a graph with two or more large GEMMs under both, and the calls after alternate the
two graphs, each launch bracketed by CUDA events on the launch stream. `Trial` is the
bookkeeping (which graph next, which launches are timed, when to decide, the faster median);
it is plain Python so that it can be tested without a GPU. `Timing` adds the events; it reads
them once, after the last timed launch, with the one host wait of the whole A/B. `start` and
`decide` are the GraphSet's side: capture the second graph, keep the winner.
"""
from __future__ import annotations

import contextlib
import statistics

import numpy as np

from funcgrad.cuda import blas, runtime

SAMPLES = 3   # timed launches per variant
WARMUP = 1    # untimed first launches per variant (its first replay uploads the graph)
MARGIN = 0.01  # "spread" must be 1% faster (W1 ten steps a call: 3.740 / 3.752 ms on an H100;
#               W2 on H200s: 1.5-2.1% faster in four runs, samples within 0.3%)
# what a captured graph is, in a graphs._Entry, as opposed to its key's staging and templates
GRAPH_FIELDS = ("graph", "exec", "handle", "slot", "row", "deferred", "keep", "large")


class Trial:
    """Which variant to launch next and which one wins, over alternating launches.

    Variants launch in turn (0, 1, 0, 1, ...); the first `warmup` launches of each are not
    timed, the next `samples` are. Once every variant has had its timed launches, `due()` is
    True; after their times are `add`ed, `decide()` names the variant with the smaller median
    (a later variant must be MARGIN faster: a near-tie keeps the first, "ordered").

    Example:
        >>> t = Trial(("ordered", "spread"), samples=1, warmup=1)
        >>> [t.next() for _ in range(4)]
        [(0, False), (1, False), (0, True), (1, True)]
        >>> t.due(), t.add(0, 2.0), t.add(1, 1.5), t.decide()
        (True, None, None, 'spread')
    """

    def __init__(self, names=("ordered", "spread"), samples: int = SAMPLES,
                 warmup: int = WARMUP):
        self.names = tuple(names)
        self.samples, self.warmup = samples, warmup
        self.launches = [0] * len(self.names)
        self.times: list[list[float]] = [[] for _ in self.names]
        self._turn = 0

    def next(self) -> tuple[int, bool]:
        """(the variant to launch now, whether to time this launch)."""
        i = self._turn
        self._turn = (i + 1) % len(self.names)
        self.launches[i] += 1
        n = self.launches[i] - self.warmup
        return i, 0 < n <= self.samples

    def due(self) -> bool:
        """Every variant has had its warm-up and timed launches: time to read the events."""
        return all(n >= self.warmup + self.samples for n in self.launches)

    def add(self, i: int, ms: float) -> None:
        """Note that a timed launch of variant i took `ms` milliseconds."""
        self.times[i].append(ms)

    def medians(self) -> dict:
        """Median milliseconds per variant name (None where there are no samples)."""
        return {n: statistics.median(t) if t else None for n, t in zip(self.names, self.times)}

    def decide(self) -> str | None:
        """The faster variant's name once each has `samples` times, else None."""
        if any(len(t) < self.samples for t in self.times):
            return None
        med = [statistics.median(t) for t in self.times]
        # a later variant must win by MARGIN: near-ties (noise) keep the first, "ordered"
        best = 0
        for i in range(1, len(med)):
            if med[i] < med[best] * (1 - MARGIN):
                best = i
        return self.names[best]


class Timing:
    """A Trial between graph execs `handles`, timed with CUDA events on the legacy stream.

    `cb` is cuda.bindings.driver (a stand-in in tests). Events are made up front (two per
    timed launch) and destroyed by `finish` or `close`.
    """

    def __init__(self, handles, cb, trial: Trial | None = None):
        self.handles = list(handles)
        self.trial = trial or Trial()
        self.cb = cb
        n = len(self.handles) * self.trial.samples
        self.events = [_ok(cb.cuEventCreate(0)) for _ in range(2 * n)]
        self.timed: list = []       # (variant, start event, end event) per timed launch

    def launch(self, launch) -> int:
        """Launch the next variant through launch(exec_handle, stream) -> CUresult int."""
        i, timed = self.trial.next()
        if not timed:
            return launch(self.handles[i], 0)
        e0, e1 = self.events[2 * len(self.timed)], self.events[2 * len(self.timed) + 1]
        _ok(self.cb.cuEventRecord(e0, 0))
        err = launch(self.handles[i], 0)
        _ok(self.cb.cuEventRecord(e1, 0))
        self.timed.append((i, e0, e1))
        return err

    def due(self) -> bool:
        """Every variant had its timed launches: call finish() now."""
        return self.trial.due()

    def finish(self) -> str:
        """Wait for the last timed launch, add every launch's time, and name the winner."""
        cb = self.cb
        _ok(cb.cuEventSynchronize(self.timed[-1][2]))
        for i, e0, e1 in self.timed:
            self.trial.add(i, float(_ok(cb.cuEventElapsedTime(e0, e1))))
        self.close()
        return self.trial.decide() or self.trial.names[0]

    def close(self) -> None:
        """Destroy the events (an evicted graph, or the A/B decided)."""
        with contextlib.suppress(Exception):   # interpreter shutdown
            for e in self.events:
                self.cb.cuEventDestroy(e)
        self.events = []


def start(gs, e, key, ins, s) -> None:
    """While GraphSet gs's policy is undecided and e (just captured "ordered" for `key`) has
    GEMMs the policies would place differently: capture the key again under "spread" into
    e.alt (same arena, result set and inputs `ins`, so the same addresses and results) and
    time the two on the next calls (e.ab). Otherwise decide "ordered" now."""
    info = gs.gemm_ab
    info["large"] = e.large
    if not blas.policies_differ(e.large):
        gs.gemm_policy = "ordered"
        info["why"] = f"{e.large} large GEMM(s), {blas.LANES} lane(s): nothing to choose"
        return
    if not gs.free_slots:
        _, old = gs.entries.popitem(last=False)
        gs._destroy(old)
    try:
        alt, outs, pool = gs._record(key, ins, s, "spread")
    except Exception as ex:  # noqa: BLE001 - keep the graph captured first
        gs.gemm_policy, info["why"] = "ordered", f"second capture failed: {ex!r}"
        return
    if _fixed(gs._templates(outs, ins, pool, s)) != _fixed(e.templates):
        gs._destroy(alt)    # both captures write the same addresses: never expected
        gs.gemm_policy, info["why"] = "ordered", "the two captures' results differ"
        return
    try:
        e.ab = Timing((e.handle, alt.handle), gs._cb)
    except Exception as ex:  # noqa: BLE001 - no events: keep the graph captured first
        gs._destroy(alt)
        gs.gemm_policy, info["why"] = "ordered", f"no CUDA events: {ex!r}"
        return
    e.alt = alt


def decide(gs, ab: Timing) -> str:
    """After `ab`'s last timed launch: the faster policy becomes gs's (later captures take only
    it), and every entry of gs still timing two graphs keeps that policy's and frees the other
    (ab.finish() waited for the last launch on the legacy stream, so none is running).
    Returns the policy."""
    policy = ab.finish()
    gs.gemm_policy = policy
    gs.gemm_ab.update(policy=policy, ms=ab.trial.medians(),
                      samples=dict(zip(ab.trial.names, ab.trial.times)))
    sticky = gs.sticky
    for e in gs.entries.values():
        if e.ab is None:
            continue
        e.ab.close()
        lose, e.ab, e.alt = e.alt, None, None
        if policy != ab.trial.names[0]:     # the second capture won: swap it in
            for f in GRAPH_FIELDS:
                a, b = getattr(e, f), getattr(lose, f)
                setattr(e, f, b)
                setattr(lose, f, a)
        n = len(e.deferred)
        if n and len(lose.deferred) == n:   # device checks that failed in the loser's replays
            w, lo = sticky[e.row:e.row + n], sticky[lose.row:lose.row + n]
            w[:, 0] += lo[:, 0]
            w[:, 1] = np.minimum(w[:, 1], lo[:, 1])
            lo[:, 0], lo[:, 1] = 0, np.iinfo(np.int64).max
        gs._destroy(lose)
    return policy


def _fixed(templates) -> list:
    """The result templates that name a result slot or an argument (constants left out)."""
    return [t for t in templates if t[0] != 2]


def _ok(res):
    return runtime.cu_ok(res, "CUDA event call")
