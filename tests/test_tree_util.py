"""Tests for funcgrad.tree_util: JAX's pytree semantics on optree."""

import collections
import dataclasses
import doctest
import typing

import numpy as np
import optree
import pytest
from hypothesis import given
from hypothesis import strategies as st

from funcgrad import tree_util as tu
from funcgrad.tree_util import (
    DictKey,
    FlattenedIndexKey,
    GetAttrKey,
    SequenceKey,
    keystr,
    register_dataclass,
    register_pytree_node,
    register_pytree_node_class,
    tree_all,
    tree_flatten,
    tree_flatten_with_path,
    tree_leaves,
    tree_map,
    tree_map_with_path,
    tree_reduce,
    tree_structure,
    tree_unflatten,
)


class Point(typing.NamedTuple):
    x: typing.Any
    y: typing.Any


class Box:
    """A custom node registered with register_pytree_node: two children plus a label."""

    def __init__(self, a, b, label):
        self.a, self.b, self.label = a, b, label

    def __eq__(self, other):
        return isinstance(other, Box) and (self.a, self.b, self.label) == (
            other.a, other.b, other.label)


register_pytree_node(Box, lambda box: ((box.a, box.b), box.label),
                     lambda label, children: Box(*children, label))


@register_pytree_node_class
class Scaled:
    def __init__(self, value, scale):
        self.value, self.scale = value, scale

    def tree_flatten(self):
        return (self.value,), self.scale

    @classmethod
    def tree_unflatten(cls, scale, children):
        return cls(children[0], scale)


@register_dataclass
@dataclasses.dataclass
class Linear:
    w: typing.Any
    b: typing.Any
    act: str = dataclasses.field(default="relu", metadata={"static": True})


@dataclasses.dataclass(frozen=True)
class Frozen:
    params: typing.Any
    steps: int
    cache: typing.Any = None


register_dataclass(Frozen, data_fields=["params"], meta_fields=["steps"], drop_fields=["cache"])


class Plain:
    """Not a dataclass; registered through explicit field lists."""

    def __init__(self, u, name):
        self.u, self.name = u, name


register_dataclass(Plain, data_fields=["u"], meta_fields=["name"])


# --- flatten / unflatten ------------------------------------------------------------------------


def test_dict_keys_sorted():
    leaves, treedef = tree_flatten({"c": 3, "a": 1, "b": 2})
    assert leaves == [1, 2, 3]
    assert tree_unflatten(treedef, leaves) == {"a": 1, "b": 2, "c": 3}
    assert tree_structure({"b": 0, "a": 0}) == tree_structure({"a": 0, "b": 0})


class _Box:
    """A registered node holding one subtree (a dict below)."""

    def __init__(self, d):
        self.d = d


tu.register_pytree_node(_Box, lambda b: ((b.d,), None), lambda _, children: _Box(*children))


def test_dicts_rebuild_in_sorted_key_order():
    # JAX 0.10.2: tree_map / tree_unflatten / jit / grad / vmap all return dicts whose keys are
    # in sorted order, whatever the input's insertion order (optree alone keeps insertion order)
    import funcgrad
    import funcgrad.numpy as fnp

    def keys(d):
        return list(d)

    assert keys(tree_map(lambda x: x * 10, {"b": 1, "a": 2})) == ["a", "b"]
    assert tree_map(lambda x: x * 10, {"b": 1, "a": 2}) == {"a": 20, "b": 10}
    assert keys(tree_map(lambda x, y: x + y, {"b": 1, "a": 2}, {"a": 10, "b": 20})) == ["a", "b"]
    _, treedef = tree_flatten({"b": 1, "a": 2})
    assert keys(tree_unflatten(treedef, [7, 8])) == ["a", "b"]
    assert keys(tree_unflatten(tree_structure({"z": 0, "y": 0}), [1, 2])) == ["y", "z"]
    nested = tree_map(lambda x: x, [{"z": {"y": 1, "x": 2}}, None, (3, {"b": 4, "a": 5})])
    assert keys(nested[0]["z"]) == ["x", "y"] and keys(nested[2][1]) == ["a", "b"]
    assert keys(tree_map(lambda x: x, _Box({"b": 1, "a": 2})).d) == ["a", "b"]
    dd = tree_map(lambda x: x, collections.defaultdict(list, {"b": 1, "a": 2}))
    assert type(dd) is collections.defaultdict and dd.default_factory is list
    assert keys(dd) == ["a", "b"]
    assert keys(funcgrad.jit(lambda x: {"b": x, "a": 2 * x})(1.0)) == ["a", "b"]
    assert keys(funcgrad.grad(lambda p: p["y"] * p["x"])({"y": 2.0, "x": 3.0})) == ["x", "y"]
    assert keys(funcgrad.vmap(lambda x: {"b": x, "a": 2 * x})(fnp.ones(2))) == ["a", "b"]


def test_ordered_dict_keeps_insertion_order():
    tree = collections.OrderedDict([("c", 3), ("a", 1)])
    leaves, treedef = tree_flatten(tree)
    assert leaves == [3, 1]
    out = tree_unflatten(treedef, leaves)
    assert type(out) is collections.OrderedDict and list(out) == ["c", "a"]


def test_none_is_a_node_without_children():
    leaves, treedef = tree_flatten([1, None, (None, 2)])
    assert leaves == [1, 2]
    assert treedef.num_leaves == 2
    assert tree_unflatten(treedef, [5, 6]) == [5, None, (None, 6)]
    assert tree_leaves(None) == []
    assert tree_map(lambda x: x + 1, None) is None


def test_namedtuple_round_trip():
    tree = Point(x=1, y=[2, 3])
    leaves, treedef = tree_flatten(tree)
    assert leaves == [1, 2, 3]
    out = tree_unflatten(treedef, [4, 5, 6])
    assert type(out) is Point and out == Point(4, [5, 6])
    assert tree_structure(Point(1, 2)) != tree_structure((1, 2))


def test_nested_containers_round_trip():
    tree = {"layers": [{"w": 1, "b": 2}, {"w": 3, "b": (4, None)}],
            "opt": Point(5, collections.OrderedDict(z=6, y=7)), "step": 8}
    leaves, treedef = tree_flatten(tree)
    assert leaves == [2, 1, 4, 3, 5, 6, 7, 8]
    assert tree_unflatten(treedef, leaves) == tree
    assert tree_map(lambda v: v, tree) == tree


def test_leaves_are_unregistered_objects():
    a, b = np.ones(3), np.float32(2.0)
    leaves = tree_leaves({"a": a, "b": b, "s": "text", "n": 3})
    assert leaves[0] is a and leaves[1] is b and leaves[2:] == [3, "text"]
    assert tree_structure(a).is_leaf()
    assert tree_leaves(a)[0] is a


def test_empty_containers():
    for tree in [(), [], {}, [(), {}], Point((), [])]:
        leaves, treedef = tree_flatten(tree)
        assert leaves == [] and tree_unflatten(treedef, []) == tree


def test_unflatten_wrong_leaf_count_raises():
    _, treedef = tree_flatten([1, 2])
    with pytest.raises(ValueError):
        tree_unflatten(treedef, [1])


def test_treedef_is_hashable_for_caches():
    cache = {tree_structure({"w": 1, "b": [2]}): "hit"}
    assert cache[tree_structure({"b": [0.5], "w": np.zeros(2)})] == "hit"
    assert tree_structure([1, 2]) != tree_structure([1, [2]])


def test_is_leaf_stops_descent():
    tree = {"a": (1, 2), "b": [(3, 4), 5]}
    leaves = tree_leaves(tree, is_leaf=lambda x: isinstance(x, tuple))
    assert leaves == [(1, 2), (3, 4), 5]
    out = tree_map(lambda t: sum(t) if isinstance(t, tuple) else t, tree,
                   is_leaf=lambda x: isinstance(x, tuple))
    assert out == {"a": 3, "b": [7, 5]}
    leaves, treedef = tree_flatten(tree, is_leaf=lambda x: isinstance(x, tuple))
    assert tree_unflatten(treedef, leaves) == tree


def test_is_leaf_can_treat_none_as_leaf():
    leaves = tree_leaves([1, None], is_leaf=lambda x: x is None)
    assert leaves == [1, None]


# --- tree_map and friends -----------------------------------------------------------------------


def test_tree_map_several_trees():
    out = tree_map(lambda a, b, c: a + b * c, [1, {"k": 2}], [10, {"k": 20}], [2, {"k": 3}])
    assert out == [21, {"k": 62}]


def test_tree_map_rest_may_be_deeper_where_first_has_leaves():
    out = tree_map(lambda x, sub: (x, sub), [1, 2], [[3, 4], {"k": 5}])
    assert out == [(1, [3, 4]), (2, {"k": 5})]


def test_tree_map_arrays():
    params = {"w": np.ones((2, 2)), "b": np.zeros(2)}
    grads = {"w": np.full((2, 2), 0.5), "b": np.ones(2)}
    new = tree_map(lambda p, g: p - 0.1 * g, params, grads)
    np.testing.assert_allclose(new["w"], 0.95)
    np.testing.assert_allclose(new["b"], -0.1)


def test_tree_map_does_not_hide_errors_from_f():
    def f(x, y):
        raise ValueError("from f")

    with pytest.raises(ValueError, match="^from f$"):
        tree_map(f, [1], [2])


def test_tree_reduce_and_tree_all():
    assert tree_reduce(lambda acc, x: acc + x, {"a": 1, "b": [2, 3]}) == 6
    assert tree_reduce(lambda acc, x: acc + x, {"a": 1, "b": [2, 3]}, 10) == 16
    assert tree_reduce(max, [], -1) == -1
    with pytest.raises(TypeError):
        tree_reduce(max, [])
    assert tree_reduce(lambda acc, x: acc + [x], [(1, 2), 3], [],
                       is_leaf=lambda x: isinstance(x, tuple)) == [(1, 2), 3]
    assert tree_all({"a": True, "b": [1, None]})
    assert not tree_all([True, (0,)])
    assert tree_all([])


# --- structure mismatches -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "left, right, message",
    [
        ({"a": 0, "b": [1, [2, 3]]}, {"a": 0, "b": [1, [2, 3, 4]]},
         "tree_map: structures differ at ['b'][1]: list of 2 vs list of 3"),
        ({"b": [1, 2]}, {"b": (1, 2)},
         "tree_map: structures differ at ['b']: list of 2 vs tuple of 2"),
        ({"a": 1}, {"b": 1},
         "tree_map: structures differ at the root: dict with keys ['a'] vs dict with keys ['b']"),
        (Point(1, 2), (1, 2), "tree_map: structures differ at the root: Point of 2 vs tuple of 2"),
        ([Point(1, [1])], [Point(1, [1, 2])],
         "tree_map: structures differ at [0].y: list of 1 vs list of 2"),
        ([None], [1], "tree_map: structures differ at [0]: None vs a leaf of type int"),
        ([1, [2]], [1, 3], "tree_map: structures differ at [1]: list of 1 vs a leaf of type int"),
        ([Linear([1], 0)], [Linear([1, 2], 0)],
         "tree_map: structures differ at [0].w: list of 1 vs list of 2"),
        ({"k": Box(1, [2], "p")}, {"k": Box(1, [2, 3], "p")},
         "tree_map: structures differ at ['k'][<flat index 1>]: list of 1 vs list of 2"),
    ],
)
def test_tree_map_mismatch_names_the_path(left, right, message):
    with pytest.raises(ValueError) as info:
        tree_map(lambda a, b: a, left, right)
    assert str(info.value) == message


def test_mismatch_in_static_data_is_reported():
    with pytest.raises(ValueError, match=r"structures differ at \[0\]: .*relu.* vs .*tanh"):
        tree_map(lambda a, b: a, [Linear(1, 2)], [Linear(1, 2, "tanh")])


def test_mismatch_names_the_argument_among_several():
    with pytest.raises(ValueError, match=r"^tree_map: structures differ at \['a'\] \(argument 3\)"):
        tree_map(lambda a, b, c: a, {"a": [1]}, {"a": [1]}, {"a": (1,)})


def test_tree_map_with_path_mismatch_message():
    with pytest.raises(ValueError, match=r"^tree_map_with_path: structures differ at \[1\]"):
        tree_map_with_path(lambda p, a, b: a, [1, [2]], [1, [2, 3]])


# --- custom nodes -------------------------------------------------------------------------------


def test_register_pytree_node_round_trip():
    tree = [Box(1, (2, 3), "first"), Box(None, 4, "second")]
    leaves, treedef = tree_flatten(tree)
    assert leaves == [1, 2, 3, 4]
    assert tree_unflatten(treedef, leaves) == tree
    assert tree_map(lambda x: x * 10, tree) == [Box(10, (20, 30), "first"),
                                                 Box(None, 40, "second")]
    assert tree_structure(Box(1, 2, "p")) != tree_structure(Box(1, 2, "q"))


def test_register_pytree_node_twice_raises():
    with pytest.raises(ValueError):
        register_pytree_node(Box, lambda b: ((), None), lambda aux, ch: Box(0, 0, aux))


def test_register_pytree_node_class():
    out = tree_map(lambda v: v + 1, {"s": Scaled(1.0, 3)})
    assert isinstance(out["s"], Scaled) and out["s"].value == 2.0 and out["s"].scale == 3
    assert tree_leaves(Scaled([1, 2], "meta")) == [1, 2]


def test_registrations_stay_in_funcgrad_namespace():
    box = Box(1, 2, "p")
    assert optree.tree_leaves(box) == [box]  # optree's global registry does not know Box
    assert tree_leaves(box) == [1, 2]


def test_register_dataclass_decorator_static_fields():
    layer = Linear(w=np.ones(2), b=0.5, act="tanh")
    leaves, treedef = tree_flatten(layer)
    assert len(leaves) == 2 and leaves[1] == 0.5
    out = tree_unflatten(treedef, [1, 2])
    assert out == Linear(1, 2, "tanh")
    assert tree_structure(Linear(1, 2)) != tree_structure(Linear(1, 2, "tanh"))
    assert tree_structure(Linear(1, 2)) == tree_structure(Linear(3, 4))
    assert tree_map(lambda x: x * 2, Linear(1.0, [2.0])) == Linear(2.0, [4.0])


def test_register_dataclass_explicit_fields_and_drop():
    tree = Frozen(params={"w": 1}, steps=7, cache="ignored")
    leaves, treedef = tree_flatten(tree)
    assert leaves == [1]
    assert tree_unflatten(treedef, [2]) == Frozen(params={"w": 2}, steps=7)
    out = tree_map(lambda u: u + 1, Plain([1, 2], "n"))
    assert isinstance(out, Plain) and out.u == [2, 3] and out.name == "n"


def test_register_dataclass_checks_fields():
    @dataclasses.dataclass
    class Two:
        a: int
        b: int

    with pytest.raises(ValueError, match="missing \\['b'\\]"):
        register_dataclass(Two, data_fields=["a"], meta_fields=[])
    with pytest.raises(TypeError):
        register_dataclass(Two, data_fields=["a", "b"])
    with pytest.raises(TypeError, match="not a dataclass"):
        register_dataclass(Plain)


def test_register_dataclass_skips_init_false_fields():
    @register_dataclass
    @dataclasses.dataclass
    class WithDerived:
        x: typing.Any
        twice: typing.Any = dataclasses.field(init=False)

        def __post_init__(self):
            self.twice = 2 * self.x

    leaves, treedef = tree_flatten(WithDerived(3))
    assert leaves == [3]
    assert tree_unflatten(treedef, [5]).twice == 10


# --- key paths ----------------------------------------------------------------------------------


def test_tree_flatten_with_path():
    tree = {"b": [1, Point(2, 3)], "a": None, "d": Linear(4, 5),
            "c": collections.OrderedDict(z=6), "e": Box(7, 8, "p")}
    pairs, treedef = tree_flatten_with_path(tree)
    assert [keystr(p) for p, _ in pairs] == [
        "['b'][0]", "['b'][1].x", "['b'][1].y", "['c']['z']", "['d'].w", "['d'].b",
        "['e'][<flat index 0>]", "['e'][<flat index 1>]"]
    assert [leaf for _, leaf in pairs] == tree_leaves(tree)
    assert treedef == tree_structure(tree)
    assert pairs[1][0] == (DictKey("b"), SequenceKey(1), GetAttrKey("x"))
    assert pairs[6][0][-1] == FlattenedIndexKey(0)


def test_tree_map_with_path():
    out = tree_map_with_path(lambda p, x, y: (keystr(p), x + y), {"a": [1]}, {"a": [2]})
    assert out == {"a": [("['a'][0]", 3)]}


# --- property test ------------------------------------------------------------------------------

_leaf = st.integers(-5, 5)
_trees = st.recursive(
    _leaf | st.none(),
    lambda inner: st.lists(inner, max_size=3)
    | st.tuples(inner, inner)
    | st.dictionaries(st.sampled_from("abcd"), inner, max_size=3)
    | st.builds(Point, inner, inner),
    max_leaves=12,
)


@given(_trees)
def test_flatten_unflatten_round_trip(tree):
    leaves, treedef = tree_flatten(tree)
    assert treedef.num_leaves == len(leaves)
    assert tree_unflatten(treedef, leaves) == tree
    assert tree_map(lambda x: x, tree) == tree
    assert tree_leaves(tree_map(lambda x: x + 1, tree)) == [x + 1 for x in leaves]
    assert [leaf for _, leaf in tree_flatten_with_path(tree)[0]] == leaves


def test_docstring_examples():
    result = doctest.testmod(tu, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 10 and result.failed == 0
