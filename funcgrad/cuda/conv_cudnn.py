"""conv_general_dilated on cuDNN: each convolution's geometry as one cuDNN forward, backward-data
or backward-filter call (cudnn.py), as XLA's GPU backend rewrites convolutions.

The vjp of a convolution is two convolutions (prims/conv.py), and choose() recognises them by
their own geometry:
  - "fwd": no lhs dilation, no batch groups: cuDNN x = lhs, w = rhs, y = out, pad = the low
    padding, stride, dilation as given.
  - "bwd_data" (the lhs gradient of a strided convolution): window strides 1 and lhs dilation
    s > 1: out = conv^T(lhs, W) with cuDNN stride s, pad = dilated kernel - 1 - low padding and
    W the kernel spatially reversed with in/out features swapped (per feature group).
  - "bwd_filter" (the kernel gradient): no lhs dilation, no feature groups, and batch groups
    or a kernel larger than the output: out[c, k, r] = sum over n, h of lhs[c, n, h s' + r d']
    rhs[k, n, h], cuDNN's dW with x = lhs and dy = rhs read batch <-> feature swapped (their
    original layouts), stride = rhs dilation, dilation = window strides, groups = batch groups.
cuDNN pads both sides alike: a larger high side ("SAME" at stride 2) extends cuDNN's input
with zeros (a copy), and an output larger than the convolution's is written to a temporary
and cropped. cuDNN filters are packed (KCRS, or KRSC beside channels-last activations): a
kernel is copied into that order (one small copy; it also reverses and regroups), a filter
gradient copied out of it unless the result already has that layout. Activations are read
and written through their strides (packed in any axis order), others are copied first.
Anything cuDNN cannot take (integer dtypes, a wider preferred_element_type, negative padding,
more than 3 spatial axes, > 2^31 elements, no algorithm) runs the numba kernels of conv.py.
"""
from __future__ import annotations

import math

import numpy as np

from funcgrad.cuda import cudnn, runtime
from funcgrad.cuda import elementwise as ew
from funcgrad.cuda.arrays import const, pool

calls = dict.fromkeys(cudnn.KINDS, 0)   # cuDNN calls made (or recorded in a dry run), by kind


def dil(n: int, k: int) -> int:
    return 0 if n == 0 else 1 + k * (n - 1)


def cdim(size, pad, k, s, d) -> int:
    """cuDNN's output size of an axis: size + 2 pad over the dilated kernel at stride s."""
    kd = dil(k, d)
    return (size + 2 * pad - kd) // s + 1 if size + 2 * pad >= kd else 0


def choose(lshape, rshape, oshape, params):
    """How conv_general_dilated with these shapes runs on cuDNN, or None (numba kernels).

    Returns a dict: kind; groups; per role ("x", "w", "y" as cuDNN names them) the operand
    ("lhs", "rhs" or "out"), its axes in cuDNN's (N|K, C, spatial...) order and, for "w",
    whether the spatial axes are reversed and the feature swap of a backward-data kernel;
    pads / strides / dils of cuDNN's convolution; ext, zeros to append to cuDNN's x per
    spatial axis; size, cuDNN's spatial size of the role it writes (>= the result's).

    Example:
        >>> from funcgrad.cuda.conv_cudnn import choose
        >>> p = dict(window_strides=(1,), padding=((1, 1),), lhs_dilation=(1,),
        ...          rhs_dilation=(1,), dimension_numbers=((0, 1, 2),) * 3,
        ...          feature_group_count=1, batch_group_count=1)
        >>> choose((2, 3, 8), (4, 3, 3), (2, 4, 8), p)["kind"]
        'fwd'
    """
    ls, rs, os_ = params["dimension_numbers"]
    nsp = len(ls) - 2
    ws, pads = params["window_strides"], params["padding"]
    ld, rd = params["lhs_dilation"], params["rhs_dilation"]
    fg, bg = params["feature_group_count"], params["batch_group_count"]
    if nsp > 3 or any(lo < 0 for lo, _ in pads):
        return None
    lsp = [lshape[a] for a in ls[2:]]
    ksp = [rshape[a] for a in rs[2:]]
    osp = [oshape[a] for a in os_[2:]]
    flip = lambda s: [s[1], s[0]] + list(s[2:])
    no_ld = all(v == 1 for v in ld)
    if no_ld and fg == 1 and (bg > 1 or math.prod(ksp) > math.prod(osp)):
        spec = _bwd_filter(ls, rs, os_, lsp, ksp, osp, pads, ws, rd, bg, flip)
        if spec is not None or bg > 1:
            return spec
    if bg > 1:
        return None
    if no_ld:
        return _fwd(ls, rs, os_, lsp, ksp, osp, pads, ws, rd, fg)
    if all(v == 1 for v in ws):
        return _bwd_data(ls, rs, os_, lsp, ksp, osp, pads, ld, rd, fg)
    return None


def _fwd(ls, rs, os_, lsp, ksp, osp, pads, ws, rd, fg):
    ext, size = [], []
    for h, k, ho, (lo, _), s, d in zip(lsp, ksp, osp, pads, ws, rd):
        e = max(0, (ho - 1) * s + dil(k, d) - h - 2 * lo)
        c = cdim(h + e, lo, k, s, d)
        if c < ho:
            return None
        ext.append(e)
        size.append(c)
    return {"kind": "fwd", "groups": fg, "x": ("lhs", list(ls)), "y": ("out", list(os_)),
            "w": ("rhs", list(rs), False, False), "pads": [lo for lo, _ in pads],
            "strides": list(ws), "dils": list(rd), "ext": ext, "size": size}


def _bwd_data(ls, rs, os_, lsp, ksp, osp, pads, ld, rd, fg):
    # dy = lhs, dx = out, W from rhs: W[k, c, r] = rhs[o = c, i = k, R - 1 - r] (per group)
    P, size = [], []
    for hdy, k, ho, (lo, _), s, d in zip(lsp, ksp, osp, pads, ld, rd):
        p = dil(k, d) - 1 - lo
        if p < 0:
            return None
        hx = next((h for h in range(ho, ho + s) if cdim(h, p, k, s, d) == hdy), None)
        if hx is None:
            return None
        P.append(p)
        size.append(hx)
    return {"kind": "bwd_data", "groups": fg, "x": ("out", list(os_)), "y": ("lhs", list(ls)),
            "w": ("rhs", list(rs), True, True), "pads": P, "strides": list(ld),
            "dils": list(rd), "ext": [0] * len(lsp), "size": size}


def _bwd_filter(ls, rs, os_, lsp, ksp, osp, pads, ws, rd, bg, flip):
    # x[n, c] = lhs[c, n], dy[n, k] = rhs[k, n], dW[k, c] = out[c, k]
    ext = []
    for h, hdy, r, (lo, _), s, d in zip(lsp, ksp, osp, pads, rd, ws):
        e = max(0, (hdy - 1) * s + dil(r, d) - h - 2 * lo)
        if cdim(h + e, lo, r, s, d) != hdy:
            return None
        ext.append(e)
    return {"kind": "bwd_filter", "groups": bg, "x": ("lhs", flip(ls)), "y": ("rhs", flip(rs)),
            "w": ("out", flip(os_), False, False), "pads": [lo for lo, _ in pads],
            "strides": list(rd), "dils": list(ws), "ext": ext, "size": list(osp)}


# ---------------------------------------------------------------------------------------------
# running a choice
# ---------------------------------------------------------------------------------------------

def _packed(dims, strides) -> bool:
    """Whether positive strides lay dims out densely in some axis order."""
    acc = 1
    pairs = sorted(((st, n) for n, st in zip(dims, strides) if n != 1))
    for st, n in pairs:
        if st != acc:
            return False
        acc *= n
    return True


def _c_strides(shape):
    st, acc = [0] * len(shape), 1
    for i in range(len(shape) - 1, -1, -1):
        st[i] = acc
        acc *= shape[i]
    return st


def _desc(dims, strides):
    """(dims, strides) padded to the 4-d tensor cuDNN's convolutions take (size-1 spatial
    axes appended, with the stride of the innermost spatial axis)."""
    dims, strides = list(dims), list(strides)
    while len(dims) < 4:
        dims.append(1)
        strides.append(strides[-1] if len(strides) > 2 else 1)
    return tuple(dims), tuple(strides)


def _filter_view(buf, axes, rev, swap, G, order):
    """buf's elements as cuDNN's filter (K, C, spatial...): a view of shape (G, K/G, C, sp..)
    and cuDNN's dims. order is the operand's axes (K, C, sp..) = (axes[0], axes[1], ...);
    swap: the filter's K is the operand's C axis per group (a backward-data kernel)."""
    sk, sc = buf.strides[axes[0]], buf.strides[axes[1]]
    nk, nc = buf.shape[axes[0]], buf.shape[axes[1]]
    sp = [(buf.shape[a], buf.strides[a]) for a in axes[2:]]
    off = buf.offset
    if rev:
        off += sum((n - 1) * st for n, st in sp)
        sp = [(n, -st) for n, st in sp]
    if swap:   # W[g, kl, cl] = operand[o = g * (nk / G) + cl, i = kl]
        og = nk // G
        shape = [G, nc, og] + [n for n, _ in sp]
        strides = [sk * og, sc, sk] + [st for _, st in sp]
        dims = [G * nc, og]
    else:
        shape = [G, nk // G, nc] + [n for n, _ in sp]
        strides = [sk * (nk // G), sk, sc] + [st for _, st in sp]
        dims = [nk, nc]
    return buf.view(shape, strides, off), dims + [n for n, _ in sp]


def _packed_filter(dims, G, fmt):
    """Strides of the (G, K/G, C, sp..) view of a packed cuDNN filter of `dims` in fmt."""
    K, C, sp = dims[0], dims[1], dims[2:]
    if fmt == cudnn.NCHW:
        st = _c_strides(dims)
    else:   # K, spatial..., C
        inner = _c_strides([K] + list(sp) + [C])
        st = [inner[0], inner[-1]] + inner[1:-1]
    return [st[0] * (K // G), st[0]] + st[1:]


def _zero_fill(buf):
    z = const(0, buf.dtype)
    ew.run("copy", [z.view(buf.shape, (0,) * buf.ndim, z.offset)], buf.dtype, out=buf)


def _ptr(buf) -> int:
    return buf.block.ptr() + buf.offset * buf.dtype.itemsize


def conv(x, w, params, aval, out):
    """Run conv_general_dilated(x, w) into `out` (its result, allocated) on cuDNN; False,
    having launched and allocated nothing, when cuDNN cannot take it here."""
    dt = np.dtype(aval.dtype)
    if dt != x.dtype or not cudnn.available(dt):
        return False
    spec = choose(x.shape, w.shape, aval.shape, params)
    if (spec is None or 0 in x.shape or 0 in w.shape
            or max(x.size, w.size, out.size) > cudnn.INT_MAX):
        return False
    ops = {"lhs": x, "rhs": w, "out": out}
    G, kind = spec["groups"], spec["kind"]
    wsrc, waxes, rev, swap = spec["w"]
    act = {}       # role -> [buffer (None: make it), dims, strides, how to make it]
    for role in ("x", "y"):
        src, axes = spec[role]
        b = ops[src]
        dims = [b.shape[a] for a in axes]
        strides = [b.strides[a] for a in axes]
        make = None
        writes = (kind, role) in (("fwd", "y"), ("bwd_data", "x"))
        sp = spec["size"] if writes else None
        if role == "x" and any(spec["ext"]):
            sp = [n + e for n, e in zip(dims[2:], spec["ext"])]
        if sp is not None and sp != dims[2:]:   # a temporary: extended input, larger output
            shape = list(b.shape)
            for a, n in zip(axes[2:], sp):
                shape[a] = n
            make = ("ext" if role == "x" and kind != "bwd_data" else "crop", shape)
            cs = _c_strides(shape)
            dims, strides = dims[:2] + sp, [cs[a] for a in axes]
        elif min(strides) < 0 or not _packed(dims, strides):
            make = ("copy", list(b.shape))
            cs = _c_strides(b.shape)
            strides = [cs[a] for a in axes]
        act[role] = [None if make else b, dims, strides, make]
    xdims, xstr = act["x"][1], act["x"][2]
    fmt = cudnn.NHWC if len(xdims) > 2 and xstr[1] == min(xstr) and xdims[1] > 1 else cudnn.NCHW
    wview, wdims = _filter_view(ops[wsrc], waxes, rev, swap, G, waxes)
    fstr = _packed_filter(wdims, G, fmt)
    direct = (wview.strides == tuple(fstr) or all(
        n == 1 or s == t for n, s, t in zip(wview.shape, wview.strides, fstr)))
    wdesc = _desc(wdims, _c_strides(wdims))[0]
    p = cudnn.plan(kind, dt, _desc(*act["x"][1:3]), wdesc, _desc(*act["y"][1:3]), fmt,
                   tuple(spec["pads"]) + (0,) * (2 - len(spec["pads"])),
                   tuple(spec["strides"]) + (1,) * (2 - len(spec["strides"])),
                   tuple(spec["dils"]) + (1,) * (2 - len(spec["dils"])), G,
                   params.get("precision"))
    if p is None:
        return False
    bufs = {}
    for role in ("x", "y"):
        b, dims, strides, make = act[role]
        src = ops[spec[role][0]]
        if make is None:
            bufs[role] = b
            continue
        how, shape = make
        if how == "copy":
            t = ew.run("copy", [src], dt)
        else:
            t = pool().empty(shape, dt)
            if how == "ext":   # zeros, then the operand into its leading part
                _zero_fill(t)
                ew.run("copy", [src], dt, out=t.view(src.shape, t.strides, t.offset))
        bufs[role] = t
    if kind == "bwd_filter":
        wbuf = out if direct else pool().empty(wdims, dt)
    elif direct:
        wbuf = wview
    else:
        wbuf = pool().empty(wdims, dt)
        ew.run("copy", [wview], dt, out=wbuf.view(wview.shape, fstr, wbuf.offset))
    ws = pool().empty((max(p.ws, 1),), np.uint8)
    if not runtime.dry_run:
        cudnn.execute(p, _ptr(bufs["x"]), _ptr(wbuf), _ptr(bufs["y"]), _ptr(ws))
    calls[kind] += 1
    if kind == "bwd_filter" and not direct:
        wv, _ = _filter_view(out, waxes, False, False, G, waxes)
        ew.run("copy", [wbuf.view(wv.shape, fstr, wbuf.offset)], dt, out=wv)
    for role in ("x", "y"):
        make = act[role][3]
        if make is not None and make[0] == "crop":
            t = bufs[role]
            ew.run("copy", [t.view(out.shape, t.strides, t.offset)], dt, out=out)
    return True
