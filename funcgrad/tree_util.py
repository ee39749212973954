"""Pytrees (nested containers of arrays) with JAX's semantics, on top of optree's C++ core."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar

import optree
from optree import PyTreeKind

__all__ = [
    "DictKey",
    "FlattenedIndexKey",
    "GetAttrKey",
    "PyTreeDef",
    "SequenceKey",
    "keystr",
    "register_dataclass",
    "register_pytree_node",
    "register_pytree_node_class",
    "tree_all",
    "tree_flatten",
    "tree_flatten_with_path",
    "tree_leaves",
    "tree_map",
    "tree_map_with_path",
    "tree_reduce",
    "tree_structure",
    "tree_unflatten",
]

# funcgrad's own optree namespace: our registrations neither leak into optree's global registry
# nor pick up registrations other libraries make in their namespaces.
_NS = "funcgrad"

PyTreeDef = optree.PyTreeSpec
"""The structure of a pytree: hashable and comparable, so it can key a cache."""

T = TypeVar("T")
Leaf = Any
PyTree = Any
IsLeaf = Callable[[Any], bool] | None

_DICT_KINDS = (PyTreeKind.DICT, PyTreeKind.ORDEREDDICT, PyTreeKind.DEFAULTDICT)
_NAMED_KINDS = (PyTreeKind.NAMEDTUPLE, PyTreeKind.STRUCTSEQUENCE)
_DATACLASS_TYPES: set[type] = set()  # custom nodes whose entries are attribute names
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
# Registering new node types


def register_pytree_node(
    nodetype: type[T],
    flatten_func: Callable[[T], tuple[Iterable[Any], Hashable]],
    unflatten_func: Callable[[Hashable, Iterable[Any]], T],
) -> None:
    """Registers a container type as a pytree node (in funcgrad's own registry).

    Args:
        nodetype: the class.
        flatten_func: ``obj -> (children, aux_data)``; the children are pytrees, and the
            ``aux_data`` is hashable and comparable static data that is part of the structure.
        unflatten_func: ``(aux_data, children) -> obj``.

    Raises:
        ValueError: ``nodetype`` is already registered.

    Example:
        >>> class Pair:
        ...     def __init__(self, left, right, name):
        ...         self.left, self.right, self.name = left, right, name
        >>> register_pytree_node(
        ...     Pair,
        ...     lambda p: ((p.left, p.right), p.name),
        ...     lambda name, children: Pair(*children, name),
        ... )
        >>> tree_leaves([Pair(1, (2, 3), "p")])
        [1, 2, 3]
    """
    optree.register_pytree_node(nodetype, flatten_func, unflatten_func, namespace=_NS)


def register_pytree_node_class(cls: type[T]) -> type[T]:
    """Class decorator: registers a class with ``tree_flatten`` and ``tree_unflatten`` methods.

    ``obj.tree_flatten()`` returns ``(children, aux_data)`` and the classmethod
    ``cls.tree_unflatten(aux_data, children)`` rebuilds an instance.

    Example:
        >>> @register_pytree_node_class
        ... class Scaled:
        ...     def __init__(self, value, scale):
        ...         self.value, self.scale = value, scale
        ...     def tree_flatten(self):
        ...         return (self.value,), self.scale
        ...     @classmethod
        ...     def tree_unflatten(cls, scale, children):
        ...         return cls(children[0], scale)
        >>> tree_map(lambda v: v + 1, Scaled(1.0, 3)).value
        2.0
    """
    register_pytree_node(cls, cls.tree_flatten, cls.tree_unflatten)
    return cls


def register_dataclass(
    nodetype: type[T],
    data_fields: Sequence[str] | None = None,
    meta_fields: Sequence[str] | None = None,
    drop_fields: Sequence[str] = (),
) -> type[T]:
    """Registers a dataclass (or any class with such attributes) as a pytree node.

    Data fields are children (arrays, subtrees); meta fields are static, hashable data that is
    part of the structure, so two values differing in a meta field have different structures.
    Called without field lists on a dataclass (also as a bare decorator), every ``init`` field is
    a data field unless declared ``field(metadata=dict(static=True))``.

    Args:
        nodetype: the class; rebuilt as ``nodetype(**data, **meta)``.
        data_fields: names of the fields that are children.
        meta_fields: names of the fields that are static data.
        drop_fields: dataclass ``init`` fields that are neither (their defaults are used).

    Returns:
        ``nodetype``, so that this works as a class decorator.

    Raises:
        TypeError: only one of the field lists is given, or neither is and ``nodetype`` is
            not a dataclass.
        ValueError: the field lists do not cover a dataclass's ``init`` fields exactly.

    Example:
        >>> from dataclasses import dataclass, field
        >>> @register_dataclass
        ... @dataclass
        ... class Linear:
        ...     w: object
        ...     b: object
        ...     act: str = field(default="relu", metadata=dict(static=True))
        >>> tree_leaves(Linear(w=1.0, b=2.0))
        [1.0, 2.0]
        >>> tree_map(lambda x: x * 2, Linear(1.0, 2.0, "tanh"))
        Linear(w=2.0, b=4.0, act='tanh')
    """
    if (data_fields is None) != (meta_fields is None):
        raise TypeError("register_dataclass: give both data_fields and meta_fields, or neither")
    is_dc = dataclasses.is_dataclass(nodetype)
    if data_fields is None:
        if not is_dc:
            raise TypeError(
                f"register_dataclass: {nodetype.__name__} is not a dataclass; "
                "pass data_fields and meta_fields"
            )
        init = [f for f in dataclasses.fields(nodetype) if f.init and f.name not in drop_fields]
        data_fields = [f.name for f in init if not f.metadata.get("static", False)]
        meta_fields = [f.name for f in init if f.metadata.get("static", False)]
    data_fields, meta_fields = tuple(data_fields), tuple(meta_fields)
    if is_dc:
        init_names = {f.name for f in dataclasses.fields(nodetype) if f.init} - set(drop_fields)
        given = {*data_fields, *meta_fields}
        if given != init_names:
            raise ValueError(
                f"register_dataclass: data_fields and meta_fields of {nodetype.__name__} must "
                f"name its init fields exactly; missing {sorted(init_names - given)}, "
                f"unexpected {sorted(given - init_names)}"
            )

    def flatten(obj: T) -> tuple[tuple[Any, ...], tuple[Any, ...], tuple[str, ...]]:
        children = tuple(getattr(obj, name) for name in data_fields)
        return children, tuple(getattr(obj, name) for name in meta_fields), data_fields

    def unflatten(meta: tuple[Any, ...], children: Iterable[Any]) -> T:
        return nodetype(**dict(zip(meta_fields, meta)), **dict(zip(data_fields, children)))

    optree.register_pytree_node(nodetype, flatten, unflatten, namespace=_NS)
    _DATACLASS_TYPES.add(nodetype)
    return nodetype
