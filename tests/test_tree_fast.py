"""funcgrad.compile.tree_fast: straight-line flatten/unflatten agree with optree's on drawn pytrees."""
from collections import OrderedDict
from typing import NamedTuple

from hypothesis import given
from hypothesis import strategies as st

from funcgrad.compile import tree_fast
from funcgrad.tree_util import tree_flatten, tree_unflatten


class Pair(NamedTuple):
    a: object
    b: object


class Empty(NamedTuple):
    pass


_leaf = st.integers(0, 9)
_trees = st.recursive(
    _leaf | st.none() | st.just(Empty()),
    lambda kids: (st.lists(kids, max_size=3) | st.tuples(kids) | st.tuples(kids, kids)
                  | st.builds(Pair, kids, kids)
                  | st.dictionaries(st.sampled_from("abcd") | st.integers(0, 3), kids,
                                    max_size=3)),
    max_leaves=10)


def _same(a, b):
    """Equal with the same container types and dict key order all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@given(_trees)
def test_getter_and_builder_agree_with_optree(tree):
    leaves, spec = tree_flatten(tree)
    get, build = tree_fast.leaf_getter(spec, int), tree_fast.builder(spec)
    assert get is not None and build is not None
    assert get(tree) == leaves
    new = [("leaf", i) for i in range(len(leaves))]
    assert _same(build(new), tree_unflatten(spec, new))


@given(_trees, _trees)
def test_getter_refuses_another_structure(tree, other):
    _, spec = tree_flatten(tree)
    leaves, spec2 = tree_flatten(other)
    got = tree_fast.leaf_getter(spec, int)(other)
    if spec2 == spec:
        assert got == leaves
    else:
        assert got is None


def test_edge_structures():
    spec = tree_flatten({"w": 1, "b": [2, None]})[1]
    get = tree_fast.leaf_getter(spec, int)
    assert get({"b": [3, None], "w": 4}) == [3, 4]          # dict order does not matter
    assert get({"b": [3, 5], "w": 4}) is None               # None was a node, not a leaf
    assert get({"b": (3, None), "w": 4}) is None            # a tuple where a list was
    assert get({"b": [3, None], "w": 4, "c": 0}) is None    # an extra key
    assert get({"b": [3, None], "x": 4}) is None            # another key
    assert get(OrderedDict(b=[3, None], w=4)) is None       # another dict type
    assert get([1]) is None
    unchecked = tree_fast.leaf_getter(spec, None)     # leaves left to the caller to check
    assert unchecked({"b": [[3], None], "w": 4.5}) == [[3], 4.5]
    assert get({"b": [[3], None], "w": 4}) is None          # a container at a leaf
    assert get({"b": [3.0, None], "w": 4}) is None          # another leaf type
    assert tree_fast.builder(tree_flatten(())[1])([]) == ()
    assert tree_fast.builder(tree_flatten((7,))[1])([8]) == (8,)


def test_unsupported_nodes_give_none():
    spec = tree_flatten(OrderedDict(a=1))[1]
    assert tree_fast.leaf_getter(spec, int) is None and tree_fast.builder(spec) is None
    spec = tree_flatten({(1, 2): 3})[1]
    assert tree_fast.leaf_getter(spec, int) is None and tree_fast.builder(spec) is None


def test_docstring_examples():
    import doctest
    result = doctest.testmod(tree_fast, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 2 and result.failed == 0
