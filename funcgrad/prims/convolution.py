"""lax's convolution entry points (conv_general_dilated, conv, conv_with_general_padding,
conv_transpose, conv_general_dilated_patches) and its convolution / window shape helpers."""
from __future__ import annotations

import math

import numpy as np

from funcgrad import prims as P
from funcgrad.config import canonical_precision, config
from funcgrad.core import ArrayBase, bind, user_frame_src
from funcgrad.core.dtypes import dtype_kind
from funcgrad.prims.conv import (
    ConvDimensionNumbers,
    conv_dimension_numbers,
    conv_general_permutations,
    conv_p_bind,
    dilate_dim,
    padtype_to_pads,
    stride_dim,
)


def _ints(name, v, n, default=1):
    if v is None:
        return (default,) * n
    v = tuple(int(a) for a in v)
    if len(v) != n:
        raise ValueError(f"{name} needs {n} entries (one per spatial axis), got {v}"
                         f"\n  at {user_frame_src()}")
    return v


def _as_array(x):
    """Arrays and tracers as they are; other values as numpy arrays (Python numbers as JAX
    types them: float32 / int32)."""
    if isinstance(x, ArrayBase):
        return x
    a = np.asarray(x)
    if not isinstance(x, (np.ndarray, np.generic)) and a.dtype in (np.float64, np.int64):
        a = a.astype(np.float32 if dtype_kind(a.dtype) == "f" else np.int32)
    return a


def conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=None,
                         rhs_dilation=None, dimension_numbers=None, feature_group_count=1,
                         batch_group_count=1, precision=None, preferred_element_type=None):
    """General N-d convolution (cross-correlation), as `jax.lax.conv_general_dilated`.

    Args:
        lhs: input, rank n + 2 (batch, feature and n spatial axes in the layout that
            `dimension_numbers` gives).
        rhs: kernel, rank n + 2 (out feature, in feature and n spatial axes).
        window_strides: n ints.
        padding: "SAME", "SAME_LOWER", "VALID" or n (low, high) pairs (negative crops).
        lhs_dilation: n ints, holes inserted between input elements (a transposed conv).
        rhs_dilation: n ints, holes between kernel taps (an atrous conv).
        dimension_numbers: None (NCHW/OIHW/NCHW-like), a ConvDimensionNumbers, or three
            strings such as ("NHWC", "HWIO", "NHWC").
        feature_group_count: split the input features into groups (depthwise: = C).
        batch_group_count: split the batch into groups, one per output feature group.
        precision: how float32 products round on CUDA, as dot_general's: None/"default"
            takes config's "default_matmul_precision" (full float32 unless changed),
            "tensorfloat32"/"high" lets cuDNN use TF32 tensor cores; the CPU computes in the
            operand type (float16 accumulates in float32).
        preferred_element_type: the output (accumulation) dtype, e.g. float32 for float16.

    Returns:
        The convolution, laid out as dimension_numbers' out spec says.

    Example:
        >>> import numpy as np
        >>> from funcgrad import lax
        >>> x, k = np.ones((1, 5, 5, 3), np.float32), np.ones((3, 3, 3, 8), np.float32)
        >>> lax.conv_general_dilated(x, k, (1, 1), "SAME",
        ...                          dimension_numbers=("NHWC", "HWIO", "NHWC")).shape
        (1, 5, 5, 8)
    """
    prec = canonical_precision(precision)
    if prec is None:
        prec = config.default_matmul_precision
    lhs, rhs = _as_array(lhs), _as_array(rhs)
    dn = conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
    nsp = len(lhs.shape) - 2
    strides = _ints("window_strides", window_strides, nsp)
    ldil = _ints("lhs_dilation", lhs_dilation, nsp)
    rdil = _ints("rhs_dilation", rhs_dilation, nsp)
    if isinstance(padding, str):
        ks = [dilate_dim(rhs.shape[a], r) for a, r in zip(dn.rhs_spec[2:], rdil)]
        pads = padtype_to_pads([lhs.shape[a] for a in dn.lhs_spec[2:]], ks, strides, padding)
    else:
        pads = padding
    pads = tuple((int(lo), int(hi)) for lo, hi in pads)
    if len(pads) != nsp:
        raise ValueError(f"padding needs {nsp} (low, high) pairs, got {pads}")
    pet = None if preferred_element_type is None else np.dtype(preferred_element_type)
    if pet == lhs.dtype:
        pet = None
    return conv_p_bind(lhs, rhs, window_strides=strides, padding=pads, lhs_dilation=ldil,
                       rhs_dilation=rdil, dimension_numbers=dn,
                       feature_group_count=int(feature_group_count),
                       batch_group_count=int(batch_group_count), preferred_element_type=pet,
                       precision=prec)


def conv(lhs, rhs, window_strides, padding, precision=None, preferred_element_type=None):
    """Convolution with NCHW input, OIHW kernel and NCHW output (`jax.lax.conv`).

    Example:
        >>> import numpy as np
        >>> from funcgrad import lax
        >>> lax.conv(np.ones((2, 3, 8, 8)), np.ones((4, 3, 3, 3)), (1, 1), "VALID").shape
        (2, 4, 6, 6)
    """
    return conv_general_dilated(lhs, rhs, window_strides, padding, precision=precision,
                                preferred_element_type=preferred_element_type)


def conv_with_general_padding(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                              precision=None, preferred_element_type=None):
    """`jax.lax.conv_with_general_padding`: NCHW/OIHW convolution with dilations.

    Example:
        >>> import numpy as np
        >>> from funcgrad import lax
        >>> lax.conv_with_general_padding(np.ones((1, 1, 4)), np.ones((1, 1, 2)), (1,),
        ...                               [(1, 1)], (2,), (1,)).shape
        (1, 1, 8)
    """
    return conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=lhs_dilation,
                                rhs_dilation=rhs_dilation, precision=precision,
                                preferred_element_type=preferred_element_type)


def _conv_transpose_padding(k, s, padding):
    if padding == "SAME":
        total = k + s - 2
        lo = k - 1 if s > k - 1 else -(-total // 2)
    elif padding == "VALID":
        total = k + s - 2 + max(k - s, 0)
        lo = k - 1
    else:
        raise ValueError(f"conv_transpose padding must be 'SAME', 'VALID' or explicit pairs, "
                         f"got {padding!r}")
    return lo, total - lo


_TRANSPOSE_DN = {2: ("NC", "IO", "NC"), 3: ("NHC", "HIO", "NHC"), 4: ("NHWC", "HWIO", "NHWC"),
                 5: ("NHWDC", "HWDIO", "NHWDC")}


def conv_transpose(lhs, rhs, strides, padding, rhs_dilation=None, dimension_numbers=None,
                   transpose_kernel=False, precision=None, preferred_element_type=None):
    """Transposed ("deconvolution") convolution, as `jax.lax.conv_transpose`: the input is
    dilated by `strides`; default layouts are NHWC / HWIO / NHWC.

    Example:
        >>> import numpy as np
        >>> from funcgrad import lax
        >>> lax.conv_transpose(np.ones((1, 4, 4, 2)), np.ones((3, 3, 2, 5)), (2, 2),
        ...                    "SAME").shape
        (1, 8, 8, 5)
    """
    lhs, rhs = _as_array(lhs), _as_array(rhs)
    nd = len(lhs.shape)
    if dimension_numbers is None:
        if nd not in _TRANSPOSE_DN:
            raise ValueError(f"conv_transpose has no default layout for rank {nd}; pass "
                             "dimension_numbers")
        dimension_numbers = _TRANSPOSE_DN[nd]
    dn = conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
    nsp = nd - 2
    rdil = _ints("rhs_dilation", rhs_dilation, nsp)
    strides = _ints("strides", strides, nsp)
    if isinstance(padding, str):
        ks = [dilate_dim(rhs.shape[a], r) for a, r in zip(dn.rhs_spec[2:], rdil)]
        padding = [_conv_transpose_padding(k, s, padding.upper()) for k, s in zip(ks, strides)]
    if transpose_kernel:   # flip the spatial axes and swap the kernel's in and out features
        if nsp:
            rhs = bind(P.rev_p, rhs, dimensions=tuple(sorted(dn.rhs_spec[2:])))
        perm = list(range(nd))
        perm[dn.rhs_spec[0]], perm[dn.rhs_spec[1]] = dn.rhs_spec[1], dn.rhs_spec[0]
        rhs = P.transpose(rhs, perm)
    return conv_general_dilated(lhs, rhs, (1,) * nsp, padding, strides, rdil, dn,
                                precision=precision,
                                preferred_element_type=preferred_element_type)


# ---------------------------------------------------------------------------------------------
# patches and shape helpers
# ---------------------------------------------------------------------------------------------

# what `dimension_numbers` accepts: None, a ConvDimensionNumbers or three layout strings
ConvGeneralDilatedDimensionNumbers = ConvDimensionNumbers | tuple | None


def conv_general_dilated_patches(lhs, filter_shape, window_strides, padding, lhs_dilation=None,
                                 rhs_dilation=None, dimension_numbers=None, precision=None,
                                 preferred_element_type=None):
    """The patches a convolution with a `filter_shape` window sees, as output features
    (feature-major: C x prod(filter_shape)), as `jax.lax.conv_general_dilated_patches`.

    Example:
        >>> import numpy as np
        >>> from funcgrad import lax
        >>> lax.conv_general_dilated_patches(np.ones((1, 2, 4, 4)), (2, 2), (2, 2),
        ...                                  "VALID").shape
        (1, 8, 2, 2)
    """
    lhs = _as_array(lhs)
    filter_shape = tuple(int(k) for k in filter_shape)
    dn = conv_dimension_numbers(lhs.shape, (1, 1) + filter_shape, dimension_numbers)
    taps, c = math.prod(filter_shape), lhs.shape[dn.lhs_spec[1]]
    # kernel (c taps, 1, *filter): output feature (ch, t) copies tap t of input channel ch
    eye = np.broadcast_to(np.eye(taps, dtype=lhs.dtype), (c, taps, taps))
    rhs = eye.reshape((c * taps, 1) + filter_shape)
    rhs = np.ascontiguousarray(np.transpose(rhs, np.argsort(dn.rhs_spec)))
    return conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                                dn, feature_group_count=c,
                                preferred_element_type=preferred_element_type)


def conv_shape_tuple(lhs_shape, rhs_shape, strides, pads, batch_group_count=1) -> tuple:
    """Output shape of an NC.../OI... convolution (`jax.lax.conv_shape_tuple`).

    Example:
        >>> conv_shape_tuple((2, 3, 8, 8), (4, 3, 3, 3), (2, 2), "SAME")
        (2, 4, 4, 4)
    """
    if isinstance(pads, str):
        pads = padtype_to_pads(lhs_shape[2:], rhs_shape[2:], strides, pads)
    if len(pads) != len(lhs_shape) - 2:
        raise TypeError(f"conv_shape_tuple: padding {pads} needs one pair per spatial axis of "
                        f"{tuple(lhs_shape)}")
    padded = [n + lo + hi for n, (lo, hi) in zip(lhs_shape[2:], pads)]
    if any(p < 0 for p in padded):
        raise ValueError(f"negative padding {pads} is larger than the spatial axes of "
                         f"{tuple(lhs_shape)}")
    space = [stride_dim(p, k, s) for p, k, s in zip(padded, rhs_shape[2:], strides)]
    return (lhs_shape[0] // batch_group_count, rhs_shape[0]) + tuple(space)


def _permuted(shape, perm):
    return tuple(shape[p] for p in perm)


def _unpermuted(shape, perm):
    out = [0] * len(shape)
    for p, n in zip(perm, shape):
        out[p] = n
    return tuple(out)


def conv_general_shape_tuple(lhs_shape, rhs_shape, window_strides, padding,
                             dimension_numbers) -> tuple:
    """Output shape of conv_general_dilated with string dimension numbers.

    Example:
        >>> conv_general_shape_tuple((2, 8, 8, 3), (3, 3, 3, 4), (1, 1), "VALID",
        ...                          ("NHWC", "HWIO", "NHWC"))
        (2, 6, 6, 4)
    """
    lp, rp, op = conv_general_permutations(dimension_numbers)
    out = conv_shape_tuple(_permuted(lhs_shape, lp), _permuted(rhs_shape, rp), window_strides,
                           padding)
    return _unpermuted(out, op)


def conv_transpose_shape_tuple(lhs_shape, rhs_shape, window_strides, padding,
                               dimension_numbers) -> tuple:
    """Output shape of conv_transpose (`jax.lax.conv_transpose_shape_tuple`).

    Example:
        >>> conv_transpose_shape_tuple((1, 4, 4, 2), (3, 3, 2, 5), (2, 2), "SAME",
        ...                            ("NHWC", "HWIO", "NHWC"))
        (1, 8, 8, 5)
    """
    lp, rp, op = conv_general_permutations(dimension_numbers)
    lhs, rhs = _permuted(lhs_shape, lp), _permuted(rhs_shape, rp)
    if isinstance(padding, str):
        padding = [_conv_transpose_padding(k, s, padding.upper())
                   for k, s in zip(rhs[2:], window_strides)]
    space = [(i - 1) * s - k + 2 + lo + hi
             for i, k, s, (lo, hi) in zip(lhs[2:], rhs[2:], window_strides, padding)]
    return _unpermuted((lhs[0], rhs[0]) + tuple(space), op)
