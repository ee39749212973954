"""concatenate in one kernel: every output element written once, each read from its piece.

The output is viewed as [outer, mid, inner] around the concatenation axis and each piece as
[outer, m_k, inner] through its own strides (a piece that cannot be viewed so, e.g. a
transposed view whose outer axes do not merge, sends the call to the copy-per-piece path).
One grid-stride loop runs over the flat output, so writes are coalesced (and, for pieces with
unit inner stride, reads too) whatever the shape: a block per output row left one block copying
D1's 37.7 MB stack of 12 KV caches (outer = 1) and half of every block idle on S2's RoPE rows
of 128. The piece sizes, `inner` and the row length are literals of the kernel (divisions
become multiplications and shifts); the element count and strides are arguments.
"""
from __future__ import annotations

import numpy as np

from funcgrad.cuda import runtime
from funcgrad.cuda.arrays import DeviceBuffer, pool


def _merged_stride(shape, strides, dims):
    """The stride of dims merged into one axis (row-major), 0 if all have size 1, else None."""
    dims = [k for k in dims if shape[k] != 1]
    if not dims:
        return 0
    for a, b in zip(dims, dims[1:]):
        if strides[a] != strides[b] * shape[b]:
            return None
    return strides[dims[-1]]


def _as3(b: DeviceBuffer, d: int):
    """(outer, axis, inner) element strides viewing b as [outer, m, inner], or None."""
    so = _merged_stride(b.shape, b.strides, range(d))
    si = _merged_stride(b.shape, b.strides, range(d + 1, len(b.shape)))
    if so is None or si is None:
        return None
    return so, b.strides[d], si


def _source(sizes, inner):
    row = sum(sizes) * inner
    args = ", ".join(f"p{k}, p{k}o, p{k}a, p{k}b, p{k}c" for k in range(len(sizes)))
    L = [f"\n@cuda.jit({runtime.jit_opts()})", f"def kernel(n, o, oo, {args}):",
         "    i = cuda.grid(1)", "    step = cuda.gridsize(1)", "    while i < n:",
         f"        r = i // {row}", f"        j = i - r * {row}",
         f"        c = j // {inner}", f"        e = j - c * {inner}"]
    start = 0
    for k, m in enumerate(sizes):   # if c < end of piece 0: ... elif ...: ... else: last piece
        at = f"p{k}o + r * p{k}a + (c - {start}) * p{k}b + e * p{k}c"
        if len(sizes) == 1:
            L += [f"        v = p{k}[{at}]"]
            break
        if k == len(sizes) - 1:
            L += ["        else:"]
        else:
            L += [f"        {'if' if k == 0 else 'elif'} c < {start + m}:"]
        L += [f"            v = p{k}[{at}]"]
        start += m
    L += ["        o[oo + i] = v", "        i += step"]
    return "\n".join(L) + "\n"


def concatenate(bufs: list, dim: int, aval):
    """The concatenation of `bufs` along `dim` in one launch, or None (use copies)."""
    pieces = [b for b in bufs if b.shape[dim]]
    views = [_as3(b, dim) for b in pieces]
    if not pieces or any(v is None for v in views):
        return None
    out = pool().empty(aval.shape, aval.dtype)
    inner = int(np.prod(aval.shape[dim + 1:], dtype=np.int64))
    if out.size == 0:
        return out
    sizes = tuple(b.shape[dim] for b in pieces)
    key = ("concat_flat", np.dtype(aval.dtype).name, sizes, inner)
    k = runtime.kernel(key, lambda: _source(sizes, inner))
    args = [out.size, out.arr(), out.offset]
    for b, (a, m, c) in zip(pieces, views):
        args += [b.arr(), b.offset, a, m, c]
    blocks, threads = runtime.grid_1d(out.size)
    k[blocks, threads, runtime.stream()](*args)
    return out
