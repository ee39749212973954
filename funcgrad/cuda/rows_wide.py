"""Cross-entropy over wide rows (an LM head's vocabulary): softmax_xent and its backward.

Rows wider than a warp's registers (rows.fits: over 1024 elements) take these kernels: a
block of threads owns a row at a time and walks it with an online max and sum (one read of
the row for the forward's logsumexp, where the block-per-row kernel of fused.py read it twice:
once for the max, once for the sum). A thread keeps (m, s) with s = sum exp(x - m) over the
elements it saw; a run of V elements (one 16-byte load where the row is aligned for it, see
rows.vector_width) rescales s once when its maximum exceeds m; the block then combines its
threads' pairs (max, then the rescaled sums) in a fixed order, so results are deterministic.

The backward's second pass reads the row again and writes exp(x - m) * ct / s less ct at the
label's column. Its grid is persistent: one block an SM (the blocks loop over rows), so the
rows in flight (132 x 201 KB at V 50,304 float32 on an H200) stay in L2 and the second read
mostly hits it: about one read and one write of the logits from DRAM. The output may be the
logits' own buffer (rows_inplace.py): each element is read before the same thread writes it.

NaN and infinities follow the numpy impls: a NaN in a row makes its loss and gradient NaN,
a row of -inf's loss is NaN, a +inf logit gives NaN (inf - inf).
"""
from __future__ import annotations

import numpy as np

from funcgrad.cuda import runtime
from funcgrad.cuda.arrays import DeviceBuffer, pool
from funcgrad.cuda.elementwise import compute_t, contiguous, storer
from funcgrad.cuda.elementwise import load as load_src

UNROLL = 2       # runs a thread loads before it uses them (loads in flight)


def threads() -> int:
    """Threads a block (a row at a time): 1024 on a GPU, 8 in the simulator."""
    return 8 if runtime.SIM else 1024


def sm_count() -> int:
    """Streaming multiprocessors of the current device (1 in the simulator)."""
    if runtime.SIM:
        return 1
    global _SMS
    if _SMS is None:
        from numba import cuda
        _SMS = int(cuda.get_current_device().MULTIPROCESSOR_COUNT)
    return _SMS


_SMS = None


def _runs(V, U, body_load, body_use, ind="        "):
    """Lines walking a thread's runs of V elements (j: the run's first column), U runs a
    round (all loads of a round before their use), then the runs left one at a time."""
    T = threads()
    step = T * V
    lines = [f"{ind}j = t * {V}", f"{ind}while j + {(U - 1) * step} < N:"]
    for u in range(U):
        lines += [f"{ind}    {b}" for b in body_load(f"j + {u * step}", u)]
    for u in range(U):
        lines += [f"{ind}    {b}" for b in body_use(f"j + {u * step}", u)]
    lines += [f"{ind}    j += {U * step}", f"{ind}while j < N:"]
    lines += [f"{ind}    {b}" for b in body_load("j", 0)]
    lines += [f"{ind}    {b}" for b in body_use("j", 0)]
    return lines + [f"{ind}    j += {step}"]


def _merge(m1, s1, m2, s2, neg, ct, ind):
    """Lines making (m1, s1) the pair of both (m1, s1) and (m2, s2): the larger maximum (NaN
    wins) and both sums rescaled to it (a pair that saw only -inf adds nothing)."""
    return [f"{ind}mm_ = {m1} if ({m1} > {m2} or {m1} != {m1}) else {m2}",
            (f"{ind}{s1} = ({s1} * math.exp({m1} - mm_) if {m1} != {neg} else {ct}(0)) + "
             f"({s2} * math.exp({m2} - mm_) if {m2} != {neg} else {ct}(0))"),
            f"{ind}{m1} = mm_"]


def _block_pair(T, sim, neg, ct, ind="        "):
    """Lines giving every thread of the block the block's (mx, a_) from each thread's (m, a_):
    shuffles in each warp, then warp 0 over the warps' pairs (a shared-memory tree in the
    simulator, which has no shuffles); the order is fixed."""
    lines = [f"{ind}mx = m"]
    if sim:
        lines += [f"{ind}shm[t] = mx", f"{ind}shs[t] = a_", f"{ind}cuda.syncthreads()",
                  f"{ind}h_ = {T // 2}", f"{ind}while h_ > 0:", f"{ind}    if t < h_:",
                  f"{ind}        m2_ = shm[t + h_]", f"{ind}        s2_ = shs[t + h_]",
                  f"{ind}        m1_ = shm[t]", f"{ind}        s1_ = shs[t]"]
        lines += _merge("m1_", "s1_", "m2_", "s2_", neg, ct, ind + "        ")
        lines += [f"{ind}        shm[t] = m1_", f"{ind}        shs[t] = s1_",
                  f"{ind}    cuda.syncthreads()", f"{ind}    h_ //= 2",
                  f"{ind}mx = shm[0]", f"{ind}a_ = shs[0]", f"{ind}cuda.syncthreads()"]
        return lines

    def warp(i2):
        out = [f"{i2}off = 16", f"{i2}while off > 0:",
               f"{i2}    m2_ = cuda.shfl_down_sync(0xffffffff, mx, off)",
               f"{i2}    s2_ = cuda.shfl_down_sync(0xffffffff, a_, off)"]
        return out + _merge("mx", "a_", "m2_", "s2_", neg, ct, i2 + "    ") + [
            f"{i2}    off //= 2"]
    lines += warp(ind)
    lines += [f"{ind}if t % 32 == 0:", f"{ind}    shm[t // 32] = mx", f"{ind}    shs[t // 32] = a_",
              f"{ind}cuda.syncthreads()", f"{ind}if t < 32:",
              f"{ind}    mx = shm[t] if t < {T // 32} else {neg}",
              f"{ind}    a_ = shs[t] if t < {T // 32} else {ct}(0)"]
    lines += warp(ind + "    ")
    lines += [f"{ind}    if t == 0:", f"{ind}        shm[0] = mx", f"{ind}        shs[0] = a_",
              f"{ind}cuda.syncthreads()", f"{ind}mx = shm[0]", f"{ind}a_ = shs[0]",
              f"{ind}cuda.syncthreads()"]
    return lines


def source(kind: str, dtype, V: int, cr_dtype=None) -> str:
    """kernel(R, N, x, xo, lab, labo, <err | cr, cro>, o, oo) for kind "fwd" (o: the loss
    per row; err: the bad-label flags) or "bwd" (o: dlogits rows; cr: the cotangent per row),
    runs of V elements (V > 1: vector accesses on a GPU)."""
    T, sim = threads(), runtime.SIM
    ct, out = compute_t(dtype), storer(dtype)
    vec = V > 1 and not sim
    neg = f"{ct}(-math.inf)"
    sig = "R, N, x, xo, lab, labo, " + ("err, " if kind == "fwd" else "cr, cro, ") + "o, oo"
    head = f"from funcgrad.cuda.vecmem import ldv{V}, stv{V}\n" if vec else ""
    # (a block of 1024 threads must fit an SM: at most 64 registers a thread)
    bounds = "" if sim else f", launch_bounds=({T}, 1)"
    src = [f"\n@cuda.jit({runtime.jit_opts()}{bounds})", f"def kernel({sig}):",
           f"    shm = cuda.shared.array({T}, {ct})", f"    shs = cuda.shared.array({T}, {ct})",
           "    t = cuda.threadIdx.x", "    row = cuda.blockIdx.x", "    while row < R:",
           "        base = xo + row * N", f"        m = {neg}", f"        a_ = {ct}(0)"]

    def load(at, u):
        if vec:
            return [f"r{u}_ = ldv{V}(x, base + {at})"] + [
                f"x{u}_{e} = {load_src(dtype, f'r{u}_[{e}]')}" for e in range(V)]
        return [f"x{u}_{e} = {load_src(dtype, f'x[base + {at} + {e}]')}" for e in range(V)]

    def stats(at, u):
        lines = [f"c_ = x{u}_0"] + [f"c_ = c_ if (c_ > x{u}_{e} or c_ != c_) else x{u}_{e}"
                                    for e in range(1, V)]
        lines += ["if c_ > m or c_ != c_:", "    a_ = a_ * math.exp(m - c_)", "    m = c_",
                  f"if m != {neg}:",
                  "    a_ += " + " + ".join(f"math.exp(x{u}_{e} - m)" for e in range(V))]
        return lines

    src += _runs(V, UNROLL, load, stats)
    src += _block_pair(T, sim, neg, ct)
    src += [f"        if mx == {neg}:", f"            a_ = {ct}(math.nan)"]   # a row of -inf
    if kind == "fwd":
        src += ["        if t == 0:", "            c = int64(lab[labo + row])",
                "            if c < 0 or c >= N:", "                cuda.atomic.add(err, 0, 1)",
                "                cuda.atomic.min(err, 1, row)",
                f"                o[oo + row] = {out}(math.nan)", "            else:",
                f"                o[oo + row] = {out}(math.log(a_) - ({load_src(dtype, 'x[base + c]')} - mx))"]
    else:
        src += [f"        cv = {load_src(cr_dtype or dtype, 'cr[cro + row]')}", "        q = cv / a_",
                "        lb = int64(lab[labo + row])", "        ob = oo + row * N"]

        def put(at, u):
            vals = [f"{out}(math.exp(x{u}_{e} - mx) * q - (cv if {at} + {e} == lb "
                    f"else {ct}(0)))" for e in range(V)]
            if vec:
                return [f"stv{V}(o, ob + {at}, {', '.join(vals)})"]
            return [f"o[ob + {at} + {e}] = {v}" for e, v in enumerate(vals)]
        src += _runs(V, UNROLL, load, put)
    src += ["        cuda.syncthreads()", "        row += cuda.gridDim.x"]
    return head + "\n".join(src) + "\n"


def _width(dtype, N, bufs) -> int:
    """4 (2 for 8-byte types) when N and every row-shaped buffer allow aligned runs, else 1."""
    from funcgrad.cuda.fusion import aligned
    V = 4 if np.dtype(dtype).itemsize <= 4 else 2
    if N % V or np.dtype(dtype).name == "bfloat16":   # (16-bit bits: element accesses)
        return 1
    return V if all(aligned(b, V, runtime.SIM) for b in bufs) else 1


def _launch(kind, x, lab, third, out):
    N = x.shape[-1]
    R = x.size // N
    V = _width(x.dtype, N, [x] + ([out] if kind == "bwd" else []))
    crd = third.dtype if kind == "bwd" else None
    key = ("rows_wide", kind, x.dtype.name, lab.dtype.name, str(crd), V, threads(), runtime.SIM)
    kern = runtime.kernel(key, lambda: source(kind, x.dtype, V, crd))
    grid = max(1, min(R, (1 if kind == "bwd" else 2) * sm_count() if not runtime.SIM else 2))
    if kind == "fwd":
        extra = [third.arr()]
    else:
        extra = [third.arr(), third.offset]
    kern[grid, threads(), runtime.stream()](R, N, x.arr(), x.offset, lab.arr(), lab.offset,
                                            *extra, out.arr(), out.offset)


def xent(x: DeviceBuffer, labels: DeviceBuffer, err: DeviceBuffer) -> DeviceBuffer:
    """softmax_xent's loss rows of logits x (rows of N >= 1) into a fresh buffer; bad labels
    are counted in `err` (gather.error_flags) for the caller to raise."""
    x, labels = contiguous(x), contiguous(labels)
    out = pool().empty(labels.shape, x.dtype)
    if x.size:
        _launch("fwd", x, labels, err, out)
    return out


def xent_bwd(x: DeviceBuffer, labels: DeviceBuffer, ct: DeviceBuffer,
             out: DeviceBuffer | None = None) -> DeviceBuffer:
    """softmax_xent_bwd: ct[..., None] * (softmax(x) - one_hot(labels)) for rows of N >= 1;
    `out` (contiguous, shaped and typed like x; may be x itself) receives it, else a fresh
    buffer."""
    x, labels, ct = contiguous(x), contiguous(labels), contiguous(ct)
    if out is None:
        out = pool().empty(x.shape, x.dtype)
    if x.size:
        _launch("bwd", x, labels, ct, out)
    return out
