"""lax.gather and the lax.scatter family with XLA's dimension numbers, over flat-index take/.at.

Every gathered (or scattered) element's operand position is start + window offset along each
operand dimension; its flat (row-major) index feeds `take` on the flattened operand (gather) or
an `.at[]` update of it (scatter), so gradients, vmap, jit and both backends come from those
primitives. The index vector is the last axis of the indices (JAX's convention). Modes follow
JAX: "fill" (the default, FILL_OR_DROP: a gather window partly out of bounds reads
`fill_value`, a scatter window partly out of bounds is dropped), "clip" (starts clamped so the
window fits) and "promise_in_bounds" (treated as "clip"). Operand batching dims pair with index
batch dims: each one is an extra collapsed dim whose start is the index batch coordinate (an
iota appended to the index vectors). Scatters with multiply/min/max keep funcgrad's `.at`
rule: under jit a traced index that repeats applies one of its updates (see README).
"""
from __future__ import annotations

import enum
import math
from typing import NamedTuple

import numpy as np

from funcgrad import numpy as fnp
from funcgrad.core.dtypes import dtype_kind


class GatherScatterMode(enum.Enum):
    """How gather/scatter treat windows that do not fit in the operand (JAX's enum)."""
    CLIP = "clip"
    FILL_OR_DROP = "fill"
    PROMISE_IN_BOUNDS = "promise_in_bounds"

    @staticmethod
    def from_any(s) -> GatherScatterMode:
        if isinstance(s, GatherScatterMode):
            return s
        if s is None or s in ("fill", "drop"):
            return GatherScatterMode.FILL_OR_DROP
        if s == "clip":
            return GatherScatterMode.CLIP
        if s == "promise_in_bounds":
            return GatherScatterMode.PROMISE_IN_BOUNDS
        raise ValueError(f"unknown gather/scatter mode {s!r}: use 'fill', 'clip' or "
                         f"'promise_in_bounds'")


class GatherDimensionNumbers(NamedTuple):
    """lax.gather's dimension numbers (JAX's fields)."""
    offset_dims: tuple
    collapsed_slice_dims: tuple
    start_index_map: tuple
    operand_batching_dims: tuple = ()
    start_indices_batching_dims: tuple = ()


class ScatterDimensionNumbers(NamedTuple):
    """lax.scatter's dimension numbers (JAX's fields)."""
    update_window_dims: tuple
    inserted_window_dims: tuple
    scatter_dims_to_operand_dims: tuple
    operand_batching_dims: tuple = ()
    scatter_indices_batching_dims: tuple = ()


def _positions(operand_shape, idx, index_map, window, mode):
    """(flat operand index [*batch, *window], in-bounds mask [*batch]) for windows of sizes
    `window` (one per operand dim) starting where idx's index vectors say."""
    nd = len(operand_shape)
    batch = tuple(idx.shape[:-1])
    nb = len(batch)
    strides = [math.prod(operand_shape[d + 1:]) for d in range(nd)]
    flat = fnp.zeros(batch + tuple(window), np.int64)
    ok = fnp.ones(batch, bool)
    for d in range(nd):
        if d in index_map:
            start = idx[..., index_map.index(d)].astype(np.int64)
            hi = operand_shape[d] - window[d]
            if mode is GatherScatterMode.FILL_OR_DROP:
                ok = ok & (start >= 0) & (start <= hi)
            start = fnp.clip(start, 0, max(hi, 0))
        else:
            start = fnp.zeros(batch, np.int64)
        offs = np.arange(window[d], dtype=np.int64).reshape(
            (1,) * (nb + d) + (window[d],) + (1,) * (nd - d - 1))
        pos = start.reshape(batch + (1,) * nd) + offs
        flat = flat + pos * strides[d]
    return flat, ok


def _with_batching(name, shape, idx, index_map, collapsed, op_b, idx_b):
    """(index vectors, index map, collapsed dims) with the operand batching dims `op_b` folded
    in: their starts are the coordinates of the paired index batch dims `idx_b`."""
    op_b, idx_b = tuple(int(d) for d in op_b), tuple(int(d) for d in idx_b)
    if len(op_b) != len(idx_b):
        raise ValueError(f"lax.{name}: operand_batching_dims {op_b} and the indices' batching "
                         f"dims {idx_b} must have the same length")
    if not op_b:
        return idx, tuple(index_map), tuple(collapsed)
    nb = idx.ndim - 1
    if any(not 0 <= d < nb for d in idx_b) or len(set(idx_b)) != len(idx_b):
        raise ValueError(f"lax.{name}: the indices' batching dims {idx_b} must be distinct dims "
                         f"of the index batch shape {tuple(idx.shape[:-1])}")
    if any(not 0 <= d < len(shape) for d in op_b) or set(op_b) & set(index_map) or \
            set(op_b) & set(collapsed) or len(set(op_b)) != len(op_b):
        raise ValueError(f"lax.{name}: operand_batching_dims {op_b} must be distinct operand "
                         f"dims of {shape}, outside the index map and the collapsed dims")
    for d, b in zip(op_b, idx_b):
        if shape[d] != idx.shape[b]:
            raise ValueError(f"lax.{name}: operand batching dim {d} of {shape} has size "
                             f"{shape[d]} but the indices' batching dim {b} of "
                             f"{tuple(idx.shape)} has size {idx.shape[b]}")
    dt = idx.dtype if dtype_kind(idx.dtype) in "iu" else np.dtype(np.int32)
    cols = [fnp.asarray(idx, dt)]
    for b in idx_b:
        iota = np.arange(idx.shape[b], dtype=dt).reshape(
            (1,) * b + (-1,) + (1,) * (nb - b - 1) + (1,))
        cols.append(fnp.broadcast_to(iota, tuple(idx.shape[:-1]) + (1,)))
    return (fnp.concatenate(cols, axis=-1), tuple(index_map) + op_b,
            tuple(collapsed) + op_b)


def gather(operand, start_indices, dimension_numbers, slice_sizes, *, unique_indices=False,
           indices_are_sorted=False, mode=None, fill_value=None):
    """lax.gather: slices of `slice_sizes` at the index vectors of `start_indices`.

    Example:
        >>> import numpy as np
        >>> from funcgrad import lax
        >>> x = np.arange(12.0).reshape(3, 4)
        >>> dn = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,),
        ...                                 start_index_map=(0,))
        >>> np.asarray(lax.gather(x, np.array([[2], [0]]), dn, (1, 4))).tolist()
        [[8.0, 9.0, 10.0, 11.0], [0.0, 1.0, 2.0, 3.0]]
    """
    dn = dimension_numbers
    operand, idx = fnp.asarray(operand), fnp.asarray(start_indices)
    mode = GatherScatterMode.from_any(mode)
    shape, sizes = tuple(operand.shape), tuple(int(s) for s in slice_sizes)
    if len(sizes) != len(shape) or any(s < 0 or s > n for s, n in zip(sizes, shape)):
        raise ValueError(f"lax.gather: slice_sizes {sizes} must have one size in [0, dim] per "
                         f"operand dim {shape}")
    if idx.ndim == 0 or idx.shape[-1] != len(dn.start_index_map):
        raise ValueError(f"lax.gather: the index vectors (last axis of start_indices "
                         f"{tuple(idx.shape)}) must have len(start_index_map) = "
                         f"{len(dn.start_index_map)} entries")
    idx, index_map, collapsed = _with_batching(
        "gather", shape, idx, dn.start_index_map, dn.collapsed_slice_dims,
        dn.operand_batching_dims, dn.start_indices_batching_dims)
    if any(sizes[d] != 1 for d in collapsed):
        raise ValueError("lax.gather: collapsed_slice_dims and operand_batching_dims must have "
                         "slice size 1")
    flat, ok = _positions(shape, idx, index_map, sizes, mode)
    nb = idx.ndim - 1
    keep = [d for d in range(len(shape)) if d not in collapsed]
    if len(keep) != len(dn.offset_dims):
        raise ValueError(f"lax.gather: offset_dims {tuple(dn.offset_dims)} must name one "
                         f"output dim per uncollapsed slice dim ({len(keep)})")
    flat = flat.reshape(tuple(idx.shape[:-1]) + tuple(sizes[d] for d in keep))
    out = fnp.take(fnp.reshape(operand, (-1,)), flat) if operand.size else \
        fnp.zeros(flat.shape, operand.dtype)
    if mode is GatherScatterMode.FILL_OR_DROP:
        fill = _default_fill(operand.dtype) if fill_value is None else fill_value
        out = fnp.where(ok.reshape(tuple(ok.shape) + (1,) * len(keep)), out,
                        fnp.asarray(fill, operand.dtype))
    # batch dims (in order) fill the output positions not in offset_dims
    rank = nb + len(keep)
    batch_pos = [p for p in range(rank) if p not in dn.offset_dims]
    order = [0] * rank
    for i, p in enumerate(batch_pos):
        order[p] = i
    for j, p in enumerate(dn.offset_dims):
        order[p] = nb + j
    return fnp.transpose(out, order)


def _default_fill(dtype):
    dtype = np.dtype(dtype)
    if dtype_kind(dtype) in "fc":
        return np.nan
    if dtype_kind(dtype) == "b":
        return True
    info = np.iinfo(dtype)
    return info.min if dtype_kind(dtype) == "i" else info.max


def _scatter(name, method, operand, scatter_indices, updates, dimension_numbers, mode):
    dn = dimension_numbers
    operand, idx = fnp.asarray(operand), fnp.asarray(scatter_indices)
    updates = fnp.asarray(updates, operand.dtype)
    mode = GatherScatterMode.from_any(mode)
    shape = tuple(operand.shape)
    nd = len(shape)
    if idx.ndim == 0 or idx.shape[-1] != len(dn.scatter_dims_to_operand_dims):
        raise ValueError(f"lax.{name}: the index vectors (last axis of scatter_indices "
                         f"{tuple(idx.shape)}) must have len(scatter_dims_to_operand_dims) = "
                         f"{len(dn.scatter_dims_to_operand_dims)} entries")
    idx, index_map, inserted = _with_batching(
        name, shape, idx, dn.scatter_dims_to_operand_dims, dn.inserted_window_dims,
        dn.operand_batching_dims, dn.scatter_indices_batching_dims)
    win = [d for d in range(nd) if d not in inserted]
    if len(win) != len(dn.update_window_dims):
        raise ValueError(f"lax.{name}: update_window_dims {tuple(dn.update_window_dims)} must "
                         f"name one updates dim per operand dim not in inserted_window_dims")
    sizes = [1] * nd
    for d, u in zip(win, dn.update_window_dims):
        sizes[d] = int(updates.shape[u])
    upd_batch = [a for a in range(updates.ndim) if a not in dn.update_window_dims]
    if tuple(updates.shape[a] for a in upd_batch) != tuple(idx.shape[:-1]):
        raise ValueError(f"lax.{name}: the updates' scatter dims "
                         f"{tuple(updates.shape[a] for a in upd_batch)} must equal the indices' "
                         f"batch shape {tuple(idx.shape[:-1])}")
    flat, ok = _positions(shape, idx, index_map, sizes, mode)
    # updates as [*batch, *window (operand order, inserted dims of size 1)]
    u = fnp.transpose(updates, upd_batch + list(dn.update_window_dims))
    u = fnp.reshape(u, tuple(idx.shape[:-1]) + tuple(sizes))
    n = operand.size
    if mode is GatherScatterMode.FILL_OR_DROP:   # dropped windows go to one spare slot
        flat = fnp.where(ok.reshape(tuple(ok.shape) + (1,) * nd), flat, n)
    target = fnp.concatenate([fnp.reshape(operand, (-1,)), fnp.zeros((1,), operand.dtype)])
    ref = target.at[fnp.reshape(flat, (-1,))]
    out = getattr(ref, method)(fnp.reshape(u, (-1,)))
    return fnp.reshape(out[:n], shape)


def _scatter_api(name, method, doc):
    def fn(operand, scatter_indices, updates, dimension_numbers, *, indices_are_sorted=False,
           unique_indices=False, mode=None):
        return _scatter(name, method, operand, scatter_indices, updates, dimension_numbers,
                        mode)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return fn


scatter = _scatter_api("scatter", "set", """lax.scatter: operand with the updates' windows
written at the index vectors (a repeated position keeps one of its updates).

    Example:
        >>> import numpy as np
        >>> from funcgrad import lax
        >>> dn = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
        ...                                  scatter_dims_to_operand_dims=(0,))
        >>> np.asarray(lax.scatter(np.zeros(4), np.array([[1], [3]]), np.array([5.0, 7.0]),
        ...                        dn)).tolist()
        [0.0, 5.0, 0.0, 7.0]
    """)
scatter_add = _scatter_api("scatter_add", "add", """lax.scatter_add: the updates' windows added
at the index vectors (repeated positions add every update).

    Example:
        >>> import numpy as np
        >>> from funcgrad import lax
        >>> dn = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
        ...                                  scatter_dims_to_operand_dims=(0,))
        >>> np.asarray(lax.scatter_add(np.zeros(3), np.array([[1], [1]]), np.ones(2),
        ...                            dn)).tolist()
        [0.0, 2.0, 0.0]
    """)
scatter_mul = _scatter_api("scatter_mul", "multiply", "lax.scatter_mul: multiply at the "
                           "index vectors (see scatter_add).")
scatter_min = _scatter_api("scatter_min", "min", "lax.scatter_min: minimum at the index "
                           "vectors (see scatter_add).")
scatter_max = _scatter_api("scatter_max", "max", "lax.scatter_max: maximum at the index "
                           "vectors (see scatter_add).")


def scatter_sub(operand, scatter_indices, updates, dimension_numbers, *,
                indices_are_sorted=False, unique_indices=False, mode=None):
    """lax.scatter_sub: the updates' windows subtracted at the index vectors (repeated
    positions subtract every update).

    Example:
        >>> import numpy as np
        >>> from funcgrad import lax
        >>> dn = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
        ...                                  scatter_dims_to_operand_dims=(0,))
        >>> np.asarray(lax.scatter_sub(np.zeros(3), np.array([[1], [1]]), np.ones(2),
        ...                            dn)).tolist()
        [0.0, -2.0, 0.0]
    """
    operand = fnp.asarray(operand)
    return _scatter("scatter_sub", "add", operand, scatter_indices,
                    fnp.negative(fnp.asarray(updates, operand.dtype)), dimension_numbers, mode)
