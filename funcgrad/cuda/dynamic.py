"""dynamic_slice / dynamic_update_slice on the device: window kernels at device-side starts.

The start indices stay on the device (a decode step's position is a traced scalar): every
thread reads them, clamps each into [0, n - m] as XLA does, and moves one element of the
window. dynamic_update_slice writes its result's window over a copy of the operand, or over
the operand itself when the result's memory is the operand's: a jit plan gives the result a
donated argument's buffer (Plan._aliases) when the operand is that argument and nothing reads
it afterwards, and the update then moves only the window's bytes (a KV-cache step writes one
position, not the whole cache). INTO holds the update lowerings that write into operand 0
itself, for loop bodies that update their carry in place (loops.py, inplace.py).
"""
from __future__ import annotations

from funcgrad.cuda import runtime
from funcgrad.cuda.arrays import DeviceBuffer, c_strides, pool
from funcgrad.cuda.elementwise import contiguous, run
from funcgrad.cuda.gather import same_memory, scatter


def _window_source(nd: int, write: bool) -> str:
    """Thread i takes window element i (row-major over sizes M*): the big array's element at
    the clamped starts plus its coordinates; `write`: big[...] = small[i], else small[i] =
    big[...]."""
    sig = "".join(f", s{d}, q{d}" for d in range(nd)) + "".join(
        f", N{d}, M{d}" for d in range(nd))
    lines = [f"@cuda.jit({runtime.jit_opts()})",
             f"def kernel(n, big, bo, small, so{sig}):",
             "    i = cuda.grid(1)",
             "    step = cuda.gridsize(1)"]
    for d in range(nd):
        lines.append(f"    c{d} = min(max(int64(s{d}[q{d}]), 0), N{d} - M{d})")
    lines.append("    while i < n:")
    lines.append("        r = i")
    lines.append("        bi = 0")
    stride = []
    for d in reversed(range(nd)):
        lines.append(f"        j = r % M{d}")
        lines.append(f"        r = r // M{d}")
        lines.append(f"        bi += (c{d} + j) * {' * '.join(stride) or '1'}")
        stride.append(f"N{d}")
    if write:
        lines.append("        big[bo + bi] = small[so + i]")
    else:
        lines.append("        small[so + i] = big[bo + bi]")
    lines.append("        i += step")
    return "\n".join(lines) + "\n"


def _launch(big: DeviceBuffer, small: DeviceBuffer, starts, write: bool):
    n = small.size
    if n == 0:
        return
    nd = big.ndim
    key = ("dyn_window", nd, write, big.dtype.name) + tuple(s.dtype.name for s in starts)
    k = runtime.kernel(key, lambda: _window_source(nd, write))
    args = [n, big.arr(), big.offset, small.arr(), small.offset]
    for s in starts:
        args += [s.arr(), s.offset]
    for N, M in zip(big.shape, small.shape):
        args += [N, M]
    blocks, threads = runtime.grid_1d(n)
    k[blocks, threads, runtime.stream()](*args)


def dynamic_slice(bufs, params, aval) -> DeviceBuffer:
    x, starts = contiguous(bufs[0]), bufs[1:]
    out = pool().empty(aval.shape, aval.dtype)
    _launch(x, out, starts, write=False)
    return out


def dynamic_update_slice(bufs, params, aval) -> DeviceBuffer:
    x, upd, starts = bufs[0], contiguous(bufs[1]), bufs[2:]
    out = pool().empty(aval.shape, aval.dtype)
    if out.size and not same_memory(out, x):    # in place: the operand already holds the rest
        run("copy", [x], x.dtype, out=out)
    _launch(out, upd, starts, write=True)
    return out


def _dus_into(bufs, params, aval) -> DeviceBuffer:
    """dynamic_update_slice written over its (contiguous, dead) operand: the window only."""
    x = bufs[0]
    _launch(x, contiguous(bufs[1]), bufs[2:], write=True)
    return x


def stack_into(bufs, params, aval) -> DeviceBuffer:
    """concatenate of pieces that a plan may already have written at their places in the
    result's memory (inplace.stacked_results: the result is a donated argument, each piece one
    run of it): copies only the pieces that are elsewhere. The dims before the concatenation
    dim have size 1, so each piece's place is one C-contiguous run of the result."""
    out = pool().empty(aval.shape, aval.dtype)
    d = params["dimension"]
    inner = 1
    for n in aval.shape[d + 1:]:
        inner *= n
    start = 0
    for b in bufs:
        m = b.shape[d]
        if m and out.size:
            shape = tuple(aval.shape[:d]) + (m,) + tuple(aval.shape[d + 1:])
            dst = DeviceBuffer(out.block, shape, c_strides(shape), out.offset + start * inner,
                               out.dtype)
            if not same_memory(dst, b):
                run("copy", [b], b.dtype, out=dst)
        start += m
    return out


def _scatter_into(add: bool):
    def lower(bufs, params, aval) -> DeviceBuffer:
        return scatter(*bufs, params["axis"], add, into=True)
    return lower


LOWERINGS: dict = {}
INTO: dict = {}   # update primitive -> lowering that writes into operand 0 (cuda/inplace.py)


def _register():
    from funcgrad import prims as P
    LOWERINGS[P.dynamic_slice_p] = dynamic_slice
    LOWERINGS[P.dynamic_update_slice_p] = dynamic_update_slice
    INTO[P.dynamic_update_slice_p] = _dus_into
    INTO[P.scatter_p] = _scatter_into(False)
    INTO[P.scatter_add_p] = _scatter_into(True)


_register()
