"""dot_general as a batched GEMM: operands viewed as (batch, rows, contract) and
(batch, contract, cols) with one stride per group (copied first only when their axes cannot be
grouped that way), then one cuBLAS call (blas.py: real GPUs with nvmath-python or CuPy, float
dtypes, `precision` picking fp32/TF32/bf16) or else a tiled numba kernel generated with fully
unrolled register blocking (the simulator, integers, installs without a binding; it computes in
the operand dtype whatever the precision).

Kernel shape (GPU: 128x128 tiles, BK=8, 256 threads, each thread an 8x8 block of C held in 64
scalar registers; 64x64 tiles with 4x4 per thread when 128-tiles would leave SMs idle):
  - the A and B tiles are staged through double-buffered shared memory, one barrier per k-step;
  - global loads are mapped so that consecutive threads read consecutive addresses, whichever of
    an operand's two axes is the contiguous one (transposed operands need no copy);
  - a thread's rows/cols are strided by the thread-grid size, so shared reads are conflict-free.
The accumulation order is fixed (k ascending), so results are deterministic. The simulator runs
the same generator with 8x8 tiles and 2x2 per thread.
"""
from __future__ import annotations

import math
import os

from funcgrad.compile import switches
from funcgrad.core.dtypes import dtype_kind
from funcgrad.cuda import blas, runtime
from funcgrad.cuda.arrays import DeviceBuffer, pool
from funcgrad.cuda.elementwise import compute_t, contiguous, load, storer
from funcgrad.cuda.reduce import _collapse

GPU_TILES = {"big": (128, 128, 8, 8, 8), "small": (64, 64, 8, 4, 4)}
SIM_TILES = (8, 8, 4, 2, 2)


def _acc_t(dtype) -> str:
    return compute_t(dtype) if dtype_kind(dtype) == "f" else "int64"


def _source(dtype, out_dtype, a_mode, b_mode, BM, BN, BK, TM, TN):
    ct, out = _acc_t(dtype), storer(out_dtype)
    RM, RN = BM // TM, BN // TN
    NT = RM * RN
    LA, LB = BM * BK // NT, BK * BN // NT
    assert NT % BK == 0 and NT % BM == 0 and NT % BN == 0 and LA * NT == BM * BK
    P = 4 if BM >= 32 else 0
    L = [f"\n@cuda.jit({runtime.jit_opts()})",
         "def kernel(A, ao, sab, sam, sak, B, bo, sbb, sbk, sbn, C, co, M, N, K, S, KS):",
         f"    As = cuda.shared.array((2, {BK}, {BM + P}), {ct})",
         f"    Bs = cuda.shared.array((2, {BK}, {BN + P}), {ct})",
         "    tid = cuda.threadIdx.x", "    bz = cuda.blockIdx.z",
         f"    m0 = cuda.blockIdx.y * {BM}", f"    n0 = cuda.blockIdx.x * {BN}",
         f"    tx = tid % {RN}", f"    ty = tid // {RN}",
         # blockIdx.z = batch * S + split: split s sums k in [s KS, (s + 1) KS)
         "    bb = bz // S", "    k_lo = (bz - bb * S) * KS", "    k_hi = min(K, k_lo + KS)",
         "    abase = ao + bb * sab", "    bbase = bo + bb * sbb"]
    # which (row, k) / (k, col) element each of a thread's loads fetches
    for q in range(LA):
        if a_mode == "k":
            L += [f"    ak{q} = tid % {BK}", f"    am{q} = tid // {BK} + {q * (NT // BK)}"]
        else:
            L += [f"    am{q} = tid % {BM}", f"    ak{q} = tid // {BM} + {q * (NT // BM)}"]
        L += [f"    aok{q} = m0 + am{q} < M", f"    aoff{q} = abase + (m0 + am{q}) * sam",
              f"    ra{q} = {ct}(0)"]
    for q in range(LB):
        if b_mode == "n":
            L += [f"    bn{q} = tid % {BN}", f"    bk{q} = tid // {BN} + {q * (NT // BN)}"]
        else:
            L += [f"    bk{q} = tid % {BK}", f"    bn{q} = tid // {BK} + {q * (NT // BK)}"]
        L += [f"    bok{q} = n0 + bn{q} < N", f"    boff{q} = bbase + (n0 + bn{q}) * sbn",
              f"    rb{q} = {ct}(0)"]
    for i in range(TM):
        L.append("    " + "; ".join(f"c{i}_{j} = {ct}(0)" for j in range(TN)))

    def loads(ind, k0):
        out_ = []
        for q in range(LA):
            out_ += [f"{ind}kk = k_lo + {k0} + ak{q}",
                     (f"{ind}ra{q} = {ct}({load(dtype, f'A[aoff{q} + kk * sak]')}) "
                      f"if (aok{q} and kk < k_hi) else {ct}(0)")]
        for q in range(LB):
            out_ += [f"{ind}kk = k_lo + {k0} + bk{q}",
                     (f"{ind}rb{q} = {ct}({load(dtype, f'B[boff{q} + kk * sbk]')}) "
                      f"if (bok{q} and kk < k_hi) else {ct}(0)")]
        return out_

    def stores(ind, buf):
        return ([f"{ind}As[{buf}, ak{q}, am{q}] = ra{q}" for q in range(LA)]
                + [f"{ind}Bs[{buf}, bk{q}, bn{q}] = rb{q}" for q in range(LB)])

    L += [f"    nk = (k_hi - k_lo + {BK - 1}) // {BK}", "    if nk > 0:"]
    L += loads("        ", "0") + stores("        ", "0")
    L += ["    cuda.syncthreads()", "    for t in range(nk):", "        cur = t % 2",
          "        if t + 1 < nk:"]
    L += loads("            ", f"(t + 1) * {BK}")
    for kk in range(BK):
        L += [f"        a{i} = As[cur, {kk}, ty + {i * RM}]" for i in range(TM)]
        L += [f"        b{j} = Bs[cur, {kk}, tx + {j * RN}]" for j in range(TN)]
        for i in range(TM):
            L.append("        " + "; ".join(f"c{i}_{j} += a{i} * b{j}" for j in range(TN)))
    L += ["        if t + 1 < nk:"] + stores("            ", "1 - cur")
    L += ["        cuda.syncthreads()", "    cbase = co + bz * M * N"]
    for i in range(TM):
        L += [f"    row = m0 + ty + {i * RM}", "    if row < M:"]
        for j in range(TN):
            L += [f"        col = n0 + tx + {j * RN}", "        if col < N:",
                  f"            C[cbase + row * N + col] = {out}(c{i}_{j})"]
    return "\n".join(L) + "\n"


def _runs(x: DeviceBuffer, groups):
    """(size, stride) of each group of x's dims, or None when some group is not a run."""
    res = []
    for g in groups:
        c = _collapse([x.shape[d] for d in g], [x.strides[d] for d in g])
        if c is None:
            return None
        res.append(c)
    return res


def _grouped(x: DeviceBuffer, groups):
    """x viewed as len(groups) dims (sizes, strides), copying only if some group is not a run."""
    res = _runs(x, groups)
    if res is None:
        perm = [d for g in groups for d in g]
        return _grouped_copy(x, perm, [x.shape[d] for d in perm],
                             [x.strides[d] for d in perm], groups)
    return x, res


def _grouped_copy(x, perm, shape, strides, groups):
    x = contiguous(x.view(shape, strides, x.offset))
    sizes = []
    i = 0
    for g in groups:
        sizes.append(math.prod(shape[i:i + len(g)]))
        i += len(g)
    st = [sizes[1] * sizes[2], sizes[2], 1]
    return x, list(zip(sizes, st))


def dot_general(x: DeviceBuffer, y: DeviceBuffer, dimension_numbers, out_aval,
                precision=None) -> DeviceBuffer:
    """dot_general's CUDA lowering: a pool buffer holding x . y (precision: the primitive's
    param, None/"float32"/"tensorfloat32"/"bfloat16", honoured by the cuBLAS path)."""
    (lc, rc), (lb, rb) = dimension_numbers
    lf = [d for d in range(x.ndim) if d not in lc and d not in lb]
    rf = [d for d in range(y.ndim) if d not in rc and d not in rb]
    xa, ((Bn, sab), (M, sam), (K, sak)) = _grouped(x, [list(lb), lf, list(lc)])
    yb, ((_, sbb), (K2, sbk), (N, sbn)) = _grouped(y, [list(rb), list(rc), rf])
    out = pool().empty(out_aval.shape, out_aval.dtype)
    if out.size == 0:
        return out
    if blas.gemm(xa, (sab, sam, sak), yb, (sbb, sbk, sbn), out, Bn, M, N, K, precision):
        return out
    a_mode = "k" if (sak == 1 or sam != 1) else "m"
    b_mode = "n" if (sbn == 1 or sbk != 1) else "k"
    tiles, S = _geometry(Bn, M, N, K)
    BM, BN, BK, TM, TN = tiles
    KS = -(-K // S) if S > 1 else max(K, 1)
    KS = -(-KS // BK) * BK if S > 1 else KS
    S = -(-K // KS) if S > 1 else 1
    # with S > 1 each split writes a partial product; a second kernel sums them in order
    dst = out if S == 1 else pool().empty((Bn, S, M, N), _acc_t(x.dtype))
    key = ("gemm", x.dtype.name, dst.dtype.name, a_mode, b_mode, tiles)
    k = runtime.kernel(key, lambda: _source(x.dtype, dst.dtype, a_mode, b_mode, *tiles))
    grid = (-(-N // BN), -(-M // BM), Bn * S)
    k[grid, (BM // TM) * (BN // TN), runtime.stream()](
        xa.arr(), xa.offset, sab, sam, sak, yb.arr(), yb.offset, sbb, sbk, sbn, dst.arr(),
        dst.offset, M, N, K, S, KS)
    if S > 1:
        _sum_splits(dst, out, Bn, S, M * N)
    return out


def _unbatched(x: DeviceBuffer, y: DeviceBuffer, dimension_numbers):
    """(M, N, K, x strides, y strides) of a dot_general without batch dims whose operands'
    free and contracted axes each form one run (no copy); None otherwise."""
    (lc, rc), (lb, rb) = dimension_numbers
    if lb or rb or x.size == 0 or y.size == 0 or not blas.available(x.dtype):
        return None
    xg = _runs(x, [[d for d in range(x.ndim) if d not in lc], list(lc)])
    yg = _runs(y, [list(rc), [d for d in range(y.ndim) if d not in rc]])
    if xg is None or yg is None:
        return None   # an operand needing a copy: leave it to dot_general
    ((M, sam), (K, sak)), ((_, sbk), (N, sbn)) = xg, yg
    return M, N, K, (0, sam, sak), (0, sbk, sbn)


def dot_bias(x: DeviceBuffer, y: DeviceBuffer, dimension_numbers, out_aval, precision,
             bias: DeviceBuffer, residual: DeviceBuffer | None = None) -> DeviceBuffer | None:
    """x . y + bias over the output's last axis (+ residual) as one cuBLASLt GEMM with the BIAS
    epilogue (epilogue.py), for a dot_general without batch dims whose rhs keeps one axis;
    None, having launched nothing, when cuBLASLt cannot take it (the caller runs the product
    and the bias add apart)."""
    (_, rc), _ = dimension_numbers
    g = _unbatched(x, y, dimension_numbers)
    if g is None or y.ndim - len(rc) != 1:
        return None
    M, N, K, xs, ys = g
    out = pool().empty(out_aval.shape, out_aval.dtype)
    if blas.gemm_bias(x, xs, y, ys, out, M, N, K, precision, bias, residual):
        return out
    return None


def dot_bgrad(x: DeviceBuffer, y: DeviceBuffer, dimension_numbers, out_aval, precision,
              side: str, grad_aval):
    """(x . y, the `side` operand ("x" or "y") summed over the contracted axes) as one
    cuBLASLt GEMM with a bias-gradient epilogue (epilogue.py), for a dot_general without batch
    dims; None, having launched nothing, when cuBLASLt cannot take it."""
    g = _unbatched(x, y, dimension_numbers)
    if g is None:
        return None
    M, N, K, xs, ys = g
    out = pool().empty(out_aval.shape, out_aval.dtype)
    grad = pool().empty(grad_aval.shape, grad_aval.dtype)
    if blas.gemm_bgrad(x, xs, y, ys, out, grad, M, N, K, precision, side):
        return out, grad
    return None


# Split-K on real GPUs is opt-in (FUNCGRAD_SPLIT_K=1) until it has been checked and timed on
# one; the simulator always exercises it.
SPLIT_K = os.environ.get("FUNCGRAD_SPLIT_K", "0") == "1"
switches.register(__name__, "SPLIT_K")   # a change keys jit's shared cache apart


def _geometry(Bn, M, N, K):
    """(tiles, splits of K): big tiles when they fill the GPU, split-K when the grid is small."""
    if runtime.SIM:   # split whenever K is long enough, so the tests run the split path too
        return SIM_TILES, (2 if K >= 12 else 1)
    big, small = GPU_TILES["big"], GPU_TILES["small"]

    def blocks(t):
        return -(-M // t[0]) * -(-N // t[1]) * Bn
    if not SPLIT_K:   # the configuration measured on an H200 (RESULTS.md)
        return (big if blocks(big) >= 132 else small), 1
    smax = max(1, min(8, K // 256))
    nb = blocks(big)
    if nb >= 132:
        return big, 1
    if nb * smax >= 132:
        return big, min(smax, -(-264 // nb))
    return small, min(smax, max(1, -(-264 // blocks(small))))


def _sum_source(acc, out):
    return f"""
@cuda.jit({runtime.jit_opts()})
def kernel(n, MN, S, P, po, o, oo):
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < n:
        b = i // MN
        base = po + b * S * MN + (i - b * MN)
        acc = P[base]
        for s in range(1, S):
            acc += P[base + s * MN]
        o[oo + i] = {storer(out)}(acc)
        i += step
"""


def _sum_splits(part: DeviceBuffer, out: DeviceBuffer, Bn, S, MN):
    """out[b, :] = sum over s of part[b, s, :], s ascending (deterministic)."""
    n = Bn * MN
    k = runtime.kernel(("gemm_splitsum", part.dtype.name, out.dtype.name),
                       lambda: _sum_source(part.dtype, out.dtype))
    blocks, threads = runtime.grid_1d(n)
    k[blocks, threads, runtime.stream()](n, MN, S, part.arr(), part.offset, out.arr(), out.offset)
