"""The rest of JAX's tree_util: Partial, register_static, the keyed registrations, one-level
views, treedef helpers, tree_transpose / tree_broadcast / tree_reduce_associative. Expected
values are JAX 0.10.2's for the same calls."""
from __future__ import annotations

import functools

import numpy as np
import pytest

import funcgrad as jax
import funcgrad.numpy as jnp
from funcgrad import tree_util as tu


def test_partial_is_a_pytree_that_jit_accepts():
    p = tu.Partial(lambda a, b: a + b, 1.0)
    assert tu.tree_leaves(p) == [1.0]
    assert float(jax.jit(lambda f, x: f(x))(p, 2.0)) == 3.0       # JAX: 3.0
    doubled = tu.tree_map(lambda v: v * 2, p)
    assert isinstance(doubled, tu.Partial) and doubled(1.0) == 3.0
    nested = tu.Partial(tu.Partial(jnp.add, 1.0))
    assert nested.func is jnp.add and nested.args == (1.0,)
    assert isinstance(p, functools.partial)
    with_kw = tu.Partial(jnp.clip, a_min=0.0)
    assert tu.tree_leaves(with_kw) == [0.0]
    assert tu.tree_structure(tu.Partial(jnp.add, 1.0)) == tu.tree_structure(
        tu.Partial(jnp.add, 5.0))


def test_one_level_views_and_treedef_helpers():
    assert tu.all_leaves([1, 2]) and not tu.all_leaves([1, [2]])
    assert tu.all_leaves([np.ones(2), None], is_leaf=lambda x: x is None)
    assert tu.is_tree_node(list) and tu.is_tree_node(type(None)) and not tu.is_tree_node(int)
    assert tu.flatten_one_level({"b": [1], "a": 2}) == ([2, [1]], ("a", "b"))
    keyed, aux = tu.flatten_one_level_with_keys({"b": [1], "a": 2})
    assert keyed == [(tu.DictKey("a"), 2), (tu.DictKey("b"), [1])] and aux == ("a", "b")
    with pytest.raises(ValueError, match="can't tree-flatten type"):
        tu.flatten_one_level(1)
    s = tu.tree_structure(((1, 2), [3]))
    assert tu.treedef_children(s) == [tu.tree_structure((0, 0)), tu.tree_structure([0])]
    assert tu.treedef_is_leaf(tu.tree_structure(1))
    assert not tu.treedef_is_leaf(tu.tree_structure([1]))
    both = tu.treedef_tuple([tu.tree_structure(1), tu.tree_structure([1, 2])])
    assert both == tu.tree_structure((0, [0, 0]))
    paths = tu.tree_leaves_with_path({"a": [1]})
    assert paths == [((tu.DictKey("a"), tu.SequenceKey(0)), 1)]


def test_register_static_and_keyed_registrations():
    @tu.register_static
    class Mode:
        def __init__(self, name):
            self.name = name

        def __hash__(self):
            return hash(self.name)

        def __eq__(self, other):
            return isinstance(other, Mode) and other.name == self.name

    assert tu.tree_leaves([Mode("a"), 2]) == [2]
    assert tu.tree_structure(Mode("a")) != tu.tree_structure(Mode("b"))

    class K:
        def __init__(self, a, b):
            self.a, self.b = a, b

    tu.register_pytree_with_keys(
        K, lambda k: (((tu.GetAttrKey("a"), k.a), (tu.GetAttrKey("b"), k.b)), None),
        lambda aux, ch: K(*ch))
    pairs, _ = tu.tree_flatten_with_path(K(1, [2]))
    assert pairs == [((tu.GetAttrKey("a"),), 1), ((tu.GetAttrKey("b"), tu.SequenceKey(0)), 2)]
    assert tu.tree_map(lambda v: v * 3, K(1, [2])).b == [6]


def test_transpose_broadcast_reduce_associative():
    outer, inner = tu.tree_structure([0, 0]), tu.tree_structure((0, 0))
    assert tu.tree_transpose(outer, inner, [(1, 2), (3, 4)]) == ([1, 3], [2, 4])
    assert tu.tree_transpose(outer, None, [(1, 2), (3, 4)]) == ([1, 3], [2, 4])
    with pytest.raises(TypeError, match="inner tree 1 has structure"):
        tu.tree_transpose(outer, inner, [(1, 2), [3, 4]])
    assert tu.tree_broadcast([1, 2], [(0, 0), {"a": 0}]) == [(1, 1), {"a": 2}]
    assert tu.tree_reduce_associative(lambda a, b: a + b, {"x": 1, "y": [2, 3]}) == 6
    assert tu.tree_reduce_associative(lambda a, b: a + b, [], identity=0) == 0
    with pytest.raises(TypeError, match="needs an identity"):
        tu.tree_reduce_associative(lambda a, b: a + b, [])
    assert jax.tree.transpose is tu.tree_transpose


def test_docstring_examples():
    import doctest

    from funcgrad import tree_util_nodes
    result = doctest.testmod(tree_util_nodes, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 5 and result.failed == 0
