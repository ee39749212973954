"""funcgrad.numpy: numpy's API (JAX's flavour) over traceable, differentiable arrays."""
import sys as _sys

import numpy as _np

from funcgrad import core as _core
from funcgrad.core import ArrayBase as ndarray  # noqa: F401  (isinstance(x, fnp.ndarray))
from funcgrad.numpy._base import (
    arange,
    array,
    asarray,
    bfloat16,
    bool_,
    broadcast_shapes,
    broadcast_to,
    canonical_dtype,
    complex64,
    complex128,
    empty,
    eye,
    float16,
    float32,
    float64,
    full,
    full_like,
    identity,
    int8,
    int16,
    int32,
    int64,
    ndim,
    ones,
    ones_like,
    reshape,
    result_type,
    shape,
    size,
    tril,
    triu,
    uint8,
    uint16,
    uint32,
    uint64,
    zeros,
    zeros_like,
)
from funcgrad.numpy._conv import convolve, correlate  # noqa: F401
from funcgrad.numpy._indexing import _getitem, _IndexUpdateHelper  # noqa: F401
from funcgrad.numpy._linalg import dot, einsum, inner, matmul, outer, tensordot, vdot  # noqa: F401
from funcgrad.numpy import linalg  # noqa: F401  (the funcgrad.numpy.linalg module)
from funcgrad.numpy._shape import (
    array_split,
    broadcast_arrays,
    concatenate,
    expand_dims,
    flip,
    fliplr,
    flipud,
    hstack,
    moveaxis,
    pad,
    ravel,
    repeat,
    split,
    squeeze,
    stack,
    swapaxes,
    take,
    take_along_axis,
    tile,
    transpose,
    vstack,
)
from funcgrad.numpy._ufuncs import (
    abs,
    absolute,
    add,
    all,
    amax,
    amin,
    any,
    argmax,
    argmin,
    around,
    bitwise_and,
    bitwise_not,
    bitwise_or,
    bitwise_xor,
    ceil,
    clip,
    cos,
    count_nonzero,
    divide,
    equal,
    exp,
    exp2,
    floor,
    floor_divide,
    fmod,
    greater,
    greater_equal,
    invert,
    isfinite,
    isinf,
    isnan,
    left_shift,
    less,
    less_equal,
    log,
    log2,
    log10,
    logaddexp,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    max,
    maximum,
    mean,
    min,
    minimum,
    mod,
    multiply,
    negative,
    not_equal,
    power,
    prod,
    reciprocal,
    remainder,
    right_shift,
    round,
    sign,
    sin,
    sqrt,
    square,
    std,
    subtract,
    sum,
    tan,
    true_divide,
    trunc,
    var,
    where,
)

pi, e, inf, nan, newaxis = _np.pi, _np.e, _np.inf, _np.nan, None

from funcgrad.numpy._complex_math import *  # noqa: E402,F401,F403  (real and complex elementary functions)
from funcgrad.numpy._cumulative import *  # noqa: E402,F401,F403
from funcgrad.numpy._elementwise import *  # noqa: E402,F401,F403
from funcgrad.numpy._index_tricks import *  # noqa: E402,F401,F403
from funcgrad.numpy._polynomials import *  # noqa: E402,F401,F403
from funcgrad.numpy._sorting import *  # noqa: E402,F401,F403
from funcgrad.numpy._sorting import where_nonzero as where  # noqa: E402,F401
from funcgrad.numpy._stats import *  # noqa: E402,F401,F403
from funcgrad.numpy import fft  # noqa: E402,F401
from funcgrad.numpy._array_api import __array_api_version__, __array_namespace_info__  # noqa: E402,F401
from funcgrad.numpy._linalg_norms import vecdot  # noqa: E402,F401
from funcgrad.numpy._jax_forms import cross, linspace  # noqa: E402,F401  (JAX's full forms)
from funcgrad.numpy._derived import cdouble, complex_, csingle, matvec, polyfit, vecmat  # noqa: E402,F401
bitwise_left_shift, bitwise_right_shift, bitwise_invert, pow = (  # noqa: E402  (array API names)
    left_shift, right_shift, invert, power)
dtype, iinfo = _np.dtype, _np.iinfo
from funcgrad.numpy._dtypes import issubdtype  # noqa: E402,F401  (bfloat16 is floating, as JAX)
from funcgrad.numpy._array_api import finfo  # noqa: E402,F401  (Python-float limits, as the array API asks)
floating, integer, inexact, number, signedinteger, unsignedinteger = (
    _np.floating, _np.integer, _np.inexact, _np.number, _np.signedinteger, _np.unsignedinteger)

# JAX's check_arraylike: the functions JAX checks refuse lists and tuples (asarray takes them)
from funcgrad.numpy._strict import make_strict as _make_strict  # noqa: E402

_make_strict(globals())
_core.set_numpy_api(_sys.modules[__name__])
