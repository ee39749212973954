"""Block-scaled matmuls (jax.nn.scaled_matmul, scaled_dot_general and their configs).

funcgrad has no float8/float4 dtypes: operands are float16/32/64 arrays, and the mxfp8/nvfp4
quantization of scaled_dot_general is emulated, rounding values to the grid of the narrow
format (half to even, as a cast would) and scales to powers of two (mxfp8, e8m0 rounded up) or
to float8_e4m3fn values (nvfp4), as JAX's cuDNN path does before its matmul. Everything is a
composition, so jit, vmap and both backends work; scaled_dot_general's gradient is JAX's
custom rule (quantized backward matmuls, nvfp4's straight-through clipping).
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from funcgrad import numpy as fnp
from funcgrad.core.dtypes import dtype_kind
from funcgrad.lax.bits import _exponent
from funcgrad.transforms.custom import custom_vjp
from funcgrad.lax import dot_general

# narrow formats: (mantissa bits, smallest normal exponent, largest finite value)
_FORMATS = {"float8_e4m3fn": (3, -6, 448.0), "float4_e2m1fn": (1, 0, 6.0),
            "float8_e5m2": (2, -14, 57344.0)}


@dataclasses.dataclass(slots=True)
class BlockScaleConfig:
    """One operand's block-scaled quantization (JAX's fields; dtypes named by strings)."""
    mode: str
    block_size: int
    data_type: Any
    scale_type: Any
    global_scale: Any
    infer_only: bool


def get_scaled_dot_general_config(mode, global_scale=None) -> BlockScaleConfig:
    """The quantization config for scaled_dot_general: 'mxfp8' (float8_e4m3fn values, one
    power-of-two e8m0 scale per 32) or 'nvfp4' (float4_e2m1fn values, one float8_e4m3fn scale
    per 16, times `global_scale`, default [1.0]) (jax.nn.get_scaled_dot_general_config).

    Example:
        >>> from funcgrad import nn
        >>> nn.get_scaled_dot_general_config("mxfp8").block_size
        32
    """
    if mode == "nvfp4":
        gs = np.ones((1,), np.float32) if global_scale is None else global_scale
        return BlockScaleConfig("nvfp4", 16, "float4_e2m1fn", "float8_e4m3fn", gs, False)
    if mode == "mxfp8":
        return BlockScaleConfig("mxfp8", 32, "float8_e4m3fn", "float8_e8m0fnu", None, False)
    raise ValueError(f"Unsupported mode: {mode}")


def _check_float(name, *xs):
    for x in xs:
        if dtype_kind(x.dtype) != "f":
            raise TypeError(f"{name}: funcgrad has no float8/float4 dtypes; operands must be "
                            f"float16, float32 or float64, got {x.dtype.name}")


def scaled_matmul(lhs, rhs, lhs_scales, rhs_scales, preferred_element_type=np.float32):
    """Block-scaled batched matmul (jax.nn.scaled_matmul): lhs (B, M, K) and rhs (B, N, K)
    times their per-block scales (B, M, K_a) and (B, N, K_b), blocks of K // K_a and
    K // K_b along K, contracted over K: (B, M, N) of `preferred_element_type`.

    funcgrad has no float8/float4 dtypes: operands and scales are float16/32/64 arrays (values
    already on the narrow grid, if you emulate JAX's quantized inputs). Products are taken in
    float32 (float64 for float64 operands).

    Example:
        >>> import numpy as np
        >>> from funcgrad import nn
        >>> a = np.array([1.0, 2.0, 3.0]).reshape(1, 1, 3)
        >>> b = np.array([4.0, 5.0, 6.0]).reshape(1, 1, 3)
        >>> s = np.array([0.5]).reshape(1, 1, 1)
        >>> nn.scaled_matmul(a, b, s, s).tolist()
        [[[8.0]]]
    """
    a, b, sa, sb = (fnp.asarray(x) for x in (lhs, rhs, lhs_scales, rhs_scales))
    if not all(x.ndim == 3 for x in (a, b, sa, sb)):
        raise ValueError(f"scaled_matmul requires all inputs to be 3-dimensional arrays, got "
                         f"shapes {[tuple(x.shape) for x in (a, b, sa, sb)]}")
    _check_float("scaled_matmul", a, b, sa, sb)
    (ba, m, k), (bb, n, kb) = a.shape, b.shape
    if k != kb or ba != bb:
        raise ValueError(f"scaled_matmul requires inputs a and b to have matching batch (B) "
                         f"and contract (K) dimensions, but got shapes {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    if sa.shape[2] != sb.shape[2] or sa.shape[0] != sb.shape[0]:
        raise ValueError(f"scaled_matmul requires scales to have matching batch (B) and "
                         f"contract (K) dimensions, but got shapes {tuple(sa.shape)} and "
                         f"{tuple(sb.shape)}")
    if sa.shape[1] != m or sb.shape[1] != n or sa.shape[0] != ba:
        raise ValueError(f"scaled_matmul requires scales to match non-contract dimensions of "
                         f"inputs, but got shapes a: {tuple(a.shape)}, b: {tuple(b.shape)}, "
                         f"a_scales: {tuple(sa.shape)}, b_scales: {tuple(sb.shape)}")
    kk = sa.shape[2]
    if kk == 0 or k % kk:
        raise ValueError(f"scaled_matmul: K = {k} must be a multiple of the scales' last "
                         f"dimension {kk} (shapes {tuple(a.shape)} and {tuple(sa.shape)})")
    work = np.result_type(a.dtype, b.dtype, sa.dtype, sb.dtype, np.float32)
    rep = k // kk
    a_s = fnp.asarray(a, work) * fnp.repeat(fnp.asarray(sa, work), rep, axis=-1)
    b_s = fnp.asarray(b, work) * fnp.repeat(fnp.asarray(sb, work), rep, axis=-1)
    out = fnp.einsum("bmk,bnk->bmn", a_s, b_s, precision="highest")
    return fnp.asarray(out, np.dtype(preferred_element_type))


def _round_to(v, fmt):
    """v rounded (half to even) to the values of the narrow float format `fmt`."""
    nmant, emin, _ = _FORMATS[fmt]
    av = fnp.abs(v)
    ok = fnp.logical_and(fnp.isfinite(v), av > 0)
    s = fnp.where(ok, av, 1.0)
    one = s.dtype.type(1.0)
    e = fnp.maximum(_exponent(s, s.dtype.type), float(emin))
    q = fnp.power(one * 2, e - float(nmant))
    return fnp.where(ok, fnp.round(v / q) * q, v)


def _e8m0_round_up(s, dtype):
    """JAX's cast_to_e8m0_with_rounding_up then e8m0_to_dtype, on float32 values."""
    from funcgrad.lax.bits import bitcast_convert_type
    bits = bitcast_convert_type(fnp.asarray(s, np.float32), np.int32)
    exp = fnp.right_shift(bits, np.int32(23)) & 0xFF
    mant = bits & 0x7FFFFF
    ru = (mant > 0) & (exp != 0xFE) & ~((exp == 0) & (mant <= 0x400000))
    exp = (exp + fnp.asarray(ru, np.int32)) % 256
    near_zero = 2.0 ** -15 if np.dtype(dtype) == np.float16 else 2.0 ** -127
    val = fnp.where(exp == 0, np.float32(near_zero),
                    fnp.power(np.float32(2.0), fnp.asarray(exp - 127, np.float32)))
    return fnp.asarray(val, dtype)


def _quantize(x, config):
    """(values on the data format's grid, per-block scales), x of shape (B, M, K)."""
    shape = tuple(x.shape)
    k, bs = shape[-1], int(config.block_size)
    if k < bs or k % bs:
        raise ValueError(f"scaled_dot_general: the contracting size {k} of an operand "
                         f"normalized to {shape} must be a positive multiple of the block "
                         f"size {bs}")
    x = fnp.reshape(x, shape[:-1] + (k // bs, bs))
    fmt = str(np.dtype(config.data_type).name if not isinstance(config.data_type, str)
              else config.data_type)
    mx = _FORMATS[fmt][2]
    if config.mode == "mxfp8":
        scales = _e8m0_round_up(fnp.max(fnp.abs(x), axis=-1, keepdims=True) / mx, x.dtype)
        scaled = x / scales
    elif config.mode == "nvfp4":
        x = x / fnp.asarray(config.global_scale, np.float32)
        smax = _FORMATS["float8_e4m3fn"][2]
        scales = fnp.clip(fnp.max(fnp.abs(x), axis=-1, keepdims=True) / mx, 0, smax)
        scales = _round_to(scales, "float8_e4m3fn")
        scaled = x / fnp.asarray(scales, np.float32)
    else:
        raise ValueError(f"Unrecognized mode: {config.mode}.")
    q = _round_to(fnp.clip(scaled, -mx, mx), fmt)
    if fmt == "float4_e2m1fn":          # no NaN in float4: an all-zero block (0/0) casts to 0
        q = fnp.where(fnp.isnan(q), 0.0, q)
    return fnp.reshape(q, shape), scales[..., 0]


def _normalize(x, contract, batch):
    """x transposed to (batch, other, contracting) and reshaped to (B, M, K)."""
    order = list(range(x.ndim))
    c = [d for d in order if d in contract]
    b = [d for d in order if d in batch]
    r = [d for d in order if d not in contract and d not in batch]
    size = lambda ds: int(np.prod([x.shape[d] for d in ds], dtype=np.int64))
    return fnp.reshape(fnp.transpose(x, b + r + c), (size(b), size(r), size(c)))


def _out_shape(ls, rs, l_dn, r_dn):
    (lc, lb), (rc, rb) = l_dn, r_dn
    return (tuple(n for i, n in enumerate(ls) if i in lb)
            + tuple(n for i, n in enumerate(ls) if i not in lc and i not in lb)
            + tuple(n for i, n in enumerate(rs) if i not in rc and i not in rb))


def _scaled_impl(lhs, rhs, dn, pref, configs):
    (lc, rc), (lb, rb) = dn
    l3, r3 = _normalize(lhs, lc, lb), _normalize(rhs, rc, rb)
    lq, ls = _quantize(l3, configs[0])
    rq, rs = _quantize(r3, configs[1])
    nv = configs[0].mode == "nvfp4"
    out = scaled_matmul(lq, rq, ls, rs, np.float32 if nv else pref)
    if nv:
        gs = fnp.asarray(configs[0].global_scale, np.float32) * fnp.asarray(
            configs[1].global_scale, np.float32)
        out = fnp.asarray(out * gs, pref)
    return fnp.reshape(out, _out_shape(lhs.shape, rhs.shape, (lc, lb), (rc, rb)))


def _ranges(*xs):
    start, out = 0, []
    for x in xs:
        out.append(list(range(start, start + len(x))))
        start += len(x)
    return out


def _transpose_lhs(g, x, y, dn, pref, configs, swap_ans=False):
    (xc, yc), (xb, yb) = dn
    x_kept = [i for i in range(x.ndim) if i not in xc and i not in xb]
    y_kept = [i for i in range(y.ndim) if i not in yc and i not in yb]
    if swap_ans:
        ans_batch, ans_y, _ = _ranges(xb, y_kept, x_kept)
    else:
        ans_batch, _, ans_y = _ranges(xb, x_kept, y_kept)
    xc_by_y = list(np.take(xc, np.argsort(yc))) if len(xc) else []
    out_axes = [int(i) for i in np.argsort(list(xb) + x_kept + xc_by_y)]
    y3, g3 = _normalize(y, y_kept, yb), _normalize(g, ans_y, ans_batch)
    if configs[0].mode != "nvfp4":
        gq, gs = _quantize(g3, configs[0])
        yq, ys = _quantize(y3, configs[1])
        out = scaled_matmul(gq, yq, gs, ys, pref)
    else:
        out = fnp.asarray(fnp.einsum("bmk,bnk->bmn", g3, y3), pref)
    shape = _out_shape(g.shape, y.shape, (ans_y, ans_batch), (y_kept, yb))
    return fnp.transpose(fnp.reshape(out, shape), out_axes)


def _make_scaled(dn, pref, configs):
    @custom_vjp
    def f(lhs, rhs):
        return _scaled_impl(lhs, rhs, dn, pref, configs)

    def fwd(lhs, rhs):
        return f(lhs, rhs), (lhs, rhs)

    def bwd(res, g):
        lhs, rhs = res
        (lc, rc), (lb, rb) = dn
        gl = _transpose_lhs(g, lhs, rhs, dn, pref, [configs[2], configs[1]])
        gr = _transpose_lhs(g, rhs, lhs, ((rc, lc), (rb, lb)), pref,
                            [configs[2], configs[0]], swap_ans=True)
        if configs[2].mode == "nvfp4":     # straight-through: clipped inputs get no gradient
            mx, smax = _FORMATS[configs[0].data_type][2], _FORMATS["float8_e4m3fn"][2]
            lim_l = fnp.asarray(configs[0].global_scale, lhs.dtype) * (mx * smax)
            lim_r = fnp.asarray(configs[1].global_scale, rhs.dtype) * (mx * smax)
            gl = fnp.where(fnp.abs(lhs) <= lim_l, gl, 0)
            gr = fnp.where(fnp.abs(rhs) <= lim_r, gr, 0)
        return fnp.asarray(gl, lhs.dtype), fnp.asarray(gr, rhs.dtype)

    f.defvjp(fwd, bwd)
    return f


def scaled_dot_general(lhs, rhs, dimension_numbers, preferred_element_type=np.float32,
                       configs=None, implementation=None):
    """dot_general of block-quantized operands (jax.nn.scaled_dot_general).

    With `configs` (three BlockScaleConfig, for lhs, rhs and the gradient; see
    get_scaled_dot_general_config), each operand is normalized to (batch, rows, contracting),
    quantized per block (emulated: values rounded to the float8/float4 grid, funcgrad having
    no such dtypes; inputs are float16/32/64) and multiplied by scaled_matmul; its gradient
    quantizes the cotangent too (JAX's rule). Without configs it is lax.dot_general. The
    contracting size must be a multiple of the block size (32 for mxfp8, 16 for nvfp4).

    Example:
        >>> import numpy as np
        >>> from funcgrad import nn
        >>> cfg = [nn.get_scaled_dot_general_config("mxfp8")] * 3
        >>> x = np.ones((2, 4, 32), np.float32)
        >>> nn.scaled_dot_general(x, x, (((2,), (2,)), ((0,), (0,))), configs=cfg).shape
        (2, 4, 4)
    """
    if implementation is not None:
        warnings.warn("Backend selector, now ignored. The system chooses the backend "
                      "automatically.", DeprecationWarning, stacklevel=2)
    if configs is None:
        return dot_general(lhs, rhs, dimension_numbers,
                           preferred_element_type=preferred_element_type)
    pref = np.dtype(preferred_element_type)
    if pref not in (np.dtype(np.float32), np.dtype(np.float16)):
        raise TypeError(f"scaled_dot_general: preferred_element_type must be float32 or "
                        f"float16 (funcgrad has no bfloat16), got {pref.name}")
    lhs, rhs = fnp.asarray(lhs), fnp.asarray(rhs)
    _check_float("scaled_dot_general", lhs, rhs)
    (lc, rc), (lb, rb) = dimension_numbers
    lc, rc, lb, rb = (tuple(int(d) for d in t) for t in (lc, rc, lb, rb))
    if len(lc) != len(rc) or len(lb) != len(rb) or \
            any(lhs.shape[i] != rhs.shape[j] for i, j in zip(lc + lb, rc + rb)):
        raise ValueError(f"scaled_dot_general: dimension_numbers {dimension_numbers} do not "
                         f"match shapes {tuple(lhs.shape)} and {tuple(rhs.shape)}")
    squeeze = not lb
    if squeeze:                       # JAX adds a unit batch dim at the end of each operand
        lhs, rhs = lhs[..., None], rhs[..., None]
        lb, rb = (lhs.ndim - 1,), (rhs.ndim - 1,)
    out = _make_scaled(((lc, rc), (lb, rb)), pref, list(configs))(lhs, rhs)
    return out[0] if squeeze else out
