"""numpy functions in JAX's full forms: linspace (array or traced bounds, axis, retstep) and
cross (axisa / axisb / axisc / axis, 2-vectors)."""
from __future__ import annotations

import operator

import numpy as np

from funcgrad.core import is_int, user_frame_src
from funcgrad.numpy._base import (
    asarray,
    broadcast_shapes,
    broadcast_to,
    canonical_dtype,
    full,
    reshape,
    result_type,
    zeros,
)
from funcgrad.numpy._shape import concatenate, expand_dims, moveaxis, stack
from funcgrad.numpy._ufuncs import _float_dtype, floor

__all__ = ["cross", "linspace"]


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *,
             device=None):
    """numpy.linspace as JAX computes it: ``start * (1 - t) + stop * t`` at ``t = i / div``,
    which recovers both ends exactly; differentiable in ``start`` and ``stop``, which may be
    arrays (broadcast; the samples run along ``axis``) or traced.

    Args:
        start, stop: the bounds (scalars or arrays).
        num: the number of samples, a non-negative Python int.
        endpoint: include ``stop``.
        retstep: also return the step (NaN for fewer than two samples with an endpoint).
        dtype: the result's dtype (default: floating, from the bounds); integer dtypes floor.
        axis: where the samples' axis goes in the result.
        device: where the result lives.

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp
        >>> fnp.linspace(0.0, 1.0, 5).tolist()
        [0.0, 0.25, 0.5, 0.75, 1.0]
        >>> fnp.linspace(fnp.array([0.0, 1.0]), 2.0, 3, axis=-1).tolist()
        [[0.0, 1.0, 2.0], [1.0, 1.5, 2.0]]
        >>> float(funcgrad.grad(lambda s: fnp.linspace(0.0, s, 3).sum())(2.0))
        1.5
    """
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.\n  at "
                         f"{user_frame_src()}")
    start, stop = asarray(start), asarray(stop)
    dtype = canonical_dtype(dtype) if dtype is not None else _float_dtype(start, stop)
    work = _float_dtype(asarray(np.zeros((), dtype)))
    start, stop = start.astype(work), stop.astype(work)
    shape = list(broadcast_shapes(start.shape, stop.shape))
    lo, hi = broadcast_to(start, tuple(shape)), broadcast_to(stop, tuple(shape))
    axis = operator.index(axis)
    axis = len(shape) + axis + 1 if axis < 0 else axis
    if not 0 <= axis <= len(shape):
        raise ValueError(f"linspace: axis {axis} is out of range for bounds of shape "
                         f"{tuple(shape)}\n  at {user_frame_src()}")
    shape.insert(axis, 1)
    div = (num - 1) if endpoint else num
    if num > 1:
        delta = (stop - start) / asarray(np.asarray(div, work))
        t_shape = [1] * len(shape)
        t_shape[axis] = div
        real = np.zeros((), work).real.dtype
        t = asarray((np.arange(div, dtype=real) / np.asarray(div, real)).astype(work))
        t = reshape(t, tuple(t_shape))
        out = reshape(lo, tuple(shape)) * (1 - t) + reshape(hi, tuple(shape)) * t
        if endpoint:
            out = concatenate([out, expand_dims(hi, axis)], axis)
    elif num == 1:
        delta = full((), np.nan, work) if endpoint else stop - start
        out = reshape(lo, tuple(shape))
    else:
        shape[axis] = 0
        delta = full((), np.nan, work)
        out = zeros(tuple(shape), work)
    if is_int(dtype):
        out = floor(out)
    out = out.astype(dtype)
    if device is not None:
        out = asarray(out, device=device)
    return (out, delta) if retstep else out


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """numpy.cross with JAX's arguments: the vectors along ``axisa`` of ``a`` and ``axisb`` of
    ``b`` (size 2 or 3; 2-vectors have z = 0), the products along ``axisc``; ``axis`` sets all
    three. Two 2-vectors give the z component alone.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.cross(fnp.array([1.0, 0.0, 0.0]), fnp.array([0.0, 1.0, 0.0])).tolist()
        [0.0, 0.0, 1.0]
        >>> float(fnp.cross(fnp.array([1.0, 2.0]), fnp.array([3.0, 4.0])))
        -2.0
        >>> fnp.cross(fnp.eye(3), fnp.ones((3, 3)), axisa=0, axisc=0).shape
        (3, 3)
    """
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = asarray(a), asarray(b)
    dt = result_type(a, b)
    for name, x, ax in (("a", a, axisa), ("b", b, axisb)):
        if x.ndim == 0 or not -x.ndim <= ax < x.ndim or x.shape[ax] not in (2, 3):
            raise ValueError(f"cross: incompatible dimensions for cross product (dimension "
                             f"must be 2 or 3): {name} of shape {tuple(x.shape)} along axis "
                             f"{ax}\n  at {user_frame_src()}")
    a, b = moveaxis(a, axisa, -1), moveaxis(b, axisb, -1)
    a0, a1 = a[..., 0], a[..., 1]
    b0, b1 = b[..., 0], b[..., 1]
    if a.shape[-1] == 2 and b.shape[-1] == 2:
        return (a0 * b1 - a1 * b0).astype(dt)
    a2 = a[..., 2] if a.shape[-1] == 3 else zeros(a0.shape, a.dtype)
    b2 = b[..., 2] if b.shape[-1] == 3 else zeros(b0.shape, b.dtype)
    c = stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)
    if not -c.ndim <= axisc < c.ndim:
        raise ValueError(f"cross: axisc {axisc} is out of range for a result of rank {c.ndim}"
                         f"\n  at {user_frame_src()}")
    return moveaxis(c, -1, axisc).astype(dt)
