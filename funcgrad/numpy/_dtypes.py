"""dtype predicates that know bfloat16 and the float8 types (numpy's issubdtype does not)."""
from __future__ import annotations

import numpy as np

from funcgrad.core import dtypes as _dt

# numpy's abstract classes above floating: bfloat16 and float8 belong to each (JAX's answer)
_ABOVE_FLOATING = (np.floating, np.inexact, np.number, np.generic)


def _as_dtype_or_class(x):
    """An abstract numpy class (np.floating, ...) as itself, anything else as its np.dtype."""
    if isinstance(x, type) and issubclass(x, np.generic) and x in (
            np.generic, np.number, np.inexact, np.floating, np.complexfloating, np.integer,
            np.signedinteger, np.unsignedinteger, np.bool_, np.character, np.flexible):
        return x if x is not np.bool_ else np.dtype(np.bool_)
    if isinstance(x, (np.dtype, type, str)):
        return np.dtype(x)
    return np.dtype(getattr(x, "dtype", x))   # funcgrad's scalar types, arrays


def issubdtype(arg1, arg2) -> bool:
    """numpy.issubdtype as JAX's: bfloat16 and the float8 types are floating (numpy says no).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.issubdtype(fnp.bfloat16, fnp.floating)
        True
    """
    a = _as_dtype_or_class(arg1)
    b = _as_dtype_or_class(arg2)
    if isinstance(a, np.dtype) and _dt.is_floating(a) and a.kind != "f":   # ml_dtypes' floats
        if isinstance(b, np.dtype):
            return a == b
        return b in _ABOVE_FLOATING
    if isinstance(a, type):   # an abstract class under another (np.floating under np.number)
        return isinstance(b, type) and issubclass(a, b)
    return bool(np.issubdtype(a, b))
