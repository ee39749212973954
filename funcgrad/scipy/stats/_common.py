"""Helpers of funcgrad.scipy.stats: argument promotion and the constants of the densities."""
from __future__ import annotations

import numpy as np

from funcgrad import numpy as jnp
from funcgrad.core.dtypes import dtype_kind


def promote(*xs):
    """The arguments as arrays of their promoted dtype (float32 unless already inexact), as
    JAX's promote_args_inexact; shapes broadcast when the operations combine them."""
    xs = [x if hasattr(x, "dtype") or isinstance(x, (int, float, complex)) else
          jnp.asarray(x) for x in xs]
    dt = jnp.result_type(*xs)   # Python scalars are weak: they take the arrays' dtype
    if dtype_kind(dt) not in "fc":
        dt = np.dtype(np.float32)
    arrs = [jnp.asarray(x, dt) for x in xs]
    return arrs if len(arrs) > 1 else arrs[0]


def outside(cond, value, fill):
    """`value` where cond is False, `fill` (-inf, nan, ...) where it is True."""
    return jnp.where(cond, fill, value)
