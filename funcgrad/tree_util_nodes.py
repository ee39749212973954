"""Registering pytree node types (re-exported by funcgrad.tree_util): register_pytree_node,
register_dataclass, the registrations with key paths, register_static, and Partial."""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar

import optree

NS = "funcgrad"   # funcgrad's own optree namespace (tree_util's too)
KEYED_TYPES: set[type] = set()   # custom nodes whose optree entries are JAX key objects
DATACLASS_TYPES: set[type] = set()   # custom nodes whose entries are attribute names

T = TypeVar("T")


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
        >>> from funcgrad.tree_util import tree_leaves
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
    optree.register_pytree_node(nodetype, flatten_func, unflatten_func, namespace=NS)


def register_pytree_node_class(cls: type[T]) -> type[T]:
    """Class decorator: registers a class with ``tree_flatten`` and ``tree_unflatten`` methods.

    ``obj.tree_flatten()`` returns ``(children, aux_data)`` and the classmethod
    ``cls.tree_unflatten(aux_data, children)`` rebuilds an instance.

    Example:
        >>> from funcgrad.tree_util import tree_map
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
        >>> from funcgrad.tree_util import tree_leaves, tree_map
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

    optree.register_pytree_node(nodetype, flatten, unflatten, namespace=NS)
    DATACLASS_TYPES.add(nodetype)
    return nodetype



def register_pytree_with_keys(nodetype: type[T], flatten_with_keys: Callable,
                              unflatten_func: Callable,
                              flatten_func: Callable | None = None) -> None:
    """Registers a pytree node whose children come with key path entries (JAX's).

    Args:
        nodetype: the class.
        flatten_with_keys: ``obj -> (((key, child), ...), aux_data)``, the keys being
            ``DictKey`` / ``SequenceKey`` / ``GetAttrKey`` / ``FlattenedIndexKey`` entries that
            :func:`~funcgrad.tree_util.tree_flatten_with_path` reports.
        unflatten_func: ``(aux_data, children) -> obj``.
        flatten_func: optional ``obj -> (children, aux_data)``, accepted as in JAX (the keyed
            flatten is used either way).

    Example:
        >>> from funcgrad import tree_util as tu
        >>> class Pair:
        ...     def __init__(self, a, b):
        ...         self.a, self.b = a, b
        >>> tu.register_pytree_with_keys(
        ...     Pair, lambda p: (((tu.GetAttrKey("a"), p.a), (tu.GetAttrKey("b"), p.b)), None),
        ...     lambda _, children: Pair(*children))
        >>> [tu.keystr(path) for path, _ in tu.tree_flatten_with_path(Pair(1, [2]))[0]]
        ['.a', '.b[0]']
    """
    del flatten_func

    def flatten(obj):
        keyed, aux = flatten_with_keys(obj)
        keyed = list(keyed)
        return [c for _, c in keyed], aux, tuple(k for k, _ in keyed)

    optree.register_pytree_node(nodetype, flatten, unflatten_func, namespace=NS)
    KEYED_TYPES.add(nodetype)


def register_pytree_with_keys_class(cls: type[T]) -> type[T]:
    """Class decorator: registers a class with ``tree_flatten_with_keys`` and the classmethod
    ``tree_unflatten`` (JAX's).

    Example:
        >>> from funcgrad import tree_util as tu
        >>> @tu.register_pytree_with_keys_class
        ... class Box:
        ...     def __init__(self, v):
        ...         self.v = v
        ...     def tree_flatten_with_keys(self):
        ...         return ((tu.GetAttrKey("v"), self.v),), None
        ...     @classmethod
        ...     def tree_unflatten(cls, aux, children):
        ...         return cls(*children)
        >>> tu.tree_map(lambda x: x + 1, Box(1)).v
        2
    """
    register_pytree_with_keys(cls, cls.tree_flatten_with_keys, cls.tree_unflatten)
    return cls


def register_static(cls: type[T]) -> type[T]:
    """Registers a class whose instances are part of the structure, with no leaves (JAX's);
    its instances must be hashable and comparable. Works as a class decorator.

    Example:
        >>> from funcgrad import tree_util as tu
        >>> @tu.register_static
        ... class Mode:
        ...     def __init__(self, name):
        ...         self.name = name
        ...     def __hash__(self):
        ...         return hash(self.name)
        ...     def __eq__(self, other):
        ...         return isinstance(other, Mode) and other.name == self.name
        >>> tu.tree_leaves([Mode("train"), 2.0])
        [2.0]
    """
    optree.register_pytree_node(cls, lambda obj: ((), obj), lambda obj, _: obj, namespace=NS)
    return cls


class Partial(functools.partial):
    """functools.partial as a pytree (JAX's tree_util.Partial): the function is part of the
    structure, the bound arguments are leaves, so a Partial can be passed to jit'd functions.

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp
        >>> from funcgrad import tree_util as tu
        >>> add = tu.Partial(fnp.add, 1.0)
        >>> tu.tree_leaves(add)
        [1.0]
        >>> float(funcgrad.jit(lambda f, x: f(x))(add, 2.0))
        3.0
    """

    def __new__(cls, func, *args, **kw):
        # a Partial of a Partial stays one Partial whose func is the innermost function, so
        # that the structure (its func) compares equal across calls, as in JAX
        if isinstance(func, functools.partial):
            base = func
            func = base.func
            args = base.args + args
            kw = {**base.keywords, **kw}
        return super().__new__(cls, func, *args, **kw)


def _partial_flatten(p: Partial) -> tuple[Iterable[Any], Any]:
    return (p.args, p.keywords), p.func


optree.register_pytree_node(Partial, _partial_flatten,
                            lambda func, children: Partial(func, *children[0], **children[1]),
                            namespace=NS)
