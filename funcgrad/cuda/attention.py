"""Flash-attention kernels for funcgrad/attention_prim.py: forward, stats, dq and dkv.

One block per (row tile, head, batch). The rows are queries (forward, stats, dq) or keys (dkv);
the other side streams through shared memory in tiles of BT. Each row belongs to LN threads
("lanes"), each lane taking every LN-th streamed element: a lane keeps its row's query (or key)
and its accumulators in scalar registers (the generator unrolls the head dims), runs its own
online softmax (running max, running sum), and the lanes merge through shared memory at the end
in a fixed order, so results are deterministic. The backward recomputes the probabilities from
the saved logsumexp (FlashAttention-2): no T x S buffer anywhere. q/k/v/o/do are read through
their strides (heads split out of a fused qkv projection need no copy); outputs are
C-contiguous. Accumulation is in float32 for float16 and float32 operands, float64 for float64.
"""
from __future__ import annotations

import numpy as np

from . import runtime
from .arrays import DeviceBuffer, from_host, pool
from .elementwise import compute_t, contiguous, fill, nbt

GPU_GEOMETRY = (32, 4)   # rows per block, lanes per row (128 threads)
SIM_GEOMETRY = (2, 2)    # the simulator: 4 threads, tiles of 2, so every path runs on tiny shapes
_SMEM_BYTES = 48 * 1024


def _geometry(mode, h, hv, itemsize):
    """(rows per block, lanes per row, streamed tile, shared floats for tiles/scratch)."""
    br, ln = SIM_GEOMETRY if runtime.SIM else GPU_GEOMETRY
    width = {"fwd": hv, "stats": 0, "dq": h, "dkv": h + hv}[mode]
    for bt in ((2,) if runtime.SIM else (64, 32, 16, 8)):
        tile = bt * (h + 1) + (0 if mode == "stats" else bt * (hv + 1))
        tile += 2 * bt if mode == "dkv" else 0
        words = max(tile, br * (width + 1), 1)
        if (words + 3 * br * ln) * itemsize <= _SMEM_BYTES or bt == 8:
            return br, ln, bt, words
    raise AssertionError("unreachable")


def _operand(name):
    """Kernel parameters of a strided rank-4 operand: array, offset, four strides."""
    return f"{name.upper()}a, {name}o, {name}s0, {name}s1, {name}s2, {name}s3"


def _at(name, i0, i1, i2, i3):
    return (f"{name.upper()}a[{name}o + ({i0}) * {name}s0 + ({i1}) * {name}s1 + ({i2}) * "
            f"{name}s2 + ({i3}) * {name}s3]")


def _dot(lines, ind, var, regs, base, n, ct):
    """var = sum_d regs{d} * sm[base + d], in four independent partial sums (ILP)."""
    if n == 0:
        lines.append(f"{ind}{var} = {ct}(0)")
        return
    w = min(4, n)
    for d in range(n):
        op = "=" if d < w else "+="
        lines.append(f"{ind}{var}_{d % w} {op} {regs}{d} * sm[{base} + {d}]")
    parts = [f"{var}_{i}" for i in range(w)]
    while len(parts) > 1:
        parts = [f"({parts[i]} + {parts[i + 1]})" if i + 1 < len(parts) else parts[i]
                 for i in range(0, len(parts), 2)]
    lines.append(f"{ind}{var} = {parts[0]}")


def _tile_load(ind, op, pos, limit, head, width, base, bt, nt, ct):
    """Cooperative load of rows [c0, c0 + bt) of operand `op` (head `head`) into
    sm[base + j * (width + 1) + d] (unrolling it made the code slower to compile and to run)."""
    return [f"{ind}for i in range(tid, {bt * width}, {nt}):",
            f"{ind}    j = i // {width}", f"{ind}    d = i - j * {width}",
            f"{ind}    {pos}_ = c0 + j",
            f"{ind}    sm[{base} + j * {width + 1} + d] = "
            f"{ct}({_at(op, 'b', pos + '_', head, 'd')}) if {pos}_ < {limit} else {ct}(0)"]


def _source(mode, dtype, st_dtype, h, hv, causal):
    ct, out = compute_t(dtype), nbt(dtype)
    st_out = nbt(st_dtype)
    br, ln, bt, words = _geometry(mode, h, hv, dtype.itemsize if ct != "float32" else 4)
    nt = br * ln
    ops = {"fwd": ["q", "k", "v"], "stats": ["q", "k", "o", "g"], "dq": ["q", "k", "v", "g"],
           "dkv": ["q", "k", "v", "g"]}[mode]
    outs = {"fwd": "O", "stats": "ST", "dq": "DQ", "dkv": "DKV"}[mode]
    extra = ", ST, sto" if mode in ("dq", "dkv") else ""
    L = [f"\n@cuda.jit({runtime.jit_opts()})",
         f"def kernel({', '.join(_operand(x) for x in ops)}{extra}, {outs}, outo, T, S, N, G, "
         "scale_):",
         f"    sm = cuda.shared.array({words}, {ct})",
         f"    sml = cuda.shared.array({3 * nt}, {ct})",
         "    tid = cuda.threadIdx.x", f"    r = tid // {ln}", f"    l = tid - r * {ln}",
         f"    row0 = cuda.blockIdx.x * {br}", "    row = row0 + r", "    b = cuda.blockIdx.z",
         f"    sc = {ct}(scale_)", f"    NEG = {ct}(-math.inf)"]
    I = "    "
    if mode != "dkv":
        L += ["    n = cuda.blockIdx.y", "    kh = n // G", "    ok = row < T",
              "    t = row if ok else 0"]
        L += [f"    q{d} = {ct}({_at('q', 'b', 't', 'n', d)})" for d in range(h)]
        lim = f"min(S, row0 + {br})" if causal else "S"
        # the key/value tiles: keys [c0, c0 + BT) of head kh
        tile_loads = _tile_load(I + "    ", "k", "s", "S", "kh", h, 0, bt, nt, ct)
        if mode != "stats":
            tile_loads += _tile_load(I + "    ", "v", "s", "S", "kh", hv, bt * (h + 1), bt, nt,
                                     ct)
        if mode in ("fwd", "stats"):
            L += [f"    m = NEG", f"    ls = {ct}(0)"]
            if mode == "fwd":
                L += [f"    a{e} = {ct}(0)" for e in range(hv)]
        else:
            L += [f"    g{e} = {ct}({_at('g', 'b', 't', 'n', e)})" for e in range(hv)]
            L += ["    sti = sto + ((b * N + n) * T + t) * 2", f"    lse = {ct}(ST[sti])",
                  f"    dl = {ct}(ST[sti + 1])"]
            L += [f"    a{d} = {ct}(0)" for d in range(h)]
        L += [f"    lim = {lim}", f"    for c0 in range(0, lim, {bt}):"] + tile_loads
        L += ["        cuda.syncthreads()", "        if ok:",
              f"            for j in range(l, min({bt}, lim - c0), {ln}):"]
        J = "                "
        if causal:
            L += [f"{J}if c0 + j > t:", f"{J}    break"]
        _dot(L, J, "x", "q", f"j * {h + 1}", h, ct)
        L.append(f"{J}x *= sc")
        vb = f"{bt * (h + 1)} + j * {hv + 1}"
        if mode == "fwd":
            L += [f"{J}if x > m:", f"{J}    c = math.exp(m - x)", f"{J}    m = x",
                  f"{J}    ls = ls * c + {ct}(1)"]
            L += [f"{J}    a{e} = a{e} * c + sm[{vb} + {e}]" for e in range(hv)]
            L += [f"{J}else:", f"{J}    p = math.exp(x - m)", f"{J}    ls += p"]
            L += [f"{J}    a{e} += p * sm[{vb} + {e}]" for e in range(hv)]
        elif mode == "stats":
            L += [f"{J}if x > m:", f"{J}    ls = ls * math.exp(m - x) + {ct}(1)", f"{J}    m = x",
                  f"{J}else:", f"{J}    ls += math.exp(x - m)"]
        else:
            L.append(f"{J}p = math.exp(x - lse)")
            _dot(L, J, "dp", "g", vb, hv, ct)
            L.append(f"{J}ds = p * (dp - dl)")
            L += [f"{J}a{d} += ds * sm[j * {h + 1} + {d}]" for d in range(h)]
        L.append("        cuda.syncthreads()")
        if mode in ("fwd", "stats"):
            # merge the lanes' (max, sum) pairs: M = max of maxima, sum of rescaled sums
            L += ["    sml[tid] = m", f"    sml[{nt} + tid] = ls", "    cuda.syncthreads()",
                  "    M = NEG", f"    for i in range({ln}):",
                  f"        M = max(M, sml[r * {ln} + i])", f"    tot = {ct}(0)",
                  f"    for i in range({ln}):", f"        mi = sml[r * {ln} + i]",
                  "        if mi > NEG:",
                  f"            tot += sml[{nt} + r * {ln} + i] * math.exp(mi - M)",
                  f"    f = math.exp(m - M) if m > NEG else {ct}(0)"]
        width = {"fwd": hv, "stats": 0, "dq": h}[mode]
        scale_out = {"fwd": "", "dq": " * sc"}.get(mode, "")
    else:
        L += ["    kh = cuda.blockIdx.y", "    ok = row < S", "    s = row if ok else 0"]
        L += [f"    k{d} = {ct}({_at('k', 'b', 's', 'kh', d)})" for d in range(h)]
        L += [f"    v{e} = {ct}({_at('v', 'b', 's', 'kh', e)})" for e in range(hv)]
        L += [f"    a{d} = {ct}(0)" for d in range(h + hv)]
        qb, gb = 0, bt * (h + 1)
        sb = gb + bt * (hv + 1)
        start = "row0" if causal else "0"
        L += ["    for gi in range(G):", "        n = kh * G + gi",
              f"        for c0 in range({start}, T, {bt}):",
              ] + _tile_load("            ", "q", "t", "T", "n", h, 0, bt, nt, ct) + \
            _tile_load("            ", "g", "t", "T", "n", hv, gb, bt, nt, ct) + [
              f"            for j in range(tid, {bt}, {nt}):", "                t = c0 + j",
              "                if t < T:",
              "                    sti = sto + ((b * N + n) * T + t) * 2",
              f"                    sm[{sb} + 2 * j] = {ct}(ST[sti])",
              f"                    sm[{sb} + 2 * j + 1] = {ct}(ST[sti + 1])",
              "            cuda.syncthreads()", "            if ok:",
              f"                for j in range(l, min({bt}, T - c0), {ln}):"]
        J = "                    "
        if causal:
            L += [f"{J}if c0 + j < s:", f"{J}    continue"]
        _dot(L, J, "x", "k", f"j * {h + 1}", h, ct)
        L += [f"{J}x *= sc", f"{J}p = math.exp(x - sm[{sb} + 2 * j])"]
        L += [f"{J}a{h + e} += p * sm[{gb} + j * {hv + 1} + {e}]" for e in range(hv)]
        _dot(L, J, "dp", "v", f"{gb} + j * {hv + 1}", hv, ct)
        L.append(f"{J}ds = p * (dp - sm[{sb} + 2 * j + 1])")
        L += [f"{J}a{d} += ds * sm[j * {h + 1} + {d}]" for d in range(h)]
        L.append("            cuda.syncthreads()")
        width = h + hv
        scale_out = None
    # the lanes' accumulators, summed in lane order into shared scratch (row r: r * (W + 1))
    fac = " * f" if mode == "fwd" else ""
    for i in range(ln):
        if width == 0:
            break
        op = "=" if i == 0 else "+="
        L += [f"    if l == {i}:"]
        L += [f"        sm[r * {width + 1} + {d}] {op} a{d}{fac}" for d in range(width)]
        L.append("    cuda.syncthreads()")
    if mode == "fwd":
        L += ["    if ok:", f"        inv = {ct}(1) / tot if tot > 0 else {ct}(0)",
              f"        ob = outo + ((b * T + t) * N + n) * {hv}",
              f"        for e in range(l, {hv}, {ln}):",
              f"            O[ob + e] = {out}(sm[r * {hv + 1} + e] * inv)"]
    elif mode == "stats":
        L += [f"    dsum = {ct}(0)", "    if ok:", f"        for e in range(l, O_HV, {ln}):",
              f"            dsum += {ct}({_at('o', 'b', 't', 'n', 'e')}) * "
              f"{ct}({_at('g', 'b', 't', 'n', 'e')})",
              f"    sml[{2 * nt} + tid] = dsum", "    cuda.syncthreads()",
              "    if ok and l == 0:", f"        dt = {ct}(0)", f"        for i in range({ln}):",
              f"            dt += sml[{2 * nt} + r * {ln} + i]",
              "        sti = outo + ((b * N + n) * T + t) * 2",
              f"        ST[sti] = {st_out}(M + math.log(tot)) if tot > 0 else {st_out}(NEG)",
              f"        ST[sti + 1] = {st_out}(dt)"]
        L = [x.replace("O_HV", str(hv)) for x in L]
    elif mode == "dq":
        L += ["    if ok:", f"        ob = outo + ((b * T + t) * N + n) * {h}",
              f"        for d in range(l, {h}, {ln}):",
              f"            DQ[ob + d] = {out}(sm[r * {h + 1} + d]{scale_out})"]
    else:
        L += ["    if ok:", f"        ob = outo + ((b * S + s) * (N // G) + kh) * {h + hv}",
              f"        for d in range(l, {h + hv}, {ln}):",
              f"            w = sm[r * {h + hv + 1} + d]",
              f"            DKV[ob + d] = {out}(w * sc if d < {h} else w)"]
    return "\n".join(L) + "\n"


def _args(x: DeviceBuffer):
    return [x.arr(), x.offset, *x.strides]


def _launch(mode, ops, extra, out, q, k, v_dim, scale, causal, st_dtype):
    b, t, n, h = q.shape
    s, kh = k.shape[1], k.shape[2]
    key = ("attention", mode, q.dtype.name, h, v_dim, bool(causal), GPU_GEOMETRY)
    kern = runtime.kernel(key, lambda: _source(mode, q.dtype, st_dtype, h, v_dim, causal))
    br, ln, _, _ = _geometry(mode, h, v_dim, q.dtype.itemsize)
    rows, heads = (s, kh) if mode == "dkv" else (t, n)
    grid = (-(-rows // br), heads, b)
    args = [a for x in ops for a in _args(x)]
    extra = [a for e in extra for a in (e.arr(), e.offset)]
    kern[grid, br * ln, runtime.stream()](*args, *extra, out.arr(), out.offset,
                                          t, s, n, n // kh, float(scale))
    return out


def _empty(shape, dtype, zero):
    out = pool().empty(shape, dtype)
    return fill(out, 0) if zero and out.size else out


def attention(q, k, v, scale, causal, aval):
    out = pool().empty(aval.shape, aval.dtype)
    if out.size == 0:
        return out
    if k.shape[1] == 0:   # no keys: every row is zero (the composed softmax . v)
        return fill(out, 0)
    return _launch("fwd", [q, k, v], [], out, q, k, v.shape[3], scale, causal, None)


def stats(q, k, o, do, scale, causal, aval):
    out = pool().empty(aval.shape, aval.dtype)
    if out.size == 0:
        return out
    if k.shape[1] == 0:
        st = np.zeros(aval.shape, aval.dtype)
        st[..., 0] = -np.inf
        return from_host(st)
    return _launch("stats", [q, k, o, do], [], out, q, k, o.shape[3], scale, causal,
                   aval.dtype)


def dq(q, k, v, do, st, scale, causal, aval):
    out = pool().empty(aval.shape, aval.dtype)
    if out.size == 0:
        return out
    if k.shape[1] == 0:
        return fill(out, 0)
    return _launch("dq", [q, k, v, do], [contiguous(st)], out, q, k, v.shape[3], scale,
                   causal, st.dtype)


def dkv(q, k, v, do, st, scale, causal, aval):
    out = pool().empty(aval.shape, aval.dtype)
    if out.size == 0:
        return out
    if q.shape[1] == 0 or q.shape[0] == 0:
        return fill(out, 0)
    return _launch("dkv", [q, k, v, do], [contiguous(st)], out, q, k, v.shape[3], scale,
                   causal, st.dtype)


def _lowerings():
    from .. import attention_prim as A

    def prm(params):
        return params["scale"], params["causal"]
    return {
        A.attention_p: lambda bufs, params, aval: attention(*bufs, *prm(params), aval),
        A.attention_stats_p: lambda bufs, params, aval: stats(*bufs, *prm(params), aval),
        A.attention_dq_p: lambda bufs, params, aval: dq(*bufs, *prm(params), aval),
        A.attention_dkv_p: lambda bufs, params, aval: dkv(*bufs, *prm(params), aval),
    }


LOWERINGS = _lowerings()
