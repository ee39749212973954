"""funcgrad.lax: direct access to primitives and structured control flow (JAX's lax names)."""
from __future__ import annotations

import numpy as np

from funcgrad import prims as P
from funcgrad.transforms.ad import stop_gradient  # noqa: F401
from funcgrad.lax.control_flow import (
    associative_scan,
    cond,
    fori_loop,
    map,
    scan,
    switch,
    while_loop,
)  # noqa: F401
from funcgrad.prims.conv import (
    ConvDimensionNumbers,
    conv_dimension_numbers,
    conv_general_dilated_p,
    conv_general_permutations,
    padtype_to_pads,
)
from funcgrad.prims.convolution import (
    ConvGeneralDilatedDimensionNumbers,
    conv,
    conv_general_dilated,
    conv_general_dilated_patches,
    conv_general_shape_tuple,
    conv_shape_tuple,
    conv_transpose,
    conv_transpose_shape_tuple,
    conv_with_general_padding,
)
from funcgrad.core import bind
from funcgrad.prims.complex import complex_ as complex  # noqa: F401
from funcgrad.prims.windows import (
    reduce_window,
    reduce_window_max_p,
    reduce_window_min_p,
    reduce_window_shape_tuple,
    reduce_window_sum_p,
    select_and_gather_add_p,
    select_and_scatter_add_p,
)


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
    """Contract lhs and rhs: dimension_numbers = ((lhs_contract, rhs_contract),
    (lhs_batch, rhs_batch)); output axes are batch, lhs free, rhs free.

    precision: None, "default", "high", "highest", "bfloat16", "tensorfloat32", "float32", a
    lax.Precision member or a pair of them; it sets float32 products' speed/accuracy on CUDA
    (None follows funcgrad.config's "default_matmul_precision": full float32 unless changed)
    and is ignored on the CPU. preferred_element_type is the accumulation and result dtype:
    a wider one than the operands' (float32 for bfloat16/float16, int32 for int8) makes the
    product accumulate in it, as XLA does (the operands are converted first: their products are
    exact in it); a narrower one converts the result.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> from funcgrad import lax
        >>> x = fnp.ones((2, 3), "float32")
        >>> lax.dot_general(x, x, (((1,), (1,)), ((), ())), precision="highest").tolist()
        [[3.0, 3.0], [3.0, 3.0]]
    """
    from funcgrad.numpy._linalg import widen_operands
    lhs, rhs = widen_operands(lhs, rhs, preferred_element_type)
    out = P.dot_general(lhs, rhs, dimension_numbers, precision)
    if preferred_element_type is not None and np.dtype(preferred_element_type) != out.dtype:
        out = P.convert(out, np.dtype(preferred_element_type))
    return out


def broadcast_in_dim(operand, shape, broadcast_dimensions):
    return P.broadcast_in_dim(operand, shape, broadcast_dimensions)


def convert_element_type(operand, new_dtype):
    return P.convert(operand, np.dtype(new_dtype))


def iota(dtype, size):  # noqa: F811  (JAX's parameter name shadows lax.dtype)
    return bind(P.iota_p, dtype=np.dtype(dtype), shape=(int(size),), dimension=0)


def rsqrt(x):
    return bind(P.rsqrt_p, x)


def logistic(x):
    return bind(P.logistic_p, x)


def erf(x):
    return bind(P.erf_p, x)


def integer_pow(x, y: int):
    return bind(P.integer_pow_p, x, y=int(y))


def slice(operand, start_indices, limit_indices, strides=None):
    strides = tuple(strides) if strides is not None else (1,) * len(start_indices)
    return bind(P.slice_p, operand, start_indices=tuple(start_indices),
                limit_indices=tuple(limit_indices), strides=strides)


def select(pred, on_true, on_false):
    return P.select(pred, on_true, on_false)


from funcgrad.lax.bits import bitcast_convert_type, clz, reduce_precision  # noqa: F401
from funcgrad.lax.ops import *
from funcgrad.lax.reductions import (
    broadcast_like,
    broadcast_shapes,
    composite,
    dtype,
    empty,
    index_take,
    reduce,
    reduce_xor,
    split,
    tile,
)
from funcgrad.lax.solvers import custom_linear_solve, custom_root, ragged_dot  # noqa: F401
from funcgrad.lax.special_gamma import betainc, igamma, igamma_grad_a, igammac, random_gamma_grad
from funcgrad.lax.special_zeta import bessel_i0e, bessel_i1e, polygamma, zeta  # noqa: F401
from funcgrad.lax import linalg_complex  # noqa: F401,E402  (complex jnp.linalg, registered)
from funcgrad.lax.slicing import (
    GatherDimensionNumbers,
    GatherScatterMode,
    ScatterDimensionNumbers,
    gather,
    scatter,
    scatter_add,
    scatter_max,
    scatter_min,
    scatter_mul,
    scatter_sub,
)
from funcgrad.lax.ops import _same_dtypes  # noqa: E402
from funcgrad.numpy import nextafter as _nextafter  # noqa: E402

nextafter = _same_dtypes("nextafter", _nextafter)

# The primitives themselves under JAX's lax.<name>_p names (`lax.add_p.bind(x, y)`), for the
# ones whose operands and params mean what JAX's do: elementwise ops on equal shapes, the
# reductions over `axes` and transpose's `permutation`.
from funcgrad.prims import (
    abs_p,
    add_p,
    and_p,
    cos_p,
    div_p,
    eq_p,
    erf_p,
    exp_p,
    expm1_p,
    floor_p,
    ge_p,
    gt_p,
    integer_pow_p,
    le_p,
    log1p_p,
    log_p,
    logistic_p,
    lt_p,
    max_p,
    min_p,
    mul_p,
    ne_p,
    neg_p,
    not_p,
    or_p,
    pow_p,
    reduce_max_p,
    reduce_min_p,
    reduce_prod_p,
    reduce_sum_p,
    rem_p,
    rsqrt_p,
    shift_left_p,
    shift_right_logical_p,
    sign_p,
    sin_p,
    sqrt_p,
    stop_gradient_p,
    sub_p,
    tanh_p,
    transpose_p,
    xor_p,
)
from funcgrad.prims.complex import complex_p, conj_p, imag_p, real_p  # noqa: F401
