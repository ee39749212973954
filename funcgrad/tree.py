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


leaves_with_path = _tu.tree_leaves_with_path
transpose = _tu.tree_transpose
broadcast = _tu.tree_broadcast
reduce_associative = _tu.tree_reduce_associative


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
