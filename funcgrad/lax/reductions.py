"""jax.lax's generic reductions (reduce with any computation, reduce_xor) and shape helpers."""
from __future__ import annotations

import builtins
import functools
import itertools
import operator

import numpy as np

from funcgrad import numpy as fnp
from funcgrad.core import Tracer
from funcgrad.core.dtypes import dtype_kind
from funcgrad.lax.slicing import GatherDimensionNumbers, gather
from funcgrad.tree_util import tree_flatten, tree_unflatten


def _monoids():
    """JAX's recognized reducers: computation -> (reduction, identity for a dtype)."""
    def ident(kind):
        def f(dt):
            dt = np.dtype(dt)
            if kind in ("max", "min"):
                if dtype_kind(dt) == "f":
                    return -np.inf if kind == "max" else np.inf
                if dtype_kind(dt) == "b":
                    return kind == "min"
                info = np.iinfo(dt)
                return info.min if kind == "max" else info.max
            if kind == "and":
                return True if dt.kind == "b" else -1 if dt.kind == "i" else np.iinfo(dt).max
            return {"add": 0, "mul": 1, "or": 0, "xor": 0}[kind]
        return f

    table = {}
    for fns, red, kind in [
            ((fnp.add, operator.add), fnp.sum, "add"),
            ((fnp.multiply, operator.mul), fnp.prod, "mul"),
            ((fnp.maximum,), fnp.max, "max"), ((fnp.minimum,), fnp.min, "min"),
            ((fnp.bitwise_and, fnp.logical_and, operator.and_), _all_bits, "and"),
            ((fnp.bitwise_or, fnp.logical_or, operator.or_), _any_bits, "or")]:
        for f in fns:
            table[f] = (red, ident(kind))
    return table


def _all_bits(x, axis):
    return fnp.all(x, axis=axis) if x.dtype == np.bool_ else _tree_reduce(
        [x], lambda a, b: [fnp.bitwise_and(a[0], b[0])], axis)[0]


def _any_bits(x, axis):
    return fnp.any(x, axis=axis) if x.dtype == np.bool_ else _tree_reduce(
        [x], lambda a, b: [fnp.bitwise_or(a[0], b[0])], axis)[0]


def _tree_reduce(xs, comp, axes):
    """Combine the elements of each x over `axes` pairwise (log2 n rounds of comp over halves);
    None where the axes hold no element."""
    nd = xs[0].ndim
    axes = sorted(a % nd if nd else a for a in axes)
    rest = [d for d in range(nd) if d not in axes]
    keep = tuple(xs[0].shape[d] for d in rest)
    n = int(np.prod([xs[0].shape[a] for a in axes], dtype=np.int64))
    xs = [fnp.reshape(fnp.transpose(x, rest + axes), keep + (n,)) for x in xs]
    if n == 0:
        return None
    while n > 1:
        h = n // 2
        ys = comp([x[..., :h] for x in xs], [x[..., h:2 * h] for x in xs])
        xs = [fnp.concatenate([y, x[..., 2 * h:]], axis=-1) if n % 2 else y
              for y, x in zip(ys, xs)]
        n = h + n % 2
    return [x[..., 0] for x in xs]


def reduce(operands, init_values, computation, dimensions, out_sharding=None):
    """Reduce `operands` (an array or a pytree of equal-shaped arrays) over `dimensions` with
    `computation(x, y)`, starting from `init_values` (lax.reduce).

    JAX's monoids (add, mul, max, min and the bitwise/logical and/or, from funcgrad.lax,
    funcgrad.numpy or operator) with their identity as the initial value become the matching
    reduction; any other computation that funcgrad can trace is applied pairwise in log2(n)
    rounds (it must be associative and commutative, as XLA requires), then once with the
    initial values. Gradients, vmap and jit follow from the composition.

    Example:
        >>> import numpy as np
        >>> from funcgrad import lax
        >>> x = np.arange(6.0).reshape(2, 3)
        >>> lax.reduce(x, 0.0, lax.add, (1,)).tolist()
        [3.0, 12.0]
        >>> lax.reduce(x, -np.inf, lambda a, b: lax.max(a, b), (0,)).tolist()
        [3.0, 4.0, 5.0]
    """
    flat, tree = tree_flatten(operands)
    inits, itree = tree_flatten(init_values)
    if itree != tree:
        raise TypeError(f"lax.reduce: init_values' structure {itree} must match the "
                        f"operands' {tree}")
    flat = [fnp.asarray(x) for x in flat]
    if not flat:
        raise ValueError("lax.reduce: at least one operand is required")
    shape = tuple(flat[0].shape)
    if any(tuple(x.shape) != shape for x in flat):
        raise ValueError(f"lax.reduce: operands must have one shape, got "
                         f"{[tuple(x.shape) for x in flat]}")
    dims = tuple(int(d) for d in dimensions)
    if any(not 0 <= d < len(shape) for d in dims) or len(set(dims)) != len(dims):
        raise ValueError(f"lax.reduce: dimensions {dims} must be distinct axes of {shape}")
    inits = [fnp.asarray(v, x.dtype) for v, x in zip(inits, flat)]
    mono = _monoids().get(computation) if len(flat) == 1 else None
    if mono is not None:
        red, ident = mono
        v = inits[0]
        is_ident = not isinstance(v, Tracer) and bool(np.asarray(v) == ident(flat[0].dtype))
        if is_ident:
            return tree_unflatten(tree, [red(flat[0], axis=dims)])

    def comp(a, b):
        out = computation(tree_unflatten(tree, a), tree_unflatten(tree, b))
        return [fnp.asarray(o, x.dtype) for o, x in zip(tree_flatten(out)[0], flat)]

    keep = tuple(n for d, n in enumerate(shape) if d not in dims)
    red = _tree_reduce(flat, comp, dims)
    bcast = [fnp.broadcast_to(v, keep) for v in inits]
    out = bcast if red is None else comp(bcast, red)
    return tree_unflatten(tree, out)


def reduce_xor(operand, axes):
    """Bitwise xor over `axes` (lax.reduce_xor); for bool, the parity.

    Example:
        >>> import numpy as np
        >>> from funcgrad import lax
        >>> lax.reduce_xor(np.array([[1, 2, 4], [3, 3, 0]]), (1,)).tolist()
        [7, 0]
    """
    x = fnp.asarray(operand)
    if dtype_kind(x.dtype) not in "biu":
        raise TypeError(f"reduce_xor: an integer or bool operand is required, got "
                        f"{x.dtype.name}")
    axes = tuple(int(a) for a in axes)
    out = _tree_reduce([x], lambda a, b: [fnp.bitwise_xor(a[0], b[0])], axes)
    if out is None:
        keep = tuple(n for d, n in enumerate(x.shape) if d not in axes)
        return fnp.zeros(keep, x.dtype)
    return out[0]


def broadcast_shapes(*shapes):
    """The shape all `shapes` broadcast to, by numpy's rules (lax.broadcast_shapes).

    Example:
        >>> from funcgrad import lax
        >>> lax.broadcast_shapes((2, 1), (3,))
        (2, 3)
    """
    try:
        return tuple(int(n) for n in np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise ValueError(f"lax.broadcast_shapes: incompatible shapes for broadcasting: "
                         f"{[tuple(s) for s in shapes]}") from None


def broadcast_like(arr, like_arr):
    """`arr` broadcast to the shape of `like_arr` (lax.broadcast_like).

    Example:
        >>> import numpy as np
        >>> from funcgrad import lax
        >>> lax.broadcast_like(np.array([1, 2]), np.zeros((2, 2))).tolist()
        [[1, 2], [1, 2]]
    """
    return fnp.broadcast_to(arr, tuple(np.shape(like_arr)))


def empty(shape, dtype, *, out_sharding=None):
    """An array of `shape` and `dtype` whose values must not be relied on (lax.empty); funcgrad
    gives zeros.

    Example:
        >>> from funcgrad import lax
        >>> lax.empty((2,), "float32").shape
        (2,)
    """
    return fnp.zeros(tuple(shape), dtype)


def index_take(src, idxs, axes):
    """src at the index arrays `idxs` (one per axis in `axes`) along those axes, the indexed
    axes replaced by one leading axis (lax.index_take; out-of-range indices read fill values,
    as lax.gather's default mode).

    Example:
        >>> import numpy as np
        >>> from funcgrad import lax
        >>> x = np.arange(12).reshape(3, 4)
        >>> lax.index_take(x, (np.array([2, 0]),), (0,)).tolist()
        [[8, 9, 10, 11], [0, 1, 2, 3]]
    """
    src = fnp.asarray(src)
    axes = tuple(int(a) for a in axes)
    if len(idxs) != len(axes):
        raise ValueError(f"lax.index_take: {len(idxs)} index arrays for {len(axes)} axes")
    idx = fnp.stack([fnp.asarray(i) for i in idxs], axis=1)
    sizes = [1 if d in axes else n for d, n in enumerate(src.shape)]
    dn = GatherDimensionNumbers(offset_dims=tuple(range(1, src.ndim - len(axes) + 1)),
                                collapsed_slice_dims=axes, start_index_map=axes)
    return gather(src, idx, dn, tuple(sizes))


def dtype(x, *, canonicalize=False):
    """The dtype funcgrad gives `x` as an array (lax.dtype).

    Example:
        >>> import numpy as np
        >>> from funcgrad import lax
        >>> lax.dtype(np.zeros(2, np.int8))
        dtype('int8')
    """
    return fnp.asarray(x).dtype


def tile(operand, reps):
    """`operand` repeated `reps[d]` times along each axis d (lax.tile).

    Example:
        >>> import numpy as np
        >>> from funcgrad import lax
        >>> lax.tile(np.array([1, 2]), (2,)).tolist()
        [1, 2, 1, 2]
    """
    x = fnp.asarray(operand)
    reps = tuple(int(r) for r in reps)
    if len(reps) != x.ndim:
        raise ValueError(f"lax.tile: reps {reps} must have one entry per axis of "
                         f"{tuple(x.shape)}")
    return fnp.tile(x, reps)


def split(operand, sizes, axis=0):
    """`operand` cut along `axis` into pieces of `sizes`, which must sum to its length
    (lax.split).

    Example:
        >>> import numpy as np
        >>> from funcgrad import lax
        >>> [p.tolist() for p in lax.split(np.arange(5), (2, 3))]
        [[0, 1], [2, 3, 4]]
    """
    x = fnp.asarray(operand)
    axis = int(axis) % builtins.max(x.ndim, 1)
    sizes = [int(s) for s in sizes]
    if builtins.sum(sizes) != x.shape[axis] or builtins.min(sizes, default=0) < 0:
        raise ValueError(f"lax.split: sizes {tuple(sizes)} must be >= 0 and sum to axis "
                         f"{axis}'s length in {tuple(x.shape)}")
    cuts = np.cumsum([0] + sizes)
    return [x[(slice(None),) * axis + (slice(int(a), int(b)),)]
            for a, b in itertools.pairwise(cuts)]


def composite(decomposition, name, version=0):
    """Mark `decomposition` as the named composite op `name` (lax.composite). XLA may lower a
    composite to a fused kernel; funcgrad always runs the decomposition, so the result is the
    function itself (its derivatives, batching and jit those of the decomposition).

    Example:
        >>> import numpy as np
        >>> from funcgrad import lax
        >>> hardtanh = lax.composite(lambda x: lax.clamp(-1.0, x, 1.0), name="my.hardtanh")
        >>> hardtanh(np.array([-2.0, 0.5])).tolist()
        [-1.0, 0.5]
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"lax.composite: name must be a non-empty str, got {name!r}")

    @functools.wraps(decomposition)
    def fn(*args, **kwargs):
        return decomposition(*args, **kwargs)
    fn.composite_name, fn.composite_version = name, int(version)
    return fn
