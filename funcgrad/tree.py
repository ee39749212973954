"""funcgrad.tree: JAX's `jax.tree` short names over funcgrad.tree_util.

Example:
    >>> import funcgrad
    >>> funcgrad.tree.map(lambda v: v * 2, {"a": 1, "b": (2, 3)})
    {'a': 2, 'b': (4, 6)}
"""
from __future__ import annotations

import dataclasses

from funcgrad import tree_util as _tu

map = _tu.tree_map  # noqa: A001 - JAX's name
leaves = _tu.tree_leaves
structure = _tu.tree_structure
flatten = _tu.tree_flatten
unflatten = _tu.tree_unflatten
reduce = _tu.tree_reduce
all = _tu.tree_all  # noqa: A001
flatten_with_path = _tu.tree_flatten_with_path
map_with_path = _tu.tree_map_with_path


def leaves_with_path(tree, is_leaf=None):
    """[(key path, leaf)] in flattening order."""
    return flatten_with_path(tree, is_leaf)[0]


def transpose(outer_treedef, inner_treedef, pytree_to_transpose):
    """Turn a tree of trees (outer of inner) into a tree of trees (inner of outer)."""
    flat = leaves(pytree_to_transpose)
    n_in = inner_treedef.num_leaves
    n_out = len(flat) // max(n_in, 1)
    groups = [flat[i * n_in:(i + 1) * n_in] for i in range(n_out)]
    cols = [unflatten(outer_treedef, [g[j] for g in groups]) for j in range(n_in)]
    return unflatten(inner_treedef, cols)


def broadcast(prefix_tree, full_tree, is_leaf=None):
    """Broadcast a tree prefix into the full structure of `full_tree` (jax.tree.broadcast):
    each leaf of the prefix is repeated over the subtree of `full_tree` it stands for.

    Example:
        >>> import funcgrad
        >>> funcgrad.tree.broadcast([1, 2], [(0, 0), {"a": 0}])
        [(1, 1), {'a': 2}]
    """
    return map(lambda x, sub: map(lambda _: x, sub), prefix_tree, full_tree, is_leaf=is_leaf)


_NO_IDENTITY = object()


def reduce_associative(operation, tree, *, identity=_NO_IDENTITY, is_leaf=None):
    """Combine the leaves with an associative `operation` as a balanced tree of calls
    (jax.tree.reduce_associative); `identity` is returned for a tree with no leaves.

    Example:
        >>> import funcgrad
        >>> funcgrad.tree.reduce_associative(lambda a, b: a + b, {"x": 1, "y": [2, 3]})
        6
    """
    xs = leaves(tree, is_leaf=is_leaf)
    if not xs:
        if identity is _NO_IDENTITY:
            raise TypeError("reduce_associative of an empty tree needs an identity")
        return identity
    while len(xs) > 1:
        pairs = [operation(xs[i], xs[i + 1]) for i in range(0, len(xs) - 1, 2)]
        xs = pairs + ([xs[-1]] if len(xs) % 2 else [])
    return xs[0]


def static(**kwargs):
    """A dataclasses.field marked static (jax.tree.static): with register_dataclass, the field
    is part of the tree structure rather than a leaf. Takes dataclasses.field's arguments.

    Example:
        >>> import dataclasses, funcgrad
        >>> @funcgrad.tree_util.register_dataclass
        ... @dataclasses.dataclass
        ... class Op:
        ...     x: float
        ...     kind: str = funcgrad.tree.static(default="add")
        >>> funcgrad.tree.leaves(Op(1.0))
        [1.0]
    """
    metadata = {"static": True, **(kwargs.pop("metadata", None) or {})}
    return dataclasses.field(metadata=metadata, **kwargs)
