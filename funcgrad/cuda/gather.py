"""take (gather) and scatter / scatter_add along one axis, deterministic, with index checking.

Indices are checked on the device: a kernel counts out-of-range indices and records the first
bad position in a small error array (integer atomics only), which is read back after the launch
and raised as IndexError, as the CPU backend does; kernels never touch memory through a bad
index.

scatter_add uses no float atomics: each target element sums its own updates in position order,
x + u[p1] + u[p2] + ..., the order numpy's add.at uses; scatter (set) takes the update at the
last matching position, as numpy's fancy assignment does. Two paths group the positions by
index (`path` chooses by sizes):
- dense, for a target axis no longer than the index list (N <= NI) with a small chunk x bucket
  table: the indices are bucketed per target row into CSR form (counts with integer atomics, a
  multi-block scan, then a stable fill: each position's rank among equal indices of its chunk
  of T, per-chunk bucket counts, a per-bucket scan over the chunks, a scatter of positions), and
  one kernel over the whole output sums each element's bucket;
- sparse, for few updates into a large target (S1's cross-entropy gradient: 8,192 updates into
  412M logits, where the dense counts alone were 3.3 GB and their one-block scan 1.3 s; D1's
  KV-cache update: 768 into 786K): out = a copy of x at bandwidth, the (index, position) pairs
  sorted by index, stably (one rank-by-comparison kernel for up to RANK_SORT_MAX pairs, else an
  LSD radix sort of T-way digits, each pass: per-chunk digit ranks and counts, a multi-block
  scan of the digit-major count table, a scatter), then one thread per (run of equal indices,
  outer, inner element) combines its run in position order and writes that element.
Both paths may write over x itself (a jit plan's result planned into a donated operand,
cuda/inplace.py): the sparse path then skips its copy, the dense path's threads read
and write their own element only.
"""
from __future__ import annotations

import textwrap

import numpy as np

from funcgrad.compile import switches
from funcgrad.cuda import runtime
from funcgrad.cuda.arrays import DeviceBuffer, const, from_host, pool, to_host
from funcgrad.cuda.elementwise import contiguous, fill, load, nbt, run, storer

BIG = 2 ** 62
MAX_TABLE = 1 << 22      # chunk x bucket entries (int64) the dense path's stable fill may use
RANK_SORT_MAX = 2048     # the sparse path sorts up to this many pairs by comparison (NI^2 work)
switches.register(__name__, "MAX_TABLE", "RANK_SORT_MAX")   # a change keys jit's shared cache apart


def _check_source(mode: str):
    """mode "check": flags only; "count": also counts[v] += 1 per valid index; "keys": also
    keys[p] = the wrapped index (N where out of range) and pos[p] = p."""
    ok = {"check": "", "count": "        else:\n            cuda.atomic.add(counts, v, 1)\n",
          "keys": "            v = N\n        keys[p] = v\n        pos[p] = p\n"}[mode]
    return f"""
@cuda.jit({runtime.jit_opts()})
def kernel(idx, io, NI, N, err, counts, keys, pos):
    p = cuda.grid(1)
    step = cuda.gridsize(1)
    while p < NI:
        v = int64(idx[io + p])
        if v < 0:
            v += N
        if v < 0 or v >= N:
            cuda.atomic.add(err, 0, 1)
            cuda.atomic.min(err, 1, p)
{ok}        p += step
"""


def _check(name, idx: DeviceBuffer, N: int, counts=None, keys=None, pos=None):
    """Launch the index check (and bucket count, or key list); returns the error array to read
    later."""
    err = error_flags()
    NI = idx.size
    mode = "count" if counts is not None else "keys" if keys is not None else "check"
    if NI:
        k = runtime.kernel(("idxcheck", idx.dtype.name, mode), lambda: _check_source(mode))
        blocks, threads = runtime.grid_1d(NI)
        e = err.arr()
        k[blocks, threads, runtime.stream()](
            idx.arr(), idx.offset, NI, N, e, counts.arr() if counts is not None else e,
            keys.arr() if keys is not None else e, pos.arr() if pos is not None else e)
    return err


def error_flags() -> DeviceBuffer:
    """int64[2] = [count of bad indices, first bad position] on the device, ready to fill."""
    const(0, np.int64), const(BIG, np.int64)  # cached now, so a capture needs no host copy
    if not runtime.capturing():
        return from_host(np.array([0, BIG], np.int64))
    err = pool().empty((2,), np.int64)   # inside a graph capture: no host copies
    fill(err.view((1,), (1,), err.offset), 0)
    fill(err.view((1,), (1,), err.offset + 1), BIG)
    return err


def _raise_if_bad(name, err, idx: DeviceBuffer, N: int):
    runtime.check_now_or_later(err, lambda e: _report(name, e, idx, N))


def _report(name, err, idx: DeviceBuffer, N: int):
    count, pos = (int(v) for v in to_host(err))
    if count:
        first = int(to_host(idx.view((), (), idx.offset + pos))[()])
        from funcgrad.core import user_frame_src
        raise IndexError(f"{name}: index {first} is out of bounds for an axis of size {N} "
                         f"({count} of {idx.size} indices out of range)\n  at {user_frame_src()}")


def _gather_source(dtype):
    return f"""
@cuda.jit({runtime.jit_opts()})
def kernel(n, x, xo, idx, io, o, NI, N, POST):
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < n:
        post = i % POST
        t = i // POST
        j = t % NI
        pre = t // NI
        v = int64(idx[io + j])
        if v < 0:
            v += N
        if v >= 0 and v < N:
            o[i] = x[xo + (pre * N + v) * POST + post]
        else:
            o[i] = {nbt(dtype)}(0)
        i += step
"""


def take(x: DeviceBuffer, idx: DeviceBuffer, axis: int, out_aval) -> DeviceBuffer:
    x, idx = contiguous(x), contiguous(idx)
    N = x.shape[axis]
    post = int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    err = _check("take", idx, N)
    out = pool().empty(out_aval.shape, out_aval.dtype)
    n = out.size
    if n:
        k = runtime.kernel(("gather", x.dtype.name, idx.dtype.name),
                           lambda: _gather_source(x.dtype))
        blocks, threads = runtime.grid_1d(n)
        k[blocks, threads, runtime.stream()](n, x.arr(), x.offset, idx.arr(), idx.offset,
                                             out.arr(), idx.size, N, post)
    _raise_if_bad("take", err, idx, N)
    return out


# ---------------------------------------------------------------------------------------------
# exclusive prefix sums of int64 arrays, by tiles of T * K: tile sums, their scan, tile scans
# ---------------------------------------------------------------------------------------------

def _scan_sum_source(T, K):
    """Block b: bs[b] = the sum of a's tile b."""
    return f"""
@cuda.jit({runtime.jit_opts()})
def kernel(a, n, bs):
    sh = cuda.shared.array({T}, int64)
    t = cuda.threadIdx.x
    b = cuda.blockIdx.x
    s = 0
    for j in range(b * {T * K} + t, min(n, (b + 1) * {T * K}), {T}):
        s += a[j]
    sh[t] = s
    cuda.syncthreads()
    w = {T // 2}
    while w > 0:
        if t < w:
            sh[t] += sh[t + w]
        cuda.syncthreads()
        w //= 2
    if t == 0:
        bs[b] = sh[0]
"""


def _scan_tile_source(T, K):
    """Block b: a's tile b <- its exclusive prefix sums (+ bs[b] when `offset`); thread t takes
    K consecutive elements, the T partial sums are scanned in shared memory (Hillis-Steele)."""
    return f"""
@cuda.jit({runtime.jit_opts()})
def kernel(a, n, bs, offset):
    sh = cuda.shared.array({T}, int64)
    t = cuda.threadIdx.x
    b = cuda.blockIdx.x
    lo = b * {T * K} + t * {K}
    hi = min(n, lo + {K})
    s = 0
    for j in range(lo, hi):
        s += a[j]
    sh[t] = s
    cuda.syncthreads()
    d = 1
    while d < {T}:
        v = 0
        if t >= d:
            v = sh[t - d]
        cuda.syncthreads()
        sh[t] += v
        cuda.syncthreads()
        d *= 2
    run = sh[t] - s
    if offset:
        run += bs[b]
    for j in range(lo, hi):
        c = a[j]
        a[j] = run
        run += c
"""


def scan(a: DeviceBuffer, n: int) -> None:
    """a[:n] (int64, offset 0) <- its exclusive prefix sums, in place, on any number of blocks."""
    T = runtime.reduce_threads()
    K = 2 if runtime.SIM else 4
    nb = -(-n // (T * K))
    if nb == 0:
        return
    tile = runtime.kernel(("scan_tile", T, K), lambda: _scan_tile_source(T, K))
    if nb == 1:
        tile[1, T, runtime.stream()](a.arr(), n, a.arr(), 0)
        return
    bs = pool().empty((nb,), np.int64)
    k = runtime.kernel(("scan_sum", T, K), lambda: _scan_sum_source(T, K))
    k[nb, T, runtime.stream()](a.arr(), n, bs.arr())
    scan(bs, nb)
    tile[nb, T, runtime.stream()](a.arr(), n, bs.arr(), 1)


# ---------------------------------------------------------------------------------------------
# the dense path's CSR: offs (bucket starts) and perm (positions, increasing inside a bucket)
# ---------------------------------------------------------------------------------------------

def _key_rank(T, indent, read):
    """Kernel lines (at `indent` spaces): key = position p's key (`read` gives it from v, the
    raw value, or -1 when p >= NI), rank = how many earlier positions of this block's T share
    it, last = whether p is the last of them; `keys` is a shared int64[T]."""
    lines = f"""key = -1
if p < NI:
{textwrap.indent(read, "    ")}keys[t] = key
cuda.syncthreads()
rank = 0
last = True
for u in range({T}):
    if keys[u] == key:
        if u < t:
            rank += 1
        elif u > t:
            last = False
"""
    return textwrap.indent(lines, " " * indent)


_WRAPPED = """v = int64(idx[io + p])
if v < 0:
    v += N
if v >= 0 and v < N:
    key = v
"""


def _rank_source(T):
    """Block c: rank[p] = how many earlier positions of chunk c have p's index, and
    ccount[c, key] = how many positions of chunk c have index key (written by the last one)."""
    return f"""
@cuda.jit({runtime.jit_opts()})
def kernel(idx, io, NI, N, ranks, ccount):
    keys = cuda.shared.array({T}, int64)
    t = cuda.threadIdx.x
    c = cuda.blockIdx.x
    p = c * {T} + t
{_key_rank(T, 4, _WRAPPED)}    if key >= 0:
        ranks[p] = rank
        if last:
            ccount[c * N + key] = rank + 1
"""


_CHUNK_SCAN = """
@cuda.jit(OPTS)
def kernel(N, NC, offs, ccount):
    j = cuda.grid(1)
    step = cuda.gridsize(1)
    while j < N:
        run = offs[j]
        for c in range(NC):
            x = ccount[c * N + j]
            ccount[c * N + j] = run
            run += x
        j += step
"""

_PLACE = """
@cuda.jit(OPTS)
def kernel(idx, io, NI, N, T, rank, ccount, perm):
    p = cuda.grid(1)
    step = cuda.gridsize(1)
    while p < NI:
        v = int64(idx[io + p])
        if v < 0:
            v += N
        if v >= 0 and v < N:
            perm[ccount[(p // T) * N + v] + rank[p]] = p
        p += step
"""


def _stable_fill(idx, NI, N, offs, perm):
    """offs (counts on entry; N + 1 entries) and perm: the CSR of idx's buckets, positions
    increasing inside each."""
    T = runtime.reduce_threads()
    NC = -(-NI // T)
    scan(offs, N + 1)
    rank = pool().empty((NI,), np.int64)
    ccount = fill(pool().empty((NC * N,), np.int64), 0)
    k = runtime.kernel(("csr_rank", idx.dtype.name, T), lambda: _rank_source(T))
    k[NC, T, runtime.stream()](idx.arr(), idx.offset, NI, N, rank.arr(), ccount.arr())
    opts = runtime.jit_opts()
    k = runtime.kernel(("csr_chunk_scan",), lambda: _CHUNK_SCAN.replace("OPTS", opts))
    blocks, threads = runtime.grid_1d(N)
    k[blocks, threads, runtime.stream()](N, NC, offs.arr(), ccount.arr())
    k = runtime.kernel(("csr_place", idx.dtype.name), lambda: _PLACE.replace("OPTS", opts))
    blocks, threads = runtime.grid_1d(NI)
    k[blocks, threads, runtime.stream()](idx.arr(), idx.offset, NI, N, T, rank.arr(),
                                         ccount.arr(), perm.arr())


# ---------------------------------------------------------------------------------------------
# the sparse path's sort of (key, position) pairs by key, stable (keys in [0, N], N = bad)
# ---------------------------------------------------------------------------------------------

def _rank_sort_source(T):
    """Pair p goes to slot #{q: key[q] < key[p], or key[q] == key[p] and q < p}."""
    return f"""
@cuda.jit({runtime.jit_opts()})
def kernel(keys, NI, skey, spos):
    sh = cuda.shared.array({T}, int64)
    t = cuda.threadIdx.x
    p = cuda.blockIdx.x * {T} + t
    key = int64(0)
    if p < NI:
        key = keys[p]
    rank = 0
    for c0 in range(0, NI, {T}):
        if c0 + t < NI:
            sh[t] = keys[c0 + t]
        cuda.syncthreads()
        for u in range(min({T}, NI - c0)):
            kq = sh[u]
            if kq < key or (kq == key and c0 + u < p):
                rank += 1
        cuda.syncthreads()
    if p < NI:
        skey[rank] = key
        spos[rank] = p
"""


def _radix_rank_source(T):
    """One LSD pass, block c: d = digit of slot s's key; rank[s] = how many earlier slots of
    chunk c have digit d; table[d * NC + c] = how many slots of chunk c have digit d."""
    digit = "key = (kin[p] >> shift) & " + str(T - 1) + "\n"
    return f"""
@cuda.jit({runtime.jit_opts()})
def kernel(kin, NI, shift, NC, ranks, table):
    keys = cuda.shared.array({T}, int64)
    hist = cuda.shared.array({T}, int64)
    t = cuda.threadIdx.x
    c = cuda.blockIdx.x
    p = c * {T} + t
    hist[t] = 0
{_key_rank(T, 4, digit)}    if key >= 0:
        ranks[p] = rank
        if last:
            hist[key] = rank + 1
    cuda.syncthreads()
    table[t * NC + c] = hist[t]
"""


_RADIX_PLACE = """
@cuda.jit(OPTS)
def kernel(kin, pin, NI, shift, NC, T, rank, table, kout, pout):
    s = cuda.grid(1)
    step = cuda.gridsize(1)
    while s < NI:
        k = kin[s]
        d = (k >> shift) & (T - 1)
        q = table[d * NC + s // T] + rank[s]
        kout[q] = k
        pout[q] = pin[s]
        s += step
"""


def _sort(keys: DeviceBuffer, pos: DeviceBuffer, NI: int, N: int):
    """(skey, spos): keys sorted, with positions in increasing order among equal keys."""
    T = runtime.reduce_threads()
    NC = -(-NI // T)
    skey, spos = pool().empty((NI,), np.int64), pool().empty((NI,), np.int64)
    if NI <= RANK_SORT_MAX:
        k = runtime.kernel(("rank_sort", T), lambda: _rank_sort_source(T))
        k[NC, T, runtime.stream()](keys.arr(), NI, skey.arr(), spos.arr())
        return skey, spos
    bits = T.bit_length() - 1            # T is a power of two: one digit has T values
    passes = -(-int(N).bit_length() // bits)
    rank = pool().empty((NI,), np.int64)
    table = pool().empty((T * NC,), np.int64)
    rk = runtime.kernel(("radix_rank", T), lambda: _radix_rank_source(T))
    opts = runtime.jit_opts()
    pk = runtime.kernel(("radix_place",), lambda: _RADIX_PLACE.replace("OPTS", opts))
    blocks, threads = runtime.grid_1d(NI)
    src, dst = (keys, pos), (skey, spos)
    for i in range(passes):
        rk[NC, T, runtime.stream()](src[0].arr(), NI, i * bits, NC, rank.arr(), table.arr())
        scan(table, T * NC)
        pk[blocks, threads, runtime.stream()](src[0].arr(), src[1].arr(), NI, i * bits, NC, T,
                                              rank.arr(), table.arr(), dst[0].arr(),
                                              dst[1].arr())
        src, dst = dst, src
    return src


def _combine_source(dtype, add: bool):
    """Thread (s, pre, post) with s the first slot of a run of equal valid keys: out[pre, key,
    post] (= x there) combined with the run's updates in position order."""
    # (16-bit floats: summed in float32, rounded once; no atomics anywhere)
    out = storer(dtype)
    if add:
        body = f"""            acc = {load(dtype, 'o[oi]')}
            q = s
            while q < NI and skey[q] == key:
                acc = acc + {load(dtype, 'upd[uo + (pre * NI + spos[q]) * POST + post]')}
                q += 1
            o[oi] = {out}(acc)"""
    else:
        body = """            q = s
            while q + 1 < NI and skey[q + 1] == key:
                q += 1
            o[oi] = upd[uo + (pre * NI + spos[q]) * POST + post]"""
    return f"""
@cuda.jit({runtime.jit_opts()})
def kernel(n, o, upd, uo, skey, spos, NI, N, POST):
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < n:
        post = i % POST
        t = i // POST
        s = t % NI
        pre = t // NI
        key = skey[s]
        if key < N and (s == 0 or skey[s - 1] != key):
            oi = (pre * N + key) * POST + post
{body}
        i += step
"""


def same_memory(a: DeviceBuffer, b: DeviceBuffer) -> bool:
    """Whether a and b are the same contiguous elements (a result planned over its operand)."""
    return (a.block is b.block and a.offset == b.offset and a.shape == b.shape
            and a.dtype == b.dtype and a.is_contiguous() and b.is_contiguous())


def path(NI: int, N: int) -> str:
    """"dense" (CSR over the N target rows) or "sparse" (sort the NI indices) for a scatter of
    NI indices into an axis of N: dense costs O(N + NI) and a chunk x bucket table."""
    T = runtime.reduce_threads()
    return "dense" if N <= NI and -(-NI // T) * N <= MAX_TABLE else "sparse"


def _scatter_source(dtype, add: bool):
    out = storer(dtype)
    if add:
        body = f"""        acc = {load(dtype, 'x[xo + i]')}
        for q in range(offs[j], offs[j + 1]):
            p = perm[q]
            acc = acc + {load(dtype, 'upd[uo + (pre * NI + p) * POST + post]')}
        o[i] = {out}(acc)"""
    else:
        body = """        e = offs[j + 1]
        if e > offs[j]:
            p = perm[e - 1]
            o[i] = upd[uo + (pre * NI + p) * POST + post]
        else:
            o[i] = x[xo + i]"""
    return f"""
@cuda.jit({runtime.jit_opts()})
def kernel(n, x, xo, upd, uo, perm, offs, o, NI, N, POST):
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < n:
        post = i % POST
        t = i // POST
        j = t % N
        pre = t // N
{body}
        i += step
"""


def scatter(x: DeviceBuffer, idx: DeviceBuffer, upd: DeviceBuffer, axis: int, add: bool,
            into: bool = False):
    """x with the updates scattered in (a new buffer, or x itself with `into`: x must then be
    contiguous and its old value dead, cuda/inplace.py)."""
    name = "scatter_add" if add else "scatter"
    idx, upd = contiguous(idx), contiguous(upd)
    N = x.shape[axis]
    post = int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    NI = idx.size
    if NI == 0:
        return x
    if x.size == 0:
        out = x
        err = _check(name, idx, N)
    elif path(NI, N) == "sparse":
        keys, pos = pool().empty((NI,), np.int64), pool().empty((NI,), np.int64)
        err = _check(name, idx, N, keys=keys, pos=pos)
        skey, spos = _sort(keys, pos, NI, N)
        out = x if into else pool().empty(x.shape, x.dtype)
        if not same_memory(out, x):   # planned in place into a donated x: nothing to copy
            run("copy", [x], x.dtype, out=out)   # any strides (a broadcast zero: a fill)
        n = (x.size // N) * NI
        k = runtime.kernel(("scatter_sparse", x.dtype.name, add),
                           lambda: _combine_source(x.dtype, add))
        blocks, threads = runtime.grid_1d(n)
        k[blocks, threads, runtime.stream()](n, out.arr(), upd.arr(), upd.offset, skey.arr(),
                                             spos.arr(), NI, N, post)
    else:
        x = contiguous(x)
        offs = fill(pool().empty((N + 1,), np.int64), 0)
        err = _check(name, idx, N, counts=offs)
        perm = pool().empty((NI,), np.int64)
        _stable_fill(idx, NI, N, offs, perm)
        # out may be x's memory: each element reads its own
        out = x if into else pool().empty(x.shape, x.dtype)
        k = runtime.kernel(("scatter", x.dtype.name, add), lambda: _scatter_source(x.dtype, add))
        blocks, threads = runtime.grid_1d(out.size)
        k[blocks, threads, runtime.stream()](out.size, x.arr(), x.offset, upd.arr(), upd.offset,
                                             perm.arr(), offs.arr(), out.arr(), NI, N, post)
    _raise_if_bad(name, err, idx, N)
    return out
