"""CUDA lowering of the loop primitives (funcgrad/prims/loops.py): device-side loops in CUDA graphs.

A loop's optimized body runs through a `_Body`: fused elementwise clusters (fusion.py) and the
lowering table, like a jit Plan's steps. The loop's state (the carry, a scan's stacked ys and
row buffers, an iteration counter on the device) lives in buffers of the step; each iteration
copies its x rows in (picked by the device counter), runs the body on a pool of its own,
copies y rows out and the new carry over the old. When a plan is captured as a CUDA graph on a
real GPU, the loop is one conditional node (condgraph.py): a scan or while_loop a WHILE node
whose body is one iteration and decides on the device whether to run again; a cond a SWITCH
node. The graph's size is then independent of the trip count and nothing waits on the host.
Outside a plan's capture on a real GPU (eager calls, a plan's first calls) a while_loop or a
scan of 8 or more steps is captured into a small graph of its own, launched once
(condgraph.in_own_graph). Elsewhere (short scans, cond, the simulator) the host runs the
iterations: `while` and `cond` read their predicate or index back. A body with host callbacks
(debug.print) cannot be captured: its iterations run from the host.
"""
from __future__ import annotations

import numpy as np

from funcgrad.compile import switches
from funcgrad.core import Array, Lit
from funcgrad.cuda import arrays, fusion, inplace, runtime
from funcgrad.cuda import condgraph as cg
from funcgrad.cuda import elementwise as ew
from funcgrad.cuda.arrays import DeviceBuffer
from funcgrad.cuda.gather import same_memory
from funcgrad.prims.loops import ExecRec, loop_out_p, loop_run_effect_p, loop_run_p


class _Body:
    """One optimized body expression, runnable on device buffers.

    `carry` = (first, count): arguments first .. first + count - 1 (after the body's own
    constants) are the loop's carry buffers and outputs 0 .. count - 1 its new values; an
    update primitive whose result is a new carry value written over its own carry buffer
    (inplace.py) then writes into that buffer (`into`: step index -> lowering), and the
    iteration's copy of that value back over the carry is skipped (_assign)."""

    def __init__(self, expr, consts, table, carry=None):
        self.expr, self.table = expr, table
        self.consts = [c.buf if isinstance(c, Array) and c.device == "cuda"
                       else arrays.from_host(np.asarray(c)) for c in consts]
        self.steps = fusion.plan_steps(expr)
        self.kernels: dict = {}
        self.into = {}
        if carry is not None:
            from funcgrad.cuda.dynamic import INTO
            first, count = carry
            args = expr.in_binders[expr.n_consts:]
            for v, (idx, i) in inplace.update_results(self.steps, expr, args).items():
                j = expr.outs.index(v)
                if i == first + j and j < count and self.steps[idx][1].prim in INTO:
                    self.into[idx] = INTO[self.steps[idx][1].prim]
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
                into = self.into.get(i)
                if into is not None and read(s.inputs[0]).is_contiguous():
                    fn = into
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
        carry = {"scan": [(ex.n_consts, ex.n_carry)], "while": [None, (ex.n_bconsts, None)]}
        places = carry.get(ex.kind, [])
        hit = ex.device_cache["cuda"] = [
            _Body(e, c, table, _carry_of(places[k] if k < len(places) else None, e))
            for k, (e, c) in enumerate(ex.bodies)]
    return hit


def _carry_of(place, expr):
    """(first carry argument, carry count) of a body, the count of a while body's carry being
    all of its arguments after the body constants."""
    if place is None:
        return None
    first, count = place
    if count is None:
        count = len(expr.in_binders) - expr.n_consts - first
    return first, count


class _HeldPool(arrays.Pool):
    """The memory of a loop body captured into a graph: blocks taken from the process pool and
    reused within the body in stream order, given back only when the graph is destroyed (the
    graph keeps this pool: condgraph.keep)."""

    def __init__(self):
        super().__init__()
        self.held: list = []

    def alloc(self, nbytes: int):
        b = self.bucket(nbytes)
        lst = self.free.get(b)
        if lst:
            raw = lst.pop()
        else:
            blk = arrays.base_pool().alloc(b)
            self.held.append(blk)
            raw = blk.raw
        return arrays.Block(raw, self)

    def release(self, raw):
        self.free.setdefault(raw.nbytes, []).append(raw)


def _body_pool():
    """Where a body's intermediates go: never the step's pool, so a plan's recorded
    allocations are the same whether its loops run on the host or as conditional nodes."""
    if runtime.dry_run:
        from funcgrad.cuda.memplan import Recorder
        return Recorder(arrays.base_pool(), fake=True)
    if cg.device_loops():
        p = _HeldPool()
        cg.keep(p)
        return p
    return arrays.base_pool()


def _no_host_calls(ex):
    if ex.effectful and cg.device_loops():
        raise RuntimeError(f"a {ex.kind} body with host callbacks (debug.print) cannot run "
                           "inside a CUDA graph; the plan launches its steps one by one instead")


def _state(avals_or_bufs, pool):
    """Fixed buffers of the step (the loop's state), one per carry value, filled from bufs."""
    out = []
    for b in avals_or_bufs:
        s = pool.empty(b.shape, b.dtype)
        if s.size:
            ew.run("copy", [b], s.dtype, out=s)
        out.append(s)
    return out


def _assign(state, outs, bpool):
    """state[j] <- outs[j]; an output that shares memory with the state is copied aside first
    (a carry that swaps two values), one already written over its own state buffer (an
    in-place update, _Body.into) is left as it is."""
    blocks = {id(s.block) for s in state}
    done = [bool(o.size) and same_memory(o, s) for s, o in zip(state, outs)]
    with arrays.using_pool(bpool):
        outs = [ew.run("copy", [o], o.dtype) if id(o.block) in blocks and o.size and not d
                else o for o, d in zip(outs, done)]
    for s, o, d in zip(state, outs, done):
        if s.size and not d:
            ew.run("copy", [o], s.dtype, out=s)


def _flat(buf):
    return buf.arr(), buf.offset


def _scan(ex, bufs, table):
    """Carry and row buffers are the step's; a device counter picks each iteration's rows."""
    (body,) = _bodies(ex, table)
    _no_host_calls(ex)
    nc, nk, n = ex.n_consts, ex.n_carry, ex.length
    consts, xs = list(bufs[:nc]), [ew.contiguous(x) for x in bufs[nc + nk:]]
    pool = arrays.pool()
    carry = _state(bufs[nc:nc + nk], pool)
    ys = [pool.empty(a.shape, a.dtype) for a in ex.out_avals[nk:]]
    rows = [pool.empty(x.shape[1:], x.dtype) for x in xs]
    ctr = pool.empty((1,), np.int64)
    rev = 1 if ex.reverse else 0
    if n == 0:
        return carry + ys
    row_in, row_out = cg.counter_kernel("row_in"), cg.counter_kernel("row_out")

    def iteration(bpool, last):
        for x, r in zip(xs, rows):
            if r.size:
                cg.launch_rows(row_in, r.size, *_flat(x), *_flat(r), *_flat(ctr), n, r.size, rev)
        with arrays.using_pool(bpool):
            outs = body(consts + carry + rows)
            outs = outs[:nk] + [ew.contiguous(o) for o in outs[nk:]]
        for y, o in zip(ys, outs[nk:]):
            if o.size:
                cg.launch_rows(row_out, o.size, *_flat(o), *_flat(y), *_flat(ctr), n, o.size,
                               rev)
        _assign(carry, outs[:nk], bpool)
        last(*_flat(ctr))

    if cg.device_loops():
        handle = cg.new_handle()
        h = cg.value(handle)
        cg.launch1(cg.set_kernel("counter_start_cond"), *_flat(ctr), h)
        (graph,) = cg.add_node("while", handle)
        step = cg.set_kernel("counter_step_cond")
        with cg.capture_into(graph):
            iteration(_body_pool(), lambda c, o: cg.launch1(step, c, o, n, h))
    else:
        cg.launch1(cg.counter_kernel("counter_reset"), *_flat(ctr))
        step = cg.counter_kernel("counter_step")
        bpool = _body_pool()
        for _ in range(1 if runtime.dry_run else n):
            iteration(bpool, lambda c, o: cg.launch1(step, c, o))
    return carry + ys


def _while(ex, bufs, table):
    """The carry lives in the step's buffers; the predicate is tested on the device (in a
    graph) or read back on the host."""
    cond, body = _bodies(ex, table)
    _no_host_calls(ex)
    ncc, nbc = ex.n_cconsts, ex.n_bconsts
    cconsts, bconsts = list(bufs[:ncc]), list(bufs[ncc:ncc + nbc])
    carry = _state(bufs[ncc + nbc:], arrays.pool())
    bpool = _body_pool()

    def test():
        with arrays.using_pool(bpool):
            return ew.contiguous(cond(cconsts + carry)[0])

    def iteration():
        with arrays.using_pool(bpool):
            outs = body(bconsts + carry)
        _assign(carry, outs, bpool)

    if cg.device_loops():
        setf, handle = cg.set_kernel("set_flag"), cg.new_handle()
        h = cg.value(handle)
        cg.launch1(setf, *_flat(test()), h)
        (graph,) = cg.add_node("while", handle)
        with cg.capture_into(graph):
            iteration()
            cg.launch1(setf, *_flat(test()), h)
        return carry
    if runtime.dry_run:   # compile both bodies
        test()
        iteration()
        return carry
    while bool(_host_scalar(test(), "a while_loop's condition")):
        iteration()
    return carry


def _cond(ex, bufs, table):
    """Results go to the step's buffers: a SWITCH node runs the branch the index picks (in a
    graph), else the index is read back on the host."""
    branches = _bodies(ex, table)
    _no_host_calls(ex)
    pool = arrays.pool()
    res = [pool.empty(a.shape, a.dtype) for a in ex.out_avals]
    ops, idx = list(bufs[1:]), ew.contiguous(bufs[0])
    bpool = _body_pool()
    nb = len(branches)

    def run(k):
        with arrays.using_pool(bpool):
            outs = branches[k](ops)
        _assign(res, outs, bpool)

    if cg.device_loops():
        handle = cg.new_handle()
        cg.launch1(cg.set_kernel("set_index"), *_flat(idx), nb, cg.value(handle))
        for k, g in enumerate(cg.add_node("switch", handle, nb)):
            with cg.capture_into(g):
                run(k)
        return res
    if runtime.dry_run:   # compile every branch
        for k in range(nb):
            run(k)
        return res
    run(int(np.clip(_host_scalar(idx, "a cond's branch index"), 0, nb - 1)))
    return res


def _host_scalar(buf: DeviceBuffer, what: str):
    """A device scalar read back on the host (a synchronization: eager calls only)."""
    return arrays.to_host(ew.contiguous(buf)).reshape(())


_RUN = {"scan": _scan, "while": _while, "cond": _cond}
OWN_GRAPH_MIN_STEPS = 8   # shorter scans (and every cond) run from the host outside a graph
switches.register(__name__, "OWN_GRAPH_MIN_STEPS")   # a change keys jit's shared cache apart


def _own_graph(ex) -> bool:
    """Run this loop as a graph of its own: outside a plan's capture on a real GPU, a while_loop
    or a scan of OWN_GRAPH_MIN_STEPS or more, without host callbacks."""
    return (not runtime.SIM and not runtime.dry_run and runtime._keep is None
            and not ex.effectful and (ex.kind == "while" or (
                ex.kind == "scan" and ex.length >= OWN_GRAPH_MIN_STEPS)))


def register(table: dict) -> None:
    """Add the loop primitives' lowerings to the lowering table (bodies use the same table)."""
    def run(bufs, params, aval):
        ex, index = params["rec"], params["index"]
        if _own_graph(ex):
            results = cg.in_own_graph(lambda: _RUN[ex.kind](ex, list(bufs), table))
        else:
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
