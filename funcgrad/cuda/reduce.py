"""Deterministic reductions over any set of axes: sum, prod, max, min, argmax, argmin.

sum/prod/max/min view the operand as (A outer, R reduced, B inner) with one stride each, read in
place when the reduced axes are one run of dims (row, column and middle-axis reductions of any
shape), and run the rows or cols kernels of reduce_kernels.py (their 16-byte vector forms when
the values are float32/float64 in aligned runs: _width): narrow outputs split R into chunks
across blocks and combine the partials with a second reduction (no atomics; the chunks
depend on the shape only, so equal inputs give bit-identical outputs).

argmax/argmin view it as (K kept, R reduced) (copied to a contiguous layout first when the axes
cannot be expressed that way) and run
  row: one block per output; threads stride over r, then a block tree (warp shuffles on a GPU,
       a shared-memory tree in the simulator, which has no shuffles);
  col: one thread per output (used when the kept axis is the contiguous one), looping over r.
"""
from __future__ import annotations

import math

import numpy as np

from funcgrad.core.dtypes import dtype_kind
from funcgrad.cuda import argsplit, runtime
from funcgrad.cuda import reduce_kernels as RK
from funcgrad.cuda.arrays import DeviceBuffer, pool
from funcgrad.cuda.elementwise import HALF, contiguous, load, nbt, run, store
from funcgrad.cuda.fusion import aligned

BIG_INDEX = 2 ** 62


def acc_dtype(kind: str, dtype) -> np.dtype:
    d = np.dtype(dtype)
    if dtype_kind(d) == "f":   # 16-bit floats accumulate in float32 (as XLA does)
        return np.dtype(np.float32) if d.name in HALF else d
    return np.dtype(np.int64)


def _ident(kind, acc):
    ct = nbt(acc)
    if kind == "sum":
        return f"{ct}(0)"
    if kind == "prod":
        return f"{ct}(1)"
    hi = kind in ("max", "argmax")
    if acc.kind == "f":
        return f"{ct}({'-' if hi else ''}math.inf)"
    return str(-2 ** 63) if hi else str(2 ** 63 - 1)


def _combine(kind, acc) -> str:
    """Device function `comb(a, b)` (or `better(va, ia, vb, ib)` for arg reductions)."""
    opts = runtime.jit_opts()
    if kind in ("sum", "prod"):
        op = "+" if kind == "sum" else "*"
        return f"\n@cuda.jit(device=True, {opts})\ndef comb(a, b):\n    return a {op} b\n"
    cmp = ">" if kind in ("max", "argmax") else "<"
    if kind in ("max", "min"):
        nan = " or a != a" if acc.kind == "f" else ""
        return (f"\n@cuda.jit(device=True, {opts})\ndef comb(a, b):\n"
                f"    return a if (a {cmp} b{nan}) else b\n")
    nan = ("    if va != va:\n        return vb == vb or ia < ib\n"
           "    if vb != vb:\n        return False\n") if acc.kind == "f" else ""
    return (f"\n@cuda.jit(device=True, {opts})\ndef better(va, ia, vb, ib):\n{nan}"
            f"    if va {cmp} vb:\n        return True\n"
            "    if va == vb:\n        return ia < ib\n    return False\n")


def _row_source(kind, in_dtype, acc, out_dtype, threads, shfl):
    arg = kind.startswith("arg")
    ct, ident = nbt(acc), _ident(kind, acc)
    ld = f"{ct}({load(in_dtype, 'x[base + r * sr]')})"
    L = [_combine(kind, acc), f"\n@cuda.jit({runtime.jit_opts()})",
         "def kernel(KG, G, R, CH, x, xo, sk, sr, o, oo):",
         f"    sv = cuda.shared.array({threads}, {ct})"]
    if arg:
        L.append(f"    si = cuda.shared.array({threads}, int64)")
    L += ["    t = cuda.threadIdx.x", "    row = cuda.blockIdx.x", "    while row < KG:",
          "        k = row // G", "        g = row - k * G", "        r0 = g * CH",
          "        r1 = min(R, r0 + CH)", "        base = xo + k * sk",
          f"        acc = {ident}", f"        ai = {BIG_INDEX}" if arg else "",
          "        r = r0 + t", "        while r < r1:", f"            v = {ld}"]
    if arg:
        L += ["            if better(v, r, acc, ai):", "                acc = v",
              "                ai = r"]
    else:
        L.append("            acc = comb(acc, v)")
    L.append(f"            r += {threads}")

    def merge(a, ai, b, bi, ind):
        if arg:
            return [f"{ind}if better({b}, {bi}, {a}, {ai}):", f"{ind}    {a} = {b}",
                    f"{ind}    {ai} = {bi}"]
        return [f"{ind}{a} = comb({a}, {b})"]

    if shfl:   # warp tree, then the first warp combines the per-warp results
        nw = threads // 32
        for stage in (0, 1):
            ind = "        " if stage == 0 else "            "
            if stage == 1:
                L += ["        if t < 32:",
                      f"            acc = sv[t] if t < {nw} else {ident}"]
                if arg:
                    L.append(f"            ai = si[t] if t < {nw} else {BIG_INDEX}")
            L += [f"{ind}off = 16", f"{ind}while off > 0:",
                  f"{ind}    ov = cuda.shfl_down_sync(0xffffffff, acc, off)"]
            if arg:
                L.append(f"{ind}    oi = cuda.shfl_down_sync(0xffffffff, ai, off)")
            L += merge("acc", "ai", "ov", "oi", ind + "    ") + [f"{ind}    off //= 2"]
            if stage == 0:
                L += ["        if t % 32 == 0:", "            sv[t // 32] = acc"]
                if arg:
                    L.append("            si[t // 32] = ai")
                L.append("        cuda.syncthreads()")
        L += ["            if t == 0:",
              f"                o[oo + row] = {store(out_dtype, 'ai' if arg else 'acc')}"]
    else:      # shared-memory tree (the simulator has no warp shuffles)
        L += ["        sv[t] = acc"] + (["        si[t] = ai"] if arg else [])
        L += ["        cuda.syncthreads()", f"        s = {threads // 2}", "        while s > 0:",
              "            if t < s:", "                a = sv[t]", "                b = sv[t + s]"]
        if arg:
            L += ["                if better(b, si[t + s], a, si[t]):",
                  "                    sv[t] = b", "                    si[t] = si[t + s]"]
        else:
            L.append("                sv[t] = comb(a, b)")
        L += ["            cuda.syncthreads()", "            s //= 2", "        if t == 0:",
              f"            o[oo + row] = {store(out_dtype, 'si[0]' if arg else 'sv[0]')}"]
    L += ["        cuda.syncthreads()", "        row += cuda.gridDim.x"]
    return "\n".join(x for x in L if x) + "\n"


def _col_source(kind, in_dtype, acc, out_dtype):
    arg = kind.startswith("arg")
    ct, ident = nbt(acc), _ident(kind, acc)
    L = [_combine(kind, acc), f"\n@cuda.jit({runtime.jit_opts()})",
         "def kernel(KG, K, G, R, CH, x, xo, sk, sr, o, oo):",
         "    j = cuda.grid(1)", "    step = cuda.gridsize(1)", "    while j < KG:",
         "        k = j % K", "        g = j // K", "        r0 = g * CH",
         "        r1 = min(R, r0 + CH)", "        base = xo + k * sk", f"        acc = {ident}",
         f"        ai = {BIG_INDEX}" if arg else "", "        for r in range(r0, r1):",
         f"            v = {ct}({load(in_dtype, 'x[base + r * sr]')})"]
    if arg:
        L += ["            if better(v, r, acc, ai):", "                acc = v",
              "                ai = r"]
    else:
        L.append("            acc = comb(acc, v)")
    L += [f"        o[oo + k * G + g] = {store(out_dtype, 'ai' if arg else 'acc')}",
          "        j += step"]
    return "\n".join(x for x in L if x) + "\n"


def _collapse(shape, strides):
    """(n, stride) of a group of dims if it is one strided run, else None."""
    dims = [(n, s) for n, s in zip(shape, strides) if n != 1]
    if not dims:
        return 1, 0
    n, s = dims[-1]
    for pn, ps in reversed(dims[:-1]):
        if ps != s * n:
            return None
        n *= pn
    return n, dims[-1][1]


def _as_2d(x: DeviceBuffer, axes):
    """(buffer, K, R, sk, sr): x seen as kept x reduced."""
    kept = [d for d in range(x.ndim) if d not in axes]
    red = list(axes)
    perm = kept + red
    shape = [x.shape[d] for d in perm]
    strides = [x.strides[d] for d in perm]
    kg = _collapse(shape[:len(kept)], strides[:len(kept)])
    rg = _collapse(shape[len(kept):], strides[len(kept):])
    if kg is None or rg is None:
        x = contiguous(x.view(shape, strides, x.offset))
        K, R = math.prod(shape[:len(kept)]), math.prod(shape[len(kept):])
        return x, K, R, R, 1
    return x, kg[0], rg[0], kg[1], rg[1]


def _launch(kind, x, K, R, sk, sr, out: DeviceBuffer, G=None):
    """Reduce x (as K x R) into out (K*G elements, contiguous)."""
    acc = acc_dtype(kind, x.dtype)
    col = sk == 1 and sr != 1 and K > 1
    if G is None:
        G = 1
    CH = -(-R // G) if R else 0
    in_name, out_name = x.dtype.name, out.dtype.name
    if col:
        key = ("red_col", kind, in_name, acc.name, out_name)
        k = runtime.kernel(key, lambda: _col_source(kind, x.dtype, acc, out.dtype))
        blocks, threads = runtime.grid_1d(K * G)
        k[blocks, threads, runtime.stream()](K * G, K, G, R, CH, x.arr(), x.offset, sk, sr,
                                             out.arr(), out.offset)
    else:
        threads = runtime.reduce_threads()
        shfl = not runtime.SIM
        key = ("red_row", kind, in_name, acc.name, out_name, threads, shfl)
        k = runtime.kernel(key, lambda: _row_source(kind, x.dtype, acc, out.dtype, threads,
                                                    shfl))
        blocks = max(1, min(K * G, 2 if runtime.SIM else 65535))
        k[blocks, threads, runtime.stream()](K * G, G, R, CH, x.arr(), x.offset, sk, sr,
                                             out.arr(), out.offset)
    return out


def _as_3d(x: DeviceBuffer, axes):
    """(buffer, A, R, B, sa, sr, sb): x seen as outer x reduced x inner, read in place when the
    reduced axes are one run of dims (or the kept ones collapse), else through one copy."""
    groups = None
    if axes == tuple(range(axes[0], axes[-1] + 1)):
        lo, hi = axes[0], axes[-1] + 1
        groups = [_collapse(x.shape[a:b], x.strides[a:b])
                  for a, b in ((0, lo), (lo, hi), (hi, x.ndim))]
    if groups is None or any(g is None for g in groups):
        x2, K, R, sk, sr = _as_2d(x, axes)
        if sk == 1 and sr != 1 and K > 1:   # the kept run is the contiguous one: columns
            return x2, 1, R, K, 0, sr, 1
        return x2, K, R, 1, sk, sr, 0
    (A, sa), (R, sr), (B, sb) = groups
    return x, A, R, B, sa, sr, sb


def _geometry():
    """(rows: threads, lanes per item; cols: BX, BY; blocks cap)."""
    if runtime.SIM:
        return 8, 4, 4, 2, 2
    return 256, 32, 32, 8, 1 << 20


# the vector kernels (reduce_kernels.*_vec_source): rows T threads, L lanes an item; cols CX
# runs of V columns x RY row lanes; U runs in flight a thread. H200 (2026-11-25, graph-replayed,
# benchmarks/bench_kernels.py's clock): 4096 x 384 float32 row sum 2.34-2.38 us with L 16, U 2
# (L 32: 2.42-2.47; the scalar kernel 3.8; torch 2.9-3.2); column sum 4.2-4.3 us with CX 8,
# RY 32 and G 16-32 chunks (G 64: 5.0-5.2, G 128: 5.9-6.2; the scalar pair 7.2-12.5; torch
# 10.1-10.7); a last-block combine in one launch (threadfence + atomic counter) was no faster
# (4.3-4.5 us), so the partials keep their second launch
VEC_GEOMETRY = {"sim": (8, 4, 2, 2, 2), "gpu": (256, 16, 8, 32, 2)}


def _vec_geometry():
    return VEC_GEOMETRY["sim" if runtime.SIM else "gpu"]


def _is_cols(B, sr, sb):
    return B > 1 and abs(sb) <= abs(sr)


def _width(x, A, R, B, sa, sr, sb) -> int:
    """V (4 float32 / 2 float64 elements: 16 bytes) when the vector kernels may read x, else 1:
    values summed in their own type, a V-aligned first element, and every run of V aligned and
    inside one row (rows: R and the row starts; cols: B and the strides)."""
    d = x.dtype
    if d.kind != "f" or d.itemsize not in (4, 8) or acc_dtype("sum", d) != d:
        return 1
    V = 16 // d.itemsize
    if not aligned(x, V, runtime.SIM):
        return 1
    if _is_cols(B, sr, sb):   # (A on the grid's z: at most 65535)
        ok = sb == 1 and B % V == 0 and sa % V == 0 and sr % V == 0 and A < 65536
    else:
        ok = sr == 1 and R % V == 0 and (A == 1 or sa % V == 0) and (B == 1 or sb % V == 0)
    return V if ok else 1


def _plan(A, R, B, sr, sb, V=1):
    """("rows" | "cols", G chunks of CH): chosen from the shape (and strides) only."""
    _, L, BX, BY, _ = _geometry()
    cols = _is_cols(B, sr, sb)
    if V > 1 and cols and not runtime.SIM:   # ~400 blocks; >= 8 rows a thread
        _, _, CX, RY, _ = _vec_geometry()
        tiles = A * -(-B // (CX * V))
        G = max(1, min(-(-400 // tiles), -(-R // (8 * RY)), 65535))
        CH = -(-R // G)
        return "cols", -(-R // CH), CH
    if runtime.SIM:
        want, minch = (4, 2 * BY) if cols else (4, 2 * L)
    elif cols:   # ~8 blocks of 256 threads per SM on 132 SMs; >= 8 rows per thread
        want, minch = 1056 * BX, 8 * BY
    else:        # ~64 warps per SM; >= 64 elements per lane
        want, minch = 8448, 64 * L
    items = A * (-(-B // BX) * BX if cols else B)
    G = max(1, min(-(-want // max(items, 1)), -(-R // minch), 65536))
    CH = -(-R // G)
    if V > 1 and not cols:   # chunks of whole runs
        CH = -(-CH // V) * V
    return ("cols" if cols else "rows"), -(-R // CH), CH


def _launch3(kind, x, A, R, B, sa, sr, sb, out, G, CH, mode, V=1):
    acc = acc_dtype(kind, x.dtype)
    T, L, BX, BY, cap = _geometry()
    shfl = not runtime.SIM
    args = (G, B, R, CH, x.arr(), x.offset, sa, sb, sr, out.arr(), out.offset)
    if V > 1:
        VT, VL, CX, RY, U = _vec_geometry()
        key = ("red3v", mode, kind, x.dtype.name, acc.name, out.dtype.name, VT, VL, CX, RY, V,
               U, shfl)
        if mode == "cols":
            k = runtime.kernel(key, lambda: RK.cols_vec_source(kind, x.dtype, acc, out.dtype,
                                                               CX, RY, V, U, shfl))
            NBT = -(-B // (CX * V))
            k[(NBT, G, A), CX * RY, runtime.stream()](A * G * NBT, NBT, *args)
        else:
            flat = G == 1 and B == 1
            k = runtime.kernel(key + (flat,), lambda: RK.rows_vec_source(
                kind, x.dtype, acc, out.dtype, VT, VL, V, U, shfl, flat))
            NI = A * B * G
            k[max(1, min(-(-NI // (VT // VL)), cap)), VT, runtime.stream()](NI, *args)
        return out
    key = ("red3", mode, kind, x.dtype.name, acc.name, out.dtype.name, T, L, BX, BY)
    if mode == "cols":
        k = runtime.kernel(key, lambda: RK.cols_source(kind, x.dtype, acc, out.dtype, BX, BY))
        NBT = -(-B // BX)
        NT = A * G * NBT
        k[max(1, min(NT, cap)), BX * BY, runtime.stream()](NT, NBT, *args)
    else:
        k = runtime.kernel(key + (shfl,), lambda: RK.rows_source(kind, x.dtype, acc, out.dtype,
                                                                 T, L, shfl))
        NI = A * B * G
        k[max(1, min(-(-NI // (T // L)), cap)), T, runtime.stream()](NI, *args)
    return out


def _reduce3(kind, x, A, R, B, sa, sr, sb, out):
    V = _width(x, A, R, B, sa, sr, sb)
    mode, G, CH = _plan(A, R, B, sr, sb, V)
    if G == 1:
        return _launch3(kind, x, A, R, B, sa, sr, sb, out, 1, R, mode, V)
    # partials of a sum/prod/max/min combine with the same operation, in a fixed order
    part = pool().empty((A, G, B) if mode == "cols" else (A * B, G), acc_dtype(kind, x.dtype))
    _launch3(kind, x, A, R, B, sa, sr, sb, part, G, CH, mode, V)
    if mode == "cols":
        return _reduce3(kind, part, A, G, B, G * B, B, 1, out)
    return _reduce3(kind, part, A * B, G, 1, G, 1, 0, out)


def reduce(kind: str, x: DeviceBuffer, axes, out_dtype) -> DeviceBuffer:
    """sum / prod / max / min of x over `axes` (x non-empty), deterministic."""
    axes = tuple(sorted(axes))
    out_shape = tuple(n for d, n in enumerate(x.shape) if d not in axes)
    out = pool().empty(out_shape, out_dtype)
    if out.size == 0:
        return out
    if all(x.shape[d] == 1 for d in axes):   # nothing to combine: a cast of the values
        kept = [d for d in range(x.ndim) if d not in axes]
        src = x.view(out_shape, [x.strides[d] for d in kept], x.offset)
        return run("convert_element_type", [src], out_dtype, out=out)
    return _reduce3(kind, *_as_3d(x, axes), out)


def arg_reduce(kind: str, x: DeviceBuffer, axis: int, index_dtype) -> DeviceBuffer:
    """argmax / argmin of x along `axis` (first occurrence; NaN counts as the extreme)."""
    out_shape = tuple(n for d, n in enumerate(x.shape) if d != axis)
    out = pool().empty(out_shape, index_dtype)
    if out.size == 0:
        return out
    x2, K, R, sk, sr = _as_2d(x, (axis,))
    if argsplit.wanted(K, R, sk == 1 and sr != 1 and K > 1):   # few long rows: two passes
        acc = acc_dtype(kind, x2.dtype)
        return argsplit.arg_reduce(
            kind, x2, K, R, sk, sr, out, lambda mid, G: _launch(kind, x2, K, R, sk, sr, mid, G=G),
            acc, _combine(kind, acc), _ident(kind, acc), BIG_INDEX)
    return _launch(kind, x2, K, R, sk, sr, out)
