"""CUDA-graph conditional nodes: the device-side loops and branches of a captured plan.

A loop captured into a plan's CUDA graph becomes one WHILE conditional node whose body graph
holds one iteration; the last kernel of the body sets the node's condition on the device
(`cudaGraphSetConditional`, from CUDA's device runtime library, libcudadevrt), so a 10,000-step
scan is the same few graph nodes as a 10-step one and the host never waits for the device. A
`cond` becomes a SWITCH node with a body per branch, its index set by a kernel just before it.

Bodies are captured with stream capture into the node's body graphs (`cuStreamBeginCapture
ToGraph`), on a stream per nesting depth, so nested loops nest nodes. Outside a capture (eager
calls, the simulator, a plan's first calls) the same loops run on the host: see loops.py.
"""
from __future__ import annotations

import contextlib

import numpy as np

from funcgrad.cuda import runtime

_COUNTER = """
@cuda.jit(cache=True)
def counter_reset(c, off):
    if cuda.grid(1) == 0:
        c[off] = 0


@cuda.jit(cache=True)
def counter_step(c, off):
    if cuda.grid(1) == 0:
        c[off] += 1


@cuda.jit(cache=True)
def row_in(src, soff, dst, doff, c, coff, n, rowsize, reverse):
    # dst[:] = src[r], r = counter (n - 1 - counter when reverse)
    r = c[coff]
    if reverse:
        r = n - 1 - r
    base = soff + r * rowsize
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < rowsize:
        dst[doff + i] = src[base + i]
        i += step


@cuda.jit(cache=True)
def row_out(src, soff, dst, doff, c, coff, n, rowsize, reverse):
    # dst[r] = src[:], r as in row_in
    r = c[coff]
    if reverse:
        r = n - 1 - r
    base = doff + r * rowsize
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < rowsize:
        dst[base + i] = src[soff + i]
        i += step
"""

# not cache=True: numba cannot cache kernels that link a library (compiled in-process, ~1 s)
_SET = """
from numba import types
from numba.cuda.cudadrv.libs import get_cudalib

set_cond = cuda.declare_device("cudaGraphSetConditional", types.void(types.uint64, types.uint32),
                               link=[get_cudalib("cudadevrt", static=True)], abi="c")


@cuda.jit
def counter_start_cond(c, off, handle):
    # counter = 0 and run the body (set here, not as the handle's default: a default is
    # applied once per launch of the whole graph, not per run of an enclosing loop's body)
    if cuda.grid(1) == 0:
        c[off] = 0
        set_cond(handle, types.uint32(1))


@cuda.jit
def counter_step_cond(c, off, n, handle):
    # counter += 1; run the body again while counter < n
    if cuda.grid(1) == 0:
        k = c[off] + 1
        c[off] = k
        set_cond(handle, types.uint32(1 if k < n else 0))


@cuda.jit
def set_flag(p, poff, handle):
    if cuda.grid(1) == 0:
        set_cond(handle, types.uint32(1 if p[poff] else 0))


@cuda.jit
def set_index(p, poff, nb, handle):
    # the branch index, clamped to [0, nb - 1] as lax.switch does
    if cuda.grid(1) == 0:
        k = p[poff]
        if k < 0:
            k = 0
        if k > nb - 1:
            k = nb - 1
        set_cond(handle, types.uint32(k))
"""


def counter_kernel(name: str):
    """counter_reset / counter_step / row_in / row_out (the simulator runs them too)."""
    return runtime.kernel(("loop", name), lambda: _COUNTER, name)


def set_kernel(name: str):
    """counter_step_cond / set_flag / set_index: set a conditional node's value (real GPUs)."""
    return runtime.kernel(("loop_cond", name), lambda: _SET, name)


def device_loops() -> bool:
    """True while a plan is captured on a real GPU: loops become conditional nodes."""
    return runtime._keep is not None and not runtime.SIM and not runtime.dry_run


def launch1(kernel, *args):
    """A one-thread launch on the current stream."""
    kernel[1, 1, runtime.stream()](*args)


def launch_rows(kernel, rowsize: int, *args):
    blocks, threads = runtime.grid_1d(rowsize)
    kernel[blocks, threads, runtime.stream()](*args)


def _cb():
    from cuda.bindings import driver as cb
    return cb


def _ok(res):
    return runtime.cu_ok(res, "CUDA conditional-node call")


def _handle(stream) -> int:
    h = stream.handle
    return int(h.value) if hasattr(h, "value") else int(h)


def _capture_graph():
    cb = _cb()
    s = cb.CUstream(_handle(runtime._stream))
    info = cb.cuStreamGetCaptureInfo(s)
    _ok(info[:1])
    return cb, s, info[3], info[4], info[6]


def new_handle():
    """A conditional handle in the graph being captured (a kernel before the node sets it)."""
    cb, _, graph, _, _ = _capture_graph()
    ctx = _ok(cb.cuCtxGetCurrent())
    return _ok(cb.cuGraphConditionalHandleCreate(graph, ctx, 0, 0))


def value(handle) -> np.uint64:
    """The handle as a kernel argument."""
    return np.uint64(int(handle))


def add_node(kind: str, handle, size: int = 1) -> list:
    """Add a conditional node ("while" or "switch") after the work captured so far on the
    current stream; later captured work follows it. Returns its body graphs."""
    cb, s, graph, deps, ndeps = _capture_graph()
    p = cb.CUgraphNodeParams()
    p.type = cb.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
    p.conditional.handle = handle
    p.conditional.type = {
        "while": cb.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_WHILE,
        "switch": cb.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_SWITCH}[kind]
    p.conditional.size = size
    p.conditional.ctx = _ok(cb.cuCtxGetCurrent())
    node = _ok(cb.cuGraphAddNode(graph, deps, None, ndeps, p))
    bodies = [p.conditional.phGraph_out[i] for i in range(size)]
    _ok(cb.cuStreamUpdateCaptureDependencies(
        s, [node], None, 1,
        cb.CUstreamUpdateCaptureDependencies_flags.CU_STREAM_SET_CAPTURE_DEPENDENCIES))
    return bodies


_streams: list = []   # (CUstream, numba stream) per nesting depth of captured bodies
_depth = 0


@contextlib.contextmanager
def capture_into(graph):
    """Launches inside the block are captured into `graph` (a conditional node's body)."""
    global _depth
    cb = _cb()
    if len(_streams) <= _depth:
        h = _ok(cb.cuStreamCreate(cb.CUstream_flags.CU_STREAM_NON_BLOCKING.value))
        _streams.append((h, runtime.load().external_stream(int(h))))
    h, s = _streams[_depth]
    _ok(cb.cuStreamBeginCaptureToGraph(h, graph, None, None, 0,
                                       cb.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED))
    prev, runtime._stream = runtime._stream, s
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        runtime._stream = prev
        res = cb.cuStreamEndCapture(h)
    _ok(res[:1])


def keep(obj) -> None:
    """Keep `obj` (memory a captured body uses) alive as long as the graph being captured."""
    if runtime._keep is not None:
        runtime._keep.append(obj)


_own: list = []   # (CUstream, numba stream) capturing loops that run outside a plan's graph


def in_own_graph(fn):
    """Run fn() (a loop's lowering) captured into a graph of its own and launch that graph on
    the legacy stream: an eager loop, or one in a plan's first calls, then runs its iterations
    on the device too instead of a host loop of launches (and a host read per while_loop
    test). Device checks inside it are raised after the launch (or deferred to the plan's)."""
    import gc

    from funcgrad.core import source_info
    cb = _cb()
    if not _own:
        h = _ok(cb.cuStreamCreate(cb.CUstream_flags.CU_STREAM_NON_BLOCKING.value))
        _own.append((h, runtime.load().external_stream(int(h))))
    h, s = _own[0]
    prev = runtime._stream, runtime._deferred, runtime._on_defer, runtime._keep
    runtime._stream, runtime._deferred, runtime._on_defer, runtime._keep = s, [], None, []
    keep, checks = runtime._keep, runtime._deferred
    gc_was = gc.isenabled()
    gc.disable()
    try:
        with runtime.load().defer_cleanup():
            _ok(cb.cuStreamBeginCapture(h, cb.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED))
            try:
                results = fn()
            finally:
                res = cb.cuStreamEndCapture(h)
    finally:
        if gc_was:
            gc.enable()
        runtime._stream, runtime._deferred, runtime._on_defer, runtime._keep = prev
    graph = _ok(res)
    try:
        exe = _ok(cb.cuGraphInstantiate(graph, 0))
        try:
            _ok(cb.cuGraphLaunch(exe, 0))
        finally:
            cb.cuGraphExecDestroy(exe)   # freed when the launch completes
    finally:
        cb.cuGraphDestroy(graph)
    del keep   # the bodies' memory: reused only by work queued after the launch
    for err, raise_if_bad, src in checks:
        if runtime._deferred is not None:
            runtime._deferred.append((err, raise_if_bad, src))
        else:
            with source_info(src):
                raise_if_bad(err)
    return results
