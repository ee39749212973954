"""The static memory plan of a jitted step: one arena, every buffer at an offset fixed by liveness.

A plan's second call runs with a `Recorder` pool: every allocation the step's kernels make is
logged with the event clock at which it is made and at which its last view dies. `pack` then
gives each allocation an offset in one arena (largest first, lowest offset whose address range
is free for the allocation's whole lifetime), so buffers whose lifetimes do not overlap share
memory. Later calls run with an `ArenaPool`, which hands out the k-th allocation at its planned
offset: no allocation inside a step, and the arena's size is the step's peak of intermediates.

Allocations still alive when the step ends (its results, and device error flags read after the
step) are not packed with the rest: results go to the plan's output sets (two, used in turn, so
a step may read the previous step's results while writing new ones), flags to the arena's tail.
"""
from __future__ import annotations

import math
import os
import weakref

import numpy as np

from funcgrad.compile import switches
from funcgrad.cuda import runtime
from funcgrad.cuda.arrays import Block, DeviceBuffer, Pool, Raw, c_strides

ALIGN = 256
# allocations this large take memory freed by any earlier step, ordered with it or not: the
# kernels that touch them fill the GPU by themselves, so the order the reuse adds between two
# steps costs no overlap worth having, and keeping them apart cost S1 (GPT-2 small; its plan's
# dry run in the simulator, 2026-12-02) a 6,876 MiB arena against 6,404 MiB of buffers alive
# at its peak (5,828 against 5,348 with the GELU outputs recomputed, rewrites/remat.py; with
# this exemption the arena is the live peak in both; at 128 MiB, 5,732)
ORDER_FREE_BYTES = int(os.environ.get("FUNCGRAD_MEMPLAN_ORDER_FREE_MIB", "64")) << 20
switches.register(__name__, "ORDER_FREE_BYTES")   # a change keys jit's shared cache apart


def _align(n: int) -> int:
    return -(-max(n, 1) // ALIGN) * ALIGN


class PlanMismatch(RuntimeError):
    """A step asked for other allocations than the recorded ones (the plan falls back)."""


class _RecBlock:
    """A real pool block whose death is logged on the recorder's clock."""
    __slots__ = ("__weakref__", "inner", "k", "rec")

    def __init__(self, inner, rec, k):
        self.inner, self.rec, self.k = inner, rec, k

    def typed(self, dtype):
        return self.inner.typed(dtype)

    def ptr(self) -> int:
        return self.inner.ptr()

    def __del__(self):
        try:
            self.rec.freed(self.k)
        except Exception:   # interpreter shutdown
            pass


class _FakeBlock:
    """Stands in for memory during a dry run: typed views of a small scratch buffer, so that
    kernel arguments have the right types; nothing is ever launched on it."""
    __slots__ = ("raw",)

    def __init__(self, raw):
        self.raw = raw

    def typed(self, dtype):
        return self.raw.typed(dtype)

    def ptr(self) -> int:
        return self.raw.ptr()


class Recorder(Pool):
    """Allocates from `parent` (or, with fake=True, from no memory at all: a dry run) and logs
    (size, birth, death) of every allocation in order."""

    def __init__(self, parent: Pool, fake: bool = False):
        super().__init__()
        self.parent = parent
        self.scratch = parent.alloc(256) if fake else None
        self.sizes: list[int] = []
        self.life: list[list] = []    # [birth, death or None]
        self.at: list[list] = []      # [plan step of birth, of death or None]
        self.blocks: list = []        # weak references, to find the allocations still alive
        self.clock = 0

    def alloc(self, nbytes: int):
        k = len(self.sizes)
        self.sizes.append(int(nbytes))
        self.life.append([self.clock, None])
        self.at.append([runtime._step, None])
        self.clock += 1
        inner = (_FakeBlock(self.scratch.raw) if self.scratch is not None
                 else self.parent.alloc(nbytes))
        blk = _RecBlock(inner, self, k)
        self.blocks.append(weakref.ref(blk))
        return blk

    def freed(self, k: int):
        self.life[k][1] = self.clock
        self.at[k][1] = runtime._step
        self.clock += 1


class Layout:
    """Where each recorded allocation lives: ("arena", offset) or ("out", index)."""

    def __init__(self, sizes, places, arena_bytes, out_sizes):
        self.sizes, self.places = sizes, places
        self.arena_bytes, self.out_sizes = arena_bytes, out_sizes
        self.alias = {}
        self.regions = {}   # {allocation: (donated argument, element offset)}: a run of it

    @property
    def alias(self) -> dict:
        """{allocation: donated argument it is written into}."""
        return self._alias

    @alias.setter
    def alias(self, alias: dict):
        self._alias = dict(alias)
        self.in_place = {self.places[k][1] for k in self._alias}   # result slots not needed

    def __repr__(self):
        return (f"Layout({len(self.sizes)} allocations, arena {self.arena_bytes} B, "
                f"{len(self.out_sizes)} outputs {sum(self.out_sizes)} B)")


def _ordered(first, then, anc) -> bool:
    """Allocation `then` (born at step then[0]) can take the memory of `first` (dead at step
    first[1]) without a false dependency: `first`'s last use is an ancestor of `then`'s birth."""
    d, b = first[1], then[0]
    return d is None or b is None or d == b or bool(anc[b] >> d & 1)


def pack(rec: Recorder, out_blocks, anc=None) -> Layout:
    """Offsets by liveness for every allocation of `rec`; `out_blocks` are the recorder's blocks
    the step's results live in (each gets a slot of its own in the output sets). With `anc`
    (each plan step's ancestor steps as a bit mask), memory passes only from an allocation to
    one whose step depends on its last use, so reuse adds no ordering between steps that could
    run side by side in a concurrent graph (concurrent.py); a pair of which one allocation
    has ORDER_FREE_BYTES or more is exempt (the GPU-filling kernels of real-size models)."""
    out_k = {}
    for b in out_blocks:
        if isinstance(b, _RecBlock) and b.rec is rec and b.k not in out_k:
            out_k[b.k] = len(out_k)
    end = rec.clock + 1
    lives = [(s, d if d is not None else end) for s, d in rec.life]
    order = sorted((k for k in range(len(rec.sizes)) if k not in out_k),
                   key=lambda k: (-rec.sizes[k], lives[k][0]))
    placed: list[tuple] = []   # (offset, end offset, birth, death, allocation)
    places: list = [None] * len(rec.sizes)
    top = 0
    at = rec.at if anc is not None else None

    def clash(b, d, k, pb, pd, pk):
        if pb < d and b < pd:
            return True
        if anc is None or max(rec.sizes[k], rec.sizes[pk]) >= ORDER_FREE_BYTES:
            return False
        return not (_ordered(at[pk], at[k], anc) if pd <= b else _ordered(at[k], at[pk], anc))

    for k in order:
        size = _align(rec.sizes[k])
        b, d = lives[k]
        busy = sorted((o, e) for o, e, pb, pd, pk in placed if clash(b, d, k, pb, pd, pk))
        off = 0
        for o, e in busy:
            if off + size <= o:
                break
            off = max(off, e)
        placed.append((off, off + size, b, d, k))
        places[k] = ("arena", off)
        top = max(top, off + size)
    out_sizes = [0] * len(out_k)
    for k, j in out_k.items():
        places[k] = ("out", j)
        out_sizes[j] = _align(rec.sizes[k])
    return Layout(list(rec.sizes), places, top, out_sizes)


class PlanBlock(Block):
    """A view of plan-owned memory (the arena or an output set).

    Output blocks know their plan and set; `detach` moves a result the user still holds to
    memory of its own before the plan writes that set again."""
    __slots__ = ("keep", "owner", "set_id")

    def __init__(self, raw, owner=None, set_id=None):
        self.raw, self.pool, self.keep, self.owner, self.set_id = raw, None, None, owner, set_id

    def detach(self, pool: Pool, copy):
        """Copy this block's bytes to a fresh pool block and point the block there."""
        new = pool.alloc(self.raw.nbytes)
        copy(new.raw, self.raw)
        self.raw, self.keep, self.owner, self.set_id = new.raw, new, None, None

    def __del__(self):
        pass   # the plan owns its memory; a detached block's goes back to the pool with `keep`


def sub_raw(raw: Raw, offset: int, nbytes: int) -> Raw:
    """A Raw over the aligned bytes [offset, offset + nbytes) of `raw` (a device-array slice)."""
    n = _align(nbytes)
    return Raw(raw.dev[offset:offset + n], n)


class ArenaPool(Pool):
    """Hands out the recorded allocations at their planned places, in recorded order."""

    def __init__(self, layout: Layout, arena: list, outs: list, owner=None, set_id=None,
                 donated=None):
        super().__init__()
        self.layout, self.arena, self.outs = layout, arena, outs
        self.owner, self.set_id = owner, set_id
        self.k = 0
        self.out_blocks: dict[int, PlanBlock] = {}
        self.donated = donated or {}   # argument index -> its buffer, written in place

    def empty(self, shape, dtype):
        i, off = self.layout.alias.get(self.k), 0
        if i is None and self.layout.regions:     # a run of a donated argument (inplace.py)
            i, off = self.layout.regions.get(self.k, (None, 0))
        if i is not None and i in self.donated:   # a result updates a donated argument
            nbytes = math.prod(shape) * np.dtype(dtype).itemsize
            if self.layout.sizes[self.k] != nbytes:
                raise PlanMismatch(f"allocation {self.k} asked {nbytes} bytes, the plan "
                                   f"recorded {self.layout.sizes[self.k]}")
            self.k += 1
            b = self.donated[i]
            return DeviceBuffer(b.block, tuple(shape), c_strides(shape), b.offset + off, dtype)
        return super().empty(shape, dtype)

    def alloc(self, nbytes: int):
        k = self.k
        lay = self.layout
        if k >= len(lay.sizes) or lay.sizes[k] != nbytes:
            want = lay.sizes[k] if k < len(lay.sizes) else "none"
            raise PlanMismatch(f"allocation {k} asked {nbytes} bytes, the plan recorded {want}")
        self.k += 1
        where, i = lay.places[k]
        if runtime._writes is not None:    # a captured step's allocations (concurrent.py)
            raw = self.arena[k] if where == "arena" else self.outs[i]
            runtime.note_write(raw.ptr(), raw.nbytes)
        if where == "arena":
            return PlanBlock(self.arena[k])
        blk = PlanBlock(self.outs[i], self.owner, self.set_id)
        self.out_blocks[i] = blk
        return blk

    def release(self, raw):
        pass
