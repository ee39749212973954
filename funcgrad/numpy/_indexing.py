"""numpy indexing (ints, slices, None, Ellipsis, integer arrays) and `x.at[idx]` updates."""
from __future__ import annotations

import numpy as np

from funcgrad import prims as P
from funcgrad.config import config
from funcgrad.core import (
    ArrayBase,
    NonConcreteBooleanIndexError,
    Tracer,
    bind,
    is_int,
    user_frame_src,
)
from funcgrad.core.dtypes import dtype_kind
from funcgrad.numpy._base import asarray, broadcast_to, reshape
from funcgrad.numpy._shape import checked_index, moded_index, pad_fill, transpose


def _is_array_index(i):
    return isinstance(i, (ArrayBase, np.ndarray, list)) and not isinstance(i, bool)


def _traced_mask(mask):
    raise NonConcreteBooleanIndexError(
        f"boolean-mask indexing needs a concrete mask (its output shape depends on the data), "
        f"got a traced mask {mask.aval.str_short()}; use funcgrad.numpy.where, or a mask "
        f"outside jit.\n  at {user_frame_src()}")


def _normalize(x, idx):
    """Expand Ellipsis, turn boolean masks into integer arrays and lists into arrays."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    out = []
    for i in idx:
        if isinstance(i, (list, np.ndarray, ArrayBase)):
            arr = i if isinstance(i, ArrayBase) else np.asarray(i)
            if arr.dtype == np.bool_:
                if isinstance(arr, Tracer):
                    _traced_mask(arr)
                out.extend(np.nonzero(np.asarray(arr)))
                continue
            if not is_int(arr.dtype) and arr.size:
                raise IndexError(f"arrays used as indices must be integers, got {arr.dtype}")
            out.append(arr.astype(np.int32) if isinstance(arr, np.ndarray) and arr.size == 0
                       else arr)
        elif isinstance(i, (bool, np.bool_)):
            raise IndexError("boolean scalar indices are not supported")
        elif isinstance(i, (int, np.integer)) or i is None or i is Ellipsis or isinstance(
                i, slice):
            out.append(int(i) if isinstance(i, np.integer) else i)
        else:
            raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None and integer "
                             f"arrays are valid indices, got {type(i).__name__}")
    n_ell = sum(i is Ellipsis for i in out)
    if n_ell > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(i is not None and i is not Ellipsis for i in out)
    if consumed > x.ndim:
        raise IndexError(f"too many indices for array: array is {x.ndim}-dimensional, but "
                         f"{consumed} were indexed")
    if n_ell:
        k = next(j for j, i in enumerate(out) if i is Ellipsis)  # list.index would compare arrays
        # an Ellipsis standing for no axis still separates advanced indices (numpy's rule)
        out[k:k + 1] = [slice(None)] * (x.ndim - consumed) or [_GAP]
    else:
        out += [slice(None)] * (x.ndim - consumed)
    return out


_GAP = object()  # marks an Ellipsis that expanded to no axes


def _scalar_mask(idx):
    """The value of a whole index that is one concrete 0-d boolean (x[True], x[mask0d]), else
    None."""
    if isinstance(idx, (bool, np.bool_)):
        return bool(idx)
    if isinstance(idx, (ArrayBase, np.ndarray)) and idx.dtype == np.bool_ and idx.ndim == 0:
        if isinstance(idx, Tracer):
            _traced_mask(idx)
        return bool(np.asarray(idx))
    return None


_GET_MODES = {None: "clip_arrays", "promise_in_bounds": "clip_arrays", "clip": "clip",
              "fill": "fill", "drop": "fill", "raise": "raise"}


def _getitem(x, idx, mode=None, fill_value=None):
    """x[idx] with numpy semantics; what an out-of-range index does follows JAX's gather
    modes: by default (None, "promise_in_bounds") integer arrays are clamped into range and
    Python ints raise IndexError (config "check_indices": arrays raise too); "clip" clamps
    both; "fill" (or "drop") gives fill_value (default: nan, the smallest signed / largest
    unsigned integer, True); "raise" (what index updates use to find their targets) raises
    IndexError for both."""
    try:
        kind = _GET_MODES[mode]
    except (KeyError, TypeError):
        raise ValueError(f"unknown gather mode {mode!r}; expected one of 'promise_in_bounds', "
                         "'clip', 'fill' or 'drop'") from None
    if mode is None and config.check_indices:   # an explicit mode is honoured
        kind = "raise"
    keep = _scalar_mask(idx)
    if keep is not None:   # numpy: a new leading axis holding x once (True) or never (False)
        y = reshape(x, (1,) + tuple(x.shape))
        return y if keep else _getitem(y, slice(0, 0))
    idx = _normalize(x, idx)
    if kind == "fill":
        x, idx = _fill_slots(x, idx, fill_value)
        kind = "clip"
    has_adv = any(_is_array_index(i) for i in idx)
    if has_adv:  # ints count as advanced indices next to arrays (numpy's rule)
        idx = [np.asarray(i, np.int32) if isinstance(i, int) else i for i in idx]
    y = x
    dim = 0
    shape_after = []  # output layout before advanced indexing: kept dims and new axes
    adv = []  # (position in shape_after, index array)
    starts, limits, strides, revs = [], [], [], []
    for j, i in enumerate(idx):
        if i is _GAP:
            continue
        if i is None:
            shape_after.append(("new", None))
            continue
        n = x.shape[dim]
        if isinstance(i, slice):
            start, stop, step = i.indices(n)
            if step < 0:
                revs.append(dim)
                # x[start:stop:step] == rev(x)[n-1-start : n-1-stop : -step]
                start, stop, step = n - 1 - start, n - 1 - stop, -step
            length = max(0, -(-(stop - start) // step))
            starts.append(start if length else 0)
            limits.append(start + (length - 1) * step + 1 if length else 0)
            strides.append(step)
            shape_after.append(("dim", dim))
        elif isinstance(i, int):
            if not -n <= i < n:
                if kind != "clip" or n == 0:
                    raise IndexError(f"index {i} is out of bounds for axis {dim} with size {n} "
                                     f"(array shape {tuple(x.shape)})\n  at {user_frame_src()}")
                i = min(max(i, -n), n - 1)
            i = i + n if i < 0 else i
            starts.append(i)
            limits.append(i + 1)
            strides.append(1)
        else:
            starts.append(0)
            limits.append(n)
            strides.append(1)
            adv.append((len(shape_after), i, j))
            shape_after.append(("adv", dim))
        dim += 1
    if revs:
        y = bind(P.rev_p, y, dimensions=tuple(revs))
    if (tuple(starts) != (0,) * x.ndim or tuple(limits) != tuple(x.shape)
            or set(strides) - {1}):
        y = bind(P.slice_p, y, start_indices=tuple(starts), limit_indices=tuple(limits),
                 strides=tuple(strides))
    new_shape = [1 if kind == "new" else y.shape[d] for kind, d in shape_after]
    y = reshape(y, new_shape)
    if not adv:
        return y
    # numpy puts the result dims in place only when no slice/None/Ellipsis separates the arrays
    in_index = [j for _, _, j in adv]
    adjacent = in_index == list(range(in_index[0], in_index[0] + len(in_index)))
    return _advanced(y, [(pos, i) for pos, i, _ in adv], adjacent, kind != "raise")


def _fill_slots(x, idx, fill_value):
    """For mode "fill": x with one slot of fill_value appended along every axis indexed by an
    integer (array), and those indices with out-of-range entries sent to that slot."""
    out, dim = [], 0
    for i in idx:
        if i is None or i is _GAP:
            out.append(i)
            continue
        if isinstance(i, int) or _is_array_index(i):
            a = asarray(np.asarray(i, np.int32) if isinstance(i, int) else i)
            i, _ = moded_index(a, x.shape[dim], "fill")
            x = pad_fill(x, dim, fill_value)
        out.append(i)
        dim += 1
    return x, out


def _clamp(a, n):
    """Integer index array a wrapped once from the end, then clamped into [0, n) (JAX's
    default for gathers)."""
    from funcgrad.numpy._ufuncs import clip, where
    return clip(where(a < 0, a + n, a), 0, max(n - 1, 0))


def _advanced(y, adv, adjacent, clamp=False):
    """Gather with integer arrays at positions `adv` (numpy's placement of the result dims:
    where the arrays stand when `adjacent`, else first); `clamp` clamps out-of-range entries
    into range, else take raises IndexError for them."""
    positions = [p for p, _ in adv]
    arrays = [asarray(i) for _, i in adv]
    if clamp:
        arrays = [_clamp(a, y.shape[p]) if y.shape[p] else a for a, p in zip(arrays, positions)]
    try:
        bshape = np.broadcast_shapes(*[tuple(a.shape) for a in arrays])
    except ValueError:
        raise IndexError("shape mismatch: indexing arrays could not be broadcast together with "
                         f"shapes {' '.join(str(tuple(a.shape)) for a in arrays)}"
                         f"\n  at {user_frame_src()}") from None
    arrays = [broadcast_to(a, bshape) for a in arrays]
    if len(arrays) == 1:
        return bind(P.take_p, y, arrays[0], axis=positions[0])
    rest = [d for d in range(y.ndim) if d not in positions]
    yt = transpose(y, positions + rest)
    sizes = [y.shape[p] for p in positions]
    total = int(np.prod(sizes))
    flat = reshape(yt, (total,) + tuple(yt.shape[len(positions):]))
    lin = None
    stride = 1
    for a, n in reversed(list(zip(arrays, sizes))):
        a = a if a.dtype in (np.int32, np.int64) else asarray(a, np.int32)
        term = checked_index(a, n) * stride if stride != 1 else checked_index(a, n)
        lin = term if lin is None else lin + term
        stride *= n
    out = bind(P.take_p, flat, lin, axis=0)
    if not adjacent:
        return out
    nb = len(bshape)
    k = positions[0]
    perm = list(range(nb, nb + k)) + list(range(nb)) + list(range(nb + k, out.ndim))
    return transpose(out, perm)


def _window_index(x, idx):
    """(starts, window sizes, axes the selection keeps) when `idx` selects one window at a
    0-d integer array index (a traced position) with ints and unit-step slices elsewhere, so
    that `x.at[idx].set(v)` is a dynamic_update_slice; else None (the scatter path).

    An array index is wrapped and checked as x[idx] does (checked_index: out of range raises
    IndexError naming the user's line), so the window never needs clamping."""
    if _scalar_mask(idx) is not None or x.ndim == 0:
        return None
    raw = idx if isinstance(idx, tuple) else (idx,)
    if not any(isinstance(i, (ArrayBase, np.ndarray)) and np.ndim(i) == 0
               and dtype_kind(i.dtype) in "iu" for i in raw):
        return None
    try:
        norm = _normalize(x, idx)
    except IndexError:
        return None   # the scatter path raises it, naming the user's line
    starts, sizes, kept, dim = [], [], [], 0
    for i in norm:
        if i is _GAP:
            continue
        if i is None:
            return None
        n = x.shape[dim]
        if isinstance(i, slice):
            start, stop, step = i.indices(n)
            if step != 1:
                return None
            starts.append(np.int32(start))
            sizes.append(max(0, stop - start))
            kept.append(dim)
        elif isinstance(i, int):
            if not -n <= i < n:
                return None
            starts.append(np.int32(i % n))
            sizes.append(1)
        elif np.ndim(i) == 0 and dtype_kind(i.dtype) in "iu":
            starts.append(checked_index(asarray(i), n))
            sizes.append(1)
        else:
            return None
        dim += 1
    return starts, sizes, kept


class _IndexUpdateHelper:
    """`x.at`: JAX's functional index updates."""
    __slots__ = ("x",)

    def __init__(self, x):
        self.x = x

    def __getitem__(self, idx):
        return _IndexUpdateRef(self.x, idx)


def _neutral(kind, dtype):
    """The update that leaves a value as it is: 1 for a product, the lowest / highest value
    of the dtype for max / min."""
    dtype = np.dtype(dtype)
    if kind == "prod":
        return 1
    if dtype == np.bool_:
        return kind == "min"
    if is_int(dtype):
        info = np.iinfo(dtype)
        return info.min if kind == "max" else info.max
    return -np.inf if kind == "max" else np.inf


class _IndexUpdateRef:
    """`x.at[idx]`: `.get()`, `.set(v)`, `.add(v)`, `.multiply(v)`, `.min(v)`, `.max(v)`.

    Updates raise IndexError for out-of-range targets (JAX drops them; funcgrad never drops
    data); `.get()` follows JAX's gather modes (clamped by default, see _getitem). With
    repeated indices `.add` accumulates every update, `.set` keeps one of them, and
    `.multiply`/`.min`/`.max` apply every update, as in JAX.
    """

    def __init__(self, x, idx):
        self.x, self.idx = x, idx

    def get(self, *, indices_are_sorted=False, unique_indices=False, mode=None,
            fill_value=None):
        """x[idx], with JAX's out-of-bounds modes.

        Args:
            indices_are_sorted: accepted for JAX compatibility (a hint).
            unique_indices: accepted for JAX compatibility (a hint).
            mode: None (funcgrad's default: an out-of-range index raises IndexError naming
                the user's line; with config "check_indices" False, integer arrays are
                clamped as JAX does), "promise_in_bounds" (JAX's default: clamped, as XLA
                does), "clip" (clamped into range) or "fill" / "drop" (an out-of-range index
                reads `fill_value`).
            fill_value: what "fill" reads (default: NaN for inexact types, the most negative
                signed / largest unsigned integer, True for bool).

        Returns:
            The selection; every mode differentiates (a filled element's gradient is 0).

        Example:
            >>> import funcgrad.numpy as fnp
            >>> fnp.arange(3.0).at[[0, 5]].get(mode="fill", fill_value=9.0).tolist()
            [0.0, 9.0]
        """
        del indices_are_sorted, unique_indices
        return _getitem(self.x, self.idx, mode=mode, fill_value=fill_value)

    def _flat_ids(self):
        x = self.x
        ids = reshape(bind(P.iota_p, dtype=np.dtype(np.int32), shape=(max(x.size, 0),),
                           dimension=0), x.shape) if x.size else asarray(
            np.zeros(x.shape, np.int32))
        return _getitem(ids, self.idx, mode="raise")   # updates: out-of-range raises

    def _scatter(self, prim, base, values):
        x = self.x
        sel = self._flat_ids()
        v = broadcast_to(asarray(values, base.dtype), sel.shape)
        flat = reshape(base, (-1,))
        out = bind(prim, flat, reshape(sel, (-1,)), reshape(v, (-1,)), axis=0)
        return reshape(out, x.shape)

    def set(self, values):
        x = asarray(self.x)
        window = _window_index(x, self.idx)
        if window is not None:   # one window at scalar-array indices: dynamic_update_slice
            starts, sizes, kept = window
            v = broadcast_to(asarray(values, x.dtype), tuple(sizes[d] for d in kept))
            return bind(P.dynamic_update_slice_p, x, reshape(v, sizes), *starts)
        return self._scatter(P.scatter_p, x, values)

    def add(self, values):
        x = asarray(self.x)
        return self._scatter(P.scatter_add_p, x, values)

    def multiply(self, values):
        from funcgrad.numpy._base import ones_like
        x = asarray(self.x)
        if self._traced():
            return self._traced_combine(values, "prod")
        groups = self._repeats()
        if groups is None:
            return x * self._scatter(P.scatter_p, ones_like(x), values)
        uniq, combined = self._combine(values, groups, "prod")
        flat = reshape(x, (-1,))
        factors = bind(P.scatter_p, reshape(ones_like(x), (-1,)), uniq, combined, axis=0)
        return reshape(flat * factors, x.shape)

    def min(self, values):
        from funcgrad.numpy._ufuncs import minimum
        return self._minmax(values, minimum, "min")

    def max(self, values):
        from funcgrad.numpy._ufuncs import maximum
        return self._minmax(values, maximum, "max")

    def _minmax(self, values, op, kind):
        if self._traced():
            return self._traced_combine(values, kind)
        groups = self._repeats()
        if groups is None:
            return self.set(op(self.get(), values))
        x = asarray(self.x)
        uniq, combined = self._combine(values, groups, kind)
        flat = reshape(x, (-1,))
        new = op(bind(P.take_p, flat, uniq, axis=0), combined)
        return reshape(bind(P.scatter_p, flat, uniq, new, axis=0), x.shape)

    # Repeated indices: like JAX, .multiply/.min/.max apply every update. For a concrete index
    # the repeats are grouped here (numpy, at trace time) and each group's updates combined
    # with a reduction before one scatter; a traced index's updates are sorted by target and
    # each run of one target reduced by a scan (_traced_combine).
    def _traced(self) -> bool:
        idx = self.idx if isinstance(self.idx, tuple) else (self.idx,)
        return any(isinstance(i, Tracer) for i in idx)

    def _traced_combine(self, values, kind):
        """.multiply / .min / .max at a traced index, every update applied (repeats too): the
        updates sorted by flat target, a scan reducing each run of one target, the
        run ends scattered onto their targets (the other updates onto a spare slot, dropped)
        and combined with x; a target no update reaches keeps its value."""
        from funcgrad.numpy._base import full
        from funcgrad.numpy._shape import concatenate
        from funcgrad.numpy._sorting import argsort
        from funcgrad.numpy._ufuncs import maximum, minimum, multiply, where
        x = asarray(self.x)
        sel = self._flat_ids()
        t = reshape(sel, (-1,))
        v = reshape(broadcast_to(asarray(values, x.dtype), sel.shape), (-1,))
        op = {"prod": multiply, "min": minimum, "max": maximum}[kind]
        if t.shape[0] == 0:
            return x
        order = argsort(t)
        t, v = bind(P.take_p, t, order, axis=0), bind(P.take_p, v, order, axis=0)

        # inclusive scan within runs of one target (Hillis-Steele): after the step of shift d,
        # run[i] reduces the updates i-2d+1..i that share i's target
        run, n, d = v, t.shape[0], 1
        while d < n:
            before_t = concatenate([asarray(np.full(d, -1, t.dtype)), t[:-d]])
            before = concatenate([run[:d], run[:-d]])
            run = where(before_t == t, op(before, run), run)
            d *= 2
        end = concatenate([t[1:] != t[:-1], asarray(np.ones(1, np.bool_))])
        dest = where(end, t, x.size)
        totals = bind(P.scatter_p, full((x.size + 1,), _neutral(kind, x.dtype), x.dtype), dest,
                      run, axis=0)
        return reshape(op(reshape(x, (-1,)), totals[:x.size]), x.shape)

    def _repeats(self):
        """(selection shape, unique flat targets, (U, m) update positions padded with -1) when
        the index is concrete and repeats a position; else None."""
        idx = self.idx if isinstance(self.idx, tuple) else (self.idx,)
        if any(isinstance(i, Tracer) for i in idx):
            return None
        idx = tuple(np.asarray(i) if isinstance(i, ArrayBase) else i for i in idx)
        try:
            sel = np.arange(self.x.size).reshape(self.x.shape)[idx]
        except (IndexError, TypeError, ValueError):
            return None  # the regular path raises the error, naming the user's line
        flat = np.asarray(sel).reshape(-1)
        uniq, inverse, counts = np.unique(flat, return_inverse=True, return_counts=True)
        if uniq.size == flat.size:
            return None
        order = np.argsort(inverse, kind="stable")
        rank = np.arange(flat.size) - (np.cumsum(counts) - counts)[inverse[order]]
        groups = np.full((uniq.size, int(counts.max())), -1, np.int64)
        groups[inverse[order], rank] = order
        return np.shape(sel), uniq.astype(np.int32), groups

    def _combine(self, values, groups, kind):
        """Each repeated position's updates reduced to one (product, min or max)."""
        from funcgrad.numpy._shape import concatenate
        from funcgrad.numpy._ufuncs import max as _max
        from funcgrad.numpy._ufuncs import min as _min
        from funcgrad.numpy._ufuncs import prod
        shape, uniq, pos = groups
        v = reshape(broadcast_to(asarray(values, self.x.dtype), shape), (-1,))
        if kind == "prod":  # pad with a 1 appended after the updates
            v = concatenate([v, asarray(np.ones(1, self.x.dtype))])
            pos = np.where(pos < 0, v.shape[0] - 1, pos)
        else:  # pad with the group's first update
            pos = np.where(pos < 0, pos[:, :1], pos)
        taken = bind(P.take_p, v, pos.astype(np.int32), axis=0)
        reduce = {"prod": prod, "min": _min, "max": _max}[kind]
        return uniq, reduce(taken, axis=1)


