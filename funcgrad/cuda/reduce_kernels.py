"""Kernel sources of the sum/prod/max/min reductions over an (A, R, B) view (reduce R).

Two kernels, both with a fixed combination order (bit-identical results run to run, no atomics):
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

from . import runtime
from .elementwise import compute_t, nbt


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


def rows_source(kind, in_dtype, acc, out_dtype, T, L, shfl) -> str:
    """kernel(NI, G, B, R, CH, x, xo, sa, sb, sr, o, oo): item = (a * B + b) * G + g."""
    ct, idn, out = nbt(acc), ident(kind, acc), nbt(out_dtype)
    gpb = T // L

    def load(r):
        return f"{ct}({compute_t(in_dtype)}(x[base + ({r}) * sr]))"

    L_ = [_comb(kind, acc), f"\n@cuda.jit({runtime.jit_opts()})",
          "def kernel(NI, G, B, R, CH, x, xo, sa, sb, sr, o, oo):",
          f"    sh = cuda.shared.array({T}, {ct})",
          "    t = cuda.threadIdx.x", f"    grp = t // {L}", f"    lane = t - grp * {L}",
          f"    it0 = cuda.blockIdx.x * {gpb}",
          "    while it0 < NI:",
          "        item = it0 + grp",
          f"        a0 = {idn}", f"        a1 = {idn}", f"        a2 = {idn}", f"        a3 = {idn}",
          "        if item < NI:",
          "            ab = item // G", "            g = item - ab * G",
          "            a = ab // B", "            b = ab - a * B",
          "            r = g * CH", "            r1 = min(R, r + CH)", "            r += lane",
          "            base = xo + a * sa + b * sb"]
    L_ += _accumulate(load, L, "            ")
    L_ += ["        acc = comb(comb(a0, a1), comb(a2, a3))"]
    if shfl:    # butterfly inside the warp: every lane ends with the same combination
        L_ += [f"        off = {L // 2}", "        while off > 0:",
               "            v = cuda.shfl_xor_sync(0xffffffff, acc, off)",
               "            acc = comb(acc, v)", "            off //= 2"]
    else:       # shared-memory tree per group (barriers reached by every thread)
        L_ += ["        sh[t] = acc", "        cuda.syncthreads()", f"        s = {L // 2}",
               "        while s > 0:", "            if lane < s:",
               "                sh[t] = comb(sh[t], sh[t + s])", "            cuda.syncthreads()",
               "            s //= 2", "        acc = sh[t - lane]", "        cuda.syncthreads()"]
    L_ += ["        if lane == 0 and item < NI:", f"            o[oo + item] = {out}(acc)",
           f"        it0 += cuda.gridDim.x * {gpb}"]
    return "\n".join(L_) + "\n"


def cols_source(kind, in_dtype, acc, out_dtype, BX, BY) -> str:
    """kernel(NT, NBT, G, B, R, CH, x, xo, sa, sb, sr, o, oo): tile = (a * G + g) * NBT + bt,
    output (a * G + g) * B + b."""
    ct, idn, out = nbt(acc), ident(kind, acc), nbt(out_dtype)

    def load(r):
        return f"{ct}({compute_t(in_dtype)}(x[base + ({r}) * sr]))"

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
