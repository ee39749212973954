"""Convolution and window kernels: conv_general_dilated, reduce_window sum/max/min, and the
select-and-gather / select-and-scatter pair of max-pool gradients.

On a GPU with libcudnn a float convolution and both its gradients run on cuDNN
(conv_cudnn.py); the kernels below serve the rest (integers, a wider preferred_element_type,
geometry cuDNN does not take), the simulator, and FUNCGRAD_CUDNN=0.
A convolution with many taps per output (>= 16 MACs) runs as im2col into a patch matrix plus
the tiled GEMM of matmul.py (weights read in place unless converted to a wider result
dtype); a small one as a direct convolution, one output element per thread iteration.

Every kernel is a grid-stride loop with one output element per iteration, generated per
(number of spatial axes, dtypes) and reading its operands through their strides (any layout,
transposed or reversed views included, no copies). Taps are visited in row-major window order
and sums accumulate in that order in the compute type (float16 in float32, integers in int64),
so results are deterministic. Padding and dilation are index arithmetic: a tap at padded
position p reads input p // dilation when p >= 0, p % dilation == 0 and p // dilation < size.
select_and_scatter_add uses no atomics: each operand element visits the windows that contain
it in increasing order, recomputes their selection, and adds the sources of those selecting it
(the order numpy's add.at uses).
"""
from __future__ import annotations

import math

import numpy as np

from funcgrad.compile import switches
from funcgrad.core import ShapedArray
from funcgrad.cuda import arrays, conv_cudnn, matmul, runtime
from funcgrad.cuda import elementwise as ew
from funcgrad.cuda.arrays import DeviceBuffer, pool
from funcgrad.cuda.elementwise import compute_t, nbt
from funcgrad.prims import conv as C
from funcgrad.prims import windows as W


def _acc_t(dtype) -> str:
    return compute_t(dtype) if np.dtype(dtype).kind == "f" else "int64"


def _lit(value, ct: str) -> str:
    """A typed literal of the compute type (inf for float identities)."""
    if isinstance(value, float) and math.isinf(value):
        return f"{ct}({'-' if value < 0 else ''}math.inf)"
    return f"{ct}({int(value) if ct.startswith(('int', 'uint')) else float(value)!r})"


def _decompose(L, dims, out, ind="        "):
    """Code that splits the flat index i into row-major coordinates q0.. over sizes `dims`."""
    L.append(f"{ind}r = i")
    for d in range(len(dims) - 1, -1, -1):
        L += [f"{ind}{out}{d} = r % {dims[d]}", f"{ind}r = r // {dims[d]}"]


def _run(key, make, n, *args):
    k = runtime.kernel(key, make)
    blocks, threads = runtime.grid_1d(n)
    k[blocks, threads, runtime.stream()](n, *args)


# ---------------------------------------------------------------------------------------------
# conv_general_dilated: one output element per iteration, taps with bounds/dilation checks
# ---------------------------------------------------------------------------------------------

def _conv_source(nsp: int, out_dtype) -> str:
    ct, out = _acc_t(out_dtype), nbt(out_dtype)
    sp = range(nsp)
    geo = [f"{a}{d}" for d in sp for a in ("od", "idm", "kd", "st", "pl", "ld", "rd")]
    args = (["n", "x", "xo", "xsn", "xsc"] + [f"xs{d}" for d in sp] + ["w", "wo", "wso", "wsi"]
            + [f"ws{d}" for d in sp] + ["o", "oo", "osn", "osc"] + [f"os{d}" for d in sp]
            + ["NO", "O", "CG", "OGF", "OGB"] + geo)
    L = [f"\n@cuda.jit({runtime.jit_opts()})", f"def kernel({', '.join(args)}):",
         "    i = cuda.grid(1)", "    step = cuda.gridsize(1)", "    while i < n:"]
    _decompose(L, [f"od{d}" for d in sp], "q")
    L += ["        oc = r % O", "        b = r // O",
          "        xb = xo + (b + (oc // OGB) * NO) * xsn + (oc // OGF) * CG * xsc",
          f"        acc = {ct}(0)", "        for ci in range(CG):",
          "            xa0 = xb + ci * xsc", "            wa0 = wo + oc * wso + ci * wsi"]
    ind = "            "
    for d in sp:
        L += [f"{ind}for k{d} in range(kd{d}):",
              f"{ind}    p{d} = q{d} * st{d} - pl{d} + k{d} * rd{d}",
              f"{ind}    if p{d} >= 0 and p{d} % ld{d} == 0 and p{d} // ld{d} < idm{d}:",
              f"{ind}        xa{d + 1} = xa{d} + (p{d} // ld{d}) * xs{d}",
              f"{ind}        wa{d + 1} = wa{d} + k{d} * ws{d}"]
        ind += "        "
    L.append(f"{ind}acc += {ct}(x[xa{nsp}]) * {ct}(w[wa{nsp}])")
    dst = " + ".join(["oo", "b * osn", "oc * osc"] + [f"q{d} * os{d}" for d in sp])
    L += [f"        o[{dst}] = {out}(acc)", "        i += step"]
    return "\n".join(L) + "\n"


def _patches_source(nsp: int, dtype) -> str:
    """im2col: P[g, b, q.., ci, k..] (C order) = the input element tap k of output position q
    reads for (group g, batch b, channel ci), or 0 for padding and holes, converted to the
    patch matrix's `dtype`."""
    sp = range(nsp)
    geo = [f"{a}{d}" for d in sp for a in ("od", "idm", "kd", "st", "pl", "ld", "rd")]
    args = (["n", "x", "xo", "xsn", "xsc"] + [f"xs{d}" for d in sp]
            + ["pm", "NO", "CG", "GB", "GF"] + geo)
    L = [f"\n@cuda.jit({runtime.jit_opts()})", f"def kernel({', '.join(args)}):",
         "    i = cuda.grid(1)", "    step = cuda.gridsize(1)", "    while i < n:", "        r = i"]
    for d in reversed(sp):
        L += [f"        k{d} = r % kd{d}", f"        r = r // kd{d}"]
    L += ["        ci = r % CG", "        r = r // CG"]
    for d in reversed(sp):
        L += [f"        q{d} = r % od{d}", f"        r = r // od{d}"]
    L += ["        b = r % NO", "        g = r // NO",
          "        a = xo + (b + g * NO * GB) * xsn + (ci + g * CG * GF) * xsc",
          "        ok = True"]
    for d in sp:
        L += [f"        p{d} = q{d} * st{d} - pl{d} + k{d} * rd{d}",
              f"        ok = ok and p{d} >= 0 and p{d} % ld{d} == 0 and p{d} // ld{d} < idm{d}",
              f"        a += (p{d} // ld{d}) * xs{d}"]
    L += [f"        pm[i] = {nbt(dtype)}(x[a]) if ok else {nbt(dtype)}(0)", "        i += step"]
    return "\n".join(L) + "\n"


# "cudnn", "gemm", "direct" or None (cuDNN where it takes the convolution, else by size); the
# tests set it to run each path ("cudnn" falls back to the others where cuDNN cannot run)
MODE = None
GEMM_MIN_TAPS = 16                 # direct convolution below this many MACs per output
GEMM_MAX_PATCH = 64 << 20          # elements of the patch matrix (256 MB of float32)
switches.register(__name__, "MODE", "GEMM_MIN_TAPS", "GEMM_MAX_PATCH")


def _use_gemm(x, aval, taps, patch) -> bool:
    if taps == 0 or patch == 0 or patch > GEMM_MAX_PATCH or _acc_t(x.dtype) != _acc_t(
            aval.dtype):   # the GEMM accumulates in the operands' type
        return False
    if MODE in ("gemm", "direct"):
        return MODE == "gemm"
    if runtime.SIM:        # the simulator runs both paths: GEMM for an even tap count
        return taps % 2 == 0
    return taps >= GEMM_MIN_TAPS


def conv_general_dilated(bufs, params, aval) -> DeviceBuffer:
    x, w = bufs
    ls, rs, os_ = params["dimension_numbers"]
    out = pool().empty(aval.shape, aval.dtype)
    if out.size == 0:
        return out
    if MODE in (None, "cudnn") and conv_cudnn.conv(x, w, params, aval, out):
        return out
    nsp = len(ls) - 2
    O, CG = aval.shape[os_[1]], w.shape[rs[1]]
    fg, bg = params["feature_group_count"], params["batch_group_count"]
    od = [aval.shape[a] for a in os_[2:]]
    kd = [w.shape[a] for a in rs[2:]]
    geo = []
    for d in range(nsp):
        geo += [od[d], x.shape[ls[2 + d]], kd[d], params["window_strides"][d],
                params["padding"][d][0], params["lhs_dilation"][d], params["rhs_dilation"][d]]
    x_args = ([x.arr(), x.offset, x.strides[ls[0]], x.strides[ls[1]]]
              + [x.strides[a] for a in ls[2:]])
    n_out, taps = aval.shape[os_[0]], CG * math.prod(kd)
    G = max(fg, bg)
    if _use_gemm(x, aval, taps, out.size // (O // G) * taps):
        return _conv_gemm(x, w, x_args, geo, params, aval, out, n_out, G, CG, od, kd)
    args = (x_args + [w.arr(), w.offset, w.strides[rs[0]], w.strides[rs[1]]]
            + [w.strides[a] for a in rs[2:]]
            + [out.arr(), out.offset, out.strides[os_[0]], out.strides[os_[1]]]
            + [out.strides[a] for a in os_[2:]] + [n_out, O, CG, O // fg, O // bg] + geo)
    _run(("conv", nsp, x.dtype.name, aval.dtype.name), lambda: _conv_source(nsp, aval.dtype),
         out.size, *args)
    return out


def _conv_gemm(x, w, x_args, geo, params, aval, out, n_out, G, CG, od, kd) -> DeviceBuffer:
    """im2col into a (G, n_out, *od, CG, *kd) patch matrix, then matmul.dot_general against
    the kernel viewed as (G, O / G, CG, *kd) (no copy), then one strided copy into out.

    dot_general's operands always have the result's dtype: with preferred_element_type wider
    than the operands (float16 -> float32) the patch matrix is written in the result dtype and
    the kernel converted to it, because the cuBLAS path (blas.gemm) writes C in the operands'
    dtype: a float16 C in a float32 buffer filled half of it (the second batch read zeros)."""
    _, rs, os_ = params["dimension_numbers"]
    nsp = len(od)
    O = aval.shape[os_[1]]
    og = O // G
    dt = np.dtype(aval.dtype)
    pm = pool().empty([G, n_out] + od + [CG] + kd, dt)
    _run(("conv_patches", nsp, x.dtype.name, dt.name), lambda: _patches_source(nsp, dt),
         pm.size, *x_args, pm.arr(), n_out, CG, int(params["batch_group_count"] > 1),
         int(params["feature_group_count"] > 1), *geo)
    so = w.strides[rs[0]]
    wv = w.view([G, og, CG] + kd, [so * og, so, w.strides[rs[1]]]
                + [w.strides[a] for a in rs[2:]], w.offset)
    if wv.dtype != dt:
        wv = ew.run("convert_element_type", [wv], dt)
    contract = tuple(range(2 + nsp, 3 + 2 * nsp))
    res = matmul.dot_general(pm, wv, ((contract, tuple(range(2, 3 + nsp))), ((0,), (0,))),
                             ShapedArray([G, n_out] + od + [og], aval.dtype))
    oc = out.strides[os_[1]]
    dst = out.view([G, n_out] + od + [og], [oc * og, out.strides[os_[0]]]
                   + [out.strides[a] for a in os_[2:]] + [oc], out.offset)
    ew.run("copy", [res], aval.dtype, out=dst)
    return out


# ---------------------------------------------------------------------------------------------
# windows: shared index code
# ---------------------------------------------------------------------------------------------

def _window_geo(x: DeviceBuffer, params, out_shape):
    geo = []
    for d in range(x.ndim):
        geo += [out_shape[d], x.shape[d], params["window_dimensions"][d],
                params["window_strides"][d], params["padding"][d][0],
                params["base_dilation"][d], params["window_dilation"][d]]
    return geo


def _geo_args(nd):
    return [f"{a}{d}" for d in range(nd) for a in ("od", "idm", "wd", "st", "pl", "bd", "wl")]


def _geo_consts(nd, geo):
    """The window geometry as constants of the kernel's source (one kernel per geometry): the
    compiler then folds the index arithmetic (divisions by constants, dilation 1 checks) and
    unrolls the tap loops, which with runtime values cost most of the time of a max-pool's
    gradient at ResNet sizes."""
    return [f"    {a} = {int(v)}" for a, v in zip(_geo_args(nd), geo)]


def _taps(L, nd, ind, ops, q="q", k="k"):
    """Nested loops over the taps of window (q0, q1, ...): okN says whether the tap reads an
    operand element, and the address of each operand named in `ops` accumulates as <op>aN."""
    for d in range(nd):
        prev = f"ok{d - 1} and " if d else ""
        L += [f"{ind}for {k}{d} in range(wd{d}):",
              f"{ind}    p{d} = {q}{d} * st{d} - pl{d} + {k}{d} * wl{d}",
              f"{ind}    ok{d} = {prev}p{d} >= 0 and p{d} % bd{d} == 0 and p{d} // bd{d} < idm{d}"]
        L += [f"{ind}    {a}a{d + 1} = {a}a{d} + (p{d} // bd{d}) * {a}s{d}" for a in ops]
        ind += "    "
    return ind, (f"ok{nd - 1}" if nd else "True")


def _rw_source(kind: str, nd: int, dtype, geo) -> str:
    ct, out = _acc_t(dtype), nbt(dtype)
    args = ["n", "x", "xo"] + [f"xs{d}" for d in range(nd)] + ["o", "oo"]
    L = [f"\n@cuda.jit({runtime.jit_opts()})", f"def kernel({', '.join(args)}):",
         *_geo_consts(nd, geo), "    i = cuda.grid(1)", "    step = cuda.gridsize(1)",
         "    while i < n:"]
    _decompose(L, [f"od{d}" for d in range(nd)], "q")
    L += [f"        acc = {_lit(W.identity(kind, dtype).item(), ct)}", "        xa0 = xo"]
    ind, ok = _taps(L, nd, "        ", ["x"])
    L += [f"{ind}if {ok}:", f"{ind}    v = {ct}(x[xa{nd}])"]
    if kind == "sum":
        L.append(f"{ind}    acc += v")
    else:
        cmp = ">" if kind == "max" else "<"
        L.append(f"{ind}    if v {cmp} acc or v != v:")   # NaN propagates, as in numpy
        L.append(f"{ind}        acc = v")
    L += ["        o[oo + i] = " + f"{out}(acc)", "        i += step"]
    return "\n".join(L) + "\n"


def reduce_window(kind):
    def lower(bufs, params, aval) -> DeviceBuffer:
        x = bufs[0]
        out = pool().empty(aval.shape, aval.dtype)
        if out.size:
            nd = x.ndim
            geo = tuple(_window_geo(x, params, aval.shape))
            _run(("rwin", kind, nd, x.dtype.name, geo),
                 lambda: _rw_source(kind, nd, x.dtype, geo),
                 out.size, x.arr(), x.offset, *x.strides, out.arr(), out.offset)
        return out
    return lower


def _select_lines(L, nd, ind, sel, ct, ident, ops, q="q", k="k"):
    """Code that runs a window's selection: best value and (for each op) the selected address,
    -1 for a padding tap; jf counts taps in row-major order and ksel keeps the selected one."""
    L += [f"{ind}best = {ident}", f"{ind}ksel = -1", f"{ind}jf = 0"]
    L += [f"{ind}{a}sel = -1" for a in ops]
    L += [f"{ind}{a}a0 = {a}o" for a in ("x",) + tuple(ops)]
    inner, ok = _taps(L, nd, ind, ("x",) + tuple(ops), q=q, k=k)
    keep = ">=" if sel == "ge" else "<="
    L += [f"{inner}v = {ct}(x[xa{nd}]) if {ok} else {ident}",
          f"{inner}if jf == 0 or not (best {keep} v):",
          f"{inner}    best = v", f"{inner}    ksel = jf"]
    L += [f"{inner}    {a}sel = {a}a{nd} if {ok} else -1" for a in ops]
    L.append(f"{inner}jf += 1")


def _gather_source(sel: str, nd: int, x_dtype, t_dtype, geo) -> str:
    ct = compute_t(x_dtype)
    ident = _lit(W.identity(sel, x_dtype).item(), ct)
    args = (["n", "x", "xo"] + [f"xs{d}" for d in range(nd)] + ["t", "to"]
            + [f"ts{d}" for d in range(nd)] + ["o", "oo"])
    L = [f"\n@cuda.jit({runtime.jit_opts()})", f"def kernel({', '.join(args)}):",
         *_geo_consts(nd, geo), "    i = cuda.grid(1)", "    step = cuda.gridsize(1)",
         "    while i < n:"]
    _decompose(L, [f"od{d}" for d in range(nd)], "q")
    _select_lines(L, nd, "        ", sel, ct, ident, ("t",))
    L += [f"        o[oo + i] = t[tsel] if tsel >= 0 else {nbt(t_dtype)}(0)", "        i += step"]
    return "\n".join(L) + "\n"


def select_and_gather_add(bufs, params, aval) -> DeviceBuffer:
    t, x = bufs
    out = pool().empty(aval.shape, aval.dtype)
    if out.size:
        nd, sel = x.ndim, params["select_prim"]
        geo = tuple(_window_geo(x, params, aval.shape))
        _run(("selgather", sel, nd, x.dtype.name, t.dtype.name, geo),
             lambda: _gather_source(sel, nd, x.dtype, t.dtype, geo), out.size, x.arr(),
             x.offset, *x.strides, t.arr(), t.offset, *t.strides, out.arr(), out.offset)
    return out


def _selected_source(sel: str, nd: int, x_dtype, geo) -> str:
    """Pass 1 of select_and_scatter_add: each window's selected tap (its row-major index
    among the window's taps, padding included) into an int32 array over the windows."""
    ct = compute_t(x_dtype)
    ident = _lit(W.identity(sel, x_dtype).item(), ct)
    args = ["n", "x", "xo"] + [f"xs{d}" for d in range(nd)] + ["o", "oo"]
    L = [f"\n@cuda.jit({runtime.jit_opts()})", f"def kernel({', '.join(args)}):",
         *_geo_consts(nd, geo), "    i = cuda.grid(1)", "    step = cuda.gridsize(1)",
         "    while i < n:"]
    _decompose(L, [f"od{d}" for d in range(nd)], "q")
    _select_lines(L, nd, "        ", sel, ct, ident, ())
    L += ["        o[oo + i] = ksel", "        i += step"]
    return "\n".join(L) + "\n"


def _scatter_source(nd: int, s_dtype, geo) -> str:
    """Pass 2: each operand element adds the sources of the windows that selected it, visiting
    the windows holding it in increasing (row-major) order; no atomics."""
    acc = _acc_t(s_dtype)
    args = ["n", "s", "so"] + [f"ss{d}" for d in range(nd)] + ["sl", "slo", "o", "oo"]
    L = [f"\n@cuda.jit({runtime.jit_opts()})", f"def kernel({', '.join(args)}):",
         *_geo_consts(nd, geo), "    i = cuda.grid(1)", "    step = cuda.gridsize(1)",
         "    while i < n:"]
    _decompose(L, [f"idm{d}" for d in range(nd)], "e")
    L += [f"        acc = {acc}(0)", "        mf = 0", "        sa0 = so", "        ja0 = 0"]
    ind = "        "
    # the windows holding element e, in increasing (row-major) order; m is its tap in each
    for d in range(nd):
        L += [f"{ind}pp{d} = e{d} * bd{d} + pl{d}",
              f"{ind}t{d} = pp{d} - (wd{d} - 1) * wl{d}",
              f"{ind}lo{d} = (t{d} + st{d} - 1) // st{d} if t{d} > 0 else 0",
              f"{ind}for w{d} in range(lo{d}, min(od{d} - 1, pp{d} // st{d}) + 1):",
              f"{ind}    rem{d} = pp{d} - w{d} * st{d}",
              f"{ind}    if rem{d} % wl{d} == 0:",
              f"{ind}        m{d} = rem{d} // wl{d}",
              f"{ind}        sa{d + 1} = sa{d} + w{d} * ss{d}",
              f"{ind}        ja{d + 1} = ja{d} * od{d} + w{d}"]
        ind += "        "
    flat = "0"
    for d in range(nd):
        flat = f"({flat}) * wd{d} + m{d}"
    L.append(f"{ind}mf = {flat}")
    L += [f"{ind}if sl[slo + ja{nd}] == mf:", f"{ind}    acc += {acc}(s[sa{nd}])"]
    L += [f"        o[oo + i] = {nbt(s_dtype)}(acc)", "        i += step"]
    return "\n".join(L) + "\n"


def select_and_scatter_add(bufs, params, aval) -> DeviceBuffer:
    """Two passes: the windows' selections once (int32 per window), then per operand element
    a read of each holding window's selection (each window's selection was recomputed by
    every element of it: 2.2 ms of a 6.5 ms ResNet step at a 128 x 64 x 64 x 64 max-pool)."""
    s, x = bufs
    out = pool().empty(aval.shape, aval.dtype)
    if out.size:
        nd, sel = x.ndim, params["select_prim"]
        wout = W.window_out_shape(x.shape, *(params[k] for k in W.WINDOW_KEYS))
        geo = tuple(_window_geo(x, params, wout))
        chosen = pool().empty(wout, np.int32)
        if chosen.size == 0:   # no windows: nothing is selected
            z = arrays.const(0, out.dtype)
            return ew.run("copy", [z.view(out.shape, (0,) * out.ndim, z.offset)], out.dtype,
                          out=out)
        _run(("selected", sel, nd, x.dtype.name, geo),
             lambda: _selected_source(sel, nd, x.dtype, geo), chosen.size, x.arr(), x.offset,
             *x.strides, chosen.arr(), chosen.offset)
        _run(("selscatter2", nd, s.dtype.name, geo), lambda: _scatter_source(nd, s.dtype, geo),
             out.size, s.arr(), s.offset, *s.strides, chosen.arr(), chosen.offset, out.arr(),
             out.offset)
    return out


LOWERINGS = {
    C.conv_general_dilated_p: conv_general_dilated,
    W.reduce_window_sum_p: reduce_window("sum"),
    W.reduce_window_max_p: reduce_window("max"),
    W.reduce_window_min_p: reduce_window("min"),
    W.select_and_gather_add_p: select_and_gather_add,
    W.select_and_scatter_add_p: select_and_scatter_add,
}
