"""Matrix-vector products of a decode step: one row x [K] times a row-major weight w [K, N].

cuBLAS takes `x @ w` with w row-major as its non-transposed gemv (column-major w^T), whose
kernel read GPT-2 small's layer weights at about 1.3 TB/s on an H200 (D1: 48 calls a token at
5.6 us each). Here each block of 8 warps takes 128 columns of w and KC rows (a warp's lanes
read 4 coalesced 128-byte runs of each of its rows, every load of a block issued before the
first sum), adds its 8 warps' partial sums in shared memory and writes one partial row; a
second kernel adds the KS = K / KC partial rows in order, with the bias (and a residual) of a
dense layer. Deterministic (no atomics, a fixed order); float32 only; x's leading dims all 1;
anything else (and FUNCGRAD_GEMV=0) keeps the cuBLAS path.
"""
from __future__ import annotations

import os

import numpy as np

from funcgrad.cuda import runtime
from funcgrad.cuda.arrays import DeviceBuffer, pool

ENABLED = os.environ.get("FUNCGRAD_GEMV", "0") == "1"
COLS = 128        # columns per block: 32 lanes x 4
WARPS = 8


def _partial_source(kc: int) -> str:
    rows = kc // WARPS
    L = [f"@cuda.jit({runtime.jit_opts()})",
         "def kernel(N, K, x, xo, w, wo, part, po):",
         f"    sm = cuda.shared.array(({WARPS}, {COLS}), float32)",
         "    t = cuda.threadIdx.x", "    lane = t % 32", "    wp = t // 32",
         f"    n0 = cuda.blockIdx.x * {COLS}", f"    k0 = cuda.blockIdx.y * {kc}",
         "    a0 = float32(0.0)", "    a1 = float32(0.0)", "    a2 = float32(0.0)",
         "    a3 = float32(0.0)",
         f"    if n0 + {COLS} <= N and k0 + {kc} <= K:",
         "        xb = xo + k0 + wp", "        b = wo + (k0 + wp) * N + n0 + lane"]
    for i in range(rows):       # every load first: all of them in flight at once
        L.append(f"        x{i} = x[xb + {WARPS * i}]")
        L += [f"        w{i}_{j} = w[b + {WARPS * i} * N + {32 * j}]" for j in range(4)]
    for j in range(4):
        L.append(f"        a{j} = " + " + ".join(f"x{i} * w{i}_{j}" for i in range(rows)))
    L += ["    else:", f"        for i in range({rows}):", f"            k = k0 + wp + {WARPS} * i",
          "            if k < K:", "                xv = x[xo + k]",
          "                b = wo + k * N + n0 + lane"]
    for j in range(4):
        L += [f"                if n0 + lane + {32 * j} < N:",
              f"                    a{j} += xv * w[b + {32 * j}]"]
    L += [f"    sm[wp, lane + {32 * j}] = a{j}" for j in range(4)]
    L += ["    cuda.syncthreads()", f"    if t < {COLS}:",
          "        s = " + " + ".join(f"sm[{r}, t]" for r in range(WARPS)),
          "        n = n0 + t", "        if n < N:",
          "            part[po + cuda.blockIdx.y * N + n] = s"]
    return "\n".join(L) + "\n"


def _finish_source(bias: bool, res: bool) -> str:
    L = [f"@cuda.jit({runtime.jit_opts()})",
         "def kernel(N, KS, part, po, o, oo, b, bo, r, ro):",
         "    n = cuda.grid(1)", "    while n < N:", "        s = part[po + n]",
         "        for j in range(1, KS):", "            s += part[po + j * N + n]"]
    if res:
        L.append("        s = r[ro + n] + s")
    if bias:
        L.append("        s = s + b[bo + n]")
    L += ["        o[oo + n] = s", "        n += cuda.gridsize(1)"]
    return "\n".join(L) + "\n"


def dot(x: DeviceBuffer, w: DeviceBuffer, dimension_numbers, out_aval,
        bias: DeviceBuffer | None = None, residual: DeviceBuffer | None = None):
    """x . w (+ bias over the last axis, + residual) for one row x [1.., K] and a C-contiguous
    w [K, N] (float32), or None, having allocated and launched nothing, for any other product."""
    (lc, rc), (lb, rb) = dimension_numbers
    if (lb or rb or w.ndim != 2 or tuple(rc) != (0,) or tuple(lc) != (x.ndim - 1,)
            or x.dtype != np.float32 or w.dtype != np.float32 or out_aval.dtype != np.float32
            or any(n != 1 for n in x.shape[:-1]) or not x.is_contiguous()
            or not w.is_contiguous()):
        return None
    K, N = w.shape
    if K < 64 or N < COLS:
        return None
    for extra in (bias, residual):
        if extra is not None and (extra.size != N or not extra.is_contiguous()
                                  or extra.dtype != np.float32):
            return None
    gx = -(-N // COLS)
    kc = 64 if gx * -(-K // 64) >= 200 else 32
    ks = -(-K // kc)
    part = pool().empty((ks, N), np.float32)
    out = pool().empty(out_aval.shape, out_aval.dtype)
    k = runtime.kernel(("gemv_part", kc), lambda: _partial_source(kc))
    k[(gx, ks), WARPS * 32, runtime.stream()](N, K, x.arr(), x.offset, w.arr(), w.offset,
                                              part.arr(), part.offset)
    f = runtime.kernel(("gemv_finish", bias is not None, residual is not None),
                       lambda: _finish_source(bias is not None, residual is not None))
    b = bias if bias is not None else out
    r = residual if residual is not None else out
    blocks, threads = runtime.grid_1d(N)
    f[blocks, threads, runtime.stream()](N, ks, part.arr(), part.offset, out.arr(), out.offset,
                                         b.arr(), b.offset, r.arr(), r.offset)
    return out
