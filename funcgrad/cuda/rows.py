"""Warp-per-row kernels for the fused row primitives (forward and backward, funcgrad/fused*.py).

A group of L lanes (a warp on a GPU, 4 threads in the simulator) owns a row and holds it in
registers, so each row is read once and written once; row sums and maxima are a butterfly of
warp shuffles (a shared-memory tree in the simulator, which has no shuffles), with no block
barrier. A lane's C = ceil(n / L) slots are local arrays walked by constant-trip loops (over
slots, or over runs of V): NVVM unrolls them fully and keeps the arrays in registers (no
ld.local / st.local in any PTX checked: C up to 32). The generator does not unroll them itself:
the named-scalar version (commit 2834696) grew W2's layer_norm_bwd to 470-640 source lines,
4-7 s of numba typing and lowering on the dev VM and 7.3-8.1 s of compile on the H200; the loops
take 165-180 lines and ~1.1 s to lower (benchmarks/out/rows_lower.py, local NVVM 0.2-0.3 s).

Where every row-shaped and per-column operand is aligned for it (offsets and n multiples of V,
checked at launch; the width is part of the kernel key) a lane owns runs of V contiguous
elements: lane l holds elements V*l .. V*l + V - 1, then the same + V*L, ... and reads and writes
each run by one 16-byte access (vecmem; V = 4 for float32 / 16-bit floats, 2 for float64; bfloat16
runs load their bits and convert them in registers: funcgrad/cuda/half.py). Other
operands take the scalar path (lane l holds l, l + L, ...); the simulator runs the vector layout
with scalar accesses. Per-column operands (scale, bias) are read once per warp, before its rows.

The norm backward kernels keep each lane's per-column sums of ct * xhat and ct over the warp's
rows in registers, add the block's warps in a fixed shared-memory tree, and write one partial row
per block; a column reduction (funcgrad/cuda/reduce.py) adds the partials in a fixed order:
deterministic, no atomics. A warp taking several rows may read the next row while it reduces
the current one (`prefetch`: the simulator's configuration; on a GPU it lost, see config). The
stored dx rows may have a residual's rows added (`acc`,
rows_fuse.py). No kernel touches local memory (none in their PTX).

Measured on an H200 (2026-11-25, benchmarks/rows_probe.py, two runs; each op 50 times in a CUDA
graph), before (local arrays, scalar accesses, a partial row a warp) -> now, torch beside:
W2's 4096 x 384 float32 layer norm forward 8.5-8.65 -> 3.5-3.6 us (torch 9.5-9.6); backward
with its column reduction 16.5-16.6 -> 10.5 (torch 17.3-17.4; the column reduction of 256
partial rows is 4.6 of them); softmax_xent_bwd at 4096 x 256 6.3-6.35 -> 3.6 (torch's
log_softmax backward 2.8). The scalar layout (unaligned operands, n not a multiple of V): 9.5,
16.8-17.0 and 5.35 us. The loop version (2026-11-25, one run, the named-scalar one beside it at
3.51 / 9.98 / 3.57): 3.91 / 10.98 (10.72 without prefetch) / 3.78 us, 78 / 128 / 56 registers
against 64 / 128 / 39, with a per-slot column test (19 setp in the forward's PTX against 10);
with the test one a run (10 setp, as before), in one run beside the named-scalar kernels at
3.70 / 10.62 / 3.63: 3.65 / 11.03 (10.75 without prefetch, now the GPU's configuration) / 3.69
us; the backward with `acc` 13.23. W2's cold first call with the loop kernels: 3.9-4.9 s (the
closing call's two; 4.4 s in the first run, the slowest kernel's compile 3.1 s, 33 kernels in
parallel), against 8.4-9.1 s with the named scalars.
"""
from __future__ import annotations

import numpy as np

from funcgrad.cuda import runtime
from funcgrad.cuda.arrays import DeviceBuffer, pool
from funcgrad.cuda.elementwise import compute_t, contiguous, fill, nbt, storer
from funcgrad.cuda.elementwise import load as ld_expr

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
    column reduction, against 1024 with a partial row per warp). W2's 4096 x 384 float32
    backward with its column reduction on an H200 (2026-11-25): 10.5 us with the named-scalar
    kernels of 2834696 (8 warps x 2 rows prefetched; 10.7 without the prefetch, 4 x 4 with it
    10.3-10.5, 8 x 1 12.7, 16 x 1 13.7); with the loop kernels (342d7f8) the prefetch lost in
    two runs, 11.03 against 10.75 and 10.98 against 10.72 (the 2834696 kernels 10.62 in the
    first's run), so no row is prefetched on the GPU (the simulator keeps the path covered);
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
        return W, max(1, -(-R // (W * 256))), False
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
    ct, out = compute_t(dtype), storer(dtype)
    bf16 = np.dtype(dtype).name == "bfloat16"
    k = PARTIALS.get(kind, 0)
    G, VL = C // V, V * L
    vec = V > 1 and not sim
    sig = ["R", "N", "RPW"] + [f"{a}, {a}o" for a in ARGS[kind]] + ["o", "oo"]
    sig += ["r", "ro"] if acc else []
    sig += ["part", "parto"] if k else []
    I1, I2 = "        ", "            "
    head = f"from funcgrad.cuda.vecmem import ldv{V}, stv{V}\n" if vec else ""
    src = [f"\n@cuda.jit({runtime.jit_opts()})", f"def kernel({', '.join(sig)}):",
           "    t = cuda.threadIdx.x", f"    w = t // {L}", f"    lane = t - w * {L}",
           f"    row0 = (cuda.blockIdx.x * {W} + w) * RPW", f"    j0 = lane * {V}"]
    if sim:
        src.append(f"    sh = cuda.shared.array({T}, {ct})")
    inv_n = f"({ct}(1) / {ct}(max(N, 1)))"
    neg = f"{ct}(-math.inf)"
    # slot m of a lane holds column j0 + (m // V) * V * L + m % V; its run starts at column jm,
    # inside the row exactly when the slot is (n is a multiple of V): one test a run, not a slot
    jm = f"j0 + (m // {V}) * {VL}"

    def each(body, ind=I1, test=None):
        """A loop over the lane's slots m (column j); body lines, under `if test` if given."""
        lines = [f"{ind}for m in range({C}):"]
        if test:
            return lines + [f"{ind}    j = {jm}", f"{ind}    if {test}:"] + [
                f"{ind}        {b}" for b in body]
        return lines + [f"{ind}    {b}" for b in body]

    def runs(body, ind, test="j < N"):
        """A loop over the lane's runs g (first column j, first slot m); body(V-run) lines."""
        return [f"{ind}for g in range({G}):", f"{ind}    j = j0 + g * {VL}",
                f"{ind}    m = g * {V}", f"{ind}    if {test}:"] + [
                    f"{ind}        {b}" for b in body]

    def load(ops, act, base, ind):
        """A loop reading row `base` (base None: the per-column operands) of each (slot array,
        operand, fill) in ops; slots past n or of an inactive row get the fill."""
        at = f"o + {base} + j" if base else "o + j"
        body = []
        for pre, arr, _ in ops:
            if vec:
                body.append(f"v_ = ldv{V}({arr}, {arr}{at})")
                body += [f"{pre}[m + {e}] = {ld_expr(dtype, f'v_[{e}]')}" for e in range(V)]
            else:
                body += [f"{pre}[m + {e}] = {ld_expr(dtype, f'{arr}[{arr}{at} + {e}]')}"
                         for e in range(V)]
        lines = runs(body, ind, f"{act} and j < N" if act else "j < N")
        lines.append(f"{ind}    else:")
        lines += [f"{ind}        {pre}[m + {e}] = {fv}" for pre, _, fv in ops for e in range(V)]
        return lines

    def store(arr, at, val, ind):
        """A loop storing val(slot m + e, e) at arr[at + j + e] for the runs inside n."""
        if vec:
            body = [f"stv{V}({arr}, {at} + j, "
                    + ", ".join(val(f"m + {e}", e) for e in range(V)) + ")"]
        else:
            body = [f"{arr}[{at} + j + {e}] = {val(f'm + {e}', e)}" for e in range(V)]
        return runs(body, ind)

    # the row operands a row reads (slot array, operand, fill of a missing element)
    zero = f"{ct}(0)"
    rowin = {"layer_norm": [("xa", "x", zero)], "rms_norm": [("xa", "x", zero)],
             "softmax": [("xa", "x", neg)], "log_softmax": [("xa", "x", neg)],
             "softmax_bwd": [("ya", "y", zero), ("ca", "c", zero)],
             "log_softmax_bwd": [("ya", "y", zero), ("ca", "c", zero)],
             "softmax_xent_bwd": [("xa", "x", neg)],
             "layer_norm_bwd": [("xa", "x", zero), ("ga", "c", zero)],
             "rms_norm_bwd": [("xa", "x", zero), ("ga", "c", zero)]}[kind]
    rowin = rowin + ([("ra", "r", zero)] if acc else [])
    cols = [(p, a, zero) for p, a in (("sa", "sc"), ("ba", "bi")) if a in ARGS[kind]]
    arrays = [p for p, _, _ in rowin + cols] + (["n" + p for p, _, _ in rowin] if prefetch else [])
    src += [f"    {a} = cuda.local.array({C}, {ct})" for a in arrays]

    def load_row(pfx, act, row, base, ind):
        lines = load([(pfx + p, a, fv) for p, a, fv in rowin], act, base, ind)
        if kind == "softmax_xent_bwd":
            lines += [f"{ind}{pfx}cv = {ld_expr(dtype, f'cr[cro + {row}]')} if {act} else {ct}(0)",
                      f"{ind}{pfx}lb = int64(lab[labo + {row}]) if {act} else int64(-1)"]
        return lines

    # per-column operands: once per warp
    if cols:
        src += load(cols, None, None, "    ")
    if k:
        src += [f"    p = cuda.local.array({k * C}, {ct})", f"    for m in range({k * C}):",
                f"        p[m] = {ct}(0)"]
    if prefetch:   # row i + 1 is read while row i is reduced (one load loop: from i = -1)
        src += ["    nact = False", "    nbase = row0 * N"]
        if kind == "softmax_xent_bwd":
            src += [f"    ncv = {ct}(0)", "    nlb = int64(-1)"]
        src += ["    for i in range(-1, RPW):", f"{I1}act = nact", f"{I1}base = nbase"]
        src += each([f"{p}[m] = n{p}[m]" for p, _, _ in rowin])
        if kind == "softmax_xent_bwd":
            src += [f"{I1}cv = ncv", f"{I1}lb = nlb"]
        src += [f"{I1}nact = i + 1 < RPW and row0 + i + 1 < R",
                f"{I1}nbase = (row0 + i + 1) * N"]
        src += load_row("n", "nact", "row0 + i + 1", "nbase", I1)
        src += [f"{I1}if i < 0:", f"{I1}    continue"]
    else:
        src += ["    for i in range(RPW):", f"{I1}act = row0 + i < R",
                f"{I1}base = (row0 + i) * N"]
        src += load_row("", "act", "row0 + i", "base", I1)

    def finish(val, first=()):
        """Store val(slot) as the output row (plus the accumulated row r), after the lines
        `first` (an inactive row's sums may be 0: the simulator would raise)."""
        if acc:   # dx rounded to its dtype, then dx + r in the compute type
            def rnd(v):
                return f"bf16_rnd({v})" if bf16 else f"{ct}({nbt(dtype)}({v}))"
            fn = (lambda m, e: f"{out}({rnd(val(m))} + ra[{m}])")
        else:
            fn = (lambda m, e: f"{out}({val(m, e)})" if kind == "softmax_xent_bwd"
                  else f"{out}({val(m)})")
        return [f"{I1}if act:"] + [I2 + f for f in first] + store("o", "oo + base", fn, I2)

    def scale(center):
        """xa centred on the row's mean when `center`; rs = 1 / sqrt(mean of squares + eps):
        two passes over the row in registers, as the numpy impls."""
        lines = []
        if center:
            lines += [f"{I1}mu = {ct}(0)"] + each(["mu += xa[m]"])
            lines += _group_reduce(["mu"], "sum", L, not sim, I1) + [f"{I1}mu = mu * {inv_n}"]
            lines += each([f"j = {jm}", f"xa[m] = xa[m] - mu if j < N else {ct}(0)"])
        lines += [f"{I1}q = {ct}(0)"] + each(["q += xa[m] * xa[m]"])
        lines += _group_reduce(["q"], "sum", L, not sim, I1)
        return lines + [f"{I1}rs = {ct}(1) / math.sqrt(q * {inv_n} + {ct}({eps!r}))"]

    if kind in ("softmax", "log_softmax", "softmax_xent_bwd"):
        src += [f"{I1}mx = {neg}"] + each(["mx = mx if (mx > xa[m] or mx != mx) else xa[m]"])
        src += _group_reduce(["mx"], "max", L, not sim, I1)
        src += [f"{I1}s = {ct}(0)"]
        src += each(["s += math.exp(xa[m] - mx)"] if kind == "log_softmax" else
                    ["xa[m] = math.exp(xa[m] - mx)", "s += xa[m]"], test="act and j < N")
        src += _group_reduce(["s"], "sum", L, not sim, I1)
        if kind == "softmax":   # one division a row, a multiply an element
            src += finish(lambda m: f"xa[{m}] * q", [f"q = {ct}(1) / s"])
        elif kind == "log_softmax":
            src += finish(lambda m: f"(xa[{m}] - mx) - q", ["q = math.log(s)"])
        else:   # cr / s once a row; the label's column less cr
            src += finish(lambda m, e: f"xa[{m}] * q - (cv if j + {e} == lb else {ct}(0))",
                          ["q = cv / s"])
    elif kind in ("layer_norm", "rms_norm"):
        src += scale(kind == "layer_norm")
        src += finish(lambda m: f"xa[{m}] * rs * sa[{m}]"
                      + (f" + ba[{m}]" if kind == "layer_norm" else ""))
    elif kind in ("softmax_bwd", "log_softmax_bwd"):
        src += [f"{I1}s = {ct}(0)"]
        if kind == "softmax_bwd":
            src += each(["s += ya[m] * ca[m]"]) + _group_reduce(["s"], "sum", L, not sim, I1)
            src += finish(lambda m: f"ya[{m}] * (ca[{m}] - s)")
        else:
            src += each(["s += ca[m]"]) + _group_reduce(["s"], "sum", L, not sim, I1)
            src += finish(lambda m: f"ca[{m}] - math.exp(ya[{m}]) * s")
    elif k:
        center = kind == "layer_norm_bwd"
        src += scale(center) + [f"{I1}s1 = {ct}(0)", f"{I1}s2 = {ct}(0)"]
        src += each(["xa[m] = xa[m] * rs", "g_ = ga[m] * sa[m]", "s1 += g_", "s2 += g_ * xa[m]",
                     "p[m] += ga[m] * xa[m]"] + ([f"p[m + {C}] += ga[m]"] if center else []))
        src += _group_reduce(["s1", "s2"] if center else ["s2"], "sum", L, not sim, I1)
        src += [f"{I1}s1 = s1 * {inv_n}", f"{I1}s2 = s2 * {inv_n}"]
        src += finish(lambda m: f"rs * (ga[{m}] * sa[{m}] - s1 - xa[{m}] * s2)" if center else
                      f"rs * (ga[{m}] * sa[{m}] - xa[{m}] * s2)")
        # the block's warps add their partial sums in a fixed tree, warp 0 writes the block's
        kC, s = k * C, W // 2
        if s:
            src.append(f"    shp = cuda.shared.array({s * kC * L}, {ct})")
        while s:
            src += [f"    if w >= {s} and w < {2 * s}:", f"        for m in range({kC}):",
                    f"            shp[((w - {s}) * {kC} + m) * {L} + lane] = p[m]",
                    "    cuda.syncthreads()", f"    if w < {s}:", f"        for m in range({kC}):",
                    f"            p[m] += shp[(w * {kC} + m) * {L} + lane]"]
            s //= 2
            if s:
                src.append("    cuda.syncthreads()")
        src.append("    if w == 0:")
        src.append(f"        for i in range({k}):")
        src += store("part", f"parto + (cuda.blockIdx.x * {k} + i) * N",
                     lambda m, e: f"p[i * {C} + {m}]", I2)
    return head + "\n".join(src) + "\n"


def fits(n: int) -> bool:
    """Whether rows of n elements fit the registers of one group (warp) of lanes."""
    return -(-n // geometry()[1]) <= MAX_SLOTS


def vector_width(dtype, N: int, bufs) -> int:
    """V for runs of V contiguous elements a lane (16-byte accesses) when n is a multiple of V,
    the runs need no more slots than single elements would (or V), and every buffer in `bufs`
    starts aligned for them; else 1."""
    from funcgrad.cuda.fusion import aligned
    d = np.dtype(dtype)
    V = 4 if d.itemsize <= 4 else 2
    L = geometry()[1]
    if N % V or V * -(-N // (V * L)) > max(-(-N // L), V):
        return 1
    return V if all(aligned(b, V, runtime.SIM) for b in bufs) else 1


def run(kind, ins: list, out_shape, dtype, eps=None, acc=None, into=None) -> DeviceBuffer:
    """The row primitive `kind` of contiguous-row operands `ins` (x-like first); `acc` (rows
    shaped like x, norm backward only): the dx rows stored are out(dx) + acc; `into`: a
    contiguous buffer of the result's shape and type to store it in (softmax_xent_bwd may be
    given its x: a warp reads its row before it stores it; rows_inplace.py)."""
    from funcgrad.cuda.reduce import _reduce3
    x = ins[0]
    N = x.shape[-1]
    R = x.size // N if N else 0
    if kind == "softmax_xent_bwd" and not fits(N):   # rows wider than a warp's registers
        from funcgrad.cuda import rows_wide
        return rows_wide.xent_bwd(*ins, out=into)
    out = pool().empty(out_shape, dtype) if into is None else into
    k = PARTIALS.get(kind, 0)
    if out.size == 0:
        return out
    if R == 0:   # no rows: the column sums are zero
        return fill(out, 0)
    L = geometry()[1]
    C1 = -(-N // L)
    acc_t = (np.dtype(np.float32) if np.dtype(dtype).name in ("float16", "bfloat16")
             else np.dtype(dtype))
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
