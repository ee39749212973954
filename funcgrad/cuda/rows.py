"""Warp-per-row kernels for the fused row primitives (forward and backward, funcgrad/fused*.py).

A group of L lanes (a warp on a GPU, 4 threads in the simulator) owns a row: lane l holds
elements l, l + L, ... in registers (a local array of C = ceil(n / L) slots), so each row is
read once and written once; row sums and maxima are a butterfly of warp shuffles (a
shared-memory tree in the simulator, which has no shuffles), with no block barrier on a GPU.
The norm backward kernels also keep each lane's per-column sums of ct * xhat and ct over the
group's rows in registers, write one partial row per group, and a column reduction
(funcgrad/cuda/reduce.py) adds the partials in a fixed order: deterministic, no atomics.
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


def geometry():
    """(threads per block, lanes per row). 128-thread blocks: W2's 4096 x 384 layer norm
    forward 10.65 -> 8.51 us against 256 (backward 16.62 -> 16.46; torch 9.53 / 17.56 in the
    same run, H200 2026-11-25, benchmarks/rows_probe.py)."""
    return (8, 4) if runtime.SIM else (128, 32)


def _group_reduce(var, op, L, shfl, ind):
    """Lines replacing `var` in every lane of a group by the group's sum / max."""
    comb = (lambda a, b: f"{a} + {b}") if op == "sum" else (
        lambda a, b: f"{a} if ({a} > {b} or {a} != {a}) else {b}")
    if shfl:
        return [f"{ind}off = {L // 2}", f"{ind}while off > 0:",
                f"{ind}    v_ = cuda.shfl_xor_sync(0xffffffff, {var}, off)",
                f"{ind}    {var} = {comb(var, 'v_')}", f"{ind}    off //= 2"]
    return [f"{ind}sh[t] = {var}", f"{ind}cuda.syncthreads()", f"{ind}s_ = {L // 2}",
            f"{ind}while s_ > 0:", f"{ind}    if lane < s_:",
            f"{ind}        sh[t] = {comb('sh[t]', 'sh[t + s_]')}",
            f"{ind}    cuda.syncthreads()", f"{ind}    s_ //= 2", f"{ind}{var} = sh[t - lane]",
            f"{ind}cuda.syncthreads()"]


def source(kind, dtype, C, eps=None, acc=False) -> str:
    """kernel(R, N, RPW, <operand, offset>...[, r, ro], o, oo[, part]) for one kind; `acc`
    (norm backward kinds): dx rows stored as dx + r (rounded to the dtype first, as an add
    after the kernel would: funcgrad/cuda/rows_fuse.py)."""
    T, L = geometry()
    W, shfl = T // L, not runtime.SIM
    ct, out = compute_t(dtype), nbt(dtype)
    k = PARTIALS.get(kind, 0)
    sig = ["R", "N", "RPW"] + [f"{a}, {a}o" for a in ARGS[kind]] + (["r, ro"] if acc else [])
    sig += ["o", "oo"]
    sig += ["part", "parto"] if k else []
    I1, I2, I3 = "        ", "            ", "                "
    L_ = [f"\n@cuda.jit({runtime.jit_opts()})", f"def kernel({', '.join(sig)}):",
          "    t = cuda.threadIdx.x", f"    w = t // {L}", f"    lane = t - w * {L}",
          f"    sh = cuda.shared.array({T}, {ct})",
          f"    row0 = (cuda.blockIdx.x * {W} + w) * RPW"]
    arrays = {"layer_norm": ["xa"], "rms_norm": ["xa"], "softmax": ["xa"],
              "log_softmax": ["xa"], "softmax_bwd": ["ya", "ca"], "log_softmax_bwd": ["ya", "ca"],
              "softmax_xent_bwd": ["xa"], "layer_norm_bwd": ["xa", "ga", "sa"],
              "rms_norm_bwd": ["xa", "ga", "sa"]}[kind] + [f"p{i}" for i in range(k)]
    L_ += [f"    {a} = cuda.local.array({C}, {ct})" for a in arrays]
    inv_n = f"({ct}(1) / {ct}(max(N, 1)))"

    def each(body, ind=I1, guard=False):
        """A loop over the lane's slots m (column j); body lines at one more indent."""
        lines = [f"{ind}for m in range({C}):", f"{ind}    j = lane + m * {L}"]
        if guard:
            lines.append(f"{ind}    if j < N:")
            return lines + [f"{ind}        {b}" for b in body]
        return lines + [f"{ind}    {b}" for b in body]

    def load(name, arr, fill_value=f"{ct}(0)"):
        return [f"{name}[m] = {ct}({arr}[{arr}o + base + j]) if (act and j < N) "
                f"else {fill_value}"]

    if k:   # per-column operands and partial sums live in registers for every row
        L_ += each([f"sa[m] = {ct}(sc[sco + j]) if j < N else {ct}(0)"]
                   + [f"p{i}[m] = {ct}(0)" for i in range(k)], ind="    ")
    L_ += ["    for i in range(RPW):", f"{I1}row = row0 + i", f"{I1}act = row < R",
           f"{I1}base = row * N"]
    if kind in ("softmax", "log_softmax"):
        L_ += each(load("xa", "x", f"{ct}(-math.inf)"))
        L_ += [f"{I1}mx = {ct}(-math.inf)"] + each(["mx = mx if (mx > xa[m] or mx != mx) "
                                                    "else xa[m]"])
        L_ += _group_reduce("mx", "max", L, shfl, I1)
        L_ += [f"{I1}s = {ct}(0)"] + each(["if act and j < N:", "    s += math.exp(xa[m] - mx)"])
        L_ += _group_reduce("s", "sum", L, shfl, I1)
        res = ("math.exp(xa[m] - mx) / s" if kind == "softmax"
               else "(xa[m] - mx) - math.log(s)")
        L_ += [f"{I1}if act:"] + each([f"o[oo + base + j] = {out}({res})"], I2, guard=True)
    elif kind in ("layer_norm", "rms_norm"):
        # two passes over the row in registers, as the numpy impl: mean, then centred squares
        L_ += each(load("xa", "x"))
        if kind == "layer_norm":
            L_ += [f"{I1}mu = {ct}(0)"] + each(["mu += xa[m]"])
            L_ += _group_reduce("mu", "sum", L, shfl, I1) + [f"{I1}mu = mu * {inv_n}"]
            L_ += each([f"xa[m] = xa[m] - mu if j < N else {ct}(0)"])
        L_ += [f"{I1}q = {ct}(0)"] + each(["q += xa[m] * xa[m]"])
        L_ += _group_reduce("q", "sum", L, shfl, I1)
        L_ += [f"{I1}rs = {ct}(1) / math.sqrt(q * {inv_n} + {ct}({eps!r}))"]
        y = f"xa[m] * rs * {ct}(sc[sco + j])" + (
            f" + {ct}(bi[bio + j])" if kind == "layer_norm" else "")
        L_ += [f"{I1}if act:"] + each([f"o[oo + base + j] = {out}({y})"], I2, guard=True)
    elif kind in ("softmax_bwd", "log_softmax_bwd"):
        L_ += each(load("ya", "y") + load("ca", "c"))
        L_ += [f"{I1}s = {ct}(0)"]
        if kind == "softmax_bwd":
            L_ += each(["s += ya[m] * ca[m]"]) + _group_reduce("s", "sum", L, shfl, I1)
            L_ += [f"{I1}if act:"] + each([f"o[oo + base + j] = {out}(ya[m] * (ca[m] - s))"],
                                          I2, guard=True)
        else:
            L_ += each(["s += ca[m]"]) + _group_reduce("s", "sum", L, shfl, I1)
            L_ += [f"{I1}if act:"] + each(
                [f"o[oo + base + j] = {out}(ca[m] - math.exp(ya[m]) * s)"], I2, guard=True)
    elif kind == "softmax_xent_bwd":
        L_ += each(load("xa", "x", f"{ct}(-math.inf)"))
        L_ += [f"{I1}mx = {ct}(-math.inf)"] + each(["mx = mx if (mx > xa[m] or mx != mx) "
                                                    "else xa[m]"])
        L_ += _group_reduce("mx", "max", L, shfl, I1)
        L_ += [f"{I1}s = {ct}(0)"] + each(["if act and j < N:", "    xa[m] = math.exp(xa[m] - mx)",
                                           "    s += xa[m]"])
        L_ += _group_reduce("s", "sum", L, shfl, I1)
        L_ += [f"{I1}if act:", f"{I2}cv = {ct}(cr[cro + row])", f"{I2}lb = int64(lab[labo + row])"]
        L_ += each([f"o[oo + base + j] = {out}(cv * (xa[m] / s - ({ct}(1) if j == lb else "
                    f"{ct}(0))))"], I2, guard=True)
    else:
        center = kind == "layer_norm_bwd"
        L_ += each(load("xa", "x") + load("ga", "c"))
        if center:
            L_ += [f"{I1}mu = {ct}(0)"] + each(["mu += xa[m]"])
            L_ += _group_reduce("mu", "sum", L, shfl, I1) + [f"{I1}mu = mu * {inv_n}"]
            L_ += each(["xa[m] = xa[m] - mu if j < N else {ct}(0)".format(ct=ct)])
        L_ += [f"{I1}q = {ct}(0)"] + each(["q += xa[m] * xa[m]"])
        L_ += _group_reduce("q", "sum", L, shfl, I1)
        L_ += [f"{I1}rs = {ct}(1) / math.sqrt(q * {inv_n} + {ct}({eps!r}))",
               f"{I1}s1 = {ct}(0)", f"{I1}s2 = {ct}(0)"]
        L_ += each(["xa[m] = xa[m] * rs", "g = ga[m] * sa[m]", "s1 += g", "s2 += g * xa[m]",
                    "p0[m] += ga[m] * xa[m]"] + (["p1[m] += ga[m]"] if center else []))
        if center:
            L_ += _group_reduce("s1", "sum", L, shfl, I1) + [f"{I1}s1 = s1 * {inv_n}"]
        L_ += _group_reduce("s2", "sum", L, shfl, I1) + [f"{I1}s2 = s2 * {inv_n}"]
        dx = "rs * (ga[m] * sa[m] - s1 - xa[m] * s2)" if center else (
            "rs * (ga[m] * sa[m] - xa[m] * s2)")
        if acc:
            dx = f"{ct}({out}({dx})) + {ct}(r[ro + base + j])"
        L_ += [f"{I1}if act:"] + each([f"o[oo + base + j] = {out}({dx})"], I2, guard=True)
        L_ += ["    gw = cuda.blockIdx.x * {W} + w".format(W=W)]
        L_ += each([f"part[parto + (gw * {k} + {i}) * N + j] = p{i}[m]" for i in range(k)], "    ",
                   guard=True)
    return "\n".join(L_) + "\n"


def _rows_per_group(kind, R):
    if runtime.SIM:
        return 2
    return max(1, -(-R // (1024 if kind in PARTIALS else 1 << 17)))


# rows longer than this many elements per lane use the block-per-row kernels of fused.py
MAX_SLOTS = 32


def fits(n: int) -> bool:
    """Whether rows of n elements fit the registers of one group (warp) of lanes."""
    return -(-n // geometry()[1]) <= MAX_SLOTS


def run(kind, ins: list, out_shape, dtype, eps=None, acc=None) -> DeviceBuffer:
    """The row primitive `kind` of contiguous-row operands `ins` (x-like first); `acc` (norm
    backward kinds): an array shaped like x added to the dx rows."""
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
    T, L = geometry()
    W, C = T // L, -(-N // L)
    RPW = _rows_per_group(kind, R)
    NB = -(-R // (W * RPW))
    key = ("rows", kind, np.dtype(dtype).name, C, eps, T, runtime.SIM) + (
        ("acc",) if acc is not None else ())
    kern = runtime.kernel(key, lambda: source(kind, dtype, C, eps, acc is not None))
    args = [R, N, RPW]
    # held until the kernel is queued
    ins = [contiguous(b) for b in ins + ([acc] if acc is not None else [])]
    for b in ins:
        args += [b.arr(), b.offset]
    args += [out.arr(), out.offset]
    if k:
        pt = np.dtype(np.float32) if np.dtype(dtype) == np.float16 else np.dtype(dtype)
        part = pool().empty((NB * W, k * N), pt)
        args += [part.arr(), part.offset]
        kern[NB, T, runtime.stream()](*args)
        vec = out.view((k * N,), (1,), out.offset + R * N)
        _reduce3("sum", part, 1, NB * W, k * N, 0, k * N, 1, vec)
    else:
        kern[NB, T, runtime.stream()](*args)
    return out
