"""Kernel sources of the sum/prod/max/min reductions over an (A, R, B) view (reduce R).

Two kernels, each in a scalar and a vector form (rows_vec_source / cols_vec_source: runs of 4
float32 or 2 float64 read by one 16-byte load on a GPU), all with a fixed combination order
(bit-identical results run to run, no atomics):
  rows: a group of L lanes (a warp on a GPU) per output item (a, b, chunk g of R); lanes stride
        over r with four independent accumulators (four loads in flight), then a butterfly of
        warp shuffles (a shared-memory tree in the simulator, which has no shuffles);
  cols: a block of BX x BY threads per tile of BX outputs along b (the contiguous axis: each
        warp reads whole 128-byte lines) and one chunk g of R; each row of BY threads strides
        over r, then a shared-memory tree combines the BY partials.
Chunks split long reductions so that narrow outputs still fill the GPU; the partials are
combined by a second reduction of the same kind (funcgrad/cuda/reduce.py picks the chunks from
the shape only, so the order never varies).
"""
from __future__ import annotations

from funcgrad.cuda import runtime
from funcgrad.cuda.elementwise import load as ld_expr
from funcgrad.cuda.elementwise import nbt, storer


def ident(kind, acc) -> str:
    """The identity element of `kind` in the accumulator type."""
    ct = nbt(acc)
    if kind == "sum":
        return f"{ct}(0)"
    if kind == "prod":
        return f"{ct}(1)"
    hi = kind == "max"
    if acc.kind == "f":
        return f"{ct}({'-' if hi else ''}math.inf)"
    return str(-2 ** 63) if hi else str(2 ** 63 - 1)


def _comb(kind, acc) -> str:
    """Device function comb(a, b); max/min propagate NaN like numpy."""
    opts = runtime.jit_opts()
    if kind in ("sum", "prod"):
        op = "+" if kind == "sum" else "*"
        body = f"    return a {op} b\n"
    else:
        cmp = ">" if kind == "max" else "<"
        nan = " or a != a" if acc.kind == "f" else ""
        body = f"    return a if (a {cmp} b{nan}) else b\n"
    return f"\n@cuda.jit(device=True, {opts})\ndef comb(a, b):\n{body}"


def _accumulate(load, step, ind):
    """Lines: four accumulators a0..a3 over r = start, start + step, ... < r1."""
    return [f"{ind}while r + {3 * step} < r1:",
            f"{ind}    a0 = comb(a0, {load('r')})",
            f"{ind}    a1 = comb(a1, {load(f'r + {step}')})",
            f"{ind}    a2 = comb(a2, {load(f'r + {2 * step}')})",
            f"{ind}    a3 = comb(a3, {load(f'r + {3 * step}')})",
            f"{ind}    r += {4 * step}",
            f"{ind}while r < r1:",
            f"{ind}    a0 = comb(a0, {load('r')})",
            f"{ind}    r += {step}"]


def _rows_open(kind, acc, T, L, pre=""):
    """The rows kernels' opening lines: groups of L lanes, a grid-stride loop over items."""
    return [pre, _comb(kind, acc), f"\n@cuda.jit({runtime.jit_opts()})",
            "def kernel(NI, G, B, R, CH, x, xo, sa, sb, sr, o, oo):",
            f"    sh = cuda.shared.array({T}, {nbt(acc)})",
            "    t = cuda.threadIdx.x", f"    grp = t // {L}", f"    lane = t - grp * {L}",
            f"    it0 = cuda.blockIdx.x * {T // L}",
            "    while it0 < NI:",
            "        item = it0 + grp"]


# item = (a * B + b) * G + g -> its run [r, r1) of the reduced axis and its start `base`
_ROWS_ITEM = ["            ab = item // G", "            g = item - ab * G",
              "            a = ab // B", "            b = ab - a * B",
              "            r = g * CH", "            r1 = min(R, r + CH)",
              "            base = xo + a * sa + b * sb"]


def _rows_close(T, L, shfl, out):
    """The rows kernels' closing lines: the L lanes' `acc` combined (all lanes get the same
    value), lane 0 stores it, the loop advances."""
    if shfl:    # butterfly inside the warp: every lane ends with the same combination
        lines = [f"        off = {L // 2}", "        while off > 0:",
                 "            acc = comb(acc, cuda.shfl_xor_sync(0xffffffff, acc, off))",
                 "            off //= 2"]
    else:       # shared-memory tree per group (barriers reached by every thread)
        lines = ["        sh[t] = acc", "        cuda.syncthreads()", f"        s = {L // 2}",
                 "        while s > 0:", "            if lane < s:",
                 "                sh[t] = comb(sh[t], sh[t + s])", "            cuda.syncthreads()",
                 "            s //= 2", "        acc = sh[t - lane]", "        cuda.syncthreads()"]
    return lines + ["        if lane == 0 and item < NI:", f"            o[oo + item] = {out}(acc)",
                    f"        it0 += cuda.gridDim.x * {T // L}"]


def rows_source(kind, in_dtype, acc, out_dtype, T, L, shfl) -> str:
    """kernel(NI, G, B, R, CH, x, xo, sa, sb, sr, o, oo): item = (a * B + b) * G + g."""
    ct, idn = nbt(acc), ident(kind, acc)

    def load(r):
        return f"{ct}({ld_expr(in_dtype, f'x[base + ({r}) * sr]')})"

    L_ = _rows_open(kind, acc, T, L)
    L_ += [f"        a{e} = {idn}" for e in range(4)]
    L_ += ["        if item < NI:"] + _ROWS_ITEM + ["            r += lane"]
    L_ += _accumulate(load, L, "            ")
    L_ += ["        acc = comb(comb(a0, a1), comb(a2, a3))"]
    L_ += _rows_close(T, L, shfl, storer(out_dtype))
    return "\n".join(x for x in L_ if x) + "\n"


def cols_source(kind, in_dtype, acc, out_dtype, BX, BY) -> str:
    """kernel(NT, NBT, G, B, R, CH, x, xo, sa, sb, sr, o, oo): tile = (a * G + g) * NBT + bt,
    output (a * G + g) * B + b."""
    ct, idn, out = nbt(acc), ident(kind, acc), storer(out_dtype)

    def load(r):
        return f"{ct}({ld_expr(in_dtype, f'x[base + ({r}) * sr]')})"

    L_ = [_comb(kind, acc), f"\n@cuda.jit({runtime.jit_opts()})",
          "def kernel(NT, NBT, G, B, R, CH, x, xo, sa, sb, sr, o, oo):",
          f"    sh = cuda.shared.array({BX * BY}, {ct})",
          "    t = cuda.threadIdx.x", f"    ty = t // {BX}", f"    tx = t - ty * {BX}",
          "    tile = cuda.blockIdx.x",
          "    while tile < NT:",
          "        ag = tile // NBT", "        bt = tile - ag * NBT",
          "        a = ag // G", "        g = ag - a * G", f"        b = bt * {BX} + tx",
          f"        a0 = {idn}", f"        a1 = {idn}", f"        a2 = {idn}", f"        a3 = {idn}",
          "        if b < B:",
          "            r = g * CH", "            r1 = min(R, r + CH)", "            r += ty",
          "            base = xo + a * sa + b * sb"]
    L_ += _accumulate(load, BY, "            ")
    L_ += ["        sh[t] = comb(comb(a0, a1), comb(a2, a3))", "        cuda.syncthreads()",
           f"        s = {BY // 2}", "        while s > 0:", "            if ty < s:",
           f"                sh[t] = comb(sh[t], sh[t + s * {BX}])",
           "            cuda.syncthreads()", "            s //= 2",
           "        if ty == 0 and b < B:", f"            o[oo + ag * B + b] = {out}(sh[t])",
           "        cuda.syncthreads()", "        tile += cuda.gridDim.x"]
    return "\n".join(L_) + "\n"


def _vec_load(in_dtype, ct, V, vec, at, ind):
    """Lines setting v_0 .. v_{V-1} to x[at .. at + V - 1] (one V-wide load on a GPU)."""
    if vec:
        return [f"{ind}v_ = ldv{V}(x, {at})"] + [
            f"{ind}v_{e} = {ct}({ld_expr(in_dtype, f'v_[{e}]')})" for e in range(V)]
    return [f"{ind}v_{e} = {ct}({ld_expr(in_dtype, f'x[{at} + {e}]')})" for e in range(V)]


def rows_vec_source(kind, in_dtype, acc, out_dtype, T, L, V, U, shfl, flat) -> str:
    """The rows kernel (same arguments) for contiguous reduced runs (sr == 1) cut in runs of V
    aligned elements: a lane reads runs lane * V + k * V * L, U runs in flight (one 16-byte
    load each on a GPU), with V accumulators. R and CH must be multiples of V and every row
    start (xo + a * sa + b * sb) V-aligned. `flat` (G == B == 1): an item is a row a, and
    the kernel divides nothing (64-bit divisions cost ~0.7 us of a 3 us row sum)."""
    ct, idn = nbt(acc), ident(kind, acc)
    VL, vec = V * L, not runtime.SIM
    L_ = _rows_open(kind, acc, T, L, f"from funcgrad.cuda.vecmem import ldv{V}\n" if vec else "")
    L_ += [f"        a{e} = {idn}" for e in range(V)]
    L_ += ["        if item < NI:"]
    if flat:
        L_ += ["            r = 0", "            r1 = R", "            base = xo + item * sa"]
    else:
        L_ += _ROWS_ITEM
    L_ += [f"            r += lane * {V}", "            while r < r1:"]
    for k in range(U):   # U runs in flight: the loads do not wait for each other's sums
        L_ += [f"                if r + {k * VL} < r1:"]
        L_ += _vec_load(in_dtype, ct, V, vec, f"base + r + {k * VL}", " " * 20)
        L_ += [f"                    a{e} = comb(a{e}, v_{e})" for e in range(V)]
    L_ += [f"                r += {U * VL}"]
    tree = [f"a{e}" for e in range(V)]
    while len(tree) > 1:   # (a0 . a1) . (a2 . a3): a fixed order
        tree = [f"comb({tree[i]}, {tree[i + 1]})" for i in range(0, len(tree), 2)]
    L_ += [f"        acc = {tree[0]}"] + _rows_close(T, L, shfl, storer(out_dtype))
    return "\n".join(x for x in L_ if x) + "\n"


def cols_vec_source(kind, in_dtype, acc, out_dtype, CX, RY, V, U, shfl) -> str:
    """The cols kernel (same arguments) over tiles of W = CX * V outputs for V-aligned columns
    (sb == 1; B, sa, sr and xo multiples of V), launched on a grid (NBT tiles, G chunks, A
    outer indices): thread (ry, cx) reads runs of V columns cx * V of rows r0 + ry + k * RY,
    U rows in flight. On a GPU (RY a multiple of 32 // CX) the row lanes of a warp combine by
    shuffles, then the warps' partials in shared memory in warp order; in the simulator thread
    ry's partials in ry order."""
    ct, idn, out = nbt(acc), ident(kind, acc), storer(out_dtype)
    W, T, vec = CX * V, CX * RY, not runtime.SIM
    P = T // 32 if shfl else RY          # partial rows a column combines at the end
    L_ = [f"from funcgrad.cuda.vecmem import ldv{V}\n" if vec else "", _comb(kind, acc),
          f"\n@cuda.jit({runtime.jit_opts()})",
          "def kernel(NT, NBT, G, B, R, CH, x, xo, sa, sb, sr, o, oo):",
          f"    sh = cuda.shared.array({P * W}, {ct})",
          "    t = cuda.threadIdx.x", f"    ry = t // {CX}", f"    cx = t - ry * {CX}",
          "    bt = cuda.blockIdx.x", "    g = cuda.blockIdx.y", "    a = cuda.blockIdx.z",
          "    ag = a * G + g", f"    c = bt * {W} + cx * {V}"]
    nhead = len(L_)
    L_ += [f"        a{e} = {idn}" for e in range(V)]
    L_ += ["        if c < B:",
           "            r = g * CH", "            r1 = min(R, r + CH)", "            r += ry",
           "            base = xo + a * sa + c",
           "            while r < r1:"]
    for k in range(U):
        L_ += [f"                if r + {k * RY} < r1:"]
        L_ += _vec_load(in_dtype, ct, V, vec, f"base + (r + {k * RY}) * sr", " " * 20)
        L_ += [f"                    a{e} = comb(a{e}, v_{e})" for e in range(V)]
    L_ += [f"                r += {U * RY}"]
    if shfl:   # lanes l and l ^ CX, l ^ 2 CX, ... hold the same columns of other rows
        L_ += [f"        off = {CX}", "        while off < 32:"]
        L_ += [f"            a{e} = comb(a{e}, cuda.shfl_xor_sync(0xffffffff, a{e}, off))"
               for e in range(V)]
        L_ += ["            off *= 2", f"        if t % 32 < {CX}:"]
        L_ += [f"            sh[(t // 32) * {W} + cx * {V} + {e}] = a{e}" for e in range(V)]
    else:
        L_ += [f"        sh[ry * {W} + cx * {V} + {e}] = a{e}" for e in range(V)]
    L_ += ["        cuda.syncthreads()", "        j = t",
           f"        while j < {W} and bt * {W} + j < B:", "            s = sh[j]"]
    L_ += [f"            s = comb(s, sh[{p * W} + j])" for p in range(1, P)]
    L_ += [f"            o[oo + ag * B + bt * {W} + j] = {out}(s)", f"            j += {T}"]
    head, rest = L_[:nhead], L_[nhead:]   # the body was written one level deeper
    return "\n".join(x for x in head + [y[4:] for y in rest] if x) + "\n"
