"""Warp-per-row kernels for the fused row primitives (forward and backward, funcgrad/fused*.py).

A group of L lanes (a warp on a GPU, 4 threads in the simulator) owns a row and holds it in
registers, so each row is read once and written once; row sums and maxima are a butterfly of
warp shuffles (a shared-memory tree in the simulator, which has no shuffles), with no block
barrier. The generator unrolls every per-lane loop itself: a lane's C = ceil(n / L) slots are
named scalars (xa_0, xa_1, ...), never a local array that could end up in local memory.

Where every row-shaped and per-column operand is aligned for it (offsets and n multiples of V,
checked at launch; the width is part of the kernel key) a lane owns runs of V contiguous
elements: lane l holds elements V*l .. V*l + V - 1, then the same + V*L, ... and reads and writes
each run by one 16-byte access (vecmem; V = 4 for float32 / float16, 2 for float64). Other
operands take the scalar path (lane l holds l, l + L, ...); the simulator runs the vector layout
with scalar accesses. Per-column operands (scale, bias) are read once per warp, before its rows.

The norm backward kernels keep each lane's per-column sums of ct * xhat and ct over the warp's
rows in registers, add the block's warps in a fixed shared-memory tree, and write one partial row
per block; a column reduction (funcgrad/cuda/reduce.py) adds the partials in a fixed order:
deterministic, no atomics. A warp taking several rows reads the next row while it reduces the
current one (`prefetch`). The stored dx rows may have a residual's rows added (`acc`,
rows_fuse.py). No kernel touches local memory (none in their PTX).

Measured on an H200 (2026-11-25, benchmarks/rows_probe.py, two runs; each op 50 times in a CUDA
graph), before (local arrays, scalar accesses, a partial row a warp) -> now, torch beside:
W2's 4096 x 384 float32 layer norm forward 8.5-8.65 -> 3.5-3.6 us (torch 9.5-9.6); backward
with its column reduction 16.5-16.6 -> 10.5 (torch 17.3-17.4; the column reduction of 256
partial rows is 4.6 of them); softmax_xent_bwd at 4096 x 256 6.3-6.35 -> 3.6 (torch's
log_softmax backward 2.8). The scalar layout (unaligned operands, n not a multiple of V): 9.5,
16.8-17.0 and 5.35 us.
"""
from __future__ import annotations

import numpy as np

from . import runtime
from .arrays import DeviceBuffer, pool
from .elementwise import compute_t, contiguous, fill, nbt

ARGS = {"layer_norm": ["x", "sc", "bi"], "rms_norm": ["x", "sc"], "softmax": ["x"],
        "log_softmax": ["x"], "softmax_bwd": ["y", "c"], "log_softmax_bwd": ["y", "c"],
        "softmax_xent_bwd": ["x", "lab", "cr"], "layer_norm_bwd": ["x", "sc", "c"],
        "rms_norm_bwd": ["x", "sc", "c"]}
PARTIALS = {"layer_norm_bwd": 2, "rms_norm_bwd": 1}
COLUMNS = {"sc", "bi"}          # per-column operands (n elements)
PER_ROW = {"lab", "cr"}         # one element per row
# rows longer than this many elements per lane use the block-per-row kernels of fused.py
MAX_SLOTS = 32
SHARED_BYTES = 32 * 1024        # the backward's tree of partial sums at most


def geometry():
    """(threads per block, lanes per row) of the kernels other than the norm backward's
    (config). 128-thread blocks, a row a warp: W2's 4096 x 384 float32 layer norm forward
    3.5-3.6 us with the vector layout (64 registers a thread), 9.5 with the scalar one (153),
    torch 9.5-9.6 (H200, 2026-11-25, benchmarks/rows_probe.py; the local-array kernels before:
    8.5-8.65, 165 registers; 10.65 with 256-thread blocks)."""
    return (8, 4) if runtime.SIM else (128, 32)


def config(kind, R, C, itemsize, V):
    """(warps per block, rows per warp, prefetch) for `kind` on R rows of C slots a lane in runs
    of V.

    The vector norm backward takes 8 warps a block and as many rows a warp as keep the grid at
    <= 256 blocks (2 rows at W2's 4096), so that its partial rows are few (256 x 2n sums for the
    column reduction, against 1024 with a partial row per warp), the next row prefetched. W2's
    4096 x 384 float32 backward with its column reduction on an H200 (2026-11-25): 10.5 us;
    8 warps x 2 rows without prefetch 10.7, 4 x 4 with it 10.3-10.5, 8 x 1 12.7, 16 x 1 13.7;
    the column reduction alone 4.6 us for 256 partial rows, 5.6 for 1024. The scalar layout
    keeps 4 warps x ceil(R / 1024) rows (16.8-17.0 us; 8 x 2 prefetched: 24.0): its kernels
    hold ~170-210 registers a thread against the vector ones' 128."""
    T, L = geometry()
    if kind in PARTIALS:
        if runtime.SIM:
            return T // L, 2, True
        if V == 1:
            return T // L, max(1, -(-R // 1024)), False
        W, k = 8, PARTIALS[kind]
        while W > 1 and (W // 2) * k * C * L * itemsize > SHARED_BYTES:
            W //= 2
        return W, max(1, -(-R // (W * 256))), C <= 16
    return T // L, 2 if runtime.SIM else max(1, -(-R // (1 << 17))), False


def _group_reduce(names, op, L, shfl, ind):
    """Lines replacing each of `names` in every lane of a group by the group's sum / max (the
    shuffles of several names interleaved)."""
    comb = (lambda a, b: f"{a} + {b}") if op == "sum" else (
        lambda a, b: f"{a} if ({a} > {b} or {a} != {a}) else {b}")
    if shfl:
        out = []
        off = L // 2
        while off > 0:
            out += [f"{ind}v{i}_ = cuda.shfl_xor_sync(0xffffffff, {v}, {off})"
                    for i, v in enumerate(names)]
            out += [f"{ind}{v} = {comb(v, f'v{i}_')}" for i, v in enumerate(names)]
            off //= 2
        return out
    out = []
    for var in names:
        out += [f"{ind}sh[t] = {var}", f"{ind}cuda.syncthreads()", f"{ind}s_ = {L // 2}",
                f"{ind}while s_ > 0:", f"{ind}    if lane < s_:",
                f"{ind}        sh[t] = {comb('sh[t]', 'sh[t + s_]')}",
                f"{ind}    cuda.syncthreads()", f"{ind}    s_ //= 2", f"{ind}{var} = sh[t - lane]",
                f"{ind}cuda.syncthreads()"]
    return out


def source(kind, dtype, C, eps=None, W=4, V=1, prefetch=False, acc=False) -> str:
    """kernel(R, N, RPW, <operand, offset>..., o, oo[, r, ro][, part, parto]) for `kind`: W
    warps a block, C slots a lane in runs of V, `acc`: the stored rows are dx + r."""
    L = geometry()[1]
    T, sim = W * L, runtime.SIM
    ct, out = compute_t(dtype), nbt(dtype)
    k = PARTIALS.get(kind, 0)
    G = C // V
    vec = V > 1 and not sim
    sig = ["R", "N", "RPW"] + [f"{a}, {a}o" for a in ARGS[kind]] + ["o", "oo"]
    sig += ["r", "ro"] if acc else []
    sig += ["part", "parto"] if k else []
    I1, I2 = "        ", "            "
    head = f"from funcgrad.cuda.vecmem import ldv{V}, stv{V}\n" if vec else ""
    src = [f"\n@cuda.jit({runtime.jit_opts()})", f"def kernel({', '.join(sig)}):",
           "    t = cuda.threadIdx.x", f"    w = t // {L}", f"    lane = t - w * {L}",
           f"    row0 = (cuda.blockIdx.x * {W} + w) * RPW"]
    if sim:
        src.append(f"    sh = cuda.shared.array({T}, {ct})")
    src += [f"    j{g} = lane * {V} + {g * V * L}" for g in range(G)]
    inv_n = f"({ct}(1) / {ct}(max(N, 1)))"
    S = range(C)

    def ok(m):
        return f"j{m // V} < N"

    def load(pre, arr, act, base, fill_value=f"{ct}(0)", ind=I1):
        """Lines loading row `base` (or, base None, the per-column operand) of arr into the
        slots pre_0 .. pre_{C-1}; slots past n (or of an inactive row) get fill_value."""
        lines = []
        for g in range(G):
            at = f"{arr}o + {base} + j{g}" if base else f"{arr}o + j{g}"
            cond = f"{act} and j{g} < N" if act else f"j{g} < N"
            lines.append(f"{ind}if {cond}:")
            if vec:
                lines.append(f"{ind}    v{pre}_{g} = ldv{V}({arr}, {at})")
                lines += [f"{ind}    {pre}_{g * V + e} = {ct}(v{pre}_{g}[{e}])" for e in range(V)]
            else:
                lines += [f"{ind}    {pre}_{g * V + e} = {ct}({arr}[{at}{f' + {e}' if e else ''}])"
                          for e in range(V)]
            lines.append(f"{ind}else:")
            lines += [f"{ind}    {pre}_{g * V + e} = {fill_value}" for e in range(V)]
        return lines

    def store(arr, at, vals, ind):
        """Lines storing vals (one expression a slot) at arr[at + j] for the slots inside n."""
        lines = []
        for g in range(G):
            lines.append(f"{ind}if j{g} < N:")
            if vec:
                lines.append(f"{ind}    stv{V}({arr}, {at} + j{g}, "
                             + ", ".join(vals[g * V + e] for e in range(V)) + ")")
            else:
                lines += [f"{ind}    {arr}[{at} + j{g}{f' + {e}' if e else ''}] = "
                          f"{vals[g * V + e]}" for e in range(V)]
        return lines

    def each(fmt, ind=I1):
        """One line a slot: fmt with {m} the slot and {ok} its in-row test."""
        return [ind + fmt.format(m=m, ok=ok(m)) for m in S]

    # the row operands a row reads (slot prefix, operand, fill of a missing element)
    neg = f"{ct}(-math.inf)"
    rowin = {"layer_norm": [("xa", "x", None)], "rms_norm": [("xa", "x", None)],
             "softmax": [("xa", "x", neg)], "log_softmax": [("xa", "x", neg)],
             "softmax_bwd": [("ya", "y", None), ("ca", "c", None)],
             "log_softmax_bwd": [("ya", "y", None), ("ca", "c", None)],
             "softmax_xent_bwd": [("xa", "x", neg)], "layer_norm_bwd": [("xa", "x", None),
                                                                        ("ga", "c", None)],
             "rms_norm_bwd": [("xa", "x", None), ("ga", "c", None)]}[kind]
    if acc:
        rowin = rowin + [("ra", "r", None)]

    def load_row(pfx, act, row, base, ind):
        lines = []
        for pre, arr, fv in rowin:
            lines += load(pfx + pre, arr, act, base, fv or f"{ct}(0)", ind)
        if kind == "softmax_xent_bwd":
            lines += [f"{ind}{pfx}cv = {ct}(cr[cro + {row}]) if {act} else {ct}(0)",
                      f"{ind}{pfx}lb = int64(lab[labo + {row}]) if {act} else int64(-1)"]
        return lines

    # per-column operands: once per warp
    if "sc" in ARGS[kind]:
        src += load("sa", "sc", None, None, ind="    ")
    if "bi" in ARGS[kind]:
        src += load("ba", "bi", None, None, ind="    ")
    for i in range(k):
        src += [f"    p{i}_{m} = {ct}(0)" for m in S]
    if prefetch:
        src += ["    nact = row0 < R", "    nbase = row0 * N"]
        src += load_row("n", "nact", "row0", "nbase", "    ")
        src += ["    for i in range(RPW):", f"{I1}act = nact", f"{I1}base = nbase"]
        for pre, _, _ in rowin:
            src += [f"{I1}{pre}_{m} = n{pre}_{m}" for m in S]
        if kind == "softmax_xent_bwd":
            src += [f"{I1}cv = ncv", f"{I1}lb = nlb"]
        src += [f"{I1}nact = i + 1 < RPW and row0 + i + 1 < R", f"{I1}nbase = base + N"]
        src += load_row("n", "nact", "row0 + i + 1", "nbase", I1)
    else:
        src += ["    for i in range(RPW):", f"{I1}act = row0 + i < R",
                f"{I1}base = (row0 + i) * N"]
        src += load_row("", "act", "row0 + i", "base", I1)

    def finish(vals, first=()):
        """Store one expression a slot as the output row (plus the accumulated row r), after
        the lines `first` (an inactive row's sums may be 0: the simulator would raise)."""
        if acc:
            vals = [f"{out}({ct}({out}({v})) + ra_{m})" for m, v in enumerate(vals)]
        else:
            vals = [f"{out}({v})" for v in vals]
        return [f"{I1}if act:"] + [I2 + f for f in first] + store("o", "oo + base", vals, I2)

    if kind in ("softmax", "log_softmax", "softmax_xent_bwd"):
        src += [f"{I1}mx = {neg}"] + each("mx = mx if (mx > xa_{m} or mx != mx) else xa_{m}")
        src += _group_reduce(["mx"], "max", L, not sim, I1)
        src += [f"{I1}s = {ct}(0)"]
        for m in S:
            src += [f"{I1}if act and {ok(m)}:"] + (
                [f"{I2}s += math.exp(xa_{m} - mx)"] if kind == "log_softmax" else
                [f"{I2}xa_{m} = math.exp(xa_{m} - mx)", f"{I2}s += xa_{m}"])
        src += _group_reduce(["s"], "sum", L, not sim, I1)
        if kind == "softmax":   # one division a row, a multiply an element
            src += finish([f"xa_{m} * q" for m in S], [f"q = {ct}(1) / s"])
        elif kind == "log_softmax":
            src += finish([f"(xa_{m} - mx) - q" for m in S], ["q = math.log(s)"])
        else:   # cr / s once a row; the label's column less cr
            src += finish([f"xa_{m} * q - (cv if j{m // V} + {m % V} == lb else {ct}(0))"
                           for m in S], ["q = cv / s"])
    elif kind in ("layer_norm", "rms_norm"):
        # two passes over the row in registers, as the numpy impl: mean, then centred squares
        if kind == "layer_norm":
            src += [f"{I1}mu = {ct}(0)"] + each("mu += xa_{m}")
            src += _group_reduce(["mu"], "sum", L, not sim, I1) + [f"{I1}mu = mu * {inv_n}"]
            src += each(f"xa_{{m}} = xa_{{m}} - mu if {{ok}} else {ct}(0)")
        src += [f"{I1}q = {ct}(0)"] + each("q += xa_{m} * xa_{m}")
        src += _group_reduce(["q"], "sum", L, not sim, I1)
        src += [f"{I1}rs = {ct}(1) / math.sqrt(q * {inv_n} + {ct}({eps!r}))"]
        src += finish([f"xa_{m} * rs * sa_{m}" + (f" + ba_{m}" if kind == "layer_norm" else "")
                       for m in S])
    elif kind in ("softmax_bwd", "log_softmax_bwd"):
        src += [f"{I1}s = {ct}(0)"]
        if kind == "softmax_bwd":
            src += each("s += ya_{m} * ca_{m}") + _group_reduce(["s"], "sum", L, not sim, I1)
            src += finish([f"ya_{m} * (ca_{m} - s)" for m in S])
        else:
            src += each("s += ca_{m}") + _group_reduce(["s"], "sum", L, not sim, I1)
            src += finish([f"ca_{m} - math.exp(ya_{m}) * s" for m in S])
    elif k:
        center = kind == "layer_norm_bwd"
        if center:
            src += [f"{I1}mu = {ct}(0)"] + each("mu += xa_{m}")
            src += _group_reduce(["mu"], "sum", L, not sim, I1) + [f"{I1}mu = mu * {inv_n}"]
            src += each(f"xa_{{m}} = xa_{{m}} - mu if {{ok}} else {ct}(0)")
        src += [f"{I1}q = {ct}(0)"] + each("q += xa_{m} * xa_{m}")
        src += _group_reduce(["q"], "sum", L, not sim, I1)
        src += [f"{I1}rs = {ct}(1) / math.sqrt(q * {inv_n} + {ct}({eps!r}))",
                f"{I1}s1 = {ct}(0)", f"{I1}s2 = {ct}(0)"]
        for m in S:
            src += [f"{I1}xa_{m} = xa_{m} * rs", f"{I1}g_ = ga_{m} * sa_{m}", f"{I1}s1 += g_",
                    f"{I1}s2 += g_ * xa_{m}", f"{I1}p0_{m} += ga_{m} * xa_{m}"]
            src += [f"{I1}p1_{m} += ga_{m}"] if center else []
        src += _group_reduce(["s1", "s2"] if center else ["s2"], "sum", L, not sim, I1)
        src += [f"{I1}s1 = s1 * {inv_n}", f"{I1}s2 = s2 * {inv_n}"]
        src += finish([f"rs * (ga_{m} * sa_{m} - s1 - xa_{m} * s2)" if center else
                       f"rs * (ga_{m} * sa_{m} - xa_{m} * s2)" for m in S])
        # the block's warps add their partial sums in a fixed tree, warp 0 writes the block's
        CL, s = C * L, W // 2
        if s:
            src.append(f"    shp = cuda.shared.array({s * k * CL}, {ct})")
        while s:
            src.append(f"    if w >= {s} and w < {2 * s}:")
            src += [f"        shp[((w - {s}) * {k} + {i}) * {CL} + {m * L} + lane] = p{i}_{m}"
                    for i in range(k) for m in S]
            src += ["    cuda.syncthreads()", f"    if w < {s}:"]
            src += [f"        p{i}_{m} += shp[(w * {k} + {i}) * {CL} + {m * L} + lane]"
                    for i in range(k) for m in S]
            s //= 2
            if s:
                src.append("    cuda.syncthreads()")
        src.append("    if w == 0:")
        for i in range(k):
            src += store("part", f"parto + (cuda.blockIdx.x * {k} + {i}) * N",
                         [f"p{i}_{m}" for m in S], "        ")
    return head + "\n".join(src) + "\n"


def fits(n: int) -> bool:
    """Whether rows of n elements fit the registers of one group (warp) of lanes."""
    return -(-n // geometry()[1]) <= MAX_SLOTS


def vector_width(dtype, N: int, bufs) -> int:
    """V for runs of V contiguous elements a lane (16-byte accesses) when n is a multiple of V,
    the runs need no more slots than single elements would (or V), and every buffer in `bufs`
    starts aligned for them; else 1."""
    from .fusion import aligned
    d = np.dtype(dtype)
    V = 4 if d.itemsize <= 4 else 2
    L = geometry()[1]
    if N % V or V * -(-N // (V * L)) > max(-(-N // L), V):
        return 1
    return V if all(aligned(b, V, runtime.SIM) for b in bufs) else 1


def run(kind, ins: list, out_shape, dtype, eps=None, acc=None) -> DeviceBuffer:
    """The row primitive `kind` of contiguous-row operands `ins` (x-like first); `acc` (rows
    shaped like x, norm backward only): the dx rows stored are out(dx) + acc."""
    from .reduce import _reduce3
    x = ins[0]
    N = x.shape[-1]
    R = x.size // N if N else 0
    out = pool().empty(out_shape, dtype)
    k = PARTIALS.get(kind, 0)
    if out.size == 0:
        return out
    if R == 0:   # no rows: the column sums are zero
        return fill(out, 0)
    L = geometry()[1]
    C1 = -(-N // L)
    acc_t = np.dtype(np.float32) if np.dtype(dtype) == np.float16 else np.dtype(dtype)
    ins = [contiguous(b) for b in ins]   # held until the kernel is queued
    extra = [contiguous(acc)] if acc is not None else []
    V = vector_width(dtype, N, [b for a, b in zip(ARGS[kind], ins) if a not in PER_ROW]
                     + [out] + extra)
    W, RPW, pre = config(kind, R, C1, acc_t.itemsize, V)
    NB = -(-R // (W * RPW))
    part = pool().empty((NB, k * N), acc_t) if k else None
    if k and V > 1 and vector_width(dtype, N, [part]) == 1:
        V = 1   # (the pool's blocks are aligned: not seen)
    C = V * -(-N // (V * L))
    key = ("rows", kind, np.dtype(dtype).name, C, eps, W, L, V, pre, bool(extra), runtime.SIM)
    kern = runtime.kernel(key, lambda: source(kind, dtype, C, eps, W, V, pre, bool(extra)))
    args = [R, N, RPW]
    for b in ins + [out] + extra:
        args += [b.arr(), b.offset]
    if k:
        args += [part.arr(), part.offset]
        kern[NB, W * L, runtime.stream()](*args)
        vec = out.view((k * N,), (1,), out.offset + R * N)
        _reduce3("sum", part, 1, NB, k * N, 0, k * N, 1, vec)
    else:
        kern[NB, W * L, runtime.stream()](*args)
    return out
