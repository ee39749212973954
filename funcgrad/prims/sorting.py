"""Sorting primitives that no composition expresses: argsort.

sort, top_k, searchsorted-by-sort, median and quantiles are compositions over `argsort_p`
plus a gather (take_along_axis), so their gradients, batching and CUDA lowering come from the
gather; argsort itself is integer-valued and has a zero derivative.
"""
from __future__ import annotations

import numpy as np

from funcgrad.core import ShapedArray, bind, defprim, type_error
from funcgrad.core.dtypes import dtype_kind


def _argsort_shape(x):
    if x.ndim < 1:
        raise type_error("argsort", "operand must have at least one axis (it sorts the last)",
                         (x,))
    if dtype_kind(x.dtype) not in "fiub":
        raise type_error("argsort", f"dtype {x.dtype.name} is not supported", (x,))
    return ShapedArray(x.shape, np.int32)


def _argsort_impl(x):
    # stable, ascending along the last axis; NaNs sort to the end (numpy's and JAX's order)
    return np.argsort(x, axis=-1, kind="stable").astype(np.int32)


# argsort(x)_i: the index of the i-th smallest element of each last-axis row (stable).
# Integer-valued and piecewise constant: zero derivative.
argsort_p = defprim(
    "argsort", _argsort_shape, _argsort_impl,
    vjp=lambda ct, x, *, out: (None,),
    jvp=lambda ts, xs, *, out: None,
    batch=lambda args, dims: (bind(argsort_p, args[0]), 0))   # rows stay rows
