"""funcgrad.optim.tree_utils: optax's pytree arithmetic (tree_add, tree_vdot, tree_norm, ...),
moment helpers and random trees, leaf by leaf in funcgrad.numpy."""
from __future__ import annotations

from funcgrad import numpy as fnp
from funcgrad import random
from funcgrad.tree_util import tree_flatten, tree_leaves, tree_map, tree_unflatten
from funcgrad.optim.base import tree_cast
from funcgrad.optim.numerics import bias_correction as tree_bias_correction
from funcgrad.optim.numerics import tree_map_params
from funcgrad.optim.numerics import update_infinity_moment as tree_update_infinity_moment
from funcgrad.optim.numerics import update_moment as tree_update_moment
from funcgrad.optim.numerics import update_moment_per_elem_norm as tree_update_moment_per_elem_norm


def tree_add(tree_x, tree_y, *other_trees):
    """Leafwise ``x + y (+ ...)``.

    Example:
        >>> tree_add({"a": 1.0}, {"a": 2.0}, {"a": 3.0})
        {'a': 6.0}
    """
    return tree_map(lambda *xs: sum(xs[1:], xs[0]), tree_x, tree_y, *other_trees)


def tree_sub(tree_x, tree_y):
    """Leafwise ``x - y``.

    Example:
        >>> tree_sub({"a": 3.0}, {"a": 1.0})
        {'a': 2.0}
    """
    return tree_map(lambda x, y: x - y, tree_x, tree_y)


def tree_mul(tree_x, tree_y):
    """Leafwise ``x * y``.

    Example:
        >>> tree_mul({"a": 3.0}, {"a": 2.0})
        {'a': 6.0}
    """
    return tree_map(lambda x, y: x * y, tree_x, tree_y)


def tree_div(tree_x, tree_y):
    """Leafwise ``x / y``.

    Example:
        >>> tree_div({"a": 3.0}, {"a": 2.0})
        {'a': 1.5}
    """
    return tree_map(lambda x, y: x / y, tree_x, tree_y)


def tree_scale(scalar, tree):
    """Every leaf times ``scalar``.

    Example:
        >>> tree_scale(2.0, {"a": 3.0})
        {'a': 6.0}
    """
    return tree_map(lambda x: scalar * x, tree)


def tree_add_scale(tree_x, scalar, tree_y):
    """Leafwise ``x + scalar * y``.

    Example:
        >>> tree_add_scale({"a": 1.0}, 2.0, {"a": 3.0})
        {'a': 7.0}
    """
    return tree_map(lambda x, y: x + scalar * y, tree_x, tree_y)


def tree_vdot(tree_x, tree_y):
    """The inner product of two trees: ``sum over leaves of sum(x * y)``.

    Example:
        >>> float(tree_vdot({"a": fnp.asarray([1.0, 2.0])}, {"a": fnp.asarray([3.0, 4.0])}))
        11.0
    """
    return sum(fnp.sum(fnp.asarray(x) * y) for x, y in
               zip(tree_leaves(tree_x), tree_leaves(tree_y)))


def tree_sum(tree):
    """The sum of all elements of all leaves.

    Example:
        >>> float(tree_sum({"a": fnp.ones(2), "b": fnp.ones(3)}))
        5.0
    """
    return sum(fnp.sum(fnp.asarray(x)) for x in tree_leaves(tree))


def tree_max(tree):
    """The largest element over all leaves.

    Example:
        >>> float(tree_max({"a": fnp.asarray([1.0, 5.0]), "b": fnp.asarray([3.0])}))
        5.0
    """
    return fnp.max(fnp.stack([fnp.max(fnp.asarray(x)) for x in tree_leaves(tree)]))


def tree_min(tree):
    """The smallest element over all leaves.

    Example:
        >>> float(tree_min({"a": fnp.asarray([1.0, 5.0]), "b": fnp.asarray([3.0])}))
        1.0
    """
    return fnp.min(fnp.stack([fnp.min(fnp.asarray(x)) for x in tree_leaves(tree)]))


def tree_size(tree) -> int:
    """The number of elements over all leaves.

    Example:
        >>> tree_size({"a": fnp.ones((2, 3)), "b": fnp.ones(4)})
        10
    """
    return sum(int(fnp.size(x)) for x in tree_leaves(tree))


def tree_norm(tree, ord=None, squared: bool = False):  # noqa: A002
    """The norm of all elements together: 2-norm (default), ``ord=1`` or ``ord='inf'``.

    Example:
        >>> float(tree_norm({"a": fnp.asarray([3.0]), "b": fnp.asarray([4.0])}))
        5.0
    """
    leaves = [fnp.asarray(x) for x in tree_leaves(tree)]
    if ord in (None, 2, "fro"):
        sq = sum(fnp.sum(x * x) for x in leaves)
        return sq if squared else fnp.sqrt(sq)
    if ord == 1:
        out = sum(fnp.sum(fnp.abs(x)) for x in leaves)
    elif ord in ("inf", float("inf")):
        out = fnp.max(fnp.stack([fnp.max(fnp.abs(x)) for x in leaves]))
    else:
        raise ValueError(f"tree_norm: unsupported ord {ord!r}; use None/2, 1 or 'inf'")
    return out * out if squared else out


def tree_zeros_like(tree, dtype=None):
    """Zeros shaped like each leaf.

    Example:
        >>> tree_zeros_like({"a": fnp.ones(2)})["a"].tolist()
        [0.0, 0.0]
    """
    return tree_map(lambda x: fnp.zeros_like(x, dtype=dtype), tree)


def tree_ones_like(tree, dtype=None):
    """Ones shaped like each leaf.

    Example:
        >>> tree_ones_like({"a": fnp.zeros(2)})["a"].tolist()
        [1.0, 1.0]
    """
    return tree_map(lambda x: fnp.ones_like(x, dtype=dtype), tree)


def tree_full_like(tree, fill_value, dtype=None):
    """``fill_value`` shaped like each leaf.

    Example:
        >>> tree_full_like({"a": fnp.zeros(2)}, 3.0)["a"].tolist()
        [3.0, 3.0]
    """
    return tree_map(lambda x: fnp.full_like(x, fill_value, dtype=dtype), tree)


def tree_clip(tree, min_value=None, max_value=None):
    """Every leaf clipped into ``[min_value, max_value]``.

    Example:
        >>> tree_clip({"a": fnp.asarray([-2.0, 2.0])}, -1.0, 1.0)["a"].tolist()
        [-1.0, 1.0]
    """
    return tree_map(lambda x: fnp.clip(x, min_value, max_value), tree)


def tree_where(condition, tree_x, tree_y):
    """Leafwise ``where(condition, x, y)``.

    Example:
        >>> tree_where(fnp.asarray(True), {"a": 1.0}, {"a": 2.0})["a"].tolist()
        1.0
    """
    return tree_map(lambda x, y: fnp.where(condition, x, y), tree_x, tree_y)


def tree_split_key_like(rng_key, target_tree):
    """One PRNG key per leaf of ``target_tree`` (``split(key, num_leaves)``).

    Example:
        >>> len(tree_split_key_like(random.PRNGKey(0), {"a": 1.0, "b": 2.0}))
        2
    """
    leaves, treedef = tree_flatten(target_tree)
    keys = random.split(rng_key, len(leaves))
    return tree_unflatten(treedef, [keys[i] for i in range(len(leaves))])


def tree_random_like(rng_key, target_tree, sampler=random.normal, dtype=None):
    """A random tree shaped like ``target_tree``: ``sampler(key_i, shape, dtype)`` per leaf.

    Example:
        >>> tree_random_like(random.PRNGKey(0), {"a": fnp.zeros(3)})["a"].shape
        (3,)
    """
    leaves, treedef = tree_flatten(target_tree)
    keys = random.split(rng_key, len(leaves)) if leaves else []
    return tree_unflatten(treedef, [sampler(k, fnp.shape(x), dtype or fnp.asarray(x).dtype)
                                    for x, k in zip(leaves, keys)])


def tree_get(tree, key, default=None):
    """The unique NamedTuple field or dict entry named ``key`` anywhere in ``tree``.

    Example:
        >>> from funcgrad import optim
        >>> int(tree_get(optim.adam(0.1).init(fnp.zeros(1)), "count"))
        0
    """
    found = []

    def walk(node):
        if isinstance(node, tuple) and hasattr(node, "_fields"):
            if key in node._fields:
                found.append(getattr(node, key))
            for child in node:
                walk(child)
        elif isinstance(node, dict):
            if key in node:
                found.append(node[key])
            for child in node.values():
                walk(child)
        elif isinstance(node, (tuple, list)):
            for child in node:
                walk(child)
    walk(tree)
    if len(found) > 1:
        raise KeyError(f"tree_get: found {len(found)} entries named {key!r}; expected one")
    return found[0] if found else default


__all__ = ["tree_add", "tree_add_scale", "tree_bias_correction", "tree_cast", "tree_clip",
           "tree_div", "tree_full_like", "tree_get", "tree_map_params", "tree_max", "tree_min",
           "tree_mul", "tree_norm", "tree_ones_like", "tree_random_like", "tree_scale",
           "tree_size", "tree_split_key_like", "tree_sub", "tree_sum",
           "tree_update_infinity_moment", "tree_update_moment",
           "tree_update_moment_per_elem_norm", "tree_vdot", "tree_where", "tree_zeros_like"]
