"""JAX's jax.custom_batching: custom_vmap (a user-defined vmap rule) and sequential_vmap."""
from __future__ import annotations

from collections.abc import Callable

from funcgrad import lax
from funcgrad.transforms.custom_batching import custom_vmap
from funcgrad.tree_util import tree_flatten, tree_unflatten

__all__ = ["custom_vmap", "sequential_vmap"]


def sequential_vmap(f: Callable) -> custom_vmap:
    """f as a custom_vmap whose rule maps f over the batch one element at a time (lax.map),
    as JAX's sequential_vmap: for functions without a batching rule of their own (host
    callbacks, loops that do not vectorize), or to bound the memory a batch needs.

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp
        >>> from funcgrad.custom_batching import sequential_vmap
        >>> g = sequential_vmap(lambda x, y: fnp.sum(x) * y)
        >>> funcgrad.vmap(g, in_axes=(0, None))(fnp.ones((3, 2)), 2.0).tolist()
        [4.0, 4.0, 4.0]
    """
    g = custom_vmap(f)

    @g.def_vmap
    def rule(axis_size, in_batched, *args):
        leaves, tree = tree_flatten(args)
        flags = tree_flatten(in_batched)[0]

        def one(rows):
            it = iter(rows)
            return f(*tree_unflatten(tree, [next(it) if b else x
                                           for x, b in zip(leaves, flags)]))
        out = lax.map(one, [x for x, b in zip(leaves, flags) if b])
        return out, tree_unflatten(tree_flatten(out)[1], [True] * len(tree_flatten(out)[0]))

    return g
