"""Convolution: the conv_general_dilated primitive (its rules kept together) and dimension
numbers; the lax entry points are in conv_api.py.

`conv_general_dilated_p` is an N-d cross-correlation with window strides, explicit (possibly
negative) padding, lhs (input) and rhs (kernel) dilation, feature and batch groups and any
axis layout (dimension numbers), as in XLA. Its numpy impl is im2col + one batched matmul; its
transposes (the vjp for lhs and rhs) are convolutions again, so gradients differentiate again.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from funcgrad import prims as P
from funcgrad.core import ShapedArray, bind, defprim, is_float, type_error
from funcgrad.core.dtypes import dtype_kind, is_half


class ConvDimensionNumbers(NamedTuple):
    """Axis layout of a convolution: lhs_spec = (batch, feature, spatial...) axes of the lhs,
    rhs_spec = (out feature, in feature, spatial...) of the rhs, out_spec = (batch, feature,
    spatial...) of the output."""
    lhs_spec: tuple
    rhs_spec: tuple
    out_spec: tuple


def dilate_dim(d: int, k: int) -> int:
    """Size of an axis of size d with k - 1 holes between neighbours: 0 if d == 0 else
    1 + k (d - 1)."""
    return 0 if d == 0 else 1 + k * (d - 1)


def stride_dim(d: int, window: int, stride: int) -> int:
    """Number of windows of size `window` at `stride` in an axis of size d (0 if none fit)."""
    return max(0, (d - window) // stride + 1)


def padtype_to_pads(in_shape, window_shape, window_strides, padding: str) -> list:
    """Explicit (lo, hi) pads for "SAME", "SAME_LOWER" or "VALID" padding (JAX's rule).

    "SAME" gives ceil(n / stride) outputs, the extra padding going to the high side.

    Example:
        >>> padtype_to_pads((5,), (3,), (2,), "SAME")
        [(1, 1)]
    """
    p = padding.upper() if isinstance(padding, str) else padding
    if p == "VALID":
        return [(0, 0)] * len(in_shape)
    if p in ("SAME", "SAME_LOWER"):
        pads = []
        for n, w, s in zip(in_shape, window_shape, window_strides):
            total = max(0, (-(-n // s) - 1) * s + w - n)
            lo = total // 2 if p == "SAME" else total - total // 2
            pads.append((lo, total - lo))
        return pads
    raise ValueError(f"unknown padding {padding!r}: expected 'SAME', 'SAME_LOWER', 'VALID' "
                     "or a sequence of (low, high) pairs")


def conv_general_permutations(dimension_numbers):
    """Axis permutations (lhs, rhs, out) for string dimension numbers such as
    ("NHWC", "HWIO", "NHWC"); spatial axes are matched by letter in the rhs's order."""
    lhs, rhs, out = dimension_numbers
    pairs = (("N", "C"), ("O", "I"), ("N", "C"))
    for spec, (a, b) in zip(dimension_numbers, pairs):
        if spec.count(a) != 1 or spec.count(b) != 1 or len(set(spec)) != len(spec):
            raise TypeError(f"convolution dimension spec {spec!r} must hold {a!r} and {b!r} "
                            "exactly once and no repeated letters")
    if not set(lhs) - {"N", "C"} == set(rhs) - {"O", "I"} == set(out) - {"N", "C"}:
        raise TypeError(f"convolution dimension numbers {dimension_numbers} must name the same "
                        "spatial axes in lhs, rhs and out")

    def perm(spec, pair):
        spatial = [i for i, c in enumerate(spec) if c not in pair]
        if spec is not rhs:
            spatial.sort(key=lambda i: rhs.index(spec[i]))
        return (spec.index(pair[0]), spec.index(pair[1])) + tuple(spatial)
    return tuple(perm(s, p) for s, p in zip(dimension_numbers, pairs))


def conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers) -> ConvDimensionNumbers:
    """ConvDimensionNumbers from None (NC..., OI..., NC...), a ConvDimensionNumbers or a
    triple of strings such as ("NCHW", "OIHW", "NCHW").

    Example:
        >>> conv_dimension_numbers((1, 5, 5, 3), (3, 3, 3, 8), ("NHWC", "HWIO", "NHWC"))
        ConvDimensionNumbers(lhs_spec=(0, 3, 1, 2), rhs_spec=(3, 2, 0, 1), out_spec=(0, 3, 1, 2))
    """
    nd = len(lhs_shape)
    if len(rhs_shape) != nd:
        raise TypeError(f"convolution: lhs and rhs must have the same rank, got shapes "
                        f"{tuple(lhs_shape)} and {tuple(rhs_shape)}")
    if dimension_numbers is None:
        iota = tuple(range(nd))
        return ConvDimensionNumbers(iota, iota, iota)
    if not isinstance(dimension_numbers, (tuple, list)) or len(dimension_numbers) != 3:
        raise TypeError("convolution dimension_numbers must be None, a ConvDimensionNumbers or "
                        f"a triple of strings, got {dimension_numbers!r}")
    if all(isinstance(s, str) for s in dimension_numbers):
        for s in dimension_numbers:
            if len(s) != nd:
                raise TypeError(f"convolution dimension spec {s!r} has {len(s)} letters but the "
                                f"operands have rank {nd}")
        return ConvDimensionNumbers(*conv_general_permutations(tuple(dimension_numbers)))
    return ConvDimensionNumbers(*(tuple(int(a) for a in s) for s in dimension_numbers))


# ---------------------------------------------------------------------------------------------
# the primitive's rules
# ---------------------------------------------------------------------------------------------

def _conv_shape(lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation,
                dimension_numbers, feature_group_count, batch_group_count,
                preferred_element_type, precision=None):
    del precision   # how float32 products round (TF32 or not): no effect on the type
    name, avals = "conv_general_dilated", (lhs, rhs)

    def bad(msg):
        return type_error(name, msg, avals)
    nd = lhs.ndim
    if nd < 2 or rhs.ndim != nd:
        raise bad("lhs and rhs must have the same rank >= 2 (batch, feature, spatial...)")
    if lhs.dtype != rhs.dtype:
        raise bad("lhs and rhs must have equal dtypes")
    if dtype_kind(lhs.dtype) not in "fiu":
        raise bad(f"dtype {lhs.dtype.name} is not supported")
    ls, rs, os_ = dimension_numbers
    if any(sorted(s) != list(range(nd)) for s in (ls, rs, os_)):
        raise bad(f"dimension_numbers {dimension_numbers} are not permutations of the "
                  f"{nd} axes")
    nsp = nd - 2
    if not (len(window_strides) == len(lhs_dilation) == len(rhs_dilation) == len(padding)
            == nsp):
        raise bad(f"window_strides, padding, lhs_dilation and rhs_dilation need {nsp} entries "
                  "(one per spatial axis)")
    if any(s < 1 for s in tuple(window_strides) + tuple(lhs_dilation) + tuple(rhs_dilation)):
        raise bad("window strides and dilations must be >= 1")
    G, B = feature_group_count, batch_group_count
    if G < 1 or B < 1 or (G > 1 and B > 1):
        raise bad("feature_group_count and batch_group_count must be >= 1, and not both > 1")
    n, c = lhs.shape[ls[0]], lhs.shape[ls[1]]
    o, i = rhs.shape[rs[0]], rhs.shape[rs[1]]
    if c % G or c // G != i:
        raise bad(f"lhs features ({c}) must equal rhs input features ({i}) times "
                  f"feature_group_count ({G})")
    if o % G or o % B:
        raise bad(f"rhs output features ({o}) must be divisible by feature_group_count ({G}) "
                  f"and batch_group_count ({B})")
    if n % B:
        raise bad(f"lhs batch ({n}) must be divisible by batch_group_count ({B})")
    spatial = []
    for d in range(nsp):
        (lo, hi), size = padding[d], lhs.shape[ls[2 + d]]
        padded = dilate_dim(size, lhs_dilation[d]) + lo + hi
        if padded < 0:
            raise bad(f"negative padding {(lo, hi)} is larger than spatial axis {d} "
                      f"(size {size})")
        k = dilate_dim(rhs.shape[rs[2 + d]], rhs_dilation[d])
        spatial.append(stride_dim(padded, k, window_strides[d]))
    out_dtype = lhs.dtype if preferred_element_type is None else np.dtype(
        preferred_element_type)
    if (dtype_kind(out_dtype) == "f") != (dtype_kind(lhs.dtype) == "f"):
        raise bad(f"preferred_element_type {out_dtype.name} must be a float type for float "
                  "operands and an integer type for integer operands")
    shape = [0] * nd
    for ax, size in zip(os_, [n // B, o] + spatial):
        shape[ax] = size
    return ShapedArray(shape, out_dtype)


def pad_dilate(x: np.ndarray, pads, dilation, value, axes=None) -> np.ndarray:
    """x with k - 1 holes between neighbours along `axes` (default: the leading ones) and
    then (lo, hi) edges of `value` (a negative edge crops), the holes holding `value` too.
    The result keeps x's memory layout."""
    axes = range(len(pads)) if axes is None else axes
    if all(d == 1 for d in dilation) and all(lo == 0 and hi == 0 for lo, hi in pads):
        return x
    shape, put, crop = list(x.shape), [slice(None)] * x.ndim, [slice(None)] * x.ndim
    for ax, (lo, hi), k in zip(axes, pads, dilation):
        full = dilate_dim(x.shape[ax], k) + max(lo, 0) + max(hi, 0)
        shape[ax] = full
        put[ax] = slice(max(lo, 0), max(lo, 0) + dilate_dim(x.shape[ax], k), k)
        crop[ax] = slice(max(-lo, 0), full - max(-hi, 0))
    order = np.argsort([-abs(st) for st in x.strides], kind="stable")   # x's memory order
    out = np.transpose(np.full([shape[a] for a in order], value, dtype=x.dtype),
                       np.argsort(order))
    out[tuple(put)] = x
    return out[tuple(crop)]


def window_view(x: np.ndarray, out_shape, window, strides, dilation, first: int = 0):
    """A read-only view (*x.shape[:first], *out_shape, *window) of the windows of x's axes
    first, first + 1, ... (no copy)."""
    lead = x.shape[:first]
    st = x.strides
    sp = range(first, first + len(window))
    return as_strided(x, shape=tuple(lead) + tuple(out_shape) + tuple(window),
                      strides=tuple(st[:first]) + tuple(st[a] * s for a, s in zip(sp, strides))
                      + tuple(st[a] * k for a, k in zip(sp, dilation)), writeable=False)


def _compute_dtype(dtype):
    return np.dtype(np.float32) if is_half(dtype) else np.dtype(dtype)


def _conv_impl(lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation,
               dimension_numbers, feature_group_count, batch_group_count,
               preferred_element_type, precision=None):
    del precision   # numpy computes in the compute dtype
    # im2col: the padded, dilated input's windows as rows, one matmul per group
    ls, rs, os_ = dimension_numbers
    out_dt = lhs.dtype if preferred_element_type is None else np.dtype(preferred_element_type)
    ct = _compute_dtype(out_dt)
    x = pad_dilate(lhs.astype(ct, copy=False), padding, lhs_dilation, 0, axes=ls[2:])
    x = np.transpose(x, ls)                                  # (N, C, *S), a view
    w = np.transpose(rhs, rs).astype(ct, copy=False)         # (O, I, *K)
    nsp = x.ndim - 2
    N, C = x.shape[:2]
    O, I = w.shape[:2]
    ks = w.shape[2:]
    out_sp = [stride_dim(x.shape[2 + d], dilate_dim(ks[d], rhs_dilation[d]), window_strides[d])
              for d in range(nsp)]
    cols = window_view(x, out_sp, ks, window_strides, rhs_dilation, first=2)  # (N,C,*O,*K)
    sp_axes = list(range(3, 3 + nsp))
    k_axes = list(range(3 + nsp, 3 + 2 * nsp))
    # a row's columns are (feature, taps) or, when the features are x's innermost axis,
    # (taps, feature), so the im2col copy reads contiguous runs
    c_minor = nsp > 0 and abs(x.strides[1]) <= min(abs(st) for st in x.strides[2:])
    inner = k_axes + [2] if c_minor else [2] + k_axes
    M, KK = math.prod(out_sp), math.prod(ks)
    if batch_group_count > 1:   # batch groups are the major part of the batch axis
        G = batch_group_count
        g = cols.reshape((G, N // G) + cols.shape[1:]).transpose([0, 1] + sp_axes + inner)
        rows, n_out = g.reshape(G, (N // G) * M, C * KK), N // G
    else:
        G = feature_group_count
        g = cols.reshape((N, G, C // G) + cols.shape[2:]).transpose([1, 0] + sp_axes + inner)
        rows, n_out = g.reshape(G, N * M, (C // G) * KK), N
    if c_minor:
        w = np.transpose(w, [0] + list(range(2, 2 + nsp)) + [1])   # (O, *K, I)
    wm = w.reshape(G, O // G, I * KK).transpose(0, 2, 1)
    res = np.matmul(rows, wm)                                # (G, n_out * M, O / G)
    res = res.reshape((G, n_out) + tuple(out_sp) + (O // G,))
    res = res.transpose([1, 0, nsp + 2] + list(range(2, nsp + 2)))
    res = res.reshape((n_out, O) + tuple(out_sp))
    return np.ascontiguousarray(np.transpose(res, np.argsort(os_))).astype(out_dt, copy=False)


def _spec_t(spec):
    """The spec with its first two entries swapped (batch <-> feature, out <-> in)."""
    return (spec[1], spec[0]) + tuple(spec[2:])


def _reshape_axis_out_of(src, size1, x):
    """Split axis src of x into (size1, n // size1)."""
    shape = list(x.shape)
    shape[src:src + 1] = [size1, shape[src] // size1]
    return P.reshape(x, shape)


def _reshape_axis_into(src, dst, x):
    """Merge axis src of x into axis dst (numbered with src removed), src as the major part."""
    perm = [i for i in range(len(x.shape)) if i != src]
    perm.insert(dst, src)
    shape = [x.shape[i] for i in range(len(x.shape)) if i != src]
    shape[dst] *= x.shape[src]
    return P.reshape(P.transpose(x, perm), shape)


def _zeros(shape, dtype):
    return P.broadcast_in_dim(np.zeros((), dtype), tuple(shape), ())


def conv_p_bind(lhs, rhs, **params):
    return bind(conv_general_dilated_p, lhs, rhs, **params)


def _vjp_lhs_padding(in_sp, k_sp, strides, out_sp, padding, lhs_dil, rhs_dil):
    pads = []
    for n, k, s, o, (lo, _), ld, rd in zip(in_sp, k_sp, strides, out_sp, padding, lhs_dil,
                                           rhs_dil):
        before = dilate_dim(k, rd) - lo - 1
        after = dilate_dim(n, ld) + dilate_dim(k, rd) - 1 - dilate_dim(o, s) - before
        pads.append((before, after))
    return tuple(pads)


def _vjp_rhs_padding(in_sp, k_sp, strides, out_sp, padding, lhs_dil, rhs_dil):
    pads = []
    for n, k, s, o, (lo, _), ld, rd in zip(in_sp, k_sp, strides, out_sp, padding, lhs_dil,
                                           rhs_dil):
        hi = dilate_dim(o, s) - dilate_dim(n, ld) + dilate_dim(k, rd) - lo - 1
        pads.append((lo, hi))
    return tuple(pads)


def _transpose_lhs(g, lhs_aval, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation,
                   dimension_numbers, feature_group_count, batch_group_count, precision=None):
    # d lhs = conv(ct dilated by the strides, the spatially reversed kernel with in <-> out)
    ls, rs, os_ = dimension_numbers
    if 0 in tuple(g.shape) + tuple(rhs.shape) + tuple(lhs_aval.shape):
        return _zeros(lhs_aval.shape, g.dtype)
    G = feature_group_count
    if feature_group_count > 1 or batch_group_count > 1:
        groups = max(feature_group_count, batch_group_count)
        rhs = _reshape_axis_into(rs[0], rs[1], _reshape_axis_out_of(rs[0], groups, rhs))
        G = groups
    pads = _vjp_lhs_padding([lhs_aval.shape[a] for a in ls[2:]], [rhs.shape[a] for a in rs[2:]],
                            window_strides, [g.shape[a] for a in os_[2:]], padding,
                            lhs_dilation, rhs_dilation)
    rev = bind(P.rev_p, rhs, dimensions=tuple(sorted(rs[2:]))) if len(rs) > 2 else rhs
    out = conv_p_bind(g, rev, window_strides=tuple(lhs_dilation), padding=pads,
                      lhs_dilation=tuple(window_strides), rhs_dilation=tuple(rhs_dilation),
                      dimension_numbers=ConvDimensionNumbers(tuple(os_), _spec_t(rs),
                                                             tuple(ls)),
                      feature_group_count=G, batch_group_count=1, preferred_element_type=None,
                      precision=precision)
    if batch_group_count > 1:
        out = _reshape_axis_into(ls[1], ls[0],
                                 _reshape_axis_out_of(ls[1], batch_group_count, out))
    return out


def _transpose_rhs(g, lhs, rhs_aval, *, window_strides, padding, lhs_dilation, rhs_dilation,
                   dimension_numbers, feature_group_count, batch_group_count, precision=None):
    # d rhs = conv(lhs with batch <-> feature, ct as the kernel): a correlation over the batch
    ls, rs, os_ = dimension_numbers
    if 0 in tuple(g.shape) + tuple(lhs.shape) + tuple(rhs_aval.shape):
        return _zeros(rhs_aval.shape, g.dtype)
    fg, bg = feature_group_count, batch_group_count
    if bg > 1:
        fg, bg = bg, 1
    elif fg > 1:
        fg, bg = 1, fg
    pads = _vjp_rhs_padding([lhs.shape[a] for a in ls[2:]], [rhs_aval.shape[a] for a in rs[2:]],
                            window_strides, [g.shape[a] for a in os_[2:]], padding,
                            lhs_dilation, rhs_dilation)
    return conv_p_bind(lhs, g, window_strides=tuple(rhs_dilation), padding=pads,
                       lhs_dilation=tuple(lhs_dilation), rhs_dilation=tuple(window_strides),
                       dimension_numbers=ConvDimensionNumbers(_spec_t(ls), _spec_t(os_),
                                                              _spec_t(rs)),
                       feature_group_count=fg, batch_group_count=bg,
                       preferred_element_type=None, precision=precision)


def _geometry(params):
    return {k: v for k, v in params.items() if k != "preferred_element_type"}


def _conv_vjp(ct, lhs, rhs, *, out, **params):
    # conv is bilinear: each cotangent is the other operand's transposed convolution
    if not is_float(lhs.dtype):
        return None, None
    geo = _geometry(params)
    dt = ct.dtype
    lhs_c = lhs if lhs.dtype == dt else P.convert(lhs, dt)
    rhs_c = rhs if rhs.dtype == dt else P.convert(rhs, dt)
    d_lhs = _transpose_lhs(ct, lhs, rhs_c, **geo)
    d_rhs = _transpose_rhs(ct, lhs_c, rhs, **geo)
    if dt != lhs.dtype:
        d_lhs, d_rhs = P.convert(d_lhs, lhs.dtype), P.convert(d_rhs, rhs.dtype)
    return d_lhs, d_rhs


def _conv_jvp(ts, xs, *, out, **params):
    # d conv(l, r) = conv(dl, r) + conv(l, dr)
    if not is_float(out.dtype):
        return None
    lhs, rhs = xs
    return P.add_any(None if ts[0] is None else conv_p_bind(ts[0], rhs, **params),
                     None if ts[1] is None else conv_p_bind(lhs, ts[1], **params))


def _conv_batch(args, dims, **params):
    # the vmapped axis folds into the batch, the output features or the feature groups
    lhs, rhs = args
    ls, rs, os_ = params["dimension_numbers"]
    fg, bg = params["feature_group_count"], params["batch_group_count"]
    p = dict(params)
    if dims[0] is not None and dims[1] is not None:
        size = lhs.shape[0]
        if bg > 1:
            new_lhs = _reshape_axis_into(0, ls[0], lhs)
            p["batch_group_count"] = bg * size
        else:
            new_lhs = _reshape_axis_into(0, ls[1], lhs)
            p["feature_group_count"] = fg * size
        out = conv_p_bind(new_lhs, _reshape_axis_into(0, rs[0], rhs), **p)
        return _reshape_axis_out_of(os_[1], size, out), os_[1]
    if dims[0] is not None:
        size = lhs.shape[0]
        if bg == 1:
            out = conv_p_bind(_reshape_axis_into(0, ls[0], lhs), rhs, **p)
            return _reshape_axis_out_of(os_[0], size, out), os_[0]
        # keep the batch groups major: (size, G, n/G) -> (G, size * n/G) -> (G * size * n/G)
        x = _reshape_axis_out_of(ls[0] + 1, bg, lhs)
        x = _reshape_axis_into(0, ls[0] + 1, x)
        x = _reshape_axis_into(ls[0], ls[0], x)
        out = conv_p_bind(x, rhs, **p)
        return _reshape_axis_out_of(os_[0], size, out), os_[0]
    size = rhs.shape[0]
    if fg == 1 and bg == 1:
        out = conv_p_bind(lhs, _reshape_axis_into(0, rs[0], rhs), **p)
        return _reshape_axis_out_of(os_[1], size, out), os_[1]
    groups = max(fg, bg)   # groups stay the major part of the output features
    w = _reshape_axis_out_of(rs[0] + 1, groups, rhs)
    w = _reshape_axis_into(0, rs[0] + 1, w)
    w = _reshape_axis_into(rs[0], rs[0], w)
    out = conv_p_bind(lhs, w, **p)
    out = _reshape_axis_out_of(os_[1], groups, out)
    out = _reshape_axis_out_of(os_[1] + 1, size, out)
    return _reshape_axis_into(os_[1], os_[1] + 1, out), os_[1]


conv_general_dilated_p = defprim("conv_general_dilated", _conv_shape, _conv_impl, _conv_vjp,
                                 _conv_jvp, _conv_batch)
