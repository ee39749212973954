"""Naive loop references for convolutions and window reductions (XLA semantics), and a
hypothesis strategy of convolution configurations; used by tests/test_conv*.py."""
from __future__ import annotations

import itertools

import numpy as np


def dil(d: int, k: int) -> int:
    return 0 if d == 0 else 1 + k * (d - 1)


def _tap(q, k, stride, pad_lo, win_dil, base_dil, size):
    """Operand index read by tap k of window q along one axis, or None (padding / a hole)."""
    p = q * stride - pad_lo + k * win_dil
    if p < 0 or p % base_dil or p // base_dil >= size:
        return None
    return p // base_dil


def ref_conv(lhs, rhs, strides, padding, lhs_dil, rhs_dil, dn, fg=1, bg=1):
    """conv_general_dilated by explicit loops, in float64 (batch groups major in the batch)."""
    ls, rs, os_ = dn
    x = np.transpose(lhs, ls).astype(np.float64)
    w = np.transpose(rhs, rs).astype(np.float64)
    n, _ = x.shape[:2]
    o, i = w.shape[:2]
    sp, ks = x.shape[2:], w.shape[2:]
    out_sp = [max(0, (dil(s, ld) + lo + hi - dil(k, rd)) // st + 1) for s, k, st, (lo, hi), ld, rd
              in zip(sp, ks, strides, padding, lhs_dil, rhs_dil)]
    groups, n_out = max(fg, bg), n // bg
    out = np.zeros((n_out, o) + tuple(out_sp))
    for b, oc in itertools.product(range(n_out), range(o)):
        g = oc // (o // groups)
        nb, c0 = b + (g * n_out if bg > 1 else 0), (g * i if fg > 1 else 0)
        for q in itertools.product(*map(range, out_sp)):
            acc = 0.0
            for ci, k in itertools.product(range(i), itertools.product(*map(range, ks))):
                idx = [_tap(q[d], k[d], strides[d], padding[d][0], rhs_dil[d], lhs_dil[d], sp[d])
                       for d in range(len(sp))]
                if all(v is not None for v in idx):
                    acc += x[(nb, c0 + ci) + tuple(idx)] * w[(oc, ci) + k]
            out[(b, oc) + q] = acc
    return np.transpose(out, np.argsort(os_))


def ref_reduce_window(x, init, op, window, strides, padding, base_dil=None, win_dil=None):
    """XLA's reduce_window by loops: padding and holes hold `init`, which also starts every
    window's fold (op is a binary Python function)."""
    nd = x.ndim
    base_dil = base_dil or (1,) * nd
    win_dil = win_dil or (1,) * nd
    out_sp = [max(0, (dil(s, b) + lo + hi - dil(w, d)) // st + 1) for s, w, st, (lo, hi), b, d
              in zip(x.shape, window, strides, padding, base_dil, win_dil)]
    out = np.zeros(out_sp, x.dtype)
    for q in itertools.product(*map(range, out_sp)):
        acc = init
        for k in itertools.product(*map(range, window)):
            idx = [_tap(q[d], k[d], strides[d], padding[d][0], win_dil[d], base_dil[d],
                        x.shape[d]) for d in range(nd)]
            acc = op(acc, x[tuple(idx)] if all(v is not None for v in idx) else init)
        out[q] = acc
    return out


def conv_configs(draw, st, max_spatial=2, allow_groups=True, nonempty=False):
    """Draw (lhs, rhs, params) for conv_general_dilated: random rank, layout, groups, strides,
    padding (negative too), dilations; tiny sizes with 0- and 1-sized axes (none if
    nonempty)."""
    lo = 1 if nonempty else 0
    from funcgrad.prims.conv import ConvDimensionNumbers
    nsp = draw(st.integers(0, max_spatial))
    nd = nsp + 2
    mode = draw(st.sampled_from(["none", "feature", "batch"] if allow_groups else ["none"]))
    fg, bg = (2 if mode == "feature" else 1), (2 if mode == "batch" else 1)
    cg, og, nb = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(lo, 2))
    n, c, o = nb * bg, cg * fg, og * max(fg, bg)
    sp = [draw(st.integers(lo, 4)) for _ in range(nsp)]
    ks = [draw(st.integers(lo, 3)) for _ in range(nsp)]
    strides = tuple(draw(st.integers(1, 2)) for _ in range(nsp))
    ld = tuple(draw(st.integers(1, 2)) for _ in range(nsp))
    rd = tuple(draw(st.integers(1, 2)) for _ in range(nsp))
    pads = []
    for s, k in zip(sp, ld):
        lo, hi = draw(st.integers(-1, 2)), draw(st.integers(-1, 2))
        while dil(s, k) + lo + hi < 0:
            lo, hi = lo + 1, hi + 1
        pads.append((lo, hi))
    perms = [tuple(draw(st.permutations(range(nd)))) for _ in range(3)]
    dn = ConvDimensionNumbers(*perms)
    lshape, rshape = [0] * nd, [0] * nd
    for a, s in zip(dn.lhs_spec, [n, c] + sp):
        lshape[a] = s
    for a, s in zip(dn.rhs_spec, [o, cg] + ks):
        rshape[a] = s
    seed = draw(st.integers(0, 2 ** 31))
    rng = np.random.default_rng(seed)
    params = {"window_strides": strides, "padding": tuple(pads), "lhs_dilation": ld,
              "rhs_dilation": rd, "dimension_numbers": dn, "feature_group_count": fg,
              "batch_group_count": bg}
    return rng.standard_normal(lshape), rng.standard_normal(rshape), params
