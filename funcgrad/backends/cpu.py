"""The CPU backend: runs each primitive's numpy impl (the reference semantics)."""
from __future__ import annotations

import numpy as np

from ..core import FuncgradError, user_frame_src
from ..prims import IndexOutOfRange


class CpuBackend:
    """Buffers are read-only numpy arrays; every primitive runs its numpy impl."""
    name = "cpu"

    def from_numpy(self, a: np.ndarray) -> np.ndarray:
        out = np.array(a, copy=True)
        out.flags.writeable = False
        return out

    def from_value(self, a: np.ndarray) -> np.ndarray:
        return a

    def to_numpy(self, buf: np.ndarray) -> np.ndarray:
        return buf

    def apply(self, prim, bufs, params, aval):
        try:
            with np.errstate(all="ignore"):
                out = prim.impl(*bufs, **params)
        except IndexOutOfRange as e:
            raise IndexError(f"{e}\n  at {user_frame_src()}") from None
        except ValueError as e:
            raise FuncgradError(f"{e}\n  at {user_frame_src()}") from None
        out = np.asarray(out)
        if out.dtype != aval.dtype:
            out = out.astype(aval.dtype)
        if out.shape != aval.shape:
            raise AssertionError(f"{prim.name}: impl returned {out.shape}, rule says {aval}")
        if out.flags.writeable:
            out.flags.writeable = False
        return out

    def synchronize(self):
        pass


class CpuPlan:
    """A jitted expression as a flat list of numpy calls over numbered slots.

    Each intermediate slot is released after its last use, so peak memory follows the plan.
    """

    def __init__(self, expr, consts):
        from ..core import Lit
        slot = {}
        self.init = []  # (slot, value) for constants and literals
        n = 0
        for v, c in zip(expr.in_binders[:expr.n_consts], consts):
            slot[v] = n
            self.init.append((n, np.asarray(c)))
            n += 1
        self.arg_slots = []
        for v in expr.in_binders[expr.n_consts:]:
            slot[v] = n
            self.arg_slots.append(n)
            n += 1
        last = {}
        for i, e in enumerate(expr.eqns):
            for x in e.inputs:
                if not isinstance(x, Lit):
                    last[x] = i
        keep = {o for o in expr.outs if not isinstance(o, Lit)}
        lazy = _lazy_broadcasts(expr, keep)
        self.steps = []
        for i, e in enumerate(expr.eqns):
            ins = []
            for x in e.inputs:
                if isinstance(x, Lit):
                    self.init.append((n, x.val))
                    ins.append(n)
                    n += 1
                else:
                    ins.append(slot[x])
            slot[e.out] = n
            n += 1
            free = tuple(slot[x] for x in set(e.inputs) if not isinstance(x, Lit)
                         and last.get(x) == i and x not in keep
                         and x not in expr.in_binders)
            fn, params = e.prim.impl, e.params
            if e.out in lazy:  # leave the broadcast to numpy inside the elementwise consumers
                fn, params = _expand_only(e.inputs[0].aval.shape, **e.params), {}
            elif any(x in lazy for x in e.inputs):
                fn = _full_shape(fn, e.out.aval.shape)
            self.steps.append((fn, tuple(ins), params, slot[e.out], free, e))
        self.out_slots = [slot[o] for o in expr.outs]
        self.out_avals = [o.aval for o in expr.outs]
        self.n = n

    def __call__(self, args):
        from ..core import Array
        vals = [None] * self.n
        for s, v in self.init:
            vals[s] = v
        for s, a in zip(self.arg_slots, args):
            vals[s] = a.buf
        with np.errstate(all="ignore"):
            for fn, ins, params, out, free, e in self.steps:
                try:
                    vals[out] = fn(*[vals[i] for i in ins], **params)
                except (IndexOutOfRange, ValueError) as err:
                    kind = IndexError if isinstance(err, IndexOutOfRange) else FuncgradError
                    raise kind(f"{err}\n  at {e.src}") from None
                for f in free:
                    vals[f] = None
        res = []
        for s, aval in zip(self.out_slots, self.out_avals):
            out = np.asarray(vals[s])
            if out.dtype != aval.dtype:
                out = out.astype(aval.dtype)
            res.append(Array(out, aval, "cpu"))
        return res


def _lazy_broadcasts(expr, keep):
    """broadcast_in_dim results read only by elementwise equations (numpy broadcasts itself)."""
    from ..prims import broadcast_in_dim_p
    users = {}
    for e in expr.eqns:
        for x in e.inputs:
            users.setdefault(x, []).append(e)
    return {e.out for e in expr.eqns if e.prim is broadcast_in_dim_p and e.out not in keep
            and all(u.prim.kind == "elementwise" for u in users.get(e.out, ()))}


def _expand_only(in_shape, *, shape, broadcast_dimensions):
    """x reshaped so that numpy broadcasting maps its axes to broadcast_dimensions."""
    if not in_shape:
        return lambda x: x
    dims = list(broadcast_dimensions)
    target = tuple(in_shape[dims.index(d)] if d in dims else 1 for d in range(len(shape)))
    return lambda x: x.reshape(target)


def _full_shape(fn, shape):
    def run(*args, **params):
        out = fn(*args, **params)
        return out if np.shape(out) == shape else np.broadcast_to(out, shape)
    return run


def _compile(self, expr, consts, donate=()):
    return CpuPlan(expr, consts)


CpuBackend.compile = _compile
