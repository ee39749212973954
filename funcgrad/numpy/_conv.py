"""numpy.convolve and numpy.correlate (1-D, modes full / same / valid) as lax convolutions."""
from __future__ import annotations

import numpy as np

from funcgrad.prims.convolution import conv_general_dilated
from funcgrad.core import user_frame_src
from funcgrad.core.dtypes import dtype_kind
from funcgrad.numpy._base import asarray, reshape, result_type
from funcgrad.numpy._shape import flip


def _conv1d(op, a, v, mode, preferred_element_type):
    a, v = asarray(a), asarray(v)
    if a.ndim != 1 or v.ndim != 1:
        raise ValueError(f"{op}() only supports 1-dimensional inputs, got shapes {a.shape} and "
                         f"{v.shape}\n  at {user_frame_src()}")
    if a.shape[0] == 0 or v.shape[0] == 0:
        raise ValueError(f"{op}: inputs cannot be empty, got shapes {a.shape} and {v.shape}"
                         f"\n  at {user_frame_src()}")
    dt = result_type(a, v)
    if preferred_element_type is None and dtype_kind(dt) != "f":
        dt = np.dtype(np.float32)   # like JAX: integer inputs are promoted to a float type
    a, v = asarray(a, dt), asarray(v, dt)
    reverse = False
    if a.shape[0] < v.shape[0]:
        a, v = v, a
        reverse = op == "correlate"   # correlate(a, v) is the reversed correlate(v, a)
    if op == "convolve":
        v = flip(v, 0)
    n = v.shape[0]
    pads = {"valid": (0, 0), "same": (n // 2, n - n // 2 - 1), "full": (n - 1, n - 1)}
    if mode not in pads:
        raise ValueError(f"{op}: mode must be one of 'full', 'same', 'valid', got {mode!r}"
                         f"\n  at {user_frame_src()}")
    out = conv_general_dilated(reshape(a, (1, 1, -1)), reshape(v, (1, 1, -1)), (1,),
                               [pads[mode]], preferred_element_type=preferred_element_type)
    out = reshape(out, (-1,))
    return flip(out, 0) if reverse else out


def convolve(a, v, mode: str = "full", *, precision=None, preferred_element_type=None):
    """Discrete linear convolution of two 1-D arrays, as `jax.numpy.convolve`.

    Args:
        a, v: 1-D arrays (integers are promoted to float32, as in JAX).
        mode: "full" (length n + m - 1), "same" (length max(n, m)) or "valid"
            (length max(n, m) - min(n, m) + 1).
        precision: accepted for JAX compatibility.
        preferred_element_type: accumulation / output dtype.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.convolve(fnp.array([1.0, 2.0, 3.0]), fnp.array([0.0, 1.0, 0.5]))
        Array([0. , 1. , 2.5, 4. , 1.5], dtype=float32)
    """
    del precision
    return _conv1d("convolve", a, v, mode, preferred_element_type)


def correlate(a, v, mode: str = "valid", *, precision=None, preferred_element_type=None):
    """Cross-correlation of two 1-D arrays, c[k] = sum_n a[n + k] v[n], as
    `jax.numpy.correlate`.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.correlate(fnp.array([1.0, 2.0, 3.0]), fnp.array([0.0, 1.0, 0.5]), "full")
        Array([0.5, 2. , 3.5, 3. , 0. ], dtype=float32)
    """
    del precision
    return _conv1d("correlate", a, v, mode, preferred_element_type)
