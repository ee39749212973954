"""lax.associative_scan: an inclusive scan of an associative function in log2(n) levels."""
from __future__ import annotations

from typing import Any, Callable

from funcgrad import prims as P
from funcgrad.transforms.ad import _as_value
from funcgrad.core import bind, user_frame_src
from funcgrad.tree_util import tree_flatten, tree_unflatten


def _slice(x, start, stop, stride, axis):
    starts, limits, strides = [0] * x.ndim, list(x.shape), [1] * x.ndim
    starts[axis], limits[axis], strides[axis] = start, max(stop, start), stride
    return bind(P.slice_p, x, start_indices=tuple(starts), limit_indices=tuple(limits),
                strides=tuple(strides))


def _interleave(even, odd, axis):
    """[e0, o0, e1, o1, ...] along axis; even has as many elements as odd, or one more."""
    from funcgrad import numpy as fnp
    n_even, n_odd = even.shape[axis], odd.shape[axis]
    if n_even > n_odd:   # pad odd with a copy of even's last element, dropped afterwards
        odd = fnp.concatenate([odd, _slice(even, n_even - 1, n_even, 1, axis)], axis)
    pair = fnp.stack([even, odd], axis=axis + 1)
    shape = even.shape[:axis] + (2 * n_even,) + even.shape[axis + 1:]
    return _slice(pair.reshape(shape), 0, n_even + n_odd, 1, axis)


def associative_scan(fn: Callable, elems: Any, reverse: bool = False, axis: int = 0) -> Any:
    """Inclusive scan of an associative `fn` along `axis`, like `jax.lax.associative_scan`.

    `fn(a, b)` combines two pytrees shaped like `elems` (slices stacked along `axis`) and must
    be associative; it is applied elementwise to whole slices, O(n) work in 2 log2(n) levels
    (pairs are combined, the half-length problem is solved recursively, the gaps filled in).

    Args:
        fn: associative binary function of two pytrees with elems's structure.
        elems: a pytree of arrays sharing the length of `axis`.
        reverse: scan from the end, as JAX does: elems are reversed along axis, scanned,
            and the result reversed back.
        axis: the scanned axis.

    Returns:
        A pytree like `elems`: result[i] = elems[0] (+) ... (+) elems[i].

    Example:
        >>> import funcgrad.numpy as fnp
        >>> from funcgrad import lax
        >>> lax.associative_scan(fnp.add, fnp.arange(5.0)).tolist()
        [0.0, 1.0, 3.0, 6.0, 10.0]
    """
    from funcgrad import numpy as fnp
    leaves, tree = tree_flatten(elems)
    leaves = [_as_value(x) for x in leaves]
    if not leaves:
        return elems
    nd = leaves[0].ndim
    if not all(x.ndim == nd for x in leaves) or not -nd <= axis < max(nd, 1):
        raise ValueError(f"associative_scan: axis {axis} is out of range for elems of shapes "
                         f"{[x.shape for x in leaves]}\n  at {user_frame_src()}")
    ax = axis % nd
    sizes = {x.shape[ax] for x in leaves}
    if len(sizes) != 1:
        raise ValueError(f"associative_scan: every leaf needs the same length along axis "
                         f"{axis}, got {[x.shape for x in leaves]}\n  at {user_frame_src()}")
    if reverse:
        leaves = [fnp.flip(x, ax) for x in leaves]

    def combine(a, b):
        out = fn(tree_unflatten(tree, a), tree_unflatten(tree, b))
        ol, ot = tree_flatten(out)
        if ot != tree:
            raise TypeError(f"associative_scan: fn must return the structure of elems "
                            f"{tree}, got {ot}\n  at {user_frame_src()}")
        return [_as_value(o) for o in ol]

    def scan(xs):
        n = xs[0].shape[ax]
        if n < 2:
            return xs
        odd = scan(combine([_slice(x, 0, n - 1, 2, ax) for x in xs],
                           [_slice(x, 1, n, 2, ax) for x in xs]))   # prefixes at 1, 3, 5, ...
        m = odd[0].shape[ax]
        rest = [_slice(x, 2, n, 2, ax) for x in xs]                 # elements 2, 4, ...
        if n % 2 == 0:
            even = combine([_slice(o, 0, m - 1, 1, ax) for o in odd], rest)
        else:
            even = combine(odd, rest)
        even = [fnp.concatenate([_slice(x, 0, 1, 1, ax), e], ax) for x, e in zip(xs, even)]
        return [_interleave(e, o, ax) for e, o in zip(even, odd)]

    out = scan(leaves)
    if reverse:
        out = [fnp.flip(x, ax) for x in out]
    return tree_unflatten(tree, out)
