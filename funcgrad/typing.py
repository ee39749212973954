"""funcgrad.typing: jax.typing's annotations (ArrayLike, DTypeLike) for funcgrad's values.

Example:
    >>> import funcgrad.numpy as fnp
    >>> from funcgrad.typing import ArrayLike
    >>> def total(x: ArrayLike) -> float:
    ...     return float(fnp.sum(fnp.asarray(x)))
    >>> total(fnp.ones(3))
    3.0
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from funcgrad.core import Array, ArrayBase

__all__ = ["ArrayLike", "DTypeLike", "DimSize", "Shape"]


class SupportsDType(Protocol):
    """Anything with a ``dtype`` attribute (arrays, ShapeDtypeStruct, ...)."""

    @property
    def dtype(self) -> np.dtype: ...


ArrayLike = (Array          # a concrete funcgrad array
             | ArrayBase    # a traced one (inside jit, grad, vmap)
             | np.ndarray | np.bool_ | np.number | bool | int | float | complex)
"""Values funcgrad accepts as arrays: funcgrad and numpy arrays, numpy scalars and Python
scalars (not lists or tuples, as in JAX)."""

DTypeLike = str | type[Any] | np.dtype | SupportsDType
"""What names a dtype: a string ("float32"), a scalar type (np.float32, float), a numpy
dtype, or an object with a ``dtype``."""

DimSize = int
"""One dimension of a shape."""

Shape = Sequence[DimSize]
"""An array's shape."""
