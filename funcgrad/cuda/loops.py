"""CUDA lowering of the loop primitives (funcgrad/loops.py): bodies run per iteration on the GPU.

A loop's optimized body runs through a `_Body`: fused elementwise clusters (fusion.py) and the
lowering table, like a jit Plan's steps, built once per loop and called once per iteration
with the carry's buffers (x slices are views, each y is copied into its row of the stacked
result). A scan launches only kernels, so a plan containing it can still be captured as a CUDA
graph (one node per kernel per step). `while` reads its predicate back on the host every
iteration and `cond` reads its index, so they synchronize with the device and cannot be
captured: under capture they raise, and the plan launches its steps one by one instead.
"""
from __future__ import annotations

import numpy as np

from ..core import Array, Lit
from ..loops import ExecRec, loop_out_p, loop_run_effect_p, loop_run_p
from . import arrays, fusion, runtime
from . import elementwise as ew
from .arrays import DeviceBuffer


class _Body:
    """One optimized body expression, runnable on device buffers."""

    def __init__(self, expr, consts, table):
        self.expr, self.table = expr, table
        self.consts = [c.buf if isinstance(c, Array) and c.device == "cuda"
                       else arrays.from_host(np.asarray(c)) for c in consts]
        self.steps = fusion.plan_steps(expr)
        self.kernels: dict = {}
        last = {}
        for i, (kind, s) in enumerate(self.steps):
            reads = s.inputs if kind == "eqn" else fusion.external_inputs(s)
            for x in reads:
                if not isinstance(x, Lit):
                    last[x] = i
        keep = set(expr.in_binders) | {o for o in expr.outs if not isinstance(o, Lit)}
        self.free_after = [[] for _ in self.steps]
        for v, i in last.items():
            if v not in keep:
                self.free_after[i].append(v)

    def __call__(self, args: list) -> list:
        env = dict(zip(self.expr.in_binders, self.consts + list(args)))

        def read(x):
            return _lit(x.val) if isinstance(x, Lit) else env[x]

        for i, (kind, s) in enumerate(self.steps):
            if kind == "fused":
                self._fused(s, env)
            elif s.prim.call_impl is not None:   # host calls in the body (debug.print)
                env[s.out] = arrays.from_host(runtime.host_call(s, read))
            else:
                fn = self.table.get(s.prim)
                if fn is None:
                    raise NotImplementedError(f"the CUDA backend has no lowering for primitive "
                                              f"{s.prim.name!r} (in a loop body)")
                env[s.out] = fn([read(x) for x in s.inputs], s.params, s.out.aval)
            for v in self.free_after[i]:
                env.pop(v, None)
        return [read(o) for o in self.expr.outs]

    def _fused(self, c, env):
        fusion.run_cluster(self.kernels, c, env)


def _lit(val) -> DeviceBuffer:
    a = np.asarray(val)
    c = arrays.const(a.reshape(-1)[0], a.dtype)
    return c.view(a.shape, (0,) * a.ndim, c.offset)


def _bodies(ex: ExecRec, table) -> list:
    hit = ex.device_cache.get("cuda")
    if hit is None:
        hit = ex.device_cache["cuda"] = [_Body(e, c, table) for e, c in ex.bodies]
    return hit


def _row(buf: DeviceBuffer, i: int) -> DeviceBuffer:
    return buf.view(buf.shape[1:], buf.strides[1:], buf.offset + i * buf.strides[0])


def _host_scalar(buf: DeviceBuffer, what: str):
    """A device scalar read back on the host (a synchronization; not capturable)."""
    if runtime._stream is not None:
        raise RuntimeError(f"{what} is read back on the host each iteration, which a CUDA graph "
                           "cannot capture; the plan launches its steps one by one instead")
    return arrays.to_host(ew.contiguous(buf)).reshape(())


def _scan(ex, bufs, table):
    (body,) = _bodies(ex, table)
    nc, nk, n = ex.n_consts, ex.n_carry, ex.length
    consts, carry, xs = list(bufs[:nc]), list(bufs[nc:nc + nk]), bufs[nc + nk:]
    pool = arrays.pool()
    ys = [pool.empty(a.shape, a.dtype) for a in ex.out_avals[nk:]]
    for t in range(n):
        i = n - 1 - t if ex.reverse else t
        outs = body(consts + carry + [_row(x, i) for x in xs])
        carry = outs[:nk]
        for y, o in zip(ys, outs[nk:]):
            if y.size:
                ew.run("copy", [o], y.dtype, out=_row(y, i))
    return carry + ys


def _while(ex, bufs, table):
    """The predicate is copied to the host and tested there once per iteration."""
    cond, body = _bodies(ex, table)
    ncc, nbc = ex.n_cconsts, ex.n_bconsts
    cconsts, bconsts = list(bufs[:ncc]), list(bufs[ncc:ncc + nbc])
    carry = list(bufs[ncc + nbc:])
    while bool(_host_scalar(cond(cconsts + carry)[0], "a while_loop's condition")):
        carry = body(bconsts + carry)
    return carry


def _cond(ex, bufs, table):
    """The branch index is copied to the host, which runs that branch's body."""
    k = int(np.clip(_host_scalar(bufs[0], "a cond's branch index"), 0, len(ex.bodies) - 1))
    return _bodies(ex, table)[k](list(bufs[1:]))


_RUN = {"scan": _scan, "while": _while, "cond": _cond}


def register(table: dict) -> None:
    """Add the loop primitives' lowerings to the lowering table (bodies use the same table)."""
    def run(bufs, params, aval):
        ex, index = params["rec"], params["index"]
        results = _RUN[ex.kind](ex, list(bufs), table)
        r = results[index]
        lead = r.view(r.shape, r.strides, r.offset)   # a fresh object: the stash key
        ex.put(lead, results)
        return lead

    def out(bufs, params, aval):
        return params["rec"].get(bufs[0], params["index"])

    table[loop_run_p] = run
    table[loop_run_effect_p] = run
    table[loop_out_p] = out
