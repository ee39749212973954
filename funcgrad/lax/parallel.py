"""lax's collectives (psum, pmean, pmax, pmin, all_gather, psum_scatter, ppermute, axis_index)
over the named axes of pmap and vmap(axis_name=...), with JAX's semantics and gradients."""
from __future__ import annotations

import math
import operator

from funcgrad.prims.collectives import (
    all_gather_p,
    axis_index_p,
    bound_axis_size,
    pmax_p,
    pmin_p,
    ppermute_p,
    psum_p,
    psum_scatter_p,
)
from funcgrad.core import bind, user_frame_src
from funcgrad.tree_util import tree_map


def _names(axis_name) -> tuple:
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


def _no_groups(groups, what):
    if groups is not None:
        raise NotImplementedError(f"lax.{what}: axis_index_groups is not supported by funcgrad"
                                  f"\n  at {user_frame_src()}")


def _value(x):
    from funcgrad.transforms.ad import _as_value
    return _as_value(x)


def _over_each(prim, x, axis_name):
    names = _names(axis_name)
    sizes = [bound_axis_size(n) for n in names]

    def one(v):
        v = _value(v)
        for n, s in zip(names, sizes):
            v = bind(prim, v, axis_name=n, axis_size=s)
        return v
    return tree_map(one, x)


def psum(x, axis_name, *, axis_index_groups=None):
    """Sum of x over the members of the mapped axis `axis_name` (a name or a tuple of names).

    Every member gets the total. Under pmap the gradient is JAX's: psum is its own transpose.

    Args:
        x: a pytree of arrays (or numbers: psum(1, "i") is the axis size).
        axis_name: the name given to pmap / vmap(axis_name=...), or a tuple of them.
        axis_index_groups: not supported (must be None).

    Example:
        >>> import funcgrad, numpy as np
        >>> from funcgrad import lax
        >>> funcgrad.vmap(lambda v: lax.psum(v, "i"), axis_name="i")(np.arange(3.0)).tolist()
        [3.0, 3.0, 3.0]
    """
    _no_groups(axis_index_groups, "psum")
    return _over_each(psum_p, x, axis_name)


def pmean(x, axis_name, *, axis_index_groups=None):
    """Mean of x over the members of the mapped axis (psum divided by the axis size).

    Example:
        >>> import funcgrad, numpy as np
        >>> from funcgrad import lax
        >>> funcgrad.vmap(lambda v: lax.pmean(v, "i"), axis_name="i")(np.arange(3.0)).tolist()
        [1.0, 1.0, 1.0]
    """
    _no_groups(axis_index_groups, "pmean")
    n = math.prod(bound_axis_size(a) for a in _names(axis_name))
    return tree_map(lambda v: operator.truediv(v, n), psum(x, axis_name))


def pmax(x, axis_name, *, axis_index_groups=None):
    """Maximum of x over the members of the mapped axis.

    Its gradient (which JAX leaves undefined) goes to the members that hold the maximum, shared
    equally between ties, as reduce_max's does.

    Example:
        >>> import funcgrad, numpy as np
        >>> from funcgrad import lax
        >>> funcgrad.vmap(lambda v: lax.pmax(v, "i"), axis_name="i")(np.array([1.0, 5.0,
        ...                                                                      2.0])).tolist()
        [5.0, 5.0, 5.0]
    """
    _no_groups(axis_index_groups, "pmax")
    return _over_each(pmax_p, x, axis_name)


def pmin(x, axis_name, *, axis_index_groups=None):
    """Minimum of x over the members of the mapped axis (gradient as pmax's).

    Example:
        >>> import funcgrad, numpy as np
        >>> from funcgrad import lax
        >>> funcgrad.vmap(lambda v: lax.pmin(v, "i"), axis_name="i")(np.array([1.0, 5.0,
        ...                                                                      2.0])).tolist()
        [1.0, 1.0, 1.0]
    """
    _no_groups(axis_index_groups, "pmin")
    return _over_each(pmin_p, x, axis_name)


def _canonical_axis(axis, limit, what):
    if not -limit <= axis < limit:
        raise ValueError(f"lax.{what}: axis {axis} is out of range for the result's {limit} "
                         f"axes\n  at {user_frame_src()}")
    return axis % limit


def all_gather(x, axis_name, *, axis_index_groups=None, axis=0, tiled=False):
    """Every member's x, stacked along a new axis `axis` (or concatenated along it if tiled).

    With a tuple of names the members are ordered row-major (the first name outermost). The
    gradient is psum_scatter of the cotangent, as in JAX.

    Example:
        >>> import funcgrad, numpy as np
        >>> from funcgrad import lax
        >>> f = funcgrad.vmap(lambda v: lax.all_gather(v, "i"), axis_name="i")
        >>> f(np.array([1.0, 2.0])).tolist()
        [[1.0, 2.0], [1.0, 2.0]]
    """
    _no_groups(axis_index_groups, "all_gather")
    names = _names(axis_name)
    sizes = [bound_axis_size(n) for n in names]

    def one(v):
        v = _value(v)
        if tiled and v.ndim == 0:
            raise ValueError(f"lax.all_gather: tiled=True needs an operand of rank >= 1, got a "
                             f"scalar\n  at {user_frame_src()}")
        a = _canonical_axis(axis, v.ndim if tiled else v.ndim + 1, "all_gather")
        for k, (n, s) in enumerate(reversed(list(zip(names, sizes)))):
            # innermost name first; the outer names then concatenate its stacks (row-major)
            v = bind(all_gather_p, v, axis_name=n, axis_size=s, axis=a, tiled=tiled or k > 0)
        return v
    return tree_map(one, x)


def psum_scatter(x, axis_name, *, scatter_dimension=0, axis_index_groups=None, tiled=False):
    """psum of x, of which each member keeps only its block along `scatter_dimension`.

    Not tiled, that dimension's size must equal the axis size and is removed; tiled, it must
    divide evenly and shrinks by the axis size. The gradient is all_gather, as in JAX.

    Example:
        >>> import funcgrad, numpy as np
        >>> from funcgrad import lax
        >>> f = funcgrad.vmap(lambda v: lax.psum_scatter(v, "i"), axis_name="i")
        >>> f(np.array([[1.0, 2.0], [10.0, 20.0]])).tolist()
        [11.0, 22.0]
    """
    _no_groups(axis_index_groups, "psum_scatter")
    names = _names(axis_name)
    sizes = [bound_axis_size(n) for n in names]
    total = math.prod(sizes)

    def one(v):
        v = _value(v)
        sd = _canonical_axis(scatter_dimension, max(v.ndim, 1), "psum_scatter")
        if len(names) == 1:
            return bind(psum_scatter_p, v, axis_name=names[0], axis_size=sizes[0],
                        scatter_dimension=sd, tiled=tiled)
        if v.ndim == 0 or (not tiled and v.shape[sd] != total):
            raise ValueError(f"lax.psum_scatter: dimension {sd} of an operand of shape "
                             f"{tuple(v.shape)} must equal the {total} members of axes {names}"
                             f"\n  at {user_frame_src()}")
        for n, s in zip(names, sizes):                # outermost name first: row-major blocks
            v = bind(psum_scatter_p, v, axis_name=n, axis_size=s, scatter_dimension=sd,
                     tiled=True)
        if not tiled:                                 # the block is one slice: drop its axis
            from funcgrad import prims as P
            v = P.reshape(v, tuple(v.shape[:sd]) + tuple(v.shape[sd + 1:]))
        return v
    return tree_map(one, x)


def ppermute(x, axis_name, perm):
    """Send x from member src to member dst for each (src, dst) pair of perm; a member that
    receives nothing gets zeros. The gradient sends the cotangents back along the inverse.

    Example:
        >>> import funcgrad, numpy as np
        >>> from funcgrad import lax
        >>> f = funcgrad.vmap(lambda v: lax.ppermute(v, "i", [(0, 1), (1, 2), (2, 0)]),
        ...                   axis_name="i")
        >>> f(np.array([1.0, 2.0, 3.0])).tolist()
        [3.0, 1.0, 2.0]
    """
    names = _names(axis_name)
    if len(names) != 1:
        raise NotImplementedError(f"lax.ppermute over several axes {names} is not supported by "
                                  f"funcgrad\n  at {user_frame_src()}")
    n = bound_axis_size(names[0])
    try:
        pairs = tuple((operator.index(s), operator.index(d)) for s, d in perm)
    except (TypeError, ValueError):
        raise ValueError(f"lax.ppermute: perm must be a sequence of (source, destination) "
                         f"integer pairs, got {perm!r}\n  at {user_frame_src()}") from None
    srcs, dsts = [s for s, _ in pairs], [d for _, d in pairs]
    bad = [p for p in pairs if not (0 <= p[0] < n and 0 <= p[1] < n)]
    if bad or len(set(srcs)) != len(srcs) or len(set(dsts)) != len(dsts):
        why = (f"pairs {bad} are outside [0, {n})" if bad else
               "a source or a destination appears twice")
        raise ValueError(f"lax.ppermute: invalid perm {perm!r} for axis {names[0]!r} of size "
                         f"{n}: {why}\n  at {user_frame_src()}")
    return tree_map(lambda v: bind(ppermute_p, _value(v), axis_name=names[0], axis_size=n,
                                   perm=pairs), x)


def axis_index(axis_name):
    """This member's index along the mapped axis (an int32 scalar); for a tuple of names, the
    row-major index over them.

    Example:
        >>> import funcgrad, numpy as np
        >>> from funcgrad import lax
        >>> funcgrad.vmap(lambda v: v * lax.axis_index("i"), axis_name="i")(np.ones(3)).tolist()
        [0.0, 1.0, 2.0]
    """
    names = _names(axis_name)
    idx = None
    for n in names:
        s = bound_axis_size(n)
        i = bind(axis_index_p, axis_name=n, axis_size=s)
        idx = i if idx is None else idx * s + i
    return idx


__all__ = ["all_gather", "axis_index", "pmax", "pmean", "pmin", "ppermute", "psum",
           "psum_scatter"]
