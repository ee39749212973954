"""Row kernels for the fused last-axis primitives of funcgrad/prims/rows.py: softmax, log_softmax,
softmax_xent, layer_norm and rms_norm, one block per row (rows of up to 1024 elements take the
warp-per-row kernels of rows.py instead, except softmax_xent, whose rows over 1024 elements take
the one-pass kernel of rows_wide.py).

Threads stride over the row and combine through a block all-reduce: warp shuffles then one
shared slot per warp on a GPU, a shared-memory tree in the simulator (no shuffles there). The
order is fixed, so results are deterministic. float16 and bfloat16 rows load their 16-bit
values, compute in float32 like the numpy impls and round once on store.
"""
from __future__ import annotations

from funcgrad.cuda import rows, runtime
from funcgrad.cuda.arrays import DeviceBuffer, pool, to_host
from funcgrad.cuda.elementwise import compute_t, contiguous, load, storer
from funcgrad.cuda.gather import error_flags


def _op(kind, a, b):
    return f"({a} + {b})" if kind == "sum" else f"({a} if ({a} > {b} or {a} != {a}) else {b})"


def allreduce(var, kind, ct, T, shfl, ind="        "):
    """Lines that replace `var` in every thread by its block-wide sum / max."""
    ident = f"{ct}(0)" if kind == "sum" else f"{ct}(-math.inf)"
    if not shfl:
        return [f"{ind}sh[t] = {var}", f"{ind}cuda.syncthreads()", f"{ind}s = {T // 2}",
                f"{ind}while s > 0:", f"{ind}    if t < s:",
                f"{ind}        sh[t] = {_op(kind, 'sh[t]', 'sh[t + s]')}",
                f"{ind}    cuda.syncthreads()", f"{ind}    s //= 2", f"{ind}{var} = sh[0]",
                f"{ind}cuda.syncthreads()"]
    # every lane must execute each shuffle (full mask): shuffle into a temporary first, never
    # inside the conditional expression of the max
    L = [f"{ind}off = 16", f"{ind}while off > 0:",
         f"{ind}    sv_ = cuda.shfl_down_sync(0xffffffff, {var}, off)",
         f"{ind}    {var} = {_op(kind, var, 'sv_')}", f"{ind}    off //= 2",
         f"{ind}if t % 32 == 0:", f"{ind}    sh[t // 32] = {var}",
         f"{ind}cuda.syncthreads()", f"{ind}if t < 32:",
         f"{ind}    {var} = sh[t] if t < {T // 32} else {ident}", f"{ind}    off = 16",
         f"{ind}    while off > 0:",
         f"{ind}        sv_ = cuda.shfl_down_sync(0xffffffff, {var}, off)",
         f"{ind}        {var} = {_op(kind, var, 'sv_')}", f"{ind}        off //= 2",
         f"{ind}    if t == 0:", f"{ind}        shb[0] = {var}",
         f"{ind}cuda.syncthreads()", f"{ind}{var} = shb[0]", f"{ind}cuda.syncthreads()"]
    return L


def _source(kind, dtype, eps, label_dtype=None):
    ct, out, T = compute_t(dtype), storer(dtype), runtime.reduce_threads()
    shfl = not runtime.SIM
    ld = load(dtype, "x[base + j]")
    args = {"softmax": "x, o", "log_softmax": "x, o", "softmax_xent": "x, lab, err, o",
            "layer_norm": "x, sc, bi, o", "rms_norm": "x, sc, o"}[kind]
    L = [f"\n@cuda.jit({runtime.jit_opts()})", f"def kernel(R, N, {args}):",
         f"    sh = cuda.shared.array({T}, {ct})", f"    shb = cuda.shared.array(1, {ct})",
         "    t = cuda.threadIdx.x", "    row = cuda.blockIdx.x", "    while row < R:",
         "        base = row * N"]

    def loop(body):
        return [f"        for j in range({'t'}, N, {T}):"] + [f"            {b}" for b in body]

    if kind in ("softmax", "log_softmax", "softmax_xent"):
        xc = load(dtype, "x[base + c]")   # the label's logit
        L += [f"        m = {ct}(-math.inf)"] + loop([f"v = {ld}",
                                                       "m = m if (m > v or m != m) else v"])
        L += allreduce("m", "max", ct, T, shfl)
        L += [f"        s = {ct}(0)"] + loop([f"s += math.exp({ld} - m)"])
        L += allreduce("s", "sum", ct, T, shfl)
        if kind == "softmax":
            L += loop([f"o[base + j] = {out}(math.exp({ld} - m) / s)"])
        elif kind == "log_softmax":
            L += ["        ls = math.log(s)"] + loop([f"o[base + j] = {out}(({ld} - m) - ls)"])
        else:
            L += ["        if t == 0:", "            c = int64(lab[row])",
                  "            if c < 0 or c >= N:", "                cuda.atomic.add(err, 0, 1)",
                  "                cuda.atomic.min(err, 1, row)",
                  f"                o[row] = {out}(math.nan)", "            else:",
                  f"                o[row] = {out}(math.log(s) - ({xc} - m))"]
    else:
        inv_n = f"({ct}(1) / {ct}(N))"
        if kind == "layer_norm":
            L += [f"        s = {ct}(0)"] + loop([f"s += {ld}"]) + allreduce("s", "sum", ct, T,
                                                                           shfl)
            L += [f"        mu = s * {inv_n}", f"        q = {ct}(0)"]
            L += loop([f"d = {ld} - mu", "q += d * d"]) + allreduce("q", "sum", ct, T, shfl)
            L += [f"        rs = {ct}(1) / math.sqrt(q * {inv_n} + {ct}({eps!r}))"]
            sc, bi = load(dtype, "sc[j]"), load(dtype, "bi[j]")
            L += loop([f"o[base + j] = {out}(({ld} - mu) * rs * {sc} + {bi})"])
        else:
            L += [f"        q = {ct}(0)"] + loop([f"v = {ld}", "q += v * v"])
            L += allreduce("q", "sum", ct, T, shfl)
            L += [f"        rs = {ct}(1) / math.sqrt(q * {inv_n} + {ct}({eps!r}))"]
            L += loop([f"o[base + j] = {out}({ld} * rs * {load(dtype, 'sc[j]')})"])
    L += ["        cuda.syncthreads()", "        row += cuda.gridDim.x"]
    return "\n".join(L) + "\n"


def _run(kind, x: DeviceBuffer, extra, out: DeviceBuffer, eps=None, label_dtype=None):
    N = x.shape[-1]
    R = x.size // N if N else 0
    if R == 0:
        return out
    key = ("fused", kind, x.dtype.name, eps, label_dtype)
    k = runtime.kernel(key, lambda: _source(kind, x.dtype, eps, label_dtype))
    blocks = max(1, min(R, 2 if runtime.SIM else 65535))
    k[blocks, runtime.reduce_threads(), runtime.stream()](R, N, x.arr(), *extra, out.arr())
    return out


def _flat(b: DeviceBuffer):
    b = contiguous(b)
    if b.offset:   # kernels index from 0: re-base through a copy-free view is not possible
        from funcgrad.cuda.elementwise import run
        b = run("copy", [b], b.dtype)
    return b


def softmax(x, log=False):
    kind = "log_softmax" if log else "softmax"
    if x.ndim and rows.fits(x.shape[-1]):     # a warp per row, the row in registers
        return rows.run(kind, [x], x.shape, x.dtype)
    x = _flat(x)
    out = pool().empty(x.shape, x.dtype)
    return _run(kind, x, [], out)


def softmax_xent(x, labels):
    x, labels = _flat(x), _flat(labels)
    n = x.shape[-1]
    out = pool().empty(labels.shape, x.dtype) if rows.fits(n) or not x.size else None
    err = error_flags()
    if x.size and not rows.fits(n):   # wide rows: one online pass (rows_wide.py)
        from funcgrad.cuda import rows_wide
        out = rows_wide.xent(x, labels, err)
    elif x.size:
        _run("softmax_xent", x, [labels.arr(), err.arr()], out, label_dtype=labels.dtype.name)
    elif labels.size:   # no classes: every label is out of range
        return _bad_label(int(to_host(labels).reshape(-1)[0]), n)
    runtime.check_now_or_later(err, lambda e: _check_labels(e, labels, n))
    return out


def _check_labels(err, labels, n):
    count, pos = (int(v) for v in to_host(err))
    if count:
        _bad_label(int(to_host(labels).reshape(-1)[pos]), n)


def _bad_label(label, n):
    from funcgrad.core import user_frame_src
    raise IndexError(f"softmax_xent: label {label} is out of range for {n} classes"
                     f"\n  at {user_frame_src()}")


def layer_norm(x, scale, bias, eps):
    if x.ndim and rows.fits(x.shape[-1]):
        return rows.run("layer_norm", [x, scale, bias], x.shape, x.dtype, float(eps))
    x, scale, bias = _flat(x), _flat(scale), _flat(bias)
    out = pool().empty(x.shape, x.dtype)
    return _run("layer_norm", x, [scale.arr(), bias.arr()], out, eps=float(eps))


def rms_norm(x, scale, eps):
    if x.ndim and rows.fits(x.shape[-1]):
        return rows.run("rms_norm", [x, scale], x.shape, x.dtype, float(eps))
    x, scale = _flat(x), _flat(scale)
    out = pool().empty(x.shape, x.dtype)
    return _run("rms_norm", x, [scale.arr()], out, eps=float(eps))
