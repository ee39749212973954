"""Top-level JAX names: enable_x64 / debug_nans as context managers, float0, closure_convert,
tree.static."""
from __future__ import annotations

import dataclasses
import doctest

import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad.api import config_states as api_config


def test_doctests():
    for mod in (api_config, funcgrad.tree):
        assert doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE).failed == 0


def test_enable_x64_context_restores():
    assert funcgrad.enable_x64.value is True
    with funcgrad.enable_x64(False):
        assert not funcgrad.config.enable_x64
        assert fnp.asarray(np.ones(2)).dtype == np.float32
        with funcgrad.enable_x64(True):
            assert fnp.asarray(np.ones(2)).dtype == np.float64
        assert not funcgrad.enable_x64.value
    assert funcgrad.config.enable_x64
    with pytest.raises(RuntimeError), funcgrad.enable_x64(False):
        raise RuntimeError
    assert funcgrad.enable_x64.value


def test_debug_nans_context():
    f = funcgrad.jit(lambda x: fnp.log(x))
    with funcgrad.debug_nans(True):
        assert funcgrad.config.debug_nans
        with pytest.raises(Exception, match="(?i)nan"):
            f(np.array([-1.0]))
    assert not funcgrad.debug_nans.value
    assert np.isnan(np.asarray(f(np.array([-1.0])))).all()


def test_float0():
    assert np.zeros((2,), funcgrad.float0).nbytes == 0
    jax = pytest.importorskip("jax")
    assert funcgrad.float0 == jax.float0


def test_tree_static_field():
    @funcgrad.tree_util.register_dataclass
    @dataclasses.dataclass
    class Op:
        x: object
        y: object
        op: str = funcgrad.tree.static(default="add", metadata={"doc": "kept"})

    m = Op(1.0, 2.0)
    leaves, treedef = funcgrad.tree.flatten(m)
    assert leaves == [1.0, 2.0]
    assert funcgrad.tree.unflatten(treedef, [3.0, 4.0]) == Op(3.0, 4.0, "add")
    assert funcgrad.tree.structure(Op(1.0, 2.0, "mul")) != treedef
    f = dataclasses.fields(Op)[2]
    assert f.metadata["static"] and f.metadata["doc"] == "kept"
