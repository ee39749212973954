"""JAX's jax.ops: segment_sum / segment_max / segment_min / segment_prod over the leading axis."""
from __future__ import annotations

import operator

import numpy as np

import funcgrad.numpy as fnp
from funcgrad.core import ConcretizationError, is_int, user_frame_src

__all__ = ["segment_max", "segment_min", "segment_prod", "segment_sum"]

# what segment ids out of [0, num_segments) do, by JAX's mode names (GatherScatterMode values)
_MODES = {None: "drop", "fill": "drop", "drop": "drop", "clip": "clip",
          "promise_in_bounds": "promise_in_bounds"}


def _identity(op: str, dtype: np.dtype):
    """The value an empty segment gets (JAX's): 0, 1, the dtype's lowest / highest."""
    if op == "add":
        return 0
    if op == "multiply":
        return 1
    if dtype == np.bool_:
        return op == "min"
    if is_int(dtype):
        info = np.iinfo(dtype)
        return info.min if op == "max" else info.max
    return -np.inf if op == "max" else np.inf


def _mode(name, mode):
    key = getattr(mode, "value", mode)
    key = key.lower() if isinstance(key, str) else key
    if key not in _MODES:
        raise ValueError(f"{name}: mode must be None, 'fill' / 'drop', 'clip' or "
                         f"'promise_in_bounds' (or a lax.GatherScatterMode), got {mode!r}"
                         f"\n  at {user_frame_src()}")
    return _MODES[key]


def _num_segments(name, ids, num_segments) -> int:
    if num_segments is None:
        if ids.shape[0] == 0:
            return 0
        try:
            return int(fnp.max(ids)) + 1
        except ConcretizationError as e:
            raise type(e)(
                f"{name}: num_segments is needed under jit (the result's shape depends on it); "
                f"pass it, static (jit(..., static_argnums=...)), as in JAX"
                f"\n  at {user_frame_src()}") from e
    try:
        n = operator.index(num_segments)
    except TypeError as e:
        raise TypeError(f"{name}: num_segments must be a Python int (static under jit), got "
                        f"{type(num_segments).__name__}\n  at {user_frame_src()}") from e
    if n < 0:
        raise ValueError(f"{name}: num_segments must be non-negative, got {n}"
                         f"\n  at {user_frame_src()}")
    return n


def _segment(name, op, data, segment_ids, num_segments, bucket_size, mode):
    data, ids = fnp.asarray(data), fnp.asarray(segment_ids)
    if not is_int(ids.dtype):
        raise TypeError(f"{name}: segment_ids must be integers, got {ids.dtype}"
                        f"\n  at {user_frame_src()}")
    if ids.ndim != 1 or data.ndim == 0 or data.shape[0] != ids.shape[0]:
        raise ValueError(f"{name}: segment_ids must be 1-D with one id per row of data (its "
                         f"leading axis); got segment_ids {ids.shape} and data {data.shape}"
                         f"\n  at {user_frame_src()}")
    how = _mode(name, mode)
    n = _num_segments(name, ids, num_segments)
    fill = _identity(op, data.dtype)
    if how == "drop":   # ids outside [0, n) add nothing: their rows become the identity
        valid = (ids >= 0) & (ids < n)
        data = fnp.where(valid.reshape(valid.shape + (1,) * (data.ndim - 1)), data,
                         np.asarray(fill, data.dtype))
        ids = fnp.where(valid, ids, 0)
    elif how == "clip":
        ids = fnp.clip(ids, 0, max(n - 1, 0))
    rows = data.shape[0]
    if bucket_size is None:
        out = fnp.full((n,) + data.shape[1:], fill, data.dtype)
        return getattr(out.at[ids], op)(data)
    size = operator.index(bucket_size)
    if size < 1:
        raise ValueError(f"{name}: bucket_size must be >= 1, got {size}"
                         f"\n  at {user_frame_src()}")
    buckets = -(-rows // size)
    out = fnp.full((buckets, n) + data.shape[1:], fill, data.dtype)
    out = getattr(out.at[np.arange(rows) // size, ids], op)(data)
    reduce = {"add": fnp.sum, "multiply": fnp.prod, "max": fnp.max, "min": fnp.min}[op]
    return reduce(out, axis=0).astype(data.dtype)


def segment_sum(data, segment_ids, num_segments=None, indices_are_sorted=False,
                unique_indices=False, bucket_size=None, mode=None):
    """Sums the rows of ``data`` (its leading axis) that share a segment id (JAX's).

    Args:
        data: the values; row ``i`` goes to segment ``segment_ids[i]``.
        segment_ids: 1-D integer array, one id per row; repeated and unsorted ids are fine.
        num_segments: the number of segments (the result's leading size); default
            ``max(segment_ids) + 1``, which needs concrete ids: pass it (static) under jit.
        indices_are_sorted, unique_indices: hints about the ids, accepted as in JAX (the result
            does not depend on them).
        bucket_size: sum in buckets of this many rows, then sum the buckets (JAX's option for
            accuracy).
        mode: what ids outside ``[0, num_segments)`` do: None / "fill" / "drop" (JAX's default)
            drop their rows, "clip" clamps them into range, "promise_in_bounds" raises
            IndexError for them (funcgrad's index updates).

    Returns:
        An array of shape ``(num_segments,) + data.shape[1:]``; an empty segment is 0.

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp
        >>> from funcgrad import ops
        >>> data, ids = fnp.arange(5), fnp.array([0, 0, 1, 1, 2])
        >>> ops.segment_sum(data, ids)
        Array([1, 5, 4], dtype=int32)
        >>> funcgrad.jit(ops.segment_sum, static_argnums=2)(data, ids, 3)
        Array([1, 5, 4], dtype=int32)
    """
    del indices_are_sorted, unique_indices
    return _segment("segment_sum", "add", data, segment_ids, num_segments, bucket_size, mode)


def segment_prod(data, segment_ids, num_segments=None, indices_are_sorted=False,
                 unique_indices=False, bucket_size=None, mode=None):
    """Multiplies the rows of ``data`` that share a segment id; an empty segment is 1.

    Arguments as :func:`segment_sum`'s.

    Example:
        >>> from funcgrad import ops
        >>> import funcgrad.numpy as fnp
        >>> ops.segment_prod(fnp.array([2.0, 3.0, 4.0]), fnp.array([0, 0, 2]))
        Array([6., 1., 4.], dtype=float32)
    """
    del indices_are_sorted, unique_indices
    return _segment("segment_prod", "multiply", data, segment_ids, num_segments, bucket_size,
                    mode)


def segment_max(data, segment_ids, num_segments=None, indices_are_sorted=False,
                unique_indices=False, bucket_size=None, mode=None):
    """The maximum of the rows of ``data`` that share a segment id; an empty segment is
    ``-inf`` (the lowest integer for integer data, False for booleans).

    Arguments as :func:`segment_sum`'s.

    Example:
        >>> from funcgrad import ops
        >>> import funcgrad.numpy as fnp
        >>> ops.segment_max(fnp.array([2.0, 3.0, 4.0]), fnp.array([0, 0, 2]))
        Array([  3., -inf,   4.], dtype=float32)
    """
    del indices_are_sorted, unique_indices
    return _segment("segment_max", "max", data, segment_ids, num_segments, bucket_size, mode)


def segment_min(data, segment_ids, num_segments=None, indices_are_sorted=False,
                unique_indices=False, bucket_size=None, mode=None):
    """The minimum of the rows of ``data`` that share a segment id; an empty segment is
    ``inf`` (the highest integer for integer data, True for booleans).

    Arguments as :func:`segment_sum`'s.

    Example:
        >>> from funcgrad import ops
        >>> import funcgrad.numpy as fnp
        >>> ops.segment_min(fnp.array([2.0, 3.0, 4.0]), fnp.array([0, 0, 2]))
        Array([ 2., inf,  4.], dtype=float32)
    """
    del indices_are_sorted, unique_indices
    return _segment("segment_min", "min", data, segment_ids, num_segments, bucket_size, mode)
