"""Pytrees (nested containers of arrays) with JAX's semantics, on top of optree's C++ core."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar

import optree
from optree import PyTreeKind

from funcgrad.tree_util_nodes import (
    DATACLASS_TYPES as _DATACLASS_TYPES,
)
from funcgrad.tree_util_nodes import (
    KEYED_TYPES,
    NS,
    Partial,
    register_dataclass,
    register_pytree_node,
    register_pytree_node_class,
    register_pytree_with_keys,
    register_pytree_with_keys_class,
    register_static,
)

__all__ = [
    "DictKey",
    "FlattenedIndexKey",
    "GetAttrKey",
    "Partial",
    "PyTreeDef",
    "SequenceKey",
    "all_leaves",
    "flatten_one_level",
    "flatten_one_level_with_keys",
    "is_tree_node",
    "keystr",
    "register_dataclass",
    "register_pytree_node",
    "register_pytree_node_class",
    "register_pytree_with_keys",
    "register_pytree_with_keys_class",
    "register_static",
    "tree_all",
    "tree_broadcast",
    "tree_flatten",
    "tree_flatten_with_path",
    "tree_leaves",
    "tree_leaves_with_path",
    "tree_map",
    "tree_map_with_path",
    "tree_reduce",
    "tree_reduce_associative",
    "tree_structure",
    "tree_transpose",
    "tree_unflatten",
    "treedef_children",
    "treedef_is_leaf",
    "treedef_tuple",
]

# funcgrad's own optree namespace: our registrations neither leak into optree's global registry
# nor pick up registrations other libraries make in their namespaces.
_NS = NS

PyTreeDef = optree.PyTreeSpec
"""The structure of a pytree: hashable and comparable, so it can key a cache."""

T = TypeVar("T")
Leaf = Any
PyTree = Any
IsLeaf = Callable[[Any], bool] | None

_DICT_KINDS = (PyTreeKind.DICT, PyTreeKind.ORDEREDDICT, PyTreeKind.DEFAULTDICT)
_NAMED_KINDS = (PyTreeKind.NAMEDTUPLE, PyTreeKind.STRUCTSEQUENCE)
_NO_INIT = object()  # tree_reduce's "no initializer given"


# ---------------------------------------------------------------------------------------------
# Dicts rebuild in sorted key order, as JAX's do

# optree keeps a dict's insertion order in its PyTreeSpec and rebuilds dicts in that order; JAX
# rebuilds them in sorted key order (the order of their leaves). Specs that differ only in that
# order are equal and hash alike, so this cache maps every such spec to its sorted-order twin.
_SORTED: dict[PyTreeDef, PyTreeDef] = {}
_SORTED_MAX = 4096


def _sorted_node(node: PyTreeDef) -> PyTreeDef:
    """One node of a structure, a dict or defaultdict rebuilt with its keys in sorted order."""
    kind = node.kind
    if kind != PyTreeKind.DICT and kind != PyTreeKind.DEFAULTDICT:
        return node
    leaf = optree.treespec_leaf(namespace=_NS)
    children = dict.fromkeys(node.entries(), leaf)   # entries(): the sorted keys
    if kind == PyTreeKind.DICT:
        return optree.treespec_dict(children, namespace=_NS)
    factory = node.unflatten([None] * node.num_children).default_factory
    return optree.treespec_defaultdict(factory, children, namespace=_NS)


def _sorted_dicts(treedef: PyTreeDef) -> PyTreeDef:
    """``treedef``, whose unflatten rebuilds dicts (not OrderedDicts) in sorted key order."""
    try:
        return _SORTED[treedef]
    except KeyError:
        pass
    except TypeError:   # an unhashable static field of a custom node: no cache
        return treedef.transform(_sorted_node)
    if len(_SORTED) >= _SORTED_MAX:
        _SORTED.clear()
    out = _SORTED[treedef] = treedef.transform(_sorted_node)
    return out


# ---------------------------------------------------------------------------------------------
# Flatten / unflatten / map


def tree_flatten(tree: PyTree, is_leaf: IsLeaf = None) -> tuple[list[Leaf], PyTreeDef]:
    """Flattens a pytree into its leaves and its structure.

    Containers are tuples, lists, dicts and defaultdicts (in sorted key order: the structure
    rebuilds them in that order, as JAX's does), OrderedDicts (in insertion order), NamedTuples, ``None`` (a node with no children) and the types registered
    with :func:`register_pytree_node` or :func:`register_dataclass`. Anything else is a leaf.

    Args:
        tree: the pytree to flatten.
        is_leaf: optional predicate; a subtree for which it returns True is kept whole as a leaf.

    Returns:
        ``(leaves, treedef)``: the leaves left to right, and the structure that
        :func:`tree_unflatten` needs to rebuild the tree.

    Example:
        >>> leaves, treedef = tree_flatten({"b": (2, None), "a": 1})
        >>> leaves
        [1, 2]
        >>> treedef
        PyTreeSpec({'a': *, 'b': (*, None)})
        >>> tree_unflatten(treedef, [3, 4])
        {'a': 3, 'b': (4, None)}
    """
    leaves, treedef = optree.tree_flatten(tree, is_leaf, namespace=_NS)
    return leaves, _sorted_dicts(treedef)


def tree_unflatten(treedef: PyTreeDef, leaves: Iterable[Leaf]) -> PyTree:
    """Rebuilds a pytree from a structure and leaves (the inverse of :func:`tree_flatten`).

    Args:
        treedef: the structure, from :func:`tree_flatten` or :func:`tree_structure`.
        leaves: as many leaves as ``treedef.num_leaves``, left to right.

    Returns:
        The pytree.

    Example:
        >>> leaves, treedef = tree_flatten({"a": 1, "b": [2, 3]})
        >>> tree_unflatten(treedef, [x * 10 for x in leaves])
        {'a': 10, 'b': [20, 30]}
    """
    return treedef.unflatten(leaves)


def tree_leaves(tree: PyTree, is_leaf: IsLeaf = None) -> list[Leaf]:
    """Returns the leaves of a pytree, left to right.

    Example:
        >>> tree_leaves({"b": [3, None], "a": (1, 2)})
        [1, 2, 3]
    """
    return optree.tree_leaves(tree, is_leaf, namespace=_NS)


def tree_structure(tree: PyTree, is_leaf: IsLeaf = None) -> PyTreeDef:
    """Returns the structure of a pytree, without its leaves.

    Example:
        >>> tree_structure({"w": 1.0, "b": [2.0]})
        PyTreeSpec({'b': [*], 'w': *})
        >>> tree_structure([1, 2]) == tree_structure([3, 4])
        True
    """
    return _sorted_dicts(optree.tree_structure(tree, is_leaf, namespace=_NS))


def tree_map(f: Callable[..., Any], tree: PyTree, *rest: PyTree, is_leaf: IsLeaf = None) -> PyTree:
    """Applies ``f`` to the leaves of one or more pytrees and builds a tree of the results.

    ``tree`` fixes the structure; each tree in ``rest`` must have that structure or have it as a
    prefix (a leaf of ``tree`` may stand for a whole subtree of the others, passed to ``f``
    whole).

    Args:
        f: a function of ``1 + len(rest)`` arguments.
        tree: the pytree whose structure the result has.
        *rest: further pytrees, whose leaves are passed to ``f`` alongside those of ``tree``.
        is_leaf: optional predicate marking subtrees of ``tree`` to treat as leaves.

    Returns:
        A pytree with the structure of ``tree`` and ``f(leaf, *rest_leaves)`` at each leaf.

    Raises:
        ValueError: a tree in ``rest`` differs in structure; the message names the first path
            where it does, e.g. ``tree_map: structures differ at ['b'][1]: list of 2 vs list
            of 3``.

    Dicts in the result have their keys in sorted order, as in JAX.

    Example:
        >>> tree_map(lambda x, y: x + y, {"a": 1, "b": [2, 3]}, {"a": 10, "b": [20, 30]})
        {'a': 11, 'b': [22, 33]}
        >>> tree_map(lambda x: x, {"b": 1, "a": 2})
        {'a': 2, 'b': 1}
        >>> tree_map(lambda x: x * 2, (1, None, [2]))
        (2, None, [4])
    """
    leaves, treedef = tree_flatten(tree, is_leaf)
    if not rest:
        return treedef.unflatten(map(f, leaves))
    columns = [leaves] + _flatten_rest("tree_map", treedef, tree, rest, is_leaf)
    return treedef.unflatten(map(f, *columns))


def tree_reduce(
    function: Callable[[T, Leaf], T],
    tree: PyTree,
    initializer: Any = _NO_INIT,
    is_leaf: IsLeaf = None,
) -> T:
    """Folds ``function`` over the leaves of a pytree, left to right (like functools.reduce).

    Example:
        >>> tree_reduce(lambda acc, x: acc + x, {"a": 1, "b": [2, 3]})
        6
        >>> tree_reduce(max, [], 0)
        0
    """
    leaves = tree_leaves(tree, is_leaf)
    if initializer is _NO_INIT:
        return functools.reduce(function, leaves)
    return functools.reduce(function, leaves, initializer)


def tree_all(tree: PyTree, is_leaf: IsLeaf = None) -> bool:
    """Returns True when every leaf is truthy (True for a tree with no leaves).

    Example:
        >>> tree_all({"a": True, "b": [1, None]})
        True
        >>> tree_all([True, 0])
        False
    """
    return all(tree_leaves(tree, is_leaf))


# ---------------------------------------------------------------------------------------------
# Key paths


@dataclasses.dataclass(frozen=True)
class DictKey:
    """A path entry into a dict-like node: prints as ``['key']``."""

    key: Hashable

    def __str__(self) -> str:
        return f"[{self.key!r}]"


@dataclasses.dataclass(frozen=True)
class SequenceKey:
    """A path entry into a list or tuple: prints as ``[0]``."""

    idx: int

    def __str__(self) -> str:
        return f"[{self.idx!r}]"


@dataclasses.dataclass(frozen=True)
class GetAttrKey:
    """A path entry into a NamedTuple or dataclass field: prints as ``.name``."""

    name: str

    def __str__(self) -> str:
        return f".{self.name}"


@dataclasses.dataclass(frozen=True)
class FlattenedIndexKey:
    """A path entry into a custom node's flattened children: prints as ``[<flat index 0>]``."""

    key: int

    def __str__(self) -> str:
        return f"[<flat index {self.key}>]"


KeyEntry = DictKey | SequenceKey | GetAttrKey | FlattenedIndexKey
KeyPath = tuple[KeyEntry, ...]


def keystr(path: KeyPath) -> str:
    """Formats a key path as Python-like accessors.

    Example:
        >>> keystr((DictKey("b"), SequenceKey(1), GetAttrKey("w")))
        "['b'][1].w"
    """
    return "".join(str(k) for k in path)


def _entry_keys(node: PyTreeDef) -> list[KeyEntry]:
    """Typed path entries of the children of one node of a structure."""
    kind, entries = node.kind, node.entries()
    if kind in _DICT_KINDS:
        return [DictKey(k) for k in entries]
    if kind in _NAMED_KINDS:
        fields = (optree.namedtuple_fields if kind == PyTreeKind.NAMEDTUPLE
                  else optree.structseq_fields)(node.type)
        return [GetAttrKey(fields[i]) for i in entries]
    if kind == PyTreeKind.CUSTOM:
        if node.type in KEYED_TYPES:
            return list(entries)
        if node.type in _DATACLASS_TYPES:
            return [GetAttrKey(k) for k in entries]
        return [FlattenedIndexKey(i) for i in range(len(entries))]
    return [SequenceKey(i) for i in entries]


def _leaf_paths(treedef: PyTreeDef, prefix: KeyPath, out: list[KeyPath]) -> None:
    if treedef.is_leaf():
        out.append(prefix)
        return
    for key, child in zip(_entry_keys(treedef), treedef.children()):
        _leaf_paths(child, prefix + (key,), out)


def tree_flatten_with_path(
    tree: PyTree, is_leaf: IsLeaf = None
) -> tuple[list[tuple[KeyPath, Leaf]], PyTreeDef]:
    """Like :func:`tree_flatten`, with the key path of each leaf (for messages, not hot paths).

    Example:
        >>> pairs, _ = tree_flatten_with_path({"b": [5, 6], "a": 4})
        >>> [(keystr(path), leaf) for path, leaf in pairs]
        [("['a']", 4), ("['b'][0]", 5), ("['b'][1]", 6)]
    """
    leaves, treedef = tree_flatten(tree, is_leaf)
    paths: list[KeyPath] = []
    _leaf_paths(treedef, (), paths)
    return list(zip(paths, leaves)), treedef


def tree_map_with_path(
    f: Callable[..., Any], tree: PyTree, *rest: PyTree, is_leaf: IsLeaf = None
) -> PyTree:
    """Like :func:`tree_map`, but ``f`` also receives each leaf's key path first.

    Example:
        >>> tree_map_with_path(lambda p, x: f"{keystr(p)}={x}", {"a": 1, "b": (2,)})
        {'a': "['a']=1", 'b': ("['b'][0]=2",)}
    """
    pairs, treedef = tree_flatten_with_path(tree, is_leaf)
    paths = [p for p, _ in pairs]
    columns = [[x for _, x in pairs]]
    columns += _flatten_rest("tree_map_with_path", treedef, tree, rest, is_leaf)
    return treedef.unflatten(map(f, paths, *columns))


# ---------------------------------------------------------------------------------------------
# Structure mismatches: optree says what differs, we add where.


def _flatten_rest(
    caller: str, treedef: PyTreeDef, tree: PyTree, rest: Sequence[PyTree], is_leaf: IsLeaf
) -> list[list[Leaf]]:
    columns = []
    for i, other in enumerate(rest):
        try:
            columns.append(treedef.flatten_up_to(other))
        except ValueError as e:
            which = f" (argument {i + 2})" if len(rest) > 1 else ""
            found = _first_difference(tree, other, is_leaf, ())
            if found is None:  # optree and our walk disagree: keep optree's words
                raise ValueError(f"{caller}: structures differ{which}: {e}") from e
            path, mine, theirs = found
            where = keystr(path) if path else "the root"
            raise ValueError(
                f"{caller}: structures differ at {where}{which}: {mine} vs {theirs}"
            ) from e
    return columns


def _one_level(node: Any) -> tuple[list[Any], PyTreeDef]:
    """The children of a container node, and its one-level structure (children as leaves)."""
    return optree.tree_flatten(node, lambda child: child is not node, namespace=_NS)


def _describe(node: Any, treedef: PyTreeDef) -> str:
    if treedef.is_leaf():
        return f"a leaf of type {type(node).__name__}"
    if node is None:
        return "None"
    name = type(node).__name__
    if treedef.kind in _DICT_KINDS:
        return f"{name} with keys {treedef.entries()}"
    return f"{name} of {treedef.num_children}"


def _first_difference(
    x: PyTree, y: PyTree, is_leaf: IsLeaf, path: KeyPath
) -> tuple[KeyPath, str, str] | None:
    """The first path (left to right) where ``y`` does not have ``x``'s structure as a prefix."""
    if optree.tree_is_leaf(x, is_leaf, namespace=_NS):
        return None  # a leaf of x matches any subtree of y
    x_children, x_node = _one_level(x)
    y_children, y_node = _one_level(y)
    if x_node != y_node:
        mine, theirs = _describe(x, x_node), _describe(y, y_node)
        if mine == theirs:  # same type and arity: the node data (e.g. static fields) differ
            mine, theirs = str(x_node), str(y_node)
        return path, mine, theirs
    for key, x_child, y_child in zip(_entry_keys(x_node), x_children, y_children):
        found = _first_difference(x_child, y_child, is_leaf, path + (key,))
        if found is not None:
            return found
    return None


# ---------------------------------------------------------------------------------------------
# More of JAX's tree_util: one-level views, structure helpers, transpose / broadcast


def tree_leaves_with_path(tree: PyTree, is_leaf: IsLeaf = None) -> list[tuple[KeyPath, Leaf]]:
    """``[(key path, leaf)]`` in flattening order.

    Example:
        >>> [(keystr(p), x) for p, x in tree_leaves_with_path({"a": [1]})]
        [("['a'][0]", 1)]
    """
    return tree_flatten_with_path(tree, is_leaf)[0]


def all_leaves(iterable: Iterable[Any], is_leaf: IsLeaf = None) -> bool:
    """True when every element of ``iterable`` is a leaf.

    Example:
        >>> all_leaves([1, 2.0]), all_leaves([1, [2]])
        (True, False)
    """
    items = list(iterable)
    flat = tree_leaves(items, is_leaf)
    return len(flat) == len(items) and all(a is b for a, b in zip(flat, items))


def flatten_one_level(tree: PyTree) -> tuple[list[Any], Any]:
    """The children of a container node and its node data (a dict's keys, sorted; a custom
    node's aux data); ValueError for a leaf.

    Example:
        >>> flatten_one_level({"b": [1], "a": 2})
        ([2, [1]], ('a', 'b'))
    """
    children, meta, _ = _one_level_raw(tree)
    return children, meta


def flatten_one_level_with_keys(tree: PyTree) -> tuple[list[tuple[KeyEntry, Any]], Any]:
    """Like :func:`flatten_one_level`, each child paired with its key path entry.

    Example:
        >>> flatten_one_level_with_keys([5, 6])
        ([(SequenceKey(idx=0), 5), (SequenceKey(idx=1), 6)], None)
    """
    children, meta, node = _one_level_raw(tree)
    return list(zip(_entry_keys(node), children)), meta


def _one_level_raw(tree):
    try:
        out = optree.tree_flatten_one_level(tree, namespace=_NS)
    except ValueError:
        raise ValueError(f"can't tree-flatten type: {type(tree)}") from None
    meta = tuple(out.metadata) if isinstance(out.metadata, list) else out.metadata
    return list(out.children), meta, _one_level(tree)[1]


def is_tree_node(typ: type) -> bool:
    """True when instances of ``typ`` are pytree nodes (containers), not leaves.

    Example:
        >>> is_tree_node(list), is_tree_node(type(None)), is_tree_node(int)
        (True, True, False)
    """
    return optree.register_pytree_node.get(typ, namespace=_NS) is not None


def treedef_children(treedef: PyTreeDef) -> list[PyTreeDef]:
    """The structures of the root's children.

    Example:
        >>> treedef_children(tree_structure(((1, 2), [3])))
        [PyTreeSpec((*, *)), PyTreeSpec([*])]
    """
    return treedef.children()


def treedef_is_leaf(treedef: PyTreeDef) -> bool:
    """True for the structure of a single leaf.

    Example:
        >>> treedef_is_leaf(tree_structure(1)), treedef_is_leaf(tree_structure([1]))
        (True, False)
    """
    return treedef.is_leaf()


def treedef_tuple(treedefs: Iterable[PyTreeDef]) -> PyTreeDef:
    """The structure of a tuple of trees with these structures.

    Example:
        >>> treedef_tuple([tree_structure(1), tree_structure([1, 2])])
        PyTreeSpec((*, [*, *]))
    """
    return optree.treespec_tuple(list(treedefs), namespace=_NS)


def tree_transpose(outer_treedef: PyTreeDef, inner_treedef: PyTreeDef | None,
                   pytree_to_transpose: PyTree) -> PyTree:
    """Turns a tree of trees (``outer`` of ``inner``) into one of ``inner`` of ``outer``;
    ``inner_treedef`` None takes the structure of the first inner tree.

    Example:
        >>> outer, inner = tree_structure([0, 0]), tree_structure((0, 0))
        >>> tree_transpose(outer, inner, [(1, 2), (3, 4)])
        ([1, 3], [2, 4])
    """
    inners = outer_treedef.flatten_up_to(pytree_to_transpose)
    if inner_treedef is None:
        inner_treedef = tree_structure(inners[0]) if inners else tree_structure(())
    for i, sub in enumerate(inners):
        if tree_structure(sub) != inner_treedef:
            raise TypeError(f"tree_transpose: inner tree {i} has structure "
                            f"{tree_structure(sub)}, expected {inner_treedef}")
    columns = [inner_treedef.flatten_up_to(sub) for sub in inners]
    return inner_treedef.unflatten(
        [outer_treedef.unflatten([col[j] for col in columns])
         for j in range(inner_treedef.num_leaves)])


def tree_broadcast(prefix_tree: PyTree, full_tree: PyTree, is_leaf: IsLeaf = None) -> PyTree:
    """Repeats each leaf of a tree prefix over the subtree of ``full_tree`` it stands for.

    Example:
        >>> tree_broadcast([1, 2], [(0, 0), {"a": 0}])
        [(1, 1), {'a': 2}]
    """
    return tree_map(lambda x, sub: tree_map(lambda _: x, sub), prefix_tree, full_tree,
                    is_leaf=is_leaf)


def tree_reduce_associative(operation: Callable[[T, T], T], tree: PyTree, *,
                            identity: Any = _NO_INIT, is_leaf: IsLeaf = None) -> T:
    """Combines the leaves with an associative ``operation`` as a balanced tree of calls;
    ``identity`` is the result for a tree with no leaves.

    Example:
        >>> tree_reduce_associative(lambda a, b: a + b, {"x": 1, "y": [2, 3]})
        6
    """
    xs = tree_leaves(tree, is_leaf)
    if not xs:
        if identity is _NO_INIT:
            raise TypeError("tree_reduce_associative of a tree with no leaves needs an "
                            "identity")
        return identity
    while len(xs) > 1:
        pairs = [operation(xs[i], xs[i + 1]) for i in range(0, len(xs) - 1, 2)]
        xs = pairs + ([xs[-1]] if len(xs) % 2 else [])
    return xs[0]
