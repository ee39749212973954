"""jax.dtypes: funcgrad's dtype objects and rules (bfloat16, the float8 types, float0, promotion).

Example:
    >>> import funcgrad.numpy as fnp
    >>> from funcgrad import dtypes
    >>> dtypes.issubdtype(dtypes.bfloat16, fnp.floating)
    True
    >>> dtypes.result_type(dtypes.bfloat16, fnp.float16)
    dtype('float32')
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from funcgrad.api.config_states import float0
from funcgrad.core.dtypes import canonicalize_dtype, finfo
from funcgrad.numpy import bfloat16, iinfo, issubdtype, promote_types, result_type

# ml_dtypes' float8 types: storage only in funcgrad (moves, casts; no arithmetic kernels)
float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn).type
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2).type
float8_e4m3fnuz = np.dtype(ml_dtypes.float8_e4m3fnuz).type
float8_e5m2fnuz = np.dtype(ml_dtypes.float8_e5m2fnuz).type
float8_e4m3b11fnuz = np.dtype(ml_dtypes.float8_e4m3b11fnuz).type

__all__ = ["bfloat16", "canonicalize_dtype", "finfo", "float0", "float8_e4m3b11fnuz",
           "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "iinfo",
           "issubdtype", "promote_types", "result_type"]
