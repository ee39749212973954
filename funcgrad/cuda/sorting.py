"""argsort on the device: one thread per last-axis row, a stable bottom-up merge sort.

Each thread sorts the indices of its row, ping-ponging between the output and a scratch buffer
of the same size; merges take from the left run on ties, so the sort is stable. NaNs compare
greater than every number (they sort last, as numpy and JAX order them). Rows are independent,
so results are deterministic. O(n log n) work per row; a real GPU gets one thread per row,
which suits the many-short-rows shapes of top_k / sort over a feature axis.
"""
from __future__ import annotations

import numpy as np

from funcgrad.prims import sorting as PE
from funcgrad.cuda import runtime
from funcgrad.cuda.arrays import DeviceBuffer, pool
from funcgrad.cuda.elementwise import compute_t, contiguous


def _source(dtype) -> str:
    ct = compute_t(dtype)
    nan_aware = np.dtype(dtype).kind == "f"
    # lt(a, b): a sorts strictly before b (NaN greatest)
    lt = "(a < b) or (b != b and a == a)" if nan_aware else "a < b"
    return f"""
@cuda.jit(device=True)
def lt(a, b):
    return {lt}


@cuda.jit({runtime.jit_opts()})
def kernel(x, xo, out, tmp, R, N):
    r = cuda.grid(1)
    step = cuda.gridsize(1)
    while r < R:
        base = r * N
        for i in range(N):
            out[base + i] = i
        width = 1
        in_out = True
        while width < N:
            i = 0
            while i < N:
                mid = min(i + width, N)
                hi = min(i + 2 * width, N)
                a = i
                b = mid
                k = i
                while k < hi:
                    if in_out:
                        ia = out[base + a] if a < mid else 0
                        ib = out[base + b] if b < hi else 0
                    else:
                        ia = tmp[base + a] if a < mid else 0
                        ib = tmp[base + b] if b < hi else 0
                    take_b = False
                    if a >= mid:
                        take_b = True
                    elif b < hi:
                        take_b = lt({ct}(x[xo + base + ib]), {ct}(x[xo + base + ia]))
                    v = ib if take_b else ia
                    if take_b:
                        b += 1
                    else:
                        a += 1
                    if in_out:
                        tmp[base + k] = v
                    else:
                        out[base + k] = v
                    k += 1
                i += 2 * width
            in_out = not in_out
            width *= 2
        if not in_out:
            for i in range(N):
                out[base + i] = tmp[base + i]
        r += step
"""


def argsort(x: DeviceBuffer, aval) -> DeviceBuffer:
    """Stable ascending argsort of each last-axis row of x (int32 indices)."""
    x = contiguous(x)
    out = pool().empty(aval.shape, np.int32)
    n = x.shape[-1]
    rows = x.size // n if n else 0
    if rows and n:
        tmp = pool().empty(aval.shape, np.int32)
        k = runtime.kernel(("argsort", x.dtype.name), lambda: _source(x.dtype))
        blocks, threads = runtime.grid_1d(rows)
        k[blocks, threads, runtime.stream()](x.arr(), x.offset, out.arr(), tmp.arr(), rows, n)
    return out


LOWERINGS = {
    PE.argsort_p: lambda bufs, params, aval: argsort(bufs[0], aval),
}
